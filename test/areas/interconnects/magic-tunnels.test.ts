/**
 * GRE and IPsec tunnels (`/accounts/{a}/magic/gre_tunnels`, `/magic/ipsec_tunnels`): every call of
 * the official client, hostile bodies over raw HTTP, and the health prober against real targets —
 * loopback (answers: healthy) and an address on a veth pair whose far end sits in a network
 * namespace this file creates and deletes (does not answer: down). No probe leaves the machine.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { Ajv } from 'ajv';
import { randomBytes, randomInt } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TunnelProber, type Ping } from '../../../src/areas/interconnects/prober.ts';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';

let t: TestServer;
let cf: Cloudflare;
let account_id: string;
let base: string;
const events: { status: string; previous: string; id: string; kind: string }[] = [];
let unsubscribe: () => void;

beforeAll(async () => {
  t = await startTestServer({ magicProbeIntervalMs: 100 });
  cf = sdk(t);
  account_id = t.accountId;
  base = `/accounts/${account_id}/magic`;
  unsubscribe = t.server.events.subscribe('magic.tunnel_health', (p) => events.push(p as never));
});
afterAll(async () => {
  unsubscribe?.();
  await t.stop();
});

/** Polls `read` until `done` holds, for at most `tries` × 100 ms; returns the last value. */
async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, tries = 200): Promise<T> {
  let v = await read();
  for (let i = 0; i < tries && !done(v); i++) {
    await new Promise((r) => setTimeout(r, 100));
    v = await read();
  }
  return v;
}

const OFF = { enabled: false } as const;

const gre = (over: Record<string, unknown> = {}) => ({
  name: `gre_${randomBytes(3).toString('hex')}`,
  cloudflare_gre_endpoint: '203.0.113.1',
  customer_gre_endpoint: '198.51.100.7',
  interface_address: '10.212.0.8/31',
  health_check: OFF,
  ...over,
});

describe('official client: magicTransit.greTunnels', () => {
  it('create → get → list → update → bulkUpdate → delete', async () => {
    const created = await cf.magicTransit.greTunnels.create({
      account_id,
      name: 'GRE_1',
      cloudflare_gre_endpoint: '203.0.113.1',
      customer_gre_endpoint: '198.51.100.7',
      interface_address: '10.212.0.0/31',
      description: 'first',
      ttl: 64,
      health_check: { enabled: false, rate: 'low', type: 'request', target: '198.51.100.8' },
    });
    expect(created).toMatchObject({
      name: 'GRE_1',
      cloudflare_gre_endpoint: '203.0.113.1',
      customer_gre_endpoint: '198.51.100.7',
      interface_address: '10.212.0.0/31',
      mtu: 1476,
      ttl: 64,
      health_check: { enabled: false, rate: 'low', type: 'request', direction: 'unidirectional', target: '198.51.100.8' },
    });
    expect(created.id).toMatch(/^[0-9a-f]{32}$/);

    const got = await cf.magicTransit.greTunnels.get(created.id, { account_id });
    expect(got.gre_tunnel).toMatchObject({ id: created.id, description: 'first' });
    const objectForm = await cf.magicTransit.greTunnels.get(created.id, {
      account_id,
      'x-magic-new-hc-target': true,
    });
    expect(objectForm.gre_tunnel?.health_check?.target).toEqual({ saved: '198.51.100.8', effective: '198.51.100.8' });

    const listed = await cf.magicTransit.greTunnels.list({ account_id });
    expect(listed.gre_tunnels?.map((g) => g.id)).toContain(created.id);

    const updated = await cf.magicTransit.greTunnels.update(created.id, {
      account_id,
      name: 'GRE_1',
      cloudflare_gre_endpoint: '203.0.113.1',
      customer_gre_endpoint: '198.51.100.9',
      interface_address: '10.212.0.0/31',
      mtu: 1400,
      health_check: { rate: 'high', direction: 'bidirectional' },
    });
    expect(updated.modified).toBe(true);
    expect(updated.modified_gre_tunnel).toMatchObject({
      customer_gre_endpoint: '198.51.100.9',
      mtu: 1400,
      // Merged field by field: what was not sent keeps its value.
      health_check: { enabled: false, rate: 'high', type: 'request', direction: 'bidirectional' },
    });

    const bulk = await cf.magicTransit.greTunnels.bulkUpdate({
      account_id,
      body: { gre_tunnels: [{ id: created.id, description: 'bulk' }] },
    });
    expect(bulk.modified).toBe(true);
    expect(bulk.modified_gre_tunnels?.[0]).toMatchObject({ id: created.id, description: 'bulk' });
    expect((await cf.magicTransit.greTunnels.get(created.id, { account_id })).gre_tunnel?.description).toBe('bulk');

    const deleted = await cf.magicTransit.greTunnels.delete(created.id, { account_id });
    expect(deleted).toMatchObject({ deleted: true, deleted_gre_tunnel: { id: created.id, name: 'GRE_1' } });
    await expect(cf.magicTransit.greTunnels.get(created.id, { account_id })).rejects.toMatchObject({ status: 404 });
  });

  it('accepts the spec rate "medium" as the platform\'s "mid"', async () => {
    const created = await cf.magicTransit.greTunnels.create({
      account_id,
      ...gre(),
      health_check: { enabled: false, rate: 'medium' as 'mid' },
    });
    expect(created.health_check?.rate).toBe('mid');
    await cf.magicTransit.greTunnels.delete(created.id, { account_id });
  });
});

