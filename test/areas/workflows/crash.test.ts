/**
 * Durability of workflow instances across `kill -9` of the Outpost process: a step whose result was
 * recorded never runs again, the step in flight at the kill runs again, timers that fell due while
 * the process was down fire on restart, and every instance finishes. Each step reports to a
 * counter in this process and returns the count it saw, so the final history can be checked
 * against the side effects: a recorded result must be the last execution of its step.
 * Runs on SQLite, or on PostgreSQL when OUTPOST_TEST_DATABASE is set.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../../src/core/storage/db.ts';
import { spawnServe, waitExit, type ServeProcess } from '../../support/process.ts';
import { testDatabase } from '../../support/server.ts';
import { sleep, startCounter, type Counter } from './helpers.ts';

const TOKEN = 'wf-crash-root-token-0123456789abcdef';
const ACCOUNT = 'c0ffee00c0ffee00c0ffee00c0ffee01';
const dataDir = mkdtempSync(join(tmpdir(), 'outpost-wf-crash-'));
const pg = testDatabase();
const args = [
  '--api-port',
  '0',
  '--edge-port',
  '0',
  '--dns-port',
  '0',
  '--turn-port',
  '0',
  '--data-dir',
  dataDir,
  ...(pg.url ? ['--database', pg.url, '--database-schema', pg.schema!] : []),
];
const env = {
  OUTPOST_API_TOKEN: TOKEN,
  OUTPOST_ACCOUNT_ID: ACCOUNT,
  OUTPOST_WORKFLOWS_POLL_MS: '50',
};
let proc: ServeProcess | undefined;
let counter: Counter | undefined;
const spawned = new Set<number>();

/** Descendants of a process (the runtime's workerd processes), to clean up after a kill -9. */
function descendants(pid: number): number[] {
  const out: number[] = [];
  const walk = (p: number) => {
    let tasks: string[] = [];
    try {
      tasks = readdirSync(`/proc/${p}/task`);
    } catch {
      return;
    }
    for (const task of tasks) {
      let children = '';
      try {
        children = readFileSync(`/proc/${p}/task/${task}/children`, 'utf8');
      } catch {
        continue;
      }
      for (const c of children.split(/\s+/).filter(Boolean).map(Number)) {
        out.push(c);
        walk(c);
      }
    }
  };
  walk(pid);
  return out;
}

/** kill -9 of the server; runtime processes it started and left behind are ended too. */
async function crash(p: ServeProcess): Promise<void> {
  const children = descendants(p.child.pid!);
  p.child.kill('SIGKILL');
  await waitExit(p.child);
  for (const c of children) spawned.add(c);
  await reapOrphans();
}

async function reapOrphans(): Promise<void> {
  for (const pid of [...spawned]) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      spawned.delete(pid);
    }
  }
  await sleep(50);
}

afterAll(async () => {
  if (proc) await crash(proc);
  await counter?.close();
  if (pg.url && pg.schema) await dropSchema(pg.url, pg.schema);
  rmSync(dataDir, { recursive: true, force: true });
});

async function api(base: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${base}/client/v4${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as any };
}

const SOURCE = String.raw`
import { WorkflowEntrypoint } from 'cloudflare:workers';
const hit = async (p, key) => (await (await fetch(p.counter + '/hit/' + encodeURIComponent(key), { method: 'POST' })).json()).n;
export class Steps extends WorkflowEntrypoint {
  async run(event, step) {
    const p = event.payload;
    const seen = [];
    for (let i = 1; i <= p.steps; i++) {
      seen.push(await step.do('s' + i, async () => hit(p, event.instanceId + ':s' + i)));
      if (p.sleepAfter === i) await step.sleep('nap', p.sleep);
    }
    return seen;
  }
}
export default { async fetch() { return new Response('ok'); } };
`;

