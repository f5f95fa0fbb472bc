/**
 * The official `cloudflare` client against the proxied-application routes: `spectrum.apps.*`
 * (create → get → list across pages → update → delete, typed errors), `spectrum.protocols.list`,
 * and `spectrum.analytics.*` over real traffic.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cloudflare, sdk } from '../../support/sdk.ts';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { flowEvents, freePort, startEcho, tcpExchange, type EchoOrigin } from './peers.ts';

let t: TestServer;
let cf: Cloudflare;
let zoneId: string;
let echo: EchoOrigin;

beforeAll(async () => {
  t = await startTestServer({ dnsPort: 0 });
  cf = sdk(t);
  zoneId = (await createZone(t, 'sdk-spectrum.test')).id;
  echo = await startEcho();
});
afterAll(async () => {
  await echo?.close();
  await t?.stop();
});

describe('spectrum.apps', () => {
  it('create → get → list (paged) → update → delete, with the unwrapped results', async () => {
    const p1 = await freePort();
    const created = await cf.spectrum.apps.create({
      zone_id: zoneId,
      protocol: `tcp/${p1}`,
      dns: { type: 'CNAME', name: 'ssh.sdk-spectrum.test' },
      origin_direct: [`tcp://127.0.0.1:${echo.port}`],
      traffic_type: 'direct',
      proxy_protocol: 'off',
      tls: 'off',
      edge_ips: { type: 'dynamic', connectivity: 'all' },
    });
    expect(created.id).toMatch(/^[0-9a-f]{32}$/);
    expect((await tcpExchange(p1, 'via sdk')).toString()).toBe('via sdk');
    const got = await cf.spectrum.apps.get(created.id, { zone_id: zoneId });
    expect(got).toEqual(created);

    const p2 = await freePort();
    const second = await cf.spectrum.apps.create({
      zone_id: zoneId,
      protocol: `tcp/${p2}-${p2}`,
      dns: { type: 'CNAME', name: 'db.sdk-spectrum.test' },
      origin_dns: { name: 'localhost' },
      origin_port: String(echo.port),
      traffic_type: 'direct',
    });
    expect(second).toMatchObject({ protocol: `tcp/${p2}`, origin_port: echo.port });
    expect((await tcpExchange(p2, 'by name')).toString()).toBe('by name');

    const seen: string[] = [];
    for await (const app of cf.spectrum.apps.list({ zone_id: zoneId, per_page: 1 })) seen.push(app.id);
    expect(seen.sort()).toEqual([created.id, second.id].sort());

    const updated = await cf.spectrum.apps.update(created.id, {
      zone_id: zoneId,
      protocol: `tcp/${p1}`,
      dns: { type: 'CNAME', name: 'ssh.sdk-spectrum.test' },
      origin_direct: [`tcp://127.0.0.1:${echo.port}`],
      traffic_type: 'direct',
      proxy_protocol: 'v1',
    });
    expect(updated).toMatchObject({ id: created.id, proxy_protocol: 'v1', created_on: created.created_on });

    const deleted = await cf.spectrum.apps.delete(created.id, { zone_id: zoneId });
    expect(deleted).toEqual({ id: created.id });
    await cf.spectrum.apps.delete(second.id, { zone_id: zoneId });
  });

  it('typed errors: NotFoundError, BadRequestError, ConflictError', async () => {
    const missing = await cf.spectrum.apps.get('0'.repeat(32), { zone_id: zoneId }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(Cloudflare.NotFoundError);
    expect((missing as InstanceType<typeof Cloudflare.NotFoundError>).errors[0]).toMatchObject({ code: 11002 });
    const bad = await cf.spectrum.apps.create({ zone_id: zoneId, protocol: 'tcp/0', dns: { type: 'CNAME', name: 'x.sdk-spectrum.test' }, traffic_type: 'direct' }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(Cloudflare.BadRequestError);
    const port = await freePort();
    const body = { zone_id: zoneId, protocol: `tcp/${port}`, dns: { type: 'CNAME' as const, name: 'dup.sdk-spectrum.test' }, origin_direct: [`tcp://127.0.0.1:${echo.port}`], traffic_type: 'direct' as const };
    await cf.spectrum.apps.create(body);
    const dup = await cf.spectrum.apps.create(body).catch((e: unknown) => e);
    expect(dup).toBeInstanceOf(Cloudflare.ConflictError);
  });

  it('spectrum.protocols.list', async () => {
    const names: string[] = [];
    for await (const p of cf.spectrum.protocols.list({ zone_id: zoneId })) names.push(p.name);
    expect(names).toContain('SSH');
  });
});

describe('spectrum.analytics', () => {
  it('aggregates.currents, events.summaries and events.bytimes report the bytes that went through', async () => {
    const port = await freePort();
    const app = await cf.spectrum.apps.create({ zone_id: zoneId, protocol: `tcp/${port}`, dns: { type: 'CNAME', name: 'stats.sdk-spectrum.test' }, origin_direct: [`tcp://127.0.0.1:${echo.port}`], traffic_type: 'direct' });
    const events = flowEvents(t.server.events);
    const since = new Date(Date.now() - 1000).toISOString();
    await tcpExchange(port, randomBytes(2048));
    await events.wait((e) => e.appId === app.id && e.event === 'disconnect', 3000, 'disconnect');
    events.stop();

    const current = await cf.spectrum.analytics.aggregates.currents.get({ zone_id: zoneId, appID: app.id });
    expect(current).toEqual([{ appID: app.id, bytesIngress: 2048, bytesEgress: 2048, connections: 1, durationAvg: expect.any(Number) }]);

    const summary = await cf.spectrum.analytics.events.summaries.get({ zone_id: zoneId, since, metrics: ['count', 'bytesIngress', 'bytesEgress'], dimensions: ['event'], filters: `appID==${app.id}`, sort: ['-count'] });
    expect(summary.data).toEqual([
      { dimensions: ['connect'], metrics: [1, 0, 0] },
      { dimensions: ['disconnect'], metrics: [1, 2048, 2048] },
    ]);
    expect(summary.totals).toEqual({ count: 2, bytesIngress: 2048, bytesEgress: 2048 });

    const bytime = await cf.spectrum.analytics.events.bytimes.get({ zone_id: zoneId, time_delta: 'minute', since, metrics: ['bytesIngress'], dimensions: ['appID'], filters: `appID==${app.id}` });
    expect(bytime.time_intervals!.length).toBeGreaterThanOrEqual(1);
    const series = (bytime.data[0].metrics as number[][])[0];
    expect(series.reduce((s, x) => s + x, 0)).toBe(2048);
    expect(bytime.query).toMatchObject({ metrics: ['bytesIngress'], dimensions: ['appID'] });
  });
});
