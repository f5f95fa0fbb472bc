/**
 * Instance control through REST and the binding: pause, resume, terminate and restart from each
 * status, per-workflow concurrency with `queued` (sleeping instances hold no slot), createBatch
 * idempotence, duplicate and invalid ids, non-serialisable params, and retention expiry on the
 * test clock.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { manualClock } from '../../../src/core/clock.ts';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { SCRIPT, WORKFLOWS } from './fixture.ts';
import {
  callScript,
  create,
  deployWorkflow,
  instance,
  outputOf,
  sleep,
  startCounter,
  until,
  waitStatus,
  type Counter,
} from './helpers.ts';

const clock = manualClock(new Date('2026-04-01T00:00:00.000Z'));
const SCRIPT_NAME = 'control-wf';
let t: TestServer;
let counter: Counter;
let seq = 0;
const uid = (p: string) => `${p}-${++seq}`;
const P = (extra: Record<string, unknown> = {}) => ({ counter: counter.url, ...extra });
const base = () => `/accounts/${t.accountId}/workflows`;

beforeAll(async () => {
  counter = await startCounter();
  t = await startTestServer({ workflowsPollMs: 20 }, { clock });
  await deployWorkflow(t, SCRIPT_NAME, SCRIPT, WORKFLOWS);
}, 60_000);

afterAll(async () => {
  await t?.stop();
  await counter?.close();
});

async function patch(wf: string, id: string, status: string, extra: Record<string, unknown> = {}) {
  return t.call('PATCH', `${base()}/${wf}/instances/${id}/status`, { status, ...extra });
}

async function setConcurrency(limit: number | undefined) {
  const res = await t.call('PUT', `${base()}/gated`, {
    class_name: 'Gated',
    script_name: SCRIPT_NAME,
    concurrency: limit ? { limit } : { limit: 10_000 },
  });
  expect(res.status).toBe(200);
}

/** A gated instance whose first step is held in flight. */
async function heldInstance(extra: Record<string, unknown> = {}) {
  const id = uid('gated');
  counter.hold(`${id}:gate`);
  await create(t, 'gated', { id, params: P(extra) });
  await until(`${id} to reach its gate`, async () =>
    counter.waiting(`${id}:gate`) > 0 ? true : undefined,
  );
  return id;
}

async function finished(status: 'complete' | 'errored' | 'terminated') {
  if (status === 'terminated') {
    const id = await heldInstance();
    expect((await patch('gated', id, 'terminate')).status).toBe(200);
    counter.release(`${id}:gate`);
    await sleep(50);
    return id;
  }
  const id = uid(`final-${status}`);
  await create(t, 'gated', { id, params: P(status === 'errored' ? { fail: true } : {}) });
  await waitStatus(t, 'gated', id, status);
  return id;
}

