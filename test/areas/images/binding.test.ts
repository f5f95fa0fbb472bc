/**
 * The `images` script binding in real workerd: a hosted script receives a picture and an overlay,
 * transforms, draws with top/left/opacity and outputs; pixels are checked with sharp. Also
 * `info()`, the result's `contentType()`/`image()`, and errors (bad option 5403, not an image
 * 9412) thrown in the script with their code.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import sharp from 'sharp';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { uploadScript } from '../workflows/helpers.ts';
import { near, pixel, solid } from './helpers.ts';

let t: TestServer;

const SCRIPT = `
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const form = await request.formData();
    const base = form.get('base');
    const over = form.get('overlay');
    try {
      if (url.pathname === '/info') return Response.json(await env.IMAGES.info(base.stream()));
      if (url.pathname === '/draw') {
        const opts = JSON.parse(form.get('draw') || '{}');
        const result = await env.IMAGES.input(base.stream())
          .transform({ width: 100 })
          .draw(env.IMAGES.input(await over.arrayBuffer()).transform({ width: 20, height: 20, fit: 'cover' }), opts)
          .output({ format: 'image/png' });
        return result.response();
      }
      if (url.pathname === '/transform') {
        const t = JSON.parse(form.get('transform'));
        const out = JSON.parse(form.get('output'));
        const result = await env.IMAGES.input(base.stream()).transform(t).output(out);
        return new Response(result.image(), { headers: { 'content-type': result.contentType(), 'x-type': result.contentType() } });
      }
    } catch (err) {
      return Response.json({ error: String(err.message), code: err.code }, { status: 418 });
    }
    return new Response('no route', { status: 404 });
  },
};
`;

beforeAll(async () => {
  t = await startTestServer();
  const up = await uploadScript(t, 'imgbind', SCRIPT, { bindings: [{ type: 'images', name: 'IMAGES' }] });
  expect(up.status, JSON.stringify(up.body)).toBe(200);
}, 60_000);
afterAll(async () => {
  await t?.stop();
});

async function call(path: string, parts: Record<string, Buffer | string>) {
  const form = new FormData();
  for (const [k, v] of Object.entries(parts)) {
    if (typeof v === 'string') form.append(k, v);
    else form.append(k, new Blob([new Uint8Array(v)]), `${k}.bin`);
  }
  const res = await fetch(`${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/imgbind/invoke${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${t.token}` },
    body: form,
  });
  return { status: res.status, headers: res.headers, body: Buffer.from(await res.arrayBuffer()) };
}

describe('env.IMAGES', () => {
  it('draws an overlay at top/left with its opacity', async () => {
    const base = await solid(200, 100, [0, 0, 255]);
    const over = await solid(40, 40, [255, 0, 0]);
    const full = await call('/draw', { base, overlay: over, draw: JSON.stringify({ top: 10, left: 30 }) });
    expect(full.status, full.body.toString()).toBe(200);
    expect(full.headers.get('content-type')).toBe('image/png');
    const m = await sharp(full.body).metadata();
    expect([m.width, m.height]).toEqual([100, 50]);
    expect(near(await pixel(full.body, 40, 20), [255, 0, 0])).toBe(true);
    expect(near(await pixel(full.body, 5, 5), [0, 0, 255])).toBe(true);
    expect(near(await pixel(full.body, 55, 35), [0, 0, 255])).toBe(true);
    const half = await call('/draw', { base, overlay: over, draw: JSON.stringify({ top: 10, left: 30, opacity: 0.5 }) });
    const [r, , b] = await pixel(half.body, 40, 20);
    expect(r).toBeGreaterThan(100);
    expect(r).toBeLessThan(160);
    expect(b).toBeGreaterThan(100);
    expect(b).toBeLessThan(160);
  }, 30_000);

  it('transforms with the option names and outputs the asked format', async () => {
    const base = await solid(120, 80, [100, 100, 100]);
    const r = await call('/transform', { base, transform: JSON.stringify({ width: 60, rotate: 90, brightness: 2, blur: 2 }), output: JSON.stringify({ format: 'image/webp', quality: 50 }) });
    expect(r.status, r.body.toString()).toBe(200);
    expect(r.headers.get('x-type')).toBe('image/webp');
    const m = await sharp(r.body).metadata();
    expect(m.format).toBe('webp');
    expect([m.width, m.height]).toEqual([60, 90]);
    expect((await sharp(r.body).stats()).channels[0].mean).toBeGreaterThan(180);
  }, 30_000);

  it('info() reports format, size and dimensions', async () => {
    const base = await solid(33, 21, [1, 2, 3], 'jpeg');
    const r = await call('/info', { base });
    expect(JSON.parse(r.body.toString())).toEqual({ format: 'image/jpeg', fileSize: base.length, width: 33, height: 21 });
  }, 30_000);

  it('throws coded errors into the script', async () => {
    const base = await solid(20, 20, [1, 2, 3]);
    const bad = await call('/transform', { base, transform: JSON.stringify({ fit: 'banana' }), output: JSON.stringify({ format: 'image/png' }) });
    expect(bad.status).toBe(418);
    const body = JSON.parse(bad.body.toString());
    expect(body.code).toBe(5403);
    expect(body.error).toMatch(/fit/);
    const text = await call('/info', { base: Buffer.from('not an image') });
    expect(JSON.parse(text.body.toString()).code).toBe(9412);
    const fmt = await call('/transform', { base, transform: '{}', output: JSON.stringify({ format: 'image/bmp' }) });
    expect(JSON.parse(fmt.body.toString()).code).toBe(9520);
  }, 30_000);
});
