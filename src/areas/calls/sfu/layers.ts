/**
 * What one subscriber receives of a published track: which simulcast layer (by rid), and the
 * rewriting that makes packets of several layers one continuous stream for it. Each layer of a
 * Chromium simulcast publisher is its own RTP stream with its own sequence numbers, timestamps
 * and VP8 picture ids; a subscriber switched from one to the other must see none of those jump
 * backwards, or its jitter buffer discards the new layer as old frames. A switch happens only at a
 * keyframe of the new layer, so the subscriber never gets a delta frame it cannot decode.
 */
import type { RtpPacket } from 'werift';

/** A layer that has sent nothing for this long is taken as paused by its publisher. */
export const LAYER_SILENCE_MS = 1_000;

export interface LayerPrefs {
  preferredRid?: string;
  /** `none`: forward nothing while the preferred layer is missing; else the nearest layer by ASCII order. */
  ridNotAvailable?: 'none' | 'asciibetical';
}

/**
 * The layer a subscriber should get now: its preferred rid when that layer is live; otherwise
 * (unless `ridNotAvailable: none`) the first live rid after it in ASCII order (lower quality, by
 * the platform's convention that `a` is the best), else the nearest before it. Without a
 * preference: the first live rid in ASCII order.
 */
export function chooseLayer(lastPacketAt: ReadonlyMap<string, number>, prefs: LayerPrefs, now: number): string | undefined {
  const live = [...lastPacketAt].filter(([, at]) => now - at < LAYER_SILENCE_MS).map(([rid]) => rid).sort();
  const want = prefs.preferredRid;
  if (want === undefined) return live[0];
  if (live.includes(want)) return want;
  if (prefs.ridNotAvailable === 'none') return undefined;
  return live.find((rid) => rid > want) ?? live.filter((rid) => rid < want).pop();
}

/** VP8 payload descriptor fields this forwarder reads and rewrites (RFC 7741 §4.2). */
interface Vp8Fields {
  keyframe: boolean;
  /** Byte offset and width (7 or 15 bits) of the picture id, when present. */
  pidAt?: number;
  pidBits?: 7 | 15;
  tl0At?: number;
}

export function vp8Fields(payload: Buffer): Vp8Fields | undefined {
  if (payload.length < 1) return undefined;
  const b0 = payload[0];
  const x = (b0 & 0x80) !== 0;
  const start = (b0 & 0x10) !== 0 && (b0 & 0x07) === 0;
  let i = 1;
  const out: Vp8Fields = { keyframe: false };
  if (x) {
    if (payload.length < 2) return undefined;
    const b1 = payload[1];
    i = 2;
    if (b1 & 0x80) {
      if (payload.length <= i) return undefined;
      out.pidAt = i;
      if (payload[i] & 0x80) {
        out.pidBits = 15;
        i += 2;
      } else {
        out.pidBits = 7;
        i += 1;
      }
    }
    if (b1 & 0x40) out.tl0At = i++;
    if (b1 & 0x30) i++;
  }
  // The VP8 payload header's P bit is 0 on the first packet of a keyframe.
  if (start && payload.length > i) out.keyframe = (payload[i] & 0x01) === 0;
  return out;
}

const u16 = (n: number) => ((n % 0x10000) + 0x10000) % 0x10000;
const u32 = (n: number) => ((n % 0x1_0000_0000) + 0x1_0000_0000) % 0x1_0000_0000;
/** a is newer than b in a wrapping sequence space of `mod`. */
const newer = (a: number, b: number, mod: number) => a !== b && ((a - b + mod) % mod) < mod / 2;

/**
 * The numbering of one subscriber's stream: offsets applied to the current source stream, reset
 * at every switch so the output continues where it left off.
 */
export class OutputStream {
  private seqOffset = 0;
  private tsOffset = 0;
  private pidOffset = 0;
  private tl0Offset = 0;
  private lastSeq?: number;
  private lastTs?: number;
  private lastPid?: number;
  private lastTl0?: number;
  private lastSentAt = 0;
  /** The source stream (SSRC) the offsets apply to. */
  private source?: number;

