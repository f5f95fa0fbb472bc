/**
 * Live transcripts (spec 000 "Meeting platform", client `ai.transcripts`; semantics §2.8 artefacts).
 * When a participant's preset has `permissions.transcription_enabled`, the audio track it
 * publishes is tapped at the forwarder (no extra peer connection: the RTP the forwarder already
 * receives) and recognised offline (transcriber.ts). Each recognised utterance is stored with the
 * session and sent to every joined peer as `{t: 'transcript', transcript}`; the client SDK appends
 * it to `meeting.ai.transcripts` and emits `transcript`.
 *
 * The session transcript is served as CSV (the default), JSON, SRT or VTT.
 */
import type { MediaStreamTrack, RtpPacket } from 'werift';
import type { Executor } from '../../../core/storage/db.ts';
import { defineCollection } from '../../../core/storage/collection.ts';
import { uuid } from '../../../core/ids.ts';
import type { Forwarder } from '../../calls/sfu/index.ts';
import { StreamTranscriber, recogniserAvailable, type RecognisedText } from './transcriber.ts';
import { csv } from './csv.ts';

export interface TranscriptEntry {
  id: string;
  session_id: string;
  meeting_id: string;
  peer_id: string;
  user_id: string;
  custom_participant_id: string;
  name: string;
  text: string;
  /** ISO 8601 wall-clock start and end of the utterance. */
  start_time: string;
  end_time: string;
  /** Seconds from the session start. */
  start_offset: number;
  end_offset: number;
  created_at: string;
}

export const transcripts = defineCollection<TranscriptEntry, 'start'>({ kind: 'rtk_transcript', indexes: { start: (t) => t.start_time } });

export const TRANSCRIPT_FORMATS = ['CSV', 'JSON', 'SRT', 'VTT'] as const;
export type TranscriptFormat = (typeof TRANSCRIPT_FORMATS)[number];

/** What the client receives: the platform SDK's transcript fields plus the time span. */
export function transcriptView(t: TranscriptEntry): Record<string, unknown> {
  return {
    id: t.id,
    peerId: t.peer_id,
    userId: t.user_id,
    customParticipantId: t.custom_participant_id,
    name: t.name,
    transcript: t.text,
    isPartialTranscript: false,
    date: t.end_time,
    startTime: t.start_time,
    endTime: t.end_time,
  };
}

export async function sessionTranscript(db: Executor, sessionId: string): Promise<TranscriptEntry[]> {
  return (await transcripts.list(db, sessionId, { order: 'start', direction: 'asc', limit: 100_000, withTotal: false })).items.map((d) => d.body);
}

