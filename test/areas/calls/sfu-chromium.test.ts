/**
 * Real browsers through the forwarder: two headless Chromium pages with fake media devices. One
 * publishes its camera track, the other pulls it by session id and track name; the subscriber's
 * `getStats()` must show decoded frames. A simulcast publisher's pulled layer follows `preferredRid`
 * and `tracks/update` (the decoded width changes). Both pages are served from `localhost` and call the media
 * host on `127.0.0.1`, so every request is cross-origin and goes through the CORS preflight.
 * A second, non-browser stack (Debian python3-aiortc) publishes generated video that Chromium pulls
 * and decodes. With `iceTransportPolicy: 'relay'` and the relay's own credentials, both pages
 * reach the forwarder only through Outpost's TURN server. Media does not touch storage: this runs
 * on the SQLite backend only.
 */
import { rmSync } from 'node:fs';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'puppeteer-core';
import { launchMediaChromium } from '../../support/chromium.ts';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { createApp, stunUrl, type SfuApp } from './sfu-support.ts';

const PYTHON = '/usr/bin/python3';
const AIORTC_PUBLISHER = fileURLToPath(new URL('./peers/aiortc-publisher.py', import.meta.url));


/** Shared page helpers: calls to the media host and waiting for `connected`. */
const HELPERS = String.raw`
window.sfu = async (base, secret, method, path, body) => {
  const res = await fetch(base + path, { method, headers: { authorization: 'Bearer ' + secret, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const json = await res.json();
  if (res.status >= 400) throw new Error(method + ' ' + path + ' → ' + res.status + ' ' + JSON.stringify(json));
  return json;
};
window.connected = (pc, ms) => new Promise((resolve, reject) => {
  if (pc.connectionState === 'connected') return resolve();
  const timer = setTimeout(() => reject(new Error('still ' + pc.connectionState + ' / ICE ' + pc.iceConnectionState)), ms);
  pc.addEventListener('connectionstatechange', () => { if (pc.connectionState === 'connected') { clearTimeout(timer); resolve(); } });
});
`;

const PUBLISH = String.raw`async (base, secret, trackName, rtcConfig) => {
  const media = await navigator.mediaDevices.getUserMedia({ video: { width: 320, height: 240 }, audio: false });
  const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle', ...rtcConfig });
  window.publisher = pc;
  const tx = pc.addTransceiver(media.getVideoTracks()[0], { direction: 'sendonly' });
  const { sessionId } = await sfu(base, secret, 'POST', '/sessions/new');
  await pc.setLocalDescription(await pc.createOffer());
  const push = await sfu(base, secret, 'POST', '/sessions/' + sessionId + '/tracks/new', {
    sessionDescription: { type: 'offer', sdp: pc.localDescription.sdp },
    tracks: [{ location: 'local', mid: tx.mid, trackName }],
  });
  await pc.setRemoteDescription(push.sessionDescription);
  await connected(pc, 10000);
  let local;
  const stats = await pc.getStats();
  stats.forEach((x) => { if (x.type === 'transport' && x.selectedCandidatePairId) { const pair = stats.get(x.selectedCandidatePairId); local = stats.get(pair.localCandidateId); } });
  return { sessionId, tracks: push.tracks, localCandidateType: local && local.candidateType };
}`;

const SUBSCRIBE = String.raw`async (base, secret, remoteSessionId, trackName, rtcConfig) => {
  const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle', ...rtcConfig });
  const { sessionId } = await sfu(base, secret, 'POST', '/sessions/new');
  const pull = await sfu(base, secret, 'POST', '/sessions/' + sessionId + '/tracks/new', {
    tracks: [{ location: 'remote', sessionId: remoteSessionId, trackName }],
  });
  const gotTrack = new Promise((resolve) => { pc.ontrack = (e) => resolve(e.track); });
  await pc.setRemoteDescription(pull.sessionDescription);
  await pc.setLocalDescription(await pc.createAnswer());
  await sfu(base, secret, 'PUT', '/sessions/' + sessionId + '/renegotiate', { sessionDescription: { type: 'answer', sdp: pc.localDescription.sdp } });
  await connected(pc, 10000);
  const track = await gotTrack;
  const video = document.createElement('video');
  video.muted = true;
  video.autoplay = true;
  video.srcObject = new MediaStream([track]);
  document.body.appendChild(video);
  let frames = 0, width = 0, nacks = 0, plis = 0, packets = 0;
  for (let i = 0; i < 150 && frames < 10; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const stats = await pc.getStats();
    stats.forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'video') { frames = s.framesDecoded || 0; width = s.frameWidth || 0; nacks = s.nackCount || 0; plis = s.pliCount || 0; packets = s.packetsReceived || 0; } });
  }
  return { sessionId, mid: pull.tracks[0].mid, framesDecoded: frames, frameWidth: width, nacks, plis, packets, requiresImmediateRenegotiation: pull.requiresImmediateRenegotiation };
}`;

