/**
 * Dispatch through the real edge: a dispatcher script on zone routes calls customers' scripts in
 * a namespace (real workerd, one process per customer). The three routing styles (first hostname
 * label, first path segment, KV lookup of the hostname); an outbound script that blocks one host
 * and tags the others; a customer's infinite loop failing within its cpuMs while another customer
 * and the dispatcher keep serving; the subrequest limit; static assets per customer (content
 * types, ETags, html_handling, not_found_handling, run_worker_first, the assets binding) kept
 * apart by the spec's hash rule.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { echoHandler, startOrigin, type Origin } from '../../support/origins.ts';
import { deployScript, edgeGet, edgeUrlOf } from '../workers/helpers.ts';
import {
  createNamespace,
  HELLO,
  putAssetsOnly,
  putCustomer,
  slowEdgeGet,
  uploadAssets,
} from './helpers.ts';

const ORIGIN = '127.0.131.13';
let t: TestServer;
let edge: URL;
let origin: Origin;

const DISPATCH_BINDING = {
  type: 'dispatch_namespace',
  name: 'DISPATCHER',
  namespace: 'customers',
  outbound: {
    worker: { service: 'platform-outbound' },
    params: [{ name: 'customer' }, { name: 'blocked' }],
  },
};

// Routing by the first hostname label; limits per customer; errors caught by the dispatcher.
const LABEL_DISPATCHER = `export default {
  async fetch(request, env) {
    const name = new URL(request.url).hostname.split('.')[0];
    const limits = name === 'loop' ? { cpuMs: 50 } : name === 'chatty' ? { subRequests: 2 } : {};
    try {
      const worker = env.DISPATCHER.get(name, {}, { limits, outbound: { customer: name, blocked: 'blocked.example' } });
      return await worker.fetch(request);
    } catch (e) {
      return new Response('dispatcher caught: ' + e.message, { status: e.message.startsWith('Worker not found') ? 404 : 502 });
    }
  },
};`;

// Routing by the first path segment.
const PATH_DISPATCHER = `export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const [, name, ...rest] = url.pathname.split('/');
    url.pathname = '/' + rest.join('/');
    try {
      return await env.DISPATCHER.get(name).fetch(new Request(url, request));
    } catch (e) {
      return new Response(e.message, { status: 404 });
    }
  },
};`;

// Routing by a key-value lookup of the hostname.
const KV_DISPATCHER = `export default {
  async fetch(request, env) {
    const name = await env.HOSTS.get(new URL(request.url).hostname);
    if (!name) return new Response('unknown host', { status: 404 });
    return env.DISPATCHER.get(name).fetch(request);
  },
};`;

const OUTBOUND = `export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.hostname === env.blocked) return new Response('blocked by the platform', { status: 403 });
    const headers = new Headers(request.headers);
    headers.set('x-platform-customer', env.customer);
    return fetch(new Request(request, { headers }));
  },
};`;

const ALICE = `export default {
  async fetch(request) {
    const url = new URL(request.url);
    if (url.pathname === '/call') {
      const res = await fetch('http://${ORIGIN}/from-alice');
      return new Response(await res.text(), { status: res.status });
    }
    if (url.pathname === '/blocked') {
      const res = await fetch('http://blocked.example/');
      return new Response(await res.text(), { status: res.status });
    }
    return new Response('hello from alice ' + url.pathname, { headers: { 'x-customer': 'alice' } });
  },
};`;

// Answers what it was given: method, URL, body and header names.
const ECHO = `export default {
  async fetch(request) {
    return Response.json({
      method: request.method,
      url: request.url,
      body: await request.text(),
      headers: [...request.headers.keys()],
    });
  },
};`;

const LOOP = `export default { async fetch() { for (;;) {} } };`;
const CHATTY = `export default {
  async fetch() {
    for (let i = 0; i < 5; i++) await fetch('http://${ORIGIN}/n' + i);
    return new Response('made every call');
  },
};`;
const CAROL = `export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname.startsWith('/api/')) return Response.json({ api: url.pathname });
    const res = await env.ASSETS.fetch(request);
    const out = new Response(res.body, res);
    out.headers.set('x-worker-first', 'carol');
    return out;
  },
};`;

beforeAll(async () => {
  t = await startTestServer({ runtimeCpuSlackMs: 100 });
  edge = edgeUrlOf(t);
  origin = await startOrigin(ORIGIN, echoHandler);
  const zone = await createZone(t, 'wfp.test');
  for (const name of [
    'alice',
    'bob',
    'carol',
    'dave',
    'loop',
    'chatty',
    'ghost',
    'oops',
    'www',
    'shop',
    'echo',
  ]) {
    const res = await t.call('POST', `/zones/${zone.id}/dns_records`, {
      type: 'A',
      name,
      content: ORIGIN,
      proxied: true,
      ttl: 1,
    });
    if (res.status !== 200) throw new Error(res.text);
  }
  const kv = await t.call('POST', `/accounts/${t.accountId}/storage/kv/namespaces`, {
    title: 'hosts',
  });
  const kvId = kv.body.result.id;
  await fetch(
    `${t.api}/accounts/${t.accountId}/storage/kv/namespaces/${kvId}/values/shop.wfp.test`,
    {
      method: 'PUT',
      headers: { authorization: `Bearer ${t.token}` },
      body: 'alice',
    },
  );
  await createNamespace(t, 'customers');
  await deployScript(t, 'platform-outbound', OUTBOUND);
  await deployScript(t, 'label-dispatcher', LABEL_DISPATCHER, { bindings: [DISPATCH_BINDING] });
  await deployScript(t, 'path-dispatcher', PATH_DISPATCHER, {
    bindings: [{ type: 'dispatch_namespace', name: 'DISPATCHER', namespace: 'customers' }],
  });
  await deployScript(t, 'kv-dispatcher', KV_DISPATCHER, {
    bindings: [
      { type: 'dispatch_namespace', name: 'DISPATCHER', namespace: 'customers' },
      { type: 'kv_namespace', name: 'HOSTS', namespace_id: kvId },
    ],
  });
  for (const [pattern, script] of [
    ['*.wfp.test/*', 'label-dispatcher'],
    ['www.wfp.test/*', 'path-dispatcher'],
    ['shop.wfp.test/*', 'kv-dispatcher'],
  ]) {
    const r = await t.call('POST', `/zones/${zone.id}/workers/routes`, { pattern, script });
    if (r.status !== 200) throw new Error(r.text);
  }
  for (const [name, src] of [
    ['alice', ALICE],
    ['echo', ECHO],
    ['loop', LOOP],
    ['chatty', CHATTY],
    ['oops', `export default { fetch() { throw new Error('customer bug'); } };`],
  ]) {
    const r = await putCustomer(t, 'customers', name, src);
    if (r.status !== 200) throw new Error(JSON.stringify(r.body));
  }
}, 120_000);

afterAll(async () => {
  await origin?.close();
  await t?.stop();
});

describe('routing styles', () => {
  it('routes by the first hostname label', async () => {
    const res = await edgeGet(edge, 'alice.wfp.test', '/x');
    expect(res.status).toBe(200);
    expect(res.body).toBe('hello from alice /x');
    expect(res.headers['x-customer']).toBe('alice');
  });

  it('routes by the first path segment', async () => {
    const res = await edgeGet(edge, 'www.wfp.test', '/alice/deep/path');
    expect(res.body).toBe('hello from alice /deep/path');
  });

  it('routes by a key-value lookup of the hostname', async () => {
    const res = await edgeGet(edge, 'shop.wfp.test', '/kv');
    expect(res.body).toBe('hello from alice /kv');
  });

  it("passes the dispatcher's method, URL and body on, and none of the runtime's own headers", async () => {
    const res = await edgeGet(edge, 'echo.wfp.test', '/in?q=1', {
      method: 'POST',
      headers: { 'content-type': 'text/plain', 'x-visitor': 'v' },
      body: 'payload',
    });
    expect(res.status).toBe(200);
    const seen = JSON.parse(res.body);
    expect(seen).toMatchObject({
      method: 'POST',
      url: 'http://echo.wfp.test/in?q=1',
      body: 'payload',
    });
    expect(seen.headers).toContain('x-visitor');
    expect(seen.headers.filter((h: string) => h.startsWith('x-outpost-'))).toEqual([]);
  });

  it("a customer's uncaught exception reaches the dispatcher as a 1101 response", async () => {
    const res = await edgeGet(edge, 'oops.wfp.test', '/');
    expect(res.status).toBe(500);
    expect(res.body.trim()).toBe('error code: 1101');
    expect(res.headers['x-outpost-script-failure']).toBe('exception');
  });

  it('a missing script throws "Worker not found" in the dispatcher', async () => {
    const res = await edgeGet(edge, 'ghost.wfp.test', '/');
    expect(res.status).toBe(404);
    expect(res.body).toBe('dispatcher caught: Worker not found.');
  });
});

describe('outbound script', () => {
  it("tags every fetch of the customer with the dispatcher's outbound values", async () => {
    const res = await edgeGet(edge, 'alice.wfp.test', '/call');
    expect(res.status).toBe(200);
    const seen = JSON.parse(res.body);
    expect(seen.url).toBe('/from-alice');
    expect(seen.headers['x-platform-customer']).toBe('alice');
  });

  it('blocks a host with 403', async () => {
    const res = await edgeGet(edge, 'alice.wfp.test', '/blocked');
    expect(res.status).toBe(403);
    expect(res.body).toBe('blocked by the platform');
  });
});

describe('limits', () => {
  it("fails a customer's infinite loop within its cpuMs while others keep serving", async () => {
    const looping = slowEdgeGet(edge, 'loop.wfp.test', '/');
    // While the loop spins, another customer and the dispatcher answer.
    await new Promise((r) => setTimeout(r, 100));
    const other = await edgeGet(edge, 'alice.wfp.test', '/during');
    expect(other.body).toBe('hello from alice /during');
    const res = await looping;
    expect(res.status).toBe(502);
    expect(res.body).toBe('dispatcher caught: Worker exceeded CPU time limit.');
    // The dispatcher keeps serving once the runaway instance is gone.
    const again = await edgeGet(edge, 'alice.wfp.test', '/after');
    expect(again.body).toBe('hello from alice /after');
  });

  it('fails a customer over its subrequest limit', async () => {
    const res = await edgeGet(edge, 'chatty.wfp.test', '/');
    expect(res.status).toBe(502);
    expect(res.body).toBe('dispatcher caught: Worker exceeded subrequest limit.');
  });
});

describe('static assets', () => {
  beforeAll(async () => {
    const bob = await uploadAssets(
      t,
      'customers',
      'bob',
      {
        '/index.html': '<h1>bob home</h1>',
        '/about.html': '<h1>bob about</h1>',
        '/style.css': 'body{color:red}',
        '/404.html': '<h1>bob 404</h1>',
      },
      'bob',
    );
    let r = await putCustomer(t, 'customers', 'bob', HELLO('bob'), {
      assets: {
        jwt: bob.jwt,
        config: {
          not_found_handling: '404-page',
          _redirects: '/old /about 301\n/go/* /:splat\n',
          _headers: '/*.css\n  Cache-Control: public, max-age=600\n  X-Bob: css\n',
        },
      },
    });
    if (r.status !== 200) throw new Error(JSON.stringify(r.body));
    const carol = await uploadAssets(
      t,
      'customers',
      'carol',
      { '/index.html': '<h1>carol home</h1>' },
      'carol',
    );
    r = await putCustomer(t, 'customers', 'carol', CAROL, {
      bindings: [{ type: 'assets', name: 'ASSETS' }],
      assets: {
        jwt: carol.jwt,
        config: { run_worker_first: true, not_found_handling: 'single-page-application' },
      },
    });
    if (r.status !== 200) throw new Error(JSON.stringify(r.body));
  }, 60_000);

  it('serves each customer its own assets with content types and ETags', async () => {
    const bob = await edgeGet(edge, 'bob.wfp.test', '/');
    expect(bob.status).toBe(200);
    expect(bob.body).toBe('<h1>bob home</h1>');
    expect(bob.headers['content-type']).toBe('text/html; charset=utf-8');
    const etag = bob.headers.etag as string;
    expect(etag).toMatch(/^"[0-9a-f]{32}"$/);
    const again = await edgeGet(edge, 'bob.wfp.test', '/', { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
    const css = await edgeGet(edge, 'bob.wfp.test', '/style.css');
    expect(css.headers['content-type']).toBe('text/css; charset=utf-8');
    expect(css.body).toBe('body{color:red}');
    const carol = await edgeGet(edge, 'carol.wfp.test', '/');
    expect(carol.body).toBe('<h1>carol home</h1>');
    expect(carol.headers.etag).not.toBe(etag);
  });

  it('applies html_handling and not_found_handling; the script answers what no asset matches', async () => {
    expect((await edgeGet(edge, 'bob.wfp.test', '/about')).body).toBe('<h1>bob about</h1>');
    const redirect = await edgeGet(edge, 'bob.wfp.test', '/about.html');
    expect(redirect.status).toBe(307);
    expect(redirect.headers.location).toBe('/about');
    // No asset: bob's script answers (a script present takes what assets do not match).
    expect((await edgeGet(edge, 'bob.wfp.test', '/nothing')).body).toBe('hello from bob /nothing');
  });

  it('runs the script first when asked; the assets binding applies single-page-application', async () => {
    const api = await edgeGet(edge, 'carol.wfp.test', '/api/users');
    expect(JSON.parse(api.body)).toEqual({ api: '/api/users' });
    const deep = await edgeGet(edge, 'carol.wfp.test', '/some/client/route');
    expect(deep.status).toBe(200);
    expect(deep.body).toBe('<h1>carol home</h1>');
    expect(deep.headers['x-worker-first']).toBe('carol');
  });
});

describe('_redirects, _headers and assets-only scripts', () => {
  it("bob's _redirects answer before his script; _headers apply to assets, not to the script", async () => {
    const moved = await edgeGet(edge, 'bob.wfp.test', '/old?ref=1');
    expect(moved.status).toBe(301);
    expect(moved.headers.location).toBe('/about?ref=1');
    const splat = await edgeGet(edge, 'bob.wfp.test', '/go/style.css');
    expect(splat.status).toBe(302);
    expect(splat.headers.location).toBe('/style.css');
    const css = await edgeGet(edge, 'bob.wfp.test', '/style.css');
    expect(css.headers['cache-control']).toBe('public, max-age=600');
    expect(css.headers['x-bob']).toBe('css');
    const script = await edgeGet(edge, 'bob.wfp.test', '/nothing.css');
    expect(script.body).toBe('hello from bob /nothing.css');
    expect(script.headers['x-bob']).toBeUndefined();
  });

  it('an assets-only customer (no module) serves its site with its rules and not_found_handling', async () => {
    const site = await uploadAssets(
      t,
      'customers',
      'dave',
      {
        '/index.html': '<h1>dave home</h1>',
        '/app.html': '<h1>dave app</h1>',
        '/404.html': '<h1>dave 404</h1>',
      },
      'dave',
    );
    const r = await putAssetsOnly(t, 'customers', 'dave', {
      compatibility_date: '2025-01-01',
      tags: ['dave'],
      assets: {
        jwt: site.jwt,
        config: {
          not_found_handling: '404-page',
          _redirects: '/app/* /app 200\n/home / 308\n',
          _headers: '/*\n  X-Site: dave\n',
        },
      },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.result).toMatchObject({ has_assets: true, has_modules: false, handlers: [] });
    const home = await edgeGet(edge, 'dave.wfp.test', '/');
    expect(home.status).toBe(200);
    expect(home.body).toBe('<h1>dave home</h1>');
    expect(home.headers['x-site']).toBe('dave');
    const rewritten = await edgeGet(edge, 'dave.wfp.test', '/app/deep/link');
    expect(rewritten.status).toBe(200);
    expect(rewritten.body).toBe('<h1>dave app</h1>');
    expect((await edgeGet(edge, 'dave.wfp.test', '/home')).status).toBe(308);
    const missing = await edgeGet(edge, 'dave.wfp.test', '/missing');
    expect(missing.status).toBe(404);
    expect(missing.body).toBe('<h1>dave 404</h1>');
    expect(missing.headers['x-site']).toBe('dave');
    const post = await edgeGet(edge, 'dave.wfp.test', '/', { method: 'POST', body: 'x' });
    expect(post.status).toBe(405);
    const content = await t.call(
      'GET',
      `/accounts/${t.accountId}/workers/dispatch/namespaces/customers/scripts/dave/content`,
    );
    expect(content.status).toBe(400);
    expect(content.body.errors[0].message).toContain('assets-only');
  });

  it('refuses an assets-only script with bindings or run_worker_first, and a bad rule by line', async () => {
    const site = await uploadAssets(t, 'customers', 'erin', { '/index.html': 'erin' }, 'erin');
    const withBinding = await putAssetsOnly(t, 'customers', 'erin', {
      bindings: [{ type: 'plain_text', name: 'A', text: 'b' }],
      assets: { jwt: site.jwt },
    });
    expect(withBinding.status).toBe(400);
    expect(withBinding.body.errors[0].message).toContain('no code to bind');
    const first = await putAssetsOnly(t, 'customers', 'erin', {
      assets: { jwt: site.jwt, config: { run_worker_first: true } },
    });
    expect(first.status).toBe(400);
    expect(first.body.errors[0].message).toContain('run_worker_first');
    const badRule = await putAssetsOnly(t, 'customers', 'erin', {
      assets: { jwt: site.jwt, config: { _redirects: '/a /b\n/c /d 418\n' } },
    });
    expect(badRule.status).toBe(400);
    expect(badRule.body.errors[0].message).toContain('_redirects line 2');
    const noAssets = await putAssetsOnly(t, 'customers', 'erin', {
      compatibility_date: '2025-01-01',
    });
    expect(noAssets.status).toBe(400);
    expect(noAssets.body.errors[0].message).toContain('main_module');
    const gone = await t.call(
      'GET',
      `/accounts/${t.accountId}/workers/dispatch/namespaces/customers/scripts/erin`,
    );
    expect(gone.status).toBe(404);
  });
});