describe('pause and resume', () => {
  it('pauses a running instance after the step in flight (waitingForPause → paused) and resumes it', async () => {
    const id = await heldInstance();
    const res = await patch('gated', id, 'pause');
    expect(res.status).toBe(200);
    expect(res.body.result).toMatchObject({ status: 'waitingForPause' });
    expect(typeof res.body.result.timestamp).toBe('string');
    counter.release(`${id}:gate`);
    const paused = await waitStatus(t, 'gated', id, 'paused');
    expect(paused.steps[0]).toMatchObject({ name: 'gate', success: true });
    await sleep(100);
    expect(counter.count(`${id}:after`)).toBe(0);
    expect((await patch('gated', id, 'pause')).body.result.status).toBe('paused');
    expect((await patch('gated', id, 'resume')).status).toBe(200);
    const done = await waitStatus(t, 'gated', id, 'complete');
    expect(outputOf(done)).toEqual({ a: 1, b: 1 });
    expect(counter.count(`${id}:gate`)).toBe(1);
  });

  it('cancels a pending pause when resumed while waitingForPause', async () => {
    const id = await heldInstance();
    expect((await patch('gated', id, 'pause')).body.result.status).toBe('waitingForPause');
    expect((await patch('gated', id, 'resume')).body.result.status).toBe('running');
    counter.release(`${id}:gate`);
    await waitStatus(t, 'gated', id, 'complete');
  });

  it('freezes the timers of a paused sleeping instance and shifts them on resume', async () => {
    const id = uid('gated-sleep');
    await create(t, 'gated', { id, params: P({ sleep: '10 seconds' }) });
    await waitStatus(t, 'gated', id, 'waiting');
    clock.advance(4_000);
    expect((await patch('gated', id, 'pause')).body.result.status).toBe('paused');
    clock.advance(100_000);
    await sleep(150);
    expect((await instance(t, 'gated', id)).status).toBe('paused');
    expect((await patch('gated', id, 'resume')).body.result.status).toBe('waiting');
    clock.advance(5_999);
    await sleep(150);
    expect((await instance(t, 'gated', id)).status).toBe('waiting');
    clock.advance(1);
    await waitStatus(t, 'gated', id, 'complete');
  });

  it('pauses a queued instance; resume lets it run', async () => {
    await setConcurrency(1);
    try {
      const first = await heldInstance();
      const second = uid('gated-queued');
      await create(t, 'gated', { id: second, params: P() });
      expect((await instance(t, 'gated', second)).status).toBe('queued');
      expect((await patch('gated', second, 'pause')).body.result.status).toBe('paused');
      counter.release(`${first}:gate`);
      await waitStatus(t, 'gated', first, 'complete');
      await sleep(100);
      expect((await instance(t, 'gated', second)).status).toBe('paused');
      await patch('gated', second, 'resume');
      await waitStatus(t, 'gated', second, 'complete');
    } finally {
      await setConcurrency(undefined);
    }
  });

  it('refuses pause and resume of a finished instance (409), and resume of a running one is a no-op', async () => {
    for (const status of ['complete', 'errored', 'terminated'] as const) {
      const id = await finished(status);
      const p = await patch('gated', id, 'pause');
      expect(p.status).toBe(409);
      expect(p.headers.get('x-should-retry')).toBe('false');
      expect(p.body.errors[0].message).toBe(
        '(instance.cannot_pause) Cannot pause instance since its on a finite state',
      );
      const r = await patch('gated', id, 'resume');
      expect(r.status).toBe(409);
      expect(r.body.errors[0].message).toBe(
        '(instance.cannot_resume) Cannot resume instance since its on a finite state',
      );
    }
    const id = await heldInstance();
    expect((await patch('gated', id, 'resume')).body.result.status).toBe('running');
    counter.release(`${id}:gate`);
    await waitStatus(t, 'gated', id, 'complete');
  });
});

describe('terminate', () => {
  it('terminates a running instance; its step in flight is not recorded and nothing runs after it', async () => {
    const id = await heldInstance();
    const res = await patch('gated', id, 'terminate');
    expect(res.body.result.status).toBe('terminated');
    counter.release(`${id}:gate`);
    await sleep(200);
    const r = await instance(t, 'gated', id);
    expect(r.status).toBe('terminated');
    expect(r.success).toBe(false);
    expect(r.steps).toEqual([{ type: 'termination', trigger: { source: 'api' } }]);
    expect(counter.count(`${id}:after`)).toBe(0);
  });

  it('terminates waiting, queued and paused instances', async () => {
    const waiting = uid('t-waiting');
    await create(t, 'gated', { id: waiting, params: P({ sleep: '1 minute' }) });
    await waitStatus(t, 'gated', waiting, 'waiting');
    expect((await patch('gated', waiting, 'terminate')).body.result.status).toBe('terminated');
    clock.advance(120_000);
    await sleep(150);
    expect((await instance(t, 'gated', waiting)).status).toBe('terminated');

    const paused = uid('t-paused');
    await create(t, 'gated', { id: paused, params: P({ sleep: '1 minute' }) });
    await waitStatus(t, 'gated', paused, 'waiting');
    await patch('gated', paused, 'pause');
    expect((await patch('gated', paused, 'terminate')).body.result.status).toBe('terminated');

    await setConcurrency(1);
    try {
      const holder = await heldInstance();
      const queued = uid('t-queued');
      await create(t, 'gated', { id: queued, params: P() });
      expect((await instance(t, 'gated', queued)).status).toBe('queued');
      expect((await patch('gated', queued, 'terminate')).body.result.status).toBe('terminated');
      counter.release(`${holder}:gate`);
      await waitStatus(t, 'gated', holder, 'complete');
      expect(counter.count(`${queued}:gate`)).toBe(0);
    } finally {
      await setConcurrency(undefined);
    }
  });

  it("refuses to terminate a finished instance with the platform's message", async () => {
    for (const status of ['complete', 'errored', 'terminated'] as const) {
      const id = await finished(status);
      const res = await patch('gated', id, 'terminate');
      expect(res.status).toBe(409);
      expect(res.body.errors[0].message).toBe(
        '(instance.cannot_terminate) Cannot terminate instance since its on a finite state',
      );
      const viaBinding = await callScript(t, SCRIPT_NAME, `/terminate/gated/${id}`, {});
      expect(viaBinding.body.error.message).toBe(
        '(instance.cannot_terminate) Cannot terminate instance since its on a finite state',
      );
    }
  });
});

