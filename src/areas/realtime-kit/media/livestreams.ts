/**
 * Livestreams (spec 000 "Meeting platform", livestream; semantics §2.8): `POST /livestreams`
 * creates an independent livestream with its own RTMP ingest (`ingest_server` + `stream_key`, the
 * key checked by rtmp.ts) whose media ffmpeg turns into HLS served at `playback_url`. Status IDLE →
 * LIVE while a publisher with the right key sends, back to IDLE when it stops (ERRORED if ffmpeg
 * fails); each change is a `livestreaming.statusUpdate` webhook. Ingest seconds are counted per
 * livestream for `/analytics/livestreams/overall`.
 * LIMITATIONS: `ingest_server` is plain `rtmp://` on this host (no RTMPS); each livestream has its
 * own port (kept across restarts when it is still free); viewer seconds are counted from playlist
 * requests (one per viewer poll), not from player sessions; a meeting's livestream is not built.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import type { AreaContext } from '../../../core/area.ts';
import { apiError } from '../../../core/errors.ts';
import { uuid } from '../../../core/ids.ts';
import type { Logger } from '../../../core/log.ts';
import { raw } from '../../../core/router.ts';
import { defineCollection } from '../../../core/storage/collection.ts';
import { qInt } from '../../../core/validate.ts';
import { PageQuery, pageOf, paged, route } from '../http.ts';
import { apps } from '../store.ts';
import type { Deliveries } from '../webhooks.ts';
import { RtmpIngest } from './rtmp.ts';
import { localPort } from './recording-routes.ts';

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
  created_at: string;
  updated_at: string;
}

export const livestreams = defineCollection<Livestream, 'meeting' | 'status'>({
  kind: 'rtk_livestream',
  indexes: { meeting: (l) => l.meeting_id ?? '', status: (l) => l.status },
});

const CreateBody = z.object({ name: z.string().max(255).nullable().optional() });
const ListQuery = z.object({ ...PageQuery, exclude_meetings: z.enum(['true', 'false']).optional(), status: z.enum(['IDLE', 'LIVE', 'ERRORED', 'INVOKED']).optional() });
const AnalyticsQuery = z.object({ start_time: qInt(z.number().int().min(0)).optional(), end_time: qInt(z.number().int().min(0)).optional() });

export interface LivestreamDeps {
  ctx: AreaContext;
  log: Logger;
  deliveries: Deliveries;
  hlsRoot: string;
  /** Origin for playback URLs (the API). */
  baseUrl: () => string;
  /** Tells the origin which port the API answered on (configured port 0). */
  learnPort: (port: number | undefined) => void;
}

export class Livestreams {
  private readonly ingests = new Map<string, RtmpIngest>();

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
    const ingest = new RtmpIngest({
      host: this.host(),
      port: l.ingest_port,
      streamKey: l.stream_key,
      log: this.deps.log,
      outputArgs: () => {
        rmSync(dir, { recursive: true, force: true });
        mkdirSync(dir, { recursive: true });
        // Copy what the publisher sends when it is H.264/AAC (the usual RTMP case): no re-encode.
        return ['-c', 'copy', '-f', 'hls', '-hls_time', String(HLS_SEGMENT_SECS), '-hls_list_size', '6', '-hls_flags', 'delete_segments+independent_segments', '-hls_segment_filename', join(dir, 'seg-%05d.ts'), join(dir, 'index.m3u8')];
      },
      events: {
        live: () => void this.status(l.app_id, l.id, 'LIVE'),
        ended: (error) => void this.status(l.app_id, l.id, error ? 'ERRORED' : 'IDLE', error),
        refused: (reason) => this.deps.log.info({ livestream: l.id, reason }, 'RTMP publisher refused'),
      },
    });
    const port = await ingest.listen();
    this.ingests.set(l.id, ingest);
    return port;
  }

  private async status(appId: string, id: string, status: Livestream['status'], error?: string): Promise<void> {
    for (let attempt = 0; attempt < 4; attempt++) {
      const doc = await livestreams.get(this.db, appId, id);
      if (!doc) return;
      const at = this.deps.ctx.clock.now();
      const prev = doc.body;
      const next: Livestream = { ...prev, status, updated_at: at.toISOString(), ...(error ? { error } : {}) };
      if (status === 'LIVE') next.live_since = at.toISOString();
      else if (prev.live_since) {
        next.ingest_seconds = prev.ingest_seconds + (at.getTime() - Date.parse(prev.live_since)) / 1000;
        delete next.live_since;
      }
      try {
        await livestreams.update(this.db, doc, next, at);
      } catch {
        continue;
      }
      if (prev.status !== status) {
        const v = this.view(next);
        await this.deps.deliveries.enqueue(appId, 'livestreaming.statusUpdate', { streamId: id, status: status === 'ERRORED' ? 'OFFLINE' : status, manualIngest: true, playbackUrl: v.playback_url, ingestServer: v.ingest_server, streamKey: next.stream_key, meeting: null, ...(error ? { error } : {}) });
      }
      return;
    }
  }

  /** Reopens the ingest of every livestream on its port after a restart. */
  async start(): Promise<void> {
    for (const doc of await livestreams.all(this.db, null)) {
      const l = doc.body;
      if (l.status === 'LIVE') await this.status(l.app_id, l.id, 'IDLE');
      await this.open(l).catch((err: unknown) => {
        this.deps.log.warn({ livestream: l.id, err: (err as Error).message }, 'livestream ingest port could not be reopened');
        void this.status(l.app_id, l.id, 'ERRORED', `ingest port ${l.ingest_port} is taken`);
      });
    }
  }

  async close(): Promise<void> {
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
      await livestreams.update(this.db, doc, { ...doc.body, viewer_seconds: doc.body.viewer_seconds + HLS_SEGMENT_SECS }, this.deps.ctx.clock.now()).catch(() => undefined);
    }
    return raw(new Response(body, { headers: { 'content-type': file.endsWith('.m3u8') ? 'application/vnd.apple.mpegurl' : 'video/mp2t', 'cache-control': file.endsWith('.m3u8') ? 'no-cache' : 'max-age=60' } }));
  }

  mount(ctx: AreaContext): void {
    const db = ctx.database.db;
    const appOf = async (params: Record<string, string>) => {
      const doc = await apps.get(db, params.account_id, params.app_id);
      if (!doc) throw apiError('rtk_app_not_found', params.app_id);
      return doc;
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
      const { items, total } = await livestreams.list(db, params.app_id, { filters, order: 'created_on', direction: 'desc', limit: perPage, offset });
      return paged({ items: items.map((d) => this.view(d.body)), total, page, perPage });
    });
    route(ctx, { method: 'GET', path: `${BASE}/livestreams/:livestream_id`, operationId: 'rtk-livestream-get', summary: 'Get a livestream', level: 'read' }, async ({ c, params }) => {
      this.deps.learnPort(localPort(c));
      await appOf(params);
      const doc = await livestreams.get(db, params.app_id, params.livestream_id);
      if (!doc) throw apiError('rtk_not_found', 'Livestream', params.livestream_id);
      return this.view(doc.body);
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
    route(ctx, { method: 'GET', path: '/realtime/kit/livestreams/:livestream_id/hls/:file', operationId: 'rtk-livestream-hls', summary: 'HLS playback of a livestream', level: 'public' }, async ({ params }) => this.hls(params.livestream_id, params.file));
  }
}
