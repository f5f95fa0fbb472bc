/**
 * Livestreams (spec 000 "Meeting platform", livestream; semantics §2.8): `POST /livestreams`
 * creates an independent livestream with its own RTMP ingest (`ingest_server` + `stream_key`, the
 * key checked by rtmp.ts) whose media ffmpeg turns into HLS served at `playback_url`. Status IDLE →
 * LIVE while a publisher with the right key sends, back to IDLE when it stops (ERRORED if ffmpeg
 * fails); each change is a `livestreaming.statusUpdate` webhook. Ingest seconds are counted per
 * livestream for `/analytics/livestreams/overall`.
 * A meeting's livestream (`POST /meetings/{id}/livestreams`, `GET …/active-livestream`,
 * `POST …/active-livestream/stop`, `GET /meetings/{id}/livestreams`) is a livestream record of the
 * meeting with the same RTMP ingest and HLS output, fed by this process: the recorder's headless
 * page (recordings.ts `compositeFeed`) hands its composite WebM to an ffmpeg that encodes H.264/AAC
 * and publishes it to the ingest with the stream key. INVOKED while the page joins, LIVE once the
 * ingest receives, IDLE after the stop (ERRORED if the page or the encoder fails: the page cannot
 * join, the ingest refuses the encoder because another publisher holds the key, or the encoder
 * exits or drops its connection; the first failure's message is kept). It also stops by
 * itself when the meeting's session ends: once nobody but its page has been in the meeting for the
 * meeting's keep-alive time. A meeting with `live_stream_on_start` starts one when its session
 * starts (index.ts, through the room's `sessionStarted` hook, as `record_on_start`).
 * A session is one stretch on air (independent: LIVE until the publisher stops; a meeting's: from
 * INVOKED until it ends) with its times, ingest and viewer seconds and error; each is kept as a
 * record of its own. `GET /livestreams/{id}` answers `{livestream, session, paging}` with one
 * session per page, newest first; `GET /livestreams/{id}/active-livestream-session` the one on air
 * (404 when none); `GET /livestreams/sessions/{id}` one by id; `GET /analytics/livestreams/daywise`
 * counts them per UTC day (the day each went on air), for `start_time`/`end_time` (Unix seconds)
 * or `start_date`/`end_date` (YYYY-MM-DD, as `/analytics/daywise`), the last 30 days by default.
 * `GET /livestreams` filters by `status`, `exclude_meetings` and creation time (`start_time`/
 * `end_time`, ISO date-times, inclusive) and sorts by creation time (`sort_order` ASC or DSC).
 * HLS output (hlsRoot/<id>) stays playable off air for `--meetings-livestream-retention` seconds
 * after it was last written (default an hour) and is then deleted, by a periodic sweep and at
 * start (which also removes folders no livestream owns); a publisher with a wrong key leaves it.
 * LIMITATIONS: livestreams cannot be deleted (no such call), only their output expires; the
 * creation-time filter is applied in memory over the app's livestreams; `ingest_server` is plain
 * `rtmp://` on this host (no RTMPS); each livestream has its own port (kept across restarts when it is still free); viewer seconds are counted from playlist
 * requests (one per viewer poll), not from player sessions; the analytics `filters` parameter is
 * not supported; a meeting's livestream lives in the process that started it (a restart sets it
 * IDLE) and its ingest port is open only while it streams.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { readFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import type { AreaContext } from '../../../core/area.ts';
import { apiError } from '../../../core/errors.ts';
import { uuid } from '../../../core/ids.ts';
import type { Logger } from '../../../core/log.ts';
import { raw } from '../../../core/router.ts';
import { defineCollection } from '../../../core/storage/collection.ts';
import { qInt, qString } from '../../../core/validate.ts';
import { MAX_DAYS, parseDay } from './analytics.ts';
import { PageQuery, pageOf, paged, route } from '../http.ts';
import { apps, meetings, type Meeting } from '../store.ts';
import type { Deliveries } from '../webhooks.ts';
import { RtmpIngest } from './rtmp.ts';
import { localPort } from './recording-routes.ts';
import type { CompositeFeed, Recorder } from './recordings.ts';

const BASE = '/accounts/:account_id/realtime/kit/:app_id';
const HLS_SEGMENT_SECS = 2;

export interface Livestream {
  id: string;
  app_id: string;
  name: string | null;
  meeting_id: string | null;
  stream_key: string;
  ingest_port: number;
  status: 'IDLE' | 'LIVE' | 'ERRORED' | 'INVOKED';
  disabled: boolean;
  error?: string;
  /** Finished stretches of ingest, seconds; the current one is added when it ends. */
  ingest_seconds: number;
  viewer_seconds: number;
  live_since?: string;
  /** The latest session of the livestream (one stretch from INVOKED/LIVE back to IDLE/ERRORED). */
  session?: LivestreamSession;
  created_at: string;
  updated_at: string;
}

export interface LivestreamSession {
  id: string;
  invoked_time: string;
  started_time: string | null;
  stopped_time: string | null;
  /** Finished ingest of this session, seconds; the running stretch is added in the view. */
  ingest_seconds: number;
  viewer_seconds: number;
  err_message: string | null;
  created_at: string;
  updated_at: string;
}

export const livestreams = defineCollection<Livestream, 'meeting' | 'status'>({
  kind: 'rtk_livestream',
  indexes: { meeting: (l) => l.meeting_id ?? '', status: (l) => l.status },
});

