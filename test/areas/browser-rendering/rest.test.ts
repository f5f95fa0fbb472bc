/**
 * The REST actions against real pages on a loopback origin, rendered by Debian Chromium through
 * the pool: each action's output, the options that change it, bad input, limits and a browser
 * killed in the middle of a request. One server and one pool for the file.
 */
import { execFileSync } from 'node:child_process';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PNG } from 'pngjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sdk } from '../../support/sdk.ts';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';
import { oneBackendOnly, requireChromium, startOrigin, type Origin } from './fixture.ts';

const skip = oneBackendOnly();

describe.skipIf(skip)('browser rendering REST', () => {
  let t: TestServer;
  let origin: Origin;
  let path: (action: string) => string;
  let model: http.Server;
  const asked: { model: string; messages: { role: string; content: string }[]; response_format?: unknown; auth?: string }[] = [];

  beforeAll(async () => {
    requireChromium();
    origin = await startOrigin();
    // An OpenAI-compatible chat-completions endpoint standing in for a model.
    model = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const q = JSON.parse(body);
        asked.push({ ...q, auth: req.headers.authorization });
        const page: string = q.messages[1].content;
        const answer = { product: page.includes('# Widgets') ? 'Widgets' : 'unknown', sawScript: page.includes('rendered by script 42') };
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ choices: [{ message: { role: 'assistant', content: JSON.stringify(answer) } }] }));
      });
    });
    await new Promise<void>((r) => model.listen(0, '127.0.0.1', () => r()));
    t = await startTestServer({
      browserAiUrl: `http://127.0.0.1:${(model.address() as AddressInfo).port}/v1`,
      browserAiModel: 'test-model',
      browserAiKey: 'model-key',
      browserPoolSize: 1,
      browserAllow: ['127.0.0.0/8'],
      browserConcurrency: 3,
      browserRate: { requests: 1000, windowSeconds: 1 },
    });
    path = (action) => `/accounts/${t.accountId}/browser-rendering/${action}`;
  }, 60_000);

  afterAll(async () => {
    await t?.stop();
    await origin?.close();
    model?.close();
  });

  const post = async (action: string, body: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${t.api}${path(action)}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.token}`, 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) };
  };
  const json = (r: { bytes: Buffer }) => JSON.parse(r.bytes.toString('utf8'));

  it('content: the HTML after the page script ran, with meta and X-Browser-Ms-Used', async () => {
    const r = await post('content', { url: `${origin.url}/` });
    expect(r.status).toBe(200);
    const body = json(r);
    expect(body.success).toBe(true);
    expect(body.result).toContain('rendered by script 42');
    expect(body.meta).toMatchObject({ status: 200, title: 'Fixture page', finalUrl: `${origin.url}/` });
    expect(body).not.toHaveProperty('messages');
    expect(Number(r.headers.get('x-browser-ms-used'))).toBeGreaterThan(0);
  });

  it('content from html, with addScriptTag and waitForSelector', async () => {
    const r = await post('content', {
      html: '<div id="a">static</div>',
      addScriptTag: [{ content: "setTimeout(() => { const p = document.createElement('p'); p.id = 'late'; p.textContent = 'added later'; document.body.append(p); }, 200);" }],
      waitForSelector: { selector: '#late', timeout: 5000 },
    });
    expect(r.status).toBe(200);
    expect(json(r).result).toContain('added later');
  });

  it('screenshot: PNG of the viewport size with the red box at the top left', async () => {
    const r = await post('screenshot', { url: `${origin.url}/`, viewport: { width: 320, height: 200 } });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('image/png');
    const png = PNG.sync.read(r.bytes);
    expect([png.width, png.height]).toEqual([320, 200]);
    const px = (x: number, y: number) => [...png.data.subarray((y * png.width + x) * 4, (y * png.width + x) * 4 + 3)];
    expect(px(10, 10)).toEqual([255, 0, 0]);
    expect(px(300, 190)).toEqual([255, 255, 255]);

    const clip = await post('screenshot', { url: `${origin.url}/`, screenshotOptions: { clip: { x: 0, y: 0, width: 40, height: 30 } } });
    const small = PNG.sync.read(clip.bytes);
    expect([small.width, small.height]).toEqual([40, 30]);

    const jpeg = await post('screenshot', { url: `${origin.url}/`, viewport: { width: 200, height: 100 }, screenshotOptions: { type: 'jpeg', quality: 50 } });
    expect(jpeg.headers.get('content-type')).toBe('image/jpeg');
    expect(jpeg.bytes.subarray(0, 3)).toEqual(Buffer.from([0xff, 0xd8, 0xff]));

    const b64 = await post('screenshot', { url: `${origin.url}/`, viewport: { width: 100, height: 80 }, screenshotOptions: { encoding: 'base64' } });
    expect(b64.headers.get('content-type')).toContain('text/plain');
    expect(PNG.sync.read(Buffer.from(b64.bytes.toString(), 'base64')).width).toBe(100);
  });

  it('pdf: a PDF whose text pdftotext reads; format and landscape change the page size', async () => {
    const r = await post('pdf', { url: `${origin.url}/`, pdfOptions: { format: 'A4', printBackground: true } });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('application/pdf');
    expect(r.bytes.subarray(0, 5).toString()).toBe('%PDF-');
    const dir = mkdtempSync(join(tmpdir(), 'outpost-pdf-'));
    try {
      writeFileSync(join(dir, 'a.pdf'), r.bytes);
      expect(execFileSync('pdftotext', [join(dir, 'a.pdf'), '-'], { encoding: 'utf8' })).toContain('rendered by script 42');
      const info = execFileSync('pdfinfo', [join(dir, 'a.pdf')], { encoding: 'utf8' });
      expect(info).toMatch(/Page size:\s+595\.\d* x 841\.\d* pts \(A4\)/);
      const land = await post('pdf', { url: `${origin.url}/`, pdfOptions: { format: 'Letter', landscape: true } });
      writeFileSync(join(dir, 'b.pdf'), land.bytes);
      expect(execFileSync('pdfinfo', [join(dir, 'b.pdf')], { encoding: 'utf8' })).toMatch(/Page size:\s+792 x 612 pts/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('links: all, visible only, internal only', async () => {
    const all = json(await post('links', { url: `${origin.url}/` })).result;
    expect(all).toEqual([`${origin.url}/about`, 'https://example.org/elsewhere', `${origin.url}/hidden`]);
    const visible = json(await post('links', { url: `${origin.url}/`, visibleLinksOnly: true })).result;
    expect(visible).not.toContain(`${origin.url}/hidden`);
    const internal = json(await post('links', { url: `${origin.url}/`, excludeExternalLinks: true })).result;
    expect(internal).toEqual([`${origin.url}/about`, `${origin.url}/hidden`]);
  });

  it('scrape: elements with text, html, attributes and positions (both body forms)', async () => {
    const r = json(await post('scrape', { url: `${origin.url}/`, elements: [{ selector: '#box' }, { selector: '.item' }] }));
    expect(r.result[0].selector).toBe('#box');
    expect(r.result[0].results[0]).toMatchObject({ top: 0, left: 0, width: 50, height: 50, attributes: [{ name: 'id', value: 'box' }] });
    expect(r.result[1].results.map((x: { text: string }) => x.text)).toEqual(['one', 'two']);
    expect(r.result[1].results[1].attributes).toContainEqual({ name: 'data-n', value: '2' });
    const spec = json(await post('scrape', { url: `${origin.url}/`, selectors: ['#out'] }));
    expect(spec.result[0].results[0].text).toBe('rendered by script 42');
  });

  it('markdown: headings, text and links as Markdown', async () => {
    const md: string = json(await post('markdown', { url: `${origin.url}/` })).result;
    expect(md).toContain('# Widgets');
    expect(md).toContain('rendered by script 42');
    expect(md).toContain('[About us](/about)');
    expect(md).not.toContain('document.getElementById');
  });

  it('snapshot: content and a base64 screenshot', async () => {
    const r = json(await post('snapshot', { url: `${origin.url}/`, viewport: { width: 120, height: 90 } }));
    expect(r.result.content).toContain('rendered by script 42');
    expect(PNG.sync.read(Buffer.from(r.result.screenshot, 'base64')).height).toBe(90);
  });

  it('json: fields from JSON-LD, meta tags and tables by response_format or the spec schema', async () => {
    const r = json(
      await post('json', {
        url: `${origin.url}/`,
        response_format: {
          type: 'json_schema',
          json_schema: { name: 'p', schema: { type: 'object', properties: { name: { type: 'string' }, price: { type: 'number' }, sku: { type: 'string' }, colour: { type: 'string' }, description: { type: 'string' }, missing: { type: 'string' } } } },
        },
      }),
    );
    expect(r.result).toEqual({ name: 'Blue Widget', price: 19.99, sku: 'BW-1', colour: 'Blue', description: 'A page served by the test origin', missing: null });
    const spec = json(await post('json', { url: `${origin.url}/`, schema: { site_name: 'string', weight: 'string', title: 'string', availability: 'boolean' } }));
    expect(spec.result).toEqual({ site_name: 'Outpost fixtures', weight: '1.5 kg', title: 'Widgets', availability: true });
  });

  it('json: a prompt goes with the page as Markdown to the configured OpenAI-compatible model', async () => {
    const r = await post('json', { url: `${origin.url}/`, prompt: 'Get the product name', response_format: { type: 'json_object' } });
    expect(r.status).toBe(200);
    expect(json(r).result).toEqual({ product: 'Widgets', sawScript: true });
    const q = asked.at(-1)!;
    expect(q.model).toBe('test-model');
    expect(q.auth).toBe('Bearer model-key');
    expect(q.messages[1].content).toContain('Get the product name');
    expect(q.response_format).toEqual({ type: 'json_object' });
  });

  it('options: userAgent, cookies and extra headers reach the server; rejected resource types are not requested', async () => {
    const before = origin.seen.length;
    const r = await post('content', {
      url: `${origin.url}/?opts`,
      userAgent: 'OutpostTestAgent/1.0',
      cookies: [{ name: 'flavour', value: 'oat' }],
      setExtraHTTPHeaders: { 'x-test-header': 'yes' },
      rejectResourceTypes: ['image'],
    });
    expect(r.status).toBe(200);
    const seen = origin.seen.slice(before);
    const doc = seen.find((s) => s.path === '/?opts')!;
    expect(doc.userAgent).toBe('OutpostTestAgent/1.0');
    expect(doc.cookie).toBe('flavour=oat');
    expect(doc.headers['x-test-header']).toBe('yes');
    expect(seen.some((s) => s.path === '/img.png')).toBe(false);

    const before2 = origin.seen.length;
    await post('content', { url: `${origin.url}/?imgs` });
    expect(origin.seen.slice(before2).some((s) => s.path === '/img.png')).toBe(true);
  });

  it('bad input: unknown waitUntil, both or neither of url/html, bad JSON, bad selector, private address', async () => {
    const soon = await post('content', { url: `${origin.url}/`, gotoOptions: { waitUntil: 'soon' } });
    expect(soon.status).toBe(400);
    expect(json(soon).errors[0].message).toMatch(/waitUntil/);
    expect((await post('content', {})).status).toBe(400);
    expect((await post('content', { url: `${origin.url}/`, html: '<p>x</p>' })).status).toBe(400);
    expect((await post('content', '{"url":')).status).toBe(400);
    expect((await post('content', { url: 'file:///etc/passwd' })).status).toBe(400);
    expect((await post('scrape', { url: `${origin.url}/`, elements: [{ selector: '##' }] })).status).toBe(400);
    const priv = await post('content', { url: 'http://10.1.2.3/' });
    expect(priv.status).toBe(400);
    expect(json(priv).errors[0].message).toMatch(/private or loopback.*--browser-allow/);
  });

  it('an unreachable URL answers a clear error at once, not a hang', async () => {
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const started = Date.now();
    const r = await post('content', { url: `http://127.0.0.1:${port}/` });
    expect(r.status).toBe(422);
    expect(json(r).errors[0].message).toMatch(/could not be reached: ECONNREFUSED/);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('a subresource or redirect to a blocked address is refused by the guard', async () => {
    const r = await post('content', { html: '<img src="http://192.168.77.77/x.png"><p id="d">done</p>' });
    expect(r.status).toBe(200);
    expect(json(r).result).toContain('done');
    const redirected = await post('content', { url: `${origin.url}/to-private` });
    expect(redirected.status).toBe(400);
    expect(json(redirected).errors[0].message).toMatch(/10\.9\.9\.9.*private or loopback/);
  });

  it('the official client: browserRendering.* against the same pages', async () => {
    const cf = sdk(t);
    const account_id = t.accountId;
    const url = `${origin.url}/`;
    expect(await cf.browserRendering.content.create({ account_id, url })).toContain('rendered by script 42');
    expect(await cf.browserRendering.links.create({ account_id, url, excludeExternalLinks: true })).toContain(`${origin.url}/about`);
    const scraped = await cf.browserRendering.scrape.create({ account_id, html: '<p id="out">scraped</p>', elements: [{ selector: '#out' }] });
    expect(JSON.stringify(scraped)).toContain('scraped');
    expect(await cf.browserRendering.json.create({ account_id, url, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { sku: { type: 'string' } } } } } as never })).toEqual({ sku: 'BW-1' });
    const snap = await cf.browserRendering.snapshot.create({ account_id, html: '<p>snap</p>', viewport: { width: 64, height: 48 } });
    expect(snap?.content).toContain('snap');
    const pdfRes = await cf.browserRendering.pdf.create({ account_id, html: '<p>client pdf</p>' });
    expect(Buffer.from(await pdfRes.arrayBuffer()).subarray(0, 5).toString()).toBe('%PDF-');
    const shot = await cf.browserRendering.screenshot.create({ account_id, html: '<p>x</p>', viewport: { width: 30, height: 20 } }).asResponse();
    expect(PNG.sync.read(Buffer.from(await shot.arrayBuffer())).width).toBe(30);
  }, 60_000);

  it('authentication and permission', async () => {
    expect((await post('content', { url: `${origin.url}/` }, { authorization: '' })).status).toBe(401);
    const readOnly = await createToken(t, ['Browser Rendering Read'], { [`com.cloudflare.api.account.${t.accountId}`]: '*' });
    expect((await post('content', { url: `${origin.url}/` }, { authorization: `Bearer ${readOnly}` })).status).toBe(403);
    const write = await createToken(t, ['Browser Rendering Write'], { [`com.cloudflare.api.account.${t.accountId}`]: '*' });
    expect((await post('links', { html: '<a href="http://127.0.0.1/x">x</a>' }, { authorization: `Bearer ${write}` })).status).toBe(200);
  });

  it('concurrency per account: requests beyond the limit answer 429 with retry-after', async () => {
    const slow = Array.from({ length: 3 }, () => post('content', { url: `${origin.url}/slow` }));
    await new Promise((r) => setTimeout(r, 300));
    const extra = await post('content', { url: `${origin.url}/` });
    expect(extra.status).toBe(429);
    expect(extra.headers.get('retry-after')).toBe('1');
    const done = await Promise.all(slow);
    expect(done.map((d) => d.status)).toEqual([200, 200, 200]);
  }, 30_000);

  it('a Chromium killed in the middle of a request: that request fails, the next one works', async () => {
    expect((await post('content', { html: '<p>warm</p>' })).status).toBe(200);
    const pending = post('content', { url: `${origin.url}/slow?kill` });
    for (let i = 0; i < 100 && !origin.seen.some((s) => s.path === '/slow?kill'); i++) await new Promise((r) => setTimeout(r, 100));
    const pool = await t.call('GET', '/_outpost/browser-rendering/pool');
    const pid = pool.body.result.processes[0].pid as number;
    expect(pid).toBeGreaterThan(0);
    process.kill(pid, 'SIGKILL');
    const failed = await pending;
    expect(failed.status).toBeGreaterThanOrEqual(500);
    expect(json(failed).errors[0].message).toMatch(/browser|retry/i);
    const next = await post('content', { url: `${origin.url}/` });
    expect(next.status).toBe(200);
    const after = await t.call('GET', '/_outpost/browser-rendering/pool');
    expect(after.body.result.processes[0].pid).not.toBe(pid);
    expect(after.body.result.processes[0].restarts).toBeGreaterThanOrEqual(1);
  }, 60_000);
});

describe.skipIf(skip)('browser rendering rate limit', () => {
  it('answers 429 with retry-after beyond the per-account rate (no browser needed)', async () => {
    const t = await startTestServer({ browserRate: { requests: 2, windowSeconds: 60 } });
    try {
      const p = `/accounts/${t.accountId}/browser-rendering/content`;
      expect((await t.call('POST', p, { url: 'http://10.0.0.1/' })).status).toBe(400);
      expect((await t.call('POST', p, { url: 'http://10.0.0.1/' })).status).toBe(400);
      const third = await t.call('POST', p, { url: 'http://10.0.0.1/' });
      expect(third.status).toBe(429);
      expect(Number(third.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(third.body.errors[0].message).toMatch(/Rate limit/);
    } finally {
      await t.stop();
    }
  });

  it('json: a prompt without a configured model is a clear 400, before any page is loaded', async () => {
    const t = await startTestServer();
    try {
      const r = await t.call('POST', `/accounts/${t.accountId}/browser-rendering/json`, { url: 'http://example.invalid/', prompt: 'Get the product name' });
      expect(r.status).toBe(400);
      expect(r.body.errors[0].message).toMatch(/needs a model.*--browser-ai-url/);
    } finally {
      await t.stop();
    }
  });
});
