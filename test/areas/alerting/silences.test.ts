/**
 * Silences through the official client (`alerting.silences.create/update/list/get/delete`), bad
 * input over raw HTTP (nothing written when one item of a batch is wrong), and the effect: during
 * an HTTP flood, a policy with a silence in force sends nothing (its alerts are in the history as
 * `silenced`) while a policy whose silence lies in the future is delivered; deleting a policy
 * deletes its silences.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { sdk, type Cloudflare } from '../../support/sdk.ts';
import { startOrigin, type Origin } from '../../support/origins.ts';
import { flood } from '../ddos/load.ts';
import { waitFor } from './support.ts';

const ORIGIN = '127.0.224.1';
const HOST = 'www.silences.test';
const HOUR = 3600_000;
const iso = (offsetMs: number) => new Date(Date.now() + offsetMs).toISOString().replace(/\.\d{3}Z$/, 'Z');

let t: TestServer;
let cf: Cloudflare;
let origin: Origin;
let receiver: http.Server;
const received: any[] = [];
let webhookId: string;
const base = () => `/accounts/${t.accountId}/alerting/v3`;

beforeAll(async () => {
  receiver = http.createServer((req, res) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', () => {
      received.push(JSON.parse(text));
      res.end('ok');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
  t = await startTestServer({ ddosDetection: true, ddosWindowMs: 250, ddosCooldownWindows: 2, ddosThresholdPercent: 10, alertingRetryMs: 50 });
  cf = sdk(t);
  origin = await startOrigin(ORIGIN, (_req, res) => res.end('ok'));
  const zone = await createZone(t, 'silences.test');
  await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'www', content: ORIGIN, proxied: true, ttl: 1 });
  const hook = await cf.alerting.destinations.webhooks.create({ account_id: t.accountId, name: 'ops', url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/` });
  webhookId = hook.id!;
});
afterAll(async () => {
  await origin?.close();
  await t?.stop();
  receiver?.close();
});

async function policy(name: string): Promise<string> {
  const p = await cf.alerting.policies.create({ account_id: t.accountId, name, alert_type: 'dos_attack_l7', enabled: true, mechanisms: { webhooks: [{ id: webhookId }] } });
  return p.id!;
}

async function listSilences() {
  const out = [];
  for await (const s of cf.alerting.silences.list({ account_id: t.accountId })) out.push(s);
  return out;
}

describe('silences', () => {
  it('are created, listed, read, moved and deleted through the official client', async () => {
    const policyId = await policy('maintenance');
    // Each time computed once (a second may pass between two calls of iso()).
    const [inOne, inTwo, inThree] = [iso(HOUR), iso(2 * HOUR), iso(3 * HOUR)];
    const utc = (s: string) => new Date(s).toISOString();
    const created = await cf.alerting.silences.create({ account_id: t.accountId, body: [{ policy_id: policyId, start_time: inOne, end_time: inTwo }, { policy_id: policyId, end_time: inOne }] });
    expect(created.success).toBe(true);
    const list = await listSilences();
    expect(list.length).toBe(2);
    const later = list.find((s) => s.start_time === utc(inOne))!;
    expect(later).toMatchObject({ policy_id: policyId, end_time: utc(inTwo) });
    expect(later.id).toMatch(/^[0-9a-f]{32}$/);
    expect(later.created_at).toBeTruthy();
    // Without start_time the silence starts now.
    const now = list.find((s) => s !== later)!;
    expect(Math.abs(Date.parse(now.start_time!) - Date.now())).toBeLessThan(60_000);

    const got = await cf.alerting.silences.get(later.id!, { account_id: t.accountId });
    expect(got).toEqual(later);
    const updated = [];
    for await (const s of cf.alerting.silences.update({ account_id: t.accountId, body: [{ id: later.id, end_time: inThree }] })) updated.push(s);
    expect(updated).toEqual([expect.objectContaining({ id: later.id, start_time: later.start_time, end_time: utc(inThree) })]);
    expect((await cf.alerting.silences.get(later.id!, { account_id: t.accountId })).end_time).toBe(updated[0].end_time);

    const del = await cf.alerting.silences.delete(later.id!, { account_id: t.accountId });
    expect(del.success).toBe(true);
    const gone = await t.call('GET', `${base()}/silences/${later.id}`);
    expect(gone.status).toBe(404);
    expect(gone.body.errors[0].message).toContain(later.id);
    expect((await listSilences()).map((s) => s.id)).toEqual([now.id]);

    // Deleting the policy deletes its silences.
    await cf.alerting.policies.delete(policyId, { account_id: t.accountId });
    expect(await listSilences()).toEqual([]);
  });

  it('refuses bad input with the reason and writes nothing of a refused batch', async () => {
    const policyId = await policy('bad input');
    const good = { policy_id: policyId, start_time: iso(0), end_time: iso(HOUR) };
    const cases: [unknown, string][] = [
      [good, 'JSON array'],
      [[], 'at least one'],
      [[good, { ...good, policy_id: 'f'.repeat(32) }], 'does not exist'],
      [[good, { ...good, end_time: undefined }], '[1].end_time: required'],
      [[{ ...good, policy_id: undefined }], 'policy_id: required'],
      [[{ ...good, policy_id: 'x'.repeat(65) }], 'not a notification policy id'],
      [[{ ...good, end_time: iso(-HOUR) }], 'end_time'],
      [[{ ...good, start_time: iso(-2 * HOUR), end_time: iso(-HOUR) }], 'in the past'],
      [[{ ...good, start_time: 'tomorrow' }], 'ISO 8601'],
      [[{ ...good, end_time: 1767225600 }], 'ISO 8601'],
      [[{ ...good, start_time: iso(100 * 24 * HOUR), end_time: iso(101 * 24 * HOUR) }], '90 days'],
      [[{ ...good, colour: 'red' }], 'unknown field'],
      [['x'], 'expected an object'],
      [Array(101).fill(good), 'at most 100'],
    ];
    for (const [body, text] of cases) {
      const res = await t.call('POST', `${base()}/silences`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.success).toBe(false);
      expect(res.body.errors[0].message).toContain(text);
    }
    expect((await t.call('POST', `${base()}/silences`, '[{"policy_id":')).status).toBe(400);
    const ofPolicy = async () => (await listSilences()).filter((x) => x.policy_id === policyId);
    expect(await ofPolicy()).toEqual([]);

    await cf.alerting.silences.create({ account_id: t.accountId, body: [good] });
    const [s] = await ofPolicy();
    const updates: [unknown, number, string][] = [
      [{ id: s.id, end_time: iso(2 * HOUR) }, 400, 'JSON array'],
      [[{ end_time: iso(2 * HOUR) }], 400, 'id: required'],
      [[{ id: s.id, end_time: iso(2 * HOUR) }, { id: 'a'.repeat(32), end_time: iso(2 * HOUR) }], 404, 'a'.repeat(32)],
      [[{ id: s.id, start_time: iso(2 * HOUR) }], 400, 'later than start_time'],
      [[{ id: s.id, policy_id: policyId }], 400, 'cannot change'],
      [[{ id: s.id, end_time: iso(2 * HOUR) }, { id: s.id, end_time: iso(3 * HOUR) }], 400, 'twice'],
    ];
    for (const [body, status, text] of updates) {
      const res = await t.call('PUT', `${base()}/silences`, body);
      expect(res.status, JSON.stringify(body)).toBe(status);
      expect(res.body.errors[0].message).toContain(text);
    }
    // The first (valid) item of the refused batches did not change the silence.
    expect(await cf.alerting.silences.get(s.id!, { account_id: t.accountId })).toEqual(s);
    expect((await t.call('DELETE', `${base()}/silences/${'b'.repeat(32)}`)).status).toBe(404);
    expect((await t.call('GET', `/accounts/${'f'.repeat(32)}/alerting/v3/silences`)).status).toBe(404);
    await cf.alerting.policies.delete(policyId, { account_id: t.accountId });
  });

  it('a silenced policy sends nothing during a flood (history: silenced); one silenced later is delivered', async () => {
    const quiet = await policy('quiet');
    const loud = await policy('loud');
    await cf.alerting.silences.create({
      account_id: t.accountId,
      body: [
        { policy_id: quiet, start_time: iso(-60_000), end_time: iso(HOUR) },
        { policy_id: loud, start_time: iso(HOUR), end_time: iso(2 * HOUR) },
      ],
    });
    const quietSilence = (await listSilences()).find((s) => s.policy_id === quiet)!;
    received.length = 0;
    const edge = new URL(t.server.listeners.find((l) => l.name.startsWith('edge'))!.address);
    await flood({ url: edge, host: HOST, from: '127.0.224.2', durationMs: 700, concurrency: 4 });
    // (Only this test's policies count: another test's leftovers, if it failed, must not matter.)
    const mine = () => received.filter((r) => r.policy_id === quiet || r.policy_id === loud);
    await waitFor('start alert', () => mine().find((r) => r.alert_event === 'ALERT_STATE_EVENT_START'));
    await waitFor('end alert', () => mine().find((r) => r.alert_event === 'ALERT_STATE_EVENT_END'));
    const history = await waitFor('settled history', async () => {
      const h = await t.call('GET', `${base()}/history?per_page=100`);
      const items = (h.body.result as any[]).filter((d) => d.policy_id === quiet || d.policy_id === loud);
      return items.some((d) => d.status === 'delivered' && d.alert_body.includes('EVENT_END')) && items.every((d) => d.status !== 'pending') ? items : undefined;
    });
    expect(mine().every((r) => r.policy_name === 'loud')).toBe(true);
    const silenced = history.filter((d) => d.policy_id === quiet);
    expect(silenced.length).toBeGreaterThanOrEqual(2); // start and end
    for (const d of silenced) expect(d).toMatchObject({ status: 'silenced', attempts: 0, silence_id: quietSilence.id });
    expect(history.filter((d) => d.policy_id === loud).every((d) => d.status === 'delivered')).toBe(true);
  });
});