describe('official client: magicTransit.ipsecTunnels', () => {
  it('create → pskGenerate → get → list → update → bulkUpdate → delete; the PSK is shown once', async () => {
    const created = await cf.magicTransit.ipsecTunnels.create({
      account_id,
      name: 'IPsec_1',
      cloudflare_endpoint: '203.0.113.1',
      customer_endpoint: '198.51.100.20',
      interface_address: '10.212.1.0/31',
      replay_protection: true,
      custom_remote_identities: { fqdn_id: `site1.${account_id}.custom.ipsec.cloudflare.com` },
      health_check: { enabled: false },
    });
    expect(created).toMatchObject({
      name: 'IPsec_1',
      cloudflare_endpoint: '203.0.113.1',
      customer_endpoint: '198.51.100.20',
      allow_null_cipher: false,
      replay_protection: true,
      custom_remote_identities: { fqdn_id: `site1.${account_id}.custom.ipsec.cloudflare.com` },
    });
    expect(created).not.toHaveProperty('psk');
    expect(created).not.toHaveProperty('psk_metadata');

    const gen = await cf.magicTransit.ipsecTunnels.pskGenerate(created.id, { account_id });
    expect(gen.ipsec_tunnel_id).toBe(created.id);
    expect(gen.psk).toMatch(/^[A-Za-z0-9]{32}$/);
    expect(gen.psk_metadata?.last_generated_on).toBeTruthy();
    const again = await cf.magicTransit.ipsecTunnels.pskGenerate(created.id, { account_id });
    expect(again.psk).not.toBe(gen.psk);

    const got = (await cf.magicTransit.ipsecTunnels.get(created.id, { account_id })).ipsec_tunnel;
    expect(got).toMatchObject({ id: created.id, psk_metadata: { last_generated_on: again.psk_metadata?.last_generated_on } });
    expect(JSON.stringify(got)).not.toContain(again.psk!);
    const listed = await cf.magicTransit.ipsecTunnels.list({ account_id });
    expect(listed.ipsec_tunnels?.map((x) => x.id)).toContain(created.id);
    expect(JSON.stringify(listed)).not.toContain(again.psk!);

    const updated = await cf.magicTransit.ipsecTunnels.update(created.id, {
      account_id,
      name: 'IPsec_1',
      cloudflare_endpoint: '203.0.113.1',
      interface_address: '10.212.1.0/31',
      customer_endpoint: '198.51.100.21',
      replay_protection: false,
    });
    expect(updated).toMatchObject({
      modified: true,
      modified_ipsec_tunnel: { customer_endpoint: '198.51.100.21', replay_protection: false, allow_null_cipher: false },
    });
    // The client's update type has no allow_null_cipher; the API takes it (raw PUT).
    const nullCipher = await t.call('PUT', `${base}/ipsec_tunnels/${created.id}`, { allow_null_cipher: true });
    expect(nullCipher.body.result.modified_ipsec_tunnel.allow_null_cipher).toBe(true);

    const bulk = await cf.magicTransit.ipsecTunnels.bulkUpdate({
      account_id,
      body: [{ id: created.id, description: 'bulk' }],
    });
    expect(bulk).toMatchObject({ modified: true, modified_ipsec_tunnels: [{ id: created.id, description: 'bulk' }] });

    const deleted = await cf.magicTransit.ipsecTunnels.delete(created.id, { account_id });
    expect(deleted).toMatchObject({ deleted: true, deleted_ipsec_tunnel: { id: created.id } });
    await expect(cf.magicTransit.ipsecTunnels.pskGenerate(created.id, { account_id })).rejects.toMatchObject({ status: 404 });
  });
});