  constructor(private readonly clockRate: number) {}

  /** True when `ssrc` is not the stream being forwarded (the next packet starts a switch). */
  isNewSource(ssrc: number): boolean {
    return this.source !== ssrc;
  }

  /**
   * The next packet starts a new stretch (after a pause): it follows the last packet sent in
   * sequence, its timestamp advanced by the wall time between them.
   */
  restart(): void {
    this.source = undefined;
  }

  /**
   * Rewrites `rtp` (a copy owned by this subscriber) into the output numbering. The first packet
   * of a new source stream fixes the offsets so it follows the last packet sent.
   */
  rewrite(rtp: RtpPacket, vp8: Vp8Fields | undefined, now: number): void {
    const h = rtp.header;
    if (this.source !== h.ssrc) {
      this.source = h.ssrc;
      if (this.lastSeq === undefined) {
        this.seqOffset = this.tsOffset = this.pidOffset = this.tl0Offset = 0;
      } else {
        this.seqOffset = u16(this.lastSeq + 1 - h.sequenceNumber);
        // Advance the clock by the wall time since the last packet (at least one tick).
        const ticks = Math.max(1, Math.round(((now - this.lastSentAt) * this.clockRate) / 1000));
        this.tsOffset = u32(this.lastTs! + ticks - h.timestamp);
        const pid = vp8?.pidAt !== undefined ? readPid(rtp.payload, vp8) : undefined;
        if (pid !== undefined && this.lastPid !== undefined) this.pidOffset = (this.lastPid + 1 - pid + 0x8000) % 0x8000;
        if (vp8?.tl0At !== undefined && this.lastTl0 !== undefined) this.tl0Offset = (this.lastTl0 + 1 - rtp.payload[vp8.tl0At] + 256) % 256;
      }
    }
    h.sequenceNumber = u16(h.sequenceNumber + this.seqOffset);
    h.timestamp = u32(h.timestamp + this.tsOffset);
    if (this.lastSeq === undefined || newer(h.sequenceNumber, this.lastSeq, 0x10000)) this.lastSeq = h.sequenceNumber;
    if (this.lastTs === undefined || newer(h.timestamp, this.lastTs, 0x1_0000_0000)) this.lastTs = h.timestamp;
    this.lastSentAt = now;
    if (!vp8) return;
    // The payload is shared with other subscribers: copy it before the first write.
    let copied = false;
    const own = () => {
      if (!copied) rtp.payload = Buffer.from(rtp.payload);
      copied = true;
      return rtp.payload;
    };
    if (vp8.pidAt !== undefined) {
      const mod = vp8.pidBits === 15 ? 0x8000 : 0x80;
      let pid = readPid(rtp.payload, vp8)!;
      if (this.pidOffset % mod !== 0) {
        pid = (pid + this.pidOffset) % mod;
        if (vp8.pidBits === 15) own().writeUInt16BE(0x8000 | pid, vp8.pidAt);
        else own()[vp8.pidAt] = pid;
      }
      if (this.lastPid === undefined || newer(pid, this.lastPid, mod)) this.lastPid = pid;
    }
    if (vp8.tl0At !== undefined) {
      let tl0 = rtp.payload[vp8.tl0At];
      if (this.tl0Offset !== 0) {
        tl0 = (tl0 + this.tl0Offset) % 256;
        own()[vp8.tl0At] = tl0;
      }
      if (this.lastTl0 === undefined || newer(tl0, this.lastTl0, 256)) this.lastTl0 = tl0;
    }
  }
}

function readPid(payload: Buffer, f: Vp8Fields): number | undefined {
  if (f.pidAt === undefined) return undefined;
  return f.pidBits === 15 ? payload.readUInt16BE(f.pidAt) & 0x7fff : payload[f.pidAt] & 0x7f;
}
