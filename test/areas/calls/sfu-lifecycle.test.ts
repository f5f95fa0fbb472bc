/**
 * The forwarder's session rules with werift client peers on loopback: `autoDiscover` publishing
 * every sending m-line under a random name, `bidirectionalMediaStream` pulls (a sendrecv m-line the
 * client can publish back on), operations waiting for `connected` (425 `session_error` when the
 * peer never connects) and a published track collected after it carried no media for the idle
 * time. The server runs with a 1 s idle time and a 1 s connect wait (the platform's are 30 s and
 * 5 s; both are options) so the file stays fast.
 */
import { MediaStreamTrack, RtpHeader, RtpPacket, type RTCPeerConnection } from 'werift';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
import { connected, createApp, loopbackPeer, sfuCall, type SfuApp } from './sfu-support.ts';

const IDLE_MS = 1_000;
const CONNECT_WAIT_MS = 1_000;

let t: TestServer;
let app: SfuApp;
const peers: RTCPeerConnection[] = [];

function peer(): RTCPeerConnection {
  const pc = loopbackPeer(t);
  peers.push(pc);
  return pc;
}

/** A werift publisher with one video track, pushed as `trackName` and connected. */
async function publish(trackName: string): Promise<{ pc: RTCPeerConnection; sessionId: string; source: MediaStreamTrack; send: (n: number) => void }> {
  const pc = peer();
  const source = new MediaStreamTrack({ kind: 'video' });
  const tx = pc.addTransceiver(source, { direction: 'sendonly' });
  await pc.setLocalDescription(await pc.createOffer());
  const sessionId = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId as string;
  const push = await sfuCall(t, app, 'POST', `/sessions/${sessionId}/tracks/new`, {
    sessionDescription: { type: 'offer', sdp: pc.localDescription!.sdp },
    tracks: [{ location: 'local', mid: tx.mid, trackName }],
  });
  expect(push.status).toBe(200);
  await pc.setRemoteDescription(push.body.sessionDescription);
  await connected(pc, 8000, 'publisher');
  let seq = 1;
  const send = (n: number) => {
    for (let i = 0; i < n; i++) {
      source.writeRtp(new RtpPacket(new RtpHeader({ payloadType: 96, sequenceNumber: seq, timestamp: seq * 3000, ssrc: 4321, marker: true }), Buffer.from(`frame-${seq++}`)));
    }
  };
  return { pc, sessionId, source, send };
}

