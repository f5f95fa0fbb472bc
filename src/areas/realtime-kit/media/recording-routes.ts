/**
 * REST routes of meeting recordings: start (`POST /recordings`, composite by default, `type:
 * 'track'` as the spec's form of a track recording, and the real `POST /recordings/track` with its
 * `layers` map), list (filters `meeting_id`, `status`), get, the meeting's active recording,
 * `PUT /recordings/{id} {action: pause|resume|stop}`, the signed file download, and the recorder
 * page the headless browser opens. Behaviour is in recordings.ts.
 */
import { readFileSync } from 'node:fs';
import type { Context } from 'hono';
import { z } from 'zod';
import type { AreaContext } from '../../../core/area.ts';
import { apiError } from '../../../core/errors.ts';
import { raw } from '../../../core/router.ts';
import { qInt } from '../../../core/validate.ts';
import { PageQuery, pageOf, paged, route } from '../http.ts';
import { apps, meetings } from '../store.ts';
import { recordings, type Recorder, type RecordingStatus } from './recordings.ts';

const BASE = '/accounts/:account_id/realtime/kit/:app_id';
const STATUSES = ['INVOKED', 'RECORDING', 'PAUSED', 'UPLOADING', 'UPLOADED', 'ERRORED'] as const;
const Id = z.string().regex(/^[A-Za-z0-9_.-]{1,128}$/, 'must be an identifier');

const VideoConfig = z.object({ codec: z.enum(['H264', 'VP8']).optional(), width: z.number().int().min(160).max(1920).optional(), height: z.number().int().min(120).max(1080).optional(), watermark: z.unknown().optional() }).partial();
const Layer = z.object({ file_name_prefix: z.string().max(200).optional(), media_kind: z.enum(['audio', 'video', 'audio_video']).optional(), outputs: z.array(z.unknown()).optional() });
const StartBody = z.object({
  meeting_id: Id,
  type: z.enum(['composite', 'track']).optional(),
  file_name_prefix: z.string().max(200).optional(),
  max_seconds: z.number().int().min(60).max(86400).optional(),
  video_config: VideoConfig.optional(),
  audio_config: z.record(z.string(), z.unknown()).optional(),
  storage_config: z.record(z.string(), z.unknown()).nullable().optional(),
  realtimekit_bucket_config: z.record(z.string(), z.unknown()).optional(),
  interactive_config: z.record(z.string(), z.unknown()).optional(),
  url: z.string().max(2048).optional(),
  // Track form: the real API's map, or the spec's array of layer names.
  layers: z.union([z.record(z.string().max(100), Layer), z.array(z.string().max(100)).max(20)]).optional(),
});
const TrackBody = StartBody.omit({ type: true }).extend({ layers: StartBody.shape.layers.unwrap() });
const ActionBody = z.object({ action: z.enum(['pause', 'resume', 'stop']) });
const ListQuery = z.object({ ...PageQuery, meeting_id: Id.optional(), status: z.enum(STATUSES).optional(), sort_order: z.enum(['ASC', 'DESC']).optional() });
const DownloadQuery = z.object({ expires: qInt(z.number().int().min(0)), signature: z.string().min(1).max(200) });

export function localPort(c: Context): number | undefined {
  return (c.env as { incoming?: { socket?: { localPort?: number } } } | undefined)?.incoming?.socket?.localPort;
}

