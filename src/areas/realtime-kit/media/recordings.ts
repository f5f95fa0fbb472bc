/**
 * Meeting recordings (spec 000 "Meeting platform", recording; semantics §2.8). A recording is a
 * headless Chromium (puppeteer-core, Debian's /usr/bin/chromium) that opens the recorder page
 * (recorder.html) with a token of a hidden participant: the page joins the meeting without
 * producing media and records with MediaRecorder either the grid it draws of everyone's video with
 * their audio mixed (composite) or each remote track on its own (track). Chunks reach this process
 * through an exposed function and are written to a working directory; at stop ffmpeg encodes the
 * composite's segments into one H.264/AAC MP4 (the pause between two segments is left out), or
 * remuxes each track file so it carries its duration. Files go to the blob store and are served
 * through download URLs signed with an HMAC and an expiry. The same page in composite mode, its
 * chunks handed on as they come (`compositeFeed`), is what a meeting's livestream encodes.
 *
 * States: INVOKED → RECORDING ⇄ PAUSED → UPLOADING → UPLOADED, ERRORED on any failure; each change
 * is written to storage and sent as `recording.statusUpdate` through the webhook outbox.
 * LIMITATIONS: a recording lives in the process that started it (a restart marks recordings left
 * INVOKED/RECORDING/PAUSED/UPLOADING as ERRORED); the recorder is a participant with the preset
 * `outpost_recorder` (created in the app on first use, `hidden_participant`), which the live room
 * keeps out of the session (live.ts): others do not see it and it does not keep the session LIVE;
 * `storage_config` (external buckets) is accepted and ignored — files stay in Outpost.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { spawn } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, rmSync, statSync, type WriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type { Browser, Page } from 'puppeteer-core';
import type { AreaContext } from '../../../core/area.ts';
import { apiError } from '../../../core/errors.ts';
import { uuid } from '../../../core/ids.ts';
import { raw } from '../../../core/router.ts';
import { defineCollection, type Doc } from '../../../core/storage/collection.ts';
import type { BlobStore } from '../../../core/storage/blobs.ts';
import type { Logger } from '../../../core/log.ts';
import { issueToken, type SigningKey } from '../keys.ts';
import { DEFAULT_PRESETS, RECORDER_PRESET } from '../presets.ts';
import { apps, meetings, participants, presets, sessions, type Meeting } from '../store.ts';
import type { Deliveries } from '../webhooks.ts';

export const CHROMIUM = '/usr/bin/chromium';
export { RECORDER_PRESET };
export const RECORDER_ID_PREFIX = 'outpost-recorder-';
/** How long a download URL stays valid. */
export const DOWNLOAD_TTL_SECS = 7 * 86400;
/** How long the recorder page may take to join before the recording is ERRORED. */
const JOIN_TIMEOUT_MS = 30_000;
/** A recording with nobody else in the meeting for this long stops (ALL_PEERS_LEFT). */
const ALONE_STOP_MS = 15_000;
const ALONE_CHECK_MS = 1000;
/**
 * Frame rate of the composite. MediaRecorder's WebM has millisecond timestamps and no frame rate,
 * which ffmpeg would otherwise take for 1000 fps and fill with duplicates.
 */
const FPS = 25;

export type RecordingStatus = 'INVOKED' | 'RECORDING' | 'PAUSED' | 'UPLOADING' | 'UPLOADED' | 'ERRORED';
export const ACTIVE_STATES: RecordingStatus[] = ['INVOKED', 'RECORDING', 'PAUSED'];

export interface RecordingFile {
  name: string;
  key: string;
  kind: 'composite' | 'audio' | 'video';
  participant?: string;
  size: number;
}

