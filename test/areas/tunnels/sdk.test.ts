import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';

let t: TestServer;
let cf: Cloudflare;
let account_id: string;
const tunnel_secret = Buffer.alloc(32, 3).toString('base64');

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
  account_id = t.accountId;
});
afterAll(() => t.stop());

describe('official client: zeroTrust.tunnels.cloudflared', () => {
  it('create → get → edit → token → configurations → connections → delete, unwrapped', async () => {
    const created = await cf.zeroTrust.tunnels.cloudflared.create({
      account_id,
      name: 'sdk-tunnel',
      config_src: 'cloudflare',
      tunnel_secret,
    });
    expect(created).toMatchObject({
      name: 'sdk-tunnel',
      status: 'inactive',
      config_src: 'cloudflare',
      tun_type: 'cfd_tunnel',
    });
    const id = created.id!;
    expect((await cf.zeroTrust.tunnels.cloudflared.get(id, { account_id })).name).toBe(
      'sdk-tunnel',
    );
    const edited = await cf.zeroTrust.tunnels.cloudflared.edit(id, {
      account_id,
      name: 'sdk-tunnel-2',
    });
    expect(edited.name).toBe('sdk-tunnel-2');

    const token = await cf.zeroTrust.tunnels.cloudflared.token.get(id, { account_id });
    expect(JSON.parse(Buffer.from(token, 'base64').toString())).toEqual({
      a: account_id,
      t: id,
      s: tunnel_secret,
      e: t.url,
    });

    const config = await cf.zeroTrust.tunnels.cloudflared.configurations.update(id, {
      account_id,
      config: {
        ingress: [
          { hostname: 'sdk.example.com', service: 'http://127.0.0.1:8000', path: '^/api' },
          { hostname: '', service: 'http_status:404' },
        ],
      },
    });
    expect(config).toMatchObject({ tunnel_id: id, version: 1, source: 'cloudflare' });
    const got = await cf.zeroTrust.tunnels.cloudflared.configurations.get(id, { account_id });
    expect(got.config?.ingress?.[0]).toMatchObject({ hostname: 'sdk.example.com', path: '^/api' });

    const clients = [];
    for await (const c of cf.zeroTrust.tunnels.cloudflared.connections.get(id, { account_id }))
      clients.push(c);
    expect(clients).toEqual([]);
    expect(
      await cf.zeroTrust.tunnels.cloudflared.connections.delete(id, { account_id }),
    ).toBeNull();

    const deleted = await cf.zeroTrust.tunnels.cloudflared.delete(id, { account_id });
    expect(deleted).toMatchObject({ id, name: 'sdk-tunnel-2' });
    expect(deleted.deleted_at).toBeTruthy();
    await expect(cf.zeroTrust.tunnels.cloudflared.get(id, { account_id })).rejects.toBeInstanceOf(
      Cloudflare.NotFoundError,
    );
  });

  it('lists across pages with for await (cloudflared and the all-tunnels list)', async () => {
    for (let i = 0; i < 5; i++)
      await cf.zeroTrust.tunnels.cloudflared.create({
        account_id,
        name: `sdk-page-${i}`,
        tunnel_secret,
      });
    const names: string[] = [];
    for await (const tun of cf.zeroTrust.tunnels.cloudflared.list({
      account_id,
      include_prefix: 'sdk-page-',
      per_page: 2,
    }))
      names.push(tun.name!);
    expect(names).toEqual(['sdk-page-0', 'sdk-page-1', 'sdk-page-2', 'sdk-page-3', 'sdk-page-4']);
    const all: string[] = [];
    for await (const tun of cf.zeroTrust.tunnels.list({
      account_id,
      per_page: 3,
      name: 'sdk-page-3',
    }))
      all.push(tun.name!);
    expect(all).toEqual(['sdk-page-3']);
  });

  it('typed errors: conflict with the code, bad request, permission denied', async () => {
    await cf.zeroTrust.tunnels.cloudflared.create({ account_id, name: 'sdk-dup', tunnel_secret });
    const dup = await cf.zeroTrust.tunnels.cloudflared
      .create({ account_id, name: 'sdk-dup', tunnel_secret })
      .catch((e) => e);
    expect(dup).toBeInstanceOf(Cloudflare.ConflictError);
    expect(dup.errors[0].code).toBe(1013);
    const tun = await cf.zeroTrust.tunnels.cloudflared.create({
      account_id,
      name: 'sdk-bad-config',
      tunnel_secret,
    });
    const bad = await cf.zeroTrust.tunnels.cloudflared.configurations
      .update(tun.id!, {
        account_id,
        config: { ingress: [{ hostname: 'x.example.com', service: 'http://127.0.0.1:1' }] },
      })
      .catch((e) => e);
    expect(bad).toBeInstanceOf(Cloudflare.BadRequestError);
    expect(bad.errors[0].message).toBe(
      'The last ingress rule must match all URLs (i.e. it should not have a hostname or path filter)',
    );
    const reader = await createToken(t, ['Cloudflare Tunnel Read'], {
      [`com.cloudflare.api.account.${account_id}`]: '*',
    });
    await expect(
      sdk(t, { apiToken: reader }).zeroTrust.tunnels.cloudflared.create({
        account_id,
        name: 'x',
        tunnel_secret,
      }),
    ).rejects.toBeInstanceOf(Cloudflare.PermissionDeniedError);
  });
});

