/**
 * Live meetings: the signalling WebSocket (`/realtime/kit/socket?authToken=…` on the API port),
 * rooms with their peers, waitlist, chat, polls and plugins, media through the forwarder, and the
 * session lifecycle. A token is verified before the upgrade (signature, expiry, that its
 * participant and meeting still exist and the meeting is ACTIVE). A session starts with the first
 * admitted peer and ends when the last one has left and `session_keep_alive_time_in_secs` has
 * passed, or at once when the meeting is made INACTIVE. Room events that touch storage run one at
 * a time per room, so a join racing a leave cannot start two sessions. A hidden participant (a
 * preset with `hidden_participant`, and the recorder's page of a recording or meeting livestream)
 * joins unseen: it neither starts nor keeps a session, is not counted in it nor stored as one of
 * its participants, and no peer is told it came, changed or went.
 *
 * Messages are JSON. A client request carries `id` and is answered `{t: 'reply', id, ok, data |
 * error}`; everything else the server sends is an event (`peerJoined`, `peerLeft`, `peerUpdate`,
 * `chat`, `poll`, `plugin`, `waitlisted`, `waitlistUpdate`, `kicked`, `muted`, `ended`…).
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import type { AreaContext } from '../../core/area.ts';
import { apiError } from '../../core/errors.ts';
import { uuid } from '../../core/ids.ts';
import { Forwarder, SfuError, checkSdp, type Session as SfuSession, type TrackItem } from '../calls/sfu/index.ts';
import { verifyToken, type SigningKey } from './keys.ts';
import { RECORDER_PRESET, type Permissions } from './presets.ts';
import { apps, meetings, participants, presets, sessionPeers, sessions, type Meeting, type Participant, type SessionRecord } from './store.ts';
import type { Deliveries } from './webhooks.ts';
import { chatLink, originOf } from './chat-sync.ts';

export const SOCKET_PATH = '/realtime/kit/socket';
/** Longest chat text, characters. */
export const MAX_CHAT_TEXT = 4000;
/** Largest image message (a data URL), bytes. */
export const MAX_CHAT_IMAGE = 1024 * 1024;
const MAX_FRAME = MAX_CHAT_IMAGE + 64 * 1024;
const MAX_CHAT_HISTORY = 1000;
const MAX_PLUGIN_EVENTS = 5000;
const MAX_SFU_SESSIONS_PER_PEER = 64;
/** Plugins every meeting offers; the whiteboard's state is the list of strokes sent to it. */
export const PLUGINS = [{ id: 'whiteboard', name: 'Whiteboard', description: 'A shared drawing board' }];

export interface PeerInfo {
  id: string;
  userId: string;
  customParticipantId: string;
  name: string;
  picture: string | null;
  presetName: string;
  audioEnabled: boolean;
  videoEnabled: boolean;
  screenShareEnabled: boolean;
  /** Forwarder tracks of this peer, for subscribers: `{sessionId, trackName}` per kind. */
  tracks: Record<string, { sessionId: string; trackName: string }>;
  isHost: boolean;
}

/**
 * A hidden participant: its preset says `hidden_participant`, or it is the recorder's page (the
 * recorder preset, also when stored before the preset carried the flag).
 */
function hidden(p: Peer): boolean {
  return p.permissions.hidden_participant === true || p.info.presetName === RECORDER_PRESET;
}

/** The peers that are in the meeting and seen: joined and not hidden. */
function present(room: Room): Peer[] {
  return [...room.peers.values()].filter((p) => p.state === 'joined' && !hidden(p));
}

interface Peer {
  info: PeerInfo;
  ws: WebSocket;
  participant: Participant;
  permissions: Permissions;
  state: 'connected' | 'waitlisted' | 'joined' | 'gone';
  sfu: Map<string, SfuSession>;
  joinedAt?: string;
  /** Set by mute-all without allow_unmute: the server refuses to turn audio back on. */
  audioLocked: boolean;
  /** Muted by a host: the forwarder holds this peer's audio back until the peer unmutes itself. */
  audioHeld: boolean;
}

export interface Poll {
  id: string;
  question: string;
  options: { text: string; votes: { id: string; name: string }[]; count: number }[];
  anonymous: boolean;
  hideVotes: boolean;
  createdBy: string;
  voted: string[];
}

export interface ChatMessage {
  id: string;
  type: 'text' | 'image';
  message?: string;
  link?: string;
  userId: string;
  peerId: string;
  displayName: string;
  time: string;
}

interface Room {
  meetingId: string;
  appId: string;
  peers: Map<string, Peer>;
  session?: SessionRecord;
  chat: ChatMessage[];
  polls: Poll[];
  plugins: Map<string, { active: boolean; events: unknown[] }>;
  /** Participants admitted once, for `SKIP_ON_ACCEPT` waiting rooms. */
  admitted: Set<string>;
  /** Origin the peers reached the API at (Host of their upgrade), for chat download links. */
  origin?: string;
  endTimer?: NodeJS.Timeout;
  queue: Promise<unknown>;
}

export interface LiveOptions {
  ctx: AreaContext;
  key: () => SigningKey;
  deliveries: Deliveries;
  forwarder: Forwarder;
  /** Caps every meeting's keep-alive (tests; operators who want sessions to end sooner). */
  keepAliveCapSecs?: number;
  /** Media features that follow the room (live transcripts, chat export): see media/hooks.ts. */
  media?: LiveMediaHooks;
}

