import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, createZone, startTestServer, type TestServer } from '../../support/server.ts';

let t: TestServer;
let A: string;
const secret = Buffer.alloc(32, 7).toString('base64');

beforeAll(async () => {
  t = await startTestServer();
  A = `/accounts/${t.accountId}`;
});
afterAll(() => t.stop());

async function tunnel(
  name: string,
  family: 'tunnels' | 'cfd_tunnel' = 'tunnels',
  extra: Record<string, unknown> = {},
) {
  const res = await t.call('POST', `${A}/${family}`, { name, tunnel_secret: secret, ...extra });
  if (res.status !== 200) throw new Error(res.text);
  return res.body.result as { id: string; token?: string; [k: string]: unknown };
}

function upgrade(
  path: string,
  headers: Record<string, string>,
  base = t.url,
): Promise<{ status: number; body: string; upgraded: boolean; headers: http.IncomingHttpHeaders }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: u.hostname,
      port: u.port,
      path,
      headers: { connection: 'Upgrade', ...headers },
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, body, upgraded: false, headers: res.headers }),
      );
    });
    req.on('upgrade', (res, socket) => {
      socket.destroy();
      resolve({ status: res.statusCode!, body: '', upgraded: true, headers: res.headers });
    });
    req.on('error', reject);
    req.end();
  });
}

