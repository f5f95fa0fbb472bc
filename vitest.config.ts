import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Data-plane tests bind real ports and start peers: files run in a child process, not a thread.
    pool: 'forks',
    // One child runs file after file with its module cache kept: loading the server's module graph
    // again for each of ~120 files cost about four minutes per backend. Every file starts and stops
    // its own servers, so nothing else carries over; a file must leave no process state behind.
    isolate: false,
  },
});
