/**
 * Meetings: join latency through Outpost's client SDK in Chromium with fake devices — page load →
 * `roomJoined`, and `roomJoined` → first decoded frame of a participant already in the meeting —
 * for meetings of each size, beside the forwarder alone in the same run (a page publishes its
 * camera straight to the media host, another pulls it: pull start → first decoded frame).
 *
 *   npm run bench -- meetings [--sizes 2,5] [--pulls 5]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { loadConfig } from '../src/core/config.ts';
import { createLogger } from '../src/core/log.ts';
import { startServer } from '../src/server.ts';
import { intOption, UsageError } from './lib/args.ts';
import { ms, table } from './lib/format.ts';

export const description = 'meeting join latency (load → roomJoined → first remote frame) by meeting size, beside the forwarder alone';

const CHROMIUM = '/usr/bin/chromium';
const TOKEN = 'bench-meetings-token-0123456789abcdef';
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--use-fake-ui-for-media-stream',
  '--use-fake-device-for-media-stream',
  '--disable-background-timer-throttling',
  '--disable-renderer-backgrounding',
  '--disable-backgrounding-occluded-windows',
];

interface Options {
  sizes: number[];
  pulls: number;
}

function parse(argv: string[]): Options {
  const o: Options = { sizes: [2, 5], pulls: 5 };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
    const value = inline ?? argv[++i];
    if (flag === '--sizes') o.sizes = (value ?? '').split(',').map((v) => intOption(flag, v, 2, 10));
    else if (flag === '--pulls') o.pulls = intOption(flag, value, 1, 50);
    else throw new UsageError(`unknown option ${flag}`);
  }
  return o;
}

function pct(samples: number[], p: number): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

/** In the page: init + join through the SDK, then wait for the first decoded remote frame. */
const JOIN = String.raw`async (token, expectRemote) => {
  const { default: RealtimeKitClient } = await import('/realtime/kit/sdk.js');
  const meeting = await RealtimeKitClient.init({ authToken: token });
  window.meeting = meeting;
  await meeting.join();
  const joinedAt = performance.now();
  let firstFrameAt;
  for (let i = 0; expectRemote && i < 1500 && firstFrameAt === undefined; i++) {
    for (const sub of meeting._media.subs.values()) {
      const stats = await sub.pc.getStats();
      stats.forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'video' && s.framesDecoded > 0 && firstFrameAt === undefined) firstFrameAt = performance.now(); });
    }
    if (firstFrameAt === undefined) await new Promise((r) => setTimeout(r, 10));
  }
  return { joined: joinedAt, firstFrame: firstFrameAt === undefined ? -1 : firstFrameAt - joinedAt };
}`;

const SFU_PUBLISH = String.raw`async (base, secret) => {
  const call = async (method, path, body) => (await fetch(base + path, { method, headers: { authorization: 'Bearer ' + secret, 'content-type': 'application/json' }, body: body && JSON.stringify(body) })).json();
  const media = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 360 } });
  const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
  window.keep = pc;
  const tx = pc.addTransceiver(media.getVideoTracks()[0], { direction: 'sendonly' });
  const { sessionId } = await call('POST', '/sessions/new');
  await pc.setLocalDescription(await pc.createOffer());
  const r = await call('POST', '/sessions/' + sessionId + '/tracks/new', { sessionDescription: pc.localDescription, tracks: [{ location: 'local', mid: tx.mid, trackName: 'cam' }] });
  await pc.setRemoteDescription(r.sessionDescription);
  return sessionId;
}`;

const SFU_PULL = String.raw`async (base, secret, remote) => {
  const call = async (method, path, body) => (await fetch(base + path, { method, headers: { authorization: 'Bearer ' + secret, 'content-type': 'application/json' }, body: body && JSON.stringify(body) })).json();
  const t0 = performance.now();
  const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
  const { sessionId } = await call('POST', '/sessions/new');
  const r = await call('POST', '/sessions/' + sessionId + '/tracks/new', { tracks: [{ location: 'remote', sessionId: remote, trackName: 'cam' }] });
  await pc.setRemoteDescription(r.sessionDescription);
  await pc.setLocalDescription(await pc.createAnswer());
  await call('PUT', '/sessions/' + sessionId + '/renegotiate', { sessionDescription: pc.localDescription });
  for (let i = 0; i < 1500; i++) {
    let frames = 0;
    (await pc.getStats()).forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'video') frames = s.framesDecoded || 0; });
    if (frames > 0) { pc.close(); return performance.now() - t0; }
    await new Promise((r) => setTimeout(r, 10));
  }
  pc.close();
  return -1;
}`;