describe('restart', () => {
  it('re-runs finished instances from the start, same id and params', async () => {
    for (const status of ['complete', 'errored', 'terminated'] as const) {
      const id = await finished(status);
      const before = counter.count(`${id}:gate`);
      expect((await patch('gated', id, 'restart')).status).toBe(200);
      const r = await waitStatus(t, 'gated', id, status === 'errored' ? 'errored' : 'complete');
      expect(counter.count(`${id}:gate`)).toBe(before + 1);
      expect(r.steps.filter((s: { type: string }) => s.type === 'step').length).toBeGreaterThan(0);
    }
  });

  it('restarts a running instance: the old attempt stops, a new one starts', async () => {
    const id = await heldInstance();
    expect((await patch('gated', id, 'restart')).status).toBe(200);
    await until('the new attempt at the gate', async () =>
      counter.waiting(`${id}:gate`) >= 2 ? true : undefined,
    );
    counter.release(`${id}:gate`);
    const r = await waitStatus(t, 'gated', id, 'complete');
    expect(r.steps.filter((s: { name: string }) => s.name === 'gate')).toHaveLength(1);
    expect(counter.count(`${id}:after`)).toBe(1);
  });

  it('restarts waiting and paused instances', async () => {
    for (const pause of [false, true]) {
      const id = uid('r-sleep');
      await create(t, 'gated', { id, params: P({ sleep: '1 hour' }) });
      await waitStatus(t, 'gated', id, 'waiting');
      if (pause) await patch('gated', id, 'pause');
      await patch('gated', id, 'restart');
      await until('the second gate', async () =>
        counter.count(`${id}:gate`) >= 2 ? true : undefined,
      );
      await waitStatus(t, 'gated', id, 'waiting');
      clock.advance(3_600_000);
      await waitStatus(t, 'gated', id, 'complete');
    }
  });

  it('restarts from a named step, keeping the results before it', async () => {
    const id = await finished('complete');
    expect((await patch('gated', id, 'restart', { from: { name: 'after' } })).status).toBe(200);
    await waitStatus(t, 'gated', id, 'complete');
    expect(counter.count(`${id}:gate`)).toBe(1);
    expect(counter.count(`${id}:after`)).toBe(2);
    const missing = await patch('gated', id, 'restart', { from: { name: 'nope' } });
    expect(missing.status).toBe(409);
    expect(missing.body.errors[0].message).toBe(
      '(instance.cannot_restart) Step "nope" not found in execution history',
    );
  });
});

describe('the binding', () => {
  it('creates, reads status, pauses, resumes and terminates', async () => {
    const id = uid('b-ctl');
    const made = await callScript(t, SCRIPT_NAME, '/create/gated', {
      id,
      params: P({ sleep: '1 minute' }),
    });
    expect(made.body).toEqual({ id });
    await waitStatus(t, 'gated', id, 'waiting');
    expect((await callScript(t, SCRIPT_NAME, `/status/gated/${id}`)).body).toEqual({
      status: 'waiting',
    });
    await callScript(t, SCRIPT_NAME, `/pause/gated/${id}`, {});
    expect((await callScript(t, SCRIPT_NAME, `/status/gated/${id}`)).body).toEqual({
      status: 'paused',
    });
    await callScript(t, SCRIPT_NAME, `/resume/gated/${id}`, {});
    clock.advance(60_000);
    await waitStatus(t, 'gated', id, 'complete');
    expect((await callScript(t, SCRIPT_NAME, `/status/gated/${id}`)).body).toEqual({
      status: 'complete',
      output: { a: 1, b: 1 },
    });
    expect((await instance(t, 'gated', id)).trigger.source).toBe('binding');
    await callScript(t, SCRIPT_NAME, `/restart/gated/${id}`, {});
    clock.advance(60_000);
    await until('a second run', async () => (counter.count(`${id}:gate`) >= 2 ? true : undefined));
    const missing = await callScript(t, SCRIPT_NAME, '/status/gated/nobody-here');
    expect(missing.body.error.message).toBe('(instance.not_found) Instance not found');
  });

  it('refuses params that are not serialisable, at the call', async () => {
    const expected = {
      fn: 'params is not serializable: functions are not serializable',
      sym: 'params is not serializable: symbols are not serializable',
      cycle: 'params is not serializable: circular references are not serializable',
    };
    for (const [kind, message] of Object.entries(expected)) {
      const r = await callScript(t, SCRIPT_NAME, '/create-weird/gated', { kind });
      expect(r.status).toBe(400);
      expect(r.body.error).toEqual({ name: 'TypeError', message });
    }
    const big = await callScript(t, SCRIPT_NAME, '/create-weird/gated', { kind: 'big' });
    expect(big.body.error.name).toBe('RangeError');
    expect(big.body.error.message).toMatch(/limit is 1048576 bytes/);
  });
});