export interface Recording {
  id: string;
  app_id: string;
  meeting_id: string;
  session_id: string | null;
  type: 'composite' | 'track';
  status: RecordingStatus;
  invoked_time: string;
  started_time: string | null;
  stopped_time: string | null;
  recording_duration: number | null;
  file_size: number | null;
  output_file_name: string | null;
  start_reason: { reason: 'API_CALL' | 'RECORD_ON_START'; caller?: { name?: string; type: string; user_id?: string } };
  stop_reason: { reason: 'API_CALL' | 'INTERNAL_ERROR' | 'ALL_PEERS_LEFT' } | null;
  storage_config: Record<string, unknown> | null;
  layers?: Record<string, unknown>;
  video: { width: number; height: number };
  file_name_prefix: string | null;
  max_seconds: number;
  error?: string;
  files: RecordingFile[];
  /** Recorded stretches (pauses excluded), ISO times. */
  intervals: { start: string; end?: string }[];
  created_at: string;
  updated_at: string;
}

export const recordings = defineCollection<Recording, 'meeting' | 'status'>({
  kind: 'rtk_recording',
  indexes: { meeting: (r) => r.meeting_id, status: (r) => r.status },
});

export interface RecorderDeps {
  ctx: AreaContext;
  log: Logger;
  key: () => SigningKey;
  deliveries: Deliveries;
  blobs: BlobStore;
}

interface Job {
  id: string;
  browser: Browser;
  page: Page;
  dir: string;
  files: Map<string, { stream: WriteStream; kind: 'audio' | 'video' | 'composite'; participant?: string }>;
  segments: string[];
  aloneSince?: number;
  timer?: NodeJS.Timeout;
  maxTimer?: NodeJS.Timeout;
  busy: Promise<unknown>;
  closing: boolean;
}

const BROWSER_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--autoplay-policy=no-user-gesture-required',
  '--disable-background-timer-throttling',
  '--disable-renderer-backgrounding',
  '--disable-backgrounding-occluded-windows',
  // The recorder produces no media; these only keep getUserMedia from prompting if asked.
  '--use-fake-ui-for-media-stream',
];

/** Runs ffmpeg; rejects with the tail of its log on a non-zero exit. */
export function ffmpeg(args: string[], opts: { timeoutMs?: number } = {}): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-y', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
    const timer = setTimeout(() => p.kill('SIGKILL'), opts.timeoutMs ?? 600_000);
    p.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`ffmpeg could not start (${e.message}); install the Debian package 'ffmpeg'`));
    });
    p.on('close', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new Error(`ffmpeg exited ${code}: ${err.trim()}`));
    });
  });
}

function secret(key: SigningKey): Buffer {
  // A stable secret derived from the meeting signing key: download URLs outlive a restart.
  return createHmac('sha256', key.privateKey.export({ type: 'pkcs8', format: 'der' })).update('outpost-recording-downloads').digest();
}

export function signDownload(key: SigningKey, path: string, expires: number): string {
  return createHmac('sha256', secret(key)).update(`${path}\n${expires}`).digest('base64url');
}

export function checkDownload(key: SigningKey, path: string, expires: number, sig: string, nowMs: number): boolean {
  if (!Number.isInteger(expires) || expires * 1000 < nowMs) return false;
  const want = Buffer.from(signDownload(key, path, expires));
  const got = Buffer.from(sig);
  return want.length === got.length && timingSafeEqual(want, got);
}

/** A live composite view of a meeting (see `Recorder.compositeFeed`). */
export interface CompositeFeed {
  /** Participants in the meeting other than the feed's own. */
  others(): Promise<number>;
  stop(): Promise<void>;
}

export class Recorder {
  private readonly jobs = new Map<string, Job>();
  /** Closers of the live composite feeds, for `close`. */
  private readonly feeds = new Set<() => Promise<void>>();
  private closed = false;

  constructor(private readonly deps: RecorderDeps) {}

  private get db() {
    return this.deps.ctx.database.db;
  }
  private now(): Date {
    return this.deps.ctx.clock.now();
  }