describe('tunnels: both families over one store', () => {
  it('spec create answers the tunnel with a token {a, t, s, e}; the official paths see it', async () => {
    const res = await t.call('POST', `${A}/tunnels`, { name: 'spec-one', tunnel_secret: secret });
    expect(res.status).toBe(200);
    const tun = res.body.result;
    expect(tun).toMatchObject({
      name: 'spec-one',
      status: 'inactive',
      config_src: 'cloudflare',
      remote_config: true,
      tun_type: 'cfd_tunnel',
      connections: [],
      deleted_at: null,
      account_tag: t.accountId,
    });
    expect(tun.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(tun).not.toHaveProperty('tunnel_secret');
    expect(tun).not.toHaveProperty('secret');
    expect(JSON.parse(Buffer.from(tun.token, 'base64').toString())).toEqual({
      a: t.accountId,
      t: tun.id,
      s: secret,
      e: t.url,
    });

    const official = await t.call('GET', `${A}/cfd_tunnel/${tun.id}`);
    expect(official.status).toBe(200);
    expect(official.body.result).toMatchObject({ id: tun.id, name: 'spec-one', token: tun.token });
    const token = await t.call('GET', `${A}/cfd_tunnel/${tun.id}/token`);
    expect(token.body.result).toBe(tun.token);
  });

  it('official create defaults to a locally managed tunnel: no token field, token endpoint works', async () => {
    const tun = await tunnel('official-local', 'cfd_tunnel');
    expect(tun).toMatchObject({ config_src: 'local', remote_config: false });
    expect(tun).not.toHaveProperty('token');
    const token = await t.call('GET', `${A}/cfd_tunnel/${tun.id}/token`);
    expect(JSON.parse(Buffer.from(token.body.result, 'base64').toString())).toMatchObject({
      t: tun.id,
      a: t.accountId,
    });
  });

  it('a secret is generated when absent (32 bytes)', async () => {
    const res = await t.call('POST', `${A}/cfd_tunnel`, {
      name: 'gen-secret',
      config_src: 'cloudflare',
    });
    const s = JSON.parse(Buffer.from(res.body.result.token, 'base64').toString()).s;
    expect(Buffer.from(s, 'base64').length).toBe(32);
  });

  it('lists with filters and pages; deleted tunnels only with is_deleted=true', async () => {
    for (const n of ['page-a', 'page-b', 'page-c']) await tunnel(n);
    const byPrefix = await t.call('GET', `${A}/cfd_tunnel?include_prefix=page-&per_page=2`);
    expect(byPrefix.body.result.map((x: { name: string }) => x.name)).toEqual(['page-a', 'page-b']);
    expect(byPrefix.body.result_info).toMatchObject({
      page: 1,
      per_page: 2,
      count: 2,
      total_count: 3,
      total_pages: 2,
    });
    const page2 = await t.call('GET', `${A}/tunnels?include_prefix=page-&per_page=2&page=2`);
    expect(page2.body.result.map((x: { name: string }) => x.name)).toEqual(['page-c']);
    const past = await t.call('GET', `${A}/tunnels?include_prefix=page-&per_page=2&page=3`);
    expect(past.status).toBe(200);
    expect(past.body.result).toEqual([]);
    const named = await t.call('GET', `${A}/cfd_tunnel?name=page-b`);
    expect(named.body.result).toHaveLength(1);
    const inactive = await t.call('GET', `${A}/cfd_tunnel?status=inactive&exclude_prefix=page-`);
    expect(
      inactive.body.result.every(
        (x: { status: string; name: string }) =>
          x.status === 'inactive' && !x.name.startsWith('page-'),
      ),
    ).toBe(true);
    const other = await t.call('GET', `${A}/tunnels?tun_types=warp_connector`);
    expect(other.body.result).toEqual([]);

    const victim = (await t.call('GET', `${A}/cfd_tunnel?name=page-c`)).body.result[0];
    const del = await t.call('DELETE', `${A}/cfd_tunnel/${victim.id}`);
    expect(del.status).toBe(200);
    expect(del.body.result).toMatchObject({ id: victim.id, name: 'page-c' });
    expect(Date.parse(del.body.result.deleted_at)).not.toBeNaN();
    expect((await t.call('GET', `${A}/cfd_tunnel/${victim.id}`)).status).toBe(404);
    expect((await t.call('GET', `${A}/cfd_tunnel?name=page-c`)).body.result).toEqual([]);
    const deleted = await t.call('GET', `${A}/cfd_tunnel?is_deleted=true&name=page-c`);
    expect(deleted.body.result).toMatchObject([{ id: victim.id }]);
    // The name is free again.
    expect(
      (await t.call('POST', `${A}/tunnels`, { name: 'page-c', tunnel_secret: secret })).status,
    ).toBe(200);
  });

  it('PATCH renames and rotates the secret; a taken name is a 409', async () => {
    const tun = await tunnel('to-rename', 'cfd_tunnel', { config_src: 'cloudflare' });
    const newSecret = Buffer.alloc(48, 9).toString('base64');
    const res = await t.call('PATCH', `${A}/cfd_tunnel/${tun.id}`, {
      name: 'renamed',
      tunnel_secret: newSecret,
    });
    expect(res.status).toBe(200);
    expect(res.body.result.name).toBe('renamed');
    expect(JSON.parse(Buffer.from(res.body.result.token, 'base64').toString()).s).toBe(newSecret);
    await tunnel('taken');
    const clash = await t.call('PATCH', `${A}/cfd_tunnel/${tun.id}`, { name: 'taken' });
    expect(clash.status).toBe(409);
    expect(clash.headers.get('x-should-retry')).toBe('false');
  });
});

describe('tunnels: bad input', () => {
  it('duplicate names → 409 without retry', async () => {
    await tunnel('dup');
    const res = await t.call('POST', `${A}/cfd_tunnel`, { name: 'dup', tunnel_secret: secret });
    expect(res.status).toBe(409);
    expect(res.headers.get('x-should-retry')).toBe('false');
    expect(res.body.errors[0]).toEqual({ code: 1013, message: 'tunnel with name already exists' });
  });

  it('tunnel_secret must be base64 of at least 32 bytes', async () => {
    const short = await t.call('POST', `${A}/tunnels`, {
      name: 's1',
      tunnel_secret: Buffer.alloc(16).toString('base64'),
    });
    expect(short.status).toBe(400);
    expect(short.body.errors[0].message).toBe(
      'tunnel_secret: must be base64 of at least 32 bytes (got 16)',
    );
    const junk = await t.call('POST', `${A}/tunnels`, {
      name: 's2',
      tunnel_secret: 'not base64 at all!',
    });
    expect(junk.status).toBe(400);
  });

  it('schema errors, bad ids, unknown tunnels and accounts', async () => {
    expect((await t.call('POST', `${A}/tunnels`, { tunnel_secret: secret })).status).toBe(400);
    expect((await t.call('POST', `${A}/tunnels`, { name: '', tunnel_secret: secret })).status).toBe(
      400,
    );
    expect((await t.call('GET', `${A}/cfd_tunnel/not-a-uuid`)).status).toBe(400);
    const missing = await t.call('GET', `${A}/cfd_tunnel/00000000-0000-4000-8000-000000000000`);
    expect(missing.status).toBe(404);
    expect(missing.body.errors[0].code).toBe(1003);
    expect((await t.call('GET', `/accounts/${'f'.repeat(32)}/cfd_tunnel`)).status).toBe(404);
  });
});

describe('configurations', () => {
  it('PUT validates with the connector rules, versions increase, GET answers the latest', async () => {
    const tun = await tunnel('configured');
    const empty = await t.call('GET', `${A}/cfd_tunnel/${tun.id}/configurations`);
    expect(empty.body.result).toMatchObject({ tunnel_id: tun.id, version: 0, config: {} });
    const ingress = [
      {
        hostname: 'app.example.com',
        path: '^/api',
        service: 'http://127.0.0.1:8000',
        originRequest: { connectTimeout: 5, noTLSVerify: true },
      },
      { service: 'http_status:404' },
    ];
    const v1 = await t.call('PUT', `${A}/tunnels/${tun.id}/configurations`, {
      config: { ingress },
    });
    expect(v1.status).toBe(200);
    expect(v1.body.result).toMatchObject({
      account_id: t.accountId,
      tunnel_id: tun.id,
      version: 1,
      source: 'cloudflare',
      config: { ingress },
    });
    const v2 = await t.call('PUT', `${A}/cfd_tunnel/${tun.id}/configurations`, {
      config: { ingress: [{ service: 'hello_world' }] },
    });
    expect(v2.body.result.version).toBe(2);
    expect(
      (await t.call('GET', `${A}/tunnels/${tun.id}/configurations`)).body.result,
    ).toMatchObject({ version: 2, config: { ingress: [{ service: 'hello_world' }] } });
  });

  it('invalid rules are 400 with the connector message; nothing is stored', async () => {
    const tun = await tunnel('bad-config');
    const cases: [unknown[], string][] = [
      [
        [{ hostname: 'a.example.com', service: 'http://x:1' }],
        'The last ingress rule must match all URLs (i.e. it should not have a hostname or path filter)',
      ],
      [
        [{ hostname: 'a.*.example.com', service: 'http://x:1' }, { service: 'http_status:404' }],
        'Hostname patterns can have at most one wildcard character ("*") and it can only be used for subdomains, e.g. "*.example.com"',
      ],
      [
        [{ hostname: 'a.example.com:80', service: 'http://x:1' }, { service: 'http_status:404' }],
        'Hostname cannot contain a port',
      ],
      [
        [
          { hostname: 'a.example.com', path: '[', service: 'http://x:1' },
          { service: 'http_status:404' },
        ],
        'Rule #1 has an invalid regex',
      ],
      [
        [{ service: 'localhost:8080' }],
        'localhost:8080 is an invalid address, please make sure it has a scheme and a hostname',
      ],
      [[{ service: 'http_status:600x' }], 'invalid HTTP status code'],
      [[{ service: 'http_status:42' }], 'invalid HTTP status code: 42'],
      [[], "The config file doesn't contain any ingress rules"],
    ];
    for (const [ingress, message] of cases) {
      const res = await t.call('PUT', `${A}/cfd_tunnel/${tun.id}/configurations`, {
        config: { ingress },
      });
      expect(res.status, JSON.stringify(ingress)).toBe(400);
      expect(res.body.errors[0].code).toBe(1056);
      expect(res.body.errors[0].message.startsWith(message), res.body.errors[0].message).toBe(true);
    }
    expect(
      (await t.call('GET', `${A}/cfd_tunnel/${tun.id}/configurations`)).body.result.version,
    ).toBe(0);
    expect(
      (
        await t.call('PUT', `${A}/cfd_tunnel/${tun.id}/configurations`, {
          config: { ingress: 'nope' },
        })
      ).status,
    ).toBe(400);
  });

  it('storing a configuration makes a local tunnel remotely managed', async () => {
    const tun = await tunnel('becomes-remote', 'cfd_tunnel');
    await t.call('PUT', `${A}/cfd_tunnel/${tun.id}/configurations`, {
      config: { ingress: [{ service: 'http_status:204' }] },
    });
    const after = await t.call('GET', `${A}/cfd_tunnel/${tun.id}`);
    expect(after.body.result).toMatchObject({ config_src: 'cloudflare', remote_config: true });
    expect(typeof after.body.result.token).toBe('string');
  });

  it('connections of a tunnel without connectors; cleanup answers null', async () => {
    const tun = await tunnel('no-connectors');
    expect((await t.call('GET', `${A}/cfd_tunnel/${tun.id}/connections`)).body.result).toEqual([]);
    const cleanup = await t.call('DELETE', `${A}/cfd_tunnel/${tun.id}/connections`);
    expect(cleanup.status).toBe(200);
    expect(cleanup.body).toMatchObject({ success: true, result: null });
    expect(
      (
        await t.call(
          'GET',
          `${A}/cfd_tunnel/${tun.id}/connectors/00000000-0000-4000-8000-000000000000`,
        )
      ).status,
    ).toBe(404);
  });
});

describe('IP routes (teamnet and the spec form)', () => {
  it('create, list, lookup by IP, overlap refusal, edit, delete', async () => {
    const one = await tunnel('routes-one');
    const two = await tunnel('routes-two');
    const spec = await t.call('POST', `${A}/tunnels/${one.id}/routes`, {
      ip_network: '10.1.2.3/16',
      comment: 'office',
    });
    expect(spec.status).toBe(200);
    expect(spec.body.result).toMatchObject({
      network: '10.1.0.0/16',
      ip_network: '10.1.0.0/16',
      tunnel_id: one.id,
      tunnel_name: 'routes-one',
      comment: 'office',
      tun_type: 'cfd_tunnel',
    });
    const overlap = await t.call('POST', `${A}/teamnet/routes`, {
      network: '10.1.200.0/24',
      tunnel_id: two.id,
    });
    expect(overlap.status).toBe(409);
    expect(overlap.headers.get('x-should-retry')).toBe('false');
    expect(overlap.body.errors[0].message).toContain('10.1.0.0/16');
    const bigger = await t.call('POST', `${A}/teamnet/routes`, {
      network: '10.0.0.0/8',
      tunnel_id: two.id,
    });
    expect(bigger.status).toBe(409);
    // Another virtual network may reuse the range.
    const vnet = '11111111-2222-4333-8444-555555555555';
    const other = await t.call('POST', `${A}/teamnet/routes`, {
      network: '10.1.0.0/16',
      tunnel_id: two.id,
      virtual_network_id: vnet,
    });
    expect(other.status).toBe(200);
    const v6 = await t.call('POST', `${A}/teamnet/routes`, {
      network: 'fd00:1::/64',
      tunnel_id: two.id,
      comment: 'v6',
    });
    expect(v6.body.result.network).toBe('fd00:1::/64');

    const listed = await t.call('GET', `${A}/tunnels/${one.id}/routes`);
    expect(listed.body.result.map((r: { network: string }) => r.network)).toEqual(['10.1.0.0/16']);
    const byTunnel = await t.call('GET', `${A}/teamnet/routes?tunnel_id=${two.id}`);
    expect(byTunnel.body.result.map((r: { network: string }) => r.network).sort()).toEqual([
      '10.1.0.0/16',
      'fd00:1::/64',
    ]);
    const subset = await t.call('GET', `${A}/teamnet/routes?network_subset=10.0.0.0/8`);
    expect(subset.body.result).toHaveLength(2);
    const superset = await t.call('GET', `${A}/teamnet/routes?network_superset=fd00:1::5/128`);
    expect(superset.body.result.map((r: { comment: string }) => r.comment)).toEqual(['v6']);

    const lookup = await t.call('GET', `${A}/teamnet/routes/ip/10.1.44.5`);
    expect(lookup.body.result).toMatchObject({ tunnel_id: one.id, network: '10.1.0.0/16' });
    const inVnet = await t.call(
      'GET',
      `${A}/teamnet/routes/ip/10.1.44.5?virtual_network_id=${vnet}`,
    );
    expect(inVnet.body.result.tunnel_id).toBe(two.id);
    expect((await t.call('GET', `${A}/teamnet/routes/ip/192.0.2.1`)).status).toBe(404);

    const id = spec.body.result.id;
    const edited = await t.call('PATCH', `${A}/teamnet/routes/${id}`, { comment: 'hq' });
    expect(edited.body.result.comment).toBe('hq');
    expect((await t.call('GET', `${A}/teamnet/routes/${id}`)).body.result.comment).toBe('hq');
    const removed = await t.call('DELETE', `${A}/teamnet/routes/${id}`);
    expect(removed.body.result).toMatchObject({ id, network: '10.1.0.0/16' });
    expect((await t.call('GET', `${A}/teamnet/routes/${id}`)).status).toBe(404);
  });

  it('the CIDR-in-path forms', async () => {
    const tun = await tunnel('routes-cidr');
    const enc = encodeURIComponent('172.16.0.0/12');
    const created = await t.call('POST', `${A}/teamnet/routes/network/${enc}`, {
      tunnel_id: tun.id,
      comment: 'by path',
    });
    expect(created.body.result).toMatchObject({ network: '172.16.0.0/12', tunnel_id: tun.id });
    const edited = await t.call('PATCH', `${A}/teamnet/routes/network/${enc}`, {
      comment: 'edited',
    });
    expect(edited.body.result.comment).toBe('edited');
    const deleted = await t.call(
      'DELETE',
      `${A}/teamnet/routes/network/${enc}?tunnel_id=${tun.id}`,
    );
    expect(deleted.status).toBe(200);
    expect((await t.call('DELETE', `${A}/teamnet/routes/network/${enc}`)).status).toBe(404);
  });

  it('bad networks and unknown tunnels', async () => {
    const tun = await tunnel('routes-bad');
    const bad = await t.call('POST', `${A}/tunnels/${tun.id}/routes`, {
      ip_network: '10.0.0.0/40',
    });
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0].message).toContain('ip_network');
    expect(
      (await t.call('POST', `${A}/teamnet/routes`, { network: 'nope', tunnel_id: tun.id })).status,
    ).toBe(400);
    expect((await t.call('POST', `${A}/teamnet/routes`, { network: '10.9.0.0/16' })).status).toBe(
      400,
    );
    expect(
      (
        await t.call('POST', `${A}/teamnet/routes`, {
          network: '10.9.0.0/16',
          tunnel_id: '00000000-0000-4000-8000-000000000000',
        })
      ).status,
    ).toBe(404);
  });

  it('deleting a tunnel removes its routes', async () => {
    const tun = await tunnel('routes-cascade');
    await t.call('POST', `${A}/tunnels/${tun.id}/routes`, { ip_network: '192.168.77.0/24' });
    await t.call('DELETE', `${A}/tunnels/${tun.id}`);
    expect((await t.call('GET', `${A}/teamnet/routes/ip/192.168.77.1`)).status).toBe(404);
  });
});

