/**
 * The media forwarding host, `/v1/apps/{appId}/…` on the API port (the Host `--sfu-host` serves
 * only these, see server.ts): bearer app secret, CORS with
 * preflight, the platform's `{errorCode, errorDescription}` bodies, 50 calls/s per session.
 * Behaviour lives in engine.ts; these handlers parse, authenticate and shape answers.
 */
import type { Context } from 'hono';
import { z, type ZodType } from 'zod';
import type { AreaContext } from '../../../core/area.ts';
import { ApiError } from '../../../core/errors.ts';
import { readBody, type Method } from '../../../core/router.ts';
import { checkAppSecret } from './apps.ts';
import { checkSdp, Forwarder, SfuError, type Session, type SessionDescription } from './engine.ts';

const CALLS_PER_SECOND = 50;
const MAX_TRACKS_PER_CALL = 64;

const Desc = z.object({ type: z.unknown().optional(), sdp: z.unknown().optional() }).passthrough();
const Simulcast = z.object({
  preferredRid: z.string().max(64).optional(),
  priorityOrdering: z.enum(['none', 'asciibetical']).optional(),
  ridNotAvailable: z.enum(['none', 'asciibetical']).optional(),
});
const Track = z.object({
  location: z.enum(['local', 'remote']),
  trackName: z.string().min(1).max(256).optional(),
  mid: z.string().min(1).max(64).optional(),
  sessionId: z.string().max(64).optional(),
  kind: z.enum(['audio', 'video']).optional(),
  bidirectionalMediaStream: z.boolean().optional(),
  simulcast: Simulcast.optional(),
});
const NewSession = z.object({ sessionDescription: Desc.optional() }).passthrough().optional();
const TracksNew = z.object({
  sessionDescription: Desc.optional(),
  tracks: z.array(Track).max(MAX_TRACKS_PER_CALL).optional(),
  autoDiscover: z.boolean().optional(),
});
const Renegotiate = z.object({ sessionDescription: Desc });
const TracksClose = z.object({
  sessionDescription: Desc.optional(),
  tracks: z
    .array(z.object({ mid: z.string().min(1).max(64).optional(), trackName: z.string().min(1).max(256).optional() }).refine((t) => t.mid !== undefined || t.trackName !== undefined, 'each track needs mid or trackName'))
    .min(1)
    .max(MAX_TRACKS_PER_CALL),
  force: z.boolean().optional(),
});
const TracksUpdate = z.object({ tracks: z.array(Track).min(1).max(MAX_TRACKS_PER_CALL), sessionDescription: Desc.optional() });
const Establish = z.object({ sessionDescription: Desc.optional() }).passthrough().optional();
const ChannelsNew = z.object({
  dataChannels: z
    .array(z.object({ location: z.enum(['local', 'remote']), dataChannelName: z.string().min(1).max(256), sessionId: z.string().max(64).optional() }))
    .min(1)
    .max(MAX_TRACKS_PER_CALL),
});
const ChannelsClose = z.object({
  dataChannels: z
    .array(z.object({ id: z.number().int().min(0).max(65535).optional(), dataChannelName: z.string().min(1).max(256).optional() }).refine((d) => d.id !== undefined || d.dataChannelName !== undefined, 'each data channel needs id or dataChannelName'))
    .min(1)
    .max(MAX_TRACKS_PER_CALL),
});

interface Call<B> {
  appId: string;
  body: B;
  session?: Session;
  query: URLSearchParams;
}

function cors(c: Context): Record<string, string> {
  const origin = c.req.header('origin');
  return {
    'access-control-allow-origin': origin ?? '*',
    'access-control-allow-methods': 'GET, POST, PUT, OPTIONS',
    'access-control-allow-headers': c.req.header('access-control-request-headers') ?? 'authorization, content-type',
    'access-control-max-age': '600',
    vary: 'Origin',
  };
}

function json(c: Context, status: number, body: unknown, extra: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...cors(c), ...extra } });
}

function parse<S extends ZodType>(schema: S, buf: Buffer): z.output<S> {
  let value: unknown;
  if (buf.length > 0) {
    try {
      value = JSON.parse(buf.toString('utf8'));
    } catch (err) {
      throw new SfuError(400, 'decoding_error', `the body is not JSON: ${(err as Error).message}`);
    }
  }
  const r = schema.safeParse(value);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new SfuError(400, 'invalid_params', `${issue.path.join('.') || 'body'}: ${issue.message}`);
  }
  return r.data;
}