describe('the official schema', () => {
  /** The update answer against magic-gre-tunnels-update-gre-tunnel of the official document. */
  function updateValidator() {
    const doc = JSON.parse(readFileSync('/work/shared/contract/openapi-subset.json', 'utf8'));
    const rebase = (node: unknown): unknown => {
      if (Array.isArray(node)) return node.map(rebase);
      if (!node || typeof node !== 'object') return node;
      return Object.fromEntries(
        Object.entries(node).map(([k, v]) => [k, k === '$ref' && typeof v === 'string' && v.startsWith('#/') ? `c${v}` : rebase(v)]),
      );
    };
    const ajv = new Ajv({ strict: false, allErrors: true });
    ajv.addFormat('date-time', (v: string) => !Number.isNaN(Date.parse(v)) && /T/.test(v));
    ajv.addFormat('ipv4', /^\d{1,3}(\.\d{1,3}){3}$/);
    ajv.addFormat('cidr', /^[0-9a-f.:]+\/\d{1,3}$/i);
    ajv.addFormat('int32', { type: 'number', validate: (n: number) => Number.isInteger(n) && Math.abs(n) < 2 ** 31 });
    ajv.addSchema(doc, 'c');
    const op = doc.paths['/accounts/{account_id}/magic/gre_tunnels/{gre_tunnel_id}'].put;
    expect(op.operationId).toBe('magic-gre-tunnels-update-gre-tunnel');
    return ajv.compile(rebase(op.responses['200'].content['application/json'].schema) as object);
  }

  it('the update answer validates (string and object target forms); a broken one does not', async () => {
    const validate = updateValidator();
    const created = await t.call('POST', `${base}/gre_tunnels`, gre());
    const id = created.body.result.id;
    const res = await t.call('PUT', `${base}/gre_tunnels/${id}`, { health_check: { rate: 'low', type: 'request' } });
    expect(validate(res.body), JSON.stringify(validate.errors)).toBe(true);
    const obj = await t.call('PUT', `${base}/gre_tunnels/${id}`, { ttl: 100 }, { 'x-magic-new-hc-target': 'true' });
    expect(validate(obj.body), JSON.stringify(validate.errors)).toBe(true);
    const broken = structuredClone(res.body);
    broken.result.modified_gre_tunnel.health_check.rate = 'medium';
    expect(validate(broken)).toBe(false);
    expect((await t.call('GET', '/openapi.json')).body.paths['/accounts/{account_id}/magic/gre_tunnels/{gre_tunnel_id}']?.put?.operationId).toBe(
      'magic-gre-tunnels-update-gre-tunnel',
    );
    await t.call('DELETE', `${base}/gre_tunnels/${id}`);
  });
});

