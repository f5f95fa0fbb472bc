/** The API core against a live server: routing, envelopes, limits, authentication, rate limiting, OpenAPI. */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ajv } from 'ajv';
import Cloudflare from 'cloudflare';
import {
  createZone,
  LEGACY,
  startTestServer,
  type CallResult,
  type TestServer,
} from '../support/server.ts';

import { MAX_JSON_DEPTH } from '../../src/core/json.ts';

const HEX32 = /^[0-9a-f]{32}$/;

function expectFailure(res: CallResult, status: number, code?: number): void {
  expect(res.status, res.text).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  expect(res.body).toMatchObject({ success: false, result: null, messages: [] });
  expect(Array.isArray(res.body.errors)).toBe(true);
  expect(res.body.errors.length).toBeGreaterThan(0);
  for (const e of res.body.errors) {
    expect(typeof e.code).toBe('number');
    expect(typeof e.message).toBe('string');
  }
  if (code !== undefined) expect(res.body.errors[0].code).toBe(code);
}

async function raw(url: string, init?: RequestInit): Promise<CallResult> {
  const res = await fetch(url, init);
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: res.status, headers: res.headers, body, text };
}

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t?.stop();
});

describe('health and routing', () => {
  it('GET /healthz answers 200 without credentials', async () => {
    const res = await raw(`${t.url}/healthz`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'ok' });
  });

  it('an unknown route is a 404 envelope with code 7003', async () => {
    expectFailure(await t.call('GET', '/no/such/route'), 404, 7003);
    expectFailure(await raw(`${t.url}/definitely-not-here`), 404, 7003);
  });

  it('a known path with the wrong method is a 405 with an allow header', async () => {
    const res = await t.call('DELETE', '/zones');
    expectFailure(res, 405);
    const allow = (res.headers.get('allow') ?? '').split(/,\s*/).sort();
    expect(allow).toEqual(['GET', 'POST']);
    const res2 = await t.call('POST', `/zones/${'a'.repeat(32)}`, {});
    expectFailure(res2, 405);
    expect(res2.headers.get('allow')).toContain('PATCH');
    expect(res2.headers.get('allow')).toContain('DELETE');
  });

  it('a malformed identifier in the path is a 400 with 7003 and 7000', async () => {
    const res = await t.call('GET', '/zones/not-a-zone-id');
    expectFailure(res, 400, 7003);
    expect(res.body.errors[0].message).toContain('/zones/not-a-zone-id');
    expect(res.body.errors.map((e: { code: number }) => e.code)).toContain(7000);
  });

  it('serves every route under /client/v4 and at the root', async () => {
    const zone = await createZone(t, 'bare-base.example');
    const prefixed = await raw(`${t.url}/client/v4/zones/${zone.id}`, {
      headers: { authorization: `Bearer ${t.token}` },
    });
    const bare = await raw(`${t.url}/zones/${zone.id}`, {
      headers: { authorization: `Bearer ${t.token}` },
    });
    expect(prefixed.status).toBe(200);
    expect(bare.status).toBe(200);
    expect(bare.body.result).toEqual(prefixed.body.result);
    const list = await raw(`${t.url}/zones?name=bare-base.example`, {
      headers: { authorization: `Bearer ${t.token}` },
    });
    expect(list.body.result.map((z: { id: string }) => z.id)).toEqual([zone.id]);
  });

  it('the official client works with a bare base URL', async () => {
    const client = new Cloudflare({ baseURL: t.url, apiToken: t.token, maxRetries: 0 });
    const zone = await client.zones.create({
      name: 'bare-client.example',
      account: { id: t.accountId },
    });
    expect((await client.zones.get({ zone_id: zone.id })).name).toBe('bare-client.example');
  });

  it('answers success with the standard envelope and JSON content type', async () => {
    const res = await t.call('GET', '/zones');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.body).toMatchObject({ success: true, errors: [], messages: [] });
    expect(res.body.result_info).toEqual(expect.objectContaining({ page: 1, per_page: 20 }));
  });
});

