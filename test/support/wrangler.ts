/**
 * Runs the real `wrangler` CLI (npm `wrangler@4`) as a child process against a test server, with
 * only the three variables a user would set: its API base, a token and the account id.
 */
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import type { TestServer } from './server.ts';

const WRANGLER = resolve('node_modules/wrangler/bin/wrangler.js');

export interface WranglerRun {
  code: number;
  out: string;
}

/** `home` keeps wrangler's own state (login, caches) out of the real home directory. */
export function runWrangler(t: TestServer, home: string, cwd: string, args: string[], input?: string): Promise<WranglerRun> {
  return new Promise((done) => {
    const child = execFile(
      process.execPath,
      [WRANGLER, ...args],
      {
        cwd,
        timeout: 180_000,
        env: {
          PATH: process.env.PATH,
          HOME: home,
          CLOUDFLARE_API_BASE_URL: t.api,
          CLOUDFLARE_API_TOKEN: t.token,
          CLOUDFLARE_ACCOUNT_ID: t.accountId,
          WRANGLER_SEND_METRICS: 'false',
          // Its update check asks a package registry: point it at a closed loopback port.
          npm_config_registry: 'http://127.0.0.1:9/',
          CI: 'true',
          NO_COLOR: '1',
        },
      },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        done({ code, out: `${stdout}\n${stderr}` });
      },
    );
    child.stdin!.end(input);
  });
}