describe('hostile input over raw HTTP', () => {
  const post = (body: unknown) => t.call('POST', `${base}/gre_tunnels`, body);
  const messages = (res: { body: { errors: { message: string }[] } }) => res.body.errors.map((e) => e.message).join(' | ');

  it.each([
    ['missing name', { name: undefined }, 'name: required'],
    ['a name with spaces', { name: 'my tunnel' }, 'name:'],
    ['a name longer than 15', { name: 'a'.repeat(16) }, 'name:'],
    ['a bad endpoint', { customer_gre_endpoint: '198.51.100.300' }, 'customer_gre_endpoint'],
    ['a hostname endpoint', { cloudflare_gre_endpoint: 'example.com' }, 'cloudflare_gre_endpoint'],
    ['an octal-looking endpoint', { customer_gre_endpoint: '010.0.0.1' }, 'customer_gre_endpoint'],
    ['a multicast endpoint', { customer_gre_endpoint: '224.0.0.5' }, 'customer_gre_endpoint'],
    ['missing interface_address', { interface_address: undefined }, 'interface_address: required'],
    ['a bad CIDR', { interface_address: '10.0.0.1' }, 'interface_address'],
    ['a /24 interface', { interface_address: '10.0.0.0/24' }, '/31'],
    ['a public interface', { interface_address: '203.0.113.0/31' }, 'private'],
    ['a /30 network address', { interface_address: '10.0.0.4/30' }, 'network or broadcast'],
    ['an MTU below 576', { mtu: 575 }, 'mtu'],
    ['an MTU above 1476', { mtu: 1477 }, 'mtu'],
    ['a ttl of 0', { ttl: 0 }, 'ttl'],
    ['a bad IPv6 interface', { interface_address6: '2001:db8::/64' }, 'interface_address6'],
    ['a bad health-check target', { health_check: { target: 'not-an-ip' } }, 'health_check.target'],
    ['a bad saved target', { health_check: { target: { saved: '1.2.3' } } }, 'health_check.target'],
    ['a reserved ASN', { bgp: { customer_asn: 23456 } }, 'bgp.customer_asn'],
  ])('refuses %s with 400 naming the field', async (_, over, field) => {
    const res = await post(gre(over));
    expect(res.status).toBe(400);
    expect(res.body.success).toBe(false);
    expect(messages(res)).toContain(field);
  });

  it.each([
    ['rate', { rate: 'sometimes' }],
    ['type', { type: 'ping' }],
    ['direction', { direction: 'sideways' }],
    ['enabled', { enabled: 'yes' }],
  ])('refuses a bad health_check.%s with 400', async (field, hc) => {
    const res = await post(gre({ health_check: hc }));
    expect(res.status).toBe(400);
    expect(messages(res)).toContain(field);
  });

  it('refuses malformed JSON and wrong types', async () => {
    expect((await post('{"name":')).status).toBe(400);
    expect((await post(gre({ mtu: '1400' }))).status).toBe(400);
    expect((await post([1, 2])).status).toBe(400);
  });

  it('nothing is written by a refused create or validate_only', async () => {
    const before = (await t.call('GET', `${base}/gre_tunnels`)).body.result.gre_tunnels.length;
    await post(gre({ mtu: 5 }));
    const dry = await t.call('POST', `${base}/gre_tunnels?validate_only=true`, gre());
    expect(dry.status).toBe(200);
    expect((await t.call('GET', `${base}/gre_tunnels`)).body.result.gre_tunnels.length).toBe(before);
  });

  it('409 on a duplicate name, across GRE and IPsec', async () => {
    const a = await post(gre({ name: 'dup_a' }));
    expect(a.status).toBe(200);
    const again = await post(gre({ name: 'dup_a' }));
    expect(again.status).toBe(409);
    expect(again.body.errors[0].message).toContain('dup_a');
    const ipsec = await t.call('POST', `${base}/ipsec_tunnels`, {
      name: 'dup_a',
      cloudflare_endpoint: '203.0.113.1',
      interface_address: '10.212.2.0/31',
      health_check: OFF,
    });
    expect(ipsec.status).toBe(409);
    const b = await post(gre({ name: 'dup_b' }));
    const rename = await t.call('PUT', `${base}/gre_tunnels/${b.body.result.id}`, { name: 'dup_a' });
    expect(rename.status).toBe(409);
    // A bulk update that would give two tunnels one name is refused whole.
    const bulk = await t.call('PUT', `${base}/gre_tunnels`, [
      { id: a.body.result.id, name: 'dup_c', description: 'x' },
      { id: b.body.result.id, name: 'dup_c' },
    ]);
    expect(bulk.status).toBe(409);
    const still = await t.call('GET', `${base}/gre_tunnels/${a.body.result.id}`);
    expect(still.body.result.gre_tunnel).toMatchObject({ name: 'dup_a', description: '' });
    // Two tunnels may swap their names in one bulk update.
    const swap = await t.call('PUT', `${base}/gre_tunnels`, [
      { id: a.body.result.id, name: 'dup_b' },
      { id: b.body.result.id, name: 'dup_a' },
    ]);
    expect(swap.status, swap.text).toBe(200);
    expect((await t.call('GET', `${base}/gre_tunnels/${a.body.result.id}`)).body.result.gre_tunnel.name).toBe('dup_b');
  });

  it('an update is checked whole after the merge, and leaves the record as it was when refused', async () => {
    const a = await post(gre());
    const id = a.body.result.id;
    const bad = await t.call('PUT', `${base}/gre_tunnels/${id}`, { mtu: 2000, description: 'changed' });
    expect(bad.status).toBe(400);
    expect((await t.call('GET', `${base}/gre_tunnels/${id}`)).body.result.gre_tunnel.description).toBe('');
    const badBulk = await t.call('PUT', `${base}/gre_tunnels`, { gre_tunnels: [{ id, description: 'x' }, { id: 'f'.repeat(32) }] });
    expect(badBulk.status).toBe(404);
    expect((await t.call('PUT', `${base}/gre_tunnels`, { gre_tunnels: [] })).status).toBe(400);
    expect((await t.call('PUT', `${base}/gre_tunnels`, [{ description: 'no id' }])).status).toBe(400);
  });

  it('404 for unknown ids on every per-tunnel route', async () => {
    const id = 'f'.repeat(32);
    for (const [method, path, body] of [
      ['GET', `gre_tunnels/${id}`],
      ['PUT', `gre_tunnels/${id}`, { description: 'x' }],
      ['DELETE', `gre_tunnels/${id}`],
      ['GET', `ipsec_tunnels/${id}`],
      ['PUT', `ipsec_tunnels/${id}`, { description: 'x' }],
      ['DELETE', `ipsec_tunnels/${id}`],
      ['POST', `ipsec_tunnels/${id}/psk_generate`],
    ] as [string, string, unknown?][]) {
      const res = await t.call(method, `${base}/${path}`, body);
      expect(res.status, `${method} ${path}`).toBe(404);
    }
  });

  it('IPsec: bad PSK, bad fqdn_id, bad customer_endpoint', async () => {
    const ipsec = (over: Record<string, unknown>) =>
      t.call('POST', `${base}/ipsec_tunnels`, {
        name: `ip_${randomBytes(3).toString('hex')}`,
        cloudflare_endpoint: '203.0.113.1',
        interface_address: '10.212.3.0/31',
        health_check: OFF,
        ...over,
      });
    expect(messages(await ipsec({ psk: 'short' }))).toContain('psk');
    expect(messages(await ipsec({ psk: 'has a space in it' }))).toContain('psk');
    expect(messages(await ipsec({ custom_remote_identities: { fqdn_id: 'site.example.com' } }))).toContain('fqdn_id');
    expect(messages(await ipsec({ customer_endpoint: '300.1.1.1' }))).toContain('customer_endpoint');
    expect(messages(await ipsec({ cloudflare_endpoint: undefined }))).toContain('cloudflare_endpoint: required');
    const ok = await ipsec({ psk: 'a-long-enough-psk!' });
    expect(ok.status).toBe(200);
    expect(ok.text).not.toContain('a-long-enough-psk!');
  });

  it('401 without credentials, 403 without Magic WAN / Magic Transit, read groups only read', async () => {
    const paths: [string, string, unknown?][] = [
      ['GET', 'gre_tunnels'],
      ['POST', 'gre_tunnels', gre()],
      ['GET', 'ipsec_tunnels'],
      ['PUT', 'ipsec_tunnels', []],
    ];
    const dns = await createToken(t, ['DNS Write'], { [`com.cloudflare.api.account.${account_id}`]: '*' });
    for (const [method, path, body] of paths) {
      expect((await t.call(method, `${base}/${path}`, body, { authorization: '' })).status).toBe(401);
      expect((await t.call(method, `${base}/${path}`, body, { authorization: `Bearer ${dns}` })).status).toBe(403);
    }
    const reader = await createToken(t, ['Magic Transit Read'], { [`com.cloudflare.api.account.${account_id}`]: '*' });
    const as = { authorization: `Bearer ${reader}` };
    expect((await t.call('GET', `${base}/gre_tunnels`, undefined, as)).status).toBe(200);
    expect((await t.call('POST', `${base}/gre_tunnels`, gre(), as)).status).toBe(403);
    const writer = await createToken(t, ['Magic WAN Write'], { [`com.cloudflare.api.account.${account_id}`]: '*' });
    expect((await t.call('POST', `${base}/gre_tunnels`, gre(), { authorization: `Bearer ${writer}` })).status).toBe(200);
  });
});

