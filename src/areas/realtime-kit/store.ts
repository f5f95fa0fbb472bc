/**
 * What the meeting platform keeps: apps (per account), presets, meetings and webhooks (per app),
 * participants (per meeting), sessions (per app) with their peers (per session), and the webhook
 * outbox. All are document collections; the outbox's indexed `state` and `due` columns let the
 * delivery loop find what is owed without scanning delivered rows.
 */
import { defineCollection } from '../../core/storage/collection.ts';
import type { Preset } from './presets.ts';

export interface RtkApp {
  id: string;
  name: string;
  account_id: string;
  created_at: string;
}

export interface StoredPreset extends Preset {
  id: string;
  app_id: string;
  created_at: string;
  updated_at: string;
}

export interface Meeting {
  id: string;
  app_id: string;
  account_id: string;
  title: string | null;
  status: 'ACTIVE' | 'INACTIVE';
  record_on_start: boolean;
  live_stream_on_start: boolean;
  persist_chat: boolean;
  summarize_on_end: boolean;
  transcribe_on_end: boolean;
  session_keep_alive_time_in_secs: number;
  ai_config: Record<string, unknown>;
  recording_config: Record<string, unknown>;
  created_at: string;
  updated_at: string;
}

export interface Participant {
  id: string;
  meeting_id: string;
  app_id: string;
  custom_participant_id: string;
  preset_name: string;
  name: string | null;
  picture: string | null;
  created_at: string;
  updated_at: string;
}

export const WEBHOOK_EVENTS = [
  'meeting.started',
  'meeting.ended',
  'meeting.participantJoined',
  'meeting.participantLeft',
  'meeting.chatSynced',
  'recording.statusUpdate',
  'livestreaming.statusUpdate',
  'meeting.transcript',
  'meeting.summary',
] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

export interface Webhook {
  id: string;
  app_id: string;
  name: string;
  url: string;
  events: WebhookEvent[];
  enabled: boolean;
  created_at: string;
  updated_at: string;
}

export interface SessionRecord {
  id: string;
  app_id: string;
  account_id: string;
  associated_id: string;
  meeting_display_name: string;
  status: 'LIVE' | 'ENDED';
  type: 'meeting';
  live_participants: number;
  max_concurrent_participants: number;
  minutes_consumed: number;
  organization_id: string;
  started_at: string;
  ended_at?: string;
  created_at: string;
  updated_at: string;
}

export interface PeerEvent {
  event: string;
  at: string;
}

export interface SessionPeer {
  id: string;
  session_id: string;
  user_id: string;
  custom_participant_id: string;
  display_name: string;
  preset_name: string;
  joined_at: string;
  left_at?: string;
  duration?: number;
  peer_events: PeerEvent[];
  /** Per-peer call statistics reported by the client from its WebRTC stats. */
  quality_stats?: Record<string, unknown>;
  created_at: string;
  updated_at: string;
}

export interface OutboxItem {
  id: string;
  webhook_id: string;
  url: string;
  /** The exact bytes that were signed and are sent. */
  body: string;
  event: string;
  attempts: number;
  state: 'pending' | 'delivered' | 'failed';
  /** Epoch ms of the next attempt, zero-padded so text order is time order. */
  due: string;
  last_error?: string;
  last_status?: number;
  created_at: string;
}

export const apps = defineCollection<RtkApp>({ kind: 'rtk_app' });
export const presets = defineCollection<StoredPreset, 'name'>({ kind: 'rtk_preset', indexes: { name: (p) => p.name } });
export const meetings = defineCollection<Meeting, 'status' | 'title'>({
  kind: 'rtk_meeting',
  indexes: { status: (m) => m.status, title: (m) => (m.title ?? '').toLowerCase() },
});
export const participants = defineCollection<Participant, 'custom_id'>({
  kind: 'rtk_participant',
  indexes: { custom_id: (p) => p.custom_participant_id },
});
export const webhooks = defineCollection<Webhook>({ kind: 'rtk_webhook' });
export const sessions = defineCollection<SessionRecord, 'meeting' | 'status'>({
  kind: 'rtk_session',
  indexes: { meeting: (s) => s.associated_id, status: (s) => s.status },
});
export const sessionPeers = defineCollection<SessionPeer, 'user'>({ kind: 'rtk_session_peer', indexes: { user: (p) => p.user_id } });
export const outbox = defineCollection<OutboxItem, 'state' | 'due'>({
  kind: 'rtk_outbox',
  indexes: { state: (o) => o.state, due: (o) => o.due },
});

export const OUTBOX_SCOPE = 'outbox';

export function dueKey(ms: number): string {
  return String(Math.max(0, Math.floor(ms))).padStart(15, '0');
}
