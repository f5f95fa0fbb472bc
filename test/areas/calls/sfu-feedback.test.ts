/**
 * RTCP feedback between subscribers and publishers: the loss-based bandwidth estimate (unit), and
 * end to end with werift peers on loopback — a subscriber's FIR reaches the publisher as a PLI,
 * and receiver reports of heavy loss lower the REMB the publisher is sent (and low loss raises it
 * again).
 */
import { MediaStreamTrack, RtcpPayloadSpecificFeedback, RtcpReceiverInfo, RtcpRrPacket, RtpHeader, RtpPacket, ReceiverEstimatedMaxBitrate, type RTCPeerConnection, type RtcpPacket } from 'werift';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LossEstimator, publisherBudget, REMB_CEILING_BPS, REMB_FLOOR_BPS } from '../../../src/areas/calls/sfu/bandwidth.ts';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
import { connected, createApp, loopbackPeer, sfuCall, type SfuApp } from './sfu-support.ts';

describe('loss-based estimate', () => {
  it('raises 8 % below 2 % loss, holds between 2 and 10 %, cuts the forwarded rate by (1 − 0.5·loss) above', () => {
    const e = new LossEstimator(0, 5_000_000, 150_000);
    expect(e.estimate).toBe(5_000_000);
    expect(e.report(0, 1000)).toBe(5_000_000); // already at the ceiling
    // 1 Mbit/s forwarded over the last second, then 50 % loss (fraction lost 128/256).
    e.sent(125_000);
    expect(e.report(128, 2000)).toBe(750_000);
    // 5 % loss holds.
    e.sent(90_000);
    expect(e.report(13, 3000)).toBe(750_000);
    // 1 % loss raises by 8 %.
    expect(e.report(2, 4000)).toBe(810_000);
    // 20 % loss with nothing forwarded in between cuts the estimate itself.
    expect(e.report(51, 5000)).toBe(Math.round(810_000 * (1 - 0.5 * (51 / 256))));
    // Total loss repeatedly: never below the floor.
    for (let i = 0; i < 20; i++) e.report(255, 6000 + i * 1000);
    expect(e.estimate).toBe(150_000);
    // Out-of-range fields are clamped, not trusted.
    expect(e.report(-5, 30_000)).toBe(162_000);
  });

  it('a publisher is told the smallest estimate, a simulcast publisher the largest; the ceiling before any report', () => {
    const a = new LossEstimator(0);
    const b = new LossEstimator(0);
    expect(publisherBudget([a, b], false)).toBe(REMB_CEILING_BPS);
    expect(publisherBudget([], false)).toBe(REMB_CEILING_BPS);
    b.sent(250_000);
    b.report(200, 1000);
    expect(b.estimate).toBeLessThan(2_000_000);
    expect(publisherBudget([a, b], false)).toBe(b.estimate);
    a.report(0, 1000);
    expect(publisherBudget([a, b], false)).toBe(b.estimate);
    expect(publisherBudget([a, b], true)).toBe(REMB_CEILING_BPS);
    expect(REMB_FLOOR_BPS).toBeLessThan(b.estimate);
  });
});

/** A FIR for one SSRC (werift parses these but does not export a builder). */
function fir(ssrc: number, seq: number): RtcpPayloadSpecificFeedback {
  const payload = Buffer.alloc(16);
  payload.writeUInt32BE(1, 0); // sender SSRC
  payload.writeUInt32BE(0, 4); // media SSRC: 0 for a FIR (RFC 5104); the target is in the body
  payload.writeUInt32BE(ssrc, 8);
  payload[12] = seq & 0xff;
  const feedback = { count: 4, length: payload.length / 4 - 1, serialize: () => payload };
  return new RtcpPayloadSpecificFeedback({ feedback: feedback as never });
}

type SendRtcp = { sendRtcp(p: unknown[]): Promise<void> };

async function until(cond: () => boolean, ms: number): Promise<void> {
  for (const end = Date.now() + ms; !cond() && Date.now() < end; ) await new Promise((r) => setTimeout(r, 50));
}

