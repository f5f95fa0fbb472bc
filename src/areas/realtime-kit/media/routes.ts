/**
 * REST for the session artefacts and analytics (spec 000 endpoint table; semantics §2.8):
 * `GET /sessions/{id}/chat`, `GET /sessions/{id}/transcript?format=CSV|JSON|SRT|VTT`,
 * `GET|POST /sessions/{id}/summary`, `GET /analytics/daywise`. The artefact routes answer the JSON
 * form with an expiring download URL; a caller that sends `Accept: text/csv` (chat, transcript) or
 * `Accept: text/markdown` (summary) gets the file itself. The download URLs are public (signed).
 */
import { z } from 'zod';
import type { AreaContext } from '../../../core/area.ts';
import { apiError } from '../../../core/errors.ts';
import { raw } from '../../../core/router.ts';
import { qString } from '../../../core/validate.ts';
import { route } from '../http.ts';
import { apps, meetings, sessionPeers, sessions } from '../store.ts';
import { daywise, parseDay, MAX_DAYS, type RecordingSource } from './analytics.ts';
import { DOWNLOAD_PATH, DownloadSigner, renderChat, sessionChat, type Artefact } from './exports.ts';
import { extractiveSummary, modelSummary, saveSummary, summaries, type StoredSummary, type SummaryModel } from './summary.ts';
import { TRANSCRIPT_FORMATS, renderTranscript, sessionTranscript, type TranscriptFormat } from './transcripts.ts';

const BASE = '/accounts/:account_id/realtime/kit/:app_id';

export interface MediaRouteDeps {
  summaryModel?: SummaryModel;
  recordings?: RecordingSource;
}