  /** Public base URL of the API, for the recorder page and download links. */
  baseUrl(): string {
    const { config } = this.deps.ctx;
    const host = config.host === '0.0.0.0' || config.host === '::' || !config.host ? '127.0.0.1' : config.host.includes(':') ? `[${config.host}]` : config.host;
    return `http://${host}:${this.port()}`;
  }
  /** The configured API port, or (configured 0) the one learned from a request or join on it. */
  private learnedPort = 0;
  learnPort(port: number | undefined): void {
    if (port && !this.learnedPort) this.learnedPort = port;
  }
  private port(): number {
    return this.deps.ctx.config.apiPort || this.learnedPort;
  }

  downloadUrl(r: Recording, file: RecordingFile): { url: string; expiry: string } {
    const expires = Math.floor(this.now().getTime() / 1000) + DOWNLOAD_TTL_SECS;
    const path = `/realtime/kit/recordings/${r.id}/files/${encodeURIComponent(file.name)}`;
    const sig = signDownload(this.deps.key(), path, expires);
    return { url: `${this.baseUrl()}${path}?expires=${expires}&signature=${sig}`, expiry: new Date(expires * 1000).toISOString() };
  }

  view(r: Recording): Record<string, unknown> {
    const main = r.status === 'UPLOADED' ? r.files[0] : undefined;
    const dl = main ? this.downloadUrl(r, main) : undefined;
    const out: Record<string, unknown> = {
      id: r.id,
      meeting_id: r.meeting_id,
      session_id: r.session_id,
      type: r.type,
      status: r.status,
      invoked_time: r.invoked_time,
      started_time: r.started_time,
      stopped_time: r.stopped_time,
      recording_duration: r.recording_duration,
      file_size: r.file_size,
      output_file_name: r.output_file_name,
      download_url: dl?.url ?? null,
      download_url_expiry: dl?.expiry ?? null,
      audio_download_url: null,
      start_reason: r.start_reason,
      stop_reason: r.stop_reason,
      storage_config: r.storage_config,
      created_at: r.created_at,
      updated_at: r.updated_at,
    };
    if (r.type === 'track') {
      out.layers = r.layers ?? null;
      out.files = r.status === 'UPLOADED' ? r.files.map((f) => ({ name: f.name, kind: f.kind, participant: f.participant, file_size: f.size, ...(() => { const d = this.downloadUrl(r, f); return { download_url: d.url, download_url_expiry: d.expiry }; })() })) : [];
    }
    if (r.error) out.error = r.error;
    return out;
  }

  async active(appId: string, meetingId: string): Promise<Doc<Recording> | undefined> {
    const { items } = await recordings.list(this.db, appId, {
      filters: [
        { field: 'meeting', op: 'eq', value: meetingId },
        { field: 'status', op: 'in', value: ACTIVE_STATES },
      ],
      limit: 1,
    });
    return items[0];
  }

  /** Creates the recording and starts the recorder in the background; answers at INVOKED. */
  async start(
    meeting: Meeting,
    opts: { type: 'composite' | 'track'; reason: 'API_CALL' | 'RECORD_ON_START'; layers?: Record<string, unknown>; width?: number; height?: number; filePrefix?: string; maxSeconds?: number; storageConfig?: Record<string, unknown> | null },
  ): Promise<Recording> {
    if (this.closed) throw apiError('rtk_conflict', 'the server is stopping');
    if (meeting.status !== 'ACTIVE') throw apiError('rtk_conflict', `meeting ${meeting.id} is INACTIVE`);
    if (await this.active(meeting.app_id, meeting.id)) throw apiError('rtk_conflict', `meeting ${meeting.id} already has an active recording`);
    const cfg = meeting.recording_config as { video_config?: { width?: number; height?: number }; file_name_prefix?: string; max_seconds?: number };
    const at = this.now();
    const r: Recording = {
      id: uuid(),
      app_id: meeting.app_id,
      meeting_id: meeting.id,
      session_id: null,
      type: opts.type,
      status: 'INVOKED',
      invoked_time: at.toISOString(),
      started_time: null,
      stopped_time: null,
      recording_duration: null,
      file_size: null,
      output_file_name: null,
      start_reason: { reason: opts.reason, caller: { type: opts.reason === 'API_CALL' ? 'ORGANIZATION' : 'SYSTEM' } },
      stop_reason: null,
      storage_config: opts.storageConfig ?? null,
      ...(opts.layers ? { layers: opts.layers } : {}),
      video: { width: opts.width ?? cfg.video_config?.width ?? 1280, height: opts.height ?? cfg.video_config?.height ?? 720 },
      file_name_prefix: opts.filePrefix ?? cfg.file_name_prefix ?? null,
      max_seconds: opts.maxSeconds ?? cfg.max_seconds ?? 86400,
      files: [],
      intervals: [],
      created_at: at.toISOString(),
      updated_at: at.toISOString(),
    };
    await recordings.insert(this.db, meeting.app_id, r.id, r, at);
    await this.notify(r);
    void this.launch(r, meeting).catch((err: unknown) => this.fail(r.id, r.app_id, err));
    return r;
  }

