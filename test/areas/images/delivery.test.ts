/**
 * Delivery at pixel level: every transform option and short name decoded back with sharp
 * (dimensions, format, pixel colours, variance, mean), metadata kept or stripped, named and
 * flexible variants, signed URLs, the disk cache (ETag, 304, Cache-Control, nothing served after a
 * delete), the Host-independent path and the zone path form, and 5403 naming the bad option.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import { readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { signPath } from '../../../src/areas/images/index.ts';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { halves, near, noise, pixel, solid, upload } from './helpers.ts';

let t: TestServer;
let hash: string;
const ids: Record<string, string> = {};

beforeAll(async () => {
  t = await startTestServer();
  const exifJpeg = await sharp({ create: { width: 40, height: 40, channels: 3, background: '#808080' } })
    .withExif({ IFD0: { Copyright: 'ACME Corp', Artist: 'Someone', ImageDescription: 'secret notes' } })
    .jpeg()
    .toBuffer();
  const inputs: Record<string, Buffer> = {
    halves: await halves(200, 100),
    noise: await noise(120, 120),
    gray: await solid(40, 40, [100, 100, 100]),
    exif: exifJpeg,
  };
  for (const [name, data] of Object.entries(inputs)) {
    const res = await upload(t, { file: { data, name: `${name}.img` }, id: `d/${name}` });
    expect(res.status).toBe(200);
    ids[name] = res.body.result.id;
    hash ??= new URL(res.body.result.variants[0]).pathname.split('/')[1];
  }
});
afterAll(async () => {
  await t?.stop();
});

async function get(name: string, variant: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${t.url}/${hash}/${ids[name] ?? name}/${variant}`, { headers });
  const body = Buffer.from(await res.arrayBuffer());
  return { status: res.status, headers: res.headers, body };
}
async function meta(name: string, variant: string, headers: Record<string, string> = {}) {
  const r = await get(name, variant, headers);
  expect(r.status, `${variant}: ${r.body.toString().slice(0, 200)}`).toBe(200);
  return { ...r, meta: await sharp(r.body).metadata(), stats: await sharp(r.body).stats() };
}

describe('resize and fit', () => {
  it('width/w, height/h and dpr', async () => {
    for (const v of ['w=50', 'width=50']) expect((await meta('halves', v)).meta).toMatchObject({ width: 50, height: 25 });
    for (const v of ['h=20', 'height=20']) expect((await meta('halves', v)).meta).toMatchObject({ width: 40, height: 20 });
    expect((await meta('halves', 'w=50,dpr=2')).meta).toMatchObject({ width: 100, height: 50 });
  });
  it('scale-down never enlarges, contain does, crop and cover fill the box', async () => {
    expect((await meta('halves', 'w=400,fit=scale-down')).meta).toMatchObject({ width: 200, height: 100 });
    expect((await meta('halves', 'w=400,fit=contain')).meta).toMatchObject({ width: 400, height: 200 });
    expect((await meta('halves', 'w=50,h=50,fit=cover')).meta).toMatchObject({ width: 50, height: 50 });
    expect((await meta('halves', 'w=50,h=50,fit=crop')).meta).toMatchObject({ width: 50, height: 50 });
    const crop = (await meta('halves', 'w=400,h=400,fit=crop')).meta;
    expect(crop.width).toBe(100);
    expect(crop.height).toBe(100);
  });
  it('pad fills with the background colour', async () => {
    const r = await meta('halves', 'w=100,h=100,fit=pad,background=%2300ff00,f=png');
    expect(r.meta).toMatchObject({ width: 100, height: 100 });
    expect(near(await pixel(r.body, 50, 5), [0, 255, 0])).toBe(true);
    expect(near(await pixel(r.body, 10, 50), [255, 0, 0])).toBe(true);
    const rgb = await meta('halves', 'w=100,h=100,fit=pad,background=rgb(0,0,0),f=png');
    expect(near(await pixel(rgb.body, 50, 5), [0, 0, 0])).toBe(true);
  });
  it('gravity (and g) picks the kept side; coordinates and auto work', async () => {
    for (const v of ['gravity=left', 'g=left', 'gravity=0.1x0.5']) {
      const r = await meta('halves', `w=50,h=50,fit=cover,${v},f=png`);
      expect(near(await pixel(r.body, 25, 25), [255, 0, 0]), v).toBe(true);
    }
    const right = await meta('halves', 'w=50,h=50,fit=cover,gravity=right,f=png');
    expect(near(await pixel(right.body, 25, 25), [0, 0, 255])).toBe(true);
    for (const v of ['gravity=auto', 'gravity=face', 'gravity=top', 'gravity=bottom']) expect((await meta('halves', `w=50,h=50,fit=cover,${v}`)).meta.width).toBe(50);
  });
});

describe('format and quality', () => {
  it('format/f: webp, avif, jpeg, png, and auto from Accept', async () => {
    for (const [v, fmt] of [['f=webp', 'webp'], ['format=webp', 'webp'], ['f=avif', 'heif'], ['f=jpeg', 'jpeg'], ['f=png', 'png']] as const) {
      const r = await meta('gray', `w=20,${v}`);
      expect(r.meta.format, v).toBe(fmt);
    }
    const avif = await get('gray', 'w=20,f=avif');
    expect(avif.headers.get('content-type')).toBe('image/avif');
    expect((await meta('gray', 'f=auto', { accept: 'image/avif,image/webp,*/*' })).headers.get('content-type')).toBe('image/avif');
    expect((await meta('gray', 'f=auto', { accept: 'image/webp,*/*' })).meta.format).toBe('webp');
    expect((await meta('gray', 'f=auto', { accept: '*/*' })).meta.format).toBe('png');
  });
  it('quality/q changes the encoded size', async () => {
    const low = await get('noise', 'f=jpeg,q=10');
    const high = await get('noise', 'f=jpeg,quality=95');
    expect(low.body.length).toBeLessThan(high.body.length / 2);
  });
});

