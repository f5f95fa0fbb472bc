/**
 * Meetings: join latency through Outpost's client SDK in Chromium with fake devices — page load →
 * `roomJoined`, and `roomJoined` → first decoded frame of a participant already in the meeting —
 * for meetings of each size, beside the forwarder alone in the same run (a page publishes its
 * camera straight to the media host, another pulls it: pull start → first decoded frame). Then
 * capacity: one meeting grown step by step, every participant publishing audio and 360p video and
 * receiving everyone else's, loss measured from the subscribers' WebRTC stats over a window at each
 * step; the largest size under 1 % loss is reported beside the SFU benchmark's forwarder-only
 * figures (bench/sfu.ts, Outpost side) run in the same invocation.
 *
 *   npm run bench -- meetings [--sizes 2,5,10] [--pulls 5] [--ramp 2,4,6,8,10,12] [--window 5] [--no-sfu]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { loadConfig } from '../src/core/config.ts';
import { createLogger } from '../src/core/log.ts';
import { startServer } from '../src/server.ts';
import { intOption, UsageError } from './lib/args.ts';
import { main as sfuMain } from './sfu.ts';
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
  ramp: number[];
  window: number;
  sfu: boolean;
}

const USAGE = 'usage: npm run bench -- meetings [--sizes 2,5,10] [--pulls 5] [--ramp 2,4,6,8,10,12] [--window 5] [--no-sfu]\n';
const LOSS_LIMIT = 0.01;

function parse(argv: string[]): Options {
  const o: Options = { sizes: [2, 5, 10], pulls: 5, ramp: [2, 4, 6, 8, 10, 12], window: 5, sfu: true };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
    const value = inline ?? argv[++i];
    if (flag === '--sizes') o.sizes = (value ?? '').split(',').map((v) => intOption(flag, v, 2, 10));
    else if (flag === '--pulls') o.pulls = intOption(flag, value, 1, 50);
    else if (flag === '--ramp') o.ramp = (value ?? '').split(',').map((v) => intOption(flag, v, 2, 40));
    else if (flag === '--window') o.window = intOption(flag, value, 2, 60);
    else if (flag === '--no-sfu') {
      o.sfu = false;
      if (inline === undefined) i--;
    } else throw new UsageError(`unknown option ${flag}`);
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
  // Polled every 50 ms for at most 60 s: getStats over many subscriptions is not free on a busy machine.
  const deadline = performance.now() + 60000;
  while (expectRemote && firstFrameAt === undefined && performance.now() < deadline) {
    for (const sub of meeting._media.subs.values()) {
      const stats = await sub.pc.getStats();
      stats.forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'video' && s.framesDecoded > 0 && firstFrameAt === undefined) firstFrameAt = performance.now(); });
    }
    if (firstFrameAt === undefined) await new Promise((r) => setTimeout(r, 50));
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

/** In the page: the subscribers' inbound RTP totals by kind, and how many subscriptions decode video. */
const STATS = String.raw`async () => {
  const out = { subs: 0, decoding: 0, audio: { recv: 0, lost: 0 }, video: { recv: 0, lost: 0, frames: 0, heights: 0, n: 0 } };
  for (const sub of window.meeting._media.subs.values()) {
    out.subs++;
    let frames = 0;
    (await sub.pc.getStats()).forEach((s) => {
      if (s.type !== 'inbound-rtp' || (s.kind !== 'audio' && s.kind !== 'video')) return;
      const k = out[s.kind];
      k.recv += s.packetsReceived || 0;
      k.lost += s.packetsLost || 0;
      if (s.kind === 'video') {
        frames += s.framesDecoded || 0;
        k.frames += s.framesDecoded || 0;
        if (s.frameHeight) { k.heights += s.frameHeight; k.n++; }
      }
    });
    if (frames > 0) out.decoding++;
  }
  return out;
}`;

interface PageStats {
  subs: number;
  decoding: number;
  audio: { recv: number; lost: number };
  video: { recv: number; lost: number; frames: number; heights: number; n: number };
}

