/**
 * Notification policies through the official client (both alert_type forms, numeric and string
 * filters), webhook destinations with the test POST, bad input, and real delivery: an HTTP flood
 * against a zone raises start and end alerts at a webhook receiver with the platform's body and
 * `cf-webhook-auth`, and an email through a small SMTP server; a policy whose filters do not match
 * gets nothing; a failing receiver is retried; a pending alert survives a restart.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../../src/core/storage/db.ts';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { sdk, type Cloudflare } from '../../support/sdk.ts';
import { startOrigin, type Origin } from '../../support/origins.ts';
import { flood } from '../ddos/load.ts';
import { waitFor } from './support.ts';

const ORIGIN = '127.0.223.1';
const HOST = 'www.alerts.test';
const SERVER = { ddosDetection: true, ddosWindowMs: 250, ddosCooldownWindows: 2, ddosThresholdPercent: 10, alertingRetryMs: 50, alertingMaxAttempts: 8 };

let t: TestServer;
let cf: Cloudflare;
let origin: Origin;
let zone: { id: string; name: string };
let receiver: http.Server;
let hookUrl: string;
/** What the receiver answers next (default 200). */
let answers: number[] = [];
const received: { headers: http.IncomingHttpHeaders; body: any }[] = [];
let smtp: net.Server;
const mails: string[] = [];

beforeAll(async () => {
  receiver = http.createServer((req, res) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', () => {
      const status = answers.shift() ?? 200;
      if (status === 200) received.push({ headers: req.headers, body: JSON.parse(text) });
      res.writeHead(status).end(status === 200 ? 'ok' : 'receiver down');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
  hookUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  // A small SMTP server that accepts every message.
  smtp = net.createServer((s) => {
    let data = false;
    let mail = '';
    s.write('220 test ESMTP\r\n');
    s.on('data', (chunk) => {
      for (const line of chunk.toString().split('\r\n')) {
        if (data) {
          if (line === '.') {
            data = false;
            mails.push(mail);
            s.write('250 queued\r\n');
          } else mail += line + '\n';
          continue;
        }
        if (/^(EHLO|MAIL|RCPT)/.test(line)) s.write('250 ok\r\n');
        else if (line === 'DATA') {
          data = true;
          s.write('354 go\r\n');
        } else if (line === 'QUIT') s.end('221 bye\r\n');
      }
    });
  });
  await new Promise<void>((r) => smtp.listen(0, '127.0.0.1', () => r()));
  t = await startTestServer({ ...SERVER, alertingSmtp: `smtp://127.0.0.1:${(smtp.address() as AddressInfo).port}` });
  cf = sdk(t);
  origin = await startOrigin(ORIGIN, (_req, res) => res.end('ok'));
  zone = await createZone(t, 'alerts.test');
  await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'www', content: ORIGIN, proxied: true, ttl: 1 });
});
afterAll(async () => {
  await origin?.close();
  await t?.stop();
  receiver?.close();
  smtp?.close();
});

async function attack(url: URL, from = '127.0.223.2'): Promise<void> {
  await flood({ url, host: HOST, from, durationMs: 700, concurrency: 4 });
}
const edgeOf = (s: TestServer) => new URL(s.server.listeners.find((l) => l.name.startsWith('edge'))!.address);

let webhookId: string;

