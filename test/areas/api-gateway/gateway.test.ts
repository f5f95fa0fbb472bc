/**
 * The API gateway on real traffic through the TLS edge to a real origin: operations (both bulk
 * forms, templating, de-duplication), token validation in both forms enforced with JWTs signed by
 * a test key set (valid, expired, not yet valid, wrong key, missing; block and log), rule fields and
 * functions in custom rules, GraphQL limits, discovery from traffic with its OpenAPI export checked
 * by an OpenAPI validator, session identifiers and authentication posture, per-operation schema
 * validation actions at the edge, user schemas in JSON and YAML (hostile YAML too), labels, the
 * OpenAPI export of saved operations, bad input, and the official client's `apiGateway.*` and
 * `tokenValidation.*`.
 */
import https from 'node:https';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exportJWK, generateKeyPair, SignJWT, type JWK } from 'jose';
import { Validator } from '@seriousme/openapi-schema-validator';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { echoHandler, startOrigin, type Origin } from '../../support/origins.ts';
import { sdk, Cloudflare } from '../../support/sdk.ts';
import { toFile } from 'cloudflare';

const ORIGIN = '127.0.13.1';
let t: TestServer;
let port: number;
let caPem: string;
let zone: { id: string; name: string };
let origin: Origin;
let signer: CryptoKey;
let stranger: CryptoKey;
let publicJwk: JWK;

const HOST = 'api.gw.test';

function send(path: string, opts: { method?: string; headers?: Record<string, string>; body?: string; host?: string } = {}): Promise<{ status: number; body: string }> {
  const host = opts.host ?? HOST;
  return new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, path, method: opts.method ?? 'GET', servername: host, ca: caPem, headers: { host, ...opts.headers, ...(opts.body ? { 'content-length': String(Buffer.byteLength(opts.body)) } : {}) } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

async function jwt(claims: Record<string, unknown>, opts: { key?: CryptoKey; exp?: number; nbf?: number; kid?: string } = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const j = new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: opts.kid ?? 'k1' }).setIssuedAt(now).setExpirationTime(opts.exp ?? now + 600);
  if (opts.nbf !== undefined) j.setNotBefore(opts.nbf);
  return j.sign(opts.key ?? signer);
}

const gw = (p: string) => `/zones/${zone.id}/api_gateway${p}`;

beforeAll(async () => {
  t = await startTestServer({ edgeTlsPort: 0 });
  port = Number(new URL(t.server.listeners.find((l) => l.protocol === 'https')!.address).port);
  caPem = await (await fetch(`${t.api}/edge/tls/ca_certificate`)).text();
  origin = await startOrigin(ORIGIN, echoHandler);
  zone = await createZone(t, 'gw.test');
  for (const name of ['api', 'shop', 'gql', 'orders']) await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name, content: ORIGIN, proxied: true, ttl: 1 });
  const pair = await generateKeyPair('RS256', { extractable: true });
  signer = pair.privateKey as CryptoKey;
  publicJwk = { ...(await exportJWK(pair.publicKey)), kid: 'k1', alg: 'RS256' };
  stranger = (await generateKeyPair('RS256')).privateKey as CryptoKey;
});
afterAll(async () => {
  await origin?.close();
  await t?.stop();
});

describe('operations', () => {
  it('templates endpoints, de-duplicates, accepts both bulk forms, pages and deletes', async () => {
    const one = await t.call('POST', gw('/operations/item'), { method: 'GET', host: HOST, endpoint: '/users/{id}/cards/{cardId}' });
    expect(one.status).toBe(200);
    expect(one.body.result).toMatchObject({ method: 'GET', host: HOST, endpoint: '/users/{var1}/cards/{var2}' });
    expect(one.body.result.operation_id).toMatch(/^[0-9a-f-]{36}$/);
    const seed = await t.call('POST', gw('/operations'), { operations: [{ method: 'GET', host: HOST, endpoint: '/users/{u}/cards/{c}' }, { method: 'POST', host: HOST, endpoint: '/orders' }] });
    expect(seed.status).toBe(200);
    expect(seed.body.result[0].operation_id).toBe(one.body.result.operation_id);
    const realForm = await t.call('POST', gw('/operations'), [1, 2, 3, 4, 5].map((n) => ({ method: 'GET', host: HOST, endpoint: `/items/${n}/{x}` })));
    expect(realForm.body.result).toHaveLength(5);
    const page1 = await t.call('GET', gw('/operations?per_page=5'));
    expect(page1.body.result).toHaveLength(5);
    expect(page1.body.result_info.total_count).toBe(7);
    expect((await t.call('GET', gw('/operations?per_page=5&page=3'))).body.result).toEqual([]);
    expect((await t.call('GET', gw('/operations?per_page=51'))).status).toBe(400);
    const got = await t.call('GET', gw(`/operations/${one.body.result.operation_id}`));
    expect(got.body.result.endpoint).toBe('/users/{var1}/cards/{var2}');
    const del = await t.call('DELETE', gw(`/operations/${realForm.body.result[0].operation_id}`));
    expect(del.status).toBe(200);
    expect(del.body).toEqual({ errors: [], messages: [], success: true });
    expect((await t.call('DELETE', gw(`/operations/${realForm.body.result[0].operation_id}`))).status).toBe(404);
    const bulkDel = await t.call('DELETE', gw('/operations'), { operation_ids: realForm.body.result.slice(1).map((o: { operation_id: string }) => o.operation_id) });
    expect(bulkDel.status).toBe(200);
    expect((await t.call('GET', gw('/operations'))).body.result).toHaveLength(2);
  });

  it('refuses bad input with a message naming it', async () => {
    const noSlash = await t.call('POST', gw('/operations/item'), { method: 'GET', host: HOST, endpoint: 'users/{id}' });
    expect(noSlash.status).toBe(400);
    expect(noSlash.body.errors[0].message).toContain('must start with "/"');
    expect((await t.call('POST', gw('/operations/item'), { method: 'FETCH', host: HOST, endpoint: '/x' })).status).toBe(400);
    expect((await t.call('POST', gw('/operations/item'), '{"method": "GET",')).status).toBe(400);
    expect((await t.call('POST', gw('/operations'), { operations: [] })).status).toBe(400);
    expect((await t.call('GET', gw('/operations/not-a-uuid'))).status).toBe(400);
    expect((await t.call('GET', gw('/operations/00000000-0000-4000-8000-000000000000'))).status).toBe(404);
  });
});

