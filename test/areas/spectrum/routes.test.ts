/**
 * Proxied-application routes: happy paths (defaults, every origin form, list paging and order,
 * update, delete), the DNS record kept with the applications, bad input (400 per rule), 404,
 * authentication and permissions (401/403), and conflicts (409).
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { freePort, freePortRange, startEcho, withTimeout, type EchoOrigin } from './peers.ts';

let t: TestServer;
let zone: { id: string; name: string };
let echo: EchoOrigin;
const HEX32 = /^[0-9a-f]{32}$/;

beforeAll(async () => {
  t = await startTestServer({ dnsPort: 0 });
  zone = await createZone(t, 'apps.test');
  echo = await startEcho();
});
afterAll(async () => {
  await t?.stop();
  await echo?.close();
});

const base = () => `/zones/${zone.id}/spectrum/apps`;
const direct = () => [`tcp://127.0.0.1:${echo.port}`];
async function create(body: Record<string, unknown>) {
  return t.call('POST', base(), body);
}
/** Resolves once a connection to the port is accepted (bounded). */
function accepts(port: number): Promise<void> {
  return withTimeout(
    new Promise<void>((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve();
      });
      s.once('error', reject);
    }),
    3000,
    `connection to ${port}`,
  );
}
async function records(name: string) {
  const res = await t.call('GET', `/zones/${zone.id}/dns_records?name=${name}`);
  return res.body.result as { type: string; content: string; proxied: boolean; meta: { managed_by_apps: boolean } }[];
}