  /** A hidden participant (custom id `outpost-recorder-<label>`) of the recorder preset, and its token. */
  private async recorderToken(meeting: Meeting, label: string): Promise<string> {
    const db = this.db;
    const at = this.now();
    const found = (await presets.list(db, meeting.app_id, { filters: [{ field: 'name', op: 'eq', value: RECORDER_PRESET }], limit: 1 })).items[0];
    if (!found) {
      // A viewer that skips the waiting room and produces nothing.
      const base = DEFAULT_PRESETS.find((p) => p.name === 'livestream_viewer')!;
      const id = uuid();
      const preset = structuredClone(base);
      preset.permissions.hidden_participant = true;
      await presets.insert(db, meeting.app_id, id, { ...preset, name: RECORDER_PRESET, id, app_id: meeting.app_id, created_at: at.toISOString(), updated_at: at.toISOString() }, at);
    }
    const pid = uuid();
    await participants.insert(
      db,
      meeting.id,
      pid,
      { id: pid, meeting_id: meeting.id, app_id: meeting.app_id, custom_participant_id: `${RECORDER_ID_PREFIX}${label}`, preset_name: RECORDER_PRESET, name: 'Recorder', picture: null, created_at: at.toISOString(), updated_at: at.toISOString() },
      at,
    );
    return issueToken(this.deps.key(), { meetingId: meeting.id, orgId: meeting.app_id, participantId: pid, appId: meeting.app_id, presetName: RECORDER_PRESET }, at, 86400 * 2);
  }