describe('DNS routes', () => {
  let zone: { id: string; name: string };
  beforeAll(async () => {
    zone = await createZone(t, 'tunnel-routes.test');
  });

  async function recordsAt(name: string) {
    return (await t.call('GET', `/zones/${zone.id}/dns_records?name=${name}`)).body.result as {
      id: string;
      type: string;
      content: string;
      proxied: boolean;
    }[];
  }

  it('spec form: a proxied CNAME in the zone that owns the hostname; delete removes it', async () => {
    const tun = await tunnel('dns-spec');
    const res = await t.call('POST', `${A}/tunnels/${tun.id}/connections`, {
      hostname: 'App.Tunnel-Routes.test',
    });
    expect(res.status).toBe(200);
    expect(res.body.result).toMatchObject({
      tunnel_id: tun.id,
      hostname: 'app.tunnel-routes.test',
      zone_id: zone.id,
      cname: 'new',
    });
    expect(await recordsAt('app.tunnel-routes.test')).toMatchObject([
      { type: 'CNAME', content: `${tun.id}.cfargotunnel.com`, proxied: true },
    ]);
    const again = await t.call('POST', `${A}/tunnels/${tun.id}/connections`, {
      hostname: 'app.tunnel-routes.test',
    });
    expect(again.body.result.cname).toBe('unchanged');
    const del = await t.call('DELETE', `${A}/tunnels/${tun.id}/connections/${res.body.result.id}`);
    expect(del.status).toBe(200);
    expect(await recordsAt('app.tunnel-routes.test')).toEqual([]);
    expect(
      (await t.call('DELETE', `${A}/tunnels/${tun.id}/connections/${res.body.result.id}`)).status,
    ).toBe(404);
  });

  it('existing records conflict unless overwrite_existing; hostnames outside the account zones are refused', async () => {
    const tun = await tunnel('dns-conflict');
    await t.call('POST', `/zones/${zone.id}/dns_records`, {
      type: 'A',
      name: 'busy',
      content: '192.0.2.10',
      proxied: true,
    });
    const clash = await t.call('POST', `${A}/tunnels/${tun.id}/connections`, {
      hostname: 'busy.tunnel-routes.test',
    });
    expect(clash.status).toBe(400);
    const over = await t.call('POST', `${A}/tunnels/${tun.id}/connections`, {
      hostname: 'busy.tunnel-routes.test',
      overwrite_existing: true,
    });
    expect(over.body.result.cname).toBe('updated');
    expect(await recordsAt('busy.tunnel-routes.test')).toMatchObject([
      { type: 'CNAME', content: `${tun.id}.cfargotunnel.com` },
    ]);
    const outside = await t.call('POST', `${A}/tunnels/${tun.id}/connections`, {
      hostname: 'www.elsewhere.example',
    });
    expect(outside.status).toBe(400);
    expect(outside.body.errors[0].message).toContain('not inside any zone');
  });

  it('deleting a tunnel removes the CNAMEs its routes created, not records changed since', async () => {
    const tun = await tunnel('dns-gone');
    for (const host of ['gone-a', 'gone-b', 'kept'])
      expect((await t.call('POST', `${A}/tunnels/${tun.id}/connections`, { hostname: `${host}.tunnel-routes.test` })).status).toBe(200);
    const [kept] = await recordsAt('kept.tunnel-routes.test');
    const edit = await t.call('PATCH', `/zones/${zone.id}/dns_records/${kept.id}`, { content: 'origin.example.net' });
    expect(edit.status, edit.text).toBe(200);
    const del = await t.call('DELETE', `${A}/cfd_tunnel/${tun.id}`);
    expect(del.status, del.text).toBe(200);
    expect(await recordsAt('gone-a.tunnel-routes.test')).toEqual([]);
    expect(await recordsAt('gone-b.tunnel-routes.test')).toEqual([]);
    expect(await recordsAt('kept.tunnel-routes.test')).toMatchObject([{ type: 'CNAME', content: 'origin.example.net' }]);
  });

  it("the platform connector's zone form", async () => {
    const tun = await tunnel('dns-zone-form');
    const route = (body: unknown) =>
      t.call('PUT', `/zones/${zone.id}/tunnels/${tun.id}/routes`, body);
    expect(
      (await route({ type: 'dns', user_hostname: 'svc.tunnel-routes.test' })).body.result,
    ).toEqual({ cname: 'new', name: 'svc.tunnel-routes.test' });
    expect(
      (await route({ type: 'dns', user_hostname: 'svc.tunnel-routes.test' })).body.result.cname,
    ).toBe('unchanged');
    const other = await tunnel('dns-zone-form-2');
    const moved = await t.call('PUT', `/zones/${zone.id}/tunnels/${other.id}/routes`, {
      type: 'dns',
      user_hostname: 'svc.tunnel-routes.test',
      overwrite_existing: true,
    });
    expect(moved.body.result.cname).toBe('updated');
    expect((await route({ type: 'lb', lb_name: 'x' })).status).toBe(400);
    expect((await route({ type: 'dns', user_hostname: 'svc.other.test' })).status).toBe(400);
  });
});