describe('happy paths', () => {
  it('creates with defaults, listens at once, and answers the app with its edge addresses', async () => {
    const port = await freePort();
    const res = await create({ protocol: `tcp/${port}`, dns: { type: 'CNAME', name: 'ssh.apps.test' }, origin_direct: direct() });
    expect(res.status).toBe(200);
    const app = res.body.result;
    expect(app).toMatchObject({
      protocol: `tcp/${port}`,
      dns: { type: 'CNAME', name: 'ssh.apps.test' },
      origin_direct: direct(),
      proxy_protocol: 'off',
      ip_firewall: false,
      tls: 'off',
      traffic_type: 'direct',
      argo_smart_routing: false,
      edge_ips: { type: 'dynamic', connectivity: 'all' },
    });
    expect(app.id).toMatch(HEX32);
    expect(app.created_on).toBe(app.modified_on);
    expect(app.edge_ips.ips).toContain('127.0.0.1');
    // The listener is open before the answer.
    await accepts(port);
    expect((await t.call('GET', `${base()}/${app.id}`)).body.result).toEqual(app);
  });

  it('accepts origin_dns with origin_port as an integer, "start-end" or {start, end}, and answers ranges as {start, end}', async () => {
    const port = await freePort();
    const one = await create({ protocol: `tcp/${port}`, dns: { type: 'CNAME', name: 'one.apps.test' }, origin_dns: { name: 'origin.apps.test' }, origin_port: 22 });
    expect(one.status).toBe(200);
    expect(one.body.result).toMatchObject({ origin_dns: { name: 'origin.apps.test' }, origin_port: 22 });
    const p2 = await freePortRange(2);
    const range = await create({ protocol: `tcp/${p2}-${p2 + 1}`, dns: { type: 'CNAME', name: 'range.apps.test' }, origin_dns: { name: 'origin.apps.test', ttl: 600, type: '' }, origin_port: '2000-2001' });
    expect(range.status).toBe(200);
    expect(range.body.result).toMatchObject({ protocol: `tcp/${p2}-${p2 + 1}`, origin_port: { start: 2000, end: 2001 }, origin_dns: { ttl: 600, type: '' } });
    const p3 = await freePort();
    const obj = await create({ protocol: `udp/${p3}`, dns: { type: 'CNAME', name: 'obj.apps.test' }, origin_dns: { name: 'origin.apps.test' }, origin_port: { start: 53, end: 53 } });
    expect(obj.status).toBe(200);
    expect(obj.body.result.origin_port).toEqual({ start: 53, end: 53 });
  });

  it('lists in pages (per_page, page past the end is empty) and orders by dns, protocol or created_on', async () => {
    const z = await createZone(t, 'list.apps.test');
    const ports = [await freePort(), await freePort(), await freePort()];
    const names = ['c.list.apps.test', 'a.list.apps.test', 'b.list.apps.test'];
    for (let i = 0; i < 3; i++) {
      const res = await t.call('POST', `/zones/${z.id}/spectrum/apps`, { protocol: `tcp/${ports[i]}`, dns: { type: 'CNAME', name: names[i] }, origin_direct: direct() });
      expect(res.status).toBe(200);
    }
    const p1 = await t.call('GET', `/zones/${z.id}/spectrum/apps?per_page=2`);
    expect(p1.body.result.map((a: { dns: { name: string } }) => a.dns.name)).toEqual(['a.list.apps.test', 'b.list.apps.test']);
    expect(p1.body.result_info).toEqual({ page: 1, per_page: 2, count: 2, total_count: 3, total_pages: 2 });
    const p2 = await t.call('GET', `/zones/${z.id}/spectrum/apps?per_page=2&page=2`);
    expect(p2.body.result.map((a: { dns: { name: string } }) => a.dns.name)).toEqual(['c.list.apps.test']);
    expect((await t.call('GET', `/zones/${z.id}/spectrum/apps?per_page=2&page=3`)).body.result).toEqual([]);
    const byCreated = await t.call('GET', `/zones/${z.id}/spectrum/apps?order=created_on&direction=desc`);
    expect(byCreated.body.result.map((a: { dns: { name: string } }) => a.dns.name)).toEqual([...names].reverse());
    const byProtocol = await t.call('GET', `/zones/${z.id}/spectrum/apps?order=protocol`);
    expect(byProtocol.body.result.map((a: { protocol: string }) => a.protocol)).toEqual(ports.map((p) => `tcp/${p}`).sort());
    expect((await t.call('GET', `/zones/${z.id}/spectrum/apps?order=nope`)).status).toBe(400);
    expect((await t.call('GET', `/zones/${z.id}/spectrum/apps?per_page=101`)).status).toBe(400);
  });

  it('PUT replaces the app, keeps id and created_on, moves modified_on; DELETE answers {id} and closes the port', async () => {
    const port = await freePort();
    const created = (await create({ protocol: `tcp/${port}`, dns: { type: 'CNAME', name: 'put.apps.test' }, origin_direct: direct() })).body.result;
    await new Promise((r) => setTimeout(r, 5));
    const port2 = await freePort();
    const upd = await t.call('PUT', `${base()}/${created.id}`, { protocol: `tcp/${port2}`, dns: { type: 'CNAME', name: 'put2.apps.test' }, origin_direct: direct(), proxy_protocol: 'v1', ip_firewall: true });
    expect(upd.status).toBe(200);
    expect(upd.body.result).toMatchObject({ id: created.id, created_on: created.created_on, protocol: `tcp/${port2}`, proxy_protocol: 'v1', ip_firewall: true });
    expect(upd.body.result.modified_on > created.modified_on).toBe(true);
    expect(await records('put.apps.test')).toEqual([]);
    expect((await records('put2.apps.test')).map((r) => r.type)).toEqual(['CNAME']);
    const del = await t.call('DELETE', `${base()}/${created.id}`);
    expect(del.status).toBe(200);
    expect(del.body).toMatchObject({ success: true, result: { id: created.id } });
    const gone = await t.call('GET', `${base()}/${created.id}`);
    expect(gone.status).toBe(404);
    expect(gone.body.errors[0].code).toBe(11002);
    expect((await t.call('DELETE', `${base()}/${created.id}`)).status).toBe(404);
    expect((await t.call('PUT', `${base()}/${created.id}`, { protocol: `tcp/${port2}`, dns: { type: 'CNAME', name: 'put2.apps.test' }, origin_direct: direct() })).status).toBe(404);
    expect(await records('put2.apps.test')).toEqual([]);
  });

  it('lists the protocols offered', async () => {
    const res = await t.call('GET', `/zones/${zone.id}/spectrum/protocols`);
    expect(res.status).toBe(200);
    expect(res.body.result).toContainEqual({ name: 'SSH', description: 'Secure Shell', ports: [22], transport: 'tcp' });
  });
});