describe('token validation at the edge', () => {
  let configId: string;

  it('refuses key sets that are not JSON or have no keys', async () => {
    const notJson = await t.call('POST', gw('/token_validation'), { name: 'bad', location: { header: 'authorization' }, jwks: '{"keys": [' });
    expect(notJson.status).toBe(400);
    expect(notJson.body.errors[0].message).toContain('jwks is not valid JSON');
    const empty = await t.call('POST', gw('/token_validation'), { name: 'bad', location: { header: 'authorization' }, jwks: '{"keys": []}' });
    expect(empty.status).toBe(400);
    expect(empty.body.errors[0].message).toContain('no keys');
    const badKey = await t.call('POST', `/zones/${zone.id}/token_validation/config`, { title: 'x', token_sources: ['http.request.headers["authorization"][0]'], credentials: { keys: [{ kty: 'RSA', alg: 'RS256', n: 'abc', e: 'AQAB' }] } });
    expect(badKey.status).toBe(400);
    const badSource = await t.call('POST', `/zones/${zone.id}/token_validation/config`, { title: 'x', token_sources: ['headers.authorization'], credentials: { keys: [publicJwk] } });
    expect(badSource.status).toBe(400);
  });

  it('blocks requests without a valid token (spec form) and passes valid ones to the origin', async () => {
    const cfg = await t.call('POST', gw('/token_validation'), { name: 'users', location: { header: 'Authorization' }, jwks: JSON.stringify({ keys: [publicJwk] }) });
    expect(cfg.status).toBe(200);
    configId = cfg.body.result.id;
    expect(cfg.body.result.token_sources).toEqual(['http.request.headers["authorization"][0]']);
    expect(cfg.body.result.credentials.keys[0].kid).toBe('k1');
    const rule = await t.call('POST', gw('/jwt_validation_rules'), { name: 'users need a token', hostname: HOST, token_validation_id: configId, action: 'block' });
    expect(rule.status).toBe(200);
    expect(rule.body.result.expression).toBe(`is_jwt_valid(http.request.jwt.payload["${configId}"][0])`);
    const now = Math.floor(Date.now() / 1000);
    const valid = await send('/users/1', { headers: { authorization: `Bearer ${await jwt({ sub: 'alice' })}` } });
    expect(valid.status).toBe(200);
    expect(JSON.parse(valid.body).url).toBe('/users/1');
    expect((await send('/users/1')).status).toBe(403);
    expect((await send('/users/1', { headers: { authorization: `Bearer ${await jwt({ sub: 'alice' }, { exp: now - 10 })}` } })).status).toBe(403);
    expect((await send('/users/1', { headers: { authorization: `Bearer ${await jwt({ sub: 'alice' }, { nbf: now + 600 })}` } })).status).toBe(403);
    expect((await send('/users/1', { headers: { authorization: `Bearer ${await jwt({ sub: 'alice' }, { key: stranger })}` } })).status).toBe(403);
    expect((await send('/users/1', { headers: { authorization: 'Bearer not.a.jwt' } })).status).toBe(403);
    // Another host of the zone is outside the rule's selector.
    expect((await send('/', { host: 'shop.gw.test' })).status).toBe(200);
  });

  it('logs instead of blocking when the rule says log; rules in the official form too', async () => {
    const rules = await t.call('GET', `/zones/${zone.id}/token_validation/rules`);
    const id = rules.body.result[0].id;
    const edited = await t.call('PATCH', `/zones/${zone.id}/token_validation/rules/${id}`, { action: 'log' });
    expect(edited.body.result.action).toBe('log');
    expect((await send('/users/1')).status).toBe(200);
    const own = await t.call('POST', `/zones/${zone.id}/token_validation/rules`, {
      title: 'shop',
      description: 'shop needs role admin',
      action: 'block',
      enabled: true,
      expression: `is_jwt_valid(http.request.jwt.payload["${configId}"][0]) and lookup_json_string(http.request.jwt.payload["${configId}"][0], "role") eq "admin"`,
      selector: { include: [{ host: ['shop.gw.test'] }] },
    });
    expect(own.status).toBe(200);
    expect((await send('/', { host: 'shop.gw.test', headers: { authorization: `Bearer ${await jwt({ sub: 'bob', role: 'user' })}` } })).status).toBe(403);
    expect((await send('/', { host: 'shop.gw.test', headers: { authorization: `Bearer ${await jwt({ sub: 'bob', role: 'admin' })}` } })).status).toBe(200);
    const unknownCfg = await t.call('POST', `/zones/${zone.id}/token_validation/rules`, { title: 'x', action: 'block', expression: 'is_jwt_valid(http.request.jwt.payload["00000000-0000-4000-8000-000000000000"][0])' });
    expect(unknownCfg.status).toBe(400);
    expect((await t.call('POST', `/zones/${zone.id}/token_validation/rules`, { title: 'x', action: 'block', expression: 'is_jwt_valid(' })).status).toBe(400);
    for (const r of (await t.call('GET', `/zones/${zone.id}/token_validation/rules`)).body.result) {
      expect((await t.call('DELETE', `/zones/${zone.id}/token_validation/rules/${r.id}`)).status).toBe(200);
    }
  });

  it('gives custom rules the claims, lookup_json_string and the legacy jwt_claims_valid', async () => {
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, {
      rules: [
        { action: 'block', expression: `http.host eq "${HOST}" and lookup_json_string(http.request.jwt.payload["${configId}"][0], "sub") eq "mallory"`, action_parameters: { response: { status_code: 451, content: 'not mallory', content_type: 'text/plain' } } },
        { action: 'block', expression: `http.host eq "${HOST}" and http.request.uri.path eq "/legacy" and not edge.api_gateway.jwt_claims_valid`, action_parameters: { response: { status_code: 401, content: 'legacy says no', content_type: 'text/plain' } } },
      ],
    });
    const mallory = await send('/users/2', { headers: { authorization: `Bearer ${await jwt({ sub: 'mallory' })}` } });
    expect(mallory.status).toBe(451);
    expect(mallory.body).toBe('not mallory');
    expect((await send('/users/2', { headers: { authorization: `Bearer ${await jwt({ sub: 'carol' })}` } })).status).toBe(200);
    expect((await send('/legacy')).body).toBe('legacy says no');
    expect((await send('/legacy', { headers: { authorization: `Bearer ${await jwt({ sub: 'x' }, { key: stranger })}` } })).status).toBe(401);
    expect((await send('/legacy', { headers: { authorization: `Bearer ${await jwt({ sub: 'carol' })}` } })).status).toBe(200);
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, { rules: [] });
  });

  it('replaces the key set in both forms and refuses a bad one', async () => {
    const other = await generateKeyPair('ES256', { extractable: true });
    const esJwk = { ...(await exportJWK(other.publicKey)), kid: 'e1', alg: 'ES256' };
    const put = await t.call('PUT', `/zones/${zone.id}/token_validation/config/${configId}/credentials`, { keys: [esJwk] });
    expect(put.status).toBe(200);
    expect(put.body.keys[0].kid).toBe('e1');
    expect(put.body.result).toBeUndefined();
    const patched = await t.call('PATCH', gw(`/token_validation/${configId}`), { jwks: JSON.stringify({ keys: [publicJwk, esJwk] }) });
    expect(patched.status).toBe(200);
    expect(patched.body.result.credentials.keys).toHaveLength(2);
    expect((await t.call('PATCH', gw(`/token_validation/${configId}`), { jwks: 'nope' })).status).toBe(400);
    expect((await t.call('PATCH', gw(`/token_validation/${configId}`), { jwks: '{"keys":[{"kty":"EC","alg":"ES256","crv":"P-384"}]}' })).status).toBe(400);
    expect((await t.call('GET', gw('/token_validation'))).body.result[0].name).toBe('users');
  });
  it('PATCH of the key set (official client) keeps a symmetric key\'s stored material when k is left out', async () => {
    const cf = sdk(t);
    const secret = crypto.getRandomValues(new Uint8Array(32));
    const hsJwk = { kty: 'oct', kid: 'h1', alg: 'HS256', k: Buffer.from(secret).toString('base64url') };
    expect((await t.call('PUT', `/zones/${zone.id}/token_validation/config/${configId}/credentials`, { keys: [publicJwk, hsJwk] })).status).toBe(200);
    await cf.tokenValidation.configuration.credentials.edit(configId, { zone_id: zone.id, keys: [publicJwk, { kty: 'oct', kid: 'h1', alg: 'HS256' }] as never });
    const got = await t.call('GET', `/zones/${zone.id}/token_validation/config/${configId}`);
    expect(got.body.result.credentials.keys.map((k: JWK) => k.kid)).toEqual(['k1', 'h1']);
    expect(JSON.stringify(got.body)).not.toContain(hsJwk.k);
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, {
      rules: [{ action: 'block', expression: `http.host eq "${HOST}" and http.request.uri.path eq "/hs" and not is_jwt_valid(http.request.jwt.payload["${configId}"][0])`, action_parameters: { response: { status_code: 401, content: 'hs', content_type: 'text/plain' } } }],
    });
    const hs = await new SignJWT({ sub: 'h' }).setProtectedHeader({ alg: 'HS256', kid: 'h1' }).setExpirationTime('5m').sign(secret);
    expect((await send('/hs', { headers: { authorization: `Bearer ${hs}` } })).status).toBe(200);
    expect((await send('/hs')).status).toBe(401);
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, { rules: [] });
    const unknown = await t.call('PATCH', `/zones/${zone.id}/token_validation/config/${configId}/credentials`, { keys: [{ kty: 'oct', kid: 'h2', alg: 'HS256' }] });
    expect(unknown.status).toBe(400);
    expect(unknown.body.errors[0].message).toContain('keys[0].k is required');
    const dropped = await t.call('PATCH', `/zones/${zone.id}/token_validation/config/${configId}/credentials`, { keys: [publicJwk] });
    expect(dropped.body.keys.map((k: JWK) => k.kid)).toEqual(['k1']);
  });
});

describe('GraphQL protection', () => {
  const q = (query: string) => JSON.stringify({ query });
  it('measures queries, blocks those over the limits, and refuses a limit below 1', async () => {
    expect((await t.call('PUT', gw('/settings/graphql_protection'), { max_depth: 0, max_size: 10 })).status).toBe(400);
    expect((await t.call('PUT', gw('/settings/graphql_protection'), { max_depth: 'deep', max_size: 10 })).status).toBe(400);
    const set = await t.call('PUT', gw('/settings/graphql_protection'), { max_depth: 3, max_size: 4 });
    expect(set.body.result).toEqual({ max_depth: 3, max_size: 4 });
    expect((await t.call('GET', gw('/settings/graphql_protection'))).body.result).toEqual({ max_depth: 3, max_size: 4 });
    const headers = { 'content-type': 'application/json' };
    const ok = await send('/graphql', { method: 'POST', host: 'gql.gw.test', headers, body: q('{a b(x: 1){c d{e f}}}') });
    expect(ok.status).toBe(200);
    // The origin still gets the body the edge read.
    expect(JSON.parse(ok.body).length).toBe(Buffer.byteLength(q('{a b(x: 1){c d{e f}}}')));
    expect((await send('/graphql', { method: 'POST', host: 'gql.gw.test', headers, body: q('{a{b{c{d}}}}') })).status).toBe(403);
    expect((await send('/graphql', { method: 'POST', host: 'gql.gw.test', headers, body: q('{a b c d e}') })).status).toBe(403);
    expect((await send('/graphql', { method: 'POST', host: 'gql.gw.test', headers: { 'content-type': 'application/graphql' }, body: '{a{b{c{d}}}}' })).status).toBe(403);
    // Not under the platform's conditions: fragments, not /graphql, GET.
    expect((await send('/graphql', { method: 'POST', host: 'gql.gw.test', headers, body: q('{...F} fragment F on Q {a{b{c{d}}}}') })).status).toBe(200);
    expect((await send('/api', { method: 'POST', host: 'gql.gw.test', headers, body: q('{a{b{c{d}}}}') })).status).toBe(200);
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, {
      rules: [{ action: 'block', expression: 'http.host eq "gql.gw.test" and (not cf.api_gateway.graphql.parsed_successfully or cf.api_gateway.graphql.query_depth gt 2)', action_parameters: { response: { status_code: 422, content: 'graphql rule', content_type: 'text/plain' } } }],
    });
    expect((await send('/graphql', { method: 'POST', host: 'gql.gw.test', headers, body: q('{a{b{c}}}') })).status).toBe(422);
    expect((await send('/graphql', { method: 'POST', host: 'gql.gw.test', headers, body: q('{a{b}}') })).status).toBe(200);
    expect((await send('/graphql', { method: 'POST', host: 'gql.gw.test', headers, body: q('{a{') })).status).toBe(422);
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, { rules: [] });
    await t.call('PUT', gw('/settings/graphql_protection'), { max_depth: null, max_size: null });
  });
});

