/**
 * The engine through real workflow scripts in the runtime, with the server's clock under test
 * control: retries and their delays for each back-off, NonRetryableError, a caught failure followed
 * by cleanup (the cached error re-thrown on replay), per-attempt timeouts, step limits and output
 * serialisation, sleep and sleepUntil, waitForEvent with and without a timeout (all three ways of
 * sending an event), parallel steps, and a workflow started from another workflow.
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

const clock = manualClock(new Date('2026-03-01T00:00:00.000Z'));
const SCRIPT_NAME = 'engine-wf';
let t: TestServer;
let counter: Counter;
let seq = 0;
const uid = (p: string) => `${p}-${++seq}`;
const P = (extra: Record<string, unknown> = {}) => ({ counter: counter.url, ...extra });

beforeAll(async () => {
  counter = await startCounter();
  t = await startTestServer({ workflowsPollMs: 20 }, { clock });
  await deployWorkflow(t, SCRIPT_NAME, SCRIPT, WORKFLOWS);
}, 60_000);

afterAll(async () => {
  await t?.stop();
  await counter?.close();
});

/** Waits until `key` was hit `n` times. */
const hits = (key: string, n: number) =>
  until(`${key} × ${n}`, async () => (counter.count(key) >= n ? true : undefined));

/** Waits until the retry instance's step has recorded `n` attempts (its timer is then set). */
const failedAttempts = (id: string, n: number) =>
  until(`${id} to record ${n} attempts`, async () => {
    const r = await instance(t, 'retry', id);
    return r.steps[0]?.attempts.length === n ? r : undefined;
  });

/** Asserts that `key` stays at `n` hits for a while (the engine polls every 20 ms). */
async function stays(key: string, n: number) {
  await sleep(150);
  expect(counter.count(key)).toBe(n);
}

describe('step.do retries', () => {
  const cases = {
    constant: [1000, 1000, 1000],
    linear: [1000, 2000, 3000],
    exponential: [1000, 2000, 4000],
  } as const;
  for (const [backoff, delays] of Object.entries(cases)) {
    it(`${backoff} back-off waits ${delays.join(', ')} ms between attempts`, async () => {
      const id = uid(`retry-${backoff}`);
      await create(t, 'retry', { id, params: P({ limit: 3, delay: 1000, backoff, failures: 3 }) });
      const key = `${id}:flaky`;
      for (const [i, d] of delays.entries()) {
        await hits(key, i + 1);
        const r = await failedAttempts(id, i + 1);
        expect(r.status).toBe('running');
        clock.advance(d - 1);
        await stays(key, i + 1);
        clock.advance(1);
      }
      const done = await waitStatus(t, 'retry', id, 'complete');
      expect(done.output).toBe('ok after 4');
      expect(counter.count(key)).toBe(4);
      const step = done.steps[0];
      expect(step.success).toBe(true);
      expect(step.attempts.map((a: { success: boolean }) => a.success)).toEqual([
        false,
        false,
        false,
        true,
      ]);
      expect(step.attempts[0].error).toEqual({ name: 'Error', message: 'boom 1' });
      expect(step.config.retries).toEqual({ limit: 3, delay: 1000, backoff });
    });
  }

  it('uses the platform defaults: 5 retries, 10 s, exponential, 10-minute timeout', async () => {
    const id = uid('retry-default');
    await create(t, 'retry', { id, params: P({ failures: 1 }) });
    await failedAttempts(id, 1);
    clock.advance(9_999);
    await stays(`${id}:flaky`, 1);
    clock.advance(1);
    const done = await waitStatus(t, 'retry', id, 'complete');
    expect(done.steps[0].config).toEqual({
      retries: { limit: 5, delay: 10000, backoff: 'exponential' },
      timeout: '10 minutes',
    });
  });

  it('errors the instance with the last error once the retries are spent', async () => {
    const id = uid('retry-spent');
    await create(t, 'retry', {
      id,
      params: P({ limit: 1, delay: 500, backoff: 'constant', failures: 10 }),
    });
    await failedAttempts(id, 1);
    clock.advance(500);
    const r = await waitStatus(t, 'retry', id, 'errored');
    expect(r.error).toEqual({ name: 'Error', message: 'boom 2' });
    expect(r.success).toBe(false);
    expect(counter.count(`${id}:flaky`)).toBe(2);
    const status = await t.call(
      'GET',
      `/accounts/${t.accountId}/workflows/retry/instances/${id}/status`,
    );
    expect(status.body.result).toEqual({
      status: 'errored',
      error: { name: 'Error', message: 'boom 2' },
    });
  });

  it('does not retry a NonRetryableError and errors the instance at once', async () => {
    const id = uid('nonretry');
    await create(t, 'nonretry', { id, params: P() });
    const r = await waitStatus(t, 'nonretry', id, 'errored');
    expect(r.error).toEqual({ name: 'NonRetryableError', message: 'do not retry' });
    expect(r.steps[0].attempts).toHaveLength(1);
    expect(counter.count(`${id}:fatal`)).toBe(1);
  });

  it('lets a caught failure continue to cleanup steps; the cached error is re-thrown on replay', async () => {
    const id = uid('cleanup');
    await create(t, 'cleanup', { id, params: P() });
    await until('the first failed charge', async () =>
      (await instance(t, 'cleanup', id)).steps[0]?.attempts.length === 1 ? true : undefined,
    );
    clock.advance(1000);
    await hits(`${id}:charge`, 2);
    // The failure was caught; the instance sleeps, then a replay re-throws the cached error.
    await waitStatus(t, 'cleanup', id, 'waiting');
    clock.advance(60_000);
    const r = await waitStatus(t, 'cleanup', id, 'complete');
    expect(outputOf(r)).toEqual({ failure: 'Error: card declined', undone: 'refunded' });
    expect(counter.count(`${id}:charge`)).toBe(2);
    expect(counter.count(`${id}:refund`)).toBe(1);
    expect(
      r.steps.map((s: { type: string; name: string; success?: boolean }) => [
        s.type,
        s.name,
        s.success,
      ]),
    ).toEqual([
      ['step', 'charge', false],
      ['sleep', 'settle', undefined],
      ['step', 'refund', true],
    ]);
  });

  it('times out an attempt after the step timeout', async () => {
    const id = uid('timeout');
    await create(t, 'timeout', { id });
    const r = await waitStatus(t, 'timeout', id, 'errored');
    expect(r.error).toEqual({
      name: 'WorkflowTimeoutError',
      message: 'Execution timed out after 50ms',
    });
  });

  it('refuses a step output that cannot be serialised, at the call', async () => {
    const id = uid('badoutput');
    await create(t, 'badoutput', { id });
    const r = await waitStatus(t, 'badoutput', id, 'complete');
    expect(r.output).toBe(
      'TypeError: The output of step "fn" is not serializable: functions are not serializable',
    );
  });

  it('enforces the steps-per-instance limit of the workflow', async () => {
    const put = await t.call('PUT', `/accounts/${t.accountId}/workflows/limited`, {
      class_name: 'Limited',
      script_name: SCRIPT_NAME,
      limits: { steps: 3 },
    });
    expect(put.status).toBe(200);
    const id = uid('limited');
    await create(t, 'limited', { id });
    const r = await waitStatus(t, 'limited', id, 'errored');
    expect(r.error).toEqual({
      name: 'NonRetryableError',
      message: 'This instance reached the limit of 3 steps',
    });
    expect(r.steps).toHaveLength(3);
  });
});

