import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';

let t: TestServer;
let base: string;
let link: any;
let link2: any;

beforeAll(async () => {
  t = await startTestServer({ cniProvisioningSeconds: 0 });
  base = `/accounts/${t.accountId}/cni`;
  const slots = (await t.call('GET', `${base}/slots?facility=EQ-DC2&speed=10G`)).body.items;
  link = (
    await t.call('POST', `${base}/interconnects`, {
      account: t.accountId,
      type: 'direct',
      slot_id: slots[0].id,
      name: 'dc2-a',
    })
  ).body;
  link2 = (
    await t.call('POST', `${base}/interconnects`, {
      account: t.accountId,
      type: 'direct',
      slot_id: slots[1].id,
      name: 'dc2-b',
    })
  ).body;
});
afterAll(() => t.stop());

const spec = (over: Record<string, unknown> = {}) => ({
  account: t.accountId,
  interconnect: 'dc2-a',
  cust_ip: '192.0.2.1/31',
  edge_ip: '192.0.2.0/31',
  bgp_asn: 64512,
  bgp_password: 'md5-secret',
  vlan: 100,
  ...over,
});

describe('create, get, update, delete', () => {
  it('stores the spec body; the password is never answered in clear', async () => {
    const res = await t.call('POST', `${base}/cnis`, spec());
    expect(res.status).toBe(200);
    expect(res.body.success).toBeUndefined();
    expect(res.body).toMatchObject({
      account: t.accountId,
      interconnect: 'dc2-a',
      cust_ip: '192.0.2.1/31',
      edge_ip: '192.0.2.0/31',
      p2p_ip: '192.0.2.0/31',
      bgp_asn: 64512,
      vlan: 100,
      bgp: { customer_asn: 64512, extra_prefixes: [] },
      magic: { conduit_name: 'dc2-a-v100', description: '', mtu: 1500 },
    });
    expect(res.text).not.toContain('md5-secret');
    expect(res.body.bgp_password).toBe('********');
    expect(res.body.bgp.md5_key).toBe('********');
    const got = await t.call('GET', `${base}/cnis/${res.body.id}`);
    expect(got.body).toEqual(res.body);
    expect(got.text).not.toContain('md5-secret');

    // PUT keeps what it does not send; the mask sent back keeps the password.
    const put = await t.call('PUT', `${base}/cnis/${res.body.id}`, {
      ...got.body,
      vlan: 101,
      bgp_password: '********',
      bgp: { ...got.body.bgp },
    });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({
      vlan: 101,
      bgp_password: '********',
      cust_ip: '192.0.2.1/31',
      created_on: res.body.created_on,
    });
    const cleared = await t.call('PUT', `${base}/cnis/${res.body.id}`, { bgp_password: null });
    expect(cleared.body.bgp_password).toBeNull();
    expect(cleared.body.bgp.md5_key).toBeNull();

    const del = await t.call('DELETE', `${base}/cnis/${res.body.id}`);
    expect(del.status).toBe(200);
    expect(del.text).toBe('');
    const gone = await t.call('GET', `${base}/cnis/${res.body.id}`);
    expect(gone.status).toBe(404);
    expect(gone.body.errors[0].code).toBe(1607);
    expect((await t.call('DELETE', `${base}/cnis/${res.body.id}`)).status).toBe(404);
  });

  it('maps the official body: interconnect, magic, bgp.customer_asn, bgp.md5_key; assigns a /31 and a VLAN', async () => {
    const res = await t.call('POST', `${base}/cnis`, {
      account: t.accountId,
      interconnect: link2.name,
      magic: { conduit_name: 'to-dc2-b', description: 'backup', mtu: 1476 },
      bgp: { customer_asn: 4200000010, extra_prefixes: ['198.51.100.0/24'], md5_key: 'k3y' },
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      interconnect: 'dc2-b',
      bgp_asn: 4200000010,
      vlan: 2,
      magic: { conduit_name: 'to-dc2-b', description: 'backup', mtu: 1476 },
      bgp: { customer_asn: 4200000010, extra_prefixes: ['198.51.100.0/24'], md5_key: '********' },
    });
    expect(res.body.edge_ip).toMatch(/^100\.64\.\d+\.\d*[02468]\/31$/);
    expect(res.body.p2p_ip).toBe(res.body.edge_ip);
    const [ea, ca] = [res.body.edge_ip, res.body.cust_ip].map((s: string) =>
      Number(s.split('/')[0].split('.')[3]),
    );
    expect(ca).toBe(ea + 1);
    // The official PUT sends the whole object, with p2p_ip.
    const put = await t.call('PUT', `${base}/cnis/${res.body.id}`, {
      ...res.body,
      magic: { ...res.body.magic, mtu: 1400 },
      bgp_mode: 'advertise_only',
    });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({
      magic: { mtu: 1400 },
      bgp_mode: 'advertise_only',
      edge_ip: res.body.edge_ip,
    });
    await t.call('DELETE', `${base}/cnis/${res.body.id}`);
  });

  it('takes the ASN from the settings default when none is sent', async () => {
    await t.call('PUT', `${base}/settings`, { default_asn: 64999 });
    const res = await t.call('POST', `${base}/cnis`, { interconnect: link.id });
    expect(res.status).toBe(200);
    expect(res.body.bgp_asn).toBe(64999);
    expect(res.body.interconnect).toBe('dc2-a');
    expect(res.body.bgp_password).toBeNull();
    await t.call('DELETE', `${base}/cnis/${res.body.id}`);
    await t.call('PUT', `${base}/settings`, { default_asn: 65000 });
  });

  it('lists bare {items, next} with cursor/limit and the slot filter', async () => {
    const ids: string[] = [];
    for (let v = 200; v < 203; v++)
      ids.push((await t.call('POST', `${base}/cnis`, { interconnect: 'dc2-a', vlan: v })).body.id);
    const all = await t.call('GET', `${base}/cnis`);
    expect(all.body.items.map((c: any) => c.id)).toEqual(ids);
    expect(all.body.next).toBeNull();
    const first = await t.call('GET', `${base}/cnis?limit=2`);
    expect(first.body.items.map((c: any) => c.id)).toEqual(ids.slice(0, 2));
    expect(first.body.next).toBe(2);
    const rest = await t.call('GET', `${base}/cnis?cursor=2&limit=2`);
    expect(rest.body.items.map((c: any) => c.id)).toEqual(ids.slice(2));
    expect(rest.body.next).toBeNull();
    expect((await t.call('GET', `${base}/cnis?slot=${link.slot_id}`)).body.items).toHaveLength(3);
    expect((await t.call('GET', `${base}/cnis?slot=${link2.slot_id}`)).body.items).toHaveLength(0);
    expect((await t.call('GET', `${base}/cnis?tunnel_id=x`)).body.items).toHaveLength(0);
    // An interconnect in use cannot be deleted.
    const refused = await t.call('DELETE', `${base}/interconnects/dc2-a`);
    expect(refused.status).toBe(409);
    expect(refused.body.errors[0].code).toBe(1606);
    for (const id of ids) await t.call('DELETE', `${base}/cnis/${id}`);
  });
});