describe('discovery and authentication posture', () => {
  it('discovers templated operations from traffic, saves and ignores them, and exports OpenAPI', async () => {
    const set = await t.call('PUT', gw('/configuration'), { auth_id_characteristics: [{ type: 'header', name: 'x-session' }] });
    expect(set.body.result.auth_id_characteristics).toEqual([{ type: 'header', name: 'x-session' }]);
    expect((await t.call('PUT', gw('/configuration'), { auth_id_characteristics: [{ type: 'query', name: 'x' }] })).status).toBe(400);
    for (const id of ['1001', '1002', '6f1c2a9e-4b8d-4c1e-9a7b-2d3e4f5a6b7c']) await send(`/carts/${id}/items`, { host: 'shop.gw.test', headers: { 'x-session': 's1' } });
    await send('/carts/1003/items', { host: 'shop.gw.test' });
    await send('/health', { host: 'shop.gw.test' });
    await send('/profile', { host: 'shop.gw.test', headers: { 'x-session': 's2' } });
    const list = await t.call('GET', gw('/discovery/operations?per_page=50'));
    expect(list.status).toBe(200);
    const carts = list.body.result.find((o: { endpoint: string }) => o.endpoint === '/carts/{var1}/items');
    expect(carts).toMatchObject({ method: 'GET', host: 'shop.gw.test', state: 'review' });
    expect(carts.features.traffic_stats.requests).toBe(4);
    expect(carts.origin).toContain('SessionIdentifier');
    const health = list.body.result.find((o: { endpoint: string }) => o.endpoint === '/health');
    const posture = await t.call('GET', gw('/discovery/authentication_posture'));
    const labels = Object.fromEntries(posture.body.result.filter((p: { host: string }) => p.host === 'shop.gw.test').map((p: { endpoint: string; risk_labels: string[] }) => [p.endpoint, p.risk_labels[0]]));
    expect(labels['/carts/{var1}/items']).toBe('cf-risk-mixed-auth');
    expect(labels['/health']).toBe('cf-risk-missing-auth');
    expect(labels['/profile']).toBeUndefined();
    // The same labels are rule fields on later requests.
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, {
      rules: [{ action: 'block', expression: 'http.host eq "shop.gw.test" and (edge.api_gateway.edge-risk-missing-auth or cf.api_gateway.cf-risk-mixed-auth)', action_parameters: { response: { status_code: 401, content: 'posture', content_type: 'text/plain' } } }],
    });
    expect((await send('/health', { host: 'shop.gw.test' })).body).toBe('posture');
    expect((await send('/carts/9/items', { host: 'shop.gw.test', headers: { 'x-session': 's1' } })).body).toBe('posture');
    expect((await send('/profile', { host: 'shop.gw.test', headers: { 'x-session': 's2' } })).status).toBe(200);
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, { rules: [] });
    const saved = await t.call('PATCH', gw(`/discovery/operations/${carts.id}`), { state: 'saved' });
    expect(saved.body.result).toEqual({ state: 'saved' });
    const ops = (await t.call('GET', gw('/operations?per_page=50'))).body.result;
    expect(ops.some((o: { endpoint: string; host: string }) => o.endpoint === '/carts/{var1}/items' && o.host === 'shop.gw.test')).toBe(true);
    const bulk = await t.call('PATCH', gw('/discovery/operations'), { operation_ids: { [health.id]: { state: 'ignored' } } });
    expect(bulk.body.result).toEqual({ [health.id]: { state: 'ignored' } });
    const bare = await t.call('PATCH', gw('/discovery/operations'), { [health.id]: { state: 'review' } });
    expect(bare.body.result[health.id].state).toBe('review');
    expect((await t.call('PATCH', gw('/discovery/operations/00000000-0000-4000-8000-000000000000'), { state: 'saved' })).status).toBe(404);
    expect((await t.call('PATCH', gw(`/discovery/operations/${carts.id}`), { state: 'done' })).status).toBe(400);
    const exported = await t.call('GET', gw('/discovery'));
    expect(exported.body.result.timestamp).toBeTruthy();
    const shopDoc = exported.body.result.schemas.find((s: { servers: { url: string }[] }) => s.servers[0].url === 'https://shop.gw.test');
    expect(Object.keys(shopDoc.paths)).toContain('/carts/{var1}/items');
    for (const doc of exported.body.result.schemas) {
      const res = await new Validator().validate(doc);
      expect(res.errors ?? []).toEqual([]);
      expect(res.valid).toBe(true);
    }
  });

  it('marks requests that match no saved operation as fallthrough', async () => {
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, {
      rules: [{ action: 'block', expression: 'http.host eq "shop.gw.test" and edge.api_gateway.fallthrough_triggered', action_parameters: { response: { status_code: 404, content: 'unknown endpoint', content_type: 'text/plain' } } }],
    });
    expect((await send('/carts/77/items', { host: 'shop.gw.test' })).status).toBe(200);
    expect((await send('/secret', { host: 'shop.gw.test' })).body).toBe('unknown endpoint');
    // The official client's expression template gives the same rule.
    const template = await sdk(t).apiGateway.expressionTemplate.fallthrough.create({ zone_id: zone.id, hosts: ['shop.gw.test', '*.other.test'] });
    expect(template).toEqual({ expression: '(cf.api_gateway.fallthrough_detected and (http.host in {"shop.gw.test"} or ends_with(http.host, ".other.test")))', title: 'Fallthrough detection for shop.gw.test, *.other.test' });
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, {
      rules: [{ action: 'block', expression: template.expression, action_parameters: { response: { status_code: 404, content: 'template', content_type: 'text/plain' } } }],
    });
    expect((await send('/carts/78/items', { host: 'shop.gw.test' })).status).toBe(200);
    expect((await send('/secret', { host: 'shop.gw.test' })).body).toBe('template');
    expect((await t.call('POST', gw('/expression-template/fallthrough'), { hosts: ['a" or true or "'] })).status).toBe(400);
    expect((await t.call('POST', gw('/expression-template/fallthrough'), { hosts: [] })).status).toBe(400);
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, { rules: [] });
  });
});