/** Every session of every livestream, kept after the next one starts (scope: the app). */
export interface LivestreamSessionRecord extends LivestreamSession {
  livestream_id: string;
}
export const livestreamSessions = defineCollection<LivestreamSessionRecord, 'livestream'>({
  kind: 'rtk_livestream_session',
  indexes: { livestream: (s) => s.livestream_id },
});

const CreateBody = z.object({ name: z.string().max(255).nullable().optional() });
const isoTime = (name: string) => qString(z.string().datetime({ offset: true, error: `${name} must be an ISO 8601 date-time such as 2026-01-31T12:00:00Z` })).optional();
const ListQuery = z.object({
  ...PageQuery,
  exclude_meetings: z.enum(['true', 'false']).optional(),
  status: z.enum(['IDLE', 'LIVE', 'ERRORED', 'INVOKED']).optional(),
  start_time: isoTime('start_time'),
  end_time: isoTime('end_time'),
  // The official client sends `DSC`; `DESC` is accepted as well.
  sort_order: qString(z.string().transform((v) => v.toUpperCase()).pipe(z.enum(['ASC', 'DSC', 'DESC'], { error: 'sort_order must be ASC or DSC' }))).optional(),
});
const VideoConfig = z.object({ width: z.number().int().min(160).max(1920).optional(), height: z.number().int().min(120).max(1080).optional() }).passthrough();
const MeetingBody = z.object({ name: z.string().max(255).nullable().optional(), video_config: VideoConfig.optional() });
const AnalyticsQuery = z.object({ start_time: qInt(z.number().int().min(0)).optional(), end_time: qInt(z.number().int().min(0)).optional() });
const DaywiseQuery = AnalyticsQuery.extend({ start_date: qString(z.string().max(10)).optional(), end_date: qString(z.string().max(10)).optional() });

export interface LivestreamDeps {
  ctx: AreaContext;
  log: Logger;
  deliveries: Deliveries;
  hlsRoot: string;
  /** Origin for playback URLs (the API). */
  baseUrl: () => string;
  /** Tells the origin which port the API answered on (configured port 0). */
  learnPort: (port: number | undefined) => void;
  /** The composite view of a meeting (the recorder's page), for a meeting's livestream. */
  recorder: Pick<Recorder, 'compositeFeed'>;
}

/** A meeting's livestream being published from this process. */
interface MeetingJob {
  feed?: CompositeFeed;
  publisher?: ChildProcess;
  stopping: boolean;
  /** Checks whether anyone but the feed is still in the meeting. */
  watch?: NodeJS.Timeout;
  aloneSince?: number;
}

/** Statuses of a meeting livestream that is on (or coming on). */
const ACTIVE: Livestream['status'][] = ['INVOKED', 'LIVE'];
/** How long a stop waits for the encoder and the ingest to drain before killing them. */
const STOP_WAIT_MS = 10_000;
/** How often a meeting livestream checks whether anyone but its feed is still in the meeting. */
const ALONE_CHECK_MS = 1000;
/** Default time a livestream's HLS output stays playable once it is off air, seconds. */
export const DEFAULT_HLS_RETENTION_SECS = 3600;

/** When a livestream's HLS folder was last written (the folder or its playlist), ms since the epoch. */
async function lastWrite(dir: string): Promise<number | undefined> {
  const d = await stat(dir).catch(() => undefined);
  if (!d) return undefined;
  const p = await stat(join(dir, 'index.m3u8')).catch(() => undefined);
  return Math.max(d.mtimeMs, p?.mtimeMs ?? 0);
}

/**
 * ffmpeg arguments that encode the composite's WebM (VP8/Opus from MediaRecorder, stdin) to
 * H.264/AAC in FLV for an RTMP ingest: constant `fps`, a keyframe every HLS segment so the
 * ingest can cut segments without re-encoding. Also used by the benchmark for its peer.
 */
export function publishArgs(fps: number, bitrate: string): string[] {
  return ['-vf', `fps=${fps}`, '-c:v', 'libx264', '-preset', 'veryfast', '-tune', 'zerolatency', '-pix_fmt', 'yuv420p', '-b:v', bitrate, '-maxrate', bitrate, '-bufsize', `${parseInt(bitrate, 10) * 2}k`, '-g', String(fps * HLS_SEGMENT_SECS), '-keyint_min', String(fps * HLS_SEGMENT_SECS), '-sc_threshold', '0', '-c:a', 'aac', '-b:a', '128k', '-ar', '48000', '-f', 'flv'];
}
export const PUBLISH_FPS = 25;
export const PUBLISH_BITRATE = '2500k';

function newSession(at: Date): LivestreamSession {
  const ts = at.toISOString();
  return { id: uuid(), invoked_time: ts, started_time: null, stopped_time: null, ingest_seconds: 0, viewer_seconds: 0, err_message: null, created_at: ts, updated_at: ts };
}

export class Livestreams {
  private readonly ingests = new Map<string, RtmpIngest>();
  private readonly jobs = new Map<string, MeetingJob>();
  /** Called when an ingest's publisher has gone and its status is written. */
  private readonly endedWaiters = new Map<string, () => void>();
  /** Meetings whose livestream is being created (one at a time per meeting). */
  private readonly starting = new Set<string>();
  /** Copies of each livestream's latest session to its record, one at a time per livestream. */
  private readonly syncs = new Map<string, Promise<void>>();
  private sweeper?: NodeJS.Timeout;
  private sweeping?: Promise<number>;