describe('policies and destinations', () => {
  it('creates a webhook destination after its test POST, and refuses one whose endpoint answers 500', async () => {
    const created = await cf.alerting.destinations.webhooks.create({ account_id: t.accountId, name: 'ops', url: hookUrl, secret: 's3cret' });
    webhookId = created.id!;
    expect(webhookId).toMatch(/^[0-9a-f]{32}$/);
    const test = received.shift()!;
    expect(test.headers['cf-webhook-auth']).toBe('s3cret');
    expect(test.body.text).toContain('test message');
    const got = await cf.alerting.destinations.webhooks.get(webhookId, { account_id: t.accountId });
    expect(got).toMatchObject({ name: 'ops', url: hookUrl, type: 'generic' });
    expect((got as unknown as Record<string, unknown>).secret).toBeUndefined();
    answers = [500];
    const bad = await t.call('POST', `/accounts/${t.accountId}/alerting/v3/destinations/webhooks`, { name: 'broken', url: hookUrl });
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0].message).toContain('answered 500');
  });

  it('accepts both alert_type forms and filter forms, answers the spec form, and supports get/update/delete', async () => {
    const a = await cf.alerting.policies.create({
      account_id: t.accountId,
      name: 'real form',
      alert_type: 'dos_attack_l7',
      enabled: true,
      filters: { zones: [zone.id], target_hostname: [HOST], requests_per_second: ['10'] },
      mechanisms: { webhooks: [{ id: webhookId }] },
    });
    const b = await t.call('POST', `/accounts/${t.accountId}/alerting/v3/policies`, {
      name: 'spec form',
      alert_type: 'layer_3_4_ddos_attack_alert',
      enabled: true,
      filters: { hostnames: ['x.alerts.test'], packets_per_second: 1000, ip_addresses: ['127.0.0.1'], ip_prefixes: ['10.0.0.0/8'], protocols: ['udp'] },
      mechanisms: { email: [{ id: 'ops@alerts.test' }] },
    });
    expect(b.status).toBe(200);
    const one = await cf.alerting.policies.get(a.id!, { account_id: t.accountId });
    expect(one).toMatchObject({ name: 'real form', alert_type: 'http_ddos_attack_alert', enabled: true });
    const spec = await t.call('GET', `/accounts/${t.accountId}/alerting/v3/policies/${b.body.result.id}`);
    expect(spec.body.result.filters).toEqual({ target_hostname: ['x.alerts.test'], packets_per_second: ['1000'], target_ip: ['127.0.0.1', '10.0.0.0/8'], protocol: ['udp'] });
    await cf.alerting.policies.update(b.body.result.id, { account_id: t.accountId, enabled: false });
    expect((await cf.alerting.policies.get(b.body.result.id, { account_id: t.accountId })).enabled).toBe(false);
    const list = [];
    for await (const p of cf.alerting.policies.list({ account_id: t.accountId })) list.push(p);
    expect(list.length).toBe(2);
    const del = await t.call('DELETE', `/accounts/${t.accountId}/alerting/v3/policies/${b.body.result.id}`);
    expect(del.status).toBe(200);
    expect('result' in del.body).toBe(false);
    expect((await t.call('GET', `/accounts/${t.accountId}/alerting/v3/policies/${b.body.result.id}`)).status).toBe(404);
  });

  it('refuses bad input with 400 and the reason', async () => {
    const base = { name: 'x', enabled: true, alert_type: 'dos_attack_l7', mechanisms: { webhooks: [{ id: webhookId }] } };
    const cases: [Record<string, unknown>, string][] = [
      [{ ...base, alert_type: 'dos_attack_l9' }, 'alert_type'],
      [{ ...base, mechanisms: { webhooks: [{ id: 'a'.repeat(32) }] } }, 'does not exist'],
      [{ ...base, filters: { requests_per_second: ['fast'] } }, 'requests_per_second'],
      [{ ...base, filters: { colour: ['red'] } }, 'unknown filter'],
      [{ ...base, mechanisms: { email: [{ id: 'not-an-address' }] } }, 'email'],
      [{ ...base, enabled: 'yes' }, 'enabled'],
    ];
    for (const [body, text] of cases) {
      const res = await t.call('POST', `/accounts/${t.accountId}/alerting/v3/policies`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.errors[0].message).toContain(text);
    }
    const malformed = await t.call('POST', `/accounts/${t.accountId}/alerting/v3/policies`, '{"name":');
    expect(malformed.status).toBe(400);
  });
});