describe.skipIf(sqlitePassOnly('sessions and media live in memory; nothing here touches storage'))('media host: session rules', () => {
  beforeAll(async () => {
    t = await startTestServer({ sfuTrackIdleMs: IDLE_MS, sfuConnectWaitMs: CONNECT_WAIT_MS });
    app = await createApp(t);
  });
  afterAll(async () => {
    for (const pc of peers) await pc.close().catch(() => undefined);
    await t?.stop();
  });

  it('autoDiscover publishes every sending m-line not named in tracks under a random trackName', async () => {
    const pc = peer();
    const audio = pc.addTransceiver(new MediaStreamTrack({ kind: 'audio' }), { direction: 'sendonly' });
    const video = pc.addTransceiver(new MediaStreamTrack({ kind: 'video' }), { direction: 'sendonly' });
    pc.addTransceiver('video', { direction: 'recvonly' });
    await pc.setLocalDescription(await pc.createOffer());
    const sessionId = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId;
    const res = await sfuCall(t, app, 'POST', `/sessions/${sessionId}/tracks/new`, {
      sessionDescription: { type: 'offer', sdp: pc.localDescription!.sdp },
      tracks: [{ location: 'local', mid: audio.mid, trackName: 'mic' }],
      autoDiscover: true,
    });
    expect(res.status).toBe(200);
    expect(res.body.sessionDescription.type).toBe('answer');
    expect(res.body.tracks).toHaveLength(2);
    expect(res.body.tracks[0]).toEqual({ location: 'local', trackName: 'mic', mid: audio.mid });
    // The receiving m-line is not a track to publish; the unnamed sending one gets a random name.
    expect(res.body.tracks[1]).toMatchObject({ location: 'local', mid: video.mid });
    expect(res.body.tracks[1].trackName).toMatch(/^[0-9a-f-]{36}$/);
    const state = await sfuCall(t, app, 'GET', `/sessions/${sessionId}`);
    expect(state.body.tracks.map((x: { trackName: string; status: string }) => [x.trackName, x.status])).toEqual([
      ['mic', 'active'],
      [res.body.tracks[1].trackName, 'active'],
    ]);
    // Without autoDiscover and without tracks the call is refused.
    const none = await sfuCall(t, app, 'POST', `/sessions/${sessionId}/tracks/new`, { sessionDescription: { type: 'offer', sdp: pc.localDescription!.sdp } });
    expect(none.status).toBe(400);
    expect(none.body.errorCode).toBe('invalid_params');
  });

  it('bidirectionalMediaStream: the pulled m-line is sendrecv, media arrives, and the client publishes back on it', { retry: 2, timeout: 30_000 }, async () => {
    const pub = await publish('camera-bidi');
    const sub = peer();
    const s2 = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId;
    const pull = await sfuCall(t, app, 'POST', `/sessions/${s2}/tracks/new`, {
      tracks: [{ location: 'remote', sessionId: pub.sessionId, trackName: 'camera-bidi', kind: 'video', bidirectionalMediaStream: true }],
    });
    expect(pull.body.requiresImmediateRenegotiation).toBe(true);
    const mid = pull.body.tracks[0].mid;
    const section = pull.body.sessionDescription.sdp.split(/\r\nm=/).find((m: string) => m.includes(`a=mid:${mid}\r\n`));
    expect(section).toContain('a=sendrecv');
    const got: RtpPacket[] = [];
    sub.onTrack.subscribe((track) => track.onReceiveRtp.subscribe((rtp) => got.push(rtp)));
    await sub.setRemoteDescription(pull.body.sessionDescription);
    await sub.setLocalDescription(await sub.createAnswer());
    expect((await sfuCall(t, app, 'PUT', `/sessions/${s2}/renegotiate`, { sessionDescription: { type: 'answer', sdp: sub.localDescription!.sdp } })).status).toBe(200);
    await connected(sub, 8000, 'subscriber');
    for (let i = 0; i < 40 && got.length < 5; i++) {
      pub.send(1);
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(got.length).toBeGreaterThanOrEqual(5);
    // The same transceiver now sends: the client offers and publishes it by that mid.
    const back = new MediaStreamTrack({ kind: 'video' });
    const tr = sub.getTransceivers().find((x) => x.mid === mid)!;
    await tr.sender.replaceTrack(back);
    tr.setDirection('sendrecv');
    await sub.setLocalDescription(await sub.createOffer());
    const pushBack = await sfuCall(t, app, 'POST', `/sessions/${s2}/tracks/new`, {
      sessionDescription: { type: 'offer', sdp: sub.localDescription!.sdp },
      tracks: [{ location: 'local', mid, trackName: 'reply' }],
    });
    expect(pushBack.status).toBe(200);
    expect(pushBack.body.tracks).toEqual([{ location: 'local', trackName: 'reply', mid }]);
    await sub.setRemoteDescription(pushBack.body.sessionDescription);
    const state = await sfuCall(t, app, 'GET', `/sessions/${s2}`);
    expect(state.body.tracks).toEqual(
      expect.arrayContaining([
        { location: 'local', mid, trackName: 'reply', status: 'active' },
        { location: 'remote', mid, sessionId: pub.sessionId, trackName: 'camera-bidi', status: 'active' },
      ]),
    );
  });

  it('operations wait for connected: a pull right after a push succeeds once the publisher connects; a peer that never connects → 425 session_error', { timeout: 30_000 }, async () => {
    // The publisher applies the SFU's answer only after the pull was sent.
    const pc = peer();
    const tx = pc.addTransceiver(new MediaStreamTrack({ kind: 'video' }), { direction: 'sendonly' });
    await pc.setLocalDescription(await pc.createOffer());
    const s1 = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId;
    const push = await sfuCall(t, app, 'POST', `/sessions/${s1}/tracks/new`, {
      sessionDescription: { type: 'offer', sdp: pc.localDescription!.sdp },
      tracks: [{ location: 'local', mid: tx.mid, trackName: 'late' }],
    });
    const s2 = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId;
    const pulling = sfuCall(t, app, 'POST', `/sessions/${s2}/tracks/new`, { tracks: [{ location: 'remote', sessionId: s1, trackName: 'late' }] });
    await new Promise((r) => setTimeout(r, 100));
    await pc.setRemoteDescription(push.body.sessionDescription);
    const pulled = await pulling;
    expect(pulled.status).toBe(200);
    expect(pulled.body.tracks[0]).toMatchObject({ trackName: 'late', sessionId: s1 });
    expect(pulled.body.tracks[0].errorCode).toBeUndefined();

    // A publisher that never applies the answer: the pull waits the connect wait, then 425.
    const idle = peer();
    const itx = idle.addTransceiver(new MediaStreamTrack({ kind: 'video' }), { direction: 'sendonly' });
    await idle.setLocalDescription(await idle.createOffer());
    const s3 = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId;
    await sfuCall(t, app, 'POST', `/sessions/${s3}/tracks/new`, {
      sessionDescription: { type: 'offer', sdp: idle.localDescription!.sdp },
      tracks: [{ location: 'local', mid: itx.mid, trackName: 'never' }],
    });
    const started = Date.now();
    const refused = await sfuCall(t, app, 'POST', `/sessions/${s2}/tracks/new`, { tracks: [{ location: 'remote', sessionId: s3, trackName: 'never' }] });
    expect(Date.now() - started).toBeGreaterThanOrEqual(CONNECT_WAIT_MS - 50);
    expect(refused.status).toBe(425);
    expect(refused.body.errorCode).toBe('session_error');
    expect(refused.body.errorDescription).toContain('not connected');

    // Data channels need the DTLS transport up: a session whose client never answered → 425.
    const dcPeer = peer();
    dcPeer.createDataChannel('server-events');
    await dcPeer.setLocalDescription(await dcPeer.createOffer());
    const s4 = (await sfuCall(t, app, 'POST', '/sessions/new', { sessionDescription: { type: 'offer', sdp: dcPeer.localDescription!.sdp } })).body.sessionId;
    const dc = await sfuCall(t, app, 'POST', `/sessions/${s4}/datachannels/new`, { dataChannels: [{ location: 'local', dataChannelName: 'chat' }] });
    expect(dc.status).toBe(425);
    expect(dc.body.errorCode).toBe('session_error');
  });

  it('a published track that carries no media for the idle time is collected; media keeps it alive', { retry: 2, timeout: 30_000 }, async () => {
    const pub = await publish('quiet');
    const status = async () => (await sfuCall(t, app, 'GET', `/sessions/${pub.sessionId}`)).body.tracks[0].status as string;
    // Sending for twice the idle time keeps the track.
    const end = Date.now() + 2 * IDLE_MS;
    while (Date.now() < end) {
      pub.send(1);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(await status()).toBe('active');
    // Silence: collected within the idle time plus a sweep.
    const silentSince = Date.now();
    let last = 'active';
    for (let i = 0; i < 40 && last !== 'inactive'; i++) {
      await new Promise((r) => setTimeout(r, 100));
      last = await status();
    }
    expect(last).toBe('inactive');
    expect(Date.now() - silentSince).toBeGreaterThanOrEqual(IDLE_MS - 100);
    const s2 = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId;
    const pull = await sfuCall(t, app, 'POST', `/sessions/${s2}/tracks/new`, { tracks: [{ location: 'remote', sessionId: pub.sessionId, trackName: 'quiet' }] });
    expect(pull.body.tracks[0].errorCode).toBe('not_found_track_error');
  });
});