interface RampRow {
  size: number;
  ready: boolean;
  audioLoss: number;
  videoLoss: number;
  audioPps: number;
  videoPps: number;
  fps: number;
  height: number;
  serverCores: number;
}

/**
 * One meeting grown to each size of `steps`: new pages join with camera and microphone, the step
 * waits until every page decodes video from every other one, then measures `windowS` seconds of
 * the subscribers' inbound stats. Stops after the first step at or over 1 % loss (or not ready).
 */
async function ramp(browser: Browser, url: string, api: (m: string, p: string, b?: unknown) => Promise<any>, appId: string, steps: number[], windowS: number): Promise<RampRow[]> {
  const meetingId = (await api('POST', `/realtime/kit/${appId}/meetings`, { title: 'bench capacity' })).data.id as string;
  const pages: Page[] = [];
  const rows: RampRow[] = [];
  const all = (): Promise<PageStats[]> => Promise.all(pages.map((p) => p.evaluate(`(${STATS})()`) as Promise<PageStats>));
  try {
    for (const size of steps) {
      while (pages.length < size) {
        const token = (await api('POST', `/realtime/kit/${appId}/meetings/${meetingId}/participants`, { custom_participant_id: `c${pages.length}`, preset_name: 'group_call_host' })).data.token as string;
        const page = await browser.newPage();
        pages.push(page);
        try {
          await page.goto(`${url}/healthz`);
          await page.evaluate(`(${JOIN})(${JSON.stringify(token)}, false)`);
        } catch (err) {
          process.stdout.write(`  capacity: participant ${pages.length} could not join (${(err as Error).message.split('\n')[0]}); stopping\n`);
          return rows;
        }
      }
      // Every page decodes every other participant's video (30 s at most).
      let ready = false;
      for (let i = 0; i < 60 && !ready; i++) {
        ready = (await all()).every((s) => s.decoding === size - 1);
        if (!ready) await new Promise((r) => setTimeout(r, 500));
      }
      await new Promise((r) => setTimeout(r, 2000));
      const cpu0 = process.cpuUsage();
      const t0 = Date.now();
      const a = await all();
      await new Promise((r) => setTimeout(r, windowS * 1000));
      const b = await all();
      const wall = (Date.now() - t0) / 1000;
      const cpu = process.cpuUsage(cpu0);
      const sum = (xs: PageStats[], f: (s: PageStats) => number) => xs.reduce((n, s) => n + f(s), 0);
      const d = (f: (s: PageStats) => number) => sum(b, f) - sum(a, f);
      const loss = (recv: number, lost: number) => (recv + lost > 0 ? Math.max(0, lost) / (recv + lost) : 1);
      const audioLoss = loss(d((s) => s.audio.recv), d((s) => s.audio.lost));
      const videoLoss = loss(d((s) => s.video.recv), d((s) => s.video.lost));
      const streams = size * (size - 1);
      const row: RampRow = {
        size,
        ready,
        audioLoss,
        videoLoss,
        audioPps: d((s) => s.audio.recv) / wall / streams,
        videoPps: d((s) => s.video.recv) / wall / streams,
        fps: d((s) => s.video.frames) / wall / streams,
        height: sum(b, (s) => s.video.heights) / Math.max(1, sum(b, (s) => s.video.n)),
        serverCores: (cpu.user + cpu.system) / 1e6 / wall,
      };
      rows.push(row);
      process.stdout.write(`  ${size} participants: ready ${ready}, loss audio ${(audioLoss * 100).toFixed(2)} % video ${(videoLoss * 100).toFixed(2)} %, ${row.fps.toFixed(1)} fps at ${Math.round(row.height)}p per stream\n`);
      if (!ready || audioLoss >= LOSS_LIMIT || videoLoss >= LOSS_LIMIT) break;
    }
  } finally {
    await Promise.all(pages.map((p) => p.close().catch(() => undefined)));
  }
  return rows;
}

