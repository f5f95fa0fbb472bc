/**
 * Snippets uploaded through the API and run by real requests through the edge to real origins
 * (real workerd): header rewrite, redirect, JSON with request.cf, A/B by cookie, a subrequest to a
 * second origin, the subrequest limit (1202), fetch(request) twice (1201), an infinite loop (1203,
 * within the limit, other zones and plain routes unaffected, the next request fine), chaining,
 * rule matching, unsupported APIs, and upload-time checks.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { echoHandler, startOrigin, type Origin } from '../../support/origins.ts';

const ORIGIN = '127.0.70.1';
const SECOND = '127.0.70.2';
let t: TestServer;
let edgeUrl: URL;
let zone: { id: string; name: string };
let other: { id: string; name: string };
const origins: Origin[] = [];

interface EdgeResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  ms: number;
}

function get(
  host: string,
  path = '/',
  headers: Record<string, string> = {},
  method = 'GET',
  body?: string,
): Promise<EdgeResponse> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: edgeUrl.hostname,
        port: edgeUrl.port,
        path,
        method,
        headers: { host, ...headers },
        timeout: 15_000,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () =>
          resolve({
            status: res.statusCode!,
            headers: res.headers,
            body: text,
            ms: performance.now() - started,
          }),
        );
      },
    );
    req.on('timeout', () => req.destroy(new Error('edge request timed out')));
    req.on('error', reject);
    req.end(body);
  });
}

/** Uploads in the spec's form: a JSON `metadata` part and a `files` part. */
async function upload(zoneId: string, name: string, code: string) {
  const form = new FormData();
  form.set('metadata', JSON.stringify({ main_module: 'snippet.js' }));
  form.append('files', new Blob([code], { type: 'application/javascript+module' }), 'snippet.js');
  const res = await fetch(`${t.api}/zones/${zoneId}/snippets/${name}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${t.token}` },
    body: form,
  });
  return {
    status: res.status,
    body: (await res.json()) as {
      success: boolean;
      result: any;
      errors: { code: number; message: string }[];
    },
  };
}

async function deploy(zoneId: string, name: string, code: string) {
  const res = await upload(zoneId, name, code);
  if (res.status !== 200) throw new Error(`upload ${name}: ${JSON.stringify(res.body)}`);
}

async function rules(
  zoneId: string,
  list: { snippet_name: string; expression: string; enabled?: boolean; description?: string }[],
) {
  const res = await t.call('PUT', `/zones/${zoneId}/snippets/snippet_rules`, {
    rules: list.map((r) => ({ enabled: true, ...r })),
  });
  if (res.status !== 200) throw new Error(`rules: ${res.text}`);
  return res.body.result;
}

beforeAll(async () => {
  t = await startTestServer({
    edgeTestHeaders: true,
    snippetSubrequests: 2,
    snippetCf: JSON.stringify({ colo: 'AMS', city: 'Amsterdam' }),
  });
  edgeUrl = new URL(t.server.listeners.find((l) => l.name.startsWith('edge'))!.address);
  origins.push(await startOrigin(ORIGIN, echoHandler));
  origins.push(
    await startOrigin(SECOND, (req, res) => {
      if (req.url === '/hop') {
        res.writeHead(302, { location: `http://${SECOND}/data` });
        res.end();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ second: true, path: req.url }));
    }),
  );
  zone = await createZone(t, 'snip.test');
  other = await createZone(t, 'other-snip.test');
  for (const [z, name] of [
    [zone, 'www'],
    [zone, 'api'],
    [zone, 'plain'],
    [other, 'www'],
  ] as const) {
    const res = await t.call('POST', `/zones/${z.id}/dns_records`, {
      type: 'A',
      name,
      content: ORIGIN,
      proxied: true,
      ttl: 1,
    });
    if (res.status !== 200) throw new Error(res.text);
  }
  await deploy(
    other.id,
    'tag',
    `export default { async fetch(request) {
    const r = await fetch(request);
    const out = new Response(r.body, r);
    out.headers.set('x-other-zone', 'yes');
    return out;
  } }`,
  );
  await rules(other.id, [{ snippet_name: 'tag', expression: 'true' }]);
});
afterAll(async () => {
  for (const o of origins) await o.close();
  await t?.stop();
});