export function mountSfuRoutes(ctx: AreaContext, sfu: Forwarder): void {
  const { router, database, config } = ctx;
  const db = database.db;
  const tags = ['calls'];
  const prefix = '/v1/apps/:app_id';

  const route = <S extends ZodType>(
    method: Method,
    path: string,
    operationId: string,
    summary: string,
    schema: S | undefined,
    opts: { session: boolean; status?: number },
    fn: (call: Call<z.output<S>>) => Promise<unknown>,
  ) => {
    router.add({ method, path: prefix + path, operationId, summary, auth: 'custom', tags }, async ({ c, params }) => {
      try {
        const app = await checkAppSecret(db, params.app_id, c.req.header('authorization'));
        if (!app.ok && app.reason === 'not_found') throw new SfuError(404, 'not_found', `app ${params.app_id} does not exist`);
        if (!app.ok) throw new SfuError(401, 'unauthorized', 'Authorization must be Bearer <the app secret>');
        let session: Session | undefined;
        if (opts.session) {
          session = sfu.session(params.app_id, params.session_id);
          const now = Date.now();
          if (now - session.window.start >= 1000) session.window = { start: now, calls: 0 };
          if (++session.window.calls > CALLS_PER_SECOND) {
            const wait = Math.max(1, Math.ceil((session.window.start + 1000 - now) / 1000));
            return json(c, 429, { errorCode: 'too_many_requests', errorDescription: `more than ${CALLS_PER_SECOND} calls per second on session ${session.id}` }, { 'retry-after': String(wait) });
          }
        }
        let buf: Buffer = Buffer.alloc(0);
        if (schema) {
          try {
            buf = await readBody(c, config.bodyLimit);
          } catch (err) {
            if (err instanceof ApiError && err.status === 413) throw new SfuError(413, 'payload_too_large', `the body is larger than ${config.bodyLimit} bytes`);
            throw err;
          }
        }
        const body = schema ? parse(schema, buf) : (undefined as z.output<S>);
        const call: Call<z.output<S>> = { appId: params.app_id, body, session, query: new URL(c.req.url).searchParams };
        const result = session ? await session.serial(() => fn(call)) : await fn(call);
        return json(c, opts.status ?? 200, result ?? {});
      } catch (err) {
        if (err instanceof SfuError) return json(c, err.status, { errorCode: err.code, errorDescription: err.message });
        ctx.log.error({ err, path: c.req.path }, 'media forwarding operation failed');
        return json(c, 500, { errorCode: 'internal_error', errorDescription: 'Backend error' });
      }
    });
  };

  // Preflight: any path under the app prefix.
  for (const path of ['/sessions/new', '/sessions/:session_id', '/sessions/:session_id/:op', '/sessions/:session_id/:group/:op']) {
    router.add({ method: 'OPTIONS', path: prefix + path, operationId: `sfu-preflight${path.replace(/[/:]+/g, '-')}`, summary: 'CORS preflight', auth: 'public', tags }, async ({ c }) =>
      new Response(null, { status: 204, headers: cors(c) }),
    );
  }

  const sdpOf = (d: z.output<typeof Desc> | undefined, want: 'offer' | 'answer' | 'any'): SessionDescription | undefined => (d ? checkSdp(d, want) : undefined);

  route('POST', '/sessions/new', 'sfu-sessions-new', 'Create a session (optionally answering an offer)', NewSession, { session: false, status: 201 }, async ({ appId, body }) => {
    const offer = sdpOf(body?.sessionDescription, 'offer');
    const s = sfu.newSession(appId);
    if (!offer) return { sessionId: s.id };
    try {
      return { sessionId: s.id, sessionDescription: await s.serial(() => sfu.connect(s, offer)) };
    } catch (err) {
      await sfu.closeSession(s);
      throw err;
    }
  });

  route('POST', '/sessions/:session_id/tracks/new', 'sfu-tracks-new', 'Publish local tracks (offer → answer) or pull remote tracks (server offer)', TracksNew, { session: true }, async ({ session, body }) => {
    const offer = sdpOf(body.sessionDescription, 'offer');
    const tracks = body.tracks ?? [];
    if (tracks.length === 0 && !(offer && body.autoDiscover)) throw new SfuError(400, 'invalid_params', 'tracks: give at least one track (or autoDiscover with an offer)');
    return sfu.addTracks(session!, tracks, offer, body.autoDiscover ?? false);
  });

  route('PUT', '/sessions/:session_id/renegotiate', 'sfu-renegotiate', 'Apply the answer to an SFU offer (or a client offer)', Renegotiate, { session: true }, async ({ session, body }) =>
    sfu.renegotiate(session!, checkSdp(body.sessionDescription, 'any')),
  );

  route('PUT', '/sessions/:session_id/tracks/close', 'sfu-tracks-close', 'Close tracks by mid (with force) or by trackName', TracksClose, { session: true }, async ({ session, body }) =>
    sfu.closeTracks(session!, body.tracks, sdpOf(body.sessionDescription, 'offer'), body.force ?? false),
  );

  route('PUT', '/sessions/:session_id/tracks/update', 'sfu-tracks-update', 'Change the simulcast layer of pulled tracks', TracksUpdate, { session: true }, async ({ session, body }) => ({
    requiresImmediateRenegotiation: false,
    tracks: sfu.updateTracks(session!, body.tracks),
  }));

  route('GET', '/sessions/:session_id', 'sfu-session-get', 'Tracks and data channels of a session', undefined, { session: true }, async ({ session }) => sfu.state(session!));

  route('POST', '/sessions/:session_id/datachannels/establish', 'sfu-datachannels-establish', 'Open the data channel transport of a session', Establish, { session: true }, async ({ session, body }) =>
    sfu.establish(session!, sdpOf(body?.sessionDescription, 'offer')),
  );

  route('POST', '/sessions/:session_id/datachannels/new', 'sfu-datachannels-new', 'Publish (local) or subscribe to (remote) data channels; the client opens them negotiated with the returned ids', ChannelsNew, { session: true }, async ({ session, body }) => ({
    dataChannels: await sfu.openDataChannels(session!, body.dataChannels),
  }));

  route('PUT', '/sessions/:session_id/datachannels/close', 'sfu-datachannels-close', 'Close data channels by id or name', ChannelsClose, { session: true }, async ({ session, body }) => ({
    dataChannels: sfu.closeDataChannels(session!, body.dataChannels),
  }));
}
