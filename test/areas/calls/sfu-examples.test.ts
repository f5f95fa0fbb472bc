/**
 * Three small pages of our own (pages/echo.html, echo-datachannels.html, echo-simulcast.html) walk
 * the same API flows as the platform's published client examples: publish camera and microphone
 * and pull them back into a second session; publish a data channel in one session and subscribe to
 * it from another; publish three simulcast layers and move the subscriber between them with
 * `tracks/update`. They run against Outpost in headless Debian Chromium with fake media devices.
 * The pages keep their peer connections in module scope, so the test wraps `RTCPeerConnection`
 * before a page loads to read `getStats()` of the connections the page made. The pages are served
 * from `localhost` by a small loopback server and call Outpost on `127.0.0.1` (cross-origin, CORS
 * preflight included). Media does not touch storage: SQLite pass only.
 */
import { readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'puppeteer-core';
import { launchMediaChromium } from '../../support/chromium.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
import { createApp, stunUrl, type SfuApp } from './sfu-support.ts';

const PAGES = fileURLToPath(new URL('./pages/', import.meta.url));

/**
 * Runs before the page's own scripts: records every peer connection the page creates, and hands
 * the simulcast page's 15-second layer switching timer to the test, which fires it on demand.
 */
const INSTRUMENT = `(() => {
  const Native = window.RTCPeerConnection;
  window.__pcs = [];
  window.RTCPeerConnection = class extends Native {
    constructor(...args) { super(...args); window.__pcs.push(this); }
  };
  const nativeInterval = window.setInterval.bind(window);
  window.setInterval = (fn, ms, ...rest) => {
    if (ms === 15000) { window.__rotate = fn; return 0; }
    return nativeInterval(fn, ms, ...rest);
  };
})();`;

/** Inbound video of the page's second (pulling) peer connection. */
const INBOUND_VIDEO = `(async () => {
  const pc = window.__pcs[1];
  if (!pc) return null;
  let out = null;
  (await pc.getStats()).forEach((s) => {
    if (s.type === 'inbound-rtp' && s.kind === 'video') out = { framesDecoded: s.framesDecoded || 0, frameWidth: s.frameWidth || 0, frameHeight: s.frameHeight || 0, packets: s.packetsReceived || 0 };
  });
  return out;
})()`;

/** Peer connection states of the page, printed when a page does not get as far as expected. */
const DIAG = `Promise.all(window.__pcs.map(async (pc) => {
  const stats = [];
  (await pc.getStats()).forEach((s) => {
    if (s.type === 'outbound-rtp' || s.type === 'inbound-rtp') stats.push([s.type, s.kind, s.rid, s.frameWidth, s.framesEncoded ?? s.framesDecoded, s.packetsSent ?? s.packetsReceived, s.qualityLimitationReason, s.active].join(' '));
    if (s.type === 'candidate-pair' && s.nominated) stats.push('pair out ' + s.availableOutgoingBitrate);
  });
  return { connection: pc.connectionState, stats };
}))`;

let t: TestServer;
let app: SfuApp;
let browser: Browser;
let profile: string;
let pageServer: Server;
let pageOrigin: string;

async function openPage(name: string): Promise<Page> {
  const page = await browser.newPage();
  // Nothing but loopback: a page that tried to reach further would fail here, not hang.
  await page.setRequestInterception(true);
  page.on('request', (req) => {
    const host = new URL(req.url()).hostname;
    if (host === 'localhost' || host === '127.0.0.1') void req.continue();
    else void req.abort('addressunreachable');
  });
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(String(err)));
  await page.evaluateOnNewDocument(INSTRUMENT);
  await page.goto(`${pageOrigin}/${name}.html`);
  (page as Page & { errors?: string[] }).errors = errors;
  return page;
}

