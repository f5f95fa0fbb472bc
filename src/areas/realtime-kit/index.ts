/**
 * @module realtime-kit — the meeting platform (spec 000 "Meeting platform": records, endpoints,
 * client-side meeting object, join lifecycle, events; semantics §2.8).
 *
 * REST under `/accounts/{account_id}/realtime/kit/{app_id}` and `/accounts/{account_id}/realtime/kit/apps`
 * (permission "Realtime Kit"), answering the platform's `{success, data, paging}` shape: apps (each
 * created with six default presets), presets, meetings (list filters page_no/per_page/search/
 * status/start_time/end_time; PATCH and PUT), participants (add → signed token, PATCH/PUT → new
 * token, token refresh, DELETE revokes the token for joins), active session (get, kick, kick-all,
 * mute, mute-all, poll), sessions (list, get, participants, per-participant call statistics the
 * client reports from its WebRTC stats) and webhooks. `GET /.well-known/webhooks.json` publishes
 * the key that signs webhooks and tokens.
 * Join path: `GET /realtime/kit/socket?authToken=…` upgraded to a WebSocket on the API port
 * (live.ts); media through this area's own media forwarder instance (calls/sfu). The client SDK is
 * served at `/realtime/kit/sdk.js` (types at `/realtime/kit/sdk.d.ts`) and a meeting page built on
 * it at `/realtime/kit/meeting?authToken=…`.
 * Chat export: messages are stored one by one as they are sent (media/exports.ts, one store and
 * one CSV form); a session that had chat messages queues `meeting.chatSynced` with a signed CSV
 * download link when it ends (chat-sync.ts); `…/sessions/{id}/chat` answers a fresh link.
 * A REST mute (or mute-all) is enforced at the forwarder: the peer's audio track is paused for
 * every subscriber whatever its client does, until the peer unmutes itself (refused after
 * mute-all without `allow_unmute`).
 * Aliases: kick `{user_ids}` (spec) or `{participant_ids, custom_participant_ids}` (official);
 * webhook events `session.started`/`session.ended` are stored as `meeting.started`/`meeting.ended`;
 * webhook `name` optional (defaults to the URL's host).
 * Media (media/): live transcripts of participants whose preset has
 * `permissions.transcription_enabled` (offline recognition with pocketsphinx, streamed as
 * `transcript` events and served per session as CSV/JSON/SRT/VTT), the session chat export (CSV),
 * extractive summaries (or an operator's OpenAI-compatible endpoint), daywise analytics, composite
 * and track recordings, independent livestreams and a meeting's own livestream (its composite
 * view as HLS: `POST /meetings/{id}/livestreams`, `active-livestream`, `active-livestream/stop`;
 * each stretch on air a livestream session of its own: `GET /livestreams/{id}` pages them,
 * `active-livestream-session`, `livestreams/sessions/{id}`, `analytics/livestreams/daywise`). When
 * a session starts (first join), `record_on_start` starts a composite recording and
 * `live_stream_on_start` the meeting's livestream; both stop by themselves once nobody but their
 * hidden participant is left (the recording after 15 s, `ALL_PEERS_LEFT`; the livestream after the
 * meeting's keep-alive time, IDLE). The hidden participant does not count for the session: it
 * ends on the keep-alive after the last real participant leaves, whatever still records.
 * LIMITATIONS: live rooms (peers, chat, polls, plugin state) live in the process that holds the
 * sockets — several nodes do not share a meeting, and a starting process ends every session still
 * LIVE in storage (right for one node restarting, wrong for a fleet; such a session sends no
 * `meeting.chatSynced`, its stored chat stays downloadable); transcripts are English only and final-only (no partial
 * results), arriving after the speaker pauses; artefact download URLs are signed with a
 * per-process key (a restart invalidates them); recordings (media/recordings.ts: a headless
 * Chromium recorder, ffmpeg) and livestreams (media/livestreams.ts, media/rtmp.ts: RTMP ingest to
 * HLS; independent ones fed by any RTMP encoder, a meeting's own fed by the recorder's composite
 * page through ffmpeg; HLS output deleted once off air for the retention) have their own
 * limitations there;
 * 401/403 answers of the router keep the v4 envelope; the official platform SDK cannot join (its
 * protocol is proprietary) — use ours.
 */
import { readFileSync } from 'node:fs';
import { defineArea, type AreaContext } from '../../core/area.ts';
import { raw } from '../../core/router.ts';
import { Forwarder } from '../calls/sfu/index.ts';
import { loadSigningKey, type SigningKey } from './keys.ts';
import { Live, SOCKET_PATH } from './live.ts';
import { mountRoutes } from './routes.ts';
import { mountChatRoutes } from './chat-sync.ts';
import { Deliveries } from './webhooks.ts';
import { meetings } from './store.ts';
import { PERMISSION } from './http.ts';
import { mediaHooks } from './media/hooks.ts';
import { mountMediaRoutes } from './media/routes.ts';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { BlobStore } from '../../core/storage/blobs.ts';
import { Recorder, recordings } from './media/recordings.ts';
import { mountRecordingRoutes } from './media/recording-routes.ts';
import { Livestreams } from './media/livestreams.ts';

const CLIENT_DIR = new URL('./client/', import.meta.url);
const WEBHOOK_ATTEMPTS = 8;
const WEBHOOK_POLL_MS = 500;

function asset(name: string): string {
  return readFileSync(new URL(name, CLIENT_DIR), 'utf8');
}