export async function main(argv: string[]): Promise<number> {
  let opts: Options;
  try {
    opts = parse(argv);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\nusage: npm run bench -- meetings [--sizes 2,5] [--pulls 5]\n`);
      return 2;
    }
    throw err;
  }
  const dataDir = mkdtempSync(join(tmpdir(), 'outpost-bench-meetings-'));
  const config = loadConfig({}, {}, { apiPort: 0, edgePort: 0, turnPort: 0, dnsPort: 0, dataDir, database: join(dataDir, 'outpost.db'), apiToken: TOKEN, logLevel: 'silent' });
  const server = await startServer(config, { logger: createLogger('silent') });
  const profile = mkdtempSync(join(tmpdir(), 'outpost-bench-meetings-chromium-'));
  let browser: Browser | undefined;
  try {
    browser = await puppeteer.launch({ executablePath: CHROMIUM, args: FLAGS, userDataDir: profile, headless: true });
    const url = server.apiUrl;
    const account = server.seeded.accountId;
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${url}/client/v4/accounts/${account}${path}`, { method, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
      return (await res.json()) as any;
    };
    const appId = (await api('POST', '/realtime/kit/apps', { name: 'bench' })).data.app.id as string;
    const rows: string[][] = [];

    for (const size of opts.sizes) {
      const meetingId = (await api('POST', `/realtime/kit/${appId}/meetings`, { title: `bench ${size}` })).data.id as string;
      const pages: Page[] = [];
      const joins: number[] = [];
      const frames: number[] = [];
      for (let i = 0; i < size; i++) {
        const token = (await api('POST', `/realtime/kit/${appId}/meetings/${meetingId}/participants`, { custom_participant_id: `p${i}`, preset_name: 'group_call_host' })).data.token as string;
        const page = await browser.newPage();
        pages.push(page);
        await page.goto(`${url}/healthz`);
        // Page load → roomJoined is measured from the navigation's time origin.
        const r = (await page.evaluate(`(${JOIN})(${JSON.stringify(token)}, ${i > 0})`)) as { joined: number; firstFrame: number };
        joins.push(r.joined);
        if (i > 0) frames.push(r.firstFrame);
      }
      await Promise.all(pages.map((p) => p.close()));
      const lost = frames.filter((f) => f < 0).length;
      const ok = frames.filter((f) => f >= 0);
      rows.push([`meeting of ${size} (SDK)`, ms(pct(joins, 50)), ms(pct(joins, 99)), ok.length ? ms(pct(ok, 50)) : '-', ok.length ? ms(pct(ok, 99)) : '-', `${frames.length - lost}/${frames.length}`]);
    }

    // The forwarder alone: pull a published camera straight from the media host.
    const app = (await (await fetch(`${url}/client/v4/accounts/${account}/calls/apps`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: '{"name":"bench"}' })).json()) as any;
    const base = `${url}/v1/apps/${app.result.uid}`;
    const pub = await browser.newPage();
    await pub.goto(`${url}/healthz`);
    const remote = (await pub.evaluate(`(${SFU_PUBLISH})(${JSON.stringify(base)}, ${JSON.stringify(app.result.secret)})`)) as string;
    const sub = await browser.newPage();
    await sub.goto(`${url}/healthz`);
    const pulls: number[] = [];
    for (let i = 0; i < opts.pulls; i++) pulls.push((await sub.evaluate(`(${SFU_PULL})(${JSON.stringify(base)}, ${JSON.stringify(app.result.secret)}, ${JSON.stringify(remote)})`)) as number);
    const okPulls = pulls.filter((p) => p >= 0);
    rows.push(['forwarder alone (media host)', '-', '-', okPulls.length ? ms(pct(okPulls, 50)) : '-', okPulls.length ? ms(pct(okPulls, 99)) : '-', `${okPulls.length}/${pulls.length}`]);

    process.stdout.write(table(['setup', 'load→joined p50', 'p99', 'first frame p50', 'p99', 'frames seen'], rows) + '\n');
    process.stdout.write('first frame: SDK — roomJoined → first decoded frame of a participant already in the meeting; forwarder — pull request → first decoded frame\n');
    return 0;
  } finally {
    await browser?.close();
    await server.stop();
    rmSync(profile, { recursive: true, force: true });
    rmSync(dataDir, { recursive: true, force: true });
  }
}
