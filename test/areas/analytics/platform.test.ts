/**
 * The platform's own datasets: real requests through the edge to a loopback origin, and a real
 * TCP exchange through a proxied application, queried back through the SQL endpoint — and only by
 * the account that owns the zone.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { echoHandler, startOrigin, type Origin } from '../../support/origins.ts';
import { freePort, startEcho, tcpExchange, type EchoOrigin } from '../spectrum/peers.ts';

// A loopback address this file owns for its port-80 origin.
const ORIGIN = '127.0.14.1';

let t: TestServer;
let edgeUrl: URL;
let origin: Origin;
let echo: EchoOrigin;
let zone: { id: string; name: string };

function get(host: string, path: string, method = 'GET'): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: edgeUrl.hostname, port: edgeUrl.port, path, method, headers: { host } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    req.on('error', reject);
    req.end();
  });
}

async function sql(query: string, token = t.token): Promise<{ status: number; body: any; text: string }> {
  const res = await fetch(`${t.api}/accounts/${t.accountId}/analytics_engine/sql`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}` },
    body: query,
  });
  const text = await res.text();
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: res.status, body, text };
}

async function until(query: string, ok: (data: any[]) => boolean): Promise<any[]> {
  let data: any[] = [];
  for (let i = 0; i < 100; i++) {
    const r = await sql(query);
    expect(r.status, r.text).toBe(200);
    data = r.body.data;
    if (ok(data)) return data;
    await new Promise((res) => setTimeout(res, 100));
  }
  return data;
}

beforeAll(async () => {
  t = await startTestServer({ analyticsFlushMs: 50 });
  edgeUrl = new URL(t.server.listeners.find((l) => l.name.startsWith('edge'))!.address);
  origin = await startOrigin(ORIGIN, echoHandler);
  echo = await startEcho();
  zone = await createZone(t, 'analytics-platform.test');
  const rec = await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: `www.${zone.name}`, content: ORIGIN, proxied: true, ttl: 1 });
  expect(rec.status, rec.text).toBe(200);
}, 60_000);
afterAll(async () => {
  await origin?.close();
  await echo?.close();
  await t?.stop();
});

describe('platform datasets', () => {
  it('edge requests are rows of outpost_http_requests', async () => {
    const host = `www.${zone.name}`;
    for (let i = 0; i < 6; i++) expect(await get(host, `/page/${i % 2}?q=${i}`)).toBe(200);
    expect(await get(host, '/post', 'POST')).toBe(200);
    const data = await until(
      "SELECT path, method, status, count() AS n, SUM(_sample_interval) AS s FROM outpost_http_requests WHERE host = 'www.analytics-platform.test' GROUP BY path, method, status ORDER BY path, method",
      (d) => d.reduce((a, r) => a + Number(r.n), 0) >= 7,
    );
    expect(data).toEqual([
      { path: '/page/0', method: 'GET', status: 200, n: '3', s: '3' },
      { path: '/page/1', method: 'GET', status: 200, n: '3', s: '3' },
      { path: '/post', method: 'POST', status: 200, n: '1', s: '1' },
    ]);
    const r = await sql(`SELECT zone_id, dataset, max(bytes_out) > 0 AS sent, min(duration_ms) >= 0 AS timed FROM outpost_http_requests GROUP BY zone_id, dataset`);
    expect(r.body.data).toEqual([{ zone_id: zone.id, dataset: 'outpost_http_requests', sent: true, timed: true }]);
  });

  it('proxied TCP application events are rows of outpost_spectrum_events', async () => {
    const port = await freePort('tcp');
    const app = await t.call('POST', `/zones/${zone.id}/spectrum/apps`, {
      protocol: `tcp/${port}`,
      dns: { type: 'CNAME', name: `tcp.${zone.name}` },
      origin_direct: [`tcp://127.0.0.1:${echo.port}`],
    });
    expect(app.status, app.text).toBe(200);
    const appId = app.body.result.id;
    const payload = Buffer.alloc(1000, 1);
    for (let i = 0; i < 2; i++) expect((await tcpExchange(port, payload)).length).toBe(1000);
    const data = await until(
      `SELECT event, count() AS n, sum(bytes_ingress) AS ingress, sum(bytes_egress) AS egress FROM outpost_spectrum_events WHERE app_id = '${appId}' GROUP BY event ORDER BY event`,
      (d) => d.some((r) => r.event === 'disconnect' && r.n === '2'),
    );
    const byEvent = Object.fromEntries(data.map((r) => [r.event, r]));
    expect(byEvent.connect.n).toBe('2');
    expect(byEvent.disconnect.n).toBe('2');
    expect(data.reduce((a, r) => a + r.ingress, 0)).toBe(2000);
    expect(data.reduce((a, r) => a + r.egress, 0)).toBe(2000);
  });

  it('another account sees none of it', async () => {
    const other = 'e'.repeat(32);
    const res = await fetch(`${t.api}/accounts/${other}/analytics_engine/sql`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.token}` },
      body: 'SELECT count() AS n FROM outpost_http_requests',
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).data).toEqual([{ n: '0' }]);
    // A token scoped to that account cannot read this one's.
    const scoped = await createToken(t, ['Account Analytics Read'], { [`com.cloudflare.api.account.${other}`]: '*' });
    expect((await sql('SELECT count() FROM outpost_http_requests', scoped)).status).toBe(403);
  });
});