  /** A headless Chromium with its own profile under `dir`; puppeteer-core is loaded on first use. */
  private async browser(dir: string): Promise<Browser> {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install the Debian package 'chromium'`);
    // Loaded on first use: a server that never records does not pay for it at start.
    const { default: puppeteer } = await import('puppeteer-core');
    return puppeteer.launch({ executablePath: CHROMIUM, args: BROWSER_FLAGS, userDataDir: join(dir, 'profile'), headless: true, timeout: 30_000 });
  }

  /** Opens the recorder page with `token` and waits until it has joined (throws what it reported otherwise). */
  private async joinPage(
    browser: Browser,
    token: string,
    label: string,
    params: { mode: 'composite' | 'track'; width: number; height: number },
    handlers: { chunk: (file: string, b64: string) => void; track?: (file: string, kind: 'audio' | 'video', participant: string) => void },
    onPage: (page: Page) => void,
  ): Promise<Page> {
    const page = await browser.newPage();
    onPage(page);
    page.on('pageerror', (err) => this.deps.log.warn({ recorder: label, err: (err as Error).message }, 'recorder page error'));
    await page.exposeFunction('outpostChunk', handlers.chunk);
    if (handlers.track) await page.exposeFunction('outpostTrack', handlers.track);
    const q = new URLSearchParams({ authToken: token, mode: params.mode, width: String(params.width), height: String(params.height), fps: String(FPS) });
    await page.goto(`${this.baseUrl()}/realtime/kit/recorder?${q}`);
    await page.waitForFunction(() => (window as any).recorder?.ready || (window as any).recorder?.error, { timeout: JOIN_TIMEOUT_MS, polling: 100 });
    const error = await page.evaluate(() => (window as any).recorder.error as string | undefined);
    if (error) throw new Error(`the recorder could not join: ${error}`);
    return page;
  }

  /**
   * The composite view of a meeting as a live WebM stream (VP8/Opus, `FPS` frames per second):
   * the recorder page joins as a hidden participant and hands each MediaRecorder chunk to `sink`
   * as it is made (about every half second). Used by a meeting's livestream. `stop` flushes the
   * last chunk, leaves the meeting and closes the browser.
   */
  async compositeFeed(meeting: Meeting, label: string, size: { width: number; height: number }, sink: (chunk: Buffer) => void): Promise<CompositeFeed> {
    if (this.closed) throw new Error('the server is stopping');
    const token = await this.recorderToken(meeting, label);
    const dir = mkdtempSync(join(tmpdir(), 'outpost-feed-'));
    let browser: Browser | undefined;
    const close = async () => {
      this.feeds.delete(close);
      await browser?.close().catch(() => undefined);
      // Chromium's helpers may still be writing to the profile for a moment after close: retry, and
      // never let a leftover temporary folder fail the stop.
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
      } catch (err) {
        this.deps.log.warn({ dir, err: (err as Error).message }, 'recorder profile folder not removed');
      }
    };
    this.feeds.add(close);
    try {
      browser = await this.browser(dir);
      const page = await this.joinPage(browser, token, label, { mode: 'composite', ...size }, { chunk: (_file, b64) => sink(Buffer.from(b64, 'base64')) }, () => undefined);
      let stopped = false;
      return {
        others: () => page.evaluate(() => (window as any).recorder.others() as number).catch(() => 0),
        stop: async () => {
          if (stopped) return;
          stopped = true;
          await page.evaluate(() => (window as any).recorder.stop()).catch(() => undefined);
          await close();
        },
      };
    } catch (err) {
      await close();
      throw err;
    }
  }

  private async launch(r: Recording, meeting: Meeting): Promise<void> {
    const token = await this.recorderToken(meeting, r.id);
    const dir = mkdtempSync(join(tmpdir(), 'outpost-recording-'));
    const browser = await this.browser(dir).catch((err: unknown) => {
      rmSync(dir, { recursive: true, force: true });
      throw err;
    });
    const job: Job = { id: r.id, browser, page: undefined as unknown as Page, dir, files: new Map(), segments: [], busy: Promise.resolve(), closing: false };
    this.jobs.set(r.id, job);
    try {
      await this.joinPage(browser, token, r.id, { mode: r.type, width: r.video.width, height: r.video.height }, { chunk: (file, b64) => this.chunk(job, file, b64), track: (file, kind, participant) => this.trackFile(job, file, kind, participant) }, (page) => (job.page = page));
    } catch (err) {
      await this.cleanup(job);
      throw err;
    }
    if (this.closed || job.closing) return;
    const at = this.now().toISOString();
    const live = (await sessions.list(this.db, meeting.app_id, { filters: [{ field: 'meeting', op: 'eq', value: meeting.id }, { field: 'status', op: 'eq', value: 'LIVE' }], limit: 1 })).items[0];
    await this.save(r.id, r.app_id, (x) => ({ ...x, status: 'RECORDING', started_time: at, session_id: live?.id ?? null, intervals: [{ start: at }] }));
    job.timer = setInterval(() => void this.watch(job, r.app_id), ALONE_CHECK_MS);
    job.timer.unref();
    job.maxTimer = setTimeout(() => void this.action(r.app_id, r.id, 'stop', 'API_CALL').catch(() => undefined), r.max_seconds * 1000);
    job.maxTimer.unref();
  }

  /** Stops a recording once nobody but the recorder has been in the meeting for a while. */
  private async watch(job: Job, appId: string): Promise<void> {
    if (job.closing) return;
    const others = await job.page.evaluate(() => (window as any).recorder.others() as number).catch(() => 0);
    if (others > 0) {
      job.aloneSince = undefined;
      return;
    }
    job.aloneSince ??= Date.now();
    if (Date.now() - job.aloneSince >= ALONE_STOP_MS) await this.action(appId, job.id, 'stop', 'ALL_PEERS_LEFT').catch(() => undefined);
  }

  private chunk(job: Job, file: string, b64: string): void {
    if (!/^[A-Za-z0-9._-]{1,200}$/.test(file)) return;
    let f = job.files.get(file);
    if (!f) {
      f = { stream: createWriteStream(join(job.dir, file)), kind: file.startsWith('segment-') ? 'composite' : 'video' };
      job.files.set(file, f);
      if (f.kind === 'composite') job.segments.push(file);
    }
    f.stream.write(Buffer.from(b64, 'base64'));
  }

  private trackFile(job: Job, file: string, kind: 'audio' | 'video', participant: string): void {
    if (!/^[A-Za-z0-9._-]{1,200}$/.test(file)) return;
    const f = job.files.get(file);
    if (f) Object.assign(f, { kind, participant });
    else job.files.set(file, { stream: createWriteStream(join(job.dir, file)), kind, participant });
  }

  /** pause | resume | stop, checked against the current state (4xx for an action that does not apply). */
  async action(appId: string, id: string, action: 'pause' | 'resume' | 'stop', reason: 'API_CALL' | 'ALL_PEERS_LEFT' = 'API_CALL'): Promise<Recording> {
    const doc = await recordings.get(this.db, appId, id);
    if (!doc) throw apiError('rtk_not_found', 'Recording', id);
    const job = this.jobs.get(id);
    const r = doc.body;
    const allowed: Record<string, RecordingStatus[]> = { pause: ['RECORDING'], resume: ['PAUSED'], stop: ['INVOKED', 'RECORDING', 'PAUSED'] };
    if (!allowed[action].includes(r.status)) throw apiError('rtk_invalid', `cannot ${action} a recording that is ${r.status}`);
    if (!job && r.status !== 'INVOKED') throw apiError('rtk_conflict', `recording ${id} is not held by this process`);
    if (!job || (action === 'stop' && r.status === 'INVOKED')) {
      // Still joining: the stop wins; the launch sees `closing` and the recording ends with what it has (nothing).
      if (job) job.closing = true;
      return this.save(id, appId, (x) => ({ ...x, status: 'ERRORED', stopped_time: this.now().toISOString(), stop_reason: { reason }, error: 'stopped before recording started' }));
    }
    if (job.closing) throw apiError('rtk_invalid', `cannot ${action} a recording that is stopping`);
    const run = job.busy.then(async () => {
      const at = this.now().toISOString();
      if (action === 'pause') {
        await job.page.evaluate(() => (window as any).recorder.pause());
        const end = this.now().toISOString();
        return this.save(id, appId, (x) => ({ ...x, status: 'PAUSED', intervals: closeInterval(x.intervals, end) }));
      }
      if (action === 'resume') {
        await job.page.evaluate(() => (window as any).recorder.resume());
        return this.save(id, appId, (x) => ({ ...x, status: 'RECORDING', intervals: [...x.intervals, { start: at }] }));
      }
      job.closing = true;
      clearInterval(job.timer);
      clearTimeout(job.maxTimer);
      // The recorded time ends now, not when the files are finished.
      if (r.status === 'RECORDING') await job.page.evaluate(() => (window as any).recorder.pause());
      const end = this.now().toISOString();
      // A composite counts what its segments hold (the page's clock); a track recording its stretches.
      const pageMs = r.type === 'composite' ? await job.page.evaluate(() => (window as any).recorder.recordedMs() as number) : undefined;
      const saved = await this.save(id, appId, (x) => ({ ...x, status: 'UPLOADING', stopped_time: end, stop_reason: { reason }, intervals: closeInterval(x.intervals, end), recording_duration: pageMs !== undefined ? Math.round(pageMs / 100) / 10 : duration(closeInterval(x.intervals, end)) }));
      void this.finish(job, saved).catch((err: unknown) => this.fail(id, appId, err));
      return saved;
    });
    job.busy = run.catch(() => undefined);
    return run;
  }

  private async finish(job: Job, r: Recording): Promise<void> {
    try {
      await job.page.evaluate(() => (window as any).recorder.stop());
      await Promise.all([...job.files.values()].map((f) => new Promise<void>((res) => f.stream.end(res))));
      await job.browser.close().catch(() => undefined);
      const prefix = (r.file_name_prefix ?? '').replace(/[^A-Za-z0-9._-]/g, '_');
      const files: RecordingFile[] = [];
      if (r.type === 'composite') {
        const segs = job.segments.filter((s) => statSync(join(job.dir, s)).size > 0);
        if (segs.length === 0) throw new Error('the recorder produced no media');
        const name = `${prefix ? `${prefix}_` : ''}${r.id}.mp4`;
        const out = join(job.dir, 'out.mp4');
        const inputs = segs.flatMap((s) => ['-i', join(job.dir, s)]);
        const graph = `${segs.map((_, i) => `[${i}:v][${i}:a]`).join('')}concat=n=${segs.length}:v=1:a=1[cv][a];[cv]fps=${FPS}[v]`;
        await ffmpeg([...inputs, '-filter_complex', graph, '-map', '[v]', '-map', '[a]', '-c:v', 'libx264', '-preset', 'veryfast', '-pix_fmt', 'yuv420p', '-c:a', 'aac', '-b:a', '128k', '-movflags', '+faststart', out]);
        files.push(await this.store(r, out, name, 'composite'));
      } else {
        for (const [file, f] of job.files) {
          if (statSync(join(job.dir, file)).size === 0) continue;
          const name = `${prefix ? `${prefix}_` : ''}${r.id}_${file}`;
          const out = join(job.dir, `remux-${file}`);
          // MediaRecorder leaves the duration out of its WebM; a copy remux writes it in.
          await ffmpeg(['-i', join(job.dir, file), '-c', 'copy', out]);
          files.push(await this.store(r, out, name, f.kind === 'audio' ? 'audio' : 'video', f.participant));
        }
        if (files.length === 0) throw new Error('no tracks were recorded (nobody published media)');
      }
      const size = files.reduce((n, f) => n + f.size, 0);
      await this.save(r.id, r.app_id, (x) => ({ ...x, status: 'UPLOADED', files, file_size: size, output_file_name: files[0].name }));
    } finally {
      await this.cleanup(job);
    }
  }

  private async store(r: Recording, path: string, name: string, kind: RecordingFile['kind'], participant?: string): Promise<RecordingFile> {
    const key = `realtime-kit/recordings/${r.app_id}/${r.id}/${name}`;
    const size = statSync(path).size;
    await this.deps.blobs.putStream(key, Readable.from([await readFile(path)]));
    return { name, key, kind, size, ...(participant ? { participant } : {}) };
  }

  private async cleanup(job: Job): Promise<void> {
    clearInterval(job.timer);
    clearTimeout(job.maxTimer);
    this.jobs.delete(job.id);
    for (const f of job.files.values()) f.stream.destroy();
    await job.browser.close().catch(() => undefined);
    rmSync(job.dir, { recursive: true, force: true });
  }

  private async fail(id: string, appId: string, err: unknown): Promise<void> {
    const message = (err as Error)?.message ?? String(err);
    this.deps.log.warn({ recording: id, err: message }, 'recording failed');
    const job = this.jobs.get(id);
    if (job) await this.cleanup(job);
    await this.save(id, appId, (x) => ({ ...x, status: 'ERRORED', error: message, stopped_time: x.stopped_time ?? this.now().toISOString(), stop_reason: x.stop_reason ?? { reason: 'INTERNAL_ERROR' } })).catch(() => undefined);
  }

  /** Read-modify-write with a retry on a version conflict; sends the webhook when the status changed. */
  private async save(id: string, appId: string, fn: (r: Recording) => Recording): Promise<Recording> {
    for (let attempt = 0; ; attempt++) {
      const doc = await recordings.get(this.db, appId, id);
      if (!doc) throw apiError('rtk_not_found', 'Recording', id);
      const at = this.now();
      const next = { ...fn(doc.body), updated_at: at.toISOString() };
      try {
        await recordings.update(this.db, doc, next, at);
      } catch (err) {
        if (attempt < 3) continue;
        throw err;
      }
      if (next.status !== doc.body.status) await this.notify(next);
      return next;
    }
  }

  private async notify(r: Recording): Promise<void> {
    const meeting = await meetings.get(this.db, r.app_id, r.meeting_id);
    const app = await apps.findById(this.db, r.app_id);
    const v = this.view(r);
    await this.deps.deliveries.enqueue(r.app_id, 'recording.statusUpdate', {
      meeting: meeting ? { id: meeting.id, sessionId: r.session_id, title: meeting.body.title, status: meeting.body.status, createdAt: meeting.body.created_at, organizedBy: { id: app?.body.account_id ?? r.app_id, name: app?.body.name ?? '' } } : { id: r.meeting_id },
      recording: {
        recordingId: r.id,
        meetingId: r.meeting_id,
        sessionId: r.session_id,
        type: r.type,
        status: r.status,
        invokedTime: r.invoked_time,
        startedTime: r.started_time,
        stoppedTime: r.stopped_time,
        recordingDuration: r.recording_duration,
        fileSize: r.file_size,
        outputFileName: r.output_file_name,
        downloadUrl: v.download_url,
        downloadUrlExpiry: v.download_url_expiry,
        stopReason: r.stop_reason,
        ...(r.error ? { error: r.error } : {}),
      },
    });
  }

  /** Marks recordings a previous process left unfinished as ERRORED. */
  async endOrphans(): Promise<number> {
    let n = 0;
    for (const status of ['INVOKED', 'RECORDING', 'PAUSED', 'UPLOADING'] as const) {
      for (const doc of await recordings.findBy(this.db, 'status', status)) {
        if (this.jobs.has(doc.id)) continue;
        await this.save(doc.id, doc.body.app_id, (x) => ({ ...x, status: 'ERRORED', error: 'the process holding the recording stopped', stop_reason: x.stop_reason ?? { reason: 'INTERNAL_ERROR' }, stopped_time: x.stopped_time ?? this.now().toISOString() })).catch(() => undefined);
        n++;
      }
    }
    return n;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const job of [...this.jobs.values()]) await this.cleanup(job);
    for (const close of [...this.feeds]) await close();
  }

  /** GET of a signed file URL: checks the signature and expiry, then streams the blob. */
  async download(id: string, name: string, expires: number, sig: string): Promise<Response> {
    const path = `/realtime/kit/recordings/${id}/files/${encodeURIComponent(name)}`;
    if (!checkDownload(this.deps.key(), path, expires, sig, this.now().getTime())) throw apiError('rtk_forbidden', 'the download link is invalid or has expired');
    const doc = await recordings.findById(this.db, id);
    const file = doc?.body.files.find((f) => f.name === name);
    if (!doc || !file) throw apiError('rtk_not_found', 'Recording file', name);
    const type = file.kind === 'composite' ? 'video/mp4' : file.kind === 'audio' ? 'audio/webm' : 'video/webm';
    const stream = this.deps.blobs.stream(file.key);
    return raw(new Response(Readable.toWeb(stream) as ReadableStream, { headers: { 'content-type': type, 'content-length': String(file.size), 'content-disposition': `attachment; filename="${name}"` } }));
  }
}

function closeInterval(list: Recording['intervals'], at: string): Recording['intervals'] {
  return list.map((i) => (i.end ? i : { ...i, end: at }));
}

function duration(list: Recording['intervals']): number {
  const ms = list.reduce((n, i) => n + (new Date(i.end ?? i.start).getTime() - new Date(i.start).getTime()), 0);
  return Math.round(ms / 100) / 10;
}