describe('labels', () => {
  it('creates, edits and deletes user labels and attaches labels to operations (official client and raw)', async () => {
    const cf = sdk(t);
    const z = { zone_id: zone.id };
    const [a, b, c] = (await t.call('POST', gw('/operations'), [
      { method: 'GET', host: 'labels.gw.test', endpoint: '/login' },
      { method: 'POST', host: 'labels.gw.test', endpoint: '/cart/{item}' },
      { method: 'GET', host: 'labels.gw.test', endpoint: '/feed' },
    ])).body.result.map((o: { operation_id: string }) => o.operation_id) as string[];
    // The built-in managed labels are listed from the start.
    const managed = await cf.apiGateway.labels.managed.get('cf-log-in', z);
    expect(managed).toMatchObject({ name: 'cf-log-in', source: 'managed' });
    const created = [];
    for await (const l of cf.apiGateway.labels.user.bulkCreate({ ...z, body: [{ name: 'public', description: 'no login needed' }, { name: 'team:billing', metadata: { owner: 'billing' } }] })) created.push(l);
    expect(created.map((l) => [l.name, l.source, l.description])).toEqual([['public', 'user', 'no login needed'], ['team:billing', 'user', '']]);
    const listed = [];
    for await (const l of cf.apiGateway.labels.list({ ...z, source: 'user' })) listed.push(l.name);
    expect(listed).toEqual(['public', 'team:billing']);
    expect((await cf.apiGateway.labels.user.edit('public', { ...z, description: 'open' })).description).toBe('open');
    const replaced = await cf.apiGateway.labels.user.update('team:billing', { ...z, description: 'money' });
    expect(replaced).toMatchObject({ description: 'money', metadata: {} });
    // Attaching: one operation (add, then replace), several operations, and a label's operations.
    const one = await cf.apiGateway.operations.labels.create(a, { ...z, user: ['public'], managed: ['cf-log-in'] });
    expect(one.labels!.map((l) => `${l.source}/${l.name}`)).toEqual(['managed/cf-log-in', 'user/public']);
    const swapped = await cf.apiGateway.operations.labels.update(a, { ...z, user: ['team:billing'] });
    expect(swapped.labels!.map((l) => l.name)).toEqual(['team:billing']);
    const bulk = [];
    for await (const o of cf.apiGateway.operations.labels.bulkCreate({ ...z, selector: { include: { operation_ids: [b, c] } }, user: { labels: ['public'] }, managed: { labels: ['cf-add-cart'] } })) bulk.push(o);
    expect(bulk.map((o) => o.labels!.length)).toEqual([2, 2]);
    const carried = await cf.apiGateway.labels.user.resources.operation.update('public', { ...z, selector: { include: { operation_ids: [c] } } });
    expect(carried).toMatchObject({ name: 'public', mapped_resources: { operations: 1 } });
    expect(await cf.apiGateway.labels.user.get('public', { ...z, with_mapped_resource_counts: true })).toMatchObject({ mapped_resources: { operations: 1 } });
    await cf.apiGateway.labels.managed.resources.operation.update('cf-rss-feed', { ...z, selector: { include: { operation_ids: [c] } } });
    const counted = (await t.call('GET', gw('/labels?with_mapped_resource_counts=true&order=mapped_resources.operations&direction=desc&per_page=100'))).body.result;
    expect(counted[0]).toMatchObject({ name: 'cf-add-cart', mapped_resources: { operations: 2 } });
    // Operations keep their own view; deleting a user label takes it off every operation.
    expect((await t.call('GET', gw(`/operations/${a}`))).body.result.labels).toBeUndefined();
    expect(await cf.apiGateway.labels.user.delete('team:billing', z)).toMatchObject({ name: 'team:billing' });
    const afterDelete = await cf.apiGateway.operations.labels.create(a, { ...z, managed: ['cf-sign-up'] });
    expect(afterDelete.labels!.map((l) => l.name)).toEqual(['cf-sign-up']);
    expect((await cf.apiGateway.operations.labels.delete(a, z)).labels).toEqual([]);
    const replacedBulk = [];
    for await (const o of cf.apiGateway.operations.labels.bulkUpdate({ ...z, selector: { include: { operation_ids: [b] } }, user: { labels: [] }, managed: { labels: ['cf-check-out'] } })) replacedBulk.push(o);
    expect(replacedBulk[0].labels!.map((l) => l.name)).toEqual(['cf-check-out']);
    // Bad input: names, unknown labels and ids (nothing written), unknown fields.
    const missing = '00000000-0000-4000-8000-000000000000';
    const badName = await t.call('POST', gw('/labels/user'), [{ name: 'has space' }]);
    expect(badName.status).toBe(400);
    expect(badName.body.errors[0].message).toContain('name');
    expect((await t.call('POST', gw('/labels/user'), [{ name: 'public' }])).status).toBe(409);
    expect((await t.call('POST', gw('/labels/user'), { name: 'x' })).status).toBe(400);
    expect((await t.call('GET', gw('/labels/user/nope'))).status).toBe(404);
    expect((await t.call('GET', gw('/labels/managed/public'))).status).toBe(404);
    expect((await t.call('PATCH', gw('/labels/user/nope'), { description: 'x' })).status).toBe(404);
    expect((await t.call('DELETE', gw('/labels/user/nope'))).status).toBe(404);
    const unknownLabel = await t.call('POST', gw(`/operations/${a}/labels`), { user: ['nope'] });
    expect(unknownLabel.status).toBe(400);
    expect(unknownLabel.body.errors[0].message).toContain('nope');
    expect((await t.call('POST', gw(`/operations/${a}/labels`), { user: 'public' })).status).toBe(400);
    expect((await t.call('POST', gw(`/operations/${missing}/labels`), { user: ['public'] })).status).toBe(404);
    const partly = await t.call('POST', gw('/operations/labels'), { selector: { include: { operation_ids: [a, missing] } }, user: { labels: ['public'] } });
    expect(partly.status).toBe(404);
    expect((await t.call('GET', gw(`/labels/user/public?with_mapped_resource_counts=true`))).body.result.mapped_resources).toEqual({ operations: 1 });
    const noSelector = await t.call('PUT', gw('/operations/labels'), { user: { labels: ['public'] } });
    expect(noSelector.status).toBe(400);
    expect(noSelector.body.errors[0].message).toContain('selector');
    expect((await t.call('PUT', gw('/labels/user/public/resources/operation'), { selector: { include: { operation_ids: [missing] } } })).status).toBe(404);
    expect((await t.call('PATCH', gw('/labels/user/public'), { colour: 'red' })).status).toBe(400);
    // Removing all: labels off every operation, then every user label.
    await t.call('DELETE', gw('/operations/labels'));
    expect((await t.call('GET', gw('/labels/managed/cf-add-cart?with_mapped_resource_counts=true'))).body.result.mapped_resources).toEqual({ operations: 0 });
    const gone = [];
    for await (const l of cf.apiGateway.labels.user.bulkDelete(z)) gone.push(l.name);
    expect(gone).toEqual(['public']);
    expect((await t.call('GET', gw('/labels?source=user'))).body.result).toEqual([]);
    await t.call('DELETE', gw('/operations'), { operation_ids: [a, b, c] });
  });
});

describe('operations as OpenAPI schemas (deprecated export)', () => {
  it('renders the saved operations per host, filters by host, and refuses bad filters', async () => {
    const cf = sdk(t);
    const added = (await t.call('POST', gw('/operations'), [
      { method: 'GET', host: 'one.export.test', endpoint: '/users/{id}' },
      { method: 'DELETE', host: 'one.export.test', endpoint: '/users/{id}' },
      { method: 'POST', host: 'two.export.test', endpoint: '/items' },
      { method: 'GET', host: 'three.export.test', endpoint: '/health' },
    ])).body.result as { operation_id: string }[];
    const all = await cf.apiGateway.schemas.list({ zone_id: zone.id });
    expect(all.timestamp).toBeTruthy();
    const docs = all.schemas as { servers: { url: string }[]; paths: Record<string, Record<string, { operationId: string; parameters?: unknown[] }>> }[];
    const one = docs.find((d) => d.servers[0].url === 'https://one.export.test')!;
    expect(Object.keys(one.paths['/users/{var1}']).sort()).toEqual(['delete', 'get']);
    expect(one.paths['/users/{var1}'].get.operationId).toBe(added[0].operation_id);
    expect(one.paths['/users/{var1}'].get.parameters).toEqual([{ name: 'var1', in: 'path', required: true, schema: { type: 'string' } }]);
    for (const doc of docs) {
      const res = await new Validator().validate(doc);
      expect(res.errors ?? []).toEqual([]);
    }
    const some = await cf.apiGateway.schemas.list({ zone_id: zone.id, host: ['two.export.test', 'three.export.test'], feature: ['thresholds'] });
    expect((some.schemas as { servers: { url: string }[] }[]).map((d) => d.servers[0].url).sort()).toEqual(['https://three.export.test', 'https://two.export.test']);
    const raw = await t.call('GET', gw('/schemas?host=two.export.test'));
    expect(raw.body.result.schemas.map((d: { servers: { url: string }[] }) => d.servers[0].url)).toEqual(['https://two.export.test']);
    const badFeature = await t.call('GET', gw('/schemas?feature=everything'));
    expect(badFeature.status).toBe(400);
    expect(badFeature.body.errors[0].message).toContain('feature');
    expect((await t.call('GET', gw('/schemas?include_schema_kind=guessed'))).status).toBe(400);
    expect((await t.call('GET', '/zones/00000000000000000000000000000000/api_gateway/schemas')).status).toBe(404);
    await t.call('DELETE', gw('/operations'), { operation_ids: added.map((o) => o.operation_id) });
  });
});

