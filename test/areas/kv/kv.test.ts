/**
 * Key-value namespaces: the REST API through the official client (namespaces, values with
 * metadata and expiration, key listing with prefix/cursor/limit, bulk write/read/delete), bad
 * input and auth, and a script's `kv_namespace` binding (real workerd, reached through the edge)
 * that sees the same data as the API.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { manualClock } from '../../../src/core/clock.ts';
import { createToken, createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { sdk } from '../../support/sdk.ts';
import { deployScript, edgeGet, edgeUrlOf, putScript } from '../workers/helpers.ts';

const clock = manualClock(new Date('2026-03-01T00:00:00.000Z'));
let t: TestServer;
let nsId: string;

const KV_SCRIPT = `export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const key = url.searchParams.get('key');
    const op = url.pathname.slice(1);
    if (op === 'put') {
      await env.STORE.put(key, await request.text(), { metadata: { from: 'script' }, expirationTtl: url.searchParams.get('ttl') ?? undefined });
      return new Response('stored');
    }
    if (op === 'putjson') { await env.STORE.put(key, JSON.stringify({ n: 42, list: [1, 2] })); return new Response('ok'); }
    if (op === 'putbytes') { await env.STORE.put(key, new Uint8Array([0, 1, 2, 255])); return new Response('ok'); }
    if (op === 'putstream') {
      const { readable, writable } = new TransformStream();
      const w = writable.getWriter();
      w.write(new TextEncoder().encode('streamed '));
      w.write(new TextEncoder().encode('value'));
      w.close();
      await env.STORE.put(key, readable);
      return new Response('ok');
    }
    if (op === 'get') {
      const v = await env.STORE.get(key);
      return v === null ? new Response('missing', { status: 404 }) : new Response(v);
    }
    if (op === 'json') return Response.json(await env.STORE.get(key, 'json'));
    if (op === 'bytes') return Response.json([...new Uint8Array(await env.STORE.get(key, { type: 'arrayBuffer' }))]);
    if (op === 'stream') return new Response(await env.STORE.get(key, { type: 'stream' }));
    if (op === 'meta') return Response.json(await env.STORE.getWithMetadata(key));
    if (op === 'delete') { await env.STORE.delete(key); return new Response('deleted'); }
    if (op === 'list') {
      const first = await env.STORE.list({ prefix: url.searchParams.get('prefix') ?? undefined, limit: 2 });
      const second = first.list_complete ? null : await env.STORE.list({ prefix: url.searchParams.get('prefix') ?? undefined, limit: 2, cursor: first.cursor });
      return Response.json({ first, second });
    }
    if (op === 'badkey') { await env.STORE.put('', 'x'); return new Response('unexpected'); }
    return new Response('unknown op', { status: 400 });
  },
};`;

beforeAll(async () => {
  t = await startTestServer({ workersDevSuffix: 'kv.workers.test' }, { clock });
}, 60_000);

afterAll(async () => {
  await t?.stop();
});

describe('the KV REST API', () => {
  it('manages namespaces through the official client', async () => {
    const cf = sdk(t);
    const ns = await cf.kv.namespaces.create({ account_id: t.accountId, title: 'primary' });
    expect(ns).toMatchObject({ title: 'primary', supports_url_encoding: true });
    expect(ns.id).toMatch(/^[0-9a-f]{32}$/);
    nsId = ns.id;
    const second = await cf.kv.namespaces.create({ account_id: t.accountId, title: 'second' });
    const listed = [];
    for await (const n of cf.kv.namespaces.list({ account_id: t.accountId })) listed.push(n.title);
    expect(listed.sort()).toEqual(['primary', 'second']);
    await cf.kv.namespaces.update(second.id, { account_id: t.accountId, title: 'renamed' });
    expect((await cf.kv.namespaces.get(second.id, { account_id: t.accountId })).title).toBe(
      'renamed',
    );
    const dup = await t.call('POST', `/accounts/${t.accountId}/storage/kv/namespaces`, {
      title: 'primary',
    });
    expect(dup.status).toBe(409);
    await cf.kv.namespaces.delete(second.id, { account_id: t.accountId });
    expect(
      (await t.call('GET', `/accounts/${t.accountId}/storage/kv/namespaces/${second.id}`)).status,
    ).toBe(404);
  });

  it('writes values with metadata and expiration; reads, lists and deletes them', async () => {
    const cf = sdk(t);
    await cf.kv.namespaces.values.update('user/1', {
      account_id: t.accountId,
      namespace_id: nsId,
      value: 'alice',
      metadata: JSON.stringify({ role: 'admin' }),
    });
    const got = await cf.kv.namespaces.values.get('user/1', {
      account_id: t.accountId,
      namespace_id: nsId,
    });
    expect(await got.text()).toBe('alice');
    expect(
      await cf.kv.namespaces.metadata.get('user/1', {
        account_id: t.accountId,
        namespace_id: nsId,
      }),
    ).toEqual({ role: 'admin' });

    // Raw body with a TTL; expiration as an absolute time.
    const now = Math.floor(clock.now().getTime() / 1000);
    const ttl = await fetch(
      `${t.api}/accounts/${t.accountId}/storage/kv/namespaces/${nsId}/values/temp?expiration_ttl=60`,
      {
        method: 'PUT',
        headers: { authorization: `Bearer ${t.token}` },
        body: new Uint8Array([1, 2, 3]),
      },
    );
    expect(ttl.status).toBe(200);
    const raw = await fetch(
      `${t.api}/accounts/${t.accountId}/storage/kv/namespaces/${nsId}/values/temp`,
      {
        headers: { authorization: `Bearer ${t.token}` },
      },
    );
    expect([...new Uint8Array(await raw.arrayBuffer())]).toEqual([1, 2, 3]);
    expect(raw.headers.get('expiration')).toBe(String(now + 60));

    const bulk = await cf.kv.namespaces.bulkUpdate(nsId, {
      account_id: t.accountId,
      body: [
        { key: 'user/2', value: 'bob' },
        {
          key: 'user/3',
          value: Buffer.from('carol').toString('base64'),
          base64: true,
          metadata: { n: 3 },
        },
        { key: 'user/4', value: 'dave', expiration: now + 3600 },
        { key: 'other', value: 'x' },
      ],
    });
    expect(bulk).toMatchObject({ successful_key_count: 4 });

    // Listing with prefix and a small limit pages by cursor.
    const names: string[] = [];
    for await (const k of cf.kv.namespaces.keys.list(nsId, {
      account_id: t.accountId,
      prefix: 'user/',
      limit: 10,
    }))
      names.push(k.name);
    expect(names).toEqual(['user/1', 'user/2', 'user/3', 'user/4']);
    const page = await t.call(
      'GET',
      `/accounts/${t.accountId}/storage/kv/namespaces/${nsId}/keys?prefix=user/&limit=10`,
    );
    expect(page.body.result_info).toEqual({ count: 4, cursor: '' });
    expect(page.body.result.find((k: { name: string }) => k.name === 'user/3').metadata).toEqual({
      n: 3,
    });
    expect(page.body.result.find((k: { name: string }) => k.name === 'user/4').expiration).toBe(
      now + 3600,
    );
    // Cursor paging at the API level (limit 10 is the minimum; 12 keys make two pages).
    await cf.kv.namespaces.bulkUpdate(nsId, {
      account_id: t.accountId,
      body: Array.from({ length: 12 }, (_, i) => ({
        key: `page/${String(i).padStart(2, '0')}`,
        value: String(i),
      })),
    });
    const p1 = await t.call(
      'GET',
      `/accounts/${t.accountId}/storage/kv/namespaces/${nsId}/keys?prefix=page/&limit=10`,
    );
    expect(p1.body.result).toHaveLength(10);
    expect(p1.body.result_info.cursor).not.toBe('');
    const p2 = await t.call(
      'GET',
      `/accounts/${t.accountId}/storage/kv/namespaces/${nsId}/keys?prefix=page/&limit=10&cursor=${p1.body.result_info.cursor}`,
    );
    expect(p2.body.result.map((k: { name: string }) => k.name)).toEqual(['page/10', 'page/11']);
    expect(p2.body.result_info.cursor).toBe('');

    const many = await cf.kv.namespaces.bulkGet(nsId, {
      account_id: t.accountId,
      keys: ['user/2', 'user/3', 'nope'],
    });
    expect(many?.values).toEqual({ 'user/2': 'bob', 'user/3': 'carol', nope: null });

    // The TTL passes: the key is gone everywhere.
    clock.advance(61_000);
    expect(
      (await t.call('GET', `/accounts/${t.accountId}/storage/kv/namespaces/${nsId}/values/temp`))
        .status,
    ).toBe(404);

    await cf.kv.namespaces.bulkDelete(nsId, { account_id: t.accountId, body: ['user/2', 'other'] });
    await cf.kv.namespaces.values.delete('user/4', { account_id: t.accountId, namespace_id: nsId });
    const left = [];
    for await (const k of cf.kv.namespaces.keys.list(nsId, {
      account_id: t.accountId,
      prefix: 'user/',
    }))
      left.push(k.name);
    expect(left).toEqual(['user/1', 'user/3']);
    const missing = await t.call(
      'GET',
      `/accounts/${t.accountId}/storage/kv/namespaces/${nsId}/values/user%2F2`,
    );
    expect(missing.status).toBe(404);
    expect(missing.body.errors[0].code).toBe(10009);
  });

  it('refuses bad input and missing or under-scoped tokens', async () => {
    const base = `/accounts/${t.accountId}/storage/kv/namespaces`;
    expect((await t.call('POST', base, {})).status).toBe(400);
    expect((await t.call('POST', base, { title: '' })).status).toBe(400);
    expect((await t.call('POST', base, '{"title":')).status).toBe(400);
    expect((await t.call('GET', `${base}/${'0'.repeat(32)}`)).status).toBe(404);
    expect((await t.call('GET', `${base}/not-an-id`)).status).toBe(400);
    const put = (q: string) =>
      t.call('PUT', `${base}/${nsId}/values/k${q}`, 'v', { 'content-type': 'text/plain' });
    expect((await put('?expiration_ttl=10')).status).toBe(400);
    expect((await put('?expiration_ttl=abc')).status).toBe(400);
    expect((await put('?expiration=1')).status).toBe(400);
    const longKey = 'k'.repeat(513);
    expect(
      (
        await t.call('PUT', `${base}/${nsId}/values/${longKey}`, 'v', {
          'content-type': 'text/plain',
        })
      ).status,
    ).toBe(400);
    expect((await t.call('PUT', `${base}/${nsId}/bulk`, [{ key: 'a' }])).status).toBe(400);
    expect(
      (
        await t.call('PUT', `${base}/${nsId}/bulk`, [
          { key: 'a', value: 'v', metadata: { big: 'x'.repeat(2000) } },
        ])
      ).status,
    ).toBe(400);
    expect(
      (await t.call('PUT', `${base}/${nsId}/bulk`, [{ key: 'a', value: '***', base64: true }]))
        .status,
    ).toBe(400);
    expect((await t.call('GET', `${base}/${nsId}/keys?limit=5`)).status).toBe(400);
    expect((await t.call('GET', `${base}/${nsId}/keys?cursor=%24%24`)).status).toBe(400);
    // Nothing of the refused writes landed.
    expect((await t.call('GET', `${base}/${nsId}/values/a`)).status).toBe(404);

    expect((await t.call('GET', base, undefined, { authorization: '' })).status).toBe(401);
    const reader = await createToken(t, ['Workers KV Storage Read'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    expect(
      (await t.call('GET', base, undefined, { authorization: `Bearer ${reader}` })).status,
    ).toBe(200);
    expect(
      (await t.call('POST', base, { title: 'x' }, { authorization: `Bearer ${reader}` })).status,
    ).toBe(403);
    const scripts = await createToken(t, ['Workers Scripts Read'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    expect(
      (await t.call('GET', base, undefined, { authorization: `Bearer ${scripts}` })).status,
    ).toBe(403);
  });
});

describe('the kv_namespace binding', () => {
  it('a script and the API see the same data', async () => {
    const zone = await createZone(t, 'kv.test');
    const res = await t.call('POST', `/zones/${zone.id}/dns_records`, {
      type: 'AAAA',
      name: 'app',
      content: '100::',
      proxied: true,
      ttl: 1,
    });
    expect(res.status).toBe(200);
    const refused = await putScript(t, 'kvapp', KV_SCRIPT, {
      bindings: [{ type: 'kv_namespace', name: 'STORE', namespace_id: '1'.repeat(32) }],
    });
    expect(refused.status).toBe(400);
    expect(refused.body.errors[0].message).toContain('no key-value namespace');
    await deployScript(t, 'kvapp', KV_SCRIPT, {
      bindings: [{ type: 'kv_namespace', name: 'STORE', namespace_id: nsId }],
    });
    const route = await t.call('POST', `/zones/${zone.id}/workers/routes`, {
      pattern: 'app.kv.test/*',
      script: 'kvapp',
    });
    expect(route.status).toBe(200);
    const edge = edgeUrlOf(t);
    const call = (path: string, body?: string) =>
      edgeGet(edge, 'app.kv.test', path, body === undefined ? {} : { method: 'POST', body });

    // API → script.
    expect((await call('/get?key=user/1')).body).toBe('alice');
    expect(JSON.parse((await call('/meta?key=user/3')).body)).toEqual({
      value: 'carol',
      metadata: { n: 3 },
      cacheStatus: null,
    });
    expect((await call('/get?key=absent')).status).toBe(404);
    // Script → API.
    expect((await call('/put?key=from-script&ttl=120', 'hello from workerd')).body).toBe('stored');
    const viaApi = await t.call(
      'GET',
      `/accounts/${t.accountId}/storage/kv/namespaces/${nsId}/values/from-script`,
    );
    expect(viaApi.text).toBe('hello from workerd');
    expect(
      (
        await t.call(
          'GET',
          `/accounts/${t.accountId}/storage/kv/namespaces/${nsId}/metadata/from-script`,
        )
      ).body.result,
    ).toEqual({ from: 'script' });
    // Types: json, arrayBuffer, stream (both ways).
    await call('/putjson?key=j');
    expect(JSON.parse((await call('/json?key=j')).body)).toEqual({ n: 42, list: [1, 2] });
    await call('/putbytes?key=b');
    expect(JSON.parse((await call('/bytes?key=b')).body)).toEqual([0, 1, 2, 255]);
    await call('/putstream?key=s');
    expect((await call('/stream?key=s')).body).toBe('streamed value');
    // Listing pages by cursor inside the script.
    const listed = JSON.parse((await call('/list?prefix=user/')).body);
    expect(listed.first.keys.map((k: { name: string }) => k.name)).toEqual(['user/1', 'user/3']);
    expect(listed.first.list_complete).toBe(true);
    const pages = JSON.parse((await call('/list?prefix=page/0')).body);
    expect(pages.first.keys).toHaveLength(2);
    expect(pages.first.list_complete).toBe(false);
    expect(pages.second.keys.map((k: { name: string }) => k.name)).toEqual(['page/02', 'page/03']);
    // Delete from the script; the API sees it gone.
    await call('/delete?key=from-script');
    expect(
      (
        await t.call(
          'GET',
          `/accounts/${t.accountId}/storage/kv/namespaces/${nsId}/values/from-script`,
        )
      ).status,
    ).toBe(404);
    // A bad key is an exception in the script: the 1101 page.
    const bad = await call('/badkey');
    expect(bad.status).toBe(500);
    expect(bad.body).toContain('Error 1101');
  });
});
