/**
 * Cron triggers: the expression parser, a script's `scheduled` handler starting a workflow with
 * `event.scheduledTime`, and a workflow's own `schedules` creating instances (trigger `cron`), all
 * on the test clock.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { manualClock } from '../../../src/core/clock.ts';
import { CronError, nextFiring, parseCron } from '../../../src/areas/workers/cron.ts';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { deployWorkflow, until, waitStatus } from './helpers.ts';

const at = (s: string) => Date.parse(s);
const next = (cron: string, after: string) =>
  new Date(nextFiring(parseCron(cron), at(after))!).toISOString();

describe('cron expressions', () => {
  it('computes the next firing', () => {
    expect(next('* * * * *', '2026-01-01T10:00:30Z')).toBe('2026-01-01T10:01:00.000Z');
    expect(next('*/15 * * * *', '2026-01-01T10:16:00Z')).toBe('2026-01-01T10:30:00.000Z');
    expect(next('0 12 * * MON-FRI', '2026-01-02T12:00:00Z')).toBe('2026-01-05T12:00:00.000Z');
    expect(next('30 2 1 JAN,JUL *', '2026-02-01T00:00:00Z')).toBe('2026-07-01T02:30:00.000Z');
    expect(next('0 0 29 2 *', '2026-03-01T00:00:00Z')).toBe('2028-02-29T00:00:00.000Z');
    // Both day fields restricted: either matches.
    expect(next('0 0 13 * 5', '2026-01-01T00:00:00Z')).toBe('2026-01-02T00:00:00.000Z');
    expect(next('0 0 * * 7', '2026-01-01T00:00:00Z')).toBe('2026-01-04T00:00:00.000Z');
    expect(next('5-10/5 * * * *', '2026-01-01T00:05:00Z')).toBe('2026-01-01T00:10:00.000Z');
    // Strictly after: a time that matches is not its own next firing.
    expect(next('0 0 1 1 *', '2026-01-01T00:00:00Z')).toBe('2027-01-01T00:00:00.000Z');
  });

  it('takes L (last day, last weekday of the month) and # (nth weekday)', () => {
    expect(next('0 0 L * *', '2026-02-01T00:00:00Z')).toBe('2026-02-28T00:00:00.000Z');
    expect(next('0 0 L * *', '2028-02-01T00:00:00Z')).toBe('2028-02-29T00:00:00.000Z');
    expect(next('0 0 * * 5L', '2026-01-01T00:00:00Z')).toBe('2026-01-30T00:00:00.000Z');
    expect(next('0 0 * * 1#2', '2026-01-01T00:00:00Z')).toBe('2026-01-12T00:00:00.000Z');
    expect(next('0 9 ? * MON#1', '2026-01-06T00:00:00Z')).toBe('2026-02-02T09:00:00.000Z');
  });

  it('refuses malformed expressions', () => {
    for (const bad of [
      '* * * *',
      '60 * * * *',
      '* 24 * * *',
      '* * 0 * *',
      '* * * 13 *',
      '* * * * 8',
      '*/0 * * * *',
      '5-1 * * * *',
      'a * * * *',
      '1,,2 * * * *',
      // Seconds, names, random values and dates that never come.
      '0 0 0 * * *',
      '@daily',
      'H * * * *',
      '0 0 30 2 *',
    ]) {
      expect(() => parseCron(bad), bad).toThrow(CronError);
    }
  });
});

const SOURCE = `
import { WorkflowEntrypoint } from 'cloudflare:workers';
export class Nightly extends WorkflowEntrypoint {
  async run(event, step) {
    return step.do('report', async () => 'report for ' + (event.payload.scheduledTime ?? 'schedule'));
  }
}
export default {
  async fetch() { return new Response('ok'); },
  async scheduled(event, env, ctx) {
    await env.WF_NIGHTLY.create({ id: 'from-cron-' + event.scheduledTime, params: { cron: event.cron, scheduledTime: event.scheduledTime } });
  },
};
`;

describe('triggers on the clock', () => {
  const clock = manualClock(new Date('2026-05-01T12:00:30.000Z'));
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer({ workflowsPollMs: 20 }, { clock });
    await deployWorkflow(t, 'cron-wf', SOURCE, { nightly: 'Nightly' });
  }, 60_000);
  afterAll(async () => {
    await t?.stop();
  });

  it("runs a script's scheduled handler, which starts a workflow", async () => {
    const put = await t.call('PUT', `/accounts/${t.accountId}/workers/scripts/cron-wf/schedules`, [
      { cron: '* * * * *' },
    ]);
    expect(put.status).toBe(200);
    clock.advance(29_000);
    await new Promise((r) => setTimeout(r, 150));
    const scheduled = at('2026-05-01T12:01:00Z');
    expect(
      (
        await t.call(
          'GET',
          `/accounts/${t.accountId}/workflows/nightly/instances/from-cron-${scheduled}`,
        )
      ).status,
    ).toBe(404);
    clock.advance(1_000);
    const r = await waitStatus(t, 'nightly', `from-cron-${scheduled}`, 'complete');
    expect(r.output).toBe(`report for ${scheduled}`);
    expect(r.params).toEqual({ cron: '* * * * *', scheduledTime: scheduled });
    await t.call('PUT', `/accounts/${t.accountId}/workers/scripts/cron-wf/schedules`, []);
  });

  it("creates instances from a workflow's own schedules", async () => {
    const put = await t.call('PUT', `/accounts/${t.accountId}/workflows/nightly`, {
      class_name: 'Nightly',
      script_name: 'cron-wf',
      schedules: [{ cron: '*/5 * * * *' }],
    });
    expect(put.status).toBe(200);
    const got = await t.call('GET', `/accounts/${t.accountId}/workflows/nightly`);
    expect(got.body.result.schedules).toEqual([
      { cron: '*/5 * * * *', next_instance: '2026-05-01T12:05:00.000Z' },
    ]);
    clock.set(new Date('2026-05-01T12:05:00.000Z'));
    const created = await until('a cron instance', async () => {
      const list = await t.call(
        'GET',
        `/accounts/${t.accountId}/workflows/nightly/instances?per_page=100`,
      );
      return list.body.result.find((i: { trigger_source: string }) => i.trigger_source === 'cron');
    });
    const r = await waitStatus(t, 'nightly', created.id, 'complete');
    expect(r.trigger).toEqual({ source: 'cron' });
    expect(r.schedule).toEqual({ cron: '*/5 * * * *', scheduledTime: at('2026-05-01T12:05:00Z') });
    expect(r.output).toBe('report for schedule');
  });
});