  constructor(private readonly deps: LivestreamDeps) {}

  private get db() {
    return this.deps.ctx.database.db;
  }
  private host(): string {
    const h = this.deps.ctx.config.host;
    return h === '0.0.0.0' || h === '::' || !h ? '127.0.0.1' : h;
  }
  private dir(id: string): string {
    return join(this.deps.hlsRoot, id);
  }

  view(l: Livestream): Record<string, unknown> {
    const host = this.host().includes(':') ? `[${this.host()}]` : this.host();
    return {
      id: l.id,
      name: l.name,
      meeting_id: l.meeting_id,
      ingest_server: `rtmp://${host}:${l.ingest_port}/live`,
      stream_key: l.stream_key,
      playback_url: `${this.deps.baseUrl()}/realtime/kit/livestreams/${l.id}/hls/index.m3u8`,
      status: l.status,
      disabled: l.disabled,
      ...(l.error ? { error: l.error } : {}),
      created_at: l.created_at,
      updated_at: l.updated_at,
    };
  }

  /** A session as the API shows it; an open one counts its running ingest up to now. */
  sessionView(s: LivestreamSessionRecord): Record<string, unknown> {
    const running = !s.stopped_time && s.started_time ? Math.max(0, (this.deps.ctx.clock.now().getTime() - Date.parse(s.started_time)) / 1000) : 0;
    return {
      id: s.id,
      livestream_id: s.livestream_id,
      invoked_time: s.invoked_time,
      started_time: s.started_time,
      stopped_time: s.stopped_time,
      ingest_seconds: Math.round(s.ingest_seconds + running),
      viewer_seconds: Math.round(s.viewer_seconds),
      err_message: s.err_message,
      created_at: s.created_at,
      updated_at: s.updated_at,
    };
  }

  /**
   * Writes the livestream's latest session (kept on the livestream while it changes) to its own
   * record. Runs one at a time per livestream and reads the livestream afresh, so the last copy
   * written is the newest state.
   */
  private syncSession(appId: string, id: string): Promise<void> {
    const run = async () => {
      const l = (await livestreams.get(this.db, appId, id))?.body;
      if (!l?.session) return;
      const body: LivestreamSessionRecord = { ...l.session, livestream_id: id };
      const at = this.deps.ctx.clock.now();
      for (let attempt = 0; attempt < 4; attempt++) {
        const doc = await livestreamSessions.get(this.db, appId, body.id);
        try {
          if (doc) await livestreamSessions.update(this.db, doc, body, at);
          else await livestreamSessions.insert(this.db, appId, body.id, body, at);
          return;
        } catch {
          continue;
        }
      }
    };
    const next = (this.syncs.get(id) ?? Promise.resolve()).then(run).catch((err: unknown) => this.deps.log.warn({ livestream: id, err: (err as Error).message }, 'livestream session not saved'));
    this.syncs.set(id, next);
    void next.then(() => {
      if (this.syncs.get(id) === next) this.syncs.delete(id);
    });
    return next;
  }

  /** The livestream's open session (INVOKED or LIVE, not stopped), if any. */
  async activeSession(appId: string, id: string): Promise<LivestreamSessionRecord | undefined> {
    const l = (await livestreams.get(this.db, appId, id))?.body;
    if (!l?.session || l.session.stopped_time) return undefined;
    return (await livestreamSessions.get(this.db, appId, l.session.id))?.body ?? { ...l.session, livestream_id: id };
  }

  async create(appId: string, name: string | null): Promise<Livestream> {
    const id = uuid();
    const at = this.deps.ctx.clock.now();
    const l: Livestream = { id, app_id: appId, name, meeting_id: null, stream_key: randomBytes(16).toString('hex'), ingest_port: 0, status: 'IDLE', disabled: false, ingest_seconds: 0, viewer_seconds: 0, created_at: at.toISOString(), updated_at: at.toISOString() };
    l.ingest_port = await this.open(l);
    await livestreams.insert(this.db, appId, id, l, at);
    return l;
  }

  private async open(l: Livestream): Promise<number> {
    const dir = this.dir(l.id);
    // An ingest event can outlive the storage when the server stops mid-change: logged, not thrown.
    const lost = (err: unknown) => this.deps.log.warn({ livestream: l.id, err: (err as Error).message }, 'livestream status not saved');
    const ingest = new RtmpIngest({
      host: this.host(),
      port: l.ingest_port,
      streamKey: l.stream_key,
      log: this.deps.log,
      // The previous stretch's output stays playable until a publisher with the key replaces it.
      accepted: () => {
        rmSync(dir, { recursive: true, force: true });
        mkdirSync(dir, { recursive: true });
      },
      outputArgs: () => {
        mkdirSync(dir, { recursive: true });
        // Copy what the publisher sends when it is H.264/AAC (the usual RTMP case): no re-encode.
        return ['-c', 'copy', '-f', 'hls', '-hls_time', String(HLS_SEGMENT_SECS), '-hls_list_size', '6', '-hls_flags', 'delete_segments+independent_segments', '-hls_segment_filename', join(dir, 'seg-%05d.ts'), join(dir, 'index.m3u8')];
      },
      events: {
        live: () => void this.status(l.app_id, l.id, 'LIVE').catch(lost),
        ended: (error) => {
          // A meeting's ingest loses its publisher by itself only when the encoder failed; a stop sets `stopping` first.
          const job = this.jobs.get(l.id);
          const failed = error ?? (job && !job.stopping ? 'the livestream encoder disconnected from the ingest' : undefined);
          // Only a livestream on air changes: one already ended (ERRORED by its publisher's failure) keeps its status.
          void this.status(l.app_id, l.id, failed ? 'ERRORED' : 'IDLE', failed, ACTIVE)
            .catch(lost)
            .finally(() => {
              this.endedWaiters.get(l.id)?.();
              this.endedWaiters.delete(l.id);
            });
        },
        refused: (reason) => this.deps.log.info({ livestream: l.id, reason }, 'RTMP publisher refused'),
      },
    });
    const port = await ingest.listen();
    this.ingests.set(l.id, ingest);
    return port;
  }