const ORDERS_SCHEMA = {
  openapi: '3.0.3',
  info: { title: 'orders', version: '1' },
  servers: [{ url: 'https://orders.gw.test' }],
  paths: {
    '/orders/{orderId}': { get: { parameters: [{ name: 'orderId', in: 'path', required: true, schema: { type: 'integer' } }], responses: { '200': { description: 'ok' } } } },
    '/orders': {
      post: {
        parameters: [{ name: 'dry', in: 'query', schema: { type: 'boolean' } }],
        requestBody: { required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/Order' } } } },
        responses: { '200': { description: 'ok' } },
      },
    },
  },
  components: { schemas: { Order: { type: 'object', required: ['item', 'qty'], properties: { item: { type: 'string' }, qty: { type: 'integer', minimum: 1 } } } } },
};

describe('user schemas and BOLA', () => {
  let schemaId: string;
  const O = 'orders.gw.test';
  const custom = (rules: unknown[]) => t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, { rules });

  it('refuses schemas that are not OpenAPI 3 documents with a host', async () => {
    expect((await t.call('POST', gw('/user_schemas'), { name: 'x', source: 'openapi: 3.0.0' })).status).toBe(400);
    const noHost = await t.call('POST', gw('/user_schemas'), { name: 'x', source: { ...ORDERS_SCHEMA, servers: [] } });
    expect(noHost.status).toBe(400);
    expect(noHost.body.errors[0].message).toContain('servers');
    expect((await t.call('POST', gw('/user_schemas'), { name: 'x', source: { openapi: '2.0', paths: {} } })).status).toBe(400);
  });

  it('validates requests against an uploaded schema (multipart) and marks fallthrough', async () => {
    const form = new FormData();
    form.append('file', new Blob([JSON.stringify(ORDERS_SCHEMA)], { type: 'application/json' }), 'orders.json');
    form.append('name', 'orders');
    form.append('kind', 'openapi_v3');
    form.append('validation_enabled', 'true');
    const up = await fetch(`${t.api}/zones/${zone.id}/api_gateway/user_schemas`, { method: 'POST', headers: { authorization: `Bearer ${t.token}` }, body: form });
    const uploaded = (await up.json()) as { result: { schema: { schema_id: string; validation_enabled: boolean } } };
    expect(up.status).toBe(200);
    schemaId = uploaded.result.schema.schema_id;
    expect(uploaded.result.schema.validation_enabled).toBe(true);
    const hosts = await t.call('GET', gw('/user_schemas/hosts'));
    expect(hosts.body.result).toEqual([{ schema_id: schemaId, name: 'orders', hosts: [O], created_at: expect.any(String) }]);
    const ops = (await t.call('GET', gw('/operations?per_page=50'))).body.result;
    expect(ops.some((o: { host: string; endpoint: string }) => o.host === O && o.endpoint === '/orders/{var1}')).toBe(true);
    await custom([
      { action: 'block', expression: `http.host eq "${O}" and edge.api_gateway.request_violates_schema`, action_parameters: { response: { status_code: 400, content: 'schema', content_type: 'text/plain' } } },
      { action: 'block', expression: `http.host eq "${O}" and edge.api_gateway.fallthrough_triggered`, action_parameters: { response: { status_code: 404, content: 'fallthrough', content_type: 'text/plain' } } },
    ]);
    const json = { 'content-type': 'application/json' };
    expect((await send('/orders/12', { host: O })).status).toBe(200);
    expect((await send('/orders/abc', { host: O })).body).toBe('schema');
    const good = await send('/orders', { host: O, method: 'POST', headers: json, body: JSON.stringify({ item: 'pen', qty: 2 }) });
    expect(good.status).toBe(200);
    expect(JSON.parse(good.body).length).toBe(JSON.stringify({ item: 'pen', qty: 2 }).length);
    expect((await send('/orders', { host: O, method: 'POST', headers: json, body: JSON.stringify({ item: 'pen', qty: 0 }) })).body).toBe('schema');
    expect((await send('/orders', { host: O, method: 'POST', headers: json, body: '{"item": ' })).body).toBe('schema');
    expect((await send('/orders', { host: O, method: 'POST' })).body).toBe('schema');
    expect((await send('/orders?dry=maybe', { host: O, method: 'POST', headers: json, body: JSON.stringify({ item: 'pen', qty: 1 }) })).body).toBe('schema');
    expect((await send('/orders?dry=true', { host: O, method: 'POST', headers: json, body: JSON.stringify({ item: 'pen', qty: 1 }) })).status).toBe(200);
    expect((await send('/admin', { host: O })).body).toBe('fallthrough');
    // The zone's own action, without a custom rule.
    await custom([]);
    expect((await send('/orders/abc', { host: O })).status).toBe(200);
    expect((await t.call('PUT', gw('/settings/schema_validation'), { validation_default_mitigation_action: 'drop' })).status).toBe(400);
    await t.call('PUT', gw('/settings/schema_validation'), { validation_default_mitigation_action: 'block' });
    expect((await send('/orders/abc', { host: O })).status).toBe(403);
    expect((await send('/orders/7', { host: O })).status).toBe(200);
    // The official client's edit (PATCH): the zone override 'none' skips validation, disable_override clears it.
    const cf = sdk(t);
    const skipped = await cf.apiGateway.settings.schemaValidation.edit({ zone_id: zone.id, validation_override_mitigation_action: 'none' });
    expect(skipped).toMatchObject({ validation_default_mitigation_action: 'block', validation_override_mitigation_action: 'none' });
    expect((await send('/orders/abc', { host: O })).status).toBe(200);
    await custom([{ action: 'block', expression: `http.host eq "${O}" and edge.api_gateway.request_violates_schema`, action_parameters: { response: { status_code: 400, content: 'schema', content_type: 'text/plain' } } }]);
    expect((await send('/orders/abc', { host: O })).status).toBe(200);
    await custom([]);
    expect((await t.call('PATCH', gw('/settings/schema_validation'), { validation_override_mitigation_action: 'all' })).status).toBe(400);
    const kept = await t.call('PATCH', gw('/settings/schema_validation'), { validation_default_mitigation_action: null });
    expect(kept.body).toEqual({ success: true, errors: [], messages: [], validation_default_mitigation_action: 'block', validation_override_mitigation_action: 'none' });
    const cleared = await cf.apiGateway.settings.schemaValidation.edit({ zone_id: zone.id, validation_override_mitigation_action: 'disable_override' });
    expect(cleared.validation_override_mitigation_action).toBeNull();
    expect((await send('/orders/abc', { host: O })).status).toBe(403);
    expect((await cf.apiGateway.settings.schemaValidation.get({ zone_id: zone.id })).validation_default_mitigation_action).toBe('block');
    await t.call('PATCH', gw(`/user_schemas/${schemaId}`), { validation_enabled: false });
    expect((await send('/orders/abc', { host: O })).status).toBe(200);
    const listed = await t.call('GET', gw('/user_schemas?omit_source=true'));
    expect(listed.body.result[0].source).toBeUndefined();
    expect(listed.body.result[0].validation_enabled).toBe(false);
  });

  it('applies per-operation schema validation actions over the zone default (official client and raw)', async () => {
    const cf = sdk(t);
    await t.call('PATCH', gw(`/user_schemas/${schemaId}`), { validation_enabled: true });
    await t.call('PUT', gw('/settings/schema_validation'), { validation_default_mitigation_action: 'log' });
    const ops = (await t.call('GET', gw('/operations?per_page=50'))).body.result as { operation_id: string; host: string; method: string; endpoint: string }[];
    const byId = ops.find((o) => o.host === O && o.method === 'GET' && o.endpoint === '/orders/{var1}')!;
    const create = ops.find((o) => o.host === O && o.method === 'POST' && o.endpoint === '/orders')!;
    const json = { 'content-type': 'application/json' };
    // The zone default is log: nothing is blocked.
    expect((await send('/orders/abc', { host: O })).status).toBe(200);
    expect(await cf.apiGateway.operations.schemaValidation.get(byId.operation_id, { zone_id: zone.id })).toMatchObject({ operation_id: byId.operation_id, mitigation_action: null });
    // block on one operation only.
    const set = await cf.apiGateway.operations.schemaValidation.update(byId.operation_id, { zone_id: zone.id, mitigation_action: 'block' });
    expect(set).toMatchObject({ operation_id: byId.operation_id, mitigation_action: 'block' });
    expect((await send('/orders/abc', { host: O })).status).toBe(403);
    expect((await send('/orders/5', { host: O })).status).toBe(200);
    expect((await send('/orders', { host: O, method: 'POST', headers: json, body: JSON.stringify({ item: 'pen', qty: 0 }) })).status).toBe(200);
    // The zone blocks; the bulk edit sets none (validation skipped) on one operation and block on the other.
    await t.call('PUT', gw('/settings/schema_validation'), { validation_default_mitigation_action: 'block' });
    const bulk = await cf.apiGateway.operations.schemaValidation.edit({ zone_id: zone.id, settings_multiple_request: { [byId.operation_id]: { mitigation_action: 'none' }, [create.operation_id]: { mitigation_action: 'block' } } });
    expect(bulk).toEqual({ [byId.operation_id]: { mitigation_action: 'none' }, [create.operation_id]: { mitigation_action: 'block' } });
    expect((await send('/orders/abc', { host: O })).status).toBe(200);
    expect((await send('/orders', { host: O, method: 'POST', headers: json, body: JSON.stringify({ item: 'pen', qty: 0 }) })).status).toBe(403);
    // none also skips the field, so a custom rule on it does not fire for that operation.
    await custom([{ action: 'block', expression: `http.host eq "${O}" and edge.api_gateway.request_violates_schema`, action_parameters: { response: { status_code: 400, content: 'schema', content_type: 'text/plain' } } }]);
    expect((await send('/orders/abc', { host: O })).status).toBe(200);
    await custom([]);
    // The documented wrapped form; null gives the operation back to the zone default (block).
    const wrapped = await t.call('PATCH', gw('/operations/schema_validation'), { settings_multiple_request: { [byId.operation_id]: { mitigation_action: null } } });
    expect(wrapped.status).toBe(200);
    expect(wrapped.body.result).toEqual({ [byId.operation_id]: { mitigation_action: null } });
    expect((await send('/orders/abc', { host: O })).status).toBe(403);
    const got = await t.call('GET', gw(`/operations/${byId.operation_id}/schema_validation`));
    expect(got.body).toMatchObject({ success: true, operation_id: byId.operation_id, mitigation_action: null });
    // Operations do not show the action in their own view.
    expect((await t.call('GET', gw(`/operations/${create.operation_id}`))).body.result.mitigation_action).toBeUndefined();
    // Bad input: an unknown action, an unknown field, an unknown id (nothing written), an empty map.
    const badAction = await t.call('PUT', gw(`/operations/${byId.operation_id}/schema_validation`), { mitigation_action: 'drop' });
    expect(badAction.status).toBe(400);
    expect(badAction.body.errors[0].message).toContain('mitigation_action');
    expect((await t.call('PUT', gw(`/operations/${byId.operation_id}/schema_validation`), { action: 'block' })).status).toBe(400);
    const missing = '00000000-0000-4000-8000-000000000000';
    expect((await t.call('GET', gw(`/operations/${missing}/schema_validation`))).status).toBe(404);
    expect((await t.call('PUT', gw(`/operations/${missing}/schema_validation`), { mitigation_action: 'log' })).status).toBe(404);
    const partly = await t.call('PATCH', gw('/operations/schema_validation'), { [create.operation_id]: { mitigation_action: 'log' }, [missing]: { mitigation_action: 'log' } });
    expect(partly.status).toBe(404);
    expect(partly.body.errors[0].message).toContain(missing);
    expect((await cf.apiGateway.operations.schemaValidation.get(create.operation_id, { zone_id: zone.id })).mitigation_action).toBe('block');
    const badBulk = await t.call('PATCH', gw('/operations/schema_validation'), { settings_multiple_request: { [create.operation_id]: { mitigation_action: 'drop' } } });
    expect(badBulk.status).toBe(400);
    expect(badBulk.body.errors[0].message).toContain('mitigation_action');
    expect((await t.call('PATCH', gw('/operations/schema_validation'), {})).status).toBe(400);
    const notId = await t.call('PATCH', gw('/operations/schema_validation'), { 'orders-by-id': { mitigation_action: 'log' } });
    expect(notId.status).toBe(400);
    expect(notId.body.errors[0].message).toContain('orders-by-id');
    // Back to the state the next test expects.
    await cf.apiGateway.operations.schemaValidation.edit({ zone_id: zone.id, settings_multiple_request: { [create.operation_id]: { mitigation_action: null } } });
    await t.call('PATCH', gw(`/user_schemas/${schemaId}`), { validation_enabled: false });
  });

  it('flags an enumerating session and parameter pollution once BOLA is on', async () => {
    expect((await t.call('GET', gw('/user_schemas/00000000-0000-4000-8000-000000000000/bola'))).status).toBe(404);
    expect((await t.call('PATCH', gw(`/user_schemas/${schemaId}/bola`), { enabled: 'yes' })).status).toBe(400);
    expect((await t.call('GET', gw(`/user_schemas/${schemaId}/bola`))).body.result).toEqual({ enabled: false, min_sessions: 10000 });
    const on = await t.call('PATCH', gw(`/user_schemas/${schemaId}/bola`), { enabled: true, min_sessions: 3 });
    expect(on.body.result).toEqual({ enabled: true, min_sessions: 3 });
    await t.call('PUT', gw('/configuration'), { auth_id_characteristics: [{ type: 'header', name: 'x-session' }] });
    await custom([
      { action: 'block', expression: `http.host eq "${O}" and edge.api_gateway.edge-risk-bola-enumeration`, action_parameters: { response: { status_code: 429, content: 'enumeration', content_type: 'text/plain' } } },
      { action: 'block', expression: `http.host eq "${O}" and cf.api_gateway.cf-risk-bola-pollution`, action_parameters: { response: { status_code: 400, content: 'pollution', content_type: 'text/plain' } } },
    ]);
    for (const s of ['s1', 's2', 's3']) for (const id of [1, 2]) expect((await send(`/orders/${id}`, { host: O, headers: { 'x-session': s } })).status).toBe(200);
    const statuses: number[] = [];
    for (let id = 100; id < 115; id++) statuses.push((await send(`/orders/${id}`, { host: O, headers: { 'x-session': 'attacker' } })).status);
    expect(statuses.slice(0, 10).every((s) => s === 200)).toBe(true);
    expect(statuses.slice(10).every((s) => s === 429)).toBe(true);
    // A normal session is unaffected.
    expect((await send('/orders/3', { host: O, headers: { 'x-session': 's1' } })).status).toBe(200);
    expect((await send('/orders/5?orderId=6', { host: O, headers: { 'x-session': 's2' } })).body).toBe('pollution');
    await custom([]);
    expect((await t.call('DELETE', gw(`/user_schemas/${schemaId}`))).body).toEqual({ errors: [], messages: [], success: true });
  });
});