describe('the DNS record of an application', () => {
  it('a CNAME app gets one proxied CNAME shared by the apps at that name, removed with the last one', async () => {
    const [p1, p2] = [await freePort(), await freePort()];
    const a = (await create({ protocol: `tcp/${p1}`, dns: { type: 'CNAME', name: 'shared.apps.test' }, origin_direct: direct() })).body.result;
    const b = (await create({ protocol: `tcp/${p2}`, dns: { type: 'CNAME', name: 'shared.apps.test' }, origin_direct: direct() })).body.result;
    const recs = await records('shared.apps.test');
    expect(recs).toHaveLength(1);
    expect(recs[0]).toMatchObject({ type: 'CNAME', proxied: true, meta: { managed_by_apps: true } });
    await t.call('DELETE', `${base()}/${a.id}`);
    expect(await records('shared.apps.test')).toHaveLength(1);
    await t.call('DELETE', `${base()}/${b.id}`);
    expect(await records('shared.apps.test')).toEqual([]);
  });

  it('an ADDRESS app gets A/AAAA records with its edge addresses (static IPs when given)', async () => {
    const port = await freePort();
    const res = await create({ protocol: `tcp/${port}`, dns: { type: 'ADDRESS', name: 'addr.apps.test' }, origin_direct: direct() });
    expect(res.status).toBe(200);
    expect(res.body.result.edge_ips.type).toBe('static');
    const recs = await records('addr.apps.test');
    expect(recs.map((r) => `${r.type} ${r.content} ${r.proxied}`)).toContain('A 127.0.0.1 false');
    const p2 = await freePort();
    const st = await create({ protocol: `tcp/${p2}`, dns: { type: 'ADDRESS', name: 'static.apps.test' }, origin_direct: direct(), edge_ips: { type: 'static', ips: ['127.0.0.7'] } });
    expect(st.status).toBe(200);
    expect(st.body.result.edge_ips).toEqual({ type: 'static', ips: ['127.0.0.7'] });
    expect((await records('static.apps.test')).map((r) => `${r.type} ${r.content}`)).toEqual(['A 127.0.0.7']);
    await t.call('DELETE', `${base()}/${st.body.result.id}`);
    expect(await records('static.apps.test')).toEqual([]);
  });
});

describe('bad input', () => {
  const cases: [string, () => Promise<Record<string, unknown> | string>, RegExp][] = [
    ['no protocol', async () => ({ dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct() }), /protocol/],
    ['no dns', async () => ({ protocol: 'tcp/2200', origin_direct: direct() }), /dns/],
    ['an unknown dns type', async () => ({ protocol: 'tcp/2200', dns: { type: 'MX', name: 'x.apps.test' }, origin_direct: direct() }), /dns\.type/],
    ['a dns name outside the zone', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.other.test' }, origin_direct: direct() }), /not inside zone/],
    ['an invalid dns name', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'bad name.apps.test' }, origin_direct: direct() }), /dns\.name/],
    ['port 0', async () => ({ protocol: 'tcp/0', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct() }), /protocol/],
    ['port 70000', async () => ({ protocol: 'tcp/70000', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct() }), /protocol/],
    ['an unknown transport', async () => ({ protocol: 'sctp/22', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct() }), /protocol/],
    ['a reversed range', async () => ({ protocol: 'tcp/30-20', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct() }), /protocol/],
    ['too many ports', async () => ({ protocol: 'tcp/1-2000', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct() }), /at most 1024/],
    ['no origin', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' } }), /origin_direct or origin_dns/],
    ['both origins', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct(), origin_dns: { name: 'o.apps.test' }, origin_port: 22 }), /mutually exclusive/],
    ['an origin_direct host name', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: ['tcp://origin.example:22'] }), /origin_direct\.0/],
    ['an origin_direct without port', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: ['tcp://127.0.0.1'] }), /origin_direct\.0/],
    ['an origin_direct scheme that differs from the protocol', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: ['udp://127.0.0.1:53'] }), /scheme udp/],
    ['an empty origin_direct', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: [] }), /origin_direct/],
    ['origin_dns without origin_port', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_dns: { name: 'o.apps.test' } }), /origin_port: required/],
    ['an origin_port range of another size', async () => ({ protocol: 'tcp/2200-2201', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_dns: { name: 'o.apps.test' }, origin_port: '3000-3009' }), /origin_port: the range holds 10/],
    ['an origin_port beyond 65535', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_dns: { name: 'o.apps.test' }, origin_port: 70000 }), /origin_port/],
    ['an origin_port string that is no port', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_dns: { name: 'o.apps.test' }, origin_port: 'ssh' }), /origin_port/],
    ['origin_port with origin_direct', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct(), origin_port: 22 }), /origin_port: only used with origin_dns/],
    ['an origin_dns ttl below 600', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_dns: { name: 'o.apps.test', ttl: 60 }, origin_port: 22 }), /origin_dns\.ttl/],
    ['simple proxy protocol on TCP', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct(), proxy_protocol: 'simple' }), /simple is for UDP/],
    ['PROXY v1 on UDP', async () => ({ protocol: 'udp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: ['udp://127.0.0.1:53'], proxy_protocol: 'v1' }), /v1 is for TCP/],
    ['TLS on UDP', async () => ({ protocol: 'udp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: ['udp://127.0.0.1:53'], tls: 'full' }), /tls: TLS termination/],
    ['an unknown tls mode', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct(), tls: 'yes' }), /tls/],
    ['an unknown proxy_protocol', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct(), proxy_protocol: 'v3' }), /proxy_protocol/],
    ['traffic_type http on UDP', async () => ({ protocol: 'udp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: ['udp://127.0.0.1:53'], traffic_type: 'http' }), /traffic_type/],
    ['traffic_type worker', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct(), traffic_type: 'worker' }), /traffic_type/],
    ['smart routing with traffic_type http', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct(), traffic_type: 'http', argo_smart_routing: true }), /argo_smart_routing/],
    ['static edge IPs with a CNAME name', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct(), edge_ips: { type: 'static', ips: ['127.0.0.1'] } }), /static edge IPs/],
    ['dynamic edge IPs with an ADDRESS name', async () => ({ protocol: 'tcp/2200', dns: { type: 'ADDRESS', name: 'x.apps.test' }, origin_direct: direct(), edge_ips: { type: 'dynamic', connectivity: 'all' } }), /dynamic edge IPs/],
    ['a static edge IP that is no address', async () => ({ protocol: 'tcp/2200', dns: { type: 'ADDRESS', name: 'x.apps.test' }, origin_direct: direct(), edge_ips: { type: 'static', ips: ['edge.example'] } }), /edge_ips\.ips\.0/],
    ['an unknown connectivity', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct(), edge_ips: { type: 'dynamic', connectivity: 'ipv5' } }), /edge_ips/],
    ['ip_firewall as a string', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct(), ip_firewall: 'yes' }), /ip_firewall/],
    ['a virtual_network_id that is no UUID', async () => ({ protocol: 'tcp/2200', dns: { type: 'CNAME', name: 'x.apps.test' }, origin_direct: direct(), virtual_network_id: 'vnet' }), /virtual_network_id/],
    ['malformed JSON', async () => '{"protocol":', /Malformed JSON/],
  ];
  for (const [what, body, message] of cases) {
    it(`refuses ${what} with 400, nothing created`, async () => {
      const before = (await t.call('GET', `${base()}?per_page=100`)).body.result.length;
      const res = await t.call('POST', base(), await body());
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, result: null });
      expect(res.body.errors.map((e: { message: string }) => e.message).join('\n')).toMatch(message);
      expect((await t.call('GET', `${base()}?per_page=100`)).body.result.length).toBe(before);
    });
  }

  it('lists every problem of a body at once', async () => {
    const res = await create({ protocol: 'udp/2200', dns: { type: 'CNAME', name: 'x.elsewhere.test' }, tls: 'full', proxy_protocol: 'v1' });
    expect(res.status).toBe(400);
    expect(res.body.errors.length).toBeGreaterThanOrEqual(4);
  });

  it('refuses an edge address this host does not have (400), and malformed app ids (400)', async () => {
    const res = await create({ protocol: `tcp/${await freePort()}`, dns: { type: 'ADDRESS', name: 'far.apps.test' }, origin_direct: direct(), edge_ips: { type: 'static', ips: ['192.0.2.1'] } });
    expect(res.status).toBe(400);
    expect(res.body.errors[0].message).toMatch(/192\.0\.2\.1 is not an address of this host/);
    expect((await t.call('GET', `${base()}/not-an-id`)).status).toBe(400);
  });
});