describe('snippets at the edge', () => {
  it('rewrites request and response headers on the way to the origin', async () => {
    await deploy(
      zone.id,
      'headers',
      `export default {
      async fetch(request) {
        const req = new Request(request);
        req.headers.set('x-snippet', 'added');
        req.headers.delete('x-remove-me');
        const res = await fetch(req);
        const out = new Response(res.body, res);
        out.headers.set('x-served-by', 'snippet');
        out.headers.append('set-cookie', 'a=1; Path=/');
        out.headers.append('set-cookie', 'b=2; Path=/');
        return out;
      },
    };`,
    );
    await rules(zone.id, [{ snippet_name: 'headers', expression: 'http.host eq "www.snip.test"' }]);
    const res = await get('www.snip.test', '/page?x=1', { 'x-remove-me': '1' });
    expect(res.status).toBe(200);
    expect(res.headers['x-served-by']).toBe('snippet');
    expect(res.headers['set-cookie']).toEqual(['a=1; Path=/', 'b=2; Path=/']);
    expect(res.headers['cf-ray']).toMatch(/-OUT$/);
    const echoed = JSON.parse(res.body);
    expect(echoed.url).toBe('/page?x=1');
    expect(echoed.headers['x-snippet']).toBe('added');
    expect(echoed.headers['x-remove-me']).toBeUndefined();
    expect(echoed.headers['cf-connecting-ip']).toBe('127.0.0.1');
    expect(echoed.headers.host).toBe('www.snip.test');
    // A host without a matching rule goes straight to the origin.
    const plain = await get('plain.snip.test', '/');
    expect(plain.headers['x-served-by']).toBeUndefined();
    expect(JSON.parse(plain.body).headers['x-snippet']).toBeUndefined();
  });

  it('posts a body through the snippet to the origin', async () => {
    const body = 'z'.repeat(50_000);
    const res = await get(
      'www.snip.test',
      '/upload',
      { 'content-type': 'text/plain' },
      'POST',
      body,
    );
    const echoed = JSON.parse(res.body);
    expect(echoed.method).toBe('POST');
    expect(echoed.length).toBe(body.length);
  });

  it('answers a redirect and a JSON response with request.cf', async () => {
    await deploy(
      zone.id,
      'answer',
      `export default {
      async fetch(request) {
        const url = new URL(request.url);
        if (url.pathname === '/old') return Response.redirect('https://www.snip.test/new', 301);
        return Response.json({
          colo: request.cf.colo, city: request.cf.city, country: request.cf.country, asn: request.cf.asn,
          edgeColo: request.edge.colo, score: request.cf.botManagement.score, verified: request.edge.botManagement.verified_bot,
          httpProtocol: request.cf.httpProtocol, region: request.cf.region, url: request.url,
        });
      },
    };`,
    );
    await rules(zone.id, [{ snippet_name: 'answer', expression: 'http.host eq "api.snip.test"' }]);
    const redirect = await get('api.snip.test', '/old');
    expect(redirect.status).toBe(301);
    expect(redirect.headers.location).toBe('https://www.snip.test/new');
    const json = await get('api.snip.test', '/info', {
      'x-outpost-country': 'NL',
      'x-outpost-asn': '64500',
      'x-outpost-cf': JSON.stringify({ region: 'North Holland', botManagement: { score: 12 } }),
    });
    expect(json.status).toBe(200);
    expect(json.headers['content-type']).toContain('application/json');
    expect(JSON.parse(json.body)).toEqual({
      colo: 'AMS',
      city: 'Amsterdam',
      country: 'NL',
      asn: 64500,
      edgeColo: 'AMS',
      score: 12,
      verified: false,
      httpProtocol: 'HTTP/1.1',
      region: 'North Holland',
      url: 'http://api.snip.test/info',
    });
  });

  it('routes an A/B test by cookie', async () => {
    await deploy(
      zone.id,
      'ab',
      `export default {
      async fetch(request) {
        const cookie = request.headers.get('cookie') ?? '';
        const group = /(?:^|; )ab=b/.test(cookie) ? 'b' : 'a';
        const url = new URL(request.url);
        url.pathname = '/' + group + url.pathname;
        const res = await fetch(new Request(url, request));
        const out = new Response(res.body, res);
        if (!cookie.includes('ab=')) out.headers.append('set-cookie', 'ab=' + group + '; Path=/');
        return out;
      },
    };`,
    );
    await rules(zone.id, [
      { snippet_name: 'ab', expression: 'starts_with(http.request.uri.path, "/shop")' },
    ]);
    const a = await get('www.snip.test', '/shop/item');
    expect(JSON.parse(a.body).url).toBe('/a/shop/item');
    expect(a.headers['set-cookie']).toEqual(['ab=a; Path=/']);
    const b = await get('www.snip.test', '/shop/item', { cookie: 'ab=b' });
    expect(JSON.parse(b.body).url).toBe('/b/shop/item');
    expect(b.headers['set-cookie']).toBeUndefined();
    // Outside the rule's expression the request is untouched.
    expect(JSON.parse((await get('www.snip.test', '/home')).body).url).toBe('/home');
  });

  it('makes a subrequest to a second origin, and the limit answers 1202', async () => {
    await deploy(
      zone.id,
      'sub',
      `export default {
      async fetch(request) {
        const n = Number(new URL(request.url).searchParams.get('n') ?? '1');
        const parts = [];
        for (let i = 0; i < n; i++) parts.push(await (await fetch('http://${SECOND}/data?i=' + i)).json());
        const origin = await (await fetch(request)).json();
        return Response.json({ parts, origin: origin.url });
      },
    };`,
    );
    await rules(zone.id, [{ snippet_name: 'sub', expression: 'http.request.uri.path eq "/sub"' }]);
    const one = await get('www.snip.test', '/sub?n=1');
    expect(one.status).toBe(200);
    expect(JSON.parse(one.body)).toEqual({
      parts: [{ second: true, path: '/data?i=0' }],
      origin: '/sub?n=1',
    });
    // Two subrequests plus fetch(request) is three fetches; the limit is two.
    const over = await get('www.snip.test', '/sub?n=2');
    expect(over.status).toBe(500);
    expect(over.body).toContain('Error 1202');
    expect(over.headers['cf-ray']).toMatch(/-OUT$/);
  });

  it('answers 1201 when fetch(request) is called twice', async () => {
    await deploy(
      zone.id,
      'twice',
      `export default {
      async fetch(request) {
        await fetch(request);
        return fetch(request);
      },
    };`,
    );
    await rules(zone.id, [
      { snippet_name: 'twice', expression: 'http.request.uri.path eq "/twice"' },
    ]);
    const res = await get('www.snip.test', '/twice');
    expect(res.status).toBe(500);
    expect(res.body).toContain('Error 1201');
  });

  it('stops an infinite loop within the CPU limit; the edge and other zones keep serving', async () => {
    await deploy(
      zone.id,
      'spin',
      `export default {
      async fetch(request) {
        if (new URL(request.url).searchParams.has('spin')) { for (;;) {} }
        return new Response('spin snippet fine');
      },
    };`,
    );
    await rules(zone.id, [
      { snippet_name: 'spin', expression: 'http.request.uri.path eq "/spin"' },
    ]);
    const [spun, otherZone, plain] = await Promise.all([
      get('www.snip.test', '/spin?spin=1'),
      (async () => {
        await new Promise((r) => setTimeout(r, 30));
        return get('www.other-snip.test', '/elsewhere');
      })(),
      (async () => {
        await new Promise((r) => setTimeout(r, 30));
        return get('plain.snip.test', '/plain');
      })(),
    ]);
    expect(spun.status).toBe(503);
    expect(spun.body).toContain('Error 1203');
    expect(spun.ms).toBeLessThan(2000);
    expect(otherZone.status).toBe(200);
    expect(otherZone.headers['x-other-zone']).toBe('yes');
    expect(otherZone.ms).toBeLessThan(1000);
    expect(plain.status).toBe(200);
    expect(plain.ms).toBeLessThan(1000);
    const next = await get('www.snip.test', '/spin');
    expect(next.status).toBe(200);
    expect(next.body).toBe('spin snippet fine');
  });

  it('chains two snippets in rule order, each receiving the previous one\u2019s request', async () => {
    await deploy(
      zone.id,
      'first',
      `export default {
      async fetch(request) {
        const req = new Request(request);
        req.headers.set('x-chain', 'first');
        const res = await fetch(req);
        const out = new Response(res.body, res);
        out.headers.append('x-order', 'first');
        return out;
      },
    };`,
    );
    await deploy(
      zone.id,
      'second',
      `export default {
      async fetch(request) {
        const req = new Request(request);
        req.headers.set('x-chain', request.headers.get('x-chain') + ',second');
        const res = await fetch(req);
        const out = new Response(res.body, res);
        out.headers.append('x-order', 'second');
        return out;
      },
    };`,
    );
    await rules(zone.id, [
      { snippet_name: 'first', expression: 'http.request.uri.path eq "/chain"' },
      { snippet_name: 'second', expression: 'starts_with(http.request.uri.path, "/chain")' },
      { snippet_name: 'headers', expression: 'http.request.uri.path eq "/chain"', enabled: false },
    ]);
    const res = await get('www.snip.test', '/chain');
    expect(JSON.parse(res.body).headers['x-chain']).toBe('first,second');
    expect(res.headers['x-order']).toBe('second, first');
    expect(res.headers['x-served-by']).toBeUndefined();
    // Only the second rule matches here.
    expect(JSON.parse((await get('www.snip.test', '/chain2')).body).headers['x-chain']).toBe(
      'null,second',
    );
  });

  it('fails unsupported APIs with a clear message', async () => {
    await deploy(
      zone.id,
      'cache',
      `export default {
      async fetch(request) {
        await caches.default.match(request);
        return new Response('unreachable');
      },
    };`,
    );
    await deploy(
      zone.id,
      'binding',
      `export default {
      async fetch(request, env) {
        return new Response(await env.KV.get('x'));
      },
    };`,
    );
    await rules(zone.id, [
      { snippet_name: 'cache', expression: 'http.request.uri.path eq "/cache"' },
      { snippet_name: 'binding', expression: 'http.request.uri.path eq "/binding"' },
    ]);
    const cache = await get('www.snip.test', '/cache');
    expect(cache.status).toBe(500);
    expect(cache.body).toContain('Error 1101');
    expect(cache.body).toContain('The Cache API (caches) is not available in snippets');
    const binding = await get('www.snip.test', '/binding');
    expect(binding.body).toContain('env.KV: bindings');
  });
});