// The orders schema as a user writes it in YAML (an anchor shares the responses), for its own host.
const ORDERS_YAML = `openapi: 3.0.3
info:
  title: orders
  version: "1"
servers:
  - url: https://yaml.gw.test
paths:
  /orders/{orderId}:
    get:
      parameters:
        - name: orderId
          in: path
          required: true
          schema:
            type: integer
      responses: &ok
        "200":
          description: ok
  /orders:
    post:
      parameters:
        - name: dry
          in: query
          schema:
            type: boolean
      requestBody:
        required: true
        content:
          application/json:
            schema:
              $ref: "#/components/schemas/Order"
      responses: *ok
components:
  schemas:
    Order:
      type: object
      required: [item, qty]
      properties:
        item: {type: string}
        qty: {type: integer, minimum: 1}
`;

describe('user schemas in YAML', () => {
  const Y = 'yaml.gw.test';
  const json = { 'content-type': 'application/json' };
  const custom = (rules: unknown[]) => t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, { rules });
  const upload = async (text: string, fields: Record<string, string> = {}, filename = 'orders.yaml') => {
    const form = new FormData();
    form.append('file', new Blob([text], { type: 'application/yaml' }), filename);
    form.append('kind', 'openapi_v3');
    for (const [k, v] of Object.entries({ name: 'hostile', ...fields })) form.append(k, v);
    const res = await fetch(`${t.api}/zones/${zone.id}/api_gateway/user_schemas`, { method: 'POST', headers: { authorization: `Bearer ${t.token}` }, body: form });
    return { status: res.status, body: (await res.json()) as { success: boolean; errors: { message: string }[]; result: { schema: { schema_id: string; source: string; validation_enabled: boolean } } } };
  };
  let clientId: string;
  let zoneAction: string;

  it('reads a YAML schema uploaded through the official client and validates requests at the edge with it', async () => {
    expect((await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'yaml', content: ORIGIN, proxied: true, ttl: 1 })).status).toBe(200);
    zoneAction = (await t.call('GET', gw('/settings/schema_validation'))).body.validation_default_mitigation_action;
    const cf = sdk(t);
    const made = await cf.apiGateway.userSchemas.create({ zone_id: zone.id, file: await toFile(Buffer.from(ORDERS_YAML), 'orders.yaml'), kind: 'openapi_v3', name: 'orders-yaml', validation_enabled: 'true' });
    expect(made.schema).toMatchObject({ name: 'orders-yaml', kind: 'openapi_v3', validation_enabled: true });
    clientId = made.schema!.schema_id;
    // The source is given back as it was uploaded, as for a JSON upload; omit_source leaves it out.
    expect((await t.call('GET', gw(`/user_schemas/${clientId}`))).body.result.source).toBe(ORDERS_YAML);
    expect((await cf.apiGateway.userSchemas.get(clientId, { zone_id: zone.id, omit_source: true })).source).toBeUndefined();
    const hosts = (await t.call('GET', gw('/user_schemas/hosts'))).body.result;
    expect(hosts.find((h: { schema_id: string }) => h.schema_id === clientId)).toMatchObject({ name: 'orders-yaml', hosts: [Y] });
    // Its operations joined the zone's, so the OpenAPI export shows them.
    const listed: { method: string; endpoint: string; operation_id?: string }[] = [];
    for await (const o of cf.apiGateway.userSchemas.operations.list(clientId, { zone_id: zone.id })) listed.push(o as (typeof listed)[number]);
    expect(listed.map((o) => [o.method, o.endpoint, typeof o.operation_id])).toEqual([['GET', '/orders/{var1}', 'string'], ['POST', '/orders', 'string']]);
    const exported = await t.call('GET', gw(`/schemas?host=${Y}`));
    expect(Object.keys(exported.body.result.schemas[0].paths).sort()).toEqual(['/orders', '/orders/{var1}']);

    // log: requests pass, and a custom rule sees the field the schema sets.
    await t.call('PUT', gw('/settings/schema_validation'), { validation_default_mitigation_action: 'log' });
    expect((await send('/orders/abc', { host: Y })).status).toBe(200);
    await custom([{ action: 'block', expression: `http.host eq "${Y}" and cf.api_gateway.request_violates_schema`, action_parameters: { response: { status_code: 400, content: 'schema', content_type: 'text/plain' } } }]);
    expect((await send('/orders/12', { host: Y })).status).toBe(200);
    expect((await send('/orders/abc', { host: Y })).body).toBe('schema');
    const order = JSON.stringify({ item: 'pen', qty: 2 });
    const good = await send('/orders?dry=true', { host: Y, method: 'POST', headers: json, body: order });
    expect(good.status).toBe(200);
    expect(JSON.parse(good.body).length).toBe(order.length);
    // The body schema is reached through the $ref and the aliased responses did not get in the way.
    expect((await send('/orders', { host: Y, method: 'POST', headers: json, body: JSON.stringify({ item: 'pen', qty: 0 }) })).body).toBe('schema');
    expect((await send('/orders?dry=maybe', { host: Y, method: 'POST', headers: json, body: order })).body).toBe('schema');
    await custom([]);
    // block: the gateway answers by itself.
    await t.call('PUT', gw('/settings/schema_validation'), { validation_default_mitigation_action: 'block' });
    expect((await send('/orders/abc', { host: Y })).status).toBe(403);
    expect((await send('/orders', { host: Y, method: 'POST', headers: json, body: JSON.stringify({ item: 'pen' }) })).status).toBe(403);
    expect((await send('/orders/7', { host: Y })).status).toBe(200);
    expect((await send('/orders', { host: Y, method: 'POST', headers: json, body: order })).status).toBe(200);
  });

  it('reads it over raw multipart too, with the same operations and hosts as the JSON document', async () => {
    const rawUp = await upload(ORDERS_YAML, { name: 'orders-yaml-raw', validation_enabled: 'true' });
    expect(rawUp.status).toBe(200);
    const rawId = rawUp.body.result.schema.schema_id;
    expect(rawUp.body.result.schema.source).toBe(ORDERS_YAML);
    // The client's upload off, the raw one on: it alone validates now.
    await t.call('PATCH', gw(`/user_schemas/${clientId}`), { validation_enabled: false });
    expect((await send('/orders/abc', { host: Y })).status).toBe(403);
    expect((await send('/orders/8', { host: Y })).status).toBe(200);
    // The same document in JSON.
    const asJson = await t.call('POST', gw('/user_schemas'), { name: 'orders-json', source: { ...ORDERS_SCHEMA, servers: [{ url: `https://${Y}` }] } });
    expect(asJson.status).toBe(200);
    const jsonId = asJson.body.result.schema.schema_id;
    // The YAML text as the JSON body's `source` reads the same way.
    const asText = await t.call('POST', gw('/user_schemas'), { name: 'orders-yaml-text', source: ORDERS_YAML });
    expect(asText.status).toBe(200);
    const textId = asText.body.result.schema.schema_id;
    expect(asText.body.result.schema.source).toBe(ORDERS_YAML);
    for (const q of ['', '?operation_status=existing', `?host=${Y}&method=post`]) {
      const fromJson = (await t.call('GET', gw(`/user_schemas/${jsonId}/operations${q}`))).body;
      expect(fromJson.result.length).toBeGreaterThan(0);
      for (const id of [rawId, textId]) expect((await t.call('GET', gw(`/user_schemas/${id}/operations${q}`))).body).toEqual(fromJson);
    }
    const ids = [clientId, rawId, jsonId, textId];
    const hosts = (await t.call('GET', gw('/user_schemas/hosts?per_page=100'))).body.result as { schema_id: string; hosts: string[] }[];
    expect(hosts.filter((h) => ids.includes(h.schema_id)).map((h) => h.hosts)).toEqual([[Y], [Y], [Y], [Y]]);
    const listed = (await t.call('GET', gw('/user_schemas?omit_source=true&per_page=100'))).body.result as { schema_id: string; source?: string }[];
    expect(listed.filter((s) => ids.includes(s.schema_id)).map((s) => s.source)).toEqual([undefined, undefined, undefined, undefined]);
    for (const id of ids) expect((await t.call('DELETE', gw(`/user_schemas/${id}`))).status).toBe(200);
    expect((await send('/orders/abc', { host: Y })).status).toBe(200);
    await t.call('PUT', gw('/settings/schema_validation'), { validation_default_mitigation_action: zoneAction });
  });

  it('refuses hostile YAML with a 400 that says what is wrong, and writes nothing', async () => {
    const before = (await t.call('GET', gw('/user_schemas?per_page=100'))).body.result.length;
    const refused = async (text: string, expected: string | RegExp) => {
      const res = await upload(text);
      expect(res.status).toBe(400);
      expect(res.body.success).toBe(false);
      expect(res.body.errors[0].message).toMatch(expected);
      return res.body.errors[0].message;
    };
    // Malformed: the line and column of the fault.
    await refused('openapi: 3.0.3\nservers:\n  - url: https://yaml.gw.test\npaths:\n  /a:\n    get: {}\n   oops: [\n', /^the schema is not valid YAML: line 7, column \d+: /);
    await refused('openapi: 3.0.3\nopenapi: 3.0.3\n', /^the schema is not valid YAML: line 2, column 1: Map keys must be unique/);
    await refused(`${ORDERS_YAML}---\nopenapi: 3.0.3\n`, /one YAML document/);
    // Valid YAML that is not an OpenAPI 3 document: the answer a JSON upload gets.
    for (const [yaml, asJson] of [
      ['- openapi\n- "3.0.3"\n', '["openapi", "3.0.3"]'],
      ['swagger: "2.0"\npaths: {}\n', '{"swagger": "2.0", "paths": {}}'],
      ['just words\n', '"just words"'],
      ['openapi: 3.0.3\npaths:\n  /a: {get: {}}\n', '{"openapi": "3.0.3", "paths": {"/a": {"get": {}}}}'],
      ['openapi: 3.0.3\nservers: [{url: "https://yaml.gw.test"}]\npaths: {}\n', '{"openapi": "3.0.3", "servers": [{"url": "https://yaml.gw.test"}], "paths": {}}'],
    ]) {
      const fromJson = await upload(asJson, {}, 'schema.json');
      expect(fromJson.status).toBe(400);
      expect(await refused(yaml, /./)).toBe(fromJson.body.errors[0].message);
    }
    expect(await refused('openapi: 3.1\n', /OpenAPI 3/)).toContain('quote it');
    // Tags are not read: no custom types, no binary.
    await refused('openapi: !!python/object/apply:os.system ["id"]\n', /line 1, column 10: .*no explicit tags/);
    await refused('openapi: 3.0.3\nx-blob: !!binary aGVsbG8=\n', /line 2, column 9: .*no explicit tags/);
    await refused('openapi: !custom 3.0.3\n', /no explicit tags/);
    // A "billion laughs": nine levels of nine aliases each.
    let laughs = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n';
    for (let i = 1; i < 10; i++) {
      const [name, prev] = [String.fromCharCode(97 + i), String.fromCharCode(96 + i)];
      laughs += `${name}: &${name} [${Array(9).fill(`*${prev}`).join(', ')}]\n`;
    }
    await refused(laughs, /expands YAML aliases too often/);
    // Few aliases of a large anchor: past the size a JSON upload may have once expanded.
    const big = `x-big: &big [${Array(4000).fill(`"${'y'.repeat(100)}"`).join(', ')}]\n`;
    await refused(`${ORDERS_YAML}${big}${Array.from({ length: 6 }, (_, i) => `x-copy${i}: *big`).join('\n')}\n`, /larger than 2 MB once its YAML aliases are expanded/);
    // An alias inside its own anchor.
    await refused(`${ORDERS_YAML}x-loop: &loop [*loop]\n`, /contains itself/);
    // Deep nesting, in flow and in block style, and in JSON.
    await refused(`${ORDERS_YAML}x-deep: ${'['.repeat(200_000)}${']'.repeat(200_000)}\n`, /nests deeper than 128 levels/);
    await refused(`${ORDERS_YAML}x-deep:\n${Array.from({ length: 300 }, (_, i) => `${' '.repeat(i + 1)}-\n`).join('')}`, /nests deeper than 128 levels/);
    const deepJson = await t.call('POST', gw('/user_schemas'), { name: 'deep', source: `{"openapi": "3.0.3", "x-deep": ${'['.repeat(100_000)}${']'.repeat(100_000)}}` });
    expect(deepJson.status).toBe(400);
    expect(deepJson.body.errors[0].message).toContain('nests deeper than 128 levels');
    // Nothing was stored, and the gateway still answers.
    expect((await t.call('GET', gw('/user_schemas?per_page=100'))).body.result.length).toBe(before);
  });
});

