import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, createZone, startTestServer, type TestServer } from '../../support/server.ts';

let t: TestServer;
let zone: { id: string; name: string };
const zr = (path = '', zoneId = zone.id) => `/zones/${zoneId}/firewall/access_rules/rules${path}`;
const ar = (path = '') => `/accounts/${t.accountId}/firewall/access_rules/rules${path}`;

beforeAll(async () => {
  t = await startTestServer();
  zone = await createZone(t, 'access-rules-routes.test');
});
afterAll(() => t.stop());

describe('create, get, edit, delete', () => {
  it('creates a zone rule with canonical value, scope and allowed modes', async () => {
    const res = await t.call('POST', zr(), { mode: 'block', configuration: { target: 'ip6', value: '2001:DB8:0::7' }, notes: 'bad actor' });
    expect(res.status).toBe(200);
    const rule = res.body.result;
    expect(rule).toMatchObject({
      mode: 'block',
      configuration: { target: 'ip6', value: '2001:db8::7' },
      notes: 'bad actor',
      paused: false,
      allowed_modes: ['block', 'challenge', 'whitelist', 'js_challenge', 'managed_challenge'],
      scope: { id: zone.id, type: 'zone', name: zone.name },
    });
    expect(rule.id).toMatch(/^[0-9a-f]{32}$/);
    expect((await t.call('GET', zr(`/${rule.id}`))).body.result).toEqual(rule);
  });

  it('PATCH changes mode and notes, DELETE answers {id}', async () => {
    const rule = (await t.call('POST', zr(), { mode: 'challenge', configuration: { target: 'asn', value: 'as64500' } })).body.result;
    expect(rule.configuration.value).toBe('AS64500');
    expect(rule.notes).toBe('');
    const edited = await t.call('PATCH', zr(`/${rule.id}`), { mode: 'managed_challenge', notes: 'softer' });
    expect(edited.status).toBe(200);
    expect(edited.body.result).toMatchObject({ id: rule.id, mode: 'managed_challenge', notes: 'softer', created_on: rule.created_on });
    const del = await t.call('DELETE', zr(`/${rule.id}`));
    expect(del.status).toBe(200);
    expect(del.body.result).toEqual({ id: rule.id });
    const gone = await t.call('GET', zr(`/${rule.id}`));
    expect(gone.status).toBe(404);
    expect((await t.call('DELETE', zr(`/${rule.id}`))).status).toBe(404);
  });

  it('refuses a duplicate target and value in the same scope (400, 10009), also after canonicalisation', async () => {
    await t.call('POST', zr(), { mode: 'block', configuration: { target: 'ip', value: '203.0.113.9' } });
    const dup = await t.call('POST', zr(), { mode: 'whitelist', configuration: { target: 'ip', value: '203.0.113.9' } });
    expect(dup.status).toBe(400);
    expect(dup.body.errors[0]).toMatchObject({ code: 10009, message: 'firewallaccessrules.api.duplicate_of_existing' });
    await t.call('POST', zr(), { mode: 'block', configuration: { target: 'ip', value: '2001:db8::99' } });
    expect((await t.call('POST', zr(), { mode: 'block', configuration: { target: 'ip6', value: '2001:DB8:0:0::99' } })).status).toBe(400);
    // The same value at account level is a different rule.
    expect((await t.call('POST', ar(), { mode: 'block', configuration: { target: 'ip', value: '203.0.113.9' } })).status).toBe(200);
  });

  it('PATCH to a configuration another rule has is refused', async () => {
    const a = (await t.call('POST', zr(), { mode: 'block', configuration: { target: 'country', value: 'NZ' } })).body.result;
    const b = (await t.call('POST', zr(), { mode: 'block', configuration: { target: 'country', value: 'AU' } })).body.result;
    const res = await t.call('PATCH', zr(`/${b.id}`), { mode: 'block', configuration: { target: 'country', value: 'nz' } });
    expect(res.status).toBe(400);
    expect(res.body.errors[0].code).toBe(10009);
    // Sending the rule's own configuration back is fine (the official client always sends it).
    expect((await t.call('PATCH', zr(`/${a.id}`), { mode: 'challenge', configuration: { target: 'country', value: 'NZ' } })).status).toBe(200);
  });
});

describe('account rules', () => {
  it('apply to every zone: a zone list shows them with scope account; only the account routes change them', async () => {
    const rule = (await t.call('POST', ar(), { mode: 'js_challenge', configuration: { target: 'ip_range', value: '198.51.100.0/24' }, notes: 'account wide' })).body.result;
    expect(rule.scope).toEqual({ id: t.accountId, type: 'account' });
    const other = await createZone(t, 'access-rules-other.test');
    for (const z of [zone.id, other.id]) {
      const list = await t.call('GET', zr('?per_page=1000', z));
      expect(list.body.result.find((r: { id: string }) => r.id === rule.id)).toMatchObject({ scope: { type: 'account' } });
    }
    expect((await t.call('GET', zr(`/${rule.id}`, other.id))).status).toBe(200);
    const viaZone = await t.call('PATCH', zr(`/${rule.id}`), { mode: 'block' });
    expect(viaZone.status).toBe(400);
    expect(viaZone.body.errors[0].code).toBe(10015);
    expect((await t.call('DELETE', zr(`/${rule.id}`))).status).toBe(400);
    // The account list holds only account rules.
    const accountList = await t.call('GET', ar('?per_page=1000'));
    expect(accountList.body.result.every((r: { scope: { type: string } }) => r.scope.type === 'account')).toBe(true);
    expect((await t.call('PATCH', ar(`/${rule.id}`), { mode: 'block' })).body.result.mode).toBe('block');
  });

  it('404 for an unknown account', async () => {
    expect((await t.call('GET', `/accounts/${'0'.repeat(32)}/firewall/access_rules/rules`)).status).toBe(404);
  });
});

