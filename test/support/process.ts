/** Runs `outpost serve` as a child process and reads its listener table. */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const BIN = fileURLToPath(new URL('../../bin/outpost.js', import.meta.url));

export interface ServeProcess {
  child: ChildProcess;
  apiUrl: string;
  stdout: () => string;
}

export async function spawnServe(args: string[], env: Record<string, string>, timeoutMs = 20_000): Promise<ServeProcess> {
  const child = spawn(process.execPath, [BIN, 'serve', ...args], {
    env: { ...process.env, OUTPOST_LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const apiUrl = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`outpost did not start within ${timeoutMs} ms:\n${out}`)), timeoutMs);
    const check = () => {
      const m = /management API\s+http\s+(http:\/\/\S+)\/client\/v4/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    child.stdout!.on('data', check);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`outpost exited with ${code}:\n${out}`));
    });
  });
  return { child, apiUrl, stdout: () => out };
}

export function waitExit(child: ChildProcess, timeoutMs = 10_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('process did not exit in time')), timeoutMs);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal });
    });
  });
}