describe('ids and batches', () => {
  it('refuses a duplicate id, also once the instance has finished', async () => {
    const id = uid('dup');
    await create(t, 'gated', { id, params: P() });
    const again = await t.call('POST', `${base()}/gated/instances`, { instance_id: id });
    expect(again.status).toBe(409);
    expect(again.headers.get('x-should-retry')).toBe('false');
    expect(again.body.errors[0].message).toBe('(instance.already_exists) Instance already exists');
    await waitStatus(t, 'gated', id, 'complete');
    const viaBinding = await callScript(t, SCRIPT_NAME, '/create/gated', { id });
    expect(viaBinding.body.error.message).toBe('(instance.already_exists) Instance already exists');
  });

  it('refuses invalid and reserved ids', async () => {
    for (const id of ['bad id', '-leading-dash', 'x'.repeat(101), `cf_${'a'.repeat(64)}`]) {
      const res = await t.call('POST', `${base()}/gated/instances`, { id });
      expect(res.status).toBe(400);
      expect(res.body.errors[0].message).toMatch(/^\(instance\.invalid_id\)/);
    }
    const viaBinding = await callScript(t, SCRIPT_NAME, '/create/gated', { id: 'no spaces' });
    expect(viaBinding.body.error.message).toMatch(/^\(instance\.invalid_id\)/);
  });

  it('createBatch skips existing ids, so repeating it changes nothing', async () => {
    const ids = [uid('batch'), uid('batch')];
    const first = await callScript(
      t,
      SCRIPT_NAME,
      '/create-batch/gated',
      ids.map((id) => ({ id, params: P() })),
    );
    expect(first.body.ids).toEqual(ids);
    const extra = uid('batch');
    const second = await callScript(
      t,
      SCRIPT_NAME,
      '/create-batch/gated',
      [...ids, extra].map((id) => ({ id, params: P() })),
    );
    expect(second.body.ids).toEqual([...ids, extra]);
    for (const id of [...ids, extra]) await waitStatus(t, 'gated', id, 'complete');
    for (const id of ids) expect(counter.count(`${id}:gate`)).toBe(1);

    const rest = [uid('rbatch'), uid('rbatch')];
    const r1 = await t.call(
      'POST',
      `${base()}/gated/instances/batch`,
      rest.map((id) => ({ instance_id: id, params: JSON.stringify(P()) })),
    );
    expect(r1.status).toBe(200);
    expect(r1.body.result.map((x: { id: string }) => x.id)).toEqual(rest);
    const r2 = await t.call(
      'POST',
      `${base()}/gated/instances/batch`,
      rest.map((id) => ({ instance_id: id })),
    );
    expect(r2.body.result.map((x: { id: string }) => x.id)).toEqual(rest);
    for (const id of rest) await waitStatus(t, 'gated', id, 'complete');
    for (const id of rest) expect(counter.count(`${id}:gate`)).toBe(1);

    const tooMany = await t.call(
      'POST',
      `${base()}/gated/instances/batch`,
      Array.from({ length: 101 }, () => ({})),
    );
    expect(tooMany.status).toBe(400);
    expect(tooMany.body.errors[0].message).toBe(
      '(instance.batch_too_large) A batch holds at most 100 instances, got 101',
    );
  });
});

