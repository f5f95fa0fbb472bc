/**
 * `/cdn-cgi/image/<options>/<source>` on the edge: the source comes from the zone's origin (a real
 * HTTP server on a loopback address, port 80), the answer is the transformed image; bad options
 * are 5403 naming the option; sources off the zone, missing sources and non-images are refused;
 * paths without the prefix still reach the origin untouched.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import sharp from 'sharp';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { startOrigin, type Origin } from '../../support/origins.ts';
import { halves, near, pixel, upload } from './helpers.ts';

const ORIGIN = '127.0.16.1';
let t: TestServer;
let edgeUrl: URL;
let origin: Origin;
let picture: Buffer;

function get(host: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: edgeUrl.hostname, port: edgeUrl.port, path, headers: { host, ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

beforeAll(async () => {
  picture = await halves(400, 200);
  origin = await startOrigin(ORIGIN, (req, res) => {
    if (req.url === '/img/pic.png') {
      res.writeHead(200, { 'content-type': 'image/png', 'cache-control': 'public, max-age=600' });
      res.end(picture);
    } else if (req.url === '/notes.txt') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('just text');
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('missing');
    }
  });
  t = await startTestServer();
  edgeUrl = new URL(t.server.listeners.find((l) => l.name.startsWith('edge'))!.address);
  const zone = await createZone(t, 'images-edge.test');
  const rec = await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'www.images-edge.test', content: ORIGIN, proxied: true, ttl: 1 });
  expect(rec.status).toBe(200);
});
afterAll(async () => {
  await t?.stop();
  await origin?.close();
});

describe('/cdn-cgi/image on the edge', () => {
  it('transforms a source path from the origin', async () => {
    const r = await get('www.images-edge.test', '/cdn-cgi/image/width=100,fit=cover,h=100,gravity=left,f=png/img/pic.png');
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('image/png');
    expect(r.headers['cache-control']).toBe('public, max-age=600');
    const m = await sharp(r.body).metadata();
    expect([m.width, m.height]).toEqual([100, 100]);
    expect(near(await pixel(r.body, 50, 50), [255, 0, 0])).toBe(true);
  });
  it('takes an absolute source on the zone and picks the format from Accept', async () => {
    const r = await get('www.images-edge.test', '/cdn-cgi/image/w=50,format=auto/http://www.images-edge.test/img/pic.png', { accept: 'image/webp,*/*' });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('image/webp');
    expect((await sharp(r.body).metadata()).width).toBe(50);
  });
  it('refuses bad options, foreign sources, missing sources and non-images', async () => {
    const bad = await get('www.images-edge.test', '/cdn-cgi/image/w=-5/img/pic.png');
    expect(bad.status).toBe(400);
    expect(bad.body.toString()).toMatch(/ERROR 5403: .*option w:/);
    const fit = await get('www.images-edge.test', '/cdn-cgi/image/fit=banana/img/pic.png');
    expect(fit.body.toString()).toMatch(/option fit:/);
    expect((await get('www.images-edge.test', '/cdn-cgi/image/w=10/http://elsewhere.example/pic.png')).status).toBe(403);
    expect((await get('www.images-edge.test', '/cdn-cgi/image/w=10/img/none.png')).status).toBe(404);
    const text = await get('www.images-edge.test', '/cdn-cgi/image/w=10/notes.txt');
    expect(text.status).toBe(415);
    expect(text.body.toString()).toMatch(/ERROR 5400/);
  });
  it('serves stored images at /cdn-cgi/imagedelivery on the zone host', async () => {
    const up = await upload(t, { file: { data: picture, name: 'stored.png' }, id: 'edge/stored' });
    expect(up.status).toBe(200);
    const hash = new URL(up.body.result.variants[0]).pathname.split('/')[1];
    const r = await get('www.images-edge.test', `/cdn-cgi/imagedelivery/${hash}/edge/stored/w=40`);
    expect(r.status).toBe(200);
    expect(r.headers.etag).toMatch(/^"/);
    expect((await sharp(r.body).metadata()).width).toBe(40);
    expect((await get('www.images-edge.test', `/cdn-cgi/imagedelivery/${hash}/edge/none/w=40`)).status).toBe(404);
  });
  it('leaves other paths to the origin', async () => {
    const r = await get('www.images-edge.test', '/img/pic.png');
    expect(r.status).toBe(200);
    expect(r.body.equals(picture)).toBe(true);
  });
});