describe('conflicts', () => {
  it('the same name with an overlapping port is a 409 (x-should-retry: false); another transport is fine', async () => {
    const port = await freePort();
    const first = await create({ protocol: `tcp/${port}`, dns: { type: 'CNAME', name: 'dup.apps.test' }, origin_direct: direct() });
    expect(first.status).toBe(200);
    const dup = await create({ protocol: `tcp/${port - 1}-${port}`, dns: { type: 'CNAME', name: 'dup.apps.test' }, origin_direct: direct() });
    expect(dup.status).toBe(409);
    expect(dup.headers.get('x-should-retry')).toBe('false');
    expect(dup.body.errors[0].code).toBe(11003);
    const udp = await create({ protocol: `udp/${port}`, dns: { type: 'CNAME', name: 'dup.apps.test' }, origin_direct: ['udp://127.0.0.1:53'] });
    expect(udp.status).toBe(200);
  });

  it('another app on a taken edge address and port is a 409, so is a port another process holds', async () => {
    const port = await freePort();
    expect((await create({ protocol: `tcp/${port}`, dns: { type: 'CNAME', name: 'taken1.apps.test' }, origin_direct: direct() })).status).toBe(200);
    const other = await create({ protocol: `tcp/${port}`, dns: { type: 'CNAME', name: 'taken2.apps.test' }, origin_direct: direct() });
    expect(other.status).toBe(409);
    expect(other.body.errors[0].code).toBe(11005);
    // Someone else's listener.
    const held = net.createServer();
    const heldPort = await freePort();
    await new Promise<void>((r) => held.listen(heldPort, '127.0.0.1', () => r()));
    try {
      const res = await create({ protocol: `tcp/${heldPort}`, dns: { type: 'CNAME', name: 'held.apps.test' }, origin_direct: direct() });
      expect(res.status).toBe(409);
      expect(res.body.errors[0].message).toMatch(/already in use on this host/);
      expect(await records('held.apps.test')).toEqual([]);
    } finally {
      held.close();
    }
  });

  it('a DNS record someone else made at the name is a 409; so is mixing CNAME and ADDRESS apps at one name', async () => {
    await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'mine.apps.test', content: '192.0.2.10' });
    const res = await create({ protocol: `tcp/${await freePort()}`, dns: { type: 'CNAME', name: 'mine.apps.test' }, origin_direct: direct() });
    expect(res.status).toBe(409);
    expect(res.body.errors[0].code).toBe(11004);
    expect(await records('mine.apps.test')).toHaveLength(1);
    expect((await create({ protocol: `tcp/${await freePort()}`, dns: { type: 'CNAME', name: 'mixed.apps.test' }, origin_direct: direct() })).status).toBe(200);
    const mixed = await create({ protocol: `tcp/${await freePort()}`, dns: { type: 'ADDRESS', name: 'mixed.apps.test' }, origin_direct: direct() });
    expect(mixed.status).toBe(409);
  });

  it('an update into a conflict is a 409 and leaves the app as it was', async () => {
    const [p1, p2] = [await freePort(), await freePort()];
    await create({ protocol: `tcp/${p1}`, dns: { type: 'CNAME', name: 'keep1.apps.test' }, origin_direct: direct() });
    const b = (await create({ protocol: `tcp/${p2}`, dns: { type: 'CNAME', name: 'keep2.apps.test' }, origin_direct: direct() })).body.result;
    const res = await t.call('PUT', `${base()}/${b.id}`, { protocol: `tcp/${p1}`, dns: { type: 'CNAME', name: 'keep2.apps.test' }, origin_direct: direct() });
    expect(res.status).toBe(409);
    expect((await t.call('GET', `${base()}/${b.id}`)).body.result.protocol).toBe(`tcp/${p2}`);
    await accepts(p2);
  });
});

