/**
 * REST routes of the meeting platform under `/accounts/{account_id}/realtime/kit/…`: apps,
 * presets, meetings, participants (tokens), active session controls, sessions and webhooks. Both
 * body forms are accepted where the spec and the official client differ (kick `user_ids` vs
 * `participant_ids`/`custom_participant_ids`; webhook `session.*` vs `meeting.*` event names and an
 * optional `name`). Handlers parse and shape; the live meeting behaviour is in live.ts.
 */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { apiError } from '../../core/errors.ts';
import { uuid } from '../../core/ids.ts';
import type { Doc } from '../../core/storage/collection.ts';
import { qString } from '../../core/validate.ts';
import { issueToken, type SigningKey } from './keys.ts';
import { Out, PageQuery, pageOf, paged, reply, route } from './http.ts';
import { DEFAULT_PRESETS, PresetBody, completePreset } from './presets.ts';
import {
  apps,
  meetings,
  participants,
  presets,
  sessionPeers,
  sessions,
  webhooks,
  WEBHOOK_EVENTS,
  type Meeting,
  type Participant,
  type RtkApp,
  type StoredPreset,
  type Webhook,
  type WebhookEvent,
} from './store.ts';
import type { Live } from './live.ts';

const BASE = '/accounts/:account_id/realtime/kit/:app_id';
const MAX_TITLE = 1024;

const nullableBool = z.boolean().nullable().optional();
const MeetingBody = z.object({
  title: z.string().max(MAX_TITLE).nullable().optional(),
  record_on_start: nullableBool,
  live_stream_on_start: nullableBool,
  persist_chat: nullableBool,
  summarize_on_end: nullableBool,
  transcribe_on_end: nullableBool,
  session_keep_alive_time_in_secs: z.number().int().min(60).max(600).optional(),
  ai_config: z.record(z.string(), z.unknown()).optional(),
  recording_config: z.record(z.string(), z.unknown()).optional(),
});
const MeetingPatch = MeetingBody.extend({ status: z.enum(['ACTIVE', 'INACTIVE']).optional() });

const ParticipantBody = z.object({
  custom_participant_id: z.string().min(1).max(255),
  preset_name: z.string().min(1).max(255),
  name: z.string().max(255).nullable().optional(),
  picture: z.string().url().max(2048).nullable().optional(),
});
const ParticipantPatch = z.object({
  name: z.string().max(255).nullable().optional(),
  preset_name: z.string().min(1).max(255).optional(),
  picture: z.string().url().max(2048).nullable().optional(),
});

/** `session.started`/`session.ended` are the spec's names for the meeting events. */
const EVENT_ALIASES: Record<string, WebhookEvent> = { 'session.started': 'meeting.started', 'session.ended': 'meeting.ended' };
const EventName = z.string().transform((v, c) => {
  const name = EVENT_ALIASES[v] ?? v;
  if (!(WEBHOOK_EVENTS as readonly string[]).includes(name)) {
    c.addIssue({ code: 'custom', message: `unknown event ${v}; known: ${[...WEBHOOK_EVENTS, ...Object.keys(EVENT_ALIASES)].join(', ')}` });
    return z.NEVER;
  }
  return name as WebhookEvent;
});
const HttpUrl = z
  .string()
  .max(2048)
  .refine((v) => {
    try {
      const u = new URL(v);
      return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '';
    } catch {
      return false;
    }
  }, 'must be an http or https URL');
const WebhookBody = z.object({
  name: z.string().min(1).max(255).optional(),
  url: HttpUrl,
  events: z.array(EventName).min(1).max(WEBHOOK_EVENTS.length + 2),
  enabled: z.boolean().optional(),
});
const WebhookPatch = WebhookBody.partial();

const IdList = z.array(z.string().min(1).max(255)).max(1000);
const KickBody = z
  .object({ user_ids: IdList.optional(), participant_ids: IdList.optional(), custom_participant_ids: IdList.optional() })
  .refine((b) => b.user_ids || b.participant_ids || b.custom_participant_ids, 'give participant_ids, custom_participant_ids or user_ids');