export function mountRecordingRoutes(ctx: AreaContext, recorder: Recorder): void {
  const db = ctx.database.db;
  const appOf = async (params: Record<string, string>) => {
    const doc = await apps.get(db, params.account_id, params.app_id);
    if (!doc) throw apiError('rtk_app_not_found', params.app_id);
    return doc;
  };
  const meetingOf = async (appId: string, meetingId: string) => {
    const doc = await meetings.get(db, appId, meetingId);
    if (!doc) throw apiError('rtk_not_found', 'Meeting', meetingId);
    return doc.body;
  };
  const layersOf = (l: z.infer<typeof StartBody>['layers']) => (Array.isArray(l) ? Object.fromEntries(l.map((name) => [name, {}])) : l);

  const start = async (c: Context, params: Record<string, string>, body: z.infer<typeof StartBody>, type: 'composite' | 'track') => {
    recorder.learnPort(localPort(c));
    await appOf(params);
    const meeting = await meetingOf(params.app_id, body.meeting_id);
    const r = await recorder.start(meeting, {
      type,
      reason: 'API_CALL',
      layers: type === 'track' ? (layersOf(body.layers) ?? { default: { media_kind: 'audio_video' } }) : undefined,
      width: body.video_config?.width,
      height: body.video_config?.height,
      filePrefix: body.file_name_prefix,
      maxSeconds: body.max_seconds,
      storageConfig: body.storage_config,
    });
    return recorder.view(r);
  };

  route(ctx, { method: 'POST', path: `${BASE}/recordings`, operationId: 'rtk-recording-start', summary: 'Start recording a meeting', level: 'edit', body: StartBody }, ({ c, params, body }) =>
    start(c, params, body, body.type ?? (body.layers ? 'track' : 'composite')),
  );
  route(ctx, { method: 'POST', path: `${BASE}/recordings/track`, operationId: 'rtk-recording-start-track', summary: 'Start a track recording (one file per track)', level: 'edit', body: TrackBody }, ({ c, params, body }) =>
    start(c, params, body, 'track'),
  );
  route(ctx, { method: 'GET', path: `${BASE}/recordings`, operationId: 'rtk-recordings-list', summary: 'List recordings', level: 'read', query: ListQuery }, async ({ params, query }) => {
    await appOf(params);
    const { page, perPage, offset } = pageOf(query);
    const filters: { field: 'meeting' | 'status'; op: 'eq'; value: string }[] = [];
    if (query.meeting_id) filters.push({ field: 'meeting', op: 'eq', value: query.meeting_id });
    if (query.status) filters.push({ field: 'status', op: 'eq', value: query.status satisfies RecordingStatus });
    const { items, total } = await recordings.list(db, params.app_id, { filters, order: 'created_on', direction: query.sort_order === 'ASC' ? 'asc' : 'desc', limit: perPage, offset });
    return paged({ items: items.map((d) => recorder.view(d.body)), total, page, perPage });
  });
  route(ctx, { method: 'GET', path: `${BASE}/recordings/active-recording/:meeting_id`, operationId: 'rtk-recording-active', summary: "A meeting's active recording", level: 'read' }, async ({ params }) => {
    await appOf(params);
    await meetingOf(params.app_id, params.meeting_id);
    const doc = await recorder.active(params.app_id, params.meeting_id);
    if (!doc) throw apiError('rtk_not_found', 'Active recording for meeting', params.meeting_id);
    return recorder.view(doc.body);
  });
  route(ctx, { method: 'GET', path: `${BASE}/recordings/:recording_id`, operationId: 'rtk-recording-get', summary: 'Get a recording', level: 'read' }, async ({ params }) => {
    await appOf(params);
    const doc = await recordings.get(db, params.app_id, params.recording_id);
    if (!doc) throw apiError('rtk_not_found', 'Recording', params.recording_id);
    return recorder.view(doc.body);
  });
  route(ctx, { method: 'PUT', path: `${BASE}/recordings/:recording_id`, operationId: 'rtk-recording-action', summary: 'Pause, resume or stop a recording', level: 'edit', body: ActionBody }, async ({ params, body }) => {
    await appOf(params);
    return recorder.view(await recorder.action(params.app_id, params.recording_id, body.action));
  });
  route(ctx, { method: 'GET', path: '/realtime/kit/recordings/:recording_id/files/:file', operationId: 'rtk-recording-download', summary: 'Download a recording file (signed URL)', level: 'public', query: DownloadQuery }, async ({ params, query }) =>
    recorder.download(params.recording_id, params.file, query.expires, query.signature),
  );

  const page = readFileSync(new URL('./recorder.html', import.meta.url), 'utf8');
  ctx.router.add({ method: 'GET', path: '/realtime/kit/recorder', operationId: 'rtk-recorder-page', summary: 'The page a headless recorder opens', auth: 'public', tags: ['realtime-kit'] }, async () =>
    raw(new Response(page, { headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-cache' } })),
  );
}