export interface LiveMediaHooks {
  audioPublished(a: { meetingId: string; sessionId: string; sessionStartedAt: string; peer: PeerInfo; permissions: Permissions; sfuSessionId: string; trackName: string }): void;
  peerGone(peerId: string): void;
  chatSent(a: { meetingId: string; sessionId: string; message: ChatMessage }): void;
  /** Resolves once every chat message of the session sent so far is stored (before `meeting.chatSynced`). */
  chatStored?(sessionId: string): Promise<void>;
  /** A session began (after `meeting.started` is queued): `record_on_start` and `live_stream_on_start` act here. */
  sessionStarted?(a: { appId: string; meetingId: string }): void;
}

class ClientError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
function str(v: unknown, name: string, max: number): string {
  if (typeof v !== 'string' || v.length === 0) throw new ClientError('invalid', `${name} must be a non-empty string`);
  if (v.length > max) throw new ClientError('too_large', `${name} is longer than ${max} characters`);
  return v;
}

export class Live {
  private readonly rooms = new Map<string, Room>();
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME });
  private closed = false;

  constructor(private readonly opts: LiveOptions) {}

  private get db() {
    return this.opts.ctx.database.db;
  }
  private now(): Date {
    return this.opts.ctx.clock.now();
  }
  private get log() {
    return this.opts.ctx.log;
  }

  private room(meetingId: string, appId: string): Room {
    let r = this.rooms.get(meetingId);
    if (!r) {
      r = { meetingId, appId, peers: new Map(), chat: [], polls: [], plugins: new Map(PLUGINS.map((p) => [p.id, { active: false, events: [] }])), admitted: new Set(), queue: Promise.resolve() };
      this.rooms.set(meetingId, r);
    }
    return r;
  }

  /** Runs `fn` after the room's earlier storage-touching events. */
  private serial<T>(room: Room, fn: () => Promise<T>): Promise<T> {
    const next = room.queue.then(fn, fn);
    room.queue = next.catch((err: unknown) => this.log.warn({ err, meeting: room.meetingId }, 'meeting room event failed'));
    return next;
  }

  // --- the upgrade -------------------------------------------------------------------------------

  handleUpgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    const refuse = (status: number, code: string, message: string) => {
      const body = JSON.stringify({ success: false, error: { code: status, message } });
      socket.end(`HTTP/1.1 ${status} ${code}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    };
    const url = new URL(req.url ?? '/', 'http://x');
    const token = url.searchParams.get('authToken') ?? '';
    if (this.closed) return refuse(503, 'Service Unavailable', 'the server is stopping');
    this.admit(token)
      .then((found) => {
        if (!found.ok) return refuse(found.status, found.status === 401 ? 'Unauthorized' : found.status === 404 ? 'Not Found' : 'Forbidden', found.reason);
        const origin = originOf(req.headers.host);
        this.wss.handleUpgrade(req, socket, head, (ws) => this.connected(ws, found.meeting, found.participant, found.permissions, origin));
      })
      .catch((err: unknown) => {
        this.log.warn({ err }, 'meeting join failed');
        refuse(500, 'Internal Server Error', 'the join could not be processed');
      });
  }

  private async admit(
    token: string,
  ): Promise<{ ok: true; meeting: Meeting; participant: Participant; permissions: Permissions } | { ok: false; status: number; reason: string }> {
    if (!token) return { ok: false, status: 401, reason: 'authToken query parameter is required' };
    const v = await verifyToken(this.opts.key(), token, this.now());
    if (!v.ok) return { ok: false, status: 401, reason: v.reason };
    const meeting = await meetings.get(this.db, v.claims.appId, v.claims.meetingId);
    if (!meeting) return { ok: false, status: 404, reason: `meeting ${v.claims.meetingId} does not exist` };
    if (meeting.body.status !== 'ACTIVE') return { ok: false, status: 403, reason: `meeting ${meeting.id} is INACTIVE` };
    const participant = await participants.get(this.db, meeting.id, v.claims.participantId);
    if (!participant) return { ok: false, status: 401, reason: 'the participant of this token was deleted' };
    const preset = (await presets.list(this.db, meeting.body.app_id, { filters: [{ field: 'name', op: 'eq', value: participant.body.preset_name }], limit: 1 })).items[0];
    if (!preset) return { ok: false, status: 403, reason: `preset ${participant.body.preset_name} no longer exists` };
    return { ok: true, meeting: meeting.body, participant: participant.body, permissions: preset.body.permissions };
  }

  private connected(ws: WebSocket, meeting: Meeting, participant: Participant, permissions: Permissions, origin: string | undefined): void {
    const room = this.room(meeting.id, meeting.app_id);
    if (origin) room.origin = origin;
    const peer: Peer = {
      info: {
        id: uuid(),
        userId: participant.id,
        customParticipantId: participant.custom_participant_id,
        name: participant.name ?? participant.custom_participant_id,
        picture: participant.picture,
        presetName: participant.preset_name,
        audioEnabled: false,
        videoEnabled: false,
        screenShareEnabled: false,
        tracks: {},
        isHost: permissions.accept_waiting_requests === true,
      },
      ws,
      participant,
      permissions,
      state: 'connected',
      sfu: new Map(),
      audioLocked: false,
      audioHeld: false,
    };
    room.peers.set(peer.info.id, peer);
    this.send(peer, { t: 'hello', self: peer.info, permissions, meta: { meetingId: meeting.id, meetingTitle: meeting.title ?? '' }, plugins: PLUGINS, limits: { chatText: MAX_CHAT_TEXT, chatImage: MAX_CHAT_IMAGE } });
    ws.on('message', (data, isBinary) => {
      if (isBinary) return this.send(peer, { t: 'error', code: 'invalid', message: 'messages are JSON text' });
      let msg: unknown;
      try {
        msg = JSON.parse(data.toString());
      } catch {
        return this.send(peer, { t: 'error', code: 'invalid', message: 'the message is not JSON' });
      }
      void this.onMessage(room, peer, msg);
    });
    // At server stop the sockets close after the rooms were dropped: nothing is left to update.
    ws.on('close', () => {
      if (!this.closed) void this.serial(room, () => this.leave(room, peer, 'left'));
    });
    ws.on('error', () => ws.terminate());
  }

  /** Sends an event to every joined peer of a meeting (media features: transcripts). */
  broadcastTo(meetingId: string, msg: unknown): void {
    const room = this.rooms.get(meetingId);
    if (room) this.broadcast(room, msg);
  }

  private send(peer: Peer, msg: unknown): void {
    if (peer.ws.readyState === peer.ws.OPEN) peer.ws.send(JSON.stringify(msg));
  }

  private broadcast(room: Room, msg: unknown, except?: Peer, who: (p: Peer) => boolean = (p) => p.state === 'joined'): void {
    const text = JSON.stringify(msg);
    for (const p of room.peers.values()) if (p !== except && who(p) && p.ws.readyState === p.ws.OPEN) p.ws.send(text);
  }

  private async onMessage(room: Room, peer: Peer, msg: unknown): Promise<void> {
    const id = isObj(msg) && (typeof msg.id === 'string' || typeof msg.id === 'number') ? msg.id : undefined;
    try {
      if (!isObj(msg) || typeof msg.t !== 'string') throw new ClientError('invalid', 'a message is an object with a string t');
      const data = await this.dispatch(room, peer, msg);
      if (id !== undefined) this.send(peer, { t: 'reply', id, ok: true, data: data ?? null });
    } catch (err) {
      const e =
        err instanceof ClientError
          ? { code: err.code, message: err.message }
          : err instanceof SfuError
            ? { code: err.code, message: err.message }
            : { code: 'internal', message: 'the server could not process this message' };
      if (!(err instanceof ClientError) && !(err instanceof SfuError)) this.log.warn({ err }, 'meeting message failed');
      this.send(peer, id !== undefined ? { t: 'reply', id, ok: false, error: e } : { t: 'error', ...e });
    }
  }

  private requireJoined(peer: Peer): void {
    if (peer.state !== 'joined') throw new ClientError('not_joined', 'join the meeting first');
  }

  private async dispatch(room: Room, peer: Peer, msg: Record<string, unknown>): Promise<unknown> {
    switch (msg.t) {
      case 'join':
        if (peer.state !== 'connected') throw new ClientError('invalid_state', `already ${peer.state}`);
        if (msg.name !== undefined) peer.info.name = str(msg.name, 'name', 255);
        return this.serial(room, () => this.join(room, peer));
      case 'leave':
        await this.serial(room, () => this.leave(room, peer, 'left'));
        // After the reply to this request has been sent.
        setImmediate(() => peer.ws.close(1000, 'left'));
        return null;
      case 'sfu':
        this.requireJoined(peer);
        return this.sfu(room, peer, msg);
      case 'media':
        this.requireJoined(peer);
        return this.media(room, peer, msg);
      case 'chat':
        this.requireJoined(peer);
        return this.chat(room, peer, msg);
      case 'poll.create': {
        this.requireJoined(peer);
        if (!peer.permissions.polls?.can_create) throw new ClientError('forbidden', 'this preset may not create polls');
        const options = msg.options;
        if (!Array.isArray(options) || options.length < 2 || options.length > 20) throw new ClientError('invalid', 'options must be 2 to 20 strings');
        return this.createPoll(room.meetingId, {
          question: str(msg.question, 'question', 1000),
          options: options.map((o, i) => str(o, `options[${i}]`, 500)),
          anonymous: msg.anonymous === true,
          hideVotes: msg.hideVotes === true,
          createdBy: peer.info.name,
        });
      }
      case 'poll.vote':
        this.requireJoined(peer);
        return this.vote(room, peer, msg);
      case 'plugin.activate':
      case 'plugin.deactivate':
      case 'plugin.data':
        this.requireJoined(peer);
        return this.plugin(room, peer, msg);
      case 'waitlist.accept':
      case 'waitlist.reject':
        this.requireJoined(peer);
        if (!peer.permissions.accept_waiting_requests) throw new ClientError('forbidden', 'this preset may not admit participants');
        return this.serial(room, () => this.decide(room, String(msg.peerId), msg.t === 'waitlist.accept'));
      case 'stats':
        this.requireJoined(peer);
        if (!isObj(msg.stats)) throw new ClientError('invalid', 'stats must be an object');
        if (JSON.stringify(msg.stats).length > 16_384) throw new ClientError('too_large', 'stats are larger than 16 KiB');
        return this.serial(room, () => this.saveStats(room, peer, msg.stats as Record<string, unknown>));
      default:
        throw new ClientError('invalid', `unknown message type ${String(msg.t)}`);
    }
  }

  // --- joining, waitlist, leaving ------------------------------------------------------------------

  private waitsFor(room: Room, peer: Peer): boolean {
    const type = peer.permissions.waiting_room_type ?? 'SKIP';
    if (type === 'SKIP') return false;
    if (type === 'SKIP_ON_ACCEPT' && room.admitted.has(peer.info.userId)) return false;
    return true;
  }

  private async join(room: Room, peer: Peer): Promise<unknown> {
    if (peer.state !== 'connected') throw new ClientError('invalid_state', `already ${peer.state}`);
    if (this.waitsFor(room, peer)) {
      peer.state = 'waitlisted';
      this.broadcast(room, { t: 'waitlistUpdate', added: peer.info }, peer, (p) => p.state === 'joined' && p.permissions.accept_waiting_requests === true);
      return { state: 'waitlisted' };
    }
    return this.enter(room, peer);
  }

  private async enter(room: Room, peer: Peer): Promise<unknown> {
    const meeting = await meetings.get(this.db, room.appId, room.meetingId);
    if (!meeting || meeting.body.status !== 'ACTIVE') throw new ClientError('meeting_inactive', 'the meeting is not active');
    if (hidden(peer)) return this.enterHidden(room, peer, meeting.body);
    if (room.endTimer) {
      clearTimeout(room.endTimer);
      room.endTimer = undefined;
    }
    const at = this.now();
    if (!room.session || room.session.status !== 'LIVE') await this.startSession(room, meeting.body, at);
    peer.state = 'joined';
    peer.joinedAt = at.toISOString();
    room.admitted.add(peer.info.userId);
    const session = room.session!;
    const joined = present(room);
    session.live_participants = joined.length;
    session.max_concurrent_participants = Math.max(session.max_concurrent_participants, joined.length);
    await this.saveSession(room);
    await sessionPeers.insert(
      this.db,
      session.id,
      peer.info.id,
      {
        id: peer.info.id,
        session_id: session.id,
        user_id: peer.info.userId,
        custom_participant_id: peer.info.customParticipantId,
        display_name: peer.info.name,
        preset_name: peer.info.presetName,
        joined_at: peer.joinedAt,
        peer_events: [{ event: 'joined', at: peer.joinedAt }],
        created_at: peer.joinedAt,
        updated_at: peer.joinedAt,
      },
      at,
    );
    const state = {
      state: 'joined',
      self: peer.info,
      peers: joined.filter((p) => p !== peer).map((p) => p.info),
      waitlisted: peer.permissions.accept_waiting_requests ? [...room.peers.values()].filter((p) => p.state === 'waitlisted').map((p) => p.info) : [],
      meta: { meetingId: room.meetingId, meetingTitle: meeting.body.title ?? '', meetingStartedTimestamp: session.started_at, sessionId: session.id },
      chat: room.chat,
      polls: room.polls.map((p) => this.pollView(p)),
      plugins: [...room.plugins.entries()].map(([id, s]) => ({ id, active: s.active, events: s.events })),
    };
    this.send(peer, { t: 'joined', ...state });
    this.broadcast(room, { t: 'peerJoined', peer: peer.info }, peer);
    await this.opts.deliveries.enqueue(room.appId, 'meeting.participantJoined', {
      meeting: await this.meetingPayload(room, meeting.body),
      participant: { peerId: peer.info.id, userDisplayName: peer.info.name, customParticipantId: peer.info.customParticipantId, joinedAt: peer.joinedAt },
    });
    return state;
  }

  /**
   * A hidden participant (the recorder's page) joins without being seen: it neither starts nor
   * keeps the session, is not counted nor listed, and no one is told it came or went.
   */
  private enterHidden(room: Room, peer: Peer, meeting: Meeting): unknown {
    peer.state = 'joined';
    peer.joinedAt = this.now().toISOString();
    const session = room.session?.status === 'LIVE' ? room.session : undefined;
    const state = {
      state: 'joined',
      self: peer.info,
      peers: present(room).map((p) => p.info),
      waitlisted: [],
      meta: { meetingId: room.meetingId, meetingTitle: meeting.title ?? '', meetingStartedTimestamp: session?.started_at ?? null, sessionId: session?.id ?? null },
      chat: room.chat,
      polls: room.polls.map((p) => this.pollView(p)),
      plugins: [...room.plugins.entries()].map(([id, s]) => ({ id, active: s.active, events: s.events })),
    };
    this.send(peer, { t: 'joined', ...state });
    return state;
  }

  private async decide(room: Room, peerId: string, accept: boolean): Promise<unknown> {
    const target = room.peers.get(peerId);
    if (!target || target.state !== 'waitlisted') throw new ClientError('not_found', `no waitlisted peer ${peerId}`);
    this.broadcast(room, { t: 'waitlistUpdate', removed: target.info.id }, undefined, (p) => p.state === 'joined' && p.permissions.accept_waiting_requests === true);
    if (accept) {
      target.state = 'connected';
      await this.enter(room, target);
      return { accepted: peerId };
    }
    target.state = 'gone';
    this.send(target, { t: 'rejected' });
    target.ws.close(4003, 'rejected');
    room.peers.delete(peerId);
    return { rejected: peerId };
  }

  private async leave(room: Room, peer: Peer, reason: string): Promise<void> {
    if (peer.state === 'gone') return;
    const wasJoined = peer.state === 'joined';
    const wasWaiting = peer.state === 'waitlisted';
    peer.state = 'gone';
    room.peers.delete(peer.info.id);
    this.opts.media?.peerGone(peer.info.id);
    for (const s of peer.sfu.values()) await this.opts.forwarder.closeSession(s).catch(() => undefined);
    peer.sfu.clear();
    if (wasWaiting) this.broadcast(room, { t: 'waitlistUpdate', removed: peer.info.id }, undefined, (p) => p.state === 'joined' && p.permissions.accept_waiting_requests === true);
    if (!wasJoined || !room.session || hidden(peer)) {
      this.dropIfEmpty(room);
      return;
    }
    this.broadcast(room, { t: 'peerLeft', peerId: peer.info.id, reason });
    const at = this.now();
    const session = room.session;
    const joined = present(room);
    session.live_participants = joined.length;
    await this.saveSession(room);
    const doc = await sessionPeers.get(this.db, session.id, peer.info.id);
    if (doc) {
      const duration = (at.getTime() - Date.parse(doc.body.joined_at)) / 60_000;
      await sessionPeers.update(this.db, doc, { ...doc.body, left_at: at.toISOString(), duration, peer_events: [...doc.body.peer_events, { event: reason, at: at.toISOString() }], updated_at: at.toISOString() }, at);
    }
    const meeting = await meetings.get(this.db, room.appId, room.meetingId);
    await this.opts.deliveries.enqueue(room.appId, 'meeting.participantLeft', {
      meeting: meeting ? await this.meetingPayload(room, meeting.body) : { id: room.meetingId, sessionId: session.id },
      participant: { peerId: peer.info.id, userDisplayName: peer.info.name, customParticipantId: peer.info.customParticipantId, joinedAt: peer.joinedAt, leftAt: at.toISOString() },
    });
    if (joined.length === 0) {
      const keep = Math.min(meeting?.body.session_keep_alive_time_in_secs ?? 60, this.opts.keepAliveCapSecs ?? Infinity);
      room.endTimer = setTimeout(() => void this.serial(room, () => this.endSession(room, 'ALL_PARTICIPANTS_LEFT')), keep * 1000);
      room.endTimer.unref();
    }
  }

  private dropIfEmpty(room: Room): void {
    if (room.peers.size === 0 && !room.endTimer && (!room.session || room.session.status !== 'LIVE')) this.rooms.delete(room.meetingId);
  }

  // --- sessions and webhooks -----------------------------------------------------------------------

  private async startSession(room: Room, meeting: Meeting, at: Date): Promise<void> {
    const ts = at.toISOString();
    room.session = {
      id: uuid(),
      app_id: room.appId,
      account_id: meeting.account_id,
      associated_id: meeting.id,
      meeting_display_name: meeting.title ?? '',
      status: 'LIVE',
      type: 'meeting',
      live_participants: 0,
      max_concurrent_participants: 0,
      minutes_consumed: 0,
      organization_id: room.appId,
      started_at: ts,
      created_at: ts,
      updated_at: ts,
    };
    room.chat = [];
    room.polls = [];
    for (const s of room.plugins.values()) {
      s.active = false;
      s.events = [];
    }
    await sessions.insert(this.db, room.appId, room.session.id, room.session, at);
    await this.opts.deliveries.enqueue(room.appId, 'meeting.started', { meeting: await this.meetingPayload(room, meeting) });
    this.opts.media?.sessionStarted?.({ appId: room.appId, meetingId: room.meetingId });
  }

  private async saveSession(room: Room): Promise<void> {
    const s = room.session;
    if (!s) return;
    const at = this.now();
    const doc = await sessions.get(this.db, room.appId, s.id);
    if (!doc) return;
    s.updated_at = at.toISOString();
    await sessions.update(this.db, doc, { ...s }, at);
  }

  private async endSession(room: Room, reason: 'ALL_PARTICIPANTS_LEFT' | 'HOST_ENDED_MEETING'): Promise<void> {
    room.endTimer = undefined;
    const s = room.session;
    if (!s || s.status !== 'LIVE') return;
    if (reason === 'ALL_PARTICIPANTS_LEFT' && present(room).length > 0) return;
    const at = this.now();
    s.status = 'ENDED';
    s.ended_at = at.toISOString();
    s.live_participants = 0;
    s.minutes_consumed = Math.round(((at.getTime() - Date.parse(s.started_at)) / 60_000) * 100) / 100;
    await this.saveSession(room);
    const meeting = await meetings.get(this.db, room.appId, room.meetingId);
    await this.opts.deliveries.enqueue(room.appId, 'meeting.ended', {
      meeting: meeting ? await this.meetingPayload(room, meeting.body) : { id: room.meetingId, sessionId: s.id },
      reason,
    });
    if (room.chat.length > 0) await this.syncChat(room, s, meeting?.body);
    this.dropIfEmpty(room);
  }

  /** Queues `meeting.chatSynced` with a download link to the ended session's stored chat. */
  private async syncChat(room: Room, s: SessionRecord, meeting: Meeting | undefined): Promise<void> {
    const at = this.now();
    const { config } = this.opts.ctx;
    const origin = room.origin ?? `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${config.apiPort}`;
    await this.opts.media?.chatStored?.(s.id);
    const link = chatLink(this.opts.key(), origin, room.appId, s.id, at);
    await this.opts.deliveries.enqueue(room.appId, 'meeting.chatSynced', {
      meeting: meeting ? await this.meetingPayload(room, meeting) : { id: room.meetingId, sessionId: s.id },
      chatDownloadUrl: link.url,
      chatDownloadUrlExpiry: link.expiry,
    });
  }

  private async meetingPayload(room: Room, meeting: Meeting): Promise<Record<string, unknown>> {
    const app = await apps.get(this.db, meeting.account_id, meeting.app_id);
    const s = room.session;
    return {
      id: meeting.id,
      sessionId: s?.id,
      title: meeting.title ?? '',
      status: s?.status ?? 'LIVE',
      createdAt: meeting.created_at,
      startedAt: s?.started_at,
      ...(s?.ended_at ? { endedAt: s.ended_at } : {}),
      organizedBy: { id: meeting.app_id, name: app?.body.name ?? '' },
    };
  }

  private async saveStats(room: Room, peer: Peer, stats: Record<string, unknown>): Promise<unknown> {
    if (!room.session) return null;
    const doc = await sessionPeers.get(this.db, room.session.id, peer.info.id);
    if (!doc) return null;
    const at = this.now();
    await sessionPeers.update(this.db, doc, { ...doc.body, quality_stats: { ...stats, reported_at: at.toISOString() }, updated_at: at.toISOString() }, at);
    return { saved: true };
  }

  // --- media ---------------------------------------------------------------------------------------

  private async sfu(room: Room, peer: Peer, msg: Record<string, unknown>): Promise<unknown> {
    const fwd = this.opts.forwarder;
    const own = (id: unknown): SfuSession => {
      const s = typeof id === 'string' ? peer.sfu.get(id) : undefined;
      if (!s) throw new ClientError('not_found', `session ${String(id)} is not one of this peer's sessions`);
      return s;
    };
    switch (msg.op) {
      case 'session': {
        if (peer.sfu.size >= MAX_SFU_SESSIONS_PER_PEER) throw new ClientError('too_many', `at most ${MAX_SFU_SESSIONS_PER_PEER} media sessions per peer`);
        const s = fwd.newSession(room.meetingId);
        peer.sfu.set(s.id, s);
        return { sessionId: s.id };
      }
      case 'publish': {
        const s = own(msg.sessionId);
        const offer = checkSdp(msg.offer as { type?: unknown; sdp?: unknown }, 'offer');
        const tracks = Array.isArray(msg.tracks) ? msg.tracks : [];
        const items: TrackItem[] = [];
        for (const t of tracks) {
          if (!isObj(t)) throw new ClientError('invalid', 'each track is an object');
          const kind = t.kind;
          if (kind !== 'audio' && kind !== 'video' && kind !== 'screenshare') throw new ClientError('invalid', 'track kind must be audio, video or screenshare');
          if (peer.permissions.media?.[kind]?.can_produce !== 'ALLOWED') throw new ClientError('forbidden', `this preset may not produce ${kind}`);
          items.push({ location: 'local', mid: str(t.mid, 'mid', 64), trackName: `${peer.info.id}-${kind}` });
        }
        const r = await fwd.addTracks(s, items, offer, false);
        for (const [i, t] of tracks.entries()) {
          const res = r.tracks[i];
          if (res && !res.errorCode) peer.info.tracks[(t as { kind: string }).kind] = { sessionId: s.id, trackName: String(res.trackName) };
          if (res && !res.errorCode && (t as { kind: string }).kind === 'audio' && room.session)
            this.opts.media?.audioPublished({ meetingId: room.meetingId, sessionId: room.session.id, sessionStartedAt: room.session.started_at, peer: peer.info, permissions: peer.permissions, sfuSessionId: s.id, trackName: String(res.trackName) });
        }
        // A peer a host muted stays muted when it publishes again.
        if (peer.audioHeld) this.holdAudio(peer, true);
        if (!hidden(peer)) this.broadcast(room, { t: 'peerUpdate', peer: peer.info }, peer);
        return r;
      }
      case 'subscribe': {
        const s = own(msg.sessionId);
        const tracks = Array.isArray(msg.tracks) ? msg.tracks : [];
        const items: TrackItem[] = [];
        for (const t of tracks) {
          if (!isObj(t)) throw new ClientError('invalid', 'each track is an object');
          const source = room.peers.get(String(t.peerId));
          const track = source?.state === 'joined' ? source.info.tracks[String(t.kind)] : undefined;
          if (!track) throw new ClientError('not_found', `peer ${String(t.peerId)} publishes no ${String(t.kind)} track`);
          items.push({ location: 'remote', sessionId: track.sessionId, trackName: track.trackName });
        }
        return fwd.addTracks(s, items, undefined, false);
      }
      case 'renegotiate': {
        const s = own(msg.sessionId);
        return fwd.renegotiate(s, checkSdp(msg.answer as { type?: unknown; sdp?: unknown }, 'answer'));
      }
      case 'close': {
        const s = own(msg.sessionId);
        peer.sfu.delete(s.id);
        for (const [kind, t] of Object.entries(peer.info.tracks)) if (t.sessionId === s.id) delete peer.info.tracks[kind];
        await fwd.closeSession(s);
        if (!hidden(peer)) this.broadcast(room, { t: 'peerUpdate', peer: peer.info }, peer);
        return { closed: s.id };
      }
      default:
        throw new ClientError('invalid', `unknown sfu op ${String(msg.op)}`);
    }
  }

  private media(room: Room, peer: Peer, msg: Record<string, unknown>): unknown {
    for (const [field, kind] of [
      ['audioEnabled', 'audio'],
      ['videoEnabled', 'video'],
      ['screenShareEnabled', 'screenshare'],
    ] as const) {
      const v = msg[field];
      if (v === undefined) continue;
      if (typeof v !== 'boolean') throw new ClientError('invalid', `${field} must be a boolean`);
      if (v && peer.permissions.media?.[kind]?.can_produce !== 'ALLOWED') throw new ClientError('forbidden', `this preset may not produce ${kind}`);
      if (v && kind === 'audio' && peer.audioLocked) throw new ClientError('forbidden', 'a host muted everyone and does not allow unmuting');
    }
    for (const field of ['audioEnabled', 'videoEnabled', 'screenShareEnabled'] as const) {
      const v = msg[field];
      if (typeof v === 'boolean') peer.info[field] = v;
    }
    // Unmuting oneself (allowed unless locked, checked above) lifts a host's hold.
    if (msg.audioEnabled === true && peer.audioHeld) {
      peer.audioHeld = false;
      this.holdAudio(peer, false);
    }
    if (!hidden(peer)) this.broadcast(room, { t: 'peerUpdate', peer: peer.info }, peer);
    return peer.info;
  }

  // --- chat, polls, plugins --------------------------------------------------------------------------

  private chat(room: Room, peer: Peer, msg: Record<string, unknown>): unknown {
    const perm = peer.permissions.chat?.public;
    if (perm && perm.can_send === false) throw new ClientError('forbidden', 'this preset may not send chat messages');
    const base = { id: uuid(), userId: peer.info.userId, peerId: peer.info.id, displayName: peer.info.name, time: this.now().toISOString() };
    let message: ChatMessage;
    if (msg.kind === 'text') {
      if (perm && perm.text === false) throw new ClientError('forbidden', 'this preset may not send text messages');
      message = { ...base, type: 'text', message: str(msg.text, 'text', MAX_CHAT_TEXT) };
    } else if (msg.kind === 'image') {
      if (perm && perm.files === false) throw new ClientError('forbidden', 'this preset may not send files');
      const data = str(msg.data, 'data', MAX_CHAT_IMAGE);
      if (!/^data:image\/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=]+$/.test(data)) throw new ClientError('invalid', 'data must be a base64 data URL of a png, jpeg, gif or webp image');
      message = { ...base, type: 'image', link: data };
    } else throw new ClientError('invalid', 'kind must be text or image');
    room.chat.push(message);
    if (room.session) this.opts.media?.chatSent({ meetingId: room.meetingId, sessionId: room.session.id, message });
    if (room.chat.length > MAX_CHAT_HISTORY) room.chat.splice(0, room.chat.length - MAX_CHAT_HISTORY);
    this.broadcast(room, { t: 'chat', message });
    return message;
  }

  private pollView(p: Poll): unknown {
    return {
      id: p.id,
      question: p.question,
      anonymous: p.anonymous,
      hideVotes: p.hideVotes,
      createdBy: p.createdBy,
      voted: p.voted,
      options: p.options.map((o) => ({ text: o.text, count: o.count, votes: p.anonymous ? [] : o.votes })),
    };
  }

  /** Creates a poll in the meeting's live session (REST or a peer) and tells every peer. */
  createPoll(meetingId: string, input: { question: string; options: string[]; anonymous: boolean; hideVotes: boolean; createdBy: string }): unknown {
    const room = this.rooms.get(meetingId);
    if (!room?.session || room.session.status !== 'LIVE') throw apiError('rtk_no_active_session', meetingId);
    const poll: Poll = {
      id: uuid(),
      question: input.question,
      options: input.options.map((text) => ({ text, votes: [], count: 0 })),
      anonymous: input.anonymous,
      hideVotes: input.hideVotes,
      createdBy: input.createdBy,
      voted: [],
    };
    room.polls.push(poll);
    const view = this.pollView(poll);
    this.broadcast(room, { t: 'poll', poll: view, created: true });
    return view;
  }

  private vote(room: Room, peer: Peer, msg: Record<string, unknown>): unknown {
    if (peer.permissions.polls?.can_vote === false) throw new ClientError('forbidden', 'this preset may not vote');
    const poll = room.polls.find((p) => p.id === msg.pollId);
    if (!poll) throw new ClientError('not_found', `poll ${String(msg.pollId)} does not exist`);
    const index = msg.index;
    if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= poll.options.length) throw new ClientError('invalid', `index must be 0 to ${poll.options.length - 1}`);
    if (poll.voted.includes(peer.info.userId)) throw new ClientError('conflict', 'this participant has already voted in this poll');
    poll.voted.push(peer.info.userId);
    poll.options[index].count++;
    poll.options[index].votes.push({ id: peer.info.userId, name: peer.info.name });
    const view = this.pollView(poll);
    this.broadcast(room, { t: 'poll', poll: view, created: false });
    return view;
  }

  private plugin(room: Room, peer: Peer, msg: Record<string, unknown>): unknown {
    const id = String(msg.pluginId);
    const state = room.plugins.get(id);
    if (!state) throw new ClientError('not_found', `plugin ${id} does not exist`);
    if (msg.t === 'plugin.activate') {
      if (!peer.permissions.plugins?.can_start) throw new ClientError('forbidden', 'this preset may not start plugins');
      state.active = true;
    } else if (msg.t === 'plugin.deactivate') {
      if (!peer.permissions.plugins?.can_close) throw new ClientError('forbidden', 'this preset may not close plugins');
      state.active = false;
      state.events = [];
    } else {
      if (!state.active) throw new ClientError('invalid_state', `plugin ${id} is not active`);
      if (JSON.stringify(msg.data ?? null).length > 16_384) throw new ClientError('too_large', 'plugin data is larger than 16 KiB');
      state.events.push(msg.data ?? null);
      if (state.events.length > MAX_PLUGIN_EVENTS) throw new ClientError('too_many', `plugin ${id} holds ${MAX_PLUGIN_EVENTS} events, the most it may`);
      this.broadcast(room, { t: 'plugin', pluginId: id, data: msg.data ?? null, from: peer.info.id }, peer);
      return { pluginId: id };
    }
    this.broadcast(room, { t: 'plugin', pluginId: id, active: state.active, from: peer.info.id });
    return { pluginId: id, active: state.active };
  }

  // --- controls from the REST API -------------------------------------------------------------------

  async activeSession(meetingId: string): Promise<SessionRecord | undefined> {
    const room = this.rooms.get(meetingId);
    if (room?.session?.status === 'LIVE') return room.session;
    // A session of this meeting that another node runs is found in storage.
    const meeting = (await meetings.findById(this.db, meetingId))?.body;
    if (!meeting) return undefined;
    const live = await sessions.list(this.db, meeting.app_id, {
      filters: [
        { field: 'meeting', op: 'eq', value: meetingId },
        { field: 'status', op: 'eq', value: 'LIVE' },
      ],
      limit: 1,
    });
    return live.items[0]?.body;
  }

  /** Kick-all and mute-all mean everyone seen: a hidden participant (a recording's page) is left alone. */
  private select(room: Room, sel: { all?: boolean; participantIds?: string[]; customIds?: string[] }): Peer[] {
    return [...room.peers.values()].filter(
      (p) => p.state !== 'gone' && ((sel.all && !hidden(p)) || sel.participantIds?.includes(p.info.userId) || sel.participantIds?.includes(p.info.id) || sel.customIds?.includes(p.info.customParticipantId)),
    );
  }

  private kickedView(p: Peer): Record<string, unknown> {
    return { id: p.info.userId, name: p.info.name, picture: p.info.picture, custom_participant_id: p.info.customParticipantId, created_at: p.participant.created_at, updated_at: p.participant.updated_at };
  }

  async kick(meetingId: string, sel: { all?: boolean; participantIds?: string[]; customIds?: string[] }, reason: string): Promise<Record<string, unknown>[]> {
    const room = this.rooms.get(meetingId);
    if (!room) return [];
    const targets = this.select(room, sel);
    for (const p of targets) {
      this.send(p, { t: 'kicked', reason });
      await this.serial(room, () => this.leave(room, p, 'kicked'));
      p.ws.close(4001, 'kicked');
    }
    return targets.map((p) => this.kickedView(p));
  }

  mute(meetingId: string, sel: { all?: boolean; participantIds?: string[]; customIds?: string[] }, allowUnmute: boolean): Record<string, unknown>[] {
    const room = this.rooms.get(meetingId);
    if (!room) return [];
    const targets = this.select(room, sel).filter((p) => p.state === 'joined');
    for (const p of targets) {
      p.info.audioEnabled = false;
      p.audioLocked = !allowUnmute;
      p.audioHeld = true;
      this.holdAudio(p, true);
      this.send(p, { t: 'muted', allowUnmute });
      if (!hidden(p)) this.broadcast(room, { t: 'peerUpdate', peer: p.info }, p);
    }
    return targets.map((p) => this.kickedView(p));
  }

  /** Pauses or resumes the peer's published audio at the forwarder (a host's mute, enforced for every subscriber). */
  private holdAudio(peer: Peer, held: boolean): void {
    const track = peer.info.tracks.audio;
    const session = track ? peer.sfu.get(track.sessionId) : undefined;
    if (track && session) this.opts.forwarder.pauseTrack(session, track.trackName, held);
  }

  /** A participant's name or preset changed: live peers see the new name. */
  participantChanged(p: Participant): void {
    const room = this.rooms.get(p.meeting_id);
    if (!room) return;
    for (const peer of room.peers.values()) {
      if (peer.info.userId !== p.id) continue;
      peer.participant = p;
      if (p.name) peer.info.name = p.name;
      if (peer.state === 'joined' && !hidden(peer)) this.broadcast(room, { t: 'peerUpdate', peer: peer.info });
    }
  }

  /** The meeting was made INACTIVE: everyone is told and disconnected, the session ends now. */
  async endMeeting(meetingId: string, reason: 'HOST_ENDED_MEETING'): Promise<void> {
    const room = this.rooms.get(meetingId);
    if (!room) return;
    for (const p of [...room.peers.values()]) {
      this.send(p, { t: 'ended', reason });
      await this.serial(room, () => this.leave(room, p, 'ended'));
      p.ws.close(4000, 'meeting ended');
    }
    if (room.endTimer) clearTimeout(room.endTimer);
    await this.serial(room, () => this.endSession(room, reason));
  }

  /**
   * Sessions still LIVE in storage when this process starts had their sockets in a process that
   * is gone (a single node restarting): they are ended now, with their `meeting.ended` webhook.
   */
  async endOrphans(): Promise<number> {
    const { items } = await sessions.list(this.db, null, { filters: [{ field: 'status', op: 'eq', value: 'LIVE' }] });
    for (const doc of items) {
      const s = doc.body;
      const at = this.now();
      const ended: SessionRecord = {
        ...s,
        status: 'ENDED',
        ended_at: at.toISOString(),
        live_participants: 0,
        minutes_consumed: Math.round(((at.getTime() - Date.parse(s.started_at)) / 60_000) * 100) / 100,
        updated_at: at.toISOString(),
      };
      await sessions.update(this.db, doc, ended, at);
      const meeting = await meetings.get(this.db, s.app_id, s.associated_id);
      const room = { session: ended } as Room;
      await this.opts.deliveries.enqueue(s.app_id, 'meeting.ended', {
        meeting: meeting ? await this.meetingPayload(room, meeting.body) : { id: s.associated_id, sessionId: s.id },
        reason: 'ALL_PARTICIPANTS_LEFT',
      });
    }
    return items.length;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const room of this.rooms.values()) {
      if (room.endTimer) clearTimeout(room.endTimer);
      for (const p of room.peers.values()) p.ws.terminate();
    }
    this.rooms.clear();
    this.wss.close();
  }
}