describe('sleep', () => {
  it('step.sleep wakes after the duration on the clock', async () => {
    const id = uid('sleep');
    await create(t, 'sleeper', { id, params: P({ duration: '10 seconds' }) });
    const r = await waitStatus(t, 'sleeper', id, 'waiting');
    const nap = r.steps.find((s: { name: string }) => s.name === 'nap');
    expect(nap).toMatchObject({
      type: 'sleep',
      finished: false,
      end: new Date(Date.parse(nap.start) + 10_000).toISOString(),
    });
    clock.advance(9_999);
    await stays(`${id}:after`, 0);
    expect((await instance(t, 'sleeper', id)).status).toBe('waiting');
    clock.advance(1);
    const done = await waitStatus(t, 'sleeper', id, 'complete');
    expect(done.steps.find((s: { name: string }) => s.name === 'nap').finished).toBe(true);
    expect(counter.count(`${id}:before`)).toBe(1);
    expect(counter.count(`${id}:after`)).toBe(1);
  });

  it('step.sleep takes milliseconds as a number', async () => {
    const id = uid('sleep-ms');
    await create(t, 'sleeper', { id, params: P({ duration: 2500 }) });
    await waitStatus(t, 'sleeper', id, 'waiting');
    clock.advance(2_499);
    await stays(`${id}:after`, 0);
    clock.advance(1);
    await waitStatus(t, 'sleeper', id, 'complete');
  });

  it('step.sleepUntil wakes at the timestamp', async () => {
    const id = uid('sleep-until');
    const until = clock.now().getTime() + 60_000;
    await create(t, 'sleeper', { id, params: P({ until }) });
    await waitStatus(t, 'sleeper', id, 'waiting');
    clock.advance(59_999);
    await stays(`${id}:after`, 0);
    clock.advance(1);
    await waitStatus(t, 'sleeper', id, 'complete');
  });

  it('refuses a sleep longer than 365 days', async () => {
    const id = uid('sleep-long');
    await create(t, 'sleeper', { id, params: P({ duration: '366 days' }) });
    const r = await waitStatus(t, 'sleeper', id, 'errored');
    expect(r.error).toEqual({ name: 'RangeError', message: 'step.sleep: the maximum is 365 days' });
  });
});

