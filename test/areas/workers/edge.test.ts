/**
 * Account scripts served by the edge (real workerd, a real HTTP origin): zone routes (the script
 * runs in place of the origin and its fetch() to the same host reaches the origin; the most
 * specific route wins; a route without a script turns scripts off), custom domains, the
 * workers.dev-style subdomain, the 1101 page, and the management routes' bad input and auth —
 * through raw HTTP and the official client.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { sdk } from '../../support/sdk.ts';
import { echoHandler, startOrigin, type Origin } from '../../support/origins.ts';
import { deployScript, edgeGet, edgeUrlOf } from './helpers.ts';

const ORIGIN = '127.0.71.1';
let t: TestServer;
let edge: URL;
let zone: { id: string; name: string };
let origin: Origin;

const PROXY_SCRIPT = `export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname.endsWith('/throw')) throw new Error('boom from the script');
    const res = await fetch(request);
    const out = new Response(res.body, res);
    out.headers.set('x-worker', 'proxy');
    out.headers.set('x-worker-host', url.hostname);
    return out;
  },
};`;

const HELLO_SCRIPT = `export default {
  async fetch(request, env) {
    return Response.json({ hello: env.WHO ?? 'world', url: request.url, cf: request.cf?.colo ?? null });
  },
};`;

beforeAll(async () => {
  t = await startTestServer({ workersDevSuffix: 'workers.test' });
  edge = edgeUrlOf(t);
  origin = await startOrigin(ORIGIN, echoHandler);
  zone = await createZone(t, 'wk.test');
  for (const name of ['www', 'api']) {
    const res = await t.call('POST', `/zones/${zone.id}/dns_records`, {
      type: 'A',
      name,
      content: ORIGIN,
      proxied: true,
      ttl: 1,
    });
    if (res.status !== 200) throw new Error(res.text);
  }
  await deployScript(t, 'proxy', PROXY_SCRIPT);
  await deployScript(t, 'hello', HELLO_SCRIPT, {
    bindings: [{ type: 'plain_text', name: 'WHO', text: 'outpost' }],
  });
}, 60_000);

afterAll(async () => {
  await origin?.close();
  await t?.stop();
});

describe('zone routes at the edge', () => {
  it('runs the route script in place of the origin; its fetch() reaches the origin', async () => {
    const cf = sdk(t);
    const route = await cf.workers.routes.create({
      zone_id: zone.id,
      pattern: 'www.wk.test/api/*',
      script: 'proxy',
    });
    expect(route).toMatchObject({ pattern: 'www.wk.test/api/*', script: 'proxy' });
    expect(route.id).toMatch(/^[0-9a-f]{32}$/);

    const hit = await edgeGet(edge, 'www.wk.test', '/api/items?x=1', {
      headers: { 'x-test': 'yes' },
    });
    expect(hit.status).toBe(200);
    expect(hit.headers['x-worker']).toBe('proxy');
    expect(hit.headers['x-worker-host']).toBe('www.wk.test');
    expect(hit.headers['x-origin']).toBe('echo');
    const seen = JSON.parse(hit.body);
    expect(seen.url).toBe('/api/items?x=1');
    expect(seen.headers['x-test']).toBe('yes');
    expect(seen.headers.host).toBe('www.wk.test');

    // Outside the pattern: straight to the origin, no script.
    const miss = await edgeGet(edge, 'www.wk.test', '/other');
    expect(miss.status).toBe(200);
    expect(miss.headers['x-worker']).toBeUndefined();
    expect(miss.headers['x-origin']).toBe('echo');
    // Another host of the zone is not matched either.
    expect((await edgeGet(edge, 'api.wk.test', '/api/items')).headers['x-worker']).toBeUndefined();

    // POST bodies stream through the script to the origin.
    const post = await edgeGet(edge, 'www.wk.test', '/api/upload', {
      method: 'POST',
      body: 'x'.repeat(5000),
    });
    expect(JSON.parse(post.body)).toMatchObject({ method: 'POST', length: 5000 });

    const listed = [];
    for await (const r of cf.workers.routes.list({ zone_id: zone.id })) listed.push(r);
    expect(listed.map((r) => r.id)).toContain(route.id);
    expect(await cf.workers.routes.get(route.id, { zone_id: zone.id })).toMatchObject({
      script: 'proxy',
    });
  });

  it('the most specific route wins; a route without a script turns scripts off', async () => {
    const cf = sdk(t);
    const off = await cf.workers.routes.create({
      zone_id: zone.id,
      pattern: 'www.wk.test/api/public/*',
    });
    const wild = await cf.workers.routes.create({
      zone_id: zone.id,
      pattern: '*wk.test/hello*',
      script: 'hello',
    });
    const plain = await edgeGet(edge, 'www.wk.test', '/api/public/file');
    expect(plain.headers['x-worker']).toBeUndefined();
    expect(plain.headers['x-origin']).toBe('echo');
    const hello = await edgeGet(edge, 'api.wk.test', '/hello/there');
    expect(hello.status).toBe(200);
    expect(JSON.parse(hello.body)).toMatchObject({
      hello: 'outpost',
      url: 'http://api.wk.test/hello/there',
      cf: 'LOC',
    });
    // Re-pointing a route takes effect at once.
    await cf.workers.routes.update(off.id, {
      zone_id: zone.id,
      pattern: 'www.wk.test/api/public/*',
      script: 'hello',
    });
    expect(JSON.parse((await edgeGet(edge, 'www.wk.test', '/api/public/file')).body).hello).toBe(
      'outpost',
    );
    await cf.workers.routes.delete(off.id, { zone_id: zone.id });
    await cf.workers.routes.delete(wild.id, { zone_id: zone.id });
    expect((await edgeGet(edge, 'www.wk.test', '/api/public/file')).headers['x-worker']).toBe(
      'proxy',
    );
    expect((await edgeGet(edge, 'api.wk.test', '/hello/there')).headers['x-origin']).toBe('echo');
  });

  it('a script that throws answers the 1101 page', async () => {
    const res = await edgeGet(edge, 'www.wk.test', '/api/throw');
    expect(res.status).toBe(500);
    expect(res.headers['content-type']).toContain('text/html');
    expect(res.body).toContain('Error 1101');
    expect(res.body).toContain('Worker threw exception');
    expect(res.headers['cf-ray']).toMatch(/-OUT$/);
    expect(res.headers['x-outpost-script-failure']).toBeUndefined();
    // The next request is served normally.
    expect((await edgeGet(edge, 'www.wk.test', '/api/ok')).status).toBe(200);
  });

  it('refuses bad routes: unknown script, outside the zone, malformed, duplicate', async () => {
    const bad = async (body: unknown, status = 400) => {
      const res = await t.call('POST', `/zones/${zone.id}/workers/routes`, body);
      expect(res.status, res.text).toBe(status);
      expect(res.body.success).toBe(false);
      return res.body.errors[0].message as string;
    };
    expect(await bad({ pattern: 'www.wk.test/x/*', script: 'nope' })).toContain(
      'no script named "nope"',
    );
    expect(await bad({ pattern: 'example.com/*', script: 'proxy' })).toContain(
      'outside the zone wk.test',
    );
    expect(await bad({ pattern: 'evilwk.test/*', script: 'proxy' })).toContain('outside the zone');
    expect(await bad({ pattern: 'www.wk.test/a*b', script: 'proxy' })).toContain(
      '"*" may only end the path',
    );
    expect(await bad({ pattern: 'www.wk.test:8080/*', script: 'proxy' })).toContain('ports');
    expect(await bad({ pattern: 'w*w.wk.test/*', script: 'proxy' })).toContain(
      'not a valid host name',
    );
    expect(await bad({ script: 'proxy' })).toContain('pattern');
    expect(await bad({ pattern: 42 })).toContain('pattern');
    const malformed = await t.call('POST', `/zones/${zone.id}/workers/routes`, '{"pattern":');
    expect(malformed.status).toBe(400);
    expect(await bad({ pattern: 'www.wk.test/api/*', script: 'hello' }, 409)).toContain(
      'same pattern',
    );
    const missing = await t.call('GET', `/zones/${zone.id}/workers/routes/${'0'.repeat(32)}`);
    expect(missing.status).toBe(404);
  });

  it('answers 401 without a token and 403 without the Workers Routes permission', async () => {
    const none = await t.call('GET', `/zones/${zone.id}/workers/routes`, undefined, {
      authorization: '',
    });
    expect(none.status).toBe(401);
    const scriptsOnly = await createToken(t, ['Workers Scripts Write'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    const denied = await t.call(
      'POST',
      `/zones/${zone.id}/workers/routes`,
      { pattern: 'www.wk.test/z/*' },
      {
        authorization: `Bearer ${scriptsOnly}`,
      },
    );
    expect(denied.status).toBe(403);
    const reader = await createToken(t, ['Workers Routes Read'], {
      [`com.cloudflare.api.account.zone.${zone.id}`]: '*',
    });
    const list = await t.call('GET', `/zones/${zone.id}/workers/routes`, undefined, {
      authorization: `Bearer ${reader}`,
    });
    expect(list.status).toBe(200);
    const write = await t.call(
      'POST',
      `/zones/${zone.id}/workers/routes`,
      { pattern: 'www.wk.test/z/*' },
      {
        authorization: `Bearer ${reader}`,
      },
    );
    expect(write.status).toBe(403);
  });
});

describe('custom domains', () => {
  it('serves a host name without a DNS record from its script; detaching removes it', async () => {
    const cf = sdk(t);
    const domain = await cf.workers.domains.update({
      account_id: t.accountId,
      hostname: 'app.wk.test',
      service: 'hello',
      zone_id: zone.id,
    });
    expect(domain).toMatchObject({
      hostname: 'app.wk.test',
      service: 'hello',
      zone_id: zone.id,
      zone_name: 'wk.test',
      environment: 'production',
    });
    const res = await edgeGet(edge, 'app.wk.test', '/x');
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toMatchObject({ hello: 'outpost', url: 'http://app.wk.test/x' });

    const listed = [];
    for await (const d of cf.workers.domains.list({ account_id: t.accountId, service: 'hello' }))
      listed.push(d);
    expect(listed.map((d) => d.hostname)).toEqual(['app.wk.test']);
    expect(await cf.workers.domains.get(domain.id, { account_id: t.accountId })).toMatchObject({
      hostname: 'app.wk.test',
    });

    await cf.workers.domains.delete(domain.id, { account_id: t.accountId });
    const gone = await edgeGet(edge, 'app.wk.test', '/x');
    expect(gone.status).toBe(530);
    expect(gone.body).toContain('1001');
  });

  it('refuses host names outside the account, over DNS records, and unknown scripts', async () => {
    const put = (body: unknown) => t.call('PUT', `/accounts/${t.accountId}/workers/domains`, body);
    expect((await put({ hostname: 'app.elsewhere.test', service: 'hello' })).status).toBe(400);
    expect((await put({ hostname: 'app2.wk.test', service: 'nope' })).status).toBe(400);
    expect((await put({ hostname: '*.wk.test', service: 'hello' })).status).toBe(400);
    expect((await put({ hostname: 'app2.wk.test' })).status).toBe(400);
    const taken = await put({ hostname: 'www.wk.test', service: 'hello' });
    expect(taken.status).toBe(409);
    expect(taken.body.errors[0].message).toContain('override_existing_dns_record');
    expect(
      (
        await t.call('GET', `/accounts/${t.accountId}/workers/domains`, undefined, {
          authorization: '',
        })
      ).status,
    ).toBe(401);
  });
});

describe('the workers.dev-style subdomain', () => {
  it('serves enabled scripts at <script>.<subdomain>.<suffix>', async () => {
    const cf = sdk(t);
    const missing = await t.call('GET', `/accounts/${t.accountId}/workers/subdomain`);
    expect(missing.status).toBe(404);
    expect(missing.body.errors[0].code).toBe(10007);
    expect(
      await cf.workers.subdomains.update({ account_id: t.accountId, subdomain: 'acme' }),
    ).toEqual({ subdomain: 'acme' });
    expect(await cf.workers.subdomains.get({ account_id: t.accountId })).toEqual({
      subdomain: 'acme',
    });

    // Not enabled yet.
    expect((await edgeGet(edge, 'hello.acme.workers.test', '/')).status).toBe(404);
    expect(await cf.workers.scripts.subdomain.get('hello', { account_id: t.accountId })).toEqual({
      enabled: false,
      previews_enabled: false,
    });
    expect(
      await cf.workers.scripts.subdomain.create('hello', {
        account_id: t.accountId,
        enabled: true,
      }),
    ).toMatchObject({ enabled: true });
    const res = await edgeGet(edge, 'hello.acme.workers.test', '/dev');
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toMatchObject({
      hello: 'outpost',
      url: 'http://hello.acme.workers.test/dev',
    });
    // Another account's name, or a script that does not exist.
    expect((await edgeGet(edge, 'hello.other.workers.test', '/')).status).toBe(530);
    expect((await edgeGet(edge, 'nope.acme.workers.test', '/')).status).toBe(404);

    await cf.workers.scripts.subdomain.delete('hello', { account_id: t.accountId });
    expect((await edgeGet(edge, 'hello.acme.workers.test', '/')).status).toBe(404);

    expect(
      (await t.call('PUT', `/accounts/${t.accountId}/workers/subdomain`, { subdomain: '-bad-' }))
        .status,
    ).toBe(400);
    expect(
      (await t.call('PUT', `/accounts/${t.accountId}/workers/subdomain`, { subdomain: 7 })).status,
    ).toBe(400);
    expect(
      (
        await t.call('POST', `/accounts/${t.accountId}/workers/scripts/nope/subdomain`, {
          enabled: true,
        })
      ).status,
    ).toBe(404);
    expect(
      (
        await t.call('POST', `/accounts/${t.accountId}/workers/scripts/hello/subdomain`, {
          enabled: 'yes',
        })
      ).status,
    ).toBe(400);
  });
});