describe('addressing, ASN and VLAN rules', () => {
  const bad: [string, Record<string, unknown>, RegExp][] = [
    ['a prefix other than /31', { cust_ip: '192.0.2.1/30', edge_ip: '192.0.2.0/30' }, /\/31/],
    [
      'an address without prefix',
      { cust_ip: '192.0.2.1', edge_ip: '192.0.2.0/31' },
      /A\.B\.C\.D\/N/,
    ],
    ['an invalid address', { cust_ip: '192.0.2.300/31' }, /IPv4/],
    ['the same address twice', { cust_ip: '192.0.2.0/31', edge_ip: '192.0.2.0/31' }, /different/],
    ['addresses of two /31s', { cust_ip: '192.0.2.2/31', edge_ip: '192.0.2.1/31' }, /same \/31/],
    ['one address only', { cust_ip: undefined, edge_ip: '192.0.2.0/31' }, /both/],
    ['edge_ip and p2p_ip disagreeing', { p2p_ip: '192.0.2.4/31' }, /p2p_ip/],
    ['a loopback address', { cust_ip: '127.0.0.1/31', edge_ip: '127.0.0.0/31' }, /loopback/],
    ['ASN 0', { bgp_asn: 0 }, /bgp_asn/],
    ['AS_TRANS', { bgp_asn: 23456 }, /bgp_asn/],
    ['a documentation ASN', { bgp_asn: 64500 }, /bgp_asn/],
    ['an ASN above 32 bits', { bgp_asn: 4294967296 }, /bgp_asn/],
    ["the platform's own ASN", { bgp_asn: 13335 }, /bgp_asn/],
    ['bgp_asn and bgp.customer_asn disagreeing', { bgp: { customer_asn: 65001 } }, /customer_asn/],
    ['VLAN 0', { vlan: 0 }, /vlan/],
    ['VLAN 4095', { vlan: 4095 }, /vlan/],
    ['a non-integer VLAN', { vlan: 10.5 }, /vlan/],
    ['a password over 80 characters', { bgp_password: 'p'.repeat(81) }, /bgp_password/],
    ['an unknown interconnect', { interconnect: 'nowhere' }, /interconnect/],
    ['no interconnect', { interconnect: undefined }, /interconnect/],
    ['another account', { account: 'c'.repeat(32) }, /account/],
    ['an MTU below 576', { magic: { mtu: 100 } }, /mtu/],
    [
      'an invalid extra prefix',
      { bgp: { customer_asn: 64512, extra_prefixes: ['198.51.100.1/24'] } },
      /host bits/,
    ],
  ];
  for (const [what, over, message] of bad) {
    it(`rejects ${what} with 400`, async () => {
      const res = await t.call('POST', `${base}/cnis`, spec(over));
      expect(res.status).toBe(400);
      expect(res.body.errors.map((e: any) => e.message).join(' ')).toMatch(message);
    });
  }

  it('refuses an overlapping /31, a duplicate VLAN on one interconnect and a duplicate conduit name (409)', async () => {
    const first = await t.call(
      'POST',
      `${base}/cnis`,
      spec({ vlan: 300, magic: { conduit_name: 'c-300' } }),
    );
    expect(first.status).toBe(200);
    // The same /31 written the other way round is still the same /31.
    const overlap = await t.call(
      'POST',
      `${base}/cnis`,
      spec({ vlan: 301, cust_ip: '192.0.2.0/31', edge_ip: '192.0.2.1/31' }),
    );
    expect(overlap.status).toBe(409);
    expect(overlap.headers.get('x-should-retry')).toBe('false');
    expect(overlap.body.errors[0].message).toMatch(/192\.0\.2\.0\/31/);
    const vlan = await t.call(
      'POST',
      `${base}/cnis`,
      spec({ vlan: 300, cust_ip: '192.0.2.3/31', edge_ip: '192.0.2.2/31' }),
    );
    expect(vlan.status).toBe(409);
    expect(vlan.body.errors[0].message).toMatch(/VLAN 300/);
    // The same VLAN on another interconnect is fine.
    const other = await t.call(
      'POST',
      `${base}/cnis`,
      spec({ interconnect: 'dc2-b', vlan: 300, cust_ip: '192.0.2.3/31', edge_ip: '192.0.2.2/31' }),
    );
    expect(other.status).toBe(200);
    const conduit = await t.call(
      'POST',
      `${base}/cnis`,
      spec({
        vlan: 302,
        cust_ip: '192.0.2.5/31',
        edge_ip: '192.0.2.4/31',
        magic: { conduit_name: 'c-300' },
      }),
    );
    expect(conduit.status).toBe(409);
    // An update may keep its own /31 and VLAN but not take another's.
    expect((await t.call('PUT', `${base}/cnis/${first.body.id}`, { vlan: 300 })).status).toBe(200);
    const steal = await t.call('PUT', `${base}/cnis/${first.body.id}`, {
      cust_ip: '192.0.2.3/31',
      edge_ip: '192.0.2.2/31',
      interconnect: 'dc2-b',
    });
    expect(steal.status).toBe(409);
    expect(
      (await t.call('PUT', `${base}/cnis/${first.body.id}`, { id: other.body.id })).status,
    ).toBe(400);
    await t.call('DELETE', `${base}/cnis/${first.body.id}`);
    await t.call('DELETE', `${base}/cnis/${other.body.id}`);
  });

  it('accepts private 16- and 32-bit ASNs and public ones', async () => {
    for (const [i, asn] of [64512, 65534, 4200000000, 4294967294, 174, 6939].entries()) {
      const res = await t.call(
        'POST',
        `${base}/cnis`,
        spec({
          bgp_asn: asn,
          vlan: 400 + i,
          cust_ip: `198.18.0.${2 * i + 1}/31`,
          edge_ip: `198.18.0.${2 * i}/31`,
        }),
      );
      expect(res.status, String(asn)).toBe(200);
      await t.call('DELETE', `${base}/cnis/${res.body.id}`);
    }
  });

  it('malformed ids are 400, unknown ones 404', async () => {
    expect((await t.call('GET', `${base}/cnis/abc`)).status).toBe(400);
    expect(
      (await t.call('PUT', `${base}/cnis/00000000-0000-4000-8000-000000000000`, { vlan: 5 }))
        .status,
    ).toBe(404);
  });
});