async function poll<T>(page: Page, expr: string, ok: (v: T) => boolean, ms: number): Promise<T> {
  const end = Date.now() + ms;
  let last: T;
  for (;;) {
    last = (await page.evaluate(expr)) as T;
    if (ok(last) || Date.now() > end) return last;
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe.skipIf(sqlitePassOnly('the protocol-flow pages exercise media forwarding, which stores nothing'))('protocol-flow pages modelled on the platform\'s published client examples, against Outpost', () => {
  beforeAll(async () => {
    t = await startTestServer();
    app = await createApp(t);
    // Serves a page with its placeholders filled: the app, its secret, Outpost's API and STUN.
    pageServer = createServer((req, res) => {
      const name = /^\/(echo|echo-datachannels|echo-simulcast)\.html$/.exec(req.url ?? '')?.[1];
      if (!name) {
        res.writeHead(404).end();
        return;
      }
      const html = readFileSync(join(PAGES, `${name}.html`), 'utf8')
        .replaceAll('$APP_ID', app.uid)
        .replaceAll('$APP_TOKEN', app.secret)
        .replaceAll('$API_HOST', t.url)
        .replaceAll('$STUN_URL', stunUrl(t));
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(html);
    });
    await new Promise<void>((r) => pageServer.listen(0, '127.0.0.1', r));
    pageOrigin = `http://localhost:${(pageServer.address() as { port: number }).port}`;
    ({ browser, profile } = await launchMediaChromium('outpost-sfu-examples-'));
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    await new Promise((r) => (pageServer ? pageServer.close(r) : r(undefined)));
    await t?.stop();
  });

  it('echo: the camera and microphone come back, the remote video decodes frames', async () => {
    const page = await openPage('echo');
    const v = await poll<{ framesDecoded: number; frameWidth: number } | null>(page, INBOUND_VIDEO, (x) => !!x && x.framesDecoded > 5, 30_000);
    const errors = (page as Page & { errors?: string[] }).errors!;
    if (!v || v.framesDecoded <= 5) console.log('echo stats', v, errors);
    expect(v!.framesDecoded).toBeGreaterThan(5);
    expect(v!.frameWidth).toBeGreaterThan(0);
    // The remote <video> element plays what was pulled: both tracks, with a picture.
    const remote = (await page.evaluate(`(() => { const v = document.querySelector('video#remote'); return { tracks: v.srcObject ? v.srcObject.getTracks().map((t) => t.kind).sort() : [], width: v.videoWidth }; })()`)) as { tracks: string[]; width: number };
    expect(remote.tracks).toEqual(['audio', 'video']);
    expect(remote.width).toBeGreaterThan(0);
    expect(errors).toEqual([]);
    await page.close();
  }, 60_000);

  it('echo-datachannels: messages sent on one session\'s channel arrive on the other session', async () => {
    const page = await openPage('echo-datachannels');
    await page.waitForFunction(`document.getElementById('dc-start').style.display === 'block'`, { timeout: 30_000 });
    await page.click('#dc-start');
    // Session A sends its clock every 500 ms; session B counts what reaches it through the SFU.
    const text = await poll<string>(page, `document.getElementById('dc-stats').textContent`, (s) => Number(/Samples: (\d+)/.exec(s)?.[1] ?? 0) >= 3, 15_000);
    const errors = (page as Page & { errors?: string[] }).errors!;
    if (!/Samples: \d+/.test(text)) console.log('datachannel page', text, errors);
    expect(Number(/Samples: (\d+)/.exec(text)?.[1] ?? 0)).toBeGreaterThanOrEqual(3);
    expect(errors).toEqual([]);
    await page.close();
  }, 60_000);

  it('echo-simulcast: three layers published; each rotation of the preferred rid changes the pulled picture size, down and back up', async () => {
    const page = await openPage('echo-simulcast');
    const first = await poll<{ framesDecoded: number; frameWidth: number } | null>(page, INBOUND_VIDEO, (x) => !!x && x.framesDecoded > 5, 40_000);
    const errors = (page as Page & { errors?: string[] }).errors!;
    if (!first || first.framesDecoded <= 5) console.log('simulcast stats', first, errors, await page.evaluate(DIAG));
    expect(first!.framesDecoded).toBeGreaterThan(5);
    await page.waitForFunction('typeof window.__rotate === "function"', { timeout: 10_000 });
    // The page switches f → h → q; the layer without a preference is the first in ASCII order, f.
    const widths: number[] = [first!.frameWidth];
    for (const rid of ['f', 'h', 'q']) {
      await page.evaluate('window.__rotate()');
      if (rid === 'f') continue;
      const prev = widths[widths.length - 1];
      const next = await poll<{ frameWidth: number } | null>(page, INBOUND_VIDEO, (x) => !!x && x.frameWidth > 0 && x.frameWidth < prev, 15_000);
      widths.push(next!.frameWidth);
    }
    // The next rotation goes back to f: the full picture again.
    await page.evaluate('window.__rotate()');
    const back = await poll<{ frameWidth: number } | null>(page, INBOUND_VIDEO, (x) => !!x && x.frameWidth > widths[2], 15_000);
    widths.push(back!.frameWidth);
    console.log('echo-simulcast received widths f, h, q, f:', widths.join(' → '));
    if (!(widths[2] < widths[1] && widths[1] < widths[0])) console.log(JSON.stringify(await page.evaluate(DIAG), null, 1));
    expect(widths[1]).toBeLessThan(widths[0]);
    expect(widths[2]).toBeLessThan(widths[1]);
    expect(widths[3]).toBeGreaterThan(widths[2]);
    const last = (await page.evaluate(INBOUND_VIDEO)) as { framesDecoded: number };
    expect(last.framesDecoded).toBeGreaterThan(first!.framesDecoded);
    expect(errors).toEqual([]);
    await page.close();
  }, 90_000);
});
