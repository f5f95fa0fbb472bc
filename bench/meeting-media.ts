/**
 * Meeting media: CPU seconds per minute of media for a composite recording and for a meeting's
 * HLS livestream at 720p (the Outpost process and every process it starts — the recorder's
 * headless Chromium, the ffmpeg encoders and the RTMP→HLS packager — sampled from /proc every
 * 200 ms), each beside ffmpeg alone doing the same H.264/AAC encode at the same
 * resolution, frame rate and settings from a generated test pattern, in the same run. Then live
 * transcript latency p50 (bench/lib/transcript-latency.ts) on the same server.
 *
 * A participant in Debian Chromium with a fake camera and microphone (launched by this process,
 * so not counted) is in the meeting throughout. Short runs: `--seconds` of media each (30 by
 * default), said in the output.
 *
 *   npm run bench -- meeting-media [--seconds 30] [--utterances 3]
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import puppeteer, { type Browser } from 'puppeteer-core';
import { PUBLISH_BITRATE, PUBLISH_FPS, publishArgs } from '../src/areas/realtime-kit/media/livestreams.ts';
import { intOption, parseOrExit } from './lib/args.ts';
import { ms, ratio, table } from './lib/format.ts';
import { startOutpost } from './lib/outpost.ts';
import { installCleanupHandlers, onCleanup, runCleanups, tempDir } from './lib/procs.ts';
import { runTranscripts } from './lib/transcript-latency.ts';

export const description = 'CPU per minute of 720p composite recording and meeting HLS livestream beside ffmpeg alone; transcript latency p50';

const USAGE = 'usage: npm run bench -- meeting-media [--seconds N] [--utterances N]   (seconds of media per phase 10..300, default 30; utterances 1..10, default 3)\n';
const CHROMIUM = '/usr/bin/chromium';
const W = 1280;
const H = 720;
const run = promisify(execFile);
const sleep = (msec: number) => new Promise((r) => setTimeout(r, msec));

interface Options {
  seconds: number;
  utterances: number;
}

function parse(argv: string[]): Options | 'help' {
  const o: Options = { seconds: 30, utterances: 3 };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i]!.split('=', 2) as [string, string | undefined];
    if (flag === '--help' || flag === '-h') return 'help';
    const value = inline ?? argv[++i];
    if (flag === '--seconds') o.seconds = intOption(flag, value, 10, 300);
    else if (flag === '--utterances') o.utterances = intOption(flag, value, 1, 10);
    else throw new Error(`unknown option ${flag}`);
  }
  return o;
}

/** user + system CPU ms of each process under `pid` (keyed by pid and start time). */
function treeCpu(pid: number): Map<string, number> {
  const kids = new Map<number, number[]>();
  const cpu = new Map<number, { key: string; ms: number }>();
  for (const e of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${e}/stat`, 'utf8');
    } catch {
      continue;
    }
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const id = Number(e);
    cpu.set(id, { key: `${id}:${f[19]}`, ms: (Number(f[11]) + Number(f[12])) * 10 });
    kids.set(Number(f[1]), [...(kids.get(Number(f[1])) ?? []), id]);
  }
  const out = new Map<string, number>();
  const stack = [pid];
  while (stack.length) {
    const id = stack.pop()!;
    const c = cpu.get(id);
    if (c) out.set(c.key, c.ms);
    stack.push(...(kids.get(id) ?? []));
  }
  return out;
}

/**
 * CPU of a process tree over a window, sampled every 200 ms: the last figure seen of every
 * process that was in the tree (Chromium's helpers are not all reaped by a parent, so exited
 * processes' time cannot be read from their parent's cutime). A process that exits loses at most
 * its last 200 ms.
 */
class CpuWindow {
  private readonly base: Map<string, number>;
  private readonly last = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;
  constructor(private readonly pid: number) {
    this.base = treeCpu(pid);
    this.timer = setInterval(() => this.sample(), 200);
  }
  private sample(): void {
    for (const [k, v] of treeCpu(this.pid)) this.last.set(k, v);
  }
  /** CPU ms used in the tree since the window opened. */
  read(): number {
    this.sample();
    let total = 0;
    for (const [k, v] of this.last) total += v - (this.base.get(k) ?? 0);
    return total;
  }
  close(): number {
    const t = this.read();
    clearInterval(this.timer);
    return t;
  }
}

/** ffmpeg alone on a 720p test pattern with sound: CPU seconds it reports (-benchmark). */
async function ffmpegAlone(dir: string, seconds: number, output: string[]): Promise<number> {
  const { stderr } = await run('ffmpeg', ['-hide_banner', '-benchmark', '-y', '-f', 'lavfi', '-i', `testsrc2=size=${W}x${H}:rate=${PUBLISH_FPS}`, '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000', '-t', String(seconds), ...output.map((a) => a.replace('{dir}', dir))], { maxBuffer: 16 << 20 });
  const m = /bench: utime=([\d.]+)s stime=([\d.]+)s/.exec(stderr);
  if (!m) throw new Error(`ffmpeg -benchmark printed no figures: ${stderr.slice(-500)}`);
  return Number(m[1]) + Number(m[2]);
}

async function until<T>(fn: () => Promise<T | undefined | false>, msec: number, what: string): Promise<T> {
  const end = Date.now() + msec;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

export async function main(argv: string[]): Promise<number> {
  const opts = parseOrExit(argv, parse, USAGE);
  if (typeof opts === 'number') return opts;
  installCleanupHandlers();
  const load0 = loadavg();
  try {
    const dir = tempDir('outpost-bench-media-');
    const o = await startOutpost(join(dir.path, 'data'));
    const pid = o.child.proc.pid!;
    const origin = o.api.replace(/\/client\/v4$/, '');
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${o.api}/accounts/${o.accountId}/realtime/kit${path}`, { method, headers: { authorization: `Bearer ${o.token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
      const json = (await res.json()) as { success: boolean; data: any };
      if (!json.success) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
      return json.data;
    };
    const appId = (await api('POST', '/apps', { name: 'media' })).app.id as string;
    const rk = `/${appId}`;
    const meetingId = (await api('POST', `${rk}/meetings`, { title: 'Bench media' })).id as string;
    const host = await api('POST', `${rk}/meetings/${meetingId}/participants`, { custom_participant_id: 'host', preset_name: 'group_call_host', name: 'Hana' });

    // The participant: Chromium with a fake camera and microphone, in this process's tree.
    const browser: Browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, userDataDir: join(dir.path, 'profile'), args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--use-fake-ui-for-media-stream', '--use-fake-device-for-media-stream', '--autoplay-policy=no-user-gesture-required'] });
    const closeBrowser = onCleanup('participant browser', () => browser.close().catch(() => undefined));
    const page = await browser.newPage();
    await page.goto(`${origin}/realtime/kit/sdk.d.ts`);
    await page.evaluate(`(async () => {
      const { default: RTK } = await import('/realtime/kit/sdk.js');
      const m = await RTK.init({ authToken: ${JSON.stringify(host.token)}, defaults: { audio: true, video: true } });
      await m.join();
      window.meeting = m;
    })()`);
    const S = opts.seconds;
    process.stdout.write(`media per phase: ${S} s at ${W}x${H}, ${PUBLISH_FPS} fps; load average before: ${load0.map((x) => x.toFixed(2)).join(' ')} (2 cores shared)\n`);

    // Composite recording: CPU from RECORDING to UPLOADED (recording + the final H.264 encode).
    const rec = await api('POST', `${rk}/recordings`, { meeting_id: meetingId, video_config: { width: W, height: H } });
    await until(async () => (await api('GET', `${rk}/recordings/${rec.id}`)).status === 'RECORDING', 60_000, 'RECORDING');
    const rw = new CpuWindow(pid);
    await sleep(S * 1000);
    await api('PUT', `${rk}/recordings/${rec.id}`, { action: 'stop' });
    const rStop = rw.read();
    const done = await until(async () => {
      const r = await api('GET', `${rk}/recordings/${rec.id}`);
      if (r.status === 'ERRORED') throw new Error(`recording ERRORED: ${r.error}`);
      return r.status === 'UPLOADED' ? r : undefined;
    }, 300_000, 'UPLOADED');
    const r1 = rw.close();
    const recMin = (done.recording_duration as number) / 60;

    // Meeting livestream: CPU over a steady window while LIVE (a few seconds after it went live).
    const ls = await api('POST', `${rk}/meetings/${meetingId}/livestreams`, { video_config: { width: W, height: H } });
    await until(async () => (await api('GET', `${rk}/livestreams/${ls.id}`)).livestream.status === 'LIVE', 60_000, 'LIVE');
    await until(async () => (await fetch(ls.playback_url)).status === 200, 30_000, 'HLS playlist');
    const lw = new CpuWindow(pid);
    const lt0 = performance.now();
    await sleep(S * 1000);
    const l1 = lw.close();
    const liveSecs = (performance.now() - lt0) / 1000;
    const playlist = await (await fetch(ls.playback_url)).text();
    await api('POST', `${rk}/meetings/${meetingId}/active-livestream/stop`);
    await closeBrowser();

    // ffmpeg alone: the same encodes from a test pattern (pattern generation included).
    const recPeer = await ffmpegAlone(dir.path, S, ['-c:v', 'libx264', '-preset', 'veryfast', '-pix_fmt', 'yuv420p', '-r', String(PUBLISH_FPS), '-c:a', 'aac', '-b:a', '128k', '-movflags', '+faststart', '{dir}/peer.mp4']);
    const livePeer = await ffmpegAlone(dir.path, S, [...publishArgs(PUBLISH_FPS, PUBLISH_BITRATE), '{dir}/peer.flv']);

    // Transcript latency on the same server.
    const tx = await runTranscripts({ origin, token: o.token, accountId: o.accountId, utterances: opts.utterances, timeoutMs: 30_000 + opts.utterances * 20_000 });
    await tx.close();

    const perMin = (cpuMs: number, minutes: number) => cpuMs / 1000 / minutes;
    const recOutpost = perMin(r1, recMin);
    const liveOutpost = perMin(l1, liveSecs / 60);
    const peerMin = S / 60;
    process.stdout.write(
      '\n' +
        table(
          ['CPU seconds per minute of media', 'Outpost', 'ffmpeg alone', 'Outpost / ffmpeg'],
          [
            [`composite recording (${done.recording_duration} s recorded; while recording ${(rStop / 1000).toFixed(1)} s CPU, final encode ${((r1 - rStop) / 1000).toFixed(1)} s)`, recOutpost.toFixed(1), (recPeer / peerMin).toFixed(1), ratio(recOutpost, recPeer / peerMin)],
            [`meeting HLS livestream (${liveSecs.toFixed(0)} s window, ${(playlist.match(/\.ts/g) ?? []).length} segments listed)`, liveOutpost.toFixed(1), (livePeer / peerMin).toFixed(1), ratio(liveOutpost, livePeer / peerMin)],
          ],
        ) +
        '\n\nOutpost = the server process and everything it starts (recorder Chromium, ffmpeg encoder, RTMP→HLS packager, media forwarder);\n' +
        'ffmpeg alone = the same H.264/AAC encode of a generated 720p test pattern, no browser (pattern generation included).\n\n' +
        table(['transcript latency (speech end → text in the page)', 'utterances', 'p50', 'max'], [['meeting, Chromium speaker', String(tx.transcripts.length), tx.transcripts.length ? ms(tx.p50Ms) : '–', tx.transcripts.length ? ms(Math.max(...tx.latenciesMs)) : '–']]) +
        `\n\nload average after: ${loadavg().map((x) => x.toFixed(2)).join(' ')}\n`,
    );
    return tx.transcripts.length ? 0 : 1;
  } finally {
    await runCleanups();
  }
}