describe('delivery', () => {
  it('an HTTP flood raises start and end alerts with the platform body, email included; a non-matching policy gets none', async () => {
    await cf.alerting.policies.create({ account_id: t.accountId, name: 'other zone', alert_type: 'dos_attack_l7', enabled: true, filters: { zones: ['b'.repeat(32)] }, mechanisms: { webhooks: [{ id: webhookId }] } });
    await cf.alerting.policies.create({ account_id: t.accountId, name: 'mail', alert_type: 'http_ddos_attack_alert' as never, enabled: true, mechanisms: { email: [{ id: 'ops@alerts.test' }], pagerduty: [{ id: 'pd-service' }] } });
    received.length = 0;
    await attack(edgeOf(t));
    const start = await waitFor('start alert', () => received.find((r) => r.body.alert_event === 'ALERT_STATE_EVENT_START'));
    expect(start.headers['cf-webhook-auth']).toBe('s3cret');
    expect(start.body).toMatchObject({ policy_name: 'real form', alert_type: 'dos_attack_l7', account_id: t.accountId });
    expect(start.body.data).toMatchObject({ target_hostname: HOST, zone_tag: zone.id, zone_name: 'alerts.test', action: 'block', ruleset_id: '4d21379b4f9f4bb088e0729962c8b3cf' });
    expect(Number(start.body.data.requests_per_second)).toBeGreaterThan(0);
    const end = await waitFor('end alert', () => received.find((r) => r.body.alert_event === 'ALERT_STATE_EVENT_END' && r.body.alert_correlation_id === start.body.alert_correlation_id));
    expect(end.body.policy_name).toBe('real form');
    expect(received.every((r) => r.body.policy_name === 'real form')).toBe(true);
    await waitFor('email', () => mails.find((m) => m.includes('HTTP DDoS attack')));
    const history = await waitFor('history', async () => {
      const h = await t.call('GET', `/accounts/${t.accountId}/alerting/v3/history?per_page=100`);
      const items = h.body.result as any[];
      // The receiver may have the end alert before the outbox has marked it (and its siblings) done.
      const settled = items.every((d) => d.status !== 'pending');
      return settled && items.some((d) => d.mechanism_type === 'email' && d.status === 'delivered') ? items : undefined;
    });
    expect(history.find((d) => d.mechanism_type === 'pagerduty')).toMatchObject({ status: 'not_deliverable' });
    expect(history.find((d) => d.mechanism_type === 'webhook')).toMatchObject({ status: 'delivered', alert_type: 'http_ddos_attack_alert', mechanism: webhookId });
  });

  it('retries a failing receiver, and a pending alert is delivered after a restart', async () => {
    // Only the webhook policy stays.
    for (const p of await cf.alerting.policies.list({ account_id: t.accountId }).then((r) => r.result)) {
      if (p.name !== 'real form') await cf.alerting.policies.delete(p.id!, { account_id: t.accountId });
    }
    await new Promise((r) => setTimeout(r, 1000)); // the previous attack has ended
    received.length = 0;
    answers = [500, 500];
    await attack(edgeOf(t), '127.0.223.3');
    const retried = await waitFor('retried start alert', () => received.find((r) => r.body.alert_event === 'ALERT_STATE_EVENT_START'));
    expect(answers.length).toBe(0);
    const item = await waitFor('delivered status', async () => {
      const h = await t.call('GET', `/accounts/${t.accountId}/alerting/v3/history?per_page=100`);
      // A flood from one source may start two attacks (the single-source and the host rule).
      return (h.body.result as any[]).find((d) => d.alert_body.includes('EVENT_START') && d.attempts > 1 && d.status !== 'pending');
    });
    expect(item.status).toBe('delivered');
    expect(item.last_error).toBeUndefined();
    expect(retried.body.alert_event).toBe('ALERT_STATE_EVENT_START');
    await waitFor('end alert', () => received.find((r) => r.body.alert_event === 'ALERT_STATE_EVENT_END'));

    // The receiver goes down; the next alert stays pending while the server stops.
    received.length = 0;
    answers = Array(1000).fill(503);
    await attack(edgeOf(t), '127.0.223.4');
    await waitFor('a pending delivery', async () => {
      const r = await t.call('GET', `/accounts/${t.accountId}/alerting/v3/history?per_page=100`);
      return (r.body.result as any[]).find((d) => d.status === 'pending' && d.attempts > 0);
    });
    await t.server.stop();
    answers = [];
    const again = await startTestServer({ ...SERVER, databaseSchema: t.config.databaseSchema }, { dataDir: t.config.dataDir });
    try {
      const delivered = await waitFor('alert after restart', () => received.find((r) => r.body.policy_name === 'real form'));
      expect(delivered.headers['cf-webhook-auth']).toBe('s3cret');
    } finally {
      await again.server.stop();
      if (t.config.databaseSchema && t.config.database.startsWith('postgres')) await dropSchema(t.config.database, t.config.databaseSchema);
      // The first server is already stopped: only its files are left for afterAll.
      t.stop = async () => undefined;
    }
  });
});
