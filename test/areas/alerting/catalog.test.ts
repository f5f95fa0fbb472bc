/**
 * What the official client asks before it writes a policy: `alerting.availableAlerts.list` (the
 * alert types Outpost raises, each usable in a policy) and `alerting.destinations.eligible.get`
 * (email ready only with an SMTP server, webhooks once a destination exists, PagerDuty not
 * deliverable), `alerting.history.list`, `alerting.destinations.pagerduty.*` (none connectable). And the policy filters applied to attack records, one filter at a time.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { filtersMatch } from '../../../src/areas/alerting/dispatch.ts';
import type { AttackRecord } from '../../../src/areas/ddos/index.ts';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { sdk, type Cloudflare } from '../../support/sdk.ts';

describe('alert catalogue and eligible destinations', () => {
  let t: TestServer;
  let cf: Cloudflare;
  let receiver: http.Server;

  beforeAll(async () => {
    receiver = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => res.end('ok'));
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
    t = await startTestServer();
    cf = sdk(t);
  });
  afterAll(async () => {
    await t?.stop();
    receiver?.close();
  });

  it('lists the DDoS and tunnel health alert types with their filters; each one is accepted in a policy', async () => {
    const available = await cf.alerting.availableAlerts.list({ account_id: t.accountId });
    const types = Object.values(available).flat();
    expect(types.map((a) => a.type).sort()).toEqual(['advanced_ddos_attack_l4_alert', 'advanced_ddos_attack_l7_alert', 'dos_attack_l4', 'dos_attack_l7', 'magic_tunnel_health_check_event', 'magic_wan_tunnel_health']);
    const l4 = types.find((a) => a.type === 'dos_attack_l4')!;
    expect(l4.display_name).toBeTruthy();
    expect(l4.filter_options).toContainEqual({ ComparisonOperator: '==', Key: 'target_ip', Optional: true });
    for (const a of types) {
      const filters = Object.fromEntries((a.filter_options as { Key: string }[]).map((o) => [o.Key, o.Key.endsWith('_second') ? ['1'] : o.Key === 'target_ip' ? ['127.0.0.1'] : o.Key === 'zones' ? ['a'.repeat(32)] : ['x']]));
      const res = await t.call('POST', `/accounts/${t.accountId}/alerting/v3/policies`, { name: a.type, alert_type: a.type, enabled: true, filters, mechanisms: { email: [{ id: 'ops@alerts.test' }] } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    expect((await t.call('GET', `/accounts/${'f'.repeat(32)}/alerting/v3/available_alerts`)).status).toBe(404);
  });

  it('reports which mechanisms are ready: webhooks once a destination exists, no email without SMTP', async () => {
    const before = await cf.alerting.destinations.eligible.get({ account_id: t.accountId });
    expect(before).toEqual({
      email: [{ type: 'email', eligible: true, ready: false }],
      pagerduty: [{ type: 'pagerduty', eligible: false, ready: false }],
      webhooks: [{ type: 'webhook', eligible: true, ready: false }],
    });
    await cf.alerting.destinations.webhooks.create({ account_id: t.accountId, name: 'ops', url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook` });
    const after = await cf.alerting.destinations.eligible.get({ account_id: t.accountId });
    expect(after.webhooks).toEqual([{ type: 'webhook', eligible: true, ready: true }]);
    // PagerDuty cannot be connected: none listed, a connection is refused with the reason.
    const connected = [];
    for await (const p of cf.alerting.destinations.pagerduty.get({ account_id: t.accountId })) connected.push(p);
    expect(connected).toEqual([]);
    const connect = await t.call('POST', `/accounts/${t.accountId}/alerting/v3/destinations/pagerduty/connect`);
    expect(connect.status).toBe(400);
    expect(connect.body.errors[0].message).toContain('PagerDuty');
    expect((await t.call('GET', `/accounts/${t.accountId}/alerting/v3/destinations/pagerduty/connect/abc`)).status).toBe(404);
    await cf.alerting.destinations.pagerduty.delete({ account_id: t.accountId });
    // No attack ran: the history is an empty page through the client's paginated list.
    const history = await cf.alerting.history.list({ account_id: t.accountId, per_page: 5 });
    expect(history.result).toEqual([]);
  });
});

describe('policy filters against an attack', () => {
  const l4: AttackRecord = {
    id: 'a'.repeat(32), layer: 'l4', status: 'active', attack_type: 'udp-flood', zone_id: 'z'.repeat(32), zone_name: 'example.test',
    target_hostname: 'game.example.test', target_ip: '10.1.2.3', target_port: 7000, protocol: 'UDP', ruleset_id: 'r', rule_id: 'x',
    rule_description: 'd', category: 'udp-flood', action: 'block', sensitivity_level: 'default', detection: 'single_source',
    start_time: '2026-01-01T00:00:00Z', peak_rate: 5000, peak_mbps: 40, mitigated: 0, logged: 0,
  } as AttackRecord;
  const l7 = { ...l4, layer: 'l7', protocol: undefined, target_ip: undefined, target_hostname: 'www.example.test', peak_rate: 800, peak_mbps: undefined } as AttackRecord;

  it('each filter lets a matching attack through and stops a different one', () => {
    const cases: [Record<string, string[]>, AttackRecord, boolean][] = [
      [{ zones: ['z'.repeat(32)] }, l4, true],
      [{ zones: ['y'.repeat(32)] }, l4, false],
      [{ target_hostname: ['WWW.example.test'] }, l7, true],
      [{ target_hostname: ['other.example.test'] }, l7, false],
      [{ target_zone_name: ['example.test'] }, l7, true],
      [{ target_zone_name: ['other.test'] }, l7, false],
      [{ protocol: ['udp'] }, l4, true],
      [{ protocol: ['tcp'] }, l4, false],
      [{ target_ip: ['10.0.0.0/8'] }, l4, true],
      [{ target_ip: ['10.1.2.4', '192.168.0.0/16'] }, l4, false],
      [{ requests_per_second: ['500', '900'] }, l7, true],
      [{ requests_per_second: ['1000'] }, l7, false],
      [{ requests_per_second: ['1'] }, l4, false],
      [{ packets_per_second: ['5000'] }, l4, true],
      [{ packets_per_second: ['5001'] }, l4, false],
      [{ megabits_per_second: ['40'] }, l4, true],
      [{ megabits_per_second: ['41'] }, l4, false],
      [{ zones: ['z'.repeat(32)], protocol: ['tcp'] }, l4, false],
    ];
    for (const [filters, attack, want] of cases) expect(filtersMatch(filters, attack), JSON.stringify(filters)).toBe(want);
  });
});