/** Two sessions opened with a data-channel-only offer; a channel published by one, pulled by the other. */
const DATACHANNELS = String.raw`async (base, secret) => {
  async function session() {
    const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
    pc.createDataChannel('server-events');
    await pc.setLocalDescription(await pc.createOffer());
    const { sessionId, sessionDescription } = await sfu(base, secret, 'POST', '/sessions/new', { sessionDescription: pc.localDescription });
    await pc.setRemoteDescription(sessionDescription);
    await connected(pc, 10000);
    return { pc, sessionId, answerType: sessionDescription.type };
  }
  const one = await session();
  const two = await session();
  const local = await sfu(base, secret, 'POST', '/sessions/' + one.sessionId + '/datachannels/new', { dataChannels: [{ location: 'local', dataChannelName: 'chat' }] });
  const publish = one.pc.createDataChannel('chat', { negotiated: true, id: local.dataChannels[0].id });
  const remote = await sfu(base, secret, 'POST', '/sessions/' + two.sessionId + '/datachannels/new', { dataChannels: [{ location: 'remote', sessionId: one.sessionId, dataChannelName: 'chat' }] });
  const subscribed = two.pc.createDataChannel('chat-subscribed', { negotiated: true, id: remote.dataChannels[0].id });
  const received = [];
  subscribed.onmessage = (e) => received.push(String(e.data));
  await Promise.all([publish, subscribed].map((dc) => dc.readyState === 'open' ? null : new Promise((r) => { dc.onopen = r; })));
  for (let i = 0; i < 50 && received.length < 3; i++) {
    if (i % 10 === 0) publish.send('hello ' + i);
    await new Promise((r) => setTimeout(r, 100));
  }
  const stateOne = await sfu(base, secret, 'GET', '/sessions/' + one.sessionId);
  const stateTwo = await sfu(base, secret, 'GET', '/sessions/' + two.sessionId);
  const closed = await sfu(base, secret, 'PUT', '/sessions/' + two.sessionId + '/datachannels/close', { dataChannels: [{ id: remote.dataChannels[0].id }] });
  const before = received.length;
  publish.send('after close');
  await new Promise((r) => setTimeout(r, 500));
  const closedAgain = await sfu(base, secret, 'PUT', '/sessions/' + two.sessionId + '/datachannels/close', { dataChannels: [{ id: remote.dataChannels[0].id }] });
  return { answerType: one.answerType, local, remote, received, stateOne, stateTwo, closed, afterClose: received.length - before, closedAgain };
}`;

/**
 * Simulcast: one page publishes two layers (rid a: 640×360, rid b: 320×180) and pulls its own
 * track with `preferredRid` b, then switches with `tracks/update` by the receiving mid. Returns the
 * decoded frame width seen after each step.
 */