describe('animation', () => {
  it('keeps the frames of an animated GIF in GIF and WebP output, the first frame elsewhere', async () => {
    const frames = await Promise.all([[255, 0, 0], [0, 255, 0], [0, 0, 255]].map((c) => solid(20, 20, c as [number, number, number])));
    const raw = Buffer.concat(await Promise.all(frames.map((f) => sharp(f).raw().toBuffer())));
    const gif = await sharp(raw, { raw: { width: 20, height: 60, channels: 3, pageHeight: 20 } }).gif({ delay: [100, 100, 100] }).toBuffer();
    expect((await upload(t, { file: { data: gif, name: 'anim.gif' }, id: 'd/anim' })).status).toBe(200);
    ids.anim = 'd/anim';
    const g = await meta('anim', 'w=10');
    expect(g.meta).toMatchObject({ format: 'gif', width: 10, height: 10, pages: 3 });
    const w = await meta('anim', 'w=10,f=webp');
    expect(w.meta).toMatchObject({ format: 'webp', width: 10, pages: 3 });
    const p = await meta('anim', 'w=10,f=png');
    expect(p.meta).toMatchObject({ format: 'png', width: 10, height: 10 });
    expect(p.meta.pages ?? 1).toBe(1);
  });
});

describe('filters', () => {
  it('blur lowers variance, sharpen raises sharpness', async () => {
    const plain = await meta('noise', 'f=png,w=120');
    const blurred = await meta('noise', 'f=png,w=120,blur=20');
    expect(blurred.stats.channels[0].stdev).toBeLessThan(plain.stats.channels[0].stdev / 3);
    const soft = await meta('halves', 'f=png,w=60');
    const sharp5 = await meta('halves', 'f=png,w=60,sharpen=10');
    expect(sharp5.stats.sharpness).toBeGreaterThan(soft.stats.sharpness);
  });
  it('rotate turns the picture', async () => {
    const r = await meta('halves', 'rotate=90,f=png');
    expect(r.meta).toMatchObject({ width: 100, height: 200 });
    expect(near(await pixel(r.body, 50, 10), [255, 0, 0])).toBe(true);
    expect(near(await pixel(r.body, 50, 190), [0, 0, 255])).toBe(true);
    const r180 = await meta('halves', 'rotate=180,f=png');
    expect(near(await pixel(r180.body, 10, 50), [0, 0, 255])).toBe(true);
  });
  it('brightness, contrast and gamma move the mean as documented', async () => {
    const mean = async (v: string) => (await meta('gray', `f=png,${v}`)).stats.channels[0].mean;
    const base = await mean('w=40');
    expect(base).toBeCloseTo(100, -1);
    expect(await mean('brightness=2')).toBeGreaterThan(190);
    expect(await mean('brightness=0.5')).toBeLessThan(60);
    expect(await mean('contrast=2')).toBeLessThan(base - 20);
    expect(await mean('contrast=0')).toBeCloseTo(128, -1);
    expect(await mean('gamma=2')).toBeGreaterThan(base + 30);
    expect(await mean('gamma=0.5')).toBeLessThan(base - 30);
  });
  it('metadata keep, copyright and none', async () => {
    const keep = await meta('exif', 'metadata=keep,f=jpeg');
    expect(keep.meta.exif?.toString('latin1')).toContain('secret notes');
    const copyright = await meta('exif', 'metadata=copyright,f=jpeg');
    const text = copyright.meta.exif?.toString('latin1') ?? '';
    expect(text).toContain('ACME Corp');
    expect(text).not.toContain('secret notes');
    const none = await meta('exif', 'metadata=none,f=jpeg');
    expect(none.meta.exif).toBeUndefined();
  });
});

