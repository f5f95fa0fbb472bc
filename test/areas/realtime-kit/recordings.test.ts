/**
 * Meeting recordings with real peers: a participant joins from Debian Chromium with a fake camera
 * and microphone; a composite recording is started, paused, resumed and stopped, and ffprobe reads
 * the MP4 behind the signed download URL (duration = recorded time minus the pause, with video and
 * audio); a track recording gives one file per published track; every status change arrives as a
 * signed `recording.statusUpdate` webhook; `record_on_start` starts one at the first join and it stops
 * by itself (ALL_PEERS_LEFT) once everyone has left; actions that do not apply to the state are refused.
 * Media and browsers, not storage: SQLite pass only.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchMediaChromium } from '../../support/chromium.ts';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
import { addParticipant, connect, createApp, createMeeting, joinInPage, startReceiver, until, type Fixture } from './support.ts';

function probe(file: string): { duration: number; streams: string[] } {
  const out = JSON.parse(execFileSync('ffprobe', ['-v', 'error', '-show_entries', 'format=duration:stream=codec_type', '-of', 'json', file]).toString());
  return { duration: Number(out.format.duration), streams: out.streams.map((s: { codec_type: string }) => s.codec_type) };
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const t0 = Date.now();
const step = (name: string) => {
  if (process.env.OUTPOST_TEST_VERBOSE) console.log(`${((Date.now() - t0) / 1000).toFixed(1)}s ${name}`);
};

describe.skipIf(sqlitePassOnly('recordings drive browsers and ffmpeg, not storage'))('meeting recordings', () => {
  let t: TestServer;
  let f: Fixture;
  let browser: Browser;
  let profile: string;
  let dir: string;
  let publicKey = '';
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let meetingId: string;
  let page: Page;

  beforeAll(async () => {
    t = await startTestServer({ meetingsKeepAliveCap: 0 });
    f = await createApp(t, 'rec');
    dir = mkdtempSync(join(tmpdir(), 'outpost-rec-test-'));
    publicKey = (await fetch(`${t.url}/.well-known/webhooks.json`).then((r) => r.json())).data.publicKey;
    receiver = await startReceiver(() => publicKey);
    const hook = await t.call('POST', `${f.base}/webhooks`, { name: 'rec', url: `${receiver.url}/hook`, events: ['recording.statusUpdate'] });
    expect(hook.status).toBe(201);
    meetingId = await createMeeting(t, f, { title: 'Recorded' });
    const host = await addParticipant(t, f, meetingId, 'host', 'group_call_host', 'Hana');
    ({ browser, profile } = await launchMediaChromium('outpost-rec-chromium-'));
    page = await browser.newPage();
    await joinInPage(page, t.url, host.token);
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    if (dir) rmSync(dir, { recursive: true, force: true });
    await receiver?.close();
    await t?.stop();
  });

  const get = async (id: string) => (await t.call('GET', `${f.base}/recordings/${id}`)).body.data;
  const waitFor = (id: string, status: string, ms = 30_000) => until(async () => ((await get(id)).status === status ? get(id) : undefined), ms, `recording ${id} ${status}`);
  const act = (id: string, action: string) => t.call('PUT', `${f.base}/recordings/${id}`, { action });

  it('composite: start, pause, resume, stop → an MP4 of the recorded time; signed webhooks for each state', async () => {
    const start = await t.call('POST', `${f.base}/recordings`, { meeting_id: meetingId, video_config: { width: 640, height: 360 } });
    expect(start.status).toBe(200);
    expect(start.body.data.status).toBe('INVOKED');
    const id = start.body.data.id as string;
    const again = await t.call('POST', `${f.base}/recordings`, { meeting_id: meetingId });
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ success: false, error: { code: 409 } });

    await waitFor(id, 'RECORDING');
    step('composite recording');
    const recStart = Date.now();
    const active = await t.call('GET', `${f.base}/recordings/active-recording/${meetingId}`);
    expect(active.body.data.id).toBe(id);
    await sleep(3000);
    const pausedAt = Date.now();
    expect((await act(id, 'pause')).body.data.status).toBe('PAUSED');
    const pauseTwice = await act(id, 'pause');
    expect(pauseTwice.status).toBe(400);
    expect(pauseTwice.body.error.message).toContain('PAUSED');
    await sleep(2000);
    const resumedAt = Date.now();
    expect((await act(id, 'resume')).body.data.status).toBe('RECORDING');
    await sleep(3000);
    const stop = await act(id, 'stop');
    const stoppedAt = Date.now();
    step('composite stopped');
    // What the test saw being recorded, with the pause left out (each bound has the round trip of one request).
    const seen = (pausedAt - recStart + stoppedAt - resumedAt) / 1000;
    expect(stop.status).toBe(200);
    expect(stop.body.data.status).toBe('UPLOADING');
    const stopTwice = await act(id, 'stop');
    expect(stopTwice.status).toBe(400);
    expect(stopTwice.body).toMatchObject({ success: false, error: { code: 400 } });

    const done = await waitFor(id, 'UPLOADED', 60_000);
    step('composite uploaded');
    // The server counts what the recorder's segments hold: the test's view plus start/stop latency.
    expect(Math.abs(done.recording_duration - seen)).toBeLessThan(2.0);
    expect(done.file_size).toBeGreaterThan(10_000);
    expect(done.output_file_name).toMatch(/\.mp4$/);
    expect(Date.parse(done.download_url_expiry)).toBeGreaterThan(Date.now());
    const res = await fetch(done.download_url);
    expect(res.status).toBe(200);
    const file = join(dir, 'composite.mp4');
    writeFileSync(file, Buffer.from(await res.arrayBuffer()));
    const p = probe(file);
    console.log(`composite recording: ${p.duration.toFixed(2)} s in the file; ${seen.toFixed(2)} s recorded as the test saw it, ${done.recording_duration} s as the server counts it (a 2 s pause left out); ${done.file_size} bytes`);
    expect(p.streams).toEqual(expect.arrayContaining(['video', 'audio']));
    // Each segment's file runs up to about half a second past the recorder's clock (its last
    // chunk's audio); two segments here. The pause (2 s) is left out either way.
    expect(Math.abs(p.duration - done.recording_duration)).toBeLessThan(1.5);
    expect(Math.abs(p.duration - seen)).toBeLessThan(2.5);

    // A tampered or expired link is refused.
    const bad = await fetch(done.download_url.replace(/signature=[^&]+/, 'signature=AAAA'));
    expect(bad.status).toBe(403);
    const expired = await fetch(done.download_url.replace(/expires=\d+/, 'expires=1'));
    expect(expired.status).toBe(403);
    // Actions on a finished recording are refused.
    expect((await act(id, 'pause')).status).toBe(400);
    expect((await act(id, 'resume')).status).toBe(400);
    expect((await t.call('GET', `${f.base}/recordings/active-recording/${meetingId}`)).status).toBe(404);

    const statuses = await until(() => {
      const mine = receiver.deliveries.filter((d) => d.body.recording?.recordingId === id);
      const s = mine.map((d) => d.body.recording.status);
      return s.includes('UPLOADED') ? mine : undefined;
    }, 10_000, 'webhooks');
    expect(statuses.map((d) => d.body.recording.status)).toEqual(['INVOKED', 'RECORDING', 'PAUSED', 'RECORDING', 'UPLOADING', 'UPLOADED']);
    for (const d of statuses) {
      expect(d.verified).toBe(true);
      expect(d.body.event).toBe('recording.statusUpdate');
      expect(d.body.meeting.id).toBe(meetingId);
    }
    const list = await t.call('GET', `${f.base}/recordings?meeting_id=${meetingId}`);
    expect(list.body.data.map((r: { id: string }) => r.id)).toContain(id);
  }, 120_000);

  it('track: one file per published track', async () => {
    const start = await t.call('POST', `${f.base}/recordings/track`, { meeting_id: meetingId, layers: { default: { file_name_prefix: 'cam', media_kind: 'audio_video' } } });
    expect(start.status).toBe(200);
    const id = start.body.data.id as string;
    expect(start.body.data.type).toBe('track');
    await waitFor(id, 'RECORDING');
    await sleep(3000);
    expect((await act(id, 'stop')).body.data.status).toBe('UPLOADING');
    const done = await waitFor(id, 'UPLOADED', 60_000);
    expect(done.files.map((x: { kind: string }) => x.kind).sort()).toEqual(['audio', 'video']);
    for (const file of done.files) {
      expect(file.participant).toBe('host');
      const path = join(dir, file.name);
      writeFileSync(path, Buffer.from(await (await fetch(file.download_url)).arrayBuffer()));
      const p = probe(path);
      expect(p.streams).toEqual([file.kind]);
      expect(p.duration).toBeGreaterThan(2);
    }
  }, 90_000);

  it('record_on_start: the first join of a session starts a composite recording; it stops by itself when everyone has left', async () => {
    const auto = await createMeeting(t, f, { title: 'Auto', record_on_start: true });
    const p = await addParticipant(t, f, auto, 'auto', 'group_call_host', 'Auto');
    const client = await connect(t, p.token);
    let id = '';
    try {
      await client.request({ t: 'join' });
      const rec = await until(async () => (await t.call('GET', `${f.base}/recordings?meeting_id=${auto}`)).body.data?.[0], 10_000, 'a recording of the meeting');
      expect(rec).toMatchObject({ meeting_id: auto, type: 'composite', start_reason: { reason: 'RECORD_ON_START' } });
      id = rec.id;
      await waitFor(id, 'RECORDING');
      // The recorder's page is a hidden participant: not counted, not listed, not announced.
      const live = (await t.call('GET', `${f.base}/meetings/${auto}/active-session`)).body.data;
      expect(live).toMatchObject({ live_participants: 1, max_concurrent_participants: 1 });
      const listed = (await t.call('GET', `${f.base}/sessions/${live.id}/participants`)).body.data;
      expect(JSON.stringify(listed)).not.toContain('outpost-recorder');
      expect(client.events.filter((e) => e.t === 'peerJoined')).toEqual([]);
    } finally {
      client.ws.close();
    }
    // The last real participant left: the session ends on the keep-alive (capped at 0 here) while
    // the recorder is still in the meeting, recording.
    await until(async () => (await t.call('GET', `${f.base}/meetings/${auto}/active-session`)).status === 404, 5_000, 'the session ended');
    expect((await get(id)).status).toBe('RECORDING');
    // Nobody but the recorder is left: after 15 s it stops and uploads what it has.
    const done = await waitFor(id, 'UPLOADED', 40_000);
    expect(done.stop_reason).toEqual({ reason: 'ALL_PEERS_LEFT' });
    expect(done.recording_duration).toBeGreaterThan(10);
  }, 90_000);

  it('refuses bad input with the envelope error', async () => {
    const noMeeting = await t.call('POST', `${f.base}/recordings`, { meeting_id: 'nope' });
    expect(noMeeting.status).toBe(404);
    const badType = await t.call('POST', `${f.base}/recordings`, { meeting_id: meetingId, type: 'hologram' });
    expect(badType.status).toBe(400);
    expect(badType.body.success).toBe(false);
    const badAction = await t.call('PUT', `${f.base}/recordings/whatever`, { action: 'rewind' });
    expect(badAction.status).toBe(400);
    const missing = await act('00000000-0000-0000-0000-000000000000', 'stop');
    expect(missing.status).toBe(404);
    const badStatus = await t.call('GET', `${f.base}/recordings?status=DONE`);
    expect(badStatus.status).toBe(400);
  });
});