const MuteAllBody = z.object({ allow_unmute: z.boolean() });
const PollBody = z.object({
  question: z.string().min(1).max(1000),
  options: z.array(z.string().min(1).max(500)).min(2).max(20),
  anonymous: z.boolean().optional(),
  hide_votes: z.boolean().optional(),
});

export interface RouteDeps {
  key: () => SigningKey;
  tokenTtlSecs: number;
  live: Live;
}

function isoOf(d: Date): string {
  return d.toISOString();
}

export function meetingView(m: Meeting): Record<string, unknown> {
  const { app_id: _a, account_id: _b, ...rest } = m;
  return rest;
}

function participantView(p: Participant): Record<string, unknown> {
  return { id: p.id, custom_participant_id: p.custom_participant_id, preset_name: p.preset_name, name: p.name, picture: p.picture, created_at: p.created_at, updated_at: p.updated_at };
}

function webhookView(w: Webhook): Record<string, unknown> {
  const { app_id: _a, ...rest } = w;
  return rest;
}

function presetView(p: StoredPreset): Record<string, unknown> {
  const { app_id: _a, ...rest } = p;
  return rest;
}

export function mountRoutes(ctx: AreaContext, deps: RouteDeps): void {
  const db = ctx.database.db;
  const now = () => ctx.clock.now();

  const appOf = async (params: Record<string, string>): Promise<Doc<RtkApp>> => {
    const doc = await apps.get(db, params.account_id, params.app_id);
    if (!doc) throw apiError('rtk_app_not_found', params.app_id);
    return doc;
  };
  const meetingOf = async (params: Record<string, string>): Promise<Doc<Meeting>> => {
    await appOf(params);
    const doc = await meetings.get(db, params.app_id, params.meeting_id);
    if (!doc) throw apiError('rtk_not_found', 'Meeting', params.meeting_id);
    return doc;
  };
  const participantOf = async (params: Record<string, string>): Promise<Doc<Participant>> => {
    await meetingOf(params);
    const doc = await participants.get(db, params.meeting_id, params.participant_id);
    if (!doc) throw apiError('rtk_not_found', 'Participant', params.participant_id);
    return doc;
  };
  const presetByName = async (appId: string, name: string): Promise<Doc<StoredPreset>> => {
    const found = (await presets.list(db, appId, { filters: [{ field: 'name', op: 'eq', value: name }], limit: 1 })).items[0];
    if (!found) throw apiError('rtk_invalid', `preset_name: no preset named ${name} in this app`);
    return found;
  };
  const tokenFor = (p: Participant, accountId: string) =>
    issueToken(deps.key(), { meetingId: p.meeting_id, orgId: p.app_id, participantId: p.id, appId: p.app_id, presetName: p.preset_name }, now(), deps.tokenTtlSecs).then(
      (t) => (void accountId, t),
    );

  // --- apps --------------------------------------------------------------------------------------
  route(ctx, { method: 'GET', path: '/accounts/:account_id/realtime/kit/apps', operationId: 'rtk-apps-list', summary: 'List meeting platform apps', level: 'read', query: z.object(PageQuery) }, async ({ params, query }) => {
    const pg = pageOf(query);
    const { items, total } = await apps.list(db, params.account_id, { order: 'created_on', limit: pg.perPage, offset: pg.offset });
    return paged({ items: items.map((d) => ({ id: d.body.id, name: d.body.name, created_at: d.body.created_at })), total, page: pg.page, perPage: pg.perPage });
  });
  route(
    ctx,
    { method: 'POST', path: '/accounts/:account_id/realtime/kit/apps', operationId: 'rtk-apps-create', summary: 'Create a meeting platform app', level: 'edit', body: z.object({ name: z.string().min(1).max(255) }) },
    async ({ params, body }) => {
      const at = now();
      const app: RtkApp = { id: uuid(), name: body.name, account_id: params.account_id, created_at: isoOf(at) };
      await ctx.database.db.transaction().execute(async (tx) => {
        await apps.insert(tx, params.account_id, app.id, app, at);
        for (const p of DEFAULT_PRESETS) {
          const id = uuid();
          await presets.insert(tx, app.id, id, { ...p, id, app_id: app.id, created_at: isoOf(at), updated_at: isoOf(at) }, at);
        }
      });
      return { app: { id: app.id, name: app.name, created_at: app.created_at } };
    },
  );

  // --- presets -----------------------------------------------------------------------------------
  route(ctx, { method: 'GET', path: `${BASE}/presets`, operationId: 'rtk-presets-list', summary: 'List presets', level: 'read', query: z.object(PageQuery) }, async ({ params, query }) => {
    await appOf(params);
    const pg = pageOf(query);
    const { items, total } = await presets.list(db, params.app_id, { order: 'created_on', limit: pg.perPage, offset: pg.offset });
    return paged({ items: items.map((d) => ({ id: d.id, name: d.body.name, created_at: d.body.created_at, updated_at: d.body.updated_at })), total, page: pg.page, perPage: pg.perPage });
  });
  const presetOf = async (params: Record<string, string>) => {
    await appOf(params);
    const doc = await presets.get(db, params.app_id, params.preset_id);
    if (!doc) throw apiError('rtk_not_found', 'Preset', params.preset_id);
    return doc;
  };
  route(ctx, { method: 'POST', path: `${BASE}/presets`, operationId: 'rtk-presets-create', summary: 'Create a preset', level: 'edit', body: PresetBody, status: 201 }, async ({ params, body }) => {
    await appOf(params);
    const taken = await presets.list(db, params.app_id, { filters: [{ field: 'name', op: 'eq', value: body.name }], limit: 1 });
    if (taken.items.length) throw apiError('rtk_conflict', `a preset named ${body.name} already exists`);
    const at = now();
    const id = uuid();
    const doc = await presets.insert(db, params.app_id, id, { ...completePreset(body), id, app_id: params.app_id, created_at: isoOf(at), updated_at: isoOf(at) }, at);
    return presetView(doc.body);
  });
  route(ctx, { method: 'GET', path: `${BASE}/presets/:preset_id`, operationId: 'rtk-presets-get', summary: 'Get a preset', level: 'read' }, async ({ params }) => presetView((await presetOf(params)).body));
  for (const method of ['PATCH', 'PUT'] as const) {
    const schema = method === 'PUT' ? PresetBody : PresetBody.partial();
    route(ctx, { method, path: `${BASE}/presets/:preset_id`, operationId: `rtk-presets-${method.toLowerCase()}`, summary: 'Update a preset', level: 'edit', body: schema }, async ({ params, body }) => {
      const doc = await presetOf(params);
      if (body.name && body.name !== doc.body.name) {
        const taken = await presets.list(db, params.app_id, { filters: [{ field: 'name', op: 'eq', value: body.name }], limit: 1 });
        if (taken.items.length) throw apiError('rtk_conflict', `a preset named ${body.name} already exists`);
      }
      const merged = method === 'PUT' ? completePreset(body as z.output<typeof PresetBody>) : completePreset({
        name: body.name ?? doc.body.name,
        config: { ...doc.body.config, ...(body.config ?? {}) },
        permissions: { ...doc.body.permissions, ...(body.permissions ?? {}) },
        ui: body.ui ?? doc.body.ui,
      });
      const at = now();
      const updated = await presets.update(db, doc, { ...doc.body, ...merged, updated_at: isoOf(at) }, at);
      return presetView(updated.body);
    });
  }
  route(ctx, { method: 'DELETE', path: `${BASE}/presets/:preset_id`, operationId: 'rtk-presets-delete', summary: 'Delete a preset', level: 'edit' }, async ({ params }) => {
    const doc = await presetOf(params);
    await presets.delete(db, params.app_id, doc.id);
    return presetView(doc.body);
  });

  // --- meetings ----------------------------------------------------------------------------------
  const MeetingList = z.object({
    ...PageQuery,
    search: qString(z.string().max(MAX_TITLE)).optional(),
    status: qString(z.enum(['ACTIVE', 'INACTIVE'])).optional(),
    start_time: qString(z.string().datetime({ offset: true })).optional(),
    end_time: qString(z.string().datetime({ offset: true })).optional(),
  });
  route(ctx, { method: 'GET', path: `${BASE}/meetings`, operationId: 'rtk-meetings-list', summary: 'List meetings', level: 'read', query: MeetingList }, async ({ params, query }) => {
    await appOf(params);
    const pg = pageOf(query);
    const filters: { field: 'status' | 'title'; op: 'eq' | 'contains'; value: string }[] = [];
    if (query.status) filters.push({ field: 'status', op: 'eq', value: query.status });
    if (query.search) filters.push({ field: 'title', op: 'contains', value: query.search.toLowerCase() });
    // The time window filters on creation time; it is applied in memory over the filtered set.
    if (query.start_time || query.end_time) {
      const from = query.start_time ? Date.parse(query.start_time) : -Infinity;
      const to = query.end_time ? Date.parse(query.end_time) : Infinity;
      const all = (await meetings.list(db, params.app_id, { filters, order: 'created_on', direction: 'desc' })).items.filter((d) => {
        const t = Date.parse(d.body.created_at);
        return t >= from && t <= to;
      });
      return paged({ items: all.slice(pg.offset, pg.offset + pg.perPage).map((d) => meetingView(d.body)), total: all.length, page: pg.page, perPage: pg.perPage });
    }
    const { items, total } = await meetings.list(db, params.app_id, { filters, order: 'created_on', direction: 'desc', limit: pg.perPage, offset: pg.offset });
    return paged({ items: items.map((d) => meetingView(d.body)), total, page: pg.page, perPage: pg.perPage });
  });
  route(ctx, { method: 'POST', path: `${BASE}/meetings`, operationId: 'rtk-meetings-create', summary: 'Create a meeting', level: 'edit', body: MeetingBody, bodyOptional: true, status: 201 }, async ({ params, body }) => {
    const app = await appOf(params);
    const at = now();
    const b = body ?? {};
    const m: Meeting = {
      id: uuid(),
      app_id: params.app_id,
      account_id: app.body.account_id,
      title: b.title ?? null,
      status: 'ACTIVE',
      record_on_start: b.record_on_start ?? false,
      live_stream_on_start: b.live_stream_on_start ?? false,
      persist_chat: b.persist_chat ?? false,
      summarize_on_end: b.summarize_on_end ?? false,
      transcribe_on_end: b.transcribe_on_end ?? false,
      session_keep_alive_time_in_secs: b.session_keep_alive_time_in_secs ?? 60,
      ai_config: b.ai_config ?? {},
      recording_config: b.recording_config ?? {},
      created_at: isoOf(at),
      updated_at: isoOf(at),
    };
    await meetings.insert(db, params.app_id, m.id, m, at);
    return meetingView(m);
  });
  route(ctx, { method: 'GET', path: `${BASE}/meetings/:meeting_id`, operationId: 'rtk-meetings-get', summary: 'Get a meeting', level: 'read' }, async ({ params }) => meetingView((await meetingOf(params)).body));
  const applyMeeting = async (params: Record<string, string>, body: z.output<typeof MeetingPatch>, replace: boolean) => {
    const doc = await meetingOf(params);
    const at = now();
    const m = doc.body;
    const pick = <K extends keyof Meeting>(k: K, fallback: Meeting[K]): Meeting[K] => {
      const v = (body as Record<string, unknown>)[k];
      if (v === undefined || v === null) return replace ? fallback : m[k];
      return v as Meeting[K];
    };
    const next: Meeting = {
      ...m,
      title: body.title !== undefined ? body.title : replace ? null : m.title,
      status: pick('status', m.status),
      record_on_start: pick('record_on_start', false),
      live_stream_on_start: pick('live_stream_on_start', false),
      persist_chat: pick('persist_chat', false),
      summarize_on_end: pick('summarize_on_end', false),
      transcribe_on_end: pick('transcribe_on_end', false),
      session_keep_alive_time_in_secs: pick('session_keep_alive_time_in_secs', 60),
      ai_config: pick('ai_config', {}),
      recording_config: pick('recording_config', {}),
      updated_at: isoOf(at),
    };
    const saved = await meetings.update(db, doc, next, at);
    if (m.status === 'ACTIVE' && next.status === 'INACTIVE') await deps.live.endMeeting(next.id, 'HOST_ENDED_MEETING');
    return meetingView(saved.body);
  };
  route(ctx, { method: 'PATCH', path: `${BASE}/meetings/:meeting_id`, operationId: 'rtk-meetings-update', summary: 'Update a meeting', level: 'edit', body: MeetingPatch }, ({ params, body }) => applyMeeting(params, body, false));
  route(ctx, { method: 'PUT', path: `${BASE}/meetings/:meeting_id`, operationId: 'rtk-meetings-replace', summary: 'Replace a meeting', level: 'edit', body: MeetingBody }, ({ params, body }) => applyMeeting(params, body, true));

  // --- participants ------------------------------------------------------------------------------
  route(ctx, { method: 'GET', path: `${BASE}/meetings/:meeting_id/participants`, operationId: 'rtk-participants-list', summary: 'List participants', level: 'read', query: z.object(PageQuery) }, async ({ params, query }) => {
    await meetingOf(params);
    const pg = pageOf(query);
    const { items, total } = await participants.list(db, params.meeting_id, { order: 'created_on', limit: pg.perPage, offset: pg.offset });
    return paged({ items: items.map((d) => participantView(d.body)), total, page: pg.page, perPage: pg.perPage });
  });
  route(ctx, { method: 'POST', path: `${BASE}/meetings/:meeting_id/participants`, operationId: 'rtk-participants-add', summary: 'Add a participant', level: 'edit', body: ParticipantBody, status: 201 }, async ({ params, body }) => {
    const meeting = await meetingOf(params);
    await presetByName(params.app_id, body.preset_name);
    const taken = await participants.list(db, params.meeting_id, { filters: [{ field: 'custom_id', op: 'eq', value: body.custom_participant_id }], limit: 1 });
    if (taken.items.length) throw apiError('rtk_conflict', `a participant with custom_participant_id ${body.custom_participant_id} already exists in this meeting`);
    const at = now();
    const p: Participant = {
      id: uuid(),
      meeting_id: meeting.id,
      app_id: params.app_id,
      custom_participant_id: body.custom_participant_id,
      preset_name: body.preset_name,
      name: body.name ?? null,
      picture: body.picture ?? null,
      created_at: isoOf(at),
      updated_at: isoOf(at),
    };
    await participants.insert(db, meeting.id, p.id, p, at);
    return { ...participantView(p), token: await tokenFor(p, params.account_id) };
  });
  route(ctx, { method: 'GET', path: `${BASE}/meetings/:meeting_id/participants/:participant_id`, operationId: 'rtk-participants-get', summary: 'Get a participant', level: 'read' }, async ({ params }) => participantView((await participantOf(params)).body));
  const editParticipant = async (params: Record<string, string>, body: z.output<typeof ParticipantPatch> & { custom_participant_id?: string }, replace: boolean) => {
    const doc = await participantOf(params);
    if (body.preset_name) await presetByName(params.app_id, body.preset_name);
    const at = now();
    const next: Participant = {
      ...doc.body,
      name: body.name !== undefined ? body.name : replace ? null : doc.body.name,
      picture: body.picture !== undefined ? body.picture : replace ? null : doc.body.picture,
      preset_name: body.preset_name ?? doc.body.preset_name,
      custom_participant_id: body.custom_participant_id ?? doc.body.custom_participant_id,
      updated_at: isoOf(at),
    };
    const saved = await participants.update(db, doc, next, at);
    deps.live.participantChanged(saved.body);
    return { ...participantView(saved.body), token: await tokenFor(saved.body, params.account_id) };
  };
  route(ctx, { method: 'PATCH', path: `${BASE}/meetings/:meeting_id/participants/:participant_id`, operationId: 'rtk-participants-edit', summary: 'Edit a participant', level: 'edit', body: ParticipantPatch }, ({ params, body }) => editParticipant(params, body, false));
  route(ctx, { method: 'PUT', path: `${BASE}/meetings/:meeting_id/participants/:participant_id`, operationId: 'rtk-participants-replace', summary: 'Replace a participant', level: 'edit', body: ParticipantBody }, ({ params, body }) => editParticipant(params, body, true));
  route(ctx, { method: 'DELETE', path: `${BASE}/meetings/:meeting_id/participants/:participant_id`, operationId: 'rtk-participants-delete', summary: 'Delete a participant', level: 'edit' }, async ({ params }) => {
    const doc = await participantOf(params);
    const preset = await presetByName(params.app_id, doc.body.preset_name).catch(() => undefined);
    await participants.delete(db, params.meeting_id, doc.id);
    // Its token stops working now: the join path looks the participant up on every join, and a
    // live connection is closed.
    await deps.live.kick(params.meeting_id, { participantIds: [doc.id] }, 'PARTICIPANT_DELETED');
    return { created_at: doc.body.created_at, custom_participant_id: doc.body.custom_participant_id, preset_id: preset?.id ?? null, updated_at: isoOf(now()) };
  });
  route(ctx, { method: 'POST', path: `${BASE}/meetings/:meeting_id/participants/:participant_id/token`, operationId: 'rtk-participants-token', summary: 'Refresh a participant token', level: 'edit' }, async ({ params }) => {
    const doc = await participantOf(params);
    return { token: await tokenFor(doc.body, params.account_id) };
  });

  // --- active session ----------------------------------------------------------------------------
  const activeOf = async (params: Record<string, string>) => {
    const meeting = await meetingOf(params);
    const session = await deps.live.activeSession(meeting.id);
    if (!session) throw apiError('rtk_no_active_session', meeting.id);
    return { meeting, session };
  };
  route(ctx, { method: 'GET', path: `${BASE}/meetings/:meeting_id/active-session`, operationId: 'rtk-active-session', summary: 'Get the active session', level: 'read' }, async ({ params }) => {
    const { session } = await activeOf(params);
    return sessionView(session);
  });
  route(ctx, { method: 'POST', path: `${BASE}/meetings/:meeting_id/active-session/kick`, operationId: 'rtk-kick', summary: 'Kick participants', level: 'edit', body: KickBody }, async ({ params, body }) => {
    await activeOf(params);
    const kicked = await deps.live.kick(params.meeting_id, { participantIds: [...(body.participant_ids ?? []), ...(body.user_ids ?? [])], customIds: body.custom_participant_ids ?? [] }, 'KICKED');
    return { action: 'kick', participants: kicked };
  });
  route(ctx, { method: 'POST', path: `${BASE}/meetings/:meeting_id/active-session/kick-all`, operationId: 'rtk-kick-all', summary: 'Kick every participant', level: 'edit' }, async ({ params }) => {
    await activeOf(params);
    const kicked = await deps.live.kick(params.meeting_id, { all: true }, 'KICKED');
    return { action: 'kick-all', kicked_participants_count: kicked.length };
  });
  route(ctx, { method: 'POST', path: `${BASE}/meetings/:meeting_id/active-session/mute`, operationId: 'rtk-mute', summary: 'Mute participants', level: 'edit', body: KickBody }, async ({ params, body }) => {
    await activeOf(params);
    const muted = deps.live.mute(params.meeting_id, { participantIds: [...(body.participant_ids ?? []), ...(body.user_ids ?? [])], customIds: body.custom_participant_ids ?? [] }, true);
    return { action: 'mute', participants: muted };
  });
  route(ctx, { method: 'POST', path: `${BASE}/meetings/:meeting_id/active-session/mute-all`, operationId: 'rtk-mute-all', summary: 'Mute every participant', level: 'edit', body: MuteAllBody }, async ({ params, body }) => {
    await activeOf(params);
    const muted = deps.live.mute(params.meeting_id, { all: true }, body.allow_unmute);
    return { action: 'mute-all', muted_participants_count: muted.length };
  });
  route(ctx, { method: 'POST', path: `${BASE}/meetings/:meeting_id/active-session/poll`, operationId: 'rtk-poll', summary: 'Create a poll in the active session', level: 'edit', body: PollBody, status: 201 }, async ({ params, body }) => {
    await activeOf(params);
    const poll = deps.live.createPoll(params.meeting_id, { question: body.question, options: body.options, anonymous: body.anonymous ?? false, hideVotes: body.hide_votes ?? false, createdBy: 'api' });
    return { action: 'create-poll', poll };
  });

  // --- sessions ----------------------------------------------------------------------------------
  const SessionList = z.object({
    ...PageQuery,
    associated_id: qString(z.string().max(128)).optional(),
    status: qString(z.enum(['LIVE', 'ENDED'])).optional(),
  });
  route(ctx, { method: 'GET', path: `${BASE}/sessions`, operationId: 'rtk-sessions-list', summary: 'List sessions', level: 'read', query: SessionList }, async ({ params, query }) => {
    await appOf(params);
    const pg = pageOf(query);
    const filters: { field: 'meeting' | 'status'; op: 'eq'; value: string }[] = [];
    if (query.associated_id) filters.push({ field: 'meeting', op: 'eq', value: query.associated_id });
    if (query.status) filters.push({ field: 'status', op: 'eq', value: query.status });
    const { items, total } = await sessions.list(db, params.app_id, { filters, order: 'created_on', direction: 'desc', limit: pg.perPage, offset: pg.offset });
    return paged({ items: items.map((d) => sessionView(d.body)), total, page: pg.page, perPage: pg.perPage }, (s) => ({ sessions: s }));
  });
  const sessionOf = async (params: Record<string, string>) => {
    await appOf(params);
    const doc = await sessions.get(db, params.app_id, params.session_id);
    if (!doc) throw apiError('rtk_not_found', 'Session', params.session_id);
    return doc;
  };
  route(ctx, { method: 'GET', path: `${BASE}/sessions/peer-report/:peer_id`, operationId: 'rtk-sessions-peer-report', summary: 'A peer and its call statistics, by peer id', level: 'read' }, async ({ params }) => {
    await appOf(params);
    const doc = await sessionPeers.findById(db, params.peer_id);
    const session = doc ? await sessions.get(db, params.app_id, doc.body.session_id) : undefined;
    if (!doc || !session) throw apiError('rtk_not_found', 'Peer', params.peer_id);
    return { participant: peerView(doc.body, true) };
  });
  route(ctx, { method: 'GET', path: `${BASE}/sessions/:session_id`, operationId: 'rtk-sessions-get', summary: 'Get a session', level: 'read' }, async ({ params }) => sessionView((await sessionOf(params)).body));
  route(ctx, { method: 'GET', path: `${BASE}/sessions/:session_id/participants`, operationId: 'rtk-sessions-participants', summary: 'Participants of a session', level: 'read', query: z.object(PageQuery) }, async ({ params, query }) => {
    await sessionOf(params);
    const pg = pageOf(query);
    const { items, total } = await sessionPeers.list(db, params.session_id, { order: 'created_on', limit: pg.perPage, offset: pg.offset });
    return paged({ items: items.map((d) => peerView(d.body, false)), total, page: pg.page, perPage: pg.perPage }, (p) => ({ participants: p }));
  });
  route(ctx, { method: 'GET', path: `${BASE}/sessions/:session_id/participants/:participant_id`, operationId: 'rtk-sessions-participant', summary: 'A session participant with call statistics', level: 'read' }, async ({ params }) => {
    await sessionOf(params);
    const doc = await sessionPeers.get(db, params.session_id, params.participant_id);
    if (!doc) throw apiError('rtk_not_found', 'Session participant', params.participant_id);
    return { participant: peerView(doc.body, true) };
  });

  // --- webhooks ----------------------------------------------------------------------------------
  route(ctx, { method: 'GET', path: `${BASE}/webhooks`, operationId: 'rtk-webhooks-list', summary: 'List webhooks', level: 'read' }, async ({ params }) => {
    await appOf(params);
    return (await webhooks.all(db, params.app_id)).map((d) => webhookView(d.body));
  });
  route(ctx, { method: 'POST', path: `${BASE}/webhooks`, operationId: 'rtk-webhooks-create', summary: 'Add a webhook', level: 'edit', body: WebhookBody, status: 201 }, async ({ params, body }) => {
    await appOf(params);
    const at = now();
    const w: Webhook = { id: uuid(), app_id: params.app_id, name: body.name ?? new URL(body.url).host, url: body.url, events: [...new Set(body.events)], enabled: body.enabled ?? true, created_at: isoOf(at), updated_at: isoOf(at) };
    await webhooks.insert(db, params.app_id, w.id, w, at);
    return webhookView(w);
  });
  const webhookOf = async (params: Record<string, string>) => {
    await appOf(params);
    const doc = await webhooks.get(db, params.app_id, params.webhook_id);
    if (!doc) throw apiError('rtk_not_found', 'Webhook', params.webhook_id);
    return doc;
  };
  route(ctx, { method: 'GET', path: `${BASE}/webhooks/:webhook_id`, operationId: 'rtk-webhooks-get', summary: 'Get a webhook', level: 'read' }, async ({ params }) => webhookView((await webhookOf(params)).body));
  for (const method of ['PATCH', 'PUT'] as const) {
    route(ctx, { method, path: `${BASE}/webhooks/:webhook_id`, operationId: `rtk-webhooks-${method.toLowerCase()}`, summary: 'Edit a webhook', level: 'edit', body: method === 'PUT' ? WebhookBody : WebhookPatch }, async ({ params, body }) => {
      const doc = await webhookOf(params);
      const at = now();
      const w = doc.body;
      const next: Webhook = {
        ...w,
        name: body.name ?? (method === 'PUT' && body.url ? new URL(body.url).host : w.name),
        url: body.url ?? w.url,
        events: body.events ? [...new Set(body.events)] : w.events,
        enabled: body.enabled ?? (method === 'PUT' ? true : w.enabled),
        updated_at: isoOf(at),
      };
      return webhookView((await webhooks.update(db, doc, next, at)).body);
    });
  }
  route(ctx, { method: 'DELETE', path: `${BASE}/webhooks/:webhook_id`, operationId: 'rtk-webhooks-delete', summary: 'Delete a webhook', level: 'edit' }, async ({ params }) => {
    const doc = await webhookOf(params);
    await webhooks.delete(db, params.app_id, doc.id);
    return webhookView(doc.body);
  });

  // --- the webhook signing key ---------------------------------------------------------------------
  route(ctx, { method: 'GET', path: '/.well-known/webhooks.json', operationId: 'rtk-webhooks-key', summary: 'Public key of webhook signatures', level: 'public' }, async () =>
    reply(200, { success: true, data: { publicKey: deps.key().publicPem }, message: 'Public key for webhook signature verification' }),
  );
  void Out;
}

export function sessionView(s: import('./store.ts').SessionRecord): Record<string, unknown> {
  const { app_id: _a, account_id: _b, ...rest } = s;
  return rest;
}

function peerView(p: import('./store.ts').SessionPeer, withStats: boolean): Record<string, unknown> {
  const { session_id: _s, quality_stats, ...rest } = p;
  return withStats ? { ...rest, quality_stats: quality_stats ?? null } : rest;
}