describe('bad options', () => {
  it('answer 5403 naming the option', async () => {
    for (const [v, name] of [['w=-5', 'w'], ['fit=banana', 'fit'], ['q=0', 'q'], ['dpr=5', 'dpr'], ['blur=0', 'blur'], ['rotate=45', 'rotate'], ['background=nocolour', 'background'], ['gamma=3', 'gamma'], ['metadata=all', 'metadata'], ['foo=1', 'foo'], ['f=bmp', 'f'], ['gravity=middle', 'gravity'], ['sharpen=11', 'sharpen']]) {
      const r = await get('gray', v);
      expect(r.status, v).toBe(400);
      const text = r.body.toString();
      expect(text).toMatch(/^ERROR 5403: /);
      expect(text, v).toContain(`option ${name}:`);
    }
  });
  it('unknown images, hashes and variants are 404', async () => {
    expect((await get('nope', 'public')).status).toBe(404);
    expect((await get('gray', 'novariant')).status).toBe(404);
    const other = await fetch(`${t.url}/AAAAAAAAAAAAAAAAAAAAAA/${ids.gray}/public`);
    expect(other.status).toBe(404);
  });
});

describe('variants, cache and hosts', () => {
  it('named variants apply their options', async () => {
    expect((await meta('halves', 'public')).meta).toMatchObject({ width: 200, height: 100 });
    await t.call('POST', `/accounts/${t.accountId}/images/v1/variants`, { id: 'sq', options: { fit: 'cover', width: 30, height: 30, metadata: 'none' } });
    expect((await meta('halves', 'sq')).meta).toMatchObject({ width: 30, height: 30 });
  });
  it('caches with an ETag, answers 304, and never serves a deleted image', async () => {
    const png = await solid(30, 30, [5, 5, 250]);
    const up = await upload(t, { file: { data: png, name: 'c.png' }, id: 'cache/me' });
    expect(up.status).toBe(200);
    const first = await get('cache/me', 'w=10');
    expect(first.status).toBe(200);
    const etag = first.headers.get('etag')!;
    expect(etag).toMatch(/^"[0-9a-f]+"$/);
    expect(first.headers.get('cache-control')).toMatch(/public, max-age=\d+/);
    const second = await get('cache/me', 'w=10');
    expect(second.headers.get('etag')).toBe(etag);
    expect(second.body.equals(first.body)).toBe(true);
    const cacheRoot = join(t.config.dataDir, 'cache', 'images', 'cache', t.accountId);
    expect(readdirSync(cacheRoot).length).toBeGreaterThan(0);
    const revalidated = await get('cache/me', 'w=10', { 'if-none-match': etag });
    expect(revalidated.status).toBe(304);
    await t.call('DELETE', `/accounts/${t.accountId}/images/v1/${encodeURIComponent('cache/me')}`);
    expect((await get('cache/me', 'w=10')).status).toBe(404);
    expect((await get('cache/me', 'w=10', { 'if-none-match': etag })).status).toBe(404);
    // Re-uploaded under the same id: new bytes, never the old cached result.
    const red = await solid(30, 30, [250, 5, 5]);
    await upload(t, { file: { data: red, name: 'c.png' }, id: 'cache/me' });
    const fresh = await get('cache/me', 'w=10');
    expect(fresh.headers.get('etag')).not.toBe(etag);
    expect(near(await pixel(fresh.body, 5, 5), [250, 5, 5])).toBe(true);
    expect(existsSync(cacheRoot)).toBe(true);
  });
  it('serves the variant URLs by their Host and the zone path form', async () => {
    const rec = (await t.call('GET', `/accounts/${t.accountId}/images/v1/${encodeURIComponent(ids.gray)}`)).body.result;
    const u = new URL(rec.variants[0]);
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: t.server.apiPort, path: u.pathname, headers: { host: 'imagedelivery.example' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(200);
    const zone = await fetch(`${t.url}/cdn-cgi/imagedelivery/${hash}/${ids.gray}/w=10`);
    expect(zone.status).toBe(200);
    expect((await sharp(Buffer.from(await zone.arrayBuffer())).metadata()).width).toBe(10);
  });
});

describe('signed URLs', () => {
  it('require a valid exp and sig unless the variant never requires signing', async () => {
    const png = await solid(30, 30, [0, 0, 0]);
    const up = await upload(t, { file: { data: png, name: 's.png' }, id: 'signed/one', requireSignedURLs: 'true' });
    expect(up.body.result.requireSignedURLs).toBe(true);
    const key = (await t.call('GET', `/accounts/${t.accountId}/images/v1/keys`)).body.result.keys[0].value as string;
    const path = `/${hash}/signed/one/public`;
    expect((await fetch(`${t.url}${path}`)).status).toBe(403);
    expect((await fetch(`${t.url}/${hash}/signed/one/w=10`)).status).toBe(403);
    const exp = Math.floor(Date.now() / 1000) + 300;
    const good = await fetch(`${t.url}${signPath(key, path, exp)}`);
    expect(good.status).toBe(200);
    expect(good.headers.get('cache-control')).toMatch(/^private/);
    const expired = await fetch(`${t.url}${signPath(key, path, Math.floor(Date.now() / 1000) - 10)}`);
    expect(expired.status).toBe(403);
    expect(await expired.text()).toMatch(/expired/);
    const tampered = signPath(key, path, exp).replace(/exp=\d+/, `exp=${exp + 1000}`);
    expect((await fetch(`${t.url}${tampered}`)).status).toBe(403);
    const wrongKey = await fetch(`${t.url}${signPath('not-the-key', path, exp)}`);
    expect(wrongKey.status).toBe(403);
    await t.call('POST', `/accounts/${t.accountId}/images/v1/variants`, { id: 'open', options: { fit: 'scale-down', width: 10, height: 10, metadata: 'none' }, neverRequireSignedURLs: true });
    expect((await fetch(`${t.url}/${hash}/signed/one/open`)).status).toBe(200);
  });
});