describe('official client', () => {
  it('apiGateway.operations and tokenValidation through the cloudflare client', async () => {
    const cf = sdk(t);
    const z = await createZone(t, 'client-gw.test');
    const created = await cf.apiGateway.operations.create({ zone_id: z.id, endpoint: '/api/{id}', host: 'www.client-gw.test', method: 'GET' });
    expect(created.endpoint).toBe('/api/{var1}');
    const many = await cf.apiGateway.operations.bulkCreate({ zone_id: z.id, body: Array.from({ length: 6 }, (_, i) => ({ endpoint: `/v${i}`, host: 'www.client-gw.test', method: 'POST' as const })) });
    const seen: string[] = [];
    for await (const op of cf.apiGateway.operations.list({ zone_id: z.id, per_page: 5 })) seen.push(op.operation_id);
    expect(seen).toHaveLength(7);
    expect((await cf.apiGateway.operations.get(created.operation_id, { zone_id: z.id })).host).toBe('www.client-gw.test');
    const del = await cf.apiGateway.operations.delete(many.result[0].operation_id, { zone_id: z.id });
    expect(del.success).toBe(true);
    await cf.apiGateway.operations.bulkDelete({ zone_id: z.id });
    expect((await t.call('GET', `/zones/${z.id}/api_gateway/operations`)).body.result).toEqual([]);
    try {
      await cf.apiGateway.operations.get('00000000-0000-4000-8000-000000000000', { zone_id: z.id });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(Cloudflare.NotFoundError);
    }
    const cfg = await cf.tokenValidation.configuration.create({ zone_id: z.id, title: 'client', description: 'via client', token_type: 'JWT', token_sources: ['http.request.headers["x-auth"][0]'], credentials: { keys: [publicJwk as never] } });
    expect(cfg.id).toBeTruthy();
    const edited = await cf.tokenValidation.configuration.edit(cfg.id!, { zone_id: z.id, title: 'renamed' });
    expect(edited.title).toBe('renamed');
    const listed = [];
    for await (const c of cf.tokenValidation.configuration.list({ zone_id: z.id })) listed.push(c);
    expect(listed.map((c) => c.title)).toEqual(['renamed']);
    const rule = await cf.tokenValidation.rules.create({ zone_id: z.id, title: 'r', description: '', action: 'log', enabled: true, expression: `is_jwt_valid(http.request.jwt.payload["${cfg.id}"][0])`, selector: {} });
    expect((await cf.tokenValidation.rules.get(rule.id!, { zone_id: z.id })).action).toBe('log');
    await cf.tokenValidation.rules.delete(rule.id!, { zone_id: z.id });
    // Bulk create and edit (all or none).
    const expr = `is_jwt_valid(http.request.jwt.payload["${cfg.id}"][0])`;
    const made = [];
    for await (const r of cf.tokenValidation.rules.bulkCreate({ zone_id: z.id, body: [{ title: 'b1', description: '', action: 'log', enabled: true, expression: expr, selector: {} }, { title: 'b2', description: '', action: 'block', enabled: false, expression: expr, selector: { include: [{ host: ['www.client-gw.test'] }] } }] })) made.push(r);
    expect(made.map((r) => r.title)).toEqual(['b1', 'b2']);
    const edited2 = [];
    for await (const r of cf.tokenValidation.rules.bulkEdit({ zone_id: z.id, body: [{ id: made[0].id!, action: 'block' }, { id: made[1].id!, enabled: true }] })) edited2.push(r);
    expect(edited2.map((r) => [r.title, r.action, r.enabled])).toEqual([['b1', 'block', true], ['b2', 'block', true]]);
    const badExpr = await t.call('POST', `/zones/${z.id}/token_validation/rules/bulk`, [{ title: 'ok', action: 'log', expression: expr }, { title: 'bad', action: 'log', expression: 'is_jwt_valid(' }]);
    expect(badExpr.status).toBe(400);
    expect(badExpr.body.errors[0].message).toContain('[1].expression');
    const badCfg = await t.call('POST', `/zones/${z.id}/token_validation/rules/bulk`, [{ title: 'ok', action: 'log', expression: expr }, { title: 'bad', action: 'log', expression: 'is_jwt_valid(http.request.jwt.payload["00000000-0000-4000-8000-000000000000"][0])' }]);
    expect(badCfg.status).toBe(400);
    const missing = await t.call('PATCH', `/zones/${z.id}/token_validation/rules/bulk`, [{ id: made[0].id, action: 'log' }, { id: '00000000-0000-4000-8000-000000000000', action: 'log' }]);
    expect(missing.status).toBe(404);
    const after = (await t.call('GET', `/zones/${z.id}/token_validation/rules`)).body.result;
    expect(after.map((r: { title: string; action: string }) => [r.title, r.action])).toEqual([['b1', 'block'], ['b2', 'block']]);
    for (const r of made) await cf.tokenValidation.rules.delete(r.id!, { zone_id: z.id });
    await cf.tokenValidation.configuration.delete(cfg.id!, { zone_id: z.id });
    expect((await t.call('GET', `/zones/${z.id}/token_validation/config`)).body.result).toEqual([]);

    // Session identifiers, discovery and schemas on the zone that has seen traffic.
    const conf = await cf.apiGateway.configurations.update({ zone_id: zone.id, auth_id_characteristics: [{ type: 'cookie', name: 'sid' }] });
    expect(conf).toMatchObject({ auth_id_characteristics: [{ type: 'cookie', name: 'sid' }] });
    expect((await cf.apiGateway.configurations.get({ zone_id: zone.id })).auth_id_characteristics[0].name).toBe('sid');
    const discovered = [];
    for await (const d of cf.apiGateway.discovery.operations.list({ zone_id: zone.id, per_page: 5 })) discovered.push(d);
    expect(discovered.length).toBeGreaterThan(5);
    const states = await cf.apiGateway.discovery.operations.bulkEdit({ zone_id: zone.id, body: { [discovered[0].id]: { state: 'ignored' }, [discovered[1].id]: {} } });
    expect(states[discovered[0].id].state).toBe('ignored');
    expect(states[discovered[1].id].state).toBe(discovered[1].state);
    const exported = await cf.apiGateway.discovery.get({ zone_id: zone.id });
    expect(exported.schemas.length).toBeGreaterThan(0);
    const schema = await cf.apiGateway.userSchemas.create({
      zone_id: z.id,
      file: await toFile(Buffer.from(JSON.stringify({ ...ORDERS_SCHEMA, servers: [{ url: 'https://www.client-gw.test' }] })), 'orders.json'),
      kind: 'openapi_v3',
      name: 'orders',
      validation_enabled: 'true',
    });
    expect(schema.schema?.validation_enabled).toBe(true);
    const covered = [];
    for await (const h of cf.apiGateway.userSchemas.hosts.list({ zone_id: z.id })) covered.push(h);
    expect(covered.map((h) => [h.schema_id, h.hosts])).toEqual([[schema.schema?.schema_id, ['www.client-gw.test']]]);
    // The schema's operations: saved ones in full, the others as method, host and endpoint.
    const sid = schema.schema!.schema_id;
    const listed2 = [];
    for await (const o of cf.apiGateway.userSchemas.operations.list(sid, { zone_id: z.id })) listed2.push(o as { operation_id?: string; method: string; endpoint: string });
    expect(listed2.map((o) => [o.method, o.endpoint, typeof o.operation_id])).toEqual([['GET', '/orders/{var1}', 'string'], ['POST', '/orders', 'string']]);
    await cf.apiGateway.operations.delete(listed2[0].operation_id!, { zone_id: z.id });
    const fresh = await t.call('GET', `/zones/${z.id}/api_gateway/user_schemas/${sid}/operations?operation_status=new`);
    expect(fresh.body.result).toEqual([{ method: 'GET', host: 'www.client-gw.test', endpoint: '/orders/{var1}' }]);
    expect((await t.call('GET', `/zones/${z.id}/api_gateway/user_schemas/${sid}/operations?method=post&operation_status=existing`)).body.result.map((o: { endpoint: string }) => o.endpoint)).toEqual(['/orders']);
    expect((await t.call('GET', `/zones/${z.id}/api_gateway/user_schemas/${sid}/operations?operation_status=old`)).status).toBe(400);
    expect((await t.call('GET', `/zones/${z.id}/api_gateway/user_schemas/00000000-0000-4000-8000-000000000000/operations`)).status).toBe(404);
  });
});

