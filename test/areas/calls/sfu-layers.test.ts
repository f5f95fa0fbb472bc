/**
 * Simulcast layer choice and the numbering a subscriber sees across a switch: sequence numbers,
 * timestamps, VP8 picture ids and TL0PICIDX continue from the last packet forwarded, whatever the
 * new layer's own values are.
 */
import { RtpHeader, RtpPacket } from 'werift';
import { describe, expect, it } from 'vitest';
import { chooseLayer, OutputStream, vp8Fields, LAYER_SILENCE_MS } from '../../../src/areas/calls/sfu/layers.ts';

/** A VP8 packet with a 15-bit picture id and a TL0PICIDX; `key` marks the start of a keyframe. */
function vp8(ssrc: number, seq: number, ts: number, pid: number, tl0: number, key: boolean): RtpPacket {
  const payload = Buffer.from([0x90, 0xc0, 0x80 | (pid >> 8), pid & 0xff, tl0, key ? 0x00 : 0x01, 0xaa, 0xbb]);
  return new RtpPacket(new RtpHeader({ payloadType: 96, sequenceNumber: seq, timestamp: ts, ssrc, marker: true }), payload);
}

describe('simulcast layers', () => {
  it('chooses the preferred live layer, else the nearest by ASCII order, or none when asked', () => {
    const now = 10_000;
    const seen = new Map([
      ['f', now - 50],
      ['h', now - 50],
      ['q', now - LAYER_SILENCE_MS - 1],
    ]);
    expect(chooseLayer(seen, {}, now)).toBe('f');
    expect(chooseLayer(seen, { preferredRid: 'h' }, now)).toBe('h');
    // q is paused: the next lower quality does not exist, so the nearest higher one.
    expect(chooseLayer(seen, { preferredRid: 'q' }, now)).toBe('h');
    expect(chooseLayer(seen, { preferredRid: 'g' }, now)).toBe('h');
    expect(chooseLayer(seen, { preferredRid: 'q', ridNotAvailable: 'none' }, now)).toBeUndefined();
    expect(chooseLayer(new Map(), { preferredRid: 'f' }, now)).toBeUndefined();
  });

  it('reads VP8 keyframes, picture ids and TL0PICIDX', () => {
    expect(vp8Fields(vp8(1, 1, 1, 300, 7, true).payload)).toEqual({ keyframe: true, pidAt: 2, pidBits: 15, tl0At: 4 });
    expect(vp8Fields(vp8(1, 1, 1, 300, 7, false).payload)?.keyframe).toBe(false);
    // Not the start of a partition: never a keyframe start.
    expect(vp8Fields(Buffer.from([0x00, 0x00]))?.keyframe).toBe(false);
  });

  it('continues numbering across a switch to another stream', () => {
    const out = new OutputStream(90_000);
    const sent: RtpPacket[] = [];
    const pass = (p: RtpPacket, at: number) => {
      out.rewrite(p, vp8Fields(p.payload), at);
      sent.push(p);
    };
    pass(vp8(111, 500, 9000, 40, 3, true), 0);
    pass(vp8(111, 501, 12000, 41, 4, false), 33);
    // The other layer: its own sequence, clock, picture ids.
    pass(vp8(222, 60000, 4_000_000_000, 32000, 250, true), 66);
    pass(vp8(222, 60001, 4_000_003_000, 32001, 251, false), 99);
    const last = sent.slice(-2);
    expect(last.map((p) => p.header.sequenceNumber)).toEqual([502, 503]);
    expect(last[0].header.timestamp).toBe(12000 + 33 * 90);
    expect(last[1].header.timestamp).toBe(12000 + 33 * 90 + 3000);
    const f = last.map((p) => vp8Fields(p.payload)!);
    expect(last.map((p, i) => p.payload.readUInt16BE(f[i].pidAt!) & 0x7fff)).toEqual([42, 43]);
    expect(last.map((p, i) => p.payload[f[i].tl0At!])).toEqual([5, 6]);
    // Back to the first stream (its sequence about to wrap): still consecutive.
    pass(vp8(111, 65535, 20000, 7, 9, true), 130);
    pass(vp8(111, 0, 23000, 8, 10, false), 160);
    expect(sent.slice(-2).map((p) => p.header.sequenceNumber)).toEqual([504, 505]);
  });
});