describe('auth', () => {
  it('401 without credentials, 403 without the permission, read-only tokens cannot write', async () => {
    const tun = await tunnel('auth-target');
    expect((await t.call('GET', `${A}/cfd_tunnel`, undefined, { authorization: '' })).status).toBe(
      401,
    );
    expect(
      (await t.call('GET', `${A}/tunnels/${tun.id}`, undefined, { authorization: 'Bearer wrong' }))
        .status,
    ).toBe(401);
    const dnsOnly = await createToken(t, ['DNS Read'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    const denied = await t.call('GET', `${A}/cfd_tunnel`, undefined, {
      authorization: `Bearer ${dnsOnly}`,
    });
    expect(denied.status).toBe(403);
    const reader = await createToken(t, ['Cloudflare Tunnel Read'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    const h = { authorization: `Bearer ${reader}` };
    expect((await t.call('GET', `${A}/cfd_tunnel/${tun.id}`, undefined, h)).status).toBe(200);
    expect((await t.call('GET', `${A}/teamnet/routes`, undefined, h)).status).toBe(200);
    expect(
      (await t.call('POST', `${A}/tunnels`, { name: 'nope', tunnel_secret: secret }, h)).status,
    ).toBe(403);
    expect(
      (await t.call('PUT', `${A}/cfd_tunnel/${tun.id}/configurations`, { config: {} }, h)).status,
    ).toBe(403);
    expect((await t.call('DELETE', `${A}/cfd_tunnel/${tun.id}`, undefined, h)).status).toBe(403);
    const elsewhere = await createToken(t, ['Cloudflare Tunnel Write'], {
      [`com.cloudflare.api.account.${'a'.repeat(32)}`]: '*',
    });
    expect(
      (await t.call('GET', `${A}/cfd_tunnel`, undefined, { authorization: `Bearer ${elsewhere}` }))
        .status,
    ).toBe(403);
  });

  it('the connector endpoint takes upgrades with a valid tunnel token only', async () => {
    const tun = await tunnel('endpoint-auth');
    const plain = await t.call('GET', '/_outpost/tunnel/connect', undefined, { authorization: '' });
    expect(plain.status).toBe(426);
    const noToken = await upgrade('/_outpost/tunnel/connect', { upgrade: 'outpost-tunnel' });
    expect(noToken.status).toBe(401);
    const forged = Buffer.from(
      JSON.stringify({ a: t.accountId, t: tun.id, s: Buffer.alloc(32, 1).toString('base64') }),
    ).toString('base64');
    const wrong = await upgrade('/_outpost/tunnel/connect', {
      upgrade: 'outpost-tunnel',
      authorization: `Bearer ${forged}`,
    });
    expect(wrong.status).toBe(401);
    expect(JSON.parse(wrong.body).errors[0].message).toBe('Unauthorized: Invalid tunnel secret');
    const ok = await upgrade('/client/v4/_outpost/tunnel/connect', {
      upgrade: 'outpost-tunnel',
      authorization: `Bearer ${tun.token}`,
    });
    expect(ok).toMatchObject({ status: 101, upgraded: true });
    const access = await upgrade('/_outpost/tunnel/access', {
      upgrade: 'outpost-tcp',
      'outpost-destination': '10.0.0.1:22',
    });
    expect(access.status).toBe(401);
    // Other upgrade requests on the API port still get the API's answer.
    const foreign = await upgrade('/client/v4/zones', {
      upgrade: 'websocket',
      authorization: `Bearer ${t.token}`,
    });
    expect(foreign.status).toBe(200);
  });
});

describe('--tunnel-endpoint', () => {
  it('is the endpoint tokens carry', async () => {
    const other = await startTestServer({ tunnelEndpoint: 'https://tunnels.example.net/' });
    try {
      // The upgrade path is served from the first request on a new server.
      expect(
        (await upgrade('/_outpost/tunnel/connect', { upgrade: 'outpost-tunnel' }, other.url))
          .status,
      ).toBe(401);
      const res = await other.call('POST', `/accounts/${other.accountId}/tunnels`, {
        name: 'ep',
        tunnel_secret: secret,
      });
      expect(JSON.parse(Buffer.from(res.body.result.token, 'base64').toString()).e).toBe(
        'https://tunnels.example.net',
      );
    } finally {
      await other.stop();
    }
  });
});