export async function main(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(USAGE);
    return 0;
  }
  let opts: Options;
  try {
    opts = parse(argv);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\n${USAGE}`);
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
    browser = await puppeteer.launch({ executablePath: CHROMIUM, args: FLAGS, userDataDir: profile, headless: true, protocolTimeout: 600_000 });
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
        // A join that does not finish in 2 minutes (an overloaded machine) ends this size, reported as such.
        const r = await Promise.race([
          page
            .goto(`${url}/healthz`)
            .then(() => page.evaluate(`(${JOIN})(${JSON.stringify(token)}, ${i > 0})`) as Promise<{ joined: number; firstFrame: number }>)
            .catch((err: Error) => (process.stdout.write(`  meeting of ${size}: participant ${i + 1} failed: ${err.message.split('\n')[0]}\n`), undefined)),
          new Promise<undefined>((res) => void (globalThis.setTimeout(res, 120_000) as unknown as NodeJS.Timeout).unref()),
        ]);
        if (!r) {
          process.stdout.write(`  meeting of ${size}: participant ${i + 1} did not join (above) or not within 2 minutes; stopping this size\n`);
          break;
        }
        // Page load → roomJoined is measured from the navigation's time origin.
        joins.push(r.joined);
        if (i > 0) frames.push(r.firstFrame);
      }
      await Promise.all(pages.map((p) => p.close()));
      process.stdout.write(`  meeting of ${size}: joined in ${joins.map((j) => Math.round(j)).join(', ')} ms\n`);
      const lost = frames.filter((f) => f < 0).length;
      const ok = frames.filter((f) => f >= 0);
      rows.push([`meeting of ${size} (SDK)${joins.length < size ? `, ${joins.length} joined` : ''}`, ms(pct(joins, 50)), ms(pct(joins, 99)), ok.length ? ms(pct(ok, 50)) : '-', ok.length ? ms(pct(ok, 99)) : '-', `${frames.length - lost}/${frames.length}`]);
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
    await Promise.all([pub.close(), sub.close()]);

    process.stdout.write(`\ncapacity: one meeting, every participant sends audio and 640×360 video and receives all others; ${opts.window} s measured per step\n`);
    const capacity = await ramp(browser, url, api, appId, opts.ramp, opts.window);
    const pctOf = (x: number) => `${(x * 100).toFixed(2)} %`;
    process.stdout.write(
      table(
        ['participants', 'streams in', 'all decoding', 'audio loss', 'video loss', 'audio pkt/s/stream', 'video pkt/s/stream', 'fps/stream', 'height', 'Outpost+driver cores'],
        capacity.map((r) => [String(r.size), String(r.size * (r.size - 1) * 2), r.ready ? 'yes' : 'no', pctOf(r.audioLoss), pctOf(r.videoLoss), r.audioPps.toFixed(1), r.videoPps.toFixed(1), r.fps.toFixed(1), `${Math.round(r.height)}p`, r.serverCores.toFixed(2)]),
      ) + '\n',
    );
    const ok = capacity.filter((r) => r.ready && r.audioLoss < LOSS_LIMIT && r.videoLoss < LOSS_LIMIT);
    const last = capacity[capacity.length - 1];
    const sustained = ok.length ? ok[ok.length - 1].size : 0;
    process.stdout.write(
      `sustained: ${sustained} participants under 1 % loss${last && ok[ok.length - 1] === last ? ' (the largest size tried; raise --ramp)' : ''}. ` +
        'Browsers (every encoder and decoder) and Outpost share this machine, so the step that fails says where this machine runs out, not the forwarder alone.\n',
    );
    if (opts.sfu) {
      await browser.close();
      browser = undefined;
      process.stdout.write('\nforwarder alone, same run (bench/sfu.ts, Outpost side):\n');
      await sfuMain(['--sides', 'outpost', '--steps', '1,10,20,40,80,160', '--window', '3']);
    }
    return 0;
  } finally {
    await browser?.close();
    await server.stop();
    rmSync(profile, { recursive: true, force: true });
    rmSync(dataDir, { recursive: true, force: true });
  }
}