describe('request bodies', () => {
  it('malformed JSON is a 400 envelope', async () => {
    const res = await t.call('POST', '/zones', '{"name": "x.example", ');
    expectFailure(res, 400);
    expect(res.body.errors[0].message).toMatch(/JSON/);
  });

  it('a body failing its schema is a 400 naming the field', async () => {
    const res = await t.call('POST', '/zones', { name: 42, account: { id: t.accountId } });
    expectFailure(res, 400);
    expect(res.body.errors[0].message).toMatch(/^name: /);
  });

  describe('JSON nesting depth', () => {
    const nested = (depth: number, open = '[', close = ']') => open.repeat(depth) + close.repeat(depth);
    const deepObject = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
    const eventPath = () => `/accounts/${t.accountId}/workflows/no-such-wf/instances/i1/events/ping`;

    it('a body nested past the limit is a 400 naming the limit (arrays and objects)', async () => {
      for (const body of [nested(5000), deepObject(5000), nested(MAX_JSON_DEPTH + 1, '[', ']')]) {
        const res = await t.call('POST', eventPath(), body);
        expectFailure(res, 400, 6007);
        expect(res.body.errors[0].message).toMatch(new RegExp(`^JSON in .* is nested deeper than ${MAX_JSON_DEPTH} levels`));
      }
      const create = await t.call('POST', `/accounts/${t.accountId}/workflows/no-such-wf/instances`, `{"params":${deepObject(5000)}}`);
      expectFailure(create, 400, 6007);
      // Brackets inside strings do not count.
      const inString = await t.call('POST', '/zones', { name: '['.repeat(5000), account: { id: t.accountId } });
      expectFailure(inString, 400, 1004);
    });

    it('JSON text of params nested past the limit is the same 400', async () => {
      const res = await t.call('POST', `/accounts/${t.accountId}/workflows/no-such-wf/instances`, { params: deepObject(300) });
      expectFailure(res, 400, 6007);
      expect(res.body.errors[0].message).toContain('params');
    });

    it('a body at the limit reaches its handler', async () => {
      const res = await t.call('POST', eventPath(), nested(MAX_JSON_DEPTH));
      expectFailure(res, 404);
    });

    it('a multipart metadata part nested past the limit is a 400', async () => {
      const form = new FormData();
      form.append('metadata', new Blob([`{"main_module":"a.js","x":${deepObject(400)}}`], { type: 'application/json' }));
      form.append('a.js', new Blob(['export default {}'], { type: 'application/javascript+module' }), 'a.js');
      const res = await raw(`${t.api}/accounts/${t.accountId}/workers/scripts/deep`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${t.token}` },
        body: form,
      });
      expectFailure(res, 400, 6007);
    });
  });

  describe('body limit', () => {
    let small: TestServer;
    beforeAll(async () => {
      small = await startTestServer({ bodyLimit: 256 });
    });
    afterAll(async () => {
      await small?.stop();
    });

    it('accepts a body under the limit', async () => {
      const res = await small.call('POST', '/zones', {
        name: 'small.example',
        account: { id: small.accountId },
      });
      expect(res.status, res.text).toBe(200);
    });

    it('answers 413 when Content-Length exceeds the limit', async () => {
      const res = await small.call('POST', '/zones', {
        name: 'big.example',
        account: { id: small.accountId },
        padding: 'x'.repeat(2000),
      });
      expectFailure(res, 413);
      expect(res.body.errors[0].message).toContain('256');
    });

    it('answers 413 for a streamed body without Content-Length that grows past the limit', async () => {
      const chunk = new TextEncoder().encode(' '.repeat(100));
      let sent = 0;
      const stream = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (sent === 0)
            controller.enqueue(
              new TextEncoder().encode(
                `{"name":"streamed.example","account":{"id":"${small.accountId}"}`,
              ),
            );
          else if (sent < 10) controller.enqueue(chunk);
          else {
            controller.enqueue(new TextEncoder().encode('}'));
            controller.close();
          }
          sent++;
        },
      });
      const res = await raw(`${small.api}/zones`, {
        method: 'POST',
        headers: { authorization: `Bearer ${small.token}`, 'content-type': 'application/json' },
        body: stream,
        duplex: 'half',
      } as RequestInit);
      expectFailure(res, 413);
      const check = await small.call('GET', '/zones?name=streamed.example');
      expect(check.body.result).toEqual([]);
    });
  });
});

describe('authentication', () => {
  it('no credentials → 401 with code 10000', async () => {
    expectFailure(await t.call('GET', '/zones', undefined, { authorization: '' }), 401, 10000);
  });

  it.each(['Token abc', 'Bearer', 'Bearer two words', 'Basic dXNlcjpwYXNz'])(
    'malformed Authorization %j → 401 with code 6003',
    async (header) => {
      const res = await t.call('GET', '/zones', undefined, { authorization: header });
      expectFailure(res, 401, 6003);
      expect(res.body.errors[0].error_chain?.[0]?.code).toBe(6111);
    },
  );

  it('an unknown token → 401', async () => {
    expectFailure(
      await t.call('GET', '/zones', undefined, { authorization: 'Bearer not-a-real-token' }),
      401,
      10000,
    );
  });

  it('every operation answers 401 without valid credentials, whatever its path ids and body', async () => {
    const doc = (await t.call('GET', '/openapi.json')).body;
    // Plain requests to the connector upgrade endpoints get 426: they only take upgrades, which
    // authenticate with the tunnel token or API token during the upgrade.
    const upgradeOnly = /^\/_outpost\/tunnel\/(connect|access)$/;
    const appHost = /^\/v1\/apps\//;
    const bad: string[] = [];
    let checked = 0;
    for (const [path, methods] of Object.entries<Record<string, any>>(doc.paths)) {
      for (const [method, op] of Object.entries<any>(methods)) {
        if (op.security.length === 0) continue;
        const url = path.replace(/\{[a-z_]+\}/gi, 'not-an-id');
        for (const headers of [{ authorization: '' }, { authorization: 'Bearer not-a-real-token' }]) {
          const res = await raw(`${t.url}${url.startsWith('/v1/') ? '' : '/client/v4'}${url}`, {
            method: method.toUpperCase(),
            headers: { ...headers, 'content-type': 'application/json' },
            body: method === 'get' ? undefined : '{"broken',
          });
          checked++;
          // The media host authenticates with an app's secret: with a bearer of any kind, an app
          // that does not exist is its documented 404 not_found.
          const want = upgradeOnly.test(path)
            ? 426
            : appHost.test(path) && headers.authorization
              ? 404
              : 401;
          if (res.status !== want) bad.push(`${method.toUpperCase()} ${path} (${headers.authorization || 'none'}): ${res.status} ${res.text.slice(0, 120)}`);
        }
      }
    }
    expect(checked).toBeGreaterThan(100);
    expect(bad).toEqual([]);
  });

  it('authentication is checked before the body is read', async () => {
    expectFailure(await t.call('POST', '/zones', '{broken', { authorization: '' }), 401, 10000);
  });

  it('legacy X-Auth-Email + X-Auth-Key works', async () => {
    const res = await t.call('GET', '/zones', undefined, {
      authorization: '',
      'x-auth-email': LEGACY.email,
      'x-auth-key': LEGACY.key,
    });
    expect(res.status).toBe(200);
  });
});

describe('cf-ray', () => {
  it('every response carries a cf-ray header, distinct per request', async () => {
    const responses = [
      await raw(`${t.url}/healthz`),
      await t.call('GET', '/zones'),
      await t.call('GET', '/nope'),
      await t.call('DELETE', '/zones'),
      await t.call('GET', '/zones', undefined, { authorization: '' }),
      await t.call('POST', '/zones', '{'),
      await t.call('GET', '/zones/xyz'),
      await raw(`${t.api}/openapi.json`),
    ];
    const rays = responses.map((r) => r.headers.get('cf-ray'));
    for (const ray of rays) expect(ray).toMatch(/^[0-9a-f]{16}-[A-Z]+$/);
    expect(new Set(rays).size).toBe(rays.length);
  });
});

describe('rate limiting', () => {
  let limited: TestServer;
  beforeAll(async () => {
    limited = await startTestServer({ rateLimit: { requests: 3, windowSeconds: 2 } });
  });
  afterAll(async () => {
    await limited?.stop();
  });

  it('answers the 4th request in a window 429 with retry-after; other credentials keep their own budget; the client recovers', async () => {
    for (let i = 0; i < 3; i++) expect((await limited.call('GET', '/zones')).status).toBe(200);
    const res = await limited.call('GET', '/zones');
    expectFailure(res, 429, 971);
    const retryAfter = Number(res.headers.get('retry-after'));
    expect(Number.isInteger(retryAfter)).toBe(true);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(2);

    // The legacy key is a different credential with its own window.
    const legacy = await limited.call('GET', '/zones', undefined, {
      authorization: '',
      'x-auth-email': LEGACY.email,
      'x-auth-key': LEGACY.key,
    });
    expect(legacy.status).toBe(200);
    // Health checks are never limited.
    expect((await raw(`${limited.url}/healthz`)).status).toBe(200);

    const statuses: number[] = [];
    const counting: typeof fetch = async (input, init) => {
      const r = await fetch(input, init);
      statuses.push(r.status);
      return r;
    };
    const client = new Cloudflare({
      baseURL: limited.api,
      apiToken: limited.token,
      maxRetries: 1,
      fetch: counting,
    });
    const started = Date.now();
    const zones = [];
    for await (const z of client.zones.list()) zones.push(z);
    expect(zones).toEqual([]);
    expect(statuses).toEqual([429, 200]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
  });
});

describe('OpenAPI document', () => {
  it('GET /client/v4/openapi.json lists the zones and token paths with request body schemas', async () => {
    const res = await raw(`${t.api}/openapi.json`);
    expect(res.status).toBe(200);
    const doc = res.body as any;
    expect(doc.openapi).toMatch(/^3\./);
    for (const path of [
      '/zones',
      '/zones/{zone_id}',
      '/user/tokens',
      '/user/tokens/{token_id}',
      '/user/tokens/verify',
      '/accounts',
      '/accounts/{account_id}',
    ]) {
      expect(doc.paths[path], path).toBeDefined();
    }
    const createZone = doc.paths['/zones'].post;
    expect(createZone.operationId).toBe('zones-post');
    const zoneBody = createZone.requestBody.content['application/json'].schema;
    expect(zoneBody.properties.name).toBeDefined();
    expect(zoneBody.properties.account.properties.id).toBeDefined();
    expect(zoneBody.required).toEqual(expect.arrayContaining(['name', 'account']));
    const tokenBody = doc.paths['/user/tokens'].post.requestBody.content['application/json'].schema;
    expect(tokenBody.required).toEqual(expect.arrayContaining(['name', 'policies']));
    expect(tokenBody.properties.policies.type).toBe('array');
    const editZone = doc.paths['/zones/{zone_id}'].patch;
    expect(Object.keys(editZone.requestBody.content['application/json'].schema.properties)).toEqual(
      expect.arrayContaining(['paused', 'type', 'vanity_name_servers']),
    );
    const listParams = doc.paths['/zones'].get.parameters.map((p: { name: string }) => p.name);
    expect(listParams).toEqual(
      expect.arrayContaining([
        'page',
        'per_page',
        'name',
        'status',
        'account.id',
        'match',
        'order',
        'direction',
      ]),
    );
    const zoneIdParam = doc.paths['/zones/{zone_id}'].get.parameters.find(
      (p: { name: string }) => p.name === 'zone_id',
    );
    expect(zoneIdParam).toMatchObject({ in: 'path', required: true });
    expect(doc.components.securitySchemes.api_token).toMatchObject({
      type: 'http',
      scheme: 'bearer',
    });
  });
});

describe('responses match the official schemas', () => {
  const spec = JSON.parse(readFileSync('/work/shared/contract/openapi-subset.json', 'utf8'));

  /** The official document uses local `#/components/...` refs; point them at the whole document. */
  function rebase(node: unknown): unknown {
    if (Array.isArray(node)) return node.map(rebase);
    if (node && typeof node === 'object') {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(node))
        out[k] =
          k === '$ref' && typeof v === 'string' && v.startsWith('#/') ? `oas${v}` : rebase(v);
      return out;
    }
    return node;
  }

  function operation(operationId: string): any {
    for (const methods of Object.values<Record<string, any>>(spec.paths)) {
      for (const op of Object.values(methods)) if (op && op.operationId === operationId) return op;
    }
    throw new Error(`operation ${operationId} not in the official document`);
  }

  function validator(operationId: string, status = '200') {
    const ajv = new Ajv({ strict: false, allErrors: true });
    ajv.addFormat('date-time', {
      validate: (s: string) =>
        /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(s) &&
        !Number.isNaN(Date.parse(s)),
    });
    ajv.addFormat(
      'hostname',
      /^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/i,
    );
    ajv.addSchema(spec, 'oas');
    const schema = operation(operationId).responses[status].content['application/json'].schema;
    return ajv.compile(rebase(schema) as object);
  }

  it('the validator rejects a zone that breaks the schema (it really checks)', () => {
    const validate = validator('zones-0-get');
    expect(validate({ success: true, errors: [], messages: [], result: { id: 'x' } })).toBe(false);
    expect(
      validate({ success: true, errors: [], messages: [], result: { id: 'x'.repeat(40) } }),
    ).toBe(false);
  });

  it('GET /zones/{zone_id} validates against zones-0-get', async () => {
    const zone = await createZone(t, 'schema-check.example');
    const res = await t.call('GET', `/zones/${zone.id}`);
    expect(res.status).toBe(200);
    const validate = validator('zones-0-get');
    const valid = validate(res.body);
    expect(validate.errors ?? [], JSON.stringify(validate.errors)).toEqual([]);
    expect(valid).toBe(true);
    expect(res.body.result.id).toMatch(HEX32);
  });

  it('POST /zones, GET /zones, PATCH and DELETE validate against their official responses', async () => {
    const created = await t.call('POST', '/zones', {
      name: 'schema-ops.example',
      account: { id: t.accountId },
    });
    const post = validator('zones-post');
    expect(post(created.body), JSON.stringify(post.errors)).toBe(true);
    const list = await t.call('GET', '/zones?per_page=5');
    const get = validator('zones-get');
    expect(get(list.body), JSON.stringify(get.errors)).toBe(true);
    const patched = await t.call('PATCH', `/zones/${created.body.result.id}`, { paused: true });
    const patch = validator('zones-0-patch');
    expect(patch(patched.body), JSON.stringify(patch.errors)).toBe(true);
    const deleted = await t.call('DELETE', `/zones/${created.body.result.id}`);
    const del = validator('zones-0-delete');
    expect(del(deleted.body), JSON.stringify(del.errors)).toBe(true);
  });
});