async function deploy(base: string) {
  const form = new FormData();
  form.append(
    'metadata',
    new Blob(
      [
        JSON.stringify({
          main_module: 'index.js',
          compatibility_date: '2025-01-01',
          bindings: [
            { type: 'workflow', name: 'STEPS', workflow_name: 'steps', class_name: 'Steps' },
          ],
        }),
      ],
      { type: 'application/json' },
    ),
  );
  form.append(
    'index.js',
    new Blob([SOURCE], { type: 'application/javascript+module' }),
    'index.js',
  );
  const res = await fetch(`${base}/client/v4/accounts/${ACCOUNT}/workers/scripts/crash-wf`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${TOKEN}` },
    body: form,
  });
  expect(res.status).toBe(200);
  const put = await api(base, 'PUT', `/accounts/${ACCOUNT}/workflows/steps`, {
    class_name: 'Steps',
    script_name: 'crash-wf',
  });
  expect(put.status).toBe(200);
}

async function waitAll(base: string, ids: string[], timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  const results = new Map<string, any>();
  while (results.size < ids.length) {
    for (const id of ids) {
      if (results.has(id)) continue;
      const r = await api(base, 'GET', `/accounts/${ACCOUNT}/workflows/steps/instances/${id}`);
      if (r.status === 200 && ['complete', 'errored', 'terminated'].includes(r.body.result.status))
        results.set(id, r.body.result);
    }
    if (Date.now() > deadline)
      throw new Error(`not finished: ${ids.filter((id) => !results.has(id)).join(', ')}`);
    await sleep(100);
  }
  return results;
}

describe('workflows across kill -9', () => {
  it('never re-runs a recorded step, re-runs the step in flight, and fires timers that fell due while down', async () => {
    let killAt: (() => void) | undefined;
    counter = await startCounter((key) => {
      if (key === 'a:s3' && killAt) {
        const k = killAt;
        killAt = undefined;
        k();
      }
    });
    proc = await spawnServe(args, env);
    await deploy(proc.apiUrl);
    let killed!: Promise<void>;
    const dead = new Promise<void>((resolve) => {
      killAt = () => {
        killed = crash(proc!).then(resolve);
      };
    });
    // b sleeps 2 s after its first step; a is killed while its third step is in flight.
    await api(proc.apiUrl, 'POST', `/accounts/${ACCOUNT}/workflows/steps/instances`, {
      id: 'b',
      params: { counter: counter.url, steps: 3, sleepAfter: 1, sleep: '2 seconds' },
    });
    while (counter.count('b:s1') < 1) await sleep(10);
    await sleep(300);
    await api(proc.apiUrl, 'POST', `/accounts/${ACCOUNT}/workflows/steps/instances`, {
      id: 'a',
      params: { counter: counter.url, steps: 6 },
    });
    await dead;
    await killed;
    // Down for longer than b's sleep.
    await sleep(2500);
    proc = await spawnServe(args, env);
    const results = await waitAll(proc.apiUrl, ['a', 'b']);
    const a = results.get('a');
    const b = results.get('b');
    expect(a.status).toBe('complete');
    expect(b.status).toBe('complete');
    expect(JSON.parse(a.output)).toEqual([1, 1, 2, 1, 1, 1]);
    expect(JSON.parse(b.output)).toEqual([1, 1, 1]);
    for (let i = 1; i <= 6; i++) expect(counter.count(`a:s${i}`)).toBe(i === 3 ? 2 : 1);
    for (let i = 1; i <= 3; i++) expect(counter.count(`b:s${i}`)).toBe(1);
    expect(b.steps.find((s: { type: string }) => s.type === 'sleep').finished).toBe(true);
  }, 90_000);

  it('keeps every recorded step across repeated kills at random moments', async () => {
    counter = counter ?? (await startCounter());
    const base = () => proc!.apiUrl;
    const ids = Array.from({ length: 12 }, (_, i) => `r${i}`);
    for (const id of ids) {
      const res = await api(base(), 'POST', `/accounts/${ACCOUNT}/workflows/steps/instances`, {
        id,
        params: { counter: counter.url, steps: 8, sleepAfter: 4, sleep: '300 milliseconds' },
      });
      expect(res.status).toBe(200);
    }
    for (let round = 0; round < 3; round++) {
      await sleep(150 + Math.floor(Math.random() * 400));
      await crash(proc!);
      proc = await spawnServe(args, env);
    }
    const results = await waitAll(base(), ids, 60_000);
    let reruns = 0;
    for (const id of ids) {
      const r = results.get(id);
      expect(r.status).toBe('complete');
      for (let i = 1; i <= 8; i++) {
        const recorded = JSON.parse(r.output)[i - 1];
        // The recorded result is the last execution of its step: nothing ran after it was recorded.
        expect(counter.count(`${id}:s${i}`)).toBe(recorded);
        reruns += recorded - 1;
      }
    }
    // Only steps in flight at a kill may run twice: at most one per instance and kill.
    expect(reruns).toBeLessThanOrEqual(ids.length * 3);
    const shut = proc!;
    proc = undefined;
    shut.child.kill('SIGTERM');
    // 0 after a graceful stop; 143 when the runtime library's own exit hook ends the process first.
    expect([0, 143]).toContain((await waitExit(shut.child, 15_000)).code);
    await reapOrphans();
  }, 120_000);
});
