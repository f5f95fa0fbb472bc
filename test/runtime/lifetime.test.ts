/**
 * Runtime processes end with Outpost, however it ends: a `kill -9` of `outpost serve` while a
 * script instance is live leaves no workerd behind (the kernel's parent-death signal).
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { dropSchema } from '../../src/core/storage/db.ts';
import { spawnServe, waitExit, type ServeProcess } from '../support/process.ts';
import { sqlitePassOnly, testDatabase } from '../support/server.ts';

const TOKEN = 'outpost-lifetime-test-token-0123456789';
const ACCOUNT = 'c0ffee00c0ffee00c0ffee00c0ffee00';
const dataDir = mkdtempSync(join(tmpdir(), 'outpost-lifetime-'));
const pg = testDatabase();
let proc: ServeProcess | undefined;
const leftovers = new Set<number>();

/** `comm` and state of a live process, or undefined once it is gone (a zombie counts as gone). */
function stat(pid: number): { comm: string; state: string } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const close = text.lastIndexOf(')');
    const state = text[close + 2];
    if (state === 'Z' || state === 'X') return undefined;
    return { comm: text.slice(text.indexOf('(') + 1, close), state };
  } catch {
    return undefined;
  }
}

function childrenOf(pid: number): number[] {
  const out: number[] = [];
  let tasks: string[] = [];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const task of tasks) {
    try {
      const text = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8');
      out.push(...text.split(/\s+/).filter(Boolean).map(Number));
    } catch {
      // task ended meanwhile
    }
  }
  return out;
}

afterAll(async () => {
  if (proc && proc.child.exitCode === null && proc.child.signalCode === null) {
    proc.child.kill('SIGKILL');
    await waitExit(proc.child);
  }
  // Whatever survived a failed run is ended here, by pid, so it does not outlive the test.
  for (const pid of leftovers) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  if (pg.url && pg.schema) await dropSchema(pg.url, pg.schema);
  rmSync(dataDir, { recursive: true, force: true });
});

it.skipIf(sqlitePassOnly('process lifetime does not depend on the database'))('a kill -9 of outpost serve ends the workerd processes of its live script instances', async () => {
  proc = await spawnServe(
    [
      '--api-port', '0', '--edge-port', '0', '--dns-port', '0', '--turn-port', '0',
      '--data-dir', dataDir,
      ...(pg.url ? ['--database', pg.url, '--database-schema', pg.schema!] : []),
    ],
    { OUTPOST_API_TOKEN: TOKEN, OUTPOST_ACCOUNT_ID: ACCOUNT },
    60_000,
  );
  const base = `${proc.apiUrl}/client/v4`;
  const form = new FormData();
  form.append('metadata', new Blob([JSON.stringify({ main_module: 'index.js', compatibility_date: '2025-01-01' })], { type: 'application/json' }));
  form.append(
    'index.js',
    new Blob(["export default { async fetch() { return new Response('alive'); } };"], { type: 'application/javascript+module' }),
    'index.js',
  );
  const up = await fetch(`${base}/accounts/${ACCOUNT}/workers/scripts/lifetime`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${TOKEN}` },
    body: form,
  });
  expect(up.status, await up.text()).toBe(200);
  const hit = await fetch(`${base}/_outpost/accounts/${ACCOUNT}/workers/scripts/lifetime/invoke/`, {
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  expect(await hit.text()).toBe('alive');

  const runtimes = childrenOf(proc.child.pid!).filter((pid) => stat(pid)?.comm.startsWith('workerd'));
  expect(runtimes.length, 'a live workerd child of outpost serve').toBeGreaterThan(0);
  for (const pid of runtimes) leftovers.add(pid);

  proc.child.kill('SIGKILL');
  await waitExit(proc.child);
  const deadline = Date.now() + 10_000;
  let alive = runtimes.filter((pid) => stat(pid));
  while (alive.length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    alive = runtimes.filter((pid) => stat(pid));
  }
  expect(alive, 'workerd processes still running after the kill -9').toEqual([]);
}, 90_000);