describe('upload and rule checks', () => {
  it('refuses a syntax error with its location, and the previous version keeps serving', async () => {
    const res = await upload(
      zone.id,
      'spin',
      'export default {\n  async fetch(request) {\n    return new Response("x" +);\n  },\n};',
    );
    expect(res.status).toBe(400);
    expect(res.body.errors[0].message).toMatch(
      /SyntaxError: Unexpected token.*at snippet\.js:3:29/,
    );
    await rules(zone.id, [
      { snippet_name: 'spin', expression: 'http.request.uri.path eq "/spin"' },
    ]);
    expect((await get('www.snip.test', '/spin')).body).toBe('spin snippet fine');
  });

  it('refuses the addEventListener form, imports, a missing fetch, oversize scripts and bad names', async () => {
    const sw = await upload(
      zone.id,
      'sw',
      `addEventListener('fetch', (event) => event.respondWith(new Response('x')));`,
    );
    expect(sw.status).toBe(400);
    expect(sw.body.errors[0].message).toContain('addEventListener');
    expect(sw.body.errors[0].message).toContain('export default');
    const imp = await upload(
      zone.id,
      'imp',
      `import { x } from './other.js';\nexport default { fetch() { return new Response(x); } };`,
    );
    expect(imp.body.errors[0].message).toMatch(/cannot import modules/);
    const nofetch = await upload(zone.id, 'nofetch', `export default { hello() {} };`);
    expect(nofetch.status).toBe(400);
    expect(nofetch.body.errors[0].message).toContain(
      'default export with a fetch(request) handler',
    );
    const big = await upload(
      zone.id,
      'big',
      `export default { fetch() { return new Response('${'x'.repeat(33 * 1024)}'); } };`,
    );
    expect(big.body.errors[0].message).toContain('32 KB');
    const bad = await upload(
      zone.id,
      'Bad-Name',
      `export default { fetch() { return new Response('x'); } };`,
    );
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0].code).toBe(1101);
  });

  it('validates rules: expression syntax, unknown snippets, one rule per snippet; refuses deleting a used snippet', async () => {
    const syntax = await t.call('PUT', `/zones/${zone.id}/snippets/snippet_rules`, {
      rules: [{ snippet_name: 'ab', expression: 'http.host eq' }],
    });
    expect(syntax.status).toBe(400);
    expect(syntax.body.errors[0].source.pointer).toBe('/rules/0/expression');
    const unknown = await t.call('PUT', `/zones/${zone.id}/snippets/snippet_rules`, {
      rules: [{ snippet_name: 'nope', expression: 'true' }],
    });
    expect(unknown.status).toBe(400);
    expect(unknown.body.errors[0].message).toContain('nope');
    const dup = await t.call('PUT', `/zones/${zone.id}/snippets/snippet_rules`, {
      rules: [
        { snippet_name: 'ab', expression: 'true' },
        { snippet_name: 'ab', expression: 'false' },
      ],
    });
    expect(dup.status).toBe(400);
    const saved = await rules(zone.id, [
      { snippet_name: 'ab', expression: 'http.request.uri.path eq "/x"', description: 'ab test' },
    ]);
    expect(saved).toEqual([
      {
        id: expect.stringMatching(/^[0-9a-f]{32}$/),
        snippet_name: 'ab',
        expression: 'http.request.uri.path eq "/x"',
        description: 'ab test',
        enabled: true,
        last_updated: expect.any(String),
      },
    ]);
    // The spec's read of the rules: the phase entry point ruleset.
    const entry = await t.call('GET', `/zones/${zone.id}/rulesets/phases/http_request_snippets/entrypoint`);
    expect(entry.status).toBe(200);
    expect(entry.body.result).toMatchObject({ phase: 'http_request_snippets', kind: 'zone' });
    expect(entry.body.result.rules).toEqual([
      expect.objectContaining({ action: 'execute', action_parameters: { id: 'ab' }, expression: 'http.request.uri.path eq "/x"' }),
    ]);
    const inUse = await t.call('DELETE', `/zones/${zone.id}/snippets/ab`);
    expect(inUse.status).toBe(409);
    expect(inUse.headers.get('x-should-retry')).toBe('false');
    const cleared = await t.call('DELETE', `/zones/${zone.id}/snippets/snippet_rules`);
    expect(cleared.body.result).toEqual([]);
    const deleted = await t.call('DELETE', `/zones/${zone.id}/snippets/ab`);
    expect(deleted.status).toBe(200);
    expect(deleted.body.result).toBeNull();
    // With no rules the zone's requests go straight to the origin.
    expect(JSON.parse((await get('www.snip.test', '/shop/item')).body).url).toBe('/shop/item');
  });
});