  /** Sets the status (a webhook when it changes); with `from`, only a livestream in one of those statuses. */
  private async status(appId: string, id: string, status: Livestream['status'], error?: string, from?: Livestream['status'][]): Promise<void> {
    for (let attempt = 0; attempt < 4; attempt++) {
      const doc = await livestreams.get(this.db, appId, id);
      if (!doc) return;
      if (from && !from.includes(doc.body.status)) return;
      const at = this.deps.ctx.clock.now();
      const prev = doc.body;
      const ts = at.toISOString();
      const next: Livestream = { ...prev, status, updated_at: ts, ...(error ? { error } : {}) };
      const open = prev.session && !prev.session.stopped_time ? prev.session : undefined;
      if (status === 'LIVE') {
        next.live_since = ts;
        // A meeting's livestream opened its session at INVOKED; an independent one opens it here.
        next.session = open ? { ...open, started_time: open.started_time ?? ts, updated_at: ts } : newSession(at);
        next.session.started_time ??= ts;
      } else if (status === 'INVOKED') {
        next.session = open ?? newSession(at);
      } else {
        const stretch = prev.live_since ? (at.getTime() - Date.parse(prev.live_since)) / 1000 : 0;
        if (prev.live_since) {
          next.ingest_seconds = prev.ingest_seconds + stretch;
          delete next.live_since;
        }
        if (open) next.session = { ...open, stopped_time: ts, ingest_seconds: open.ingest_seconds + stretch, err_message: error ?? null, updated_at: ts };
      }
      try {
        await livestreams.update(this.db, doc, next, at);
      } catch {
        continue;
      }
      if (next.session) await this.syncSession(appId, id);
      if (prev.status !== status) {
        const v = this.view(next);
        const m = next.meeting_id ? (await meetings.get(this.db, appId, next.meeting_id))?.body : undefined;
        const meeting = next.meeting_id ? { id: next.meeting_id, title: m?.title ?? null, status: m?.status ?? null, createdAt: m?.created_at ?? null } : null;
        await this.deps.deliveries.enqueue(appId, 'livestreaming.statusUpdate', { streamId: id, status: status === 'ERRORED' ? 'OFFLINE' : status, manualIngest: !next.meeting_id, playbackUrl: v.playback_url, ingestServer: v.ingest_server, streamKey: next.stream_key, meeting, ...(error ? { error } : {}) });
      }
      return;
    }
  }

  /** The meeting's livestream that is INVOKED or LIVE, if any. */
  async activeFor(appId: string, meetingId: string): Promise<Livestream | undefined> {
    const { items } = await livestreams.list(this.db, appId, { filters: [{ field: 'meeting', op: 'eq', value: meetingId }, { field: 'status', op: 'in', value: ACTIVE }], limit: 1 });
    return items[0]?.body;
  }

  /**
   * Starts a meeting's livestream: a livestream record of the meeting with its own RTMP ingest
   * (INVOKED), then in the background the recorder's composite view of the meeting is encoded by
   * ffmpeg and published to that ingest, which makes it LIVE and writes the HLS playback.
   */
  async startForMeeting(meeting: Meeting, opts: { name: string | null; width: number; height: number }): Promise<Livestream> {
    if (meeting.status !== 'ACTIVE') throw apiError('rtk_conflict', `meeting ${meeting.id} is INACTIVE`);
    if (this.starting.has(meeting.id) || (await this.activeFor(meeting.app_id, meeting.id))) throw apiError('rtk_conflict', `meeting ${meeting.id} already has an active livestream`);
    this.starting.add(meeting.id);
    try {
      const id = uuid();
      const at = this.deps.ctx.clock.now();
      const l: Livestream = { id, app_id: meeting.app_id, name: opts.name ?? meeting.title ?? null, meeting_id: meeting.id, stream_key: randomBytes(16).toString('hex'), ingest_port: 0, status: 'INVOKED', disabled: false, ingest_seconds: 0, viewer_seconds: 0, session: newSession(at), created_at: at.toISOString(), updated_at: at.toISOString() };
      l.ingest_port = await this.open(l);
      const job: MeetingJob = { stopping: false };
      this.jobs.set(id, job);
      try {
        await livestreams.insert(this.db, meeting.app_id, id, l, at);
      } catch (err) {
        await this.release(id);
        throw err;
      }
      await this.syncSession(meeting.app_id, id);
      void this.publish(l, meeting, job, opts).catch(async (err: unknown) => {
        const message = (err as Error)?.message ?? String(err);
        this.deps.log.warn({ livestream: id, err: message }, 'meeting livestream failed');
        await this.teardown(id, job);
        if (!job.stopping) await this.status(l.app_id, id, 'ERRORED', message, ACTIVE);
        await this.release(id);
      });
      return l;
    } finally {
      this.starting.delete(meeting.id);
    }
  }

