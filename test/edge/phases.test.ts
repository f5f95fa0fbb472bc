/**
 * The edge's own phases on real requests: IP access rules, custom rules (block, skip, log,
 * challenge with the clearance round trip) and origin rules (another port, Host override).
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../support/server.ts';
import { echoHandler, startOrigin, type Origin } from '../support/origins.ts';
import { solveChallenge } from '../../src/edge/challenge.ts';

const ORIGIN = '127.0.11.1';
let t: TestServer;
let edgeUrl: URL;
let zone: { id: string; name: string };
const origins: Origin[] = [];

function get(host: string, path = '/', headers: Record<string, string> = {}, method = 'GET', body?: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: edgeUrl.hostname, port: edgeUrl.port, path, method, headers: { host, ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function putPhase(phase: string, rules: unknown[]) {
  const res = await t.call('PUT', `/zones/${zone.id}/rulesets/phases/${phase}/entrypoint`, { rules });
  if (res.status !== 200) throw new Error(`${phase}: ${res.text}`);
}

beforeAll(async () => {
  t = await startTestServer({ edgeTestHeaders: true });
  edgeUrl = new URL(t.server.listeners.find((l) => l.name.startsWith('edge'))!.address);
  origins.push(await startOrigin(ORIGIN, echoHandler));
  origins.push(await startOrigin(ORIGIN, (req, res) => res.end(`alt port, host ${req.headers.host}`), undefined, 8081));
  zone = await createZone(t, 'phases.test');
  for (const name of ['www', 'api']) {
    await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name, content: ORIGIN, proxied: true, ttl: 1 });
  }
});
afterAll(async () => {
  for (const o of origins) await o.close();
  await t.stop();
});

describe('custom rules', () => {
  it('blocks, logs and skips real requests, and changes apply at once', async () => {
    expect((await get('www.phases.test', '/admin')).status).toBe(200);
    await putPhase('http_request_firewall_custom', [
      { action: 'skip', expression: 'http.request.headers["x-trusted"][0] eq "yes"', action_parameters: { ruleset: 'current' }, description: 'trusted' },
      { action: 'log', expression: 'starts_with(http.request.uri.path, "/admin")', description: 'log admin' },
      { action: 'block', expression: 'http.request.uri.path eq "/admin" or http.user_agent contains "BadBot"', description: 'block admin' },
      { action: 'block', expression: 'http.request.uri.path eq "/teapot"', action_parameters: { response: { status_code: 418, content: 'no tea', content_type: 'text/plain' } } },
    ]);
    const blocked = await get('www.phases.test', '/admin');
    expect(blocked.status).toBe(403);
    expect(blocked.body).toContain('Error 1020');
    expect((await get('www.phases.test', '/', { 'user-agent': 'BadBot/1.0' })).status).toBe(403);
    expect((await get('www.phases.test', '/admin', { 'x-trusted': 'yes' })).status).toBe(200);
    const teapot = await get('www.phases.test', '/teapot');
    expect(teapot.status).toBe(418);
    expect(teapot.body).toBe('no tea');
    expect((await get('www.phases.test', '/fine')).status).toBe(200);
  });

  it('challenges, and a solved challenge earns a clearance that passes', async () => {
    await putPhase('http_request_firewall_custom', [{ action: 'managed_challenge', expression: 'http.request.uri.path eq "/guarded"' }]);
    const page = await get('www.phases.test', '/guarded');
    expect(page.status).toBe(403);
    expect(page.headers['cf-mitigated']).toBe('challenge');
    const token = /const token = "([^"]+)"/.exec(page.body)![1];
    const wrong = await get('www.phases.test', '/cdn-cgi/challenge-platform/verify', { 'content-type': 'application/x-www-form-urlencoded' }, 'POST', `token=${encodeURIComponent(token)}&answer=99999999`);
    expect(wrong.status).toBe(403);
    const answer = solveChallenge(token);
    const verified = await get('www.phases.test', '/cdn-cgi/challenge-platform/verify', { 'content-type': 'application/x-www-form-urlencoded' }, 'POST', `token=${encodeURIComponent(token)}&answer=${answer}`);
    expect(verified.status).toBe(200);
    const cookie = String(verified.headers['set-cookie']).split(';')[0];
    expect(cookie).toMatch(/^cf_clearance=/);
    expect((await get('www.phases.test', '/guarded', { cookie })).status).toBe(200);
    // The clearance is bound to the client address.
    expect((await get('www.phases.test', '/guarded', { cookie, 'x-outpost-client-ip': '198.51.100.9' })).status).toBe(403);
  });
});

describe('origin rules', () => {
  it('route to another port with a Host override', async () => {
    await putPhase('http_request_origin', [
      { action: 'route', expression: 'http.host eq "api.phases.test"', action_parameters: { origin: { port: 8081 }, host_header: 'internal.example' } },
    ]);
    const res = await get('api.phases.test', '/');
    expect(res.body).toBe('alt port, host internal.example');
    expect(JSON.parse((await get('www.phases.test', '/x')).body).url).toBe('/x');
  });
});

describe('IP access rules', () => {
  it('block by address and country, allow-list bypasses custom rules', async () => {
    await putPhase('http_request_firewall_custom', [{ action: 'block', expression: 'http.request.uri.path eq "/admin"' }]);
    const add = async (mode: string, target: string, value: string) => {
      const res = await t.call('POST', `/zones/${zone.id}/firewall/access_rules/rules`, { mode, configuration: { target, value } });
      if (res.status !== 200) throw new Error(res.text);
    };
    await add('block', 'ip', '203.0.113.5');
    await add('block', 'country', 'NZ');
    await add('whitelist', 'ip', '203.0.113.9');
    expect((await get('www.phases.test', '/', { 'x-outpost-client-ip': '203.0.113.5' })).status).toBe(403);
    expect((await get('www.phases.test', '/', { 'x-outpost-client-ip': '203.0.113.6', 'x-outpost-country': 'NZ' })).status).toBe(403);
    expect((await get('www.phases.test', '/', { 'x-outpost-client-ip': '203.0.113.6', 'x-outpost-country': 'AU' })).status).toBe(200);
    expect((await get('www.phases.test', '/admin', { 'x-outpost-client-ip': '203.0.113.6' })).status).toBe(403);
    expect((await get('www.phases.test', '/admin', { 'x-outpost-client-ip': '203.0.113.9' })).status).toBe(200);
  });
});
