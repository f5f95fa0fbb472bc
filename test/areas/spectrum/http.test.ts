/**
 * `traffic_type: http` and `https` applications: their connections go through the edge's HTTP
 * pipeline (custom rules apply, platform headers reach the origin) to the application's origin.
 */
import http from 'node:http';
import https from 'node:https';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { echoHandler, startOrigin, type Origin } from '../../support/origins.ts';
import { freePort } from './peers.ts';

let t: TestServer;
let zone: { id: string; name: string };
let origin: Origin;
let originPort: number;

function request(lib: typeof http | typeof https, port: number, host: string, path: string): Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const req = lib.request({ host: '127.0.0.1', port, path, headers: { host }, rejectUnauthorized: false, servername: host }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body, headers: res.headers }));
    });
    req.setTimeout(5000, () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

beforeAll(async () => {
  t = await startTestServer({ dnsPort: 0 });
  zone = await createZone(t, 'http-apps.test');
  originPort = await freePort();
  origin = await startOrigin('127.0.0.1', echoHandler, undefined, originPort);
  const rules = await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, {
    rules: [{ action: 'block', expression: 'http.request.uri.path eq "/blocked"' }],
  });
  expect(rules.status).toBe(200);
});
afterAll(async () => {
  await origin?.close();
  await t?.stop();
});

async function app(trafficType: 'http' | 'https', name: string): Promise<number> {
  const port = await freePort();
  const res = await t.call('POST', `/zones/${zone.id}/spectrum/apps`, {
    protocol: `tcp/${port}`,
    dns: { type: 'CNAME', name: `${name}.${zone.name}` },
    origin_direct: [`tcp://127.0.0.1:${originPort}`],
    traffic_type: trafficType,
  });
  if (res.status !== 200) throw new Error(res.text);
  return port;
}

describe('HTTP applications through the edge pipeline', () => {
  it('http: requests reach the origin with the platform headers, and custom rules apply', async () => {
    const port = await app('http', 'web');
    const ok = await request(http, port, `web.${zone.name}`, '/hello');
    expect(ok.status).toBe(200);
    const seen = JSON.parse(ok.body);
    expect(seen.url).toBe('/hello');
    expect(seen.headers['cf-ray']).toMatch(/-OUT$/);
    expect(seen.headers['cf-connecting-ip']).toBe('127.0.0.1');
    expect((await request(http, port, `web.${zone.name}`, '/blocked')).status).toBe(403);
  });

  it('https: TLS is terminated at the edge and the request runs the same way', async () => {
    const port = await app('https', 'secure');
    const ok = await request(https, port, `secure.${zone.name}`, '/s');
    expect(ok.status).toBe(200);
    const seen = JSON.parse(ok.body);
    expect(seen.headers['x-forwarded-proto']).toBe('https');
    expect((await request(https, port, `secure.${zone.name}`, '/blocked')).status).toBe(403);
  });
});