  private async publish(l: Livestream, meeting: Meeting, job: MeetingJob, opts: { width: number; height: number }): Promise<void> {
    const host = this.host().includes(':') ? `[${this.host()}]` : this.host();
    const args = ['-hide_banner', '-loglevel', 'error', '-f', 'webm', '-i', 'pipe:0', ...publishArgs(PUBLISH_FPS, PUBLISH_BITRATE), `rtmp://${host}:${l.ingest_port}/live/${l.stream_key}`];
    const ff = spawn('ffmpeg', args, { stdio: ['pipe', 'ignore', 'pipe'] });
    job.publisher = ff;
    let err = '';
    ff.stderr!.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
    ff.stdin!.on('error', () => undefined);
    const exited = new Promise<number | null>((resolve) => {
      ff.on('error', (e) => {
        err = `ffmpeg could not start (${e.message}); install the Debian package 'ffmpeg'`;
        resolve(-1);
      });
      ff.on('close', resolve);
    });
    const feed = await this.deps.recorder.compositeFeed(meeting, `livestream-${l.id}`, opts, (chunk) => {
      if (!job.stopping && ff.stdin!.writable) ff.stdin!.write(chunk);
    });
    job.feed = feed;
    if (job.stopping) {
      await feed.stop();
      return;
    }
    job.watch = setInterval(() => void this.watch(l, meeting, job), ALONE_CHECK_MS);
    job.watch.unref();
    const code = await exited;
    if (job.stopping) return;
    throw new Error(`the livestream encoder stopped (${code}): ${err.trim() || 'no output'}`);
  }

  /**
   * Ends the livestream with the meeting's session: once nobody but the feed has been in the
   * meeting for the meeting's keep-alive time (the time after which its session ends when the
   * last participant leaves; capped like the session's), it stops as `active-livestream/stop` does.
   */
  private async watch(l: Livestream, meeting: Meeting, job: MeetingJob): Promise<void> {
    if (job.stopping || !job.feed) return;
    const others = await job.feed.others();
    if (others > 0) {
      job.aloneSince = undefined;
      return;
    }
    job.aloneSince ??= Date.now();
    const keepSecs = Math.min(meeting.session_keep_alive_time_in_secs ?? 60, this.deps.ctx.config.meetingsKeepAliveCap ?? Infinity);
    if (Date.now() - job.aloneSince < keepSecs * 1000 || job.stopping) return;
    this.deps.log.info({ livestream: l.id, meeting: meeting.id }, 'meeting livestream stops: everyone left');
    await this.stopForMeeting(l.app_id, meeting.id).catch(() => undefined);
  }

  /** Stops the feed and lets the encoder finish what it has (killed after a while). */
  private async teardown(id: string, job: MeetingJob): Promise<void> {
    clearInterval(job.watch);
    await job.feed?.stop();
    const ff = job.publisher;
    if (ff && ff.exitCode === null && ff.signalCode === null) {
      const gone = new Promise<void>((r) => ff.once('close', () => r()));
      ff.stdin!.end();
      const t = setTimeout(() => ff.kill('SIGKILL'), STOP_WAIT_MS);
      await gone;
      clearTimeout(t);
    }
    this.jobs.delete(id);
  }

  /** Closes a meeting livestream's ingest (it has no publisher left). */
  private async release(id: string): Promise<void> {
    this.jobs.delete(id);
    const ingest = this.ingests.get(id);
    this.ingests.delete(id);
    await ingest?.close();
  }

