import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Data-plane tests bind real ports and start peers; keep files in separate processes.
    pool: 'forks',
  },
});