describe('health prober', () => {
  const status = async (kind: 'gre' | 'ipsec', id: string) =>
    (await t.call('GET', `${base}/${kind}_tunnels/${id}`)).body.result[`${kind}_tunnel`];

  it('a loopback target answers: healthy (default target = the customer endpoint)', async () => {
    const created = await t.call('POST', `${base}/gre_tunnels`, gre({ customer_gre_endpoint: '127.0.0.2', health_check: { rate: 'high' } }));
    expect(created.status).toBe(200);
    const id = created.body.result.id;
    expect(created.body.result.health_check).toMatchObject({ enabled: true, target: '127.0.0.2' });
    const tun = await until(() => status('gre', id), (v) => v.health_status === 'healthy');
    expect(tun.health_status).toBe('healthy');
    expect(Date.parse(tun.health_checked_at)).not.toBeNaN();
    expect(events.some((e) => e.id === id && e.status === 'healthy' && e.previous === 'unknown')).toBe(true);

    // Switched off: no state is reported any more.
    const off = await t.call('PUT', `${base}/gre_tunnels/${id}`, { health_check: { enabled: false } });
    expect(off.body.result.modified_gre_tunnel).toMatchObject({ health_status: 'disabled', health_checked_at: null });
    await t.call('DELETE', `${base}/gre_tunnels/${id}`);
  });

  it('an IPsec tunnel with a saved target (object form) probes that target', async () => {
    const created = await t.call(
      'POST',
      `${base}/ipsec_tunnels`,
      {
        name: 'hc_ipsec',
        cloudflare_endpoint: '203.0.113.1',
        interface_address: '10.212.4.0/31',
        health_check: { target: { saved: '127.0.0.3' }, type: 'request' },
      },
      { 'x-magic-new-hc-target': 'true' },
    );
    expect(created.status).toBe(200);
    expect(created.body.result.health_check.target).toEqual({ saved: '127.0.0.3', effective: '127.0.0.3' });
    const tun = await until(() => status('ipsec', created.body.result.id), (v) => v.health_status === 'healthy');
    expect(tun.health_status).toBe('healthy');
    await t.call('DELETE', `${base}/ipsec_tunnels/${created.body.result.id}`);
  });

  it('an IPsec tunnel with neither customer_endpoint nor target stays unknown', async () => {
    const created = await t.call('POST', `${base}/ipsec_tunnels`, {
      name: 'hc_none',
      cloudflare_endpoint: '203.0.113.1',
      interface_address: '10.212.5.0/31',
    });
    expect(created.body.result).toMatchObject({ health_status: 'unknown', health_checked_at: null });
    await t.call('DELETE', `${base}/ipsec_tunnels/${created.body.result.id}`);
  });
});