describe('official client: zeroTrust.networks.routes', () => {
  it('create → get → edit → list → lookup by IP → network forms → delete', async () => {
    const tun = await cf.zeroTrust.tunnels.cloudflared.create({
      account_id,
      name: 'sdk-routes',
      tunnel_secret,
    });
    const tunnel_id = tun.id!;
    const route = await cf.zeroTrust.networks.routes.create({
      account_id,
      network: '10.50.0.0/16',
      tunnel_id,
      comment: 'lab',
    });
    expect(route).toMatchObject({ network: '10.50.0.0/16', tunnel_id, comment: 'lab' });
    expect((await cf.zeroTrust.networks.routes.get(route.id!, { account_id })).network).toBe(
      '10.50.0.0/16',
    );
    expect(
      (await cf.zeroTrust.networks.routes.edit(route.id!, { account_id, comment: 'lab 2' }))
        .comment,
    ).toBe('lab 2');
    for (let i = 0; i < 3; i++)
      await cf.zeroTrust.networks.routes.create({
        account_id,
        network: `10.6${i}.0.0/16`,
        tunnel_id,
      });
    const listed = [];
    for await (const r of cf.zeroTrust.networks.routes.list({ account_id, tunnel_id, per_page: 2 }))
      listed.push(r);
    expect(listed.map((r) => r.network)).toEqual([
      '10.50.0.0/16',
      '10.60.0.0/16',
      '10.61.0.0/16',
      '10.62.0.0/16',
    ]);
    expect(listed[0]).toMatchObject({ tunnel_name: 'sdk-routes', tun_type: 'cfd_tunnel' });
    const byIp = await cf.zeroTrust.networks.routes.ips.get('10.61.3.4', { account_id });
    expect(byIp.network).toBe('10.61.0.0/16');

    const overlap = await cf.zeroTrust.networks.routes
      .create({ account_id, network: '10.50.1.0/24', tunnel_id })
      .catch((e) => e);
    expect(overlap).toBeInstanceOf(Cloudflare.ConflictError);

    const viaPath = await cf.zeroTrust.networks.routes.networks.create(
      encodeURIComponent('192.168.40.0/24'),
      { account_id, tunnel_id },
    );
    expect(viaPath.network).toBe('192.168.40.0/24');
    const gone = await cf.zeroTrust.networks.routes.networks.delete(
      encodeURIComponent('192.168.40.0/24'),
      { account_id, tunnel_id },
    );
    expect(gone.network).toBe('192.168.40.0/24');
    const removed = await cf.zeroTrust.networks.routes.delete(route.id!, { account_id });
    expect(removed.id).toBe(route.id);
    await expect(
      cf.zeroTrust.networks.routes.get(route.id!, { account_id }),
    ).rejects.toBeInstanceOf(Cloudflare.NotFoundError);
  });
});