const SIMULCAST = String.raw`async (base, secret) => {
  const media = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 360 }, audio: false });
  const pub = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
  const tx = pub.addTransceiver(media.getVideoTracks()[0], { direction: 'sendonly', sendEncodings: [{ rid: 'a' }, { rid: 'b', scaleResolutionDownBy: 2 }] });
  const { sessionId } = await sfu(base, secret, 'POST', '/sessions/new');
  await pub.setLocalDescription(await pub.createOffer());
  const push = await sfu(base, secret, 'POST', '/sessions/' + sessionId + '/tracks/new', {
    sessionDescription: { type: 'offer', sdp: pub.localDescription.sdp },
    tracks: [{ location: 'local', mid: tx.mid, trackName: 'layers' }],
  });
  await pub.setRemoteDescription(push.sessionDescription);
  await connected(pub, 10000);
  const sub = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
  const { sessionId: subId } = await sfu(base, secret, 'POST', '/sessions/new');
  const pull = await sfu(base, secret, 'POST', '/sessions/' + subId + '/tracks/new', {
    tracks: [{ location: 'remote', sessionId, trackName: 'layers', simulcast: { preferredRid: 'b' } }],
  });
  await sub.setRemoteDescription(pull.sessionDescription);
  await sub.setLocalDescription(await sub.createAnswer());
  await sfu(base, secret, 'PUT', '/sessions/' + subId + '/renegotiate', { sessionDescription: { type: 'answer', sdp: sub.localDescription.sdp } });
  await connected(sub, 10000);
  const mid = pull.tracks[0].mid;
  const inbound = async () => {
    let out = { width: 0, frames: 0 };
    (await sub.getStats()).forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'video') out = { width: s.frameWidth || 0, frames: s.framesDecoded || 0 }; });
    return out;
  };
  const waitWidth = async (ok) => {
    let v = await inbound();
    for (let i = 0; i < 100 && !(v.frames > 0 && ok(v.width)); i++) { await new Promise((r) => setTimeout(r, 100)); v = await inbound(); }
    return v;
  };
  const layers = async () => {
    const out = [];
    (await pub.getStats()).forEach((s) => { if (s.type === 'outbound-rtp') out.push(s.rid + ' ' + s.frameWidth + 'px ' + s.framesEncoded + ' frames ' + s.qualityLimitationReason); });
    return out.join(', ');
  };
  const steps = [];
  steps.push({ step: 'pull b', ...(await waitWidth((w) => w > 0 && w <= 320)) });
  const up = await sfu(base, secret, 'PUT', '/sessions/' + subId + '/tracks/update', { tracks: [{ location: 'remote', mid, simulcast: { preferredRid: 'a' } }] });
  steps.push({ step: 'update a', ...(await waitWidth((w) => w > 320)), answer: up, publisher: await layers() });
  await sfu(base, secret, 'PUT', '/sessions/' + subId + '/tracks/update', { tracks: [{ location: 'remote', mid, simulcast: { preferredRid: 'b' } }] });
  steps.push({ step: 'update b', ...(await waitWidth((w) => w > 0 && w <= 320)) });
  const wrong = await sfu(base, secret, 'PUT', '/sessions/' + subId + '/tracks/update', { tracks: [{ location: 'remote', mid: 'no-such-mid', simulcast: { preferredRid: 'a' } }] });
  pub.close();
  sub.close();
  return { steps, mid, wrong };
}`;

let t: TestServer | undefined;
let app: SfuApp;
let browser: Browser | undefined;
let profile: string | undefined;
let skipReason: string | undefined;

/** Pages of the running test; closed after it so no capture stays open into the next test. */
const openPages: Page[] = [];

async function openPage(b: Browser, origin: string): Promise<Page> {
  const page = await b.newPage();
  openPages.push(page);
  await page.goto(`${origin}/healthz`);
  await page.evaluate(HELPERS);
  return page;
}

beforeAll(async () => {
  if (process.env.OUTPOST_TEST_DATABASE?.startsWith('postgres')) {
    skipReason = 'media forwarding does not touch storage: the Chromium test runs on the SQLite backend only';
    console.log(`skipping sfu-chromium: ${skipReason}`);
    return;
  }
  t = await startTestServer();
  app = await createApp(t);
  ({ browser, profile } = await launchMediaChromium('outpost-sfu-chromium-'));
}, 60_000);

afterEach(async () => {
  for (const page of openPages.splice(0)) await page.close().catch(() => undefined);
});

afterAll(async () => {
  await browser?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
  await t?.stop();
});