describe('waitForEvent', () => {
  const wf = `/accounts/$ACCOUNT/workflows/waiter/instances`;
  const path = (id: string, rest: string) => wf.replace('$ACCOUNT', t.accountId) + `/${id}${rest}`;

  it('resumes with the event sent to /events/{type} (body = payload)', async () => {
    const id = uid('wait-rest');
    await create(t, 'waiter', { id, params: { timeout: '1 hour' } });
    const waiting = await waitStatus(t, 'waiter', id, 'waiting');
    expect(waiting.steps[0]).toMatchObject({
      type: 'waitForEvent',
      name: 'approval',
      finished: false,
      event_type: 'approved',
    });
    const other = await t.call('POST', path(id, '/events/other'), { no: true });
    expect(other.status).toBe(200);
    await sleep(100);
    expect((await instance(t, 'waiter', id)).status).toBe('waiting');
    const sent = await t.call('POST', path(id, '/events/approved'), { ok: true });
    expect(sent.status).toBe(200);
    expect(sent.body.result).toMatchObject({ instanceId: id });
    const r = await waitStatus(t, 'waiter', id, 'complete');
    expect(outputOf(r)).toEqual({ approved: { ok: true }, type: 'approved', ts: true });
    expect(r.steps[0]).toMatchObject({ finished: true, output: '{"ok":true}' });
  });

  it("accepts the spec's {type, payload} body and the binding's sendEvent", async () => {
    const a = uid('wait-spec');
    const b = uid('wait-binding');
    await create(t, 'waiter', { id: a });
    await create(t, 'waiter', { id: b });
    await waitStatus(t, 'waiter', a, 'waiting');
    await waitStatus(t, 'waiter', b, 'waiting');
    expect(
      (await t.call('POST', path(a, '/events'), { type: 'approved', payload: 42 })).status,
    ).toBe(200);
    const viaBinding = await callScript(t, SCRIPT_NAME, `/event/waiter/${b}`, {
      type: 'approved',
      payload: 'yes',
    });
    expect(viaBinding.body).toEqual({ ok: true });
    expect(outputOf(await waitStatus(t, 'waiter', a, 'complete')).approved).toBe(42);
    expect(outputOf(await waitStatus(t, 'waiter', b, 'complete')).approved).toBe('yes');
  });

  it('keeps an event sent before the wait until the wait consumes it', async () => {
    const id = uid('wait-early');
    await create(t, 'waiter', { id, params: { sleepFirst: '10 seconds' } });
    await waitStatus(t, 'waiter', id, 'waiting');
    await t.call('POST', path(id, '/events/approved'), { early: true });
    clock.advance(10_000);
    const r = await waitStatus(t, 'waiter', id, 'complete');
    expect(outputOf(r).approved).toEqual({ early: true });
  });

  it('throws WorkflowTimeoutError after its timeout', async () => {
    const id = uid('wait-timeout');
    await create(t, 'waiter', { id, params: { timeout: '1 hour' } });
    await waitStatus(t, 'waiter', id, 'waiting');
    clock.advance(3_599_999);
    await sleep(150);
    expect((await instance(t, 'waiter', id)).status).toBe('waiting');
    clock.advance(1);
    const r = await waitStatus(t, 'waiter', id, 'errored');
    expect(r.error).toEqual({
      name: 'WorkflowTimeoutError',
      message: 'Execution timed out after 3600000ms',
    });
  });

  it('times out after 24 hours by default; a caught timeout lets the workflow finish', async () => {
    const id = uid('wait-default');
    await create(t, 'waiter', { id, params: { catchTimeout: true } });
    await waitStatus(t, 'waiter', id, 'waiting');
    clock.advance(86_400_000 - 1);
    await sleep(150);
    expect((await instance(t, 'waiter', id)).status).toBe('waiting');
    clock.advance(1);
    const r = await waitStatus(t, 'waiter', id, 'complete');
    expect(outputOf(r)).toEqual({
      timedOut: 'WorkflowTimeoutError: Execution timed out after 86400000ms',
    });
    const late = await t.call('POST', path(id, '/events/approved'), {});
    expect(late.status).toBe(409);
  });
});

describe('replay', () => {
  it('memoises parallel steps of one name by occurrence and keeps rich values', async () => {
    const id = uid('parallel');
    await create(t, 'parallel', { id, params: P() });
    await waitStatus(t, 'parallel', id, 'waiting');
    clock.advance(5_000);
    const r = await waitStatus(t, 'parallel', id, 'complete');
    expect(outputOf(r)).toEqual({ values: [1, 2, 3], more: 6, types: { map: true, big: '10' } });
    for (const i of [1, 2, 3]) expect(counter.count(`${id}:part${i}`)).toBe(1);
    expect(r.steps.filter((s: { name: string }) => s.name === 'part')).toHaveLength(3);
  });

  it('starts an instance from another workflow through its binding', async () => {
    const id = uid('spawner');
    await create(t, 'spawner', { id, params: P() });
    const r = await waitStatus(t, 'spawner', id, 'complete');
    expect(r.output).toBe(`${id}-child`);
    const child = await instance(t, 'sleeper', `${id}-child`);
    expect(child.trigger.source).toBe('binding');
  });

  it('hands the script workflow bindings in place of the engine binding', async () => {
    const r = await callScript(t, SCRIPT_NAME, '/env/retry');
    expect(r.body.hasCreate).toBe('function');
    expect(r.body.keys).toContain('WF_RETRY');
    expect(r.body.keys.some((k: string) => k.startsWith('__OUTPOST'))).toBe(false);
  });
});