describe('prober scheduling and states (a scripted echo in place of ping)', () => {
  const spec = (id: string, target = '127.0.0.1') => ({ account: 'a', kind: 'gre' as const, id, name: id, target, intervalMs: 10 });

  it('runs at most 16 rounds at once, and stop() ends them all', async () => {
    let running = 0;
    let peak = 0;
    const ping: Ping = (_addr, signal) =>
      new Promise((resolve) => {
        running++;
        peak = Math.max(peak, running);
        signal.addEventListener('abort', () => {
          running--;
          resolve(false);
        });
      });
    const prober = new TunnelProber({ tickMs: 5, now: () => new Date(), onTransition: () => {}, onError: () => {}, ping });
    for (let i = 0; i < 40; i++) prober.set('gre', `t${i}`, spec(`t${i}`));
    prober.start();
    await until(async () => running, (n) => n >= 16);
    expect(running).toBe(16);
    await new Promise((r) => setTimeout(r, 50));
    expect(peak).toBe(16);
    await prober.stop();
    expect(running).toBe(0);
  });

  it('one lost echo is retried; two lost in the window make it degraded; a round all lost is down', async () => {
    // Scripted answers, in order: lost+ok (retry saves the round), lost+ok (second loss: degraded),
    // then lost ×3 (down), then ok.
    const script = [false, true, false, true, false, false, false];
    const ping: Ping = async () => script.shift() ?? true;
    const seen: string[] = [];
    const prober = new TunnelProber({ tickMs: 5, now: () => new Date(), onTransition: (t) => seen.push(t.status), onError: () => {}, ping });
    prober.set('gre', 'x', spec('x'));
    prober.start();
    try {
      await until(async () => seen, (s) => s.length >= 4);
      expect(seen.slice(0, 4)).toEqual(['healthy', 'degraded', 'down', 'degraded']);
    } finally {
      await prober.stop();
    }
  });

  it('a tunnel without a target is never probed', async () => {
    const asked: string[] = [];
    const ping: Ping = async (addr) => (asked.push(addr), true);
    const prober = new TunnelProber({ tickMs: 5, now: () => new Date(), onTransition: () => {}, onError: () => {}, ping });
    prober.set('ipsec', 'n', { ...spec('n'), kind: 'ipsec', target: null });
    prober.set('gre', 'y', spec('y', '127.0.0.9'));
    prober.start();
    try {
      await until(async () => prober.state('gre', 'y')?.status, (s) => s === 'healthy');
      expect(prober.state('ipsec', 'n')).toEqual({ status: 'unknown', checked_at: null });
      expect(new Set(asked)).toEqual(new Set(['127.0.0.9']));
    } finally {
      await prober.stop();
    }
  });
});

