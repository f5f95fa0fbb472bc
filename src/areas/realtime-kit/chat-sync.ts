/**
 * Session chat export (semantics §2.8: `meeting.chatSynced`, session chat as CSV behind a
 * download URL). Chat messages are stored one by one as they are sent (media/exports.ts, the one
 * chat store). When a session that had chat messages ends, `meeting.chatSynced` is queued in the
 * webhook outbox with a signed download link; the link (`/realtime/kit/synced-chats/…`, no account
 * token: the signature and expiry are the credential, like a pre-signed object URL) serves the
 * session's stored messages in the same CSV form as `GET …/sessions/{id}/chat`. Links are signed
 * with the platform key, so any node can check them and they outlive a restart.
 */
import { createSign, createVerify } from 'node:crypto';
import type { AreaContext } from '../../core/area.ts';
import { apiError } from '../../core/errors.ts';
import type { SigningKey } from './keys.ts';
import { reply, route } from './http.ts';
import { renderChat, sessionChat } from './media/exports.ts';

/** How long a chat download link works, seconds. */
export const CHAT_LINK_TTL_SECS = 3600;
const DOWNLOAD_PATH = '/realtime/kit/synced-chats';

function signed(appId: string, sessionId: string, expires: number): string {
  return `chat\n${appId}\n${sessionId}\n${expires}`;
}

/** A download link for a session's chat and its expiry (ISO). */
export function chatLink(key: SigningKey, origin: string, appId: string, sessionId: string, now: Date): { url: string; expiry: string } {
  const expires = Math.floor(now.getTime() / 1000) + CHAT_LINK_TTL_SECS;
  const signature = createSign('RSA-SHA256').update(signed(appId, sessionId, expires)).sign(key.privateKey, 'base64url');
  return { url: `${origin}${DOWNLOAD_PATH}/${appId}/${sessionId}?expires=${expires}&signature=${signature}`, expiry: new Date(expires * 1000).toISOString() };
}

/** The origin clients reached the API at, from a Host header; undefined when it is not a plain host[:port]. */
export function originOf(host: string | undefined): string | undefined {
  if (!host || !/^(?:[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$/.test(host)) return undefined;
  return `http://${host}`;
}

export function mountChatRoutes(ctx: AreaContext, deps: { key: () => SigningKey }): void {
  const db = ctx.database.db;
  route(ctx, { method: 'GET', path: `${DOWNLOAD_PATH}/:app_id/:session_id`, operationId: 'rtk-chat-download', summary: 'A session chat as CSV (signed link)', level: 'public' }, async ({ params, c }) => {
    const url = new URL(c.req.url);
    const expires = Number(url.searchParams.get('expires'));
    const signature = url.searchParams.get('signature') ?? '';
    if (!Number.isInteger(expires) || !signature) throw apiError('rtk_invalid', 'expires and signature query parameters are required');
    const ok = createVerify('RSA-SHA256').update(signed(params.app_id, params.session_id, expires)).verify(deps.key().publicKey, signature, 'base64url');
    if (!ok) return reply(403, { success: false, error: { code: 403, message: 'the download link signature does not match' } });
    if (expires * 1000 < ctx.clock.now().getTime()) return reply(403, { success: false, error: { code: 403, message: 'the download link has expired' } });
    const messages = await sessionChat(db, params.session_id);
    if (messages.length === 0) throw apiError('rtk_not_found', 'Chat of session', params.session_id);
    return new Response(renderChat(messages), { status: 200, headers: { 'content-type': 'text/csv; charset=utf-8', 'content-disposition': `attachment; filename="chat-${params.session_id}.csv"` } });
  });
}
