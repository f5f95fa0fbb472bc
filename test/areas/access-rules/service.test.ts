import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lastServer } from '../rulesets/probe.ts';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import type { AccessRuleService } from '../../../src/areas/access-rules/index.ts';

let t: TestServer;
let access: AccessRuleService;
let zone: string;
let other: string;
const changes: unknown[] = [];

beforeAll(async () => {
  t = await startTestServer();
  const { services, events } = lastServer();
  access = services.require<AccessRuleService>('access-rules');
  events.subscribe('access-rules.changed', (e) => changes.push(e));
  zone = (await createZone(t, 'access-decide.test')).id;
  other = (await createZone(t, 'access-decide-other.test')).id;
});
afterAll(() => t.stop());

async function rule(owner: 'zone' | 'account', mode: string, target: string, value: string, zoneId = zone): Promise<string> {
  const path = owner === 'zone' ? `/zones/${zoneId}/firewall/access_rules/rules` : `/accounts/${t.accountId}/firewall/access_rules/rules`;
  const res = await t.call('POST', path, { mode, configuration: { target, value } });
  if (res.status !== 200) throw new Error(res.text);
  return res.body.result.id;
}

const decide = (client: { ip: string; asn?: number; country?: string }, zoneId = zone) => access.decide(zoneId, t.accountId, client);

describe('AccessRuleService.decide', () => {
  it('answers undefined when nothing matches', async () => {
    expect(await decide({ ip: '192.0.2.1', asn: 64496, country: 'DE' })).toBeUndefined();
  });

  it('the most specific target wins: ip > /24 > /16 > asn > country', async () => {
    const country = await rule('zone', 'block', 'country', 'DE');
    const asn = await rule('zone', 'challenge', 'asn', 'AS64496');
    const wide = await rule('zone', 'js_challenge', 'ip_range', '192.0.0.0/16');
    const narrow = await rule('zone', 'managed_challenge', 'ip_range', '192.0.2.0/24');
    const ip = await rule('zone', 'whitelist', 'ip', '192.0.2.1');

    expect(await decide({ ip: '192.0.2.1', asn: 64496, country: 'DE' })).toEqual({ mode: 'whitelist', ruleId: ip, scope: 'zone', target: 'ip' });
    expect(await decide({ ip: '192.0.2.2', asn: 64496, country: 'DE' })).toMatchObject({ mode: 'managed_challenge', ruleId: narrow, target: 'ip_range' });
    expect(await decide({ ip: '192.0.3.2', asn: 64496, country: 'DE' })).toMatchObject({ mode: 'js_challenge', ruleId: wide });
    expect(await decide({ ip: '198.51.100.1', asn: 64496, country: 'de' })).toMatchObject({ mode: 'challenge', ruleId: asn, target: 'asn' });
    expect(await decide({ ip: '198.51.100.1', asn: 1, country: 'DE' })).toMatchObject({ mode: 'block', ruleId: country, target: 'country' });
    expect(await decide({ ip: '198.51.100.1' })).toBeUndefined();
    // An IPv4-mapped IPv6 client address matches IPv4 rules.
    expect(await decide({ ip: '::ffff:192.0.2.1' })).toMatchObject({ ruleId: ip });
  });

  it('account rules apply to every zone; at the same specificity the zone rule wins', async () => {
    const accountIp = await rule('account', 'block', 'ip', '203.0.113.5');
    expect(await decide({ ip: '203.0.113.5' }, other)).toEqual({ mode: 'block', ruleId: accountIp, scope: 'account', target: 'ip' });
    const zoneIp = await rule('zone', 'whitelist', 'ip', '203.0.113.5');
    expect(await decide({ ip: '203.0.113.5' })).toMatchObject({ mode: 'whitelist', ruleId: zoneIp, scope: 'zone' });
    expect(await decide({ ip: '203.0.113.5' }, other)).toMatchObject({ ruleId: accountIp });

    // A more specific account rule beats a less specific zone rule.
    await rule('zone', 'challenge', 'ip_range', '203.0.113.0/24');
    const accountOther = await rule('account', 'block', 'ip', '203.0.113.6');
    expect(await decide({ ip: '203.0.113.6' })).toMatchObject({ ruleId: accountOther, scope: 'account' });
    expect(await decide({ ip: '203.0.113.7' })).toMatchObject({ mode: 'challenge', scope: 'zone' });
  });

  it('matches IPv6 addresses, /64 ip6 rules and IPv6 ranges by prefix length', async () => {
    const host = await rule('zone', 'block', 'ip6', '2001:db8:1:2::10');
    const net64 = await rule('zone', 'challenge', 'ip6', '2001:db8:1:2::/64');
    const net48 = await rule('account', 'js_challenge', 'ip_range', '2001:db8:1::/48');
    const net32 = await rule('zone', 'whitelist', 'ip_range', '2001:db8::/32');
    expect(await decide({ ip: '2001:DB8:1:2:0:0:0:10' })).toMatchObject({ ruleId: host });
    expect(await decide({ ip: '2001:db8:1:2::11' })).toMatchObject({ ruleId: net64 });
    expect(await decide({ ip: '2001:db8:1:3::1' })).toMatchObject({ ruleId: net48, scope: 'account' });
    expect(await decide({ ip: '2001:db8:ffff::1' })).toMatchObject({ ruleId: net32 });
    expect(await decide({ ip: '2001:db9::1' })).toBeUndefined();
  });

  it('reflects writes at once and publishes access-rules.changed', async () => {
    const id = await rule('zone', 'block', 'ip', '192.0.2.200');
    expect(changes.at(-1)).toEqual({ scope: 'zone', id: zone, accountId: t.accountId });
    expect(await decide({ ip: '192.0.2.200' })).toMatchObject({ mode: 'block', ruleId: id });
    await t.call('PATCH', `/zones/${zone}/firewall/access_rules/rules/${id}`, { mode: 'challenge' });
    expect(await decide({ ip: '192.0.2.200' })).toMatchObject({ mode: 'challenge' });
    await t.call('DELETE', `/zones/${zone}/firewall/access_rules/rules/${id}`);
    // The /24 rule of the earlier test applies again.
    expect(await decide({ ip: '192.0.2.200' })).toMatchObject({ target: 'ip_range' });
  });

  it('forgets a deleted zone', async () => {
    const z = (await createZone(t, 'access-decide-gone.test')).id;
    await rule('zone', 'block', 'country', 'FR', z);
    expect(await decide({ ip: '192.0.2.1', country: 'FR' }, z)).toMatchObject({ mode: 'block' });
    await t.call('DELETE', `/zones/${z}`);
    expect(await decide({ ip: '192.0.2.1', country: 'FR' }, z)).toBeUndefined();
  });
});