/** A veth pair whose far end lives in a namespace of its own; probes to it never leave the host. */
const canNetns = (() => {
  if (process.getuid?.() !== 0) {
    console.log('netns prober test skipped: needs root to create a network namespace');
    return false;
  }
  try {
    execFileSync('ip', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    console.log('netns prober test skipped: the `ip` command (iproute2) is missing');
    return false;
  }
})();

describe.skipIf(!canNetns)('health prober against a network namespace', () => {
  const tag = randomBytes(3).toString('hex');
  const ns = `outpost-mg-${tag}`;
  const hostIf = `omg${tag}h`;
  const nsIf = `omg${tag}n`;
  // 10.254.x.0/29: host .1, namespace .2, nothing on .3.
  const net = `10.254.${randomInt(256)}`;
  const ip = (...args: string[]) => execFileSync('ip', args, { stdio: 'pipe' });

  beforeAll(() => {
    ip('netns', 'add', ns);
    ip('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf, 'netns', ns);
    ip('addr', 'add', `${net}.1/29`, 'dev', hostIf);
    ip('link', 'set', hostIf, 'up');
    ip('-n', ns, 'link', 'set', 'lo', 'up');
    ip('-n', ns, 'addr', 'add', `${net}.2/29`, 'dev', nsIf);
    ip('-n', ns, 'link', 'set', nsIf, 'up');
  });
  afterAll(async () => {
    // Stop every probe into the namespace first (a failed test may have left a tunnel): once the
    // namespace is gone, its addresses would route out of the machine.
    const left = (await t.call('GET', `${base}/gre_tunnels`)).body.result.gre_tunnels as { id: string; health_check: { target: string } }[];
    for (const g of left.filter((x) => x.health_check.target.startsWith(`${net}.`))) {
      await t.call('DELETE', `${base}/gre_tunnels/${g.id}`);
    }
    // Deleting the namespace destroys the veth pair (and the host route with it).
    try {
      ip('netns', 'del', ns);
    } catch {
      /* already gone */
    }
  });

  it('healthy while the namespace answers, down once its address is gone (alert raised), healthy again after', async () => {
    // A webhook receiver on loopback and a tunnel-health policy for this tunnel's name.
    const received: { alert_type: string; alert_event: string; data: Record<string, string> }[] = [];
    const receiver = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        try {
          const parsed = JSON.parse(body);
          if (parsed.alert_type !== 'webhook_test') received.push(parsed);
        } catch {
          /* not JSON: ignored */
        }
        res.end('ok');
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
    try {
      const port = (receiver.address() as { port: number }).port;
      const hook = await t.call('POST', `/accounts/${account_id}/alerting/v3/destinations/webhooks`, { name: 'tunnels', url: `http://127.0.0.1:${port}/hook` });
      expect(hook.status, hook.text).toBe(200);
      const name = `ns_${tag}`;
      const policy = await t.call('POST', `/accounts/${account_id}/alerting/v3/policies`, {
        name: 'tunnel down',
        alert_type: 'magic_tunnel_health_check_event',
        enabled: true,
        filters: { tunnel_name: [name] },
        mechanisms: { webhooks: [{ id: hook.body.result.id }] },
      });
      expect(policy.status, policy.text).toBe(200);
      await probeThroughOutage(name, received);
    } finally {
      receiver.close();
    }
  });

  async function probeThroughOutage(
    name: string,
    received: { alert_type: string; alert_event: string; data: Record<string, string> }[],
  ) {
    const created = await t.call('POST', `${base}/gre_tunnels`, gre({ name, health_check: { target: `${net}.2`, rate: 'high' } }));
    expect(created.status).toBe(200);
    const id = created.body.result.id;
    const read = async () => (await t.call('GET', `${base}/gre_tunnels/${id}`)).body.result.gre_tunnel;
    expect((await until(read, (v) => v.health_status === 'healthy')).health_status).toBe('healthy');

    // The far end drops its address: echoes get no ARP answer and time out on the veth.
    ip('-n', ns, 'addr', 'flush', 'dev', nsIf);
    expect((await until(read, (v) => v.health_status === 'down')).health_status).toBe('down');
    expect(events.some((e) => e.id === id && e.previous === 'healthy' && e.status === 'down')).toBe(true);
    const alert = await until(
      async () => received.find((r) => r.data.tunnel_id === id && r.data.new_health === 'down'),
      (v) => v !== undefined,
    );
    expect(alert).toMatchObject({
      alert_type: 'magic_tunnel_health_check_event',
      alert_event: 'ALERT_STATE_EVENT_START',
      data: { tunnel_name: name, tunnel_type: 'GRE', previous_health: 'healthy', health_check_target: `${net}.2` },
    });
    // The first result of the fresh tunnel (unknown → healthy) raised nothing.
    expect(received.filter((r) => r.data.tunnel_id === id && r.data.previous_health === 'unknown')).toEqual([]);

    // Back: recent failures keep it degraded before it is healthy again.
    ip('-n', ns, 'addr', 'add', `${net}.2/29`, 'dev', nsIf);
    const back = await until(read, (v) => v.health_status !== 'down');
    expect(['degraded', 'healthy']).toContain(back.health_status);

    // Stop probing before the namespace goes: afterwards the address would route elsewhere.
    await t.call('DELETE', `${base}/gre_tunnels/${id}`);
  }

  it('an address nothing answers on is down from the start', async () => {
    const created = await t.call('POST', `${base}/gre_tunnels`, gre({ health_check: { target: `${net}.3`, rate: 'high' } }));
    const id = created.body.result.id;
    const read = async () => (await t.call('GET', `${base}/gre_tunnels/${id}`)).body.result.gre_tunnel;
    expect((await until(read, (v) => v.health_status === 'down')).health_status).toBe('down');
    await t.call('DELETE', `${base}/gre_tunnels/${id}`);
  });
});