describe('Chromium through the forwarder', () => {
  it('one page publishes its camera, another pulls it by track name and decodes frames', async (ctx) => {
    if (skipReason) return ctx.skip();
    const base = `${t!.url}/v1/apps/${app.uid}`;
    const pageOrigin = t!.url.replace('127.0.0.1', 'localhost');
    const pubPage = await openPage(browser!, pageOrigin);
    const subPage = await openPage(browser!, pageOrigin);
    const pub = (await pubPage.evaluate(`(${PUBLISH})(${JSON.stringify(base)}, ${JSON.stringify(app.secret)}, 'camera', {})`)) as { sessionId: string; tracks: Array<{ trackName: string; mid: string }> };
    expect(pub.tracks[0]).toMatchObject({ trackName: 'camera' });
    const sub = (await subPage.evaluate(`(${SUBSCRIBE})(${JSON.stringify(base)}, ${JSON.stringify(app.secret)}, ${JSON.stringify(pub.sessionId)}, 'camera', {})`)) as {
      framesDecoded: number;
      frameWidth: number;
      requiresImmediateRenegotiation: boolean;
    };
    expect(sub.requiresImmediateRenegotiation).toBe(true);
    if (sub.framesDecoded === 0) console.log('subscriber stats', sub);
    expect(sub.framesDecoded).toBeGreaterThan(0);
    expect(sub.frameWidth).toBe(320);
  }, 60_000);

  it('simulcast: preferredRid picks the pulled layer and tracks/update switches it both ways', async (ctx) => {
    if (skipReason) return ctx.skip();
    const base = `${t!.url}/v1/apps/${app.uid}`;
    const page = await openPage(browser!, t!.url.replace('127.0.0.1', 'localhost'));
    const r = (await page.evaluate(`(${SIMULCAST})(${JSON.stringify(base)}, ${JSON.stringify(app.secret)})`)) as {
      steps: Array<{ step: string; width: number; frames: number; answer?: any; publisher?: string }>;
      mid: string;
      wrong: any;
    };
    console.log('simulcast layers received:', r.steps.map((x) => `${x.step}: ${x.width} px after ${x.frames} frames`).join('; '), '; publisher sent:', r.steps[1].publisher);
    const [b1, a, b2] = r.steps;
    expect(b1.width).toBe(320);
    expect(a.width).toBe(640);
    expect(a.frames).toBeGreaterThan(b1.frames);
    expect(a.answer).toMatchObject({ requiresImmediateRenegotiation: false, tracks: [{ location: 'remote', mid: r.mid, trackName: 'layers', simulcast: { preferredRid: 'a' } }] });
    expect(b2.width).toBe(320);
    expect(b2.frames).toBeGreaterThan(a.frames);
    expect(r.wrong.tracks[0].errorCode).toBe('update_track_error');
  }, 60_000);

  it('data channels: a session opened with an offer publishes a channel that another session pulls', async (ctx) => {
    if (skipReason) return ctx.skip();
    const base = `${t!.url}/v1/apps/${app.uid}`;
    const page = await openPage(browser!, t!.url.replace('127.0.0.1', 'localhost'));
    const r = (await page.evaluate(`(${DATACHANNELS})(${JSON.stringify(base)}, ${JSON.stringify(app.secret)})`)) as any;
    expect(r.answerType).toBe('answer');
    expect(r.local.dataChannels[0]).toMatchObject({ location: 'local', dataChannelName: 'chat' });
    expect(typeof r.local.dataChannels[0].id).toBe('number');
    expect(r.remote.dataChannels[0]).toMatchObject({ location: 'remote', dataChannelName: 'chat' });
    expect(r.received.length).toBeGreaterThanOrEqual(3);
    expect(r.received[0]).toBe('hello 0');
    expect(r.stateOne.dataChannels).toEqual([{ location: 'local', dataChannelName: 'chat', id: r.local.dataChannels[0].id, status: 'active' }]);
    expect(r.stateTwo.dataChannels[0]).toMatchObject({ location: 'remote', dataChannelName: 'chat', status: 'active' });
    expect(r.closed.dataChannels[0]).toMatchObject({ id: r.remote.dataChannels[0].id });
    expect(r.closed.dataChannels[0].errorCode).toBeUndefined();
    expect(r.afterClose).toBe(0);
    expect(r.closedAgain.dataChannels[0].errorCode).toBe('close_track_error');
  }, 60_000);

  it('a non-browser peer (aiortc) publishes; Chromium pulls and decodes its frames', async (ctx) => {
    if (skipReason) return ctx.skip();
    const probe = spawn(PYTHON, ['-c', 'import aiortc']);
    const importable = await new Promise<boolean>((resolve) => probe.once('exit', (code) => resolve(code === 0)));
    if (!importable) throw new Error(`${PYTHON} cannot import aiortc: install the Debian package 'python3-aiortc' (scripts/test.sh does this)`);
    const base = `${t!.url}/v1/apps/${app.uid}`;
    let child: ChildProcess | undefined;
    try {
      child = spawn(PYTHON, [AIORTC_PUBLISHER, base, app.secret, stunUrl(t!), 'aiortc-video', '40'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      child.stderr!.on('data', (d) => (err += d));
      const published = await new Promise<{ sessionId: string; tracks: Array<{ trackName: string; mid: string }> }>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`the aiortc publisher did not connect within 30 s:\n${err}`)), 30_000);
        child!.stdout!.on('data', (d) => {
          out += d;
          const line = out.split('\n').find((l) => l.startsWith('{'));
          if (line) {
            clearTimeout(timer);
            resolve(JSON.parse(line));
          }
        });
        child!.once('exit', (code) => {
          clearTimeout(timer);
          reject(new Error(`the aiortc publisher exited with ${code}:\n${err}`));
        });
      });
      expect(published.tracks[0]).toMatchObject({ trackName: 'aiortc-video' });
      const page = await openPage(browser!, t!.url.replace('127.0.0.1', 'localhost'));
      const sub = (await page.evaluate(`(${SUBSCRIBE})(${JSON.stringify(base)}, ${JSON.stringify(app.secret)}, ${JSON.stringify(published.sessionId)}, 'aiortc-video', {})`)) as { framesDecoded: number; frameWidth: number };
      if (sub.framesDecoded === 0) console.log('subscriber stats', sub);
      expect(sub.framesDecoded).toBeGreaterThan(0);
      expect(sub.frameWidth).toBe(320);
    } finally {
      child?.kill('SIGTERM');
    }
  }, 90_000);

  it('TURN only: publisher and subscriber reach the forwarder through Outpost\'s relay (iceTransportPolicy relay)', async (ctx) => {
    if (skipReason) return ctx.skip();
    const h = { authorization: `Bearer ${t!.token}`, 'content-type': 'application/json' };
    const key = (await (await fetch(`${t!.api}/accounts/${t!.accountId}/calls/turn_keys`, { method: 'POST', headers: h, body: '{}' })).json()).result;
    const creds = await (await fetch(`${t!.url}/v1/turn/keys/${key.uid}/credentials/generate-ice-servers`, { method: 'POST', headers: { ...h, authorization: `Bearer ${key.key}` }, body: '{"ttl":600}' })).json();
    const rtcConfig = { iceServers: creds.iceServers, iceTransportPolicy: 'relay' };
    const base = `${t!.url}/v1/apps/${app.uid}`;
    const origin = t!.url.replace('127.0.0.1', 'localhost');
    const pubPage = await openPage(browser!, origin);
    const subPage = await openPage(browser!, origin);
    const cfg = JSON.stringify(rtcConfig);
    const pub = (await pubPage.evaluate(`(${PUBLISH})(${JSON.stringify(base)}, ${JSON.stringify(app.secret)}, 'relayed', ${cfg})`)) as { sessionId: string; localCandidateType: string };
    expect(pub.localCandidateType).toBe('relay');
    const sub = (await subPage.evaluate(`(${SUBSCRIBE})(${JSON.stringify(base)}, ${JSON.stringify(app.secret)}, ${JSON.stringify(pub.sessionId)}, 'relayed', ${cfg})`)) as { framesDecoded: number };
    if (sub.framesDecoded === 0) console.log('subscriber stats', sub);
    expect(sub.framesDecoded).toBeGreaterThan(0);
  }, 60_000);
});