function mountClient(ctx: AreaContext): void {
  const files: Record<string, [string, string]> = {
    '/realtime/kit/sdk.js': ['realtime-kit.js', 'text/javascript; charset=utf-8'],
    '/realtime/kit/sdk.d.ts': ['realtime-kit.d.ts', 'text/plain; charset=utf-8'],
    '/realtime/kit/meeting': ['meeting.html', 'text/html; charset=utf-8'],
  };
  for (const [path, [file, type]] of Object.entries(files)) {
    ctx.router.add({ method: 'GET', path, operationId: `rtk-client-${file}`, summary: `Meeting client: ${file}`, auth: 'public', tags: ['realtime-kit'] }, async () =>
      raw(new Response(asset(file), { headers: { 'content-type': type, 'cache-control': 'no-cache' } })),
    );
  }
}

export default defineArea({
  name: 'realtime-kit',
  mount(ctx: AreaContext) {
    const { config, database, log } = ctx;
    ctx.permissions.define({ key: PERMISSION, name: 'Realtime Kit', scope: 'account' });
    let key: SigningKey | undefined;
    const getKey = (): SigningKey => {
      if (!key) throw new Error('the meeting signing key is not loaded yet');
      return key;
    };
    const rtkLog = log.child({ area: 'realtime-kit' });
    const deliveries = new Deliveries({
      db: database.db,
      clock: ctx.clock,
      log: rtkLog,
      key: getKey,
      backoffMs: config.meetingsWebhookBackoffMs,
      maxAttempts: WEBHOOK_ATTEMPTS,
      pollMs: WEBHOOK_POLL_MS,
    });
    const address = isIP(config.host) === 4 && config.host !== '0.0.0.0' ? config.host : undefined;
    const forwarder = new Forwarder({ address, trackIdleMs: 30_000, log: (level, msg, fields) => rtkLog[level](fields ?? {}, msg) });
    const recorder = new Recorder({ ctx, log: rtkLog, key: getKey, deliveries, blobs: new BlobStore(join(config.dataDir, 'blobs')) });
    const recordOnStart = async (appId: string, meetingId: string) => {
      const m = await meetings.get(database.db, appId, meetingId);
      if (!m?.body.record_on_start || (await recorder.active(appId, meetingId))) return;
      await recorder.start(m.body, { type: 'composite', reason: 'RECORD_ON_START' }).catch((err: unknown) => rtkLog.warn({ err, meeting: meetingId }, 'record_on_start failed'));
    };
    const streams = new Livestreams({ ctx, log: rtkLog, deliveries, hlsRoot: join(config.dataDir, 'realtime-kit', 'hls'), baseUrl: () => recorder.baseUrl(), learnPort: (p) => recorder.learnPort(p), recorder });
    const liveStreamOnStart = async (appId: string, meetingId: string) => {
      const m = await meetings.get(database.db, appId, meetingId);
      if (!m?.body.live_stream_on_start || (await streams.activeFor(appId, meetingId))) return;
      const video = ((m.body.recording_config ?? {}) as { video_config?: { width?: number; height?: number } }).video_config;
      await streams.startForMeeting(m.body, { name: null, width: video?.width ?? 1280, height: video?.height ?? 720 }).catch((err: unknown) => rtkLog.warn({ err, meeting: meetingId }, 'live_stream_on_start failed'));
    };
    // The hooks reach the room through `live`, which is made just below (called only later).
    const media = mediaHooks(ctx, forwarder, (meetingId, msg) => live.broadcastTo(meetingId, msg));
    const live = new Live({
      ctx,
      key: getKey,
      deliveries,
      forwarder,
      keepAliveCapSecs: config.meetingsKeepAliveCap,
      media: {
        ...media.hooks,
        sessionStarted: ({ appId, meetingId }) => {
          void recordOnStart(appId, meetingId);
          void liveStreamOnStart(appId, meetingId);
        },
      },
    });
    mountRoutes(ctx, { key: getKey, tokenTtlSecs: config.meetingsTokenTtl, live });
    mountMediaRoutes(ctx, {
      recordings: async (db, appId) =>
        (await recordings.list(db, appId, { limit: 100_000, withTotal: false })).items.map((d) => ({ started_at: d.body.started_time ?? d.body.invoked_time, duration_secs: d.body.recording_duration ?? 0 })),
      summaryModel: config.meetingsSummaryUrl ? { url: config.meetingsSummaryUrl, model: config.meetingsSummaryModel ?? 'default', key: process.env.OUTPOST_MEETINGS_SUMMARY_KEY } : undefined,
    });
    mountRecordingRoutes(ctx, recorder);
    streams.mount(ctx);
    mountClient(ctx);
    mountChatRoutes(ctx, { key: getKey });
    ctx.upgrades.on(SOCKET_PATH, (req, socket, head) => {
      recorder.learnPort(socket.localPort);
      live.handleUpgrade(req, socket, head);
    });

    return {
      async start() {
        key = await loadSigningKey(database.db);
        const orphans = await live.endOrphans();
        if (orphans > 0) rtkLog.info({ sessions: orphans }, 'ended meeting sessions left LIVE by a previous process');
        await streams.start();
        const lost = await recorder.endOrphans();
        if (lost > 0) rtkLog.info({ recordings: lost }, 'marked recordings left unfinished by a previous process ERRORED');
        deliveries.start();
      },
      async stop() {
        await recorder.close();
        await streams.close();
        await live.close();
        await media.transcripts.close();
        await deliveries.stop();
        await forwarder.close();
      },
    };
  },
});
