/**
 * The images management API against a live server: uploads (file, url from a loopback origin,
 * custom ids), format and size checks (a 101 MB upload streamed, not buffered), lists (v1 pages
 * and v2 cursor), get/patch/delete/blob, variants, signing keys, stats, direct upload with a
 * one-time, expiring upload URL, and 401/403.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { manualClock } from '../../../src/core/clock.ts';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';
import { solid, upload } from './helpers.ts';

let t: TestServer;
let origin: http.Server;
let originUrl: string;
const clock = manualClock(new Date());
let png: Buffer;

beforeAll(async () => {
  t = await startTestServer({ imagesFetchAllowPrivate: true }, { clock });
  png = await solid(64, 48, [10, 200, 30]);
  origin = http.createServer((req, res) => {
    if (req.url === '/pic.png') {
      res.writeHead(200, { 'content-type': 'image/png' });
      res.end(png);
    } else {
      res.writeHead(404);
      res.end('no');
    }
  });
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
  originUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
});
afterAll(async () => {
  origin?.close();
  await t?.stop();
});

const base = () => `/accounts/${t.accountId}/images`;

describe('upload', () => {
  it('stores a file with metadata and answers the record with variant URLs', async () => {
    const res = await upload(t, { file: { data: png, name: 'green.png', type: 'image/png' }, metadata: '{"k":"v"}', creator: 'user-1' });
    expect(res.status).toBe(200);
    const r = res.body.result;
    expect(r.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(r.filename).toBe('green.png');
    expect(r.meta).toEqual({ k: 'v' });
    expect(r.creator).toBe('user-1');
    expect(r.requireSignedURLs).toBe(false);
    expect(r.variants).toHaveLength(1);
    expect(r.variants[0]).toMatch(new RegExp(`/[A-Za-z0-9_-]{22}/${r.id}/public$`));
    const blob = await fetch(`${t.api}${base()}/v1/${r.id}/blob`, { headers: { authorization: `Bearer ${t.token}` } });
    expect(blob.headers.get('content-type')).toBe('image/png');
    expect(Buffer.from(await blob.arrayBuffer()).equals(png)).toBe(true);
  });

  it('accepts custom ids with slashes and refuses traversal, UUIDs and duplicates', async () => {
    const ok = await upload(t, { file: { data: png, name: 'a.png' }, id: 'products/shoe-1' });
    expect(ok.status).toBe(200);
    expect(ok.body.result.id).toBe('products/shoe-1');
    const got = await t.call('GET', `${base()}/v1/${encodeURIComponent('products/shoe-1')}`);
    expect(got.body.result.id).toBe('products/shoe-1');
    for (const id of ['../etc/passwd', 'a/../../b', 'a/./b', '/lead', 'trail/', '123e4567-e89b-12d3-a456-426614174000', 'a\\b', 'keys']) {
      const bad = await upload(t, { file: { data: png, name: 'a.png' }, id });
      expect(bad.status, id).toBe(400);
      expect(bad.body.errors[0].message).toMatch(/id/);
    }
    const dup = await upload(t, { file: { data: png, name: 'a.png' }, id: 'products/shoe-1' });
    expect(dup.status).toBe(409);
    expect(dup.body.errors[0].code).toBe(5409);
  });

  it('refuses a text file as an image (5400) and bad fields (400)', async () => {
    const res = await upload(t, { file: { data: Buffer.from('hello, not an image\n'), name: 'x.jpg', type: 'image/jpeg' } });
    expect(res.status).toBe(415);
    expect(res.body.errors[0].code).toBe(5400);
    const tiff = await (await import('sharp')).default({ create: { width: 4, height: 4, channels: 3, background: '#000' } }).tiff().toBuffer();
    const t2 = await upload(t, { file: { data: tiff, name: 'x.tiff' } });
    expect(t2.body.errors[0].code).toBe(5400);
    expect(t2.body.errors[0].message).toMatch(/TIFF/);
    const meta = await upload(t, { file: { data: png, name: 'a.png' }, metadata: '{oops' });
    expect(meta.status).toBe(400);
    expect(meta.body.errors[0].message).toMatch(/metadata/);
    const none = await upload(t, { metadata: '{}' });
    expect(none.status).toBe(400);
    const notForm = await t.call('POST', `${base()}/v1`, { file: 'x' });
    expect(notForm.status).toBe(400);
  });

  it('accepts WebP, animated GIF and SVG (sanitised)', async () => {
    const sharpLib = (await import('sharp')).default;
    const webp = await solid(16, 16, [1, 2, 3], 'webp');
    expect((await upload(t, { file: { data: webp, name: 'a.webp' } })).status).toBe(200);
    const frames = await Promise.all([[255, 0, 0], [0, 255, 0], [0, 0, 255]].map((c) => solid(10, 10, c as [number, number, number])));
    const raw = Buffer.concat(await Promise.all(frames.map((f) => sharpLib(f).raw().toBuffer())));
    const gif = await sharpLib(raw, { raw: { width: 10, height: 30, channels: 3, pageHeight: 10 } }).gif({ delay: [100, 100, 100] }).toBuffer();
    expect((await sharpLib(gif).metadata()).pages).toBe(3);
    const g = await upload(t, { file: { data: gif, name: 'anim.gif' }, id: 'anim' });
    expect(g.status).toBe(200);
    const blob = await fetch(`${t.api}${base()}/v1/anim/blob`, { headers: { authorization: `Bearer ${t.token}` } });
    expect((await sharpLib(Buffer.from(await blob.arrayBuffer())).metadata()).pages).toBe(3);
    const svg = '<svg xmlns="http://www.w3.org/2000/svg" width="20" height="10"><script>alert(1)</script><rect width="20" height="10" fill="red" onload="alert(2)"/><a href="javascript:alert(3)"><text>x</text></a></svg>';
    const sv = await upload(t, { file: { data: Buffer.from(svg), name: 'x.svg', type: 'image/svg+xml' }, id: 'vector' });
    expect(sv.status).toBe(200);
    const stored = await (await fetch(`${t.api}${base()}/v1/vector/blob`, { headers: { authorization: `Bearer ${t.token}` } })).text();
    expect(stored).toContain('<rect');
    expect(stored).not.toMatch(/script|onload|javascript:/i);
  });

  it('refuses a 101 MB upload with 5401 without holding it in memory', async () => {
    const boundary = 'outpostboundary';
    const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jpg"\r\nContent-Type: image/jpeg\r\n\r\n`);
    const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
    const chunk = Buffer.alloc(1024 * 1024, 0xab);
    const total = 101;
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(ctrl) {
        if (sent === 0) ctrl.enqueue(head);
        if (sent < total) {
          ctrl.enqueue(chunk);
          sent++;
        } else {
          ctrl.enqueue(tail);
          ctrl.close();
        }
      },
    });
    global.gc?.();
    const before = process.memoryUsage();
    const res = await fetch(`${t.api}${base()}/v1`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.token}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
      body,
      duplex: 'half',
    } as RequestInit);
    const after = process.memoryUsage();
    const json = (await res.json()) as { errors: { code: number }[] };
    expect(res.status).toBe(413);
    expect(json.errors[0].code).toBe(5401);
    expect(sent).toBe(total);
    // 101 MB held at once would show in the array buffers of this process (server and client).
    expect(after.arrayBuffers - before.arrayBuffers).toBeLessThan(60 * 1024 * 1024);
  });

  it('fetches a url (loopback allowed by configuration) and reports a failing source', async () => {
    const res = await upload(t, { url: `${originUrl}/pic.png` });
    expect(res.status).toBe(200);
    expect(res.body.result.filename).toBe('pic.png');
    const missing = await upload(t, { url: `${originUrl}/nope.png` });
    expect(missing.status).toBe(400);
    expect(missing.body.errors[0].code).toBe(5452);
    const both = await upload(t, { url: `${originUrl}/pic.png`, file: { data: png, name: 'a.png' } });
    expect(both.status).toBe(400);
  });
});

describe('records', () => {
  it('lists v1 by page and v2 by cursor, hiding drafts', async () => {
    for (let i = 0; i < 12; i++) await upload(t, { file: { data: png, name: `n${i}.png` }, id: `list/${String(i).padStart(2, '0')}`, creator: 'lister' });
    await t.call('POST', `${base()}/v2/direct_upload`, { requireSignedURLs: false });
    const p1 = await t.call('GET', `${base()}/v1?per_page=10&page=1&creator=lister`);
    expect(p1.status).toBe(200);
    expect(p1.body.result.images).toHaveLength(10);
    expect(p1.body.result.items).toHaveLength(10);
    const p2 = await t.call('GET', `${base()}/v1?per_page=10&page=2&creator=lister`);
    expect(p2.body.result.images.map((i: { id: string }) => i.id)).toEqual(['list/10', 'list/11']);
    expect((await t.call('GET', `${base()}/v1?per_page=5`)).status).toBe(400);
    const all: string[] = [];
    let token: string | null = null;
    for (let guard = 0; guard < 10; guard++) {
      const q: string = token ? `&continuation_token=${token}` : '';
      const r = await t.call('GET', `${base()}/v2?per_page=10${q}`);
      expect(r.status).toBe(200);
      all.push(...r.body.result.images.map((i: { id: string; draft?: boolean }) => i.id));
      token = r.body.result.continuation_token;
      if (!token) break;
    }
    expect(all.filter((id) => id.startsWith('list/'))).toHaveLength(12);
    expect(new Set(all).size).toBe(all.length);
    const stats = await t.call('GET', `${base()}/v1/stats`);
    expect(stats.body.result.count.current).toBe(all.length);
    expect((await t.call('GET', `${base()}/v2?continuation_token=garbage`)).status).toBe(400);
  });

  it('patches metadata, signing and creator; deletes; 404 after', async () => {
    const up = await upload(t, { file: { data: png, name: 'p.png' } });
    const id = up.body.result.id;
    const patched = await t.call('PATCH', `${base()}/v1/${id}`, { metadata: { a: 1 }, requireSignedURLs: true, creator: 'c2' });
    expect(patched.status).toBe(200);
    expect(patched.body.result).toMatchObject({ meta: { a: 1 }, requireSignedURLs: true, creator: 'c2' });
    expect((await t.call('PATCH', `${base()}/v1/${id}`, { requireSignedURLs: 'yes' })).status).toBe(400);
    expect((await t.call('PATCH', `${base()}/v1/${id}`, '{bad')).status).toBe(400);
    const del = await t.call('DELETE', `${base()}/v1/${id}`);
    expect(del.status).toBe(200);
    const gone = await t.call('GET', `${base()}/v1/${id}`);
    expect(gone.status).toBe(404);
    expect(gone.body.errors[0].code).toBe(5404);
    expect((await t.call('GET', `${base()}/v1/${id}/blob`)).status).toBe(404);
    expect((await t.call('DELETE', `${base()}/v1/${id}`)).status).toBe(404);
  });

  it('manages variants and signing keys', async () => {
    const list = await t.call('GET', `${base()}/v1/variants`);
    expect(list.body.result.variants.public.options).toMatchObject({ fit: 'scale-down' });
    const created = await t.call('POST', `${base()}/v1/variants`, { id: 'thumb', options: { fit: 'cover', width: 50, height: 50, metadata: 'none' }, neverRequireSignedURLs: true });
    expect(created.status).toBe(200);
    expect(created.body.result.variant).toMatchObject({ id: 'thumb', neverRequireSignedURLs: true });
    expect((await t.call('POST', `${base()}/v1/variants`, { id: 'thumb', options: { fit: 'cover', width: 50, height: 50, metadata: 'none' } })).status).toBe(400);
    expect((await t.call('POST', `${base()}/v1/variants`, { id: 'bad', options: { fit: 'banana', width: 50, height: 50, metadata: 'none' } })).status).toBe(400);
    const edited = await t.call('PATCH', `${base()}/v1/variants/thumb`, { options: { fit: 'pad', width: 60, height: 40, metadata: 'keep' } });
    expect(edited.body.result.variant.options).toEqual({ fit: 'pad', width: 60, height: 40, metadata: 'keep' });
    expect((await t.call('GET', `${base()}/v1/variants/thumb`)).body.result.variant.options.width).toBe(60);
    expect((await t.call('GET', `${base()}/v1/variants/nope`)).status).toBe(404);
    const keys = await t.call('GET', `${base()}/v1/keys`);
    expect(keys.body.result.keys).toHaveLength(1);
    expect(keys.body.result.keys[0].name).toBe('default');
    const put = await t.call('PUT', `${base()}/v1/keys/second`);
    expect(put.body.result.keys.map((k: { name: string }) => k.name)).toEqual(['default', 'second']);
    expect((await t.call('PUT', `${base()}/v1/keys/third`)).status).toBe(400);
    const rotated = await t.call('PUT', `${base()}/v1/keys/second`);
    expect(rotated.body.result.keys[1].value).not.toBe(put.body.result.keys[1].value);
    expect((await t.call('DELETE', `${base()}/v1/keys/second`)).body.result.keys).toHaveLength(1);
    expect((await t.call('DELETE', `${base()}/v1/keys/second`)).status).toBe(404);
    expect((await t.call('DELETE', `${base()}/v1/variants/thumb`)).status).toBe(200);
  });
});

describe('direct upload', () => {
  it('issues a one-time URL (JSON and multipart forms) that finishes a draft once', async () => {
    const json = await t.call('POST', `${base()}/v2/direct_upload`, { requireSignedURLs: true, metadata: { from: 'json' } });
    expect(json.status).toBe(200);
    const { id, uploadURL } = json.body.result;
    expect(uploadURL).toMatch(new RegExp(`^${t.url}/[A-Za-z0-9_-]{22}/${id}$`));
    const draft = await t.call('GET', `${base()}/v1/${id}`);
    expect(draft.body.result.draft).toBe(true);
    const form = new FormData();
    form.append('file', new Blob([new Uint8Array(png)], { type: 'image/png' }), 'direct.png');
    const up = await fetch(uploadURL, { method: 'POST', body: form });
    expect(up.status).toBe(200);
    const rec = ((await up.json()) as { result: { id: string; requireSignedURLs: boolean; meta: unknown; filename: string } }).result;
    expect(rec).toMatchObject({ id, requireSignedURLs: true, meta: { from: 'json' }, filename: 'direct.png' });
    const again = new FormData();
    again.append('file', new Blob([new Uint8Array(png)], { type: 'image/png' }), 'again.png');
    const reuse = await fetch(uploadURL, { method: 'POST', body: again });
    expect(reuse.status).toBe(410);

    const mp = new FormData();
    mp.append('requireSignedURLs', 'false');
    mp.append('id', 'direct/custom');
    const multi = await fetch(`${t.api}${base()}/v2/direct_upload`, { method: 'POST', headers: { authorization: `Bearer ${t.token}` }, body: mp });
    expect(multi.status).toBe(200);
    expect(((await multi.json()) as { result: { id: string } }).result.id).toBe('direct/custom');
  });

  it('refuses an expired upload URL and a bad expiry', async () => {
    const res = await t.call('POST', `${base()}/v2/direct_upload`, {});
    clock.advance(31 * 60_000);
    const form = new FormData();
    form.append('file', new Blob([new Uint8Array(png)], { type: 'image/png' }), 'late.png');
    const late = await fetch(res.body.result.uploadURL, { method: 'POST', body: form });
    expect(late.status).toBe(410);
    expect(((await late.json()) as { errors: { message: string }[] }).errors[0].message).toMatch(/expired/);
    const soon = new Date(clock.now().getTime() + 60_000).toISOString();
    expect((await t.call('POST', `${base()}/v2/direct_upload`, { expiry: soon })).status).toBe(400);
    expect((await t.call('POST', `${base()}/v2/direct_upload`, { bogus: 1 })).status).toBe(400);
    const deep = await t.call('POST', `${base()}/v2/direct_upload`, `{"metadata": {"a": ${'['.repeat(5000)}${']'.repeat(5000)}}}`);
    expect(deep.status).toBe(400);
    expect(deep.body.errors[0].message).toMatch(/^JSON in .* is nested deeper than 128 levels/);
  });
});

describe('auth', () => {
  it('needs a token, and Images Write to change things', async () => {
    const anon = await t.call('GET', `${base()}/v1`, undefined, { authorization: '' });
    expect(anon.status).toBe(401);
    const readOnly = await createToken(t, ['Images Read'], { [`com.cloudflare.api.account.${t.accountId}`]: '*' });
    expect((await t.call('GET', `${base()}/v1/stats`, undefined, { authorization: `Bearer ${readOnly}` })).status).toBe(200);
    const w = await upload(t, { file: { data: png, name: 'x.png' } }, readOnly);
    expect(w.status).toBe(403);
    expect((await t.call('POST', `${base()}/v2/direct_upload`, {}, { authorization: `Bearer ${readOnly}` })).status).toBe(403);
  });
});
