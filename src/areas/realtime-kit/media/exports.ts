/**
 * Session artefacts behind expiring download URLs (semantics §2.8: chat → `{chat_download_url,
 * chat_download_url_expiry}`, transcript → `{sessionId, transcript_download_url,
 * transcript_download_url_expiry}`, summary → `{sessionId, summaryDownloadUrl,
 * summaryDownloadUrlExpiry}`). The URL carries an HMAC over what it names and its expiry; the key
 * is made when the process starts, so URLs handed out before a restart stop working (ask again).
 *
 * Chat messages are stored per session as they are sent (text; images as their data URL): this is
 * the one chat store, and `renderChat` its one CSV form, served by the session's chat route, by
 * these download URLs and by the signed link of `meeting.chatSynced` (chat-sync.ts).
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Executor } from '../../../core/storage/db.ts';
import { defineCollection } from '../../../core/storage/collection.ts';
import { csv } from './csv.ts';

export const DOWNLOAD_PATH = '/realtime/kit/downloads';
export const DOWNLOAD_TTL_SECS = 3600;

export interface StoredChat {
  id: string;
  session_id: string;
  meeting_id: string;
  type: 'text' | 'image';
  message?: string;
  link?: string;
  user_id: string;
  peer_id: string;
  display_name: string;
  time: string;
  /** Order of the message in its session (messages sent in the same millisecond keep their order). */
  seq?: number;
}

export const chatMessages = defineCollection<StoredChat, 'time'>({
  kind: 'rtk_chat_message',
  indexes: { time: (m) => `${m.time}#${String(m.seq ?? 0).padStart(9, '0')}` },
});

export async function sessionChat(db: Executor, sessionId: string): Promise<StoredChat[]> {
  return (await chatMessages.list(db, sessionId, { order: 'time', direction: 'asc', limit: 100_000, withTotal: false })).items.map((d) => d.body);
}

/** Image payloads are written while the CSV stays under this size; later images have an empty payload. */
const MAX_IMAGE_BYTES = 8 * 1024 * 1024;
export const CHAT_CSV_COLUMNS = ['id', 'participantId', 'sessionId', 'meetingId', 'displayName', 'pinned', 'isEdited', 'payloadType', 'payload', 'createdAt'];

/** A session's chat as CSV, one row per message in the order they were sent. */
export function renderChat(messages: StoredChat[]): string {
  let bytes = 0;
  return csv(
    CHAT_CSV_COLUMNS,
    messages.map((m) => {
      let payload = (m.type === 'image' ? m.link : m.message) ?? '';
      const size = payload.length + 256;
      if (m.type === 'image' && bytes + size > MAX_IMAGE_BYTES) payload = '';
      else bytes += size;
      return [m.id, m.user_id, m.session_id, m.meeting_id, m.display_name, 'false', 'false', m.type === 'image' ? 'IMAGE_MESSAGE' : 'TEXT_MESSAGE', payload, m.time];
    }),
  );
}

export type Artefact = 'chat' | 'transcript' | 'summary';

export class DownloadSigner {
  private readonly key = randomBytes(32);

  private mac(text: string): string {
    return createHmac('sha256', this.key).update(text).digest('base64url');
  }

  /** A path (origin-relative) valid until `expires` (epoch seconds). */
  url(origin: string, appId: string, sessionId: string, what: Artefact, format: string, now: Date): { url: string; expiry: string } {
    const expires = Math.floor(now.getTime() / 1000) + DOWNLOAD_TTL_SECS;
    const sig = this.mac(`${appId}/${sessionId}/${what}/${format}/${expires}`);
    const q = new URLSearchParams({ format, expires: String(expires), sig });
    return { url: `${origin}${DOWNLOAD_PATH}/${appId}/${sessionId}/${what}?${q}`, expiry: new Date(expires * 1000).toISOString() };
  }

  check(appId: string, sessionId: string, what: string, format: string, expires: string, sig: string, now: Date): 'ok' | 'expired' | 'invalid' {
    if (!/^\d{1,12}$/.test(expires)) return 'invalid';
    const want = Buffer.from(this.mac(`${appId}/${sessionId}/${what}/${format}/${expires}`));
    const got = Buffer.from(sig);
    if (want.length !== got.length || !timingSafeEqual(want, got)) return 'invalid';
    return Number(expires) * 1000 < now.getTime() ? 'expired' : 'ok';
  }
}