export function mountMediaRoutes(ctx: AreaContext, deps: MediaRouteDeps = {}): void {
  const db = ctx.database.db;
  const now = () => ctx.clock.now();
  const signer = new DownloadSigner();

  const sessionOf = async (params: Record<string, string>) => {
    if (!(await apps.get(db, params.account_id!, params.app_id!))) throw apiError('rtk_app_not_found', params.app_id);
    const doc = await sessions.get(db, params.app_id!, params.session_id!);
    if (!doc) throw apiError('rtk_not_found', 'Session', params.session_id);
    return doc.body;
  };
  const wants = (accept: string | undefined, type: string) => (accept ?? '').split(',').some((p) => p.trim().toLowerCase().startsWith(type));
  const file = (body: string, type: string, name: string) =>
    raw(new Response(body, { headers: { 'content-type': type, 'content-disposition': `attachment; filename="${name}"`, 'cache-control': 'no-store' } }));
  const origin = (url: string) => new URL(url).origin;

  route(ctx, { method: 'GET', path: `${BASE}/sessions/:session_id/chat`, operationId: 'rtk-sessions-chat', summary: 'Chat of a session (CSV behind a download URL)', level: 'read' }, async ({ c, params }) => {
    const s = await sessionOf(params);
    if (wants(c.req.header('accept'), 'text/csv')) return file(renderChat(await sessionChat(db, s.id)), 'text/csv; charset=utf-8', `chat-${s.id}.csv`);
    const u = signer.url(origin(c.req.url), s.app_id, s.id, 'chat', 'CSV', now());
    return { chat_download_url: u.url, chat_download_url_expiry: u.expiry };
  });

  const FormatQuery = z.object({ format: qString(z.string().transform((v) => v.toUpperCase()).pipe(z.enum(TRANSCRIPT_FORMATS))).optional() });
  route(
    ctx,
    { method: 'GET', path: `${BASE}/sessions/:session_id/transcript`, operationId: 'rtk-sessions-transcript', summary: 'Transcript of a session (CSV, JSON, SRT or VTT)', level: 'read', query: FormatQuery },
    async ({ c, params, query }) => {
      const s = await sessionOf(params);
      const format: TranscriptFormat = query.format ?? 'CSV';
      if (wants(c.req.header('accept'), 'text/csv') || wants(c.req.header('accept'), 'text/vtt') || wants(c.req.header('accept'), 'application/x-subrip')) {
        const r = renderTranscript(await sessionTranscript(db, s.id), format, s.id);
        return file(r.body, r.type, `transcript-${s.id}.${r.ext}`);
      }
      const u = signer.url(origin(c.req.url), s.app_id, s.id, 'transcript', format, now());
      return { sessionId: s.id, transcript_download_url: u.url, transcript_download_url_expiry: u.expiry };
    },
  );

  route(
    ctx,
    { method: 'POST', path: `${BASE}/sessions/:session_id/summary`, operationId: 'rtk-sessions-summary-create', summary: 'Generate the summary of a session', level: 'edit' },
    async ({ params }) => {
      const s = await sessionOf(params);
      const [transcript, chat, peers, meeting] = await Promise.all([sessionTranscript(db, s.id), sessionChat(db, s.id), sessionPeers.all(db, s.id), meetings.get(db, s.app_id, s.associated_id)]);
      const names = [...new Set(peers.map((p) => p.body.display_name))];
      const title = meeting?.body.title ?? s.meeting_display_name;
      const at = now();
      let stored: StoredSummary;
      const extractive = () => extractiveSummary({ title, startedAt: s.started_at, endedAt: s.ended_at, participants: names }, transcript, chat);
      if (deps.summaryModel) {
        try {
          stored = { session_id: s.id, status: 'COMPLETED', method: 'model', summary: await modelSummary(deps.summaryModel, { title, participants: names }, transcript, chat), created_at: at.toISOString() };
        } catch (err) {
          ctx.log.warn({ err: (err as Error).message, session: s.id }, 'summary endpoint failed; stored the extractive summary');
          stored = { session_id: s.id, status: 'COMPLETED', method: 'extractive', summary: extractive(), error: (err as Error).message, created_at: at.toISOString() };
        }
      } else stored = { session_id: s.id, status: 'COMPLETED', method: 'extractive', summary: extractive(), created_at: at.toISOString() };
      await saveSummary(db, s.app_id, stored, at);
      return { session_id: s.id, status: stored.status, method: stored.method, ...(stored.error ? { error: stored.error } : {}) };
    },
  );
  route(ctx, { method: 'GET', path: `${BASE}/sessions/:session_id/summary`, operationId: 'rtk-sessions-summary-get', summary: 'The summary of a session', level: 'read' }, async ({ c, params }) => {
    const s = await sessionOf(params);
    const doc = await summaries.get(db, s.app_id, s.id);
    if (!doc) throw apiError('rtk_not_found', 'Summary of session', s.id);
    if (wants(c.req.header('accept'), 'text/markdown') || wants(c.req.header('accept'), 'text/plain')) return file(doc.body.summary, 'text/markdown; charset=utf-8', `summary-${s.id}.md`);
    const u = signer.url(origin(c.req.url), s.app_id, s.id, 'summary', 'MD', now());
    return { sessionId: s.id, summaryDownloadUrl: u.url, summaryDownloadUrlExpiry: u.expiry };
  });

  const DayQuery = z.object({ start_date: qString(z.string().max(10)), end_date: qString(z.string().max(10)) });
  route(ctx, { method: 'GET', path: `${BASE}/analytics/daywise`, operationId: 'rtk-analytics-daywise', summary: 'Sessions, participant minutes and recordings per day', level: 'read', query: DayQuery }, async ({ params, query }) => {
    if (!(await apps.get(db, params.account_id!, params.app_id!))) throw apiError('rtk_app_not_found', params.app_id);
    const start = parseDay(query.start_date);
    const end = parseDay(query.end_date);
    if (start === undefined) throw apiError('rtk_invalid', 'start_date must be a date as YYYY-MM-DD');
    if (end === undefined) throw apiError('rtk_invalid', 'end_date must be a date as YYYY-MM-DD');
    if (end < start) throw apiError('rtk_invalid', 'end_date is before start_date');
    if ((end - start) / 86_400_000 + 1 > MAX_DAYS) throw apiError('rtk_invalid', `at most ${MAX_DAYS} days per request`);
    return daywise(db, params.app_id!, start, end, now(), deps.recordings);
  });

  // The signed download URLs: public, the signature is the credential.
  ctx.router.add(
    { method: 'GET', path: `${DOWNLOAD_PATH}/:app_id/:session_id/:what`, operationId: 'rtk-downloads', summary: 'A session artefact behind a signed URL', auth: 'public', tags: ['realtime-kit'], params: { app_id: 'any', session_id: 'any', what: 'any' } },
    async (req) => {
      const fail = (status: number, message: string) => raw(new Response(JSON.stringify({ success: false, error: { code: status, message } }), { status, headers: { 'content-type': 'application/json' } }));
      const { app_id: appId, session_id: sessionId, what } = req.params as Record<string, string>;
      const q = new URL(req.c.req.url).searchParams;
      const format = q.get('format') ?? '';
      const verdict = signer.check(appId!, sessionId!, what!, format, q.get('expires') ?? '', q.get('sig') ?? '', now());
      if (verdict === 'invalid') return fail(403, 'the download URL is not valid');
      if (verdict === 'expired') return fail(403, 'the download URL has expired; ask for a new one');
      const s = await sessions.get(db, appId!, sessionId!);
      if (!s) return fail(404, `session ${sessionId} not found`);
      switch (what as Artefact) {
        case 'chat':
          return file(renderChat(await sessionChat(db, s.body.id)), 'text/csv; charset=utf-8', `chat-${s.body.id}.csv`);
        case 'transcript': {
          const r = renderTranscript(await sessionTranscript(db, s.body.id), format as TranscriptFormat, s.body.id);
          return file(r.body, r.type, `transcript-${s.body.id}.${r.ext}`);
        }
        case 'summary': {
          const doc = await summaries.get(db, appId!, s.body.id);
          if (!doc) return fail(404, `no summary for session ${s.body.id}`);
          return file(doc.body.summary, 'text/markdown; charset=utf-8', `summary-${s.body.id}.md`);
        }
        default:
          return fail(404, `unknown artefact ${what}`);
      }
    },
  );
}
