/**
 * What the live room tells the media features: an audio track was published (start a live
 * transcript when the peer's preset has `permissions.transcription_enabled`), a peer is gone (stop
 * its transcript), a chat message was sent (store it for the session's chat export).
 */
import type { AreaContext } from '../../../core/area.ts';
import type { Forwarder } from '../../calls/sfu/index.ts';
import type { LiveMediaHooks } from '../live.ts';
import { chatMessages, type StoredChat } from './exports.ts';
import { LiveTranscripts } from './transcripts.ts';

export function transcriptionEnabled(permissions: unknown): boolean {
  return typeof permissions === 'object' && permissions !== null && (permissions as Record<string, unknown>).transcription_enabled === true;
}

export function mediaHooks(ctx: AreaContext, forwarder: Forwarder, broadcast: (meetingId: string, msg: unknown) => void): { hooks: LiveMediaHooks; transcripts: LiveTranscripts } {
  const log = ctx.log.child({ area: 'realtime-kit', feature: 'transcripts' });
  const transcripts = new LiveTranscripts({ db: ctx.database.db, forwarder, now: () => ctx.clock.now(), log, broadcast });
  // Chat inserts of each session, chained so `chatStored` can wait for the last one.
  const pendingChat = new Map<string, Promise<void>>();
  const chatSeq = new Map<string, number>();
  const hooks: LiveMediaHooks = {
    audioPublished(a) {
      if (!transcriptionEnabled(a.permissions)) return;
      transcripts.start(a.meetingId, a.sessionId, a.sessionStartedAt, { peerId: a.peer.id, userId: a.peer.userId, customParticipantId: a.peer.customParticipantId, name: a.peer.name }, a.sfuSessionId, a.trackName);
    },
    peerGone(peerId) {
      void transcripts.stopPeer(peerId);
    },
    chatSent({ meetingId, sessionId, message }) {
      const at = ctx.clock.now();
      const m: StoredChat = { id: message.id, session_id: sessionId, meeting_id: meetingId, type: message.type, ...(message.message !== undefined ? { message: message.message } : {}), ...(message.link !== undefined ? { link: message.link } : {}), user_id: message.userId, peer_id: message.peerId, display_name: message.displayName, time: message.time, seq: (chatSeq.get(sessionId) ?? 0) + 1 };
      chatSeq.set(sessionId, m.seq!);
      const stored = (pendingChat.get(sessionId) ?? Promise.resolve())
        .then(() => chatMessages.insert(ctx.database.db, sessionId, m.id, m, at))
        .then(
          () => undefined,
          (err: unknown) => log.warn({ err: (err as Error).message, session: sessionId }, 'storing a chat message failed'),
        );
      pendingChat.set(sessionId, stored);
      void stored.then(() => {
        if (pendingChat.get(sessionId) === stored) pendingChat.delete(sessionId);
      });
    },
    async chatStored(sessionId) {
      chatSeq.delete(sessionId);
      await pendingChat.get(sessionId);
    },
  };
  return { hooks, transcripts };
}
