/** The `outpost` command: help, serve with the listener table, graceful stop, first-start seeding. */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../src/core/storage/db.ts';
import { sqlitePassOnly, testDatabase } from '../support/server.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/outpost.js');
const ACCOUNT_ID = '0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f';

interface Proc {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  /** Resolves with the exit code (or the signal name). */
  exited: Promise<number | string>;
}

const children: ChildProcess[] = [];
const dirs: string[] = [];
const schemas: { url: string; schema: string }[] = [];

afterAll(async () => {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  for (const { url, schema } of schemas) await dropSchema(url, schema);
});

/** The environment without any OUTPOST_* setting of the caller. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('OUTPOST_')) env[k] = v;
  return { ...env, ...extra };
}

function run(args: string[], env: NodeJS.ProcessEnv): Proc {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | string>((done) =>
    child.on('exit', (code, signal) => done(code ?? signal ?? -1)),
  );
  return { child, stdout: () => out, stderr: () => err, exited };
}

async function waitFor<T>(
  what: string,
  probe: () => T | undefined,
  proc: Proc,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== undefined) return value;
    if (proc.child.exitCode !== null)
      throw new Error(
        `process exited (${proc.child.exitCode}) before ${what}:\n${proc.stdout()}\n${proc.stderr()}`,
      );
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}:\n${proc.stdout()}\n${proc.stderr()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  return Promise.race([
    p,
    new Promise<T>((_, reject) =>
      setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms),
    ),
  ]);
}

/** Data-store flags: the test PostgreSQL database (own schema) when configured, else SQLite in the data dir. */
function storeArgs(pg: { url?: string; schema?: string }): string[] {
  if (!pg.url || !pg.schema) return [];
  schemas.push({ url: pg.url, schema: pg.schema });
  return ['--database', pg.url, '--database-schema', pg.schema];
}

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-cli-'));
  dirs.push(dir);
  return dir;
}

/** Starts `outpost serve`, waits for the listener table, returns the API base URL. */
async function serve(args: string[], env: NodeJS.ProcessEnv): Promise<{ proc: Proc; api: string }> {
  const proc = run(['serve', '--api-port', '0', '--edge-port', '0', '--turn-port', '0', '--dns-port', '0', ...args], env);
  const api = await waitFor(
    'the listener table',
    () => {
      const out = proc.stdout();
      if (!/Official client:/.test(out)) return undefined;
      return /management API\s+http\s+(http:\/\/\S+)/.exec(out)?.[1];
    },
    proc,
  );
  return { proc, api };
}

async function stop(proc: Proc): Promise<number | string> {
  proc.child.kill('SIGTERM');
  return within(8_000, proc.exited, 'exit after SIGTERM');
}

describe.skipIf(sqlitePassOnly('help and flag errors never open a database'))('outpost --help', () => {
  it('exits 0 and documents the main flags', async () => {
    const proc = run(['--help'], cleanEnv());
    expect(await within(20_000, proc.exited, 'help')).toBe(0);
    const out = proc.stdout();
    for (const flag of ['--api-port', '--edge-port', '--data-dir', '--database'])
      expect(out).toContain(flag);
    expect(out).toContain('outpost serve');
  });

  it('rejects an unknown flag with exit 1 and a message', async () => {
    const proc = run(['serve', '--api-prot', '0', '--data-dir', tempDir()], cleanEnv());
    expect(await within(20_000, proc.exited, 'unknown flag')).toBe(1);
    expect(proc.stderr()).toContain('unknown flag --api-prot');
  });

  it('rejects an invalid port with exit 1', async () => {
    const proc = run(['serve', '--api-port', '70000', '--data-dir', tempDir()], cleanEnv());
    expect(await within(20_000, proc.exited, 'bad port')).toBe(1);
    expect(proc.stderr()).toMatch(/--api-port/);
  });

  it('rejects an unknown command', async () => {
    const proc = run(['launch'], cleanEnv());
    expect(await within(20_000, proc.exited, 'unknown command')).not.toBe(0);
    expect(proc.stderr()).toContain('unknown command');
  });
});

describe('outpost serve', () => {
  it('prints the listener table, serves requests with the seeded token and account, and stops cleanly on SIGTERM', async () => {
    const dir = tempDir();
    const token = 'cli-test-root-token-0123456789abcdef';
    const { proc, api } = await serve(
      ['--data-dir', dir, ...storeArgs(testDatabase())],
      cleanEnv({ OUTPOST_API_TOKEN: token, OUTPOST_ACCOUNT_ID: ACCOUNT_ID }),
    );
    const out = proc.stdout();
    expect(api).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/client\/v4$/);
    expect(out).toMatch(/LISTENER\s+PROTOCOL\s+ADDRESS/);
    expect(out).toMatch(/\ndata\s+(sqlite|postgresql)\s+\S+/);
    expect(out).toContain(`Account id: ${ACCOUNT_ID}`);
    // A seeded token is never echoed.
    expect(out).not.toContain('Root API token');
    expect(out).not.toContain(token);

    const res = await fetch(`${api}/accounts/${ACCOUNT_ID}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { result: { id: string } }).result.id).toBe(ACCOUNT_ID);
    const zone = await fetch(`${api}/zones`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'cli.example', account: { id: ACCOUNT_ID } }),
    });
    expect(zone.status).toBe(200);

    expect(await stop(proc)).toBe(0);
    // The port is closed afterwards.
    await expect(fetch(`${api}/zones`)).rejects.toThrow();
  });

  it('a first start without OUTPOST_API_TOKEN prints a root token once; a restart does not, and the token keeps working', async () => {
    const dir = tempDir();
    const store = storeArgs(testDatabase());
    const env = cleanEnv();

    const first = await serve(['--data-dir', dir, ...store], env);
    const token = /Root API token \(shown once, keep it\): (\S+)/.exec(first.proc.stdout())?.[1];
    expect(token).toBeTruthy();
    const accountId = /Account id: ([0-9a-f]{32})/.exec(first.proc.stdout())?.[1];
    expect(accountId).toMatch(/^[0-9a-f]{32}$/);
    expect(first.proc.stdout()).toMatch(/X-Auth-Key \(shown once\): \S+/);
    const created = await fetch(`${first.api}/zones`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'survives-restart.example', account: { id: accountId } }),
    });
    expect(created.status).toBe(200);
    expect(await stop(first.proc)).toBe(0);

    const second = await serve(['--data-dir', dir, ...store], env);
    expect(second.proc.stdout()).not.toContain('Root API token');
    expect(second.proc.stdout()).not.toContain(token!);
    expect(second.proc.stdout()).not.toContain('X-Auth-Key (shown once)');
    expect(second.proc.stdout()).toContain(`Account id: ${accountId}`);
    const res = await fetch(`${second.api}/zones?name=survives-restart.example`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { result: { name: string }[] };
    expect(body.result.map((z) => z.name)).toEqual(['survives-restart.example']);
    expect(await stop(second.proc)).toBe(0);
  });

  it('stops cleanly on SIGINT too', async () => {
    const { proc } = await serve(
      ['--data-dir', tempDir(), ...storeArgs(testDatabase())],
      cleanEnv({ OUTPOST_API_TOKEN: 'sigint-token-0123456789' }),
    );
    proc.child.kill('SIGINT');
    expect(await within(8_000, proc.exited, 'exit after SIGINT')).toBe(0);
  });
});