describe('list filters, order and paging', () => {
  let z: string;
  beforeAll(async () => {
    z = (await createZone(t, 'access-rules-list.test')).id;
    const rules: [string, string, string, string][] = [
      ['block', 'ip', '192.0.2.1', 'Attack 26/02'],
      ['block', 'ip', '192.0.2.2', 'attack 27/02'],
      ['challenge', 'country', 'FR', 'country'],
      ['whitelist', 'asn', 'AS13335', 'partner'],
      ['whitelist', 'ip_range', '10.20.0.0/16', 'office'],
    ];
    for (const [mode, target, value, notes] of rules) await t.call('POST', zr('', z), { mode, configuration: { target, value }, notes });
  });
  const own = (body: { result: { scope: { type: string } }[] }) => body.result.filter((r) => r.scope.type === 'zone');

  it('filters by mode, target, value and notes (case-insensitive substring)', async () => {
    expect(own((await t.call('GET', zr('?mode=block', z))).body)).toHaveLength(2);
    expect(own((await t.call('GET', zr('?configuration.target=ip', z))).body)).toHaveLength(2);
    const byValue = own((await t.call('GET', zr('?configuration.value=192.0.2.2', z))).body);
    expect(byValue.map((r: any) => r.notes)).toEqual(['attack 27/02']);
    expect(own((await t.call('GET', zr('?notes=ATTACK', z))).body)).toHaveLength(2);
    expect(own((await t.call('GET', zr('?mode=whitelist&configuration.target=asn', z))).body)).toHaveLength(1);
    expect(own((await t.call('GET', zr('?mode=whitelist&configuration.target=country&match=any', z))).body)).toHaveLength(3);
  });

  it('orders and pages; a page past the end is empty', async () => {
    const ordered = own((await t.call('GET', zr('?mode=whitelist&order=configuration.value&direction=desc', z))).body);
    expect(ordered.map((r: any) => r.configuration.value)).toEqual(['AS13335', '10.20.0.0/16']);
    const p1 = await t.call('GET', zr('?per_page=2&page=1&order=mode', z));
    expect(p1.body.result).toHaveLength(2);
    expect(p1.body.result_info).toMatchObject({ page: 1, per_page: 2 });
    const total = p1.body.result_info.total_count;
    const past = await t.call('GET', zr(`?per_page=2&page=${Math.ceil(total / 2) + 1}`, z));
    expect(past.status).toBe(200);
    expect(past.body.result).toEqual([]);
  });
});

describe('bad input', () => {
  const cases: [string, unknown][] = [
    ['an unknown mode', { mode: 'deny', configuration: { target: 'ip', value: '192.0.2.1' } }],
    ['an unknown target', { mode: 'block', configuration: { target: 'cidr', value: '192.0.2.0/24' } }],
    ['a bad IPv4', { mode: 'block', configuration: { target: 'ip', value: '192.0.2.300' } }],
    ['an IPv4 /8 range', { mode: 'block', configuration: { target: 'ip_range', value: '10.0.0.0/8' } }],
    ['a range with host bits', { mode: 'block', configuration: { target: 'ip_range', value: '192.0.2.1/24' } }],
    ['an IPv6 /56 range', { mode: 'block', configuration: { target: 'ip_range', value: '2001:db8::/56' } }],
    ['a bad ASN', { mode: 'block', configuration: { target: 'asn', value: 'cloudflare' } }],
    ['a bad country', { mode: 'block', configuration: { target: 'country', value: 'Germany' } }],
    ['no configuration', { mode: 'block' }],
  ];
  for (const [what, body] of cases) {
    it(`rejects ${what}`, async () => {
      const res = await t.call('POST', zr(), body);
      expect(res.status).toBe(400);
      expect(res.body.success).toBe(false);
      expect(res.body.errors[0].message.length).toBeGreaterThan(0);
    });
  }

  it('malformed rule ids are 400', async () => {
    expect((await t.call('GET', zr('/nope'))).status).toBe(400);
  });
});

describe('authentication and permissions', () => {
  it('401 without credentials, 403 without Firewall Services, read-only tokens cannot write', async () => {
    expect((await t.call('GET', zr(), undefined, { authorization: '' })).status).toBe(401);
    const dns = await createToken(t, ['DNS Write'], { [`com.cloudflare.api.account.zone.${zone.id}`]: '*' });
    expect((await t.call('GET', zr(), undefined, { authorization: `Bearer ${dns}` })).status).toBe(403);
    const reader = await createToken(t, ['Firewall Services Read'], { [`com.cloudflare.api.account.zone.${zone.id}`]: '*' });
    const auth = { authorization: `Bearer ${reader}` };
    expect((await t.call('GET', zr(), undefined, auth)).status).toBe(200);
    expect((await t.call('POST', zr(), { mode: 'block', configuration: { target: 'ip', value: '192.0.2.77' } }, auth)).status).toBe(403);
    expect((await t.call('GET', ar(), undefined, auth)).status).toBe(403);
    const account = await createToken(t, ['Account Firewall Access Rules Write'], { [`com.cloudflare.api.account.${t.accountId}`]: '*' });
    expect((await t.call('POST', ar(), { mode: 'block', configuration: { target: 'ip', value: '192.0.2.78' } }, { authorization: `Bearer ${account}` })).status).toBe(200);
  });
});