describe.skipIf(sqlitePassOnly('media feedback lives in memory; nothing here touches storage'))('feedback between werift peers', () => {
  let t: TestServer;
  let app: SfuApp;
  const peers: RTCPeerConnection[] = [];
  beforeAll(async () => {
    t = await startTestServer();
    app = await createApp(t);
  });
  const timers: NodeJS.Timeout[] = [];
  afterAll(async () => {
    for (const timer of timers) clearInterval(timer);
    for (const pc of peers) await pc.close().catch(() => undefined);
    await t?.stop();
  });

  /** A publisher sending 1000-byte packets every 10 ms and a connected subscriber pulling them. */
  async function pair() {
    const pub = loopbackPeer(t);
    peers.push(pub);
    const source = new MediaStreamTrack({ kind: 'video' });
    const tx = pub.addTransceiver(source, { direction: 'sendonly' });
    await pub.setLocalDescription(await pub.createOffer());
    const s1 = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId;
    const push = await sfuCall(t, app, 'POST', `/sessions/${s1}/tracks/new`, { sessionDescription: { type: 'offer', sdp: pub.localDescription!.sdp }, tracks: [{ location: 'local', mid: tx.mid, trackName: 'cam' }] });
    expect(push.status).toBe(200);
    await pub.setRemoteDescription(push.body.sessionDescription);
    await connected(pub, 8000, 'publisher');
    const rembs: number[] = [];
    pub.dtlsTransports[0].onRtcp.subscribe((pkt: RtcpPacket) => {
      if (pkt.type === RtcpPayloadSpecificFeedback.type && (pkt as RtcpPayloadSpecificFeedback).feedback instanceof ReceiverEstimatedMaxBitrate) {
        rembs.push(Number(((pkt as RtcpPayloadSpecificFeedback).feedback as ReceiverEstimatedMaxBitrate).bitrate));
      }
    });
    const counts = { plis: 0, received: 0 };
    tx.sender.onPictureLossIndication.subscribe(() => counts.plis++);

    const sub = loopbackPeer(t);
    peers.push(sub);
    const s2 = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId;
    const pull = await sfuCall(t, app, 'POST', `/sessions/${s2}/tracks/new`, { tracks: [{ location: 'remote', sessionId: s1, trackName: 'cam' }] });
    let ssrc = 0;
    sub.onTrack.subscribe((track) =>
      track.onReceiveRtp.subscribe((rtp) => {
        ssrc = rtp.header.ssrc;
        counts.received++;
      }),
    );
    await sub.setRemoteDescription(pull.body.sessionDescription);
    await sub.setLocalDescription(await sub.createAnswer());
    expect((await sfuCall(t, app, 'PUT', `/sessions/${s2}/renegotiate`, { sessionDescription: { type: 'answer', sdp: sub.localDescription!.sdp } })).status).toBe(200);
    await connected(sub, 8000, 'subscriber');

    // Media flows throughout (a REMB goes out with the publisher's packets).
    let seq = 0;
    timers.push(
      setInterval(() => {
        const n = seq++;
        source.writeRtp(new RtpPacket(new RtpHeader({ payloadType: 96, sequenceNumber: n & 0xffff, timestamp: n * 3000, ssrc: 4321, marker: true }), Buffer.alloc(1000, n & 0xff)));
      }, 10),
    );
    await until(() => counts.received > 5 && rembs.length > 0, 5000);
    expect(counts.received).toBeGreaterThan(5);
    return { counts, rembs, ssrc: () => ssrc, transport: sub.dtlsTransports[0] as unknown as SendRtcp };
  }

  // werift's DTLS client can abort on a retransmitted HelloVerifyRequest; the tests may retry.
  it('a FIR (media SSRC 0, the stream named in its body) reaches the publisher as a PLI', { retry: 2, timeout: 30_000 }, async () => {
    const { counts, ssrc, transport } = await pair();
    // Keyframe requests are passed on at most every 300 ms: let the initial ones settle.
    await new Promise((r) => setTimeout(r, 400));
    const before = counts.plis;
    for (let i = 0; i < 8 && counts.plis === before; i++) {
      await transport.sendRtcp([fir(ssrc(), i)]);
      await new Promise((r) => setTimeout(r, 400));
    }
    expect(counts.plis).toBeGreaterThan(before);
  });

  it('the REMB starts at the ceiling, heavy loss reported by the subscriber lowers it, low loss raises it again', { retry: 2, timeout: 30_000 }, async () => {
    const { rembs, ssrc, transport } = await pair();
    expect(rembs[0]).toBe(REMB_CEILING_BPS);
    const report = (fractionLost: number) => new RtcpRrPacket({ ssrc: 7, reports: [new RtcpReceiverInfo({ ssrc: ssrc(), fractionLost, packetsLost: 0, highestSequence: 0, jitter: 0, lsr: 0, dlsr: 0 })] });
    // 50 % loss reported a few times: the next REMB is far below the ceiling, above the floor.
    const seen = rembs.length;
    for (let i = 0; i < 4; i++) {
      await transport.sendRtcp([report(128)]);
      await new Promise((r) => setTimeout(r, 100));
    }
    await until(() => rembs.slice(seen).some((b) => b < 1_000_000), 3000);
    const low = Math.min(...rembs.slice(seen));
    expect(low).toBeLessThan(1_000_000);
    expect(low).toBeGreaterThanOrEqual(REMB_FLOOR_BPS * 0.99);
    // Loss-free reports raise it again.
    for (let i = 0; i < 6; i++) {
      await transport.sendRtcp([report(0)]);
      await new Promise((r) => setTimeout(r, 50));
    }
    const after = rembs.length;
    await until(() => rembs.length > after + 1, 3000);
    expect(rembs[rembs.length - 1]).toBeGreaterThan(low);
  });
});