  /** `active-livestream/stop`: ends the meeting's livestream; answers once it is IDLE. */
  async stopForMeeting(appId: string, meetingId: string): Promise<void> {
    const l = await this.activeFor(appId, meetingId);
    if (!l) throw apiError('rtk_not_found', 'Active livestream for meeting', meetingId);
    const job = this.jobs.get(l.id);
    if (!job) {
      // Not published by this process (it restarted): only the record is left to end.
      await this.status(appId, l.id, 'IDLE');
      return;
    }
    if (job.stopping) throw apiError('rtk_conflict', `livestream ${l.id} is already stopping`);
    job.stopping = true;
    const ingest = this.ingests.get(l.id);
    const ended = ingest?.busy ? new Promise<void>((r) => this.endedWaiters.set(l.id, r)) : undefined;
    await this.teardown(l.id, job);
    if (ended) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([ended, new Promise<void>((r) => (timer = setTimeout(r, STOP_WAIT_MS)))]);
      clearTimeout(timer);
    }
    this.endedWaiters.delete(l.id);
    await this.release(l.id);
    // The ingest reports IDLE when its publisher goes; a stream that never went live is set here.
    const doc = await livestreams.get(this.db, appId, l.id);
    if (doc && ACTIVE.includes(doc.body.status)) await this.status(appId, l.id, 'IDLE');
  }

  /** Reopens the ingest of every livestream on its port after a restart. */
  async start(): Promise<void> {
    for (const doc of await livestreams.all(this.db, null)) {
      const l = doc.body;
      if (l.status === 'LIVE' || l.status === 'INVOKED') await this.status(l.app_id, l.id, 'IDLE');
      // A livestream stored before sessions had records of their own: its latest one gets one.
      else if (l.session && !(await livestreamSessions.get(this.db, l.app_id, l.session.id))) await this.syncSession(l.app_id, l.id);
      // A meeting's livestream has an ingest only while this process publishes it.
      if (l.meeting_id) continue;
      await this.open(l).catch((err: unknown) => {
        this.deps.log.warn({ livestream: l.id, err: (err as Error).message }, 'livestream ingest port could not be reopened');
        void this.status(l.app_id, l.id, 'ERRORED', `ingest port ${l.ingest_port} is taken`);
      });
    }
    const removed = await this.sweep();
    if (removed > 0) this.deps.log.info({ folders: removed }, 'removed HLS output of livestreams off air for longer than the retention');
    const every = Math.min(60_000, Math.max(1000, this.retentionMs() / 2));
    this.sweeper = setInterval(() => void this.sweep(), every);
    this.sweeper.unref();
  }

  private retentionMs(): number {
    return Math.max(0, this.deps.ctx.config.meetingsLivestreamRetention ?? DEFAULT_HLS_RETENTION_SECS) * 1000;
  }

  /**
   * Deletes the HLS output (hlsRoot/<id>) of every livestream that is not on air and whose output
   * was last written longer than the retention ago (the end of its last stretch: ffmpeg rewrites
   * the playlist every segment while it streams), and any folder no livestream owns. A livestream
   * that goes on air again starts a fresh folder. One sweep at a time; answers how many it removed.
   */
  sweep(): Promise<number> {
    this.sweeping ??= this.sweepOnce().finally(() => (this.sweeping = undefined));
    return this.sweeping;
  }

  private async sweepOnce(): Promise<number> {
    const root = this.deps.hlsRoot;
    const names = await readdir(root).catch(() => [] as string[]);
    const retention = this.retentionMs();
    let removed = 0;
    for (const name of names) {
      const doc = await livestreams.findById(this.db, name).catch(() => undefined);
      if (doc && ACTIVE.includes(doc.body.status)) continue;
      const written = await lastWrite(join(root, name));
      // File times are wall-clock times, so they are compared with the wall clock.
      if (doc && written !== undefined && Date.now() - written < retention) continue;
      // Checked again just before the removal, in the same tick: a publisher connecting later makes its folder anew.
      if (this.ingests.get(name)?.busy || this.jobs.has(name)) continue;
      try {
        rmSync(join(root, name), { recursive: true, force: true });
        removed++;
      } catch (err) {
        this.deps.log.warn({ livestream: name, err: (err as Error).message }, 'livestream HLS output could not be removed');
      }
    }
    return removed;
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    await this.sweeping;
    for (const [id, job] of this.jobs) {
      job.stopping = true;
      clearInterval(job.watch);
      job.publisher?.kill('SIGKILL');
      await job.feed?.stop();
      this.jobs.delete(id);
    }
    for (const i of this.ingests.values()) await i.close();
    this.ingests.clear();
  }

  async hls(id: string, file: string): Promise<Response> {
    if (!/^(index\.m3u8|seg-\d{5}\.ts)$/.test(file)) throw apiError('rtk_not_found', 'Livestream file', file);
    const doc = await livestreams.findById(this.db, id);
    if (!doc) throw apiError('rtk_not_found', 'Livestream', id);
    const body = await readFile(join(this.dir(id), file)).catch(() => undefined);
    if (!body) throw apiError('rtk_not_found', 'Livestream file', file);
    if (file === 'index.m3u8') {
      // Each playlist poll stands for one viewer watching one target duration.
      const b = doc.body;
      const session = b.session && !b.session.stopped_time ? { ...b.session, viewer_seconds: b.session.viewer_seconds + HLS_SEGMENT_SECS } : b.session;
      const saved = await livestreams.update(this.db, doc, { ...b, viewer_seconds: b.viewer_seconds + HLS_SEGMENT_SECS, ...(session ? { session } : {}) }, this.deps.ctx.clock.now()).catch(() => undefined);
      if (saved && session && !session.stopped_time) void this.syncSession(b.app_id, id);
    }
    return raw(new Response(body, { headers: { 'content-type': file.endsWith('.m3u8') ? 'application/vnd.apple.mpegurl' : 'video/mp2t', 'cache-control': file.endsWith('.m3u8') ? 'no-cache' : 'max-age=60' } }));
  }

  /**
   * The UTC days a daywise request covers: `start_date`/`end_date` (YYYY-MM-DD, as
   * `/analytics/daywise`) or `start_time`/`end_time` (Unix seconds); by default the last 30 days.
   */
  private dayRange(q: z.infer<typeof DaywiseQuery>): { start: number; end: number } {
    const day = (ms: number) => Math.floor(ms / 86_400_000) * 86_400_000;
    let start: number | undefined;
    let end: number | undefined;
    if (q.start_date !== undefined) {
      start = parseDay(q.start_date);
      if (start === undefined) throw apiError('rtk_invalid', 'start_date must be a date as YYYY-MM-DD');
    } else if (q.start_time !== undefined) start = day(q.start_time * 1000);
    if (q.end_date !== undefined) {
      end = parseDay(q.end_date);
      if (end === undefined) throw apiError('rtk_invalid', 'end_date must be a date as YYYY-MM-DD');
    } else if (q.end_time !== undefined) end = day(q.end_time * 1000);
    if (q.start_time !== undefined && q.end_time !== undefined && q.start_time > q.end_time) throw apiError('rtk_invalid', 'start_time must not be after end_time');
    end ??= day(this.deps.ctx.clock.now().getTime());
    start ??= end - 29 * 86_400_000;
    if (end < start) throw apiError('rtk_invalid', 'the end of the range is before its start');
    if ((end - start) / 86_400_000 + 1 > MAX_DAYS) throw apiError('rtk_invalid', `at most ${MAX_DAYS} days per request`);
    return { start, end };
  }

  /** Sessions per UTC day (the day each went on air, or was invoked if it never did), both ends inclusive. */
  private async daywise(appId: string, startMs: number, endMs: number): Promise<Record<string, unknown>[]> {
    const days = new Map<string, { count: number; ingest: number; viewer: number }>();
    for (let t = startMs; t <= endMs; t += 86_400_000) days.set(new Date(t).toISOString().slice(0, 10), { count: 0, ingest: 0, viewer: 0 });
    for (const doc of await livestreamSessions.all(this.db, appId)) {
      const v = this.sessionView(doc.body);
      const d = days.get(String(doc.body.started_time ?? doc.body.invoked_time).slice(0, 10));
      if (!d) continue;
      d.count++;
      d.ingest += v.ingest_seconds as number;
      d.viewer += v.viewer_seconds as number;
    }
    return [...days.entries()].map(([date, d]) => ({ date, count: d.count, total_ingest_seconds: d.ingest, total_viewer_seconds: d.viewer }));
  }

  mount(ctx: AreaContext): void {
    const db = ctx.database.db;
    const appOf = async (params: Record<string, string>) => {
      const doc = await apps.get(db, params.account_id, params.app_id);
      if (!doc) throw apiError('rtk_app_not_found', params.app_id);
      return doc;
    };
    const meetingOf = async (params: Record<string, string>) => {
      await appOf(params);
      const doc = await meetings.get(db, params.app_id, params.meeting_id);
      if (!doc) throw apiError('rtk_not_found', 'Meeting', params.meeting_id);
      return doc.body;
    };
    route(ctx, { method: 'POST', path: `${BASE}/livestreams`, operationId: 'rtk-livestream-create', summary: 'Create an independent livestream (RTMP ingest, HLS playback)', level: 'edit', body: CreateBody, bodyOptional: true, status: 201 }, async ({ c, params, body }) => {
      this.deps.learnPort(localPort(c));
      await appOf(params);
      return this.view(await this.create(params.app_id, body?.name ?? null));
    });
    route(ctx, { method: 'GET', path: `${BASE}/livestreams`, operationId: 'rtk-livestreams-list', summary: 'List livestreams', level: 'read', query: ListQuery }, async ({ c, params, query }) => {
      this.deps.learnPort(localPort(c));
      await appOf(params);
      const { page, perPage, offset } = pageOf(query);
      const filters: { field: 'meeting' | 'status'; op: 'eq'; value: string }[] = [];
      if (query.exclude_meetings === 'true') filters.push({ field: 'meeting', op: 'eq', value: '' });
      if (query.status) filters.push({ field: 'status', op: 'eq', value: query.status });
      const direction = query.sort_order === 'ASC' ? 'asc' : 'desc';
      if (query.start_time || query.end_time) {
        // Creation time, both ends inclusive; applied in memory over the filtered set (as the meetings list does).
        const from = query.start_time ? Date.parse(query.start_time) : -Infinity;
        const to = query.end_time ? Date.parse(query.end_time) : Infinity;
        if (from > to) throw apiError('rtk_invalid', 'start_time must not be after end_time');
        const all = (await livestreams.list(db, params.app_id, { filters, order: 'created_on', direction })).items.filter((d) => {
          const t = Date.parse(d.body.created_at);
          return t >= from && t <= to;
        });
        return paged({ items: all.slice(offset, offset + perPage).map((d) => this.view(d.body)), total: all.length, page, perPage });
      }
      const { items, total } = await livestreams.list(db, params.app_id, { filters, order: 'created_on', direction, limit: perPage, offset });
      return paged({ items: items.map((d) => this.view(d.body)), total, page, perPage });
    });
    route(ctx, { method: 'GET', path: `${BASE}/livestreams/:livestream_id`, operationId: 'rtk-livestream-get', summary: 'Get a livestream with one of its sessions (newest first, one per page)', level: 'read', query: z.object(PageQuery) }, async ({ c, params, query }) => {
      this.deps.learnPort(localPort(c));
      await appOf(params);
      const doc = await livestreams.get(db, params.app_id, params.livestream_id);
      if (!doc) throw apiError('rtk_not_found', 'Livestream', params.livestream_id);
      // `session` is the session at the page's offset, newest first.
      const { offset } = pageOf(query);
      const { items, total } = await livestreamSessions.list(db, params.app_id, { filters: [{ field: 'livestream', op: 'eq', value: doc.body.id }], order: 'created_on', direction: 'desc', limit: 1, offset });
      const session = items[0] ? this.sessionView(items[0].body) : null;
      return { livestream: this.view(doc.body), session, paging: { total_count: total, start_offset: session ? offset + 1 : offset, end_offset: session ? offset + 1 : offset } };
    });
    route(ctx, { method: 'GET', path: `${BASE}/livestreams/:livestream_id/active-livestream-session`, operationId: 'rtk-livestream-active-session', summary: 'A livestream with its session on air', level: 'read' }, async ({ c, params }) => {
      this.deps.learnPort(localPort(c));
      await appOf(params);
      const doc = await livestreams.get(db, params.app_id, params.livestream_id);
      if (!doc) throw apiError('rtk_not_found', 'Livestream', params.livestream_id);
      const s = await this.activeSession(params.app_id, doc.body.id);
      if (!s) throw apiError('rtk_not_found', 'Active session of livestream', params.livestream_id);
      return { livestream: this.view(doc.body), session: this.sessionView(s) };
    });
    route(ctx, { method: 'GET', path: `${BASE}/livestreams/sessions/:livestream_session_id`, operationId: 'rtk-livestream-session-get', summary: 'One livestream session', level: 'read' }, async ({ params }) => {
      await appOf(params);
      const doc = await livestreamSessions.get(db, params.app_id, params.livestream_session_id);
      if (!doc) throw apiError('rtk_not_found', 'Livestream session', params.livestream_session_id);
      return this.sessionView(doc.body);
    });
    route(ctx, { method: 'POST', path: `${BASE}/meetings/:meeting_id/livestreams`, operationId: 'rtk-meeting-livestream-start', summary: "Start a meeting's livestream (its composite view as HLS)", level: 'edit', body: MeetingBody, bodyOptional: true, status: 201 }, async ({ c, params, body }) => {
      this.deps.learnPort(localPort(c));
      const meeting = await meetingOf(params);
      const l = await this.startForMeeting(meeting, { name: body?.name ?? null, width: body?.video_config?.width ?? 1280, height: body?.video_config?.height ?? 720 });
      return this.view(l);
    });
    route(ctx, { method: 'GET', path: `${BASE}/meetings/:meeting_id/livestreams`, operationId: 'rtk-meeting-livestreams-list', summary: "A meeting's livestreams", level: 'read', query: z.object(PageQuery) }, async ({ c, params, query }) => {
      this.deps.learnPort(localPort(c));
      await meetingOf(params);
      const { page, perPage, offset } = pageOf(query);
      const { items, total } = await livestreams.list(db, params.app_id, { filters: [{ field: 'meeting', op: 'eq', value: params.meeting_id }], order: 'created_on', direction: 'desc', limit: perPage, offset });
      return paged({ items: items.map((d) => this.view(d.body)), total, page, perPage });
    });
    route(ctx, { method: 'GET', path: `${BASE}/meetings/:meeting_id/active-livestream`, operationId: 'rtk-meeting-livestream-active', summary: "A meeting's active livestream", level: 'read' }, async ({ c, params }) => {
      this.deps.learnPort(localPort(c));
      await meetingOf(params);
      const l = await this.activeFor(params.app_id, params.meeting_id);
      if (!l) throw apiError('rtk_not_found', 'Active livestream for meeting', params.meeting_id);
      return this.view(l);
    });
    route(ctx, { method: 'POST', path: `${BASE}/meetings/:meeting_id/active-livestream/stop`, operationId: 'rtk-meeting-livestream-stop', summary: "Stop a meeting's livestream", level: 'edit', body: z.object({}).passthrough(), bodyOptional: true }, async ({ params }) => {
      await meetingOf(params);
      await this.stopForMeeting(params.app_id, params.meeting_id);
      return { message: 'Stopped live stream successfully' };
    });
    route(ctx, { method: 'GET', path: `${BASE}/analytics/livestreams/overall`, operationId: 'rtk-livestream-analytics', summary: 'Livestream totals', level: 'read', query: AnalyticsQuery }, async ({ params, query }) => {
      await appOf(params);
      if (query.start_time !== undefined && query.end_time !== undefined && query.start_time > query.end_time) throw apiError('rtk_invalid', 'start_time must not be after end_time');
      const from = (query.start_time ?? 0) * 1000;
      const to = query.end_time !== undefined ? query.end_time * 1000 : Infinity;
      const now = ctx.clock.now().getTime();
      let count = 0;
      let ingest = 0;
      let viewer = 0;
      for (const doc of await livestreams.all(db, params.app_id)) {
        const l = doc.body;
        const created = Date.parse(l.created_at);
        if (created < from || created > to) continue;
        count++;
        ingest += l.ingest_seconds + (l.live_since ? (now - Date.parse(l.live_since)) / 1000 : 0);
        viewer += l.viewer_seconds;
      }
      return { count, total_ingest_seconds: Math.round(ingest), total_viewer_seconds: Math.round(viewer) };
    });
    route(ctx, { method: 'GET', path: `${BASE}/analytics/livestreams/daywise`, operationId: 'rtk-livestream-analytics-daywise', summary: 'Livestream sessions per day', level: 'read', query: DaywiseQuery }, async ({ params, query }) => {
      await appOf(params);
      const range = this.dayRange(query);
      return this.daywise(params.app_id, range.start, range.end);
    });
    route(ctx, { method: 'GET', path: '/realtime/kit/livestreams/:livestream_id/hls/:file', operationId: 'rtk-livestream-hls', summary: 'HLS playback of a livestream', level: 'public' }, async ({ params }) => this.hls(params.livestream_id, params.file));
  }
}