describe('snippets', () => {
  it('see the verified claims and the TLS attributes on request.edge', async () => {
    const configId = (await t.call('GET', gw('/token_validation'))).body.result.find((c: { name: string }) => c.name === 'users').id;
    const code = `export default { async fetch(request) {
      const e = request.edge ?? request.cf;
      return new Response(JSON.stringify({ jwt: e.jwt, tls: e.tlsVersion, proto: e.httpProtocol, auth: e.tlsClientAuth }), { headers: { 'content-type': 'application/json' } });
    } };`;
    const form = new FormData();
    form.set('metadata', JSON.stringify({ main_module: 'snippet.js' }));
    form.append('files', new Blob([code], { type: 'application/javascript+module' }), 'snippet.js');
    const up = await fetch(`${t.api}/zones/${zone.id}/snippets/claims`, { method: 'PUT', headers: { authorization: `Bearer ${t.token}` }, body: form });
    expect(up.status).toBe(200);
    const rules = await t.call('PUT', `/zones/${zone.id}/snippets/snippet_rules`, { rules: [{ snippet_name: 'claims', expression: `http.host eq "${HOST}" and http.request.uri.path eq "/snippet-echo"`, enabled: true }] });
    expect(rules.status).toBe(200);
    const res = await send('/snippet-echo', { headers: { authorization: `Bearer ${await jwt({ sub: 'dave', role: 'ops' })}` } });
    expect(res.status).toBe(200);
    const seen = JSON.parse(res.body);
    expect(seen.jwt.payload[configId][0]).toMatchObject({ sub: 'dave', role: 'ops' });
    expect(seen.tls).toMatch(/^TLSv1\.[23]$/);
    expect(seen.proto).toBe('HTTP/1.1');
    expect(seen.auth).toMatchObject({ certPresented: '0', certVerified: 'NONE' });
    await t.call('PUT', `/zones/${zone.id}/snippets/snippet_rules`, { rules: [] });
  });
});