describe('authentication and permissions', () => {
  it('401 without credentials, 403 without Zone Settings, read-only tokens cannot write, other zones are out of scope', async () => {
    expect((await t.call('GET', base(), undefined, { authorization: '' })).status).toBe(401);
    const dnsOnly = await createToken(t, ['DNS Read'], { [`com.cloudflare.api.account.zone.${zone.id}`]: '*' });
    expect((await t.call('GET', base(), undefined, { authorization: `Bearer ${dnsOnly}` })).status).toBe(403);
    const reader = await createToken(t, ['Zone Settings Read'], { [`com.cloudflare.api.account.zone.${zone.id}`]: '*' });
    expect((await t.call('GET', base(), undefined, { authorization: `Bearer ${reader}` })).status).toBe(200);
    const body = { protocol: `tcp/${await freePort()}`, dns: { type: 'CNAME', name: 'auth.apps.test' }, origin_direct: direct() };
    expect((await t.call('POST', base(), body, { authorization: `Bearer ${reader}` })).status).toBe(403);
    const writer = await createToken(t, ['Zone Settings Write'], { [`com.cloudflare.api.account.zone.${zone.id}`]: '*' });
    expect((await t.call('POST', base(), body, { authorization: `Bearer ${writer}` })).status).toBe(200);
    const other = await createZone(t, 'other-apps.test');
    expect((await t.call('GET', `/zones/${other.id}/spectrum/apps`, undefined, { authorization: `Bearer ${writer}` })).status).toBe(403);
    // Analytics need the Analytics permission.
    const analyticsPath = `/zones/${zone.id}/spectrum/analytics/events/summary`;
    expect((await t.call('GET', analyticsPath, undefined, { authorization: `Bearer ${writer}` })).status).toBe(403);
    const analyst = await createToken(t, ['Analytics Read'], { [`com.cloudflare.api.account.zone.${zone.id}`]: '*' });
    expect((await t.call('GET', analyticsPath, undefined, { authorization: `Bearer ${analyst}` })).status).toBe(200);
    expect((await t.call('GET', base(), undefined, { authorization: `Bearer ${analyst}` })).status).toBe(403);
  });

  it('an unknown zone is a 404', async () => {
    expect((await t.call('GET', `/zones/${'0'.repeat(32)}/spectrum/apps`)).status).toBe(404);
  });
});