function clock(seconds: number, sep: ',' | '.'): string {
  const ms = Math.max(0, Math.round(seconds * 1000));
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor(ms / 60_000) % 60;
  const s = Math.floor(ms / 1000) % 60;
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${pad(h)}:${pad(m)}:${pad(s)}${sep}${pad(ms % 1000, 3)}`;
}

export function renderTranscript(entries: TranscriptEntry[], format: TranscriptFormat, sessionId: string): { body: string; type: string; ext: string } {
  switch (format) {
    case 'JSON':
      return { body: JSON.stringify({ sessionId, transcript: entries.map(transcriptView) }), type: 'application/json', ext: 'json' };
    case 'SRT':
      return {
        body: entries.map((e, i) => `${i + 1}\n${clock(e.start_offset, ',')} --> ${clock(e.end_offset, ',')}\n${e.name}: ${e.text}\n`).join('\n'),
        type: 'application/x-subrip; charset=utf-8',
        ext: 'srt',
      };
    case 'VTT':
      return {
        body: `WEBVTT\n\n${entries.map((e) => `${clock(e.start_offset, '.')} --> ${clock(e.end_offset, '.')}\n<v ${e.name.replace(/[<>]/g, '')}>${e.text}\n`).join('\n')}`,
        type: 'text/vtt; charset=utf-8',
        ext: 'vtt',
      };
    default:
      return {
        body: csv(
          ['id', 'session_id', 'participant_id', 'user_id', 'custom_participant_id', 'name', 'start_time', 'end_time', 'start_offset', 'end_offset', 'transcript'],
          entries.map((e) => [e.id, e.session_id, e.peer_id, e.user_id, e.custom_participant_id, e.name, e.start_time, e.end_time, e.start_offset, e.end_offset, e.text]),
        ),
        type: 'text/csv; charset=utf-8',
        ext: 'csv',
      };
  }
}

export interface Speaker {
  peerId: string;
  userId: string;
  customParticipantId: string;
  name: string;
}

export interface LiveTranscriptsOptions {
  db: Executor;
  forwarder: Forwarder;
  now: () => Date;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void };
  /** Sends an event to every joined peer of a meeting. */
  broadcast: (meetingId: string, msg: unknown) => void;
}

interface Tap {
  transcriber: StreamTranscriber;
  unsubscribe: (() => void)[];
}

/** Structural view of the forwarder's published track (its record type is internal to it). */
interface PublishedLike {
  kind: string;
  transceiver: { receiver: { tracks: MediaStreamTrack[] }; onTrack: { subscribe(fn: (t: MediaStreamTrack) => void): { unSubscribe(): void } } };
}

/** Runs one transcriber per transcribed audio track and stores and fans out what they recognise. */
export class LiveTranscripts {
  private readonly taps = new Map<string, Tap>();
  private warned = false;

  constructor(private readonly opts: LiveTranscriptsOptions) {}

  get active(): number {
    return this.taps.size;
  }

  /**
   * Starts transcribing a peer's published audio track. `roomKey` is the forwarder app the track
   * lives in (the meeting id), `sessionStartedAt` the session start (for offsets).
   */
  start(meetingId: string, sessionId: string, sessionStartedAt: string, speaker: Speaker, sfuSessionId: string, trackName: string): boolean {
    if (!recogniserAvailable()) {
      if (!this.warned) this.opts.log.warn({ recogniser: 'pocketsphinx_batch' }, 'live transcripts are enabled by a preset but pocketsphinx or its en-us model is not installed');
      this.warned = true;
      return false;
    }
    const key = `${speaker.peerId}/${trackName}`;
    if (this.taps.has(key)) return true;
    let pub: PublishedLike | undefined;
    try {
      pub = this.opts.forwarder.session(meetingId, sfuSessionId).published.get(trackName) as unknown as PublishedLike | undefined;
    } catch {
      pub = undefined;
    }
    if (!pub || pub.kind !== 'audio') return false;
    const transcriber = new StreamTranscriber(
      (t) => void this.store(meetingId, sessionId, sessionStartedAt, speaker, t),
      (err) => this.opts.log.warn({ err: err.message, peer: speaker.peerId }, 'live transcript stream failed'),
    );
    const tap: Tap = { transcriber, unsubscribe: [] };
    const seen = new WeakSet<MediaStreamTrack>();
    const attach = (track: MediaStreamTrack) => {
      if (seen.has(track)) return;
      seen.add(track);
      const sub = track.onReceiveRtp.subscribe((rtp: RtpPacket) => transcriber.push(rtp.payload, rtp.header.timestamp));
      tap.unsubscribe.push(() => sub.unSubscribe());
    };
    for (const track of pub.transceiver.receiver.tracks) attach(track);
    const onTrack = pub.transceiver.onTrack.subscribe((track) => attach(track));
    tap.unsubscribe.push(() => onTrack.unSubscribe());
    this.taps.set(key, tap);
    this.opts.log.info({ peer: speaker.peerId, session: sessionId }, 'live transcript started');
    return true;
  }

  private async store(meetingId: string, sessionId: string, sessionStartedAt: string, speaker: Speaker, t: RecognisedText): Promise<void> {
    const base = Date.parse(sessionStartedAt);
    const at = this.opts.now();
    const entry: TranscriptEntry = {
      id: uuid(),
      session_id: sessionId,
      meeting_id: meetingId,
      peer_id: speaker.peerId,
      user_id: speaker.userId,
      custom_participant_id: speaker.customParticipantId,
      name: speaker.name,
      text: t.text,
      start_time: new Date(t.startAt).toISOString(),
      end_time: new Date(t.endAt).toISOString(),
      start_offset: Math.max(0, (t.startAt - base) / 1000),
      end_offset: Math.max(0, (t.endAt - base) / 1000),
      created_at: at.toISOString(),
    };
    // Clients first: the stored copy is for downloads, the live one is what latency is about.
    this.opts.broadcast(meetingId, { t: 'transcript', transcript: transcriptView(entry) });
    try {
      await transcripts.insert(this.opts.db, sessionId, entry.id, entry, at);
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message, session: sessionId }, 'storing a transcript entry failed');
    }
  }

  /** Stops every tap of a peer (it left, or unpublished); pending utterances are still recognised. */
  async stopPeer(peerId: string): Promise<void> {
    const stops: Promise<void>[] = [];
    for (const [key, tap] of this.taps) {
      if (!key.startsWith(`${peerId}/`)) continue;
      this.taps.delete(key);
      for (const u of tap.unsubscribe) u();
      stops.push(tap.transcriber.stop());
    }
    await Promise.all(stops);
  }

  async close(): Promise<void> {
    const peers = new Set([...this.taps.keys()].map((k) => k.split('/')[0]!));
    await Promise.all([...peers].map((p) => this.stopPeer(p)));
  }
}