describe('concurrency', () => {
  it('queues instances beyond the workflow limit and runs them as slots free up', async () => {
    await setConcurrency(2);
    try {
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) {
        const id = uid('conc');
        counter.hold(`${id}:gate`);
        ids.push(id);
        await create(t, 'gated', { id, params: P() });
      }
      await until('two at their gates', async () =>
        ids.filter((id) => counter.waiting(`${id}:gate`) > 0).length === 2 ? true : undefined,
      );
      const statuses = await Promise.all(
        ids.map(async (id) => (await instance(t, 'gated', id)).status),
      );
      expect(statuses.sort()).toEqual(['queued', 'queued', 'running', 'running']);
      const listed = await t.call('GET', `${base()}/gated/instances?status=queued&per_page=100`);
      expect(listed.body.result.filter((r: { id: string }) => ids.includes(r.id))).toHaveLength(2);
      for (const id of ids) counter.release(`${id}:gate`);
      for (const id of ids) await waitStatus(t, 'gated', id, 'complete');
    } finally {
      await setConcurrency(undefined);
    }
  });

  it('does not count sleeping instances against the limit', async () => {
    await setConcurrency(1);
    try {
      const sleeper = uid('conc-sleep');
      await create(t, 'gated', { id: sleeper, params: P({ sleep: '1 hour' }) });
      await waitStatus(t, 'gated', sleeper, 'waiting');
      const other = uid('conc-other');
      await create(t, 'gated', { id: other, params: P() });
      await waitStatus(t, 'gated', other, 'complete');
      expect((await instance(t, 'gated', sleeper)).status).toBe('waiting');
      clock.advance(3_600_000);
      await waitStatus(t, 'gated', sleeper, 'complete');
    } finally {
      await setConcurrency(undefined);
    }
  });
});

describe('retention', () => {
  it('deletes a finished instance when its retention runs out', async () => {
    const spec = uid('ret-spec');
    await create(t, 'gated', { id: spec, params: P(), retention: '1 hour' });
    const real = uid('ret-real');
    await create(t, 'gated', {
      instance_id: real,
      params: JSON.stringify(P({ fail: true })),
      instance_retention: { success_retention: '1 day', error_retention: 120_000 },
    });
    await waitStatus(t, 'gated', spec, 'complete');
    await waitStatus(t, 'gated', real, 'errored');
    clock.advance(119_000);
    await sleep(150);
    expect((await t.call('GET', `${base()}/gated/instances/${real}`)).status).toBe(200);
    clock.advance(1_000);
    await until('the errored instance to expire', async () =>
      (await t.call('GET', `${base()}/gated/instances/${real}`)).status === 404 ? true : undefined,
    );
    expect((await t.call('GET', `${base()}/gated/instances/${spec}`)).status).toBe(200);
    clock.advance(3_600_000);
    await until('the complete instance to expire', async () =>
      (await t.call('GET', `${base()}/gated/instances/${spec}`)).status === 404 ? true : undefined,
    );
    const gone = await t.call('GET', `${base()}/gated/instances/${spec}`);
    expect(gone.body.errors[0].message).toBe('(instance.not_found) Instance not found');
    // The id is free again once the instance is gone.
    expect(
      (await t.call('POST', `${base()}/gated/instances`, { id: spec, params: P() })).status,
    ).toBe(200);
  });

  it("falls back to the workflow's default retention, then to the plan's (30 days)", async () => {
    const put = await t.call('PUT', `${base()}/sleeper`, {
      class_name: 'Sleeper',
      script_name: SCRIPT_NAME,
      default_retention: { success_retention: '2 days' },
    });
    expect(put.status).toBe(200);
    const a = uid('ret-default');
    await create(t, 'sleeper', { id: a, params: P({ duration: 0 }) });
    await waitStatus(t, 'sleeper', a, 'complete');
    const b = uid('ret-plan');
    await create(t, 'gated', { id: b, params: P() });
    await waitStatus(t, 'gated', b, 'complete');
    clock.advance(2 * 86_400_000);
    await until('the 2-day instance to expire', async () =>
      (await t.call('GET', `${base()}/sleeper/instances/${a}`)).status === 404 ? true : undefined,
    );
    expect((await t.call('GET', `${base()}/gated/instances/${b}`)).status).toBe(200);
    clock.advance(28 * 86_400_000);
    await until('the 30-day instance to expire', async () =>
      (await t.call('GET', `${base()}/gated/instances/${b}`)).status === 404 ? true : undefined,
    );
  });
});
