/**
 * A meeting's own livestream: a participant joins from Debian Chromium with a fake camera and
 * microphone; `POST /meetings/{id}/livestreams` starts the recorder's composite view of the meeting
 * encoded to the livestream's RTMP ingest; the livestream goes LIVE, ffprobe reads the HLS playback
 * URL (a 640×360 video stream and audio), `active-livestream/stop` brings it back to IDLE and the
 * finished playlist has a duration; each change is a signed `livestreaming.statusUpdate` webhook
 * that names the meeting; a stop while the recorder page is still joining ends it IDLE without a
 * LIVE. `GET /livestreams/{id}` answers `{livestream, session}` (the latest session's times and
 * ingest seconds), also through the official `cloudflare` client. A meeting with
 * `live_stream_on_start` starts its livestream at the session's first join, and the livestream stops
 * by itself (IDLE, with its webhook) once everyone has left; the session then ends. When the
 * ingest refuses the meeting's encoder (an outside publisher took it with the key while the page
 * joined) the livestream is ERRORED with a signed OFFLINE webhook and keeps that error. Bad input: a
 * second start while live (409), stopping when none is active (404), an unknown meeting (404), a
 * bad body (400). Media and browsers, not storage: SQLite pass only.
 */
import { execFile, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { promisify } from 'node:util';
import type { Browser } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchMediaChromium } from '../../support/chromium.ts';
import { sdk } from '../../support/sdk.ts';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
import { addParticipant, connect, createApp, createMeeting, joinInPage, startReceiver, until, type Fixture } from './support.ts';

const run = promisify(execFile);

async function probe(url: string): Promise<{ duration: number; streams: { codec_type: string; width?: number; height?: number }[] }> {
  const out = await run('ffprobe', ['-v', 'error', '-show_entries', 'format=duration:stream=codec_type,width,height', '-of', 'json', url], { timeout: 20_000 });
  const j = JSON.parse(out.stdout);
  return { duration: Number(j.format?.duration), streams: j.streams };
}

/** Pushes a test pattern to an RTMP URL for up to `seconds`; resolves with ffmpeg's exit code. */
function publish(url: string, seconds: number): Promise<number | null> {
  return new Promise((resolve) => {
    const p = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-re', '-f', 'lavfi', '-i', 'testsrc=size=320x240:rate=25', '-f', 'lavfi', '-i', 'sine', '-t', String(seconds), '-c:v', 'libx264', '-preset', 'ultrafast', '-g', '25', '-pix_fmt', 'yuv420p', '-c:a', 'aac', '-f', 'flv', url], { stdio: 'ignore' });
    const timer = setTimeout(() => p.kill('SIGKILL'), (seconds + 20) * 1000);
    p.on('close', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

describe.skipIf(sqlitePassOnly('meeting livestreams drive browsers and ffmpeg, not storage'))('meeting livestream', () => {
  let t: TestServer;
  let f: Fixture;
  let browser: Browser;
  let profile: string;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let meetingId: string;

  beforeAll(async () => {
    t = await startTestServer({ meetingsKeepAliveCap: 0 });
    f = await createApp(t, 'mls');
    const publicKey = (await fetch(`${t.url}/.well-known/webhooks.json`).then((r) => r.json())).data.publicKey;
    receiver = await startReceiver(() => publicKey);
    expect((await t.call('POST', `${f.base}/webhooks`, { name: 'mls', url: `${receiver.url}/hook`, events: ['livestreaming.statusUpdate'] })).status).toBe(201);
    meetingId = await createMeeting(t, f, { title: 'Streamed' });
    const host = await addParticipant(t, f, meetingId, 'host', 'group_call_host', 'Hana');
    ({ browser, profile } = await launchMediaChromium('outpost-mls-chromium-'));
    const page = await browser.newPage();
    await joinInPage(page, t.url, host.token);
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    await receiver?.close();
    await t?.stop();
  });

  const path = (rest: string) => `${f.base}/meetings/${meetingId}/${rest}`;
  const get = async (id: string) => (await t.call('GET', `${f.base}/livestreams/${id}`)).body.data.livestream;

  it('bad input: unknown meeting, nothing to stop, a bad body', async () => {
    const unknown = await t.call('POST', `${f.base}/meetings/00000000-0000-4000-8000-000000000000/livestreams`, {});
    expect(unknown.status).toBe(404);
    expect(unknown.body).toMatchObject({ success: false, error: { code: 404 } });
    expect(unknown.body.error.message).toContain('Meeting');
    expect((await t.call('POST', `${f.base}/meetings/00000000-0000-4000-8000-000000000000/active-livestream/stop`)).status).toBe(404);
    const none = await t.call('POST', path('active-livestream/stop'));
    expect(none.status).toBe(404);
    expect(none.body.error.message).toContain('Active livestream');
    expect((await t.call('GET', path('active-livestream'))).status).toBe(404);
    const bad = await t.call('POST', path('livestreams'), { video_config: { width: 'wide' } });
    expect(bad.status).toBe(400);
    expect(bad.body.success).toBe(false);
    // Nothing was created by the refused calls.
    expect((await t.call('GET', path('livestreams'))).body.data).toEqual([]);
  });

  it('start → LIVE with HLS of the composite view → stop → IDLE; webhooks name the meeting', async () => {
    const start = await t.call('POST', path('livestreams'), { name: 'town hall', video_config: { width: 640, height: 360 } });
    expect(start.status).toBe(201);
    const ls = start.body.data;
    expect(ls.status).toBe('INVOKED');
    expect(ls.meeting_id).toBe(meetingId);
    expect(ls.playback_url).toMatch(/\.m3u8$/);
    expect(ls.ingest_server).toMatch(/^rtmp:\/\//);
    const again = await t.call('POST', path('livestreams'), {});
    expect(again.status).toBe(409);

    await until(async () => (await get(ls.id)).status === 'LIVE', 40_000, 'LIVE');
    expect((await t.call('GET', path('active-livestream'))).body.data.id).toBe(ls.id);
    const listed = await t.call('GET', path('livestreams'));
    expect(listed.body.data.map((l: { id: string }) => l.id)).toEqual([ls.id]);
    const independent = await t.call('GET', `${f.base}/livestreams?exclude_meetings=true`);
    expect(independent.body.data).toEqual([]);

    // Two segments in the playlist, so ffprobe sees more than the first keyframe.
    await until(async () => {
      const r = await fetch(ls.playback_url);
      return r.status === 200 && ((await r.text()).match(/\.ts/g) ?? []).length >= 2;
    }, 30_000, 'playlist');
    const live = await probe(ls.playback_url);
    const video = live.streams.find((s) => s.codec_type === 'video');
    expect(video).toMatchObject({ width: 640, height: 360 });
    expect(live.streams.some((s) => s.codec_type === 'audio')).toBe(true);

    const stop = await t.call('POST', path('active-livestream/stop'));
    expect(stop.status).toBe(200);
    expect(stop.body.data.message).toMatch(/stopped/i);
    expect((await get(ls.id)).status).toBe('IDLE');
    expect((await t.call('POST', path('active-livestream/stop'))).status).toBe(404);

    // The finished playlist (ENDLIST) has a duration.
    const ended = await probe(ls.playback_url);
    expect(ended.duration).toBeGreaterThan(0);
    expect(ended.streams.some((s) => s.codec_type === 'video')).toBe(true);

    const hooks = await until(() => {
      const mine = receiver.deliveries.filter((d) => d.body.streamId === ls.id);
      return mine.length >= 2 ? mine : undefined;
    }, 10_000, 'webhooks');
    expect(hooks.map((d) => d.body.status)).toEqual(['LIVE', 'IDLE']);
    for (const d of hooks) {
      expect(d.verified).toBe(true);
      expect(d.body).toMatchObject({ event: 'livestreaming.statusUpdate', manualIngest: false, playbackUrl: ls.playback_url, meeting: { id: meetingId, title: 'Streamed' } });
    }
    const analytics = await t.call('GET', `${f.base}/analytics/livestreams/overall`);
    expect(analytics.body.data.count).toBe(1);
    expect(analytics.body.data.total_ingest_seconds).toBeGreaterThan(0);

    // The livestream with its latest session, as the official client reads it.
    const one = await sdk(t).realtimeKit.livestreams.getLivestreamSessionForLivestreamID(ls.id, { account_id: t.accountId, app_id: f.appId });
    expect(one.data?.livestream).toMatchObject({ id: ls.id, meeting_id: meetingId, status: 'IDLE', playback_url: ls.playback_url });
    const s = one.data!.session!;
    expect(s).toMatchObject({ livestream_id: ls.id, err_message: null });
    expect(Date.parse(s.invoked_time!)).toBeLessThanOrEqual(Date.parse(s.started_time!));
    expect(Date.parse(s.started_time!)).toBeLessThanOrEqual(Date.parse(s.stopped_time!));
    expect(s.ingest_seconds).toBeGreaterThan(0);
    expect(s.viewer_seconds).toBeGreaterThan(0);
    expect((await t.call('GET', `${f.base}/livestreams/${ls.id}?per_page=many`)).status).toBe(400);
  }, 90_000);

  it('a stop while the page is still joining ends it IDLE without going LIVE; the next start is free', async () => {
    const start = await t.call('POST', path('livestreams'), {});
    expect(start.status).toBe(201);
    const id = start.body.data.id as string;
    expect(start.body.data.name).toBe('Streamed');
    const stop = await t.call('POST', path('active-livestream/stop'));
    expect(stop.status).toBe(200);
    expect((await get(id)).status).toBe('IDLE');
    expect((await t.call('GET', path('active-livestream'))).status).toBe(404);
    await new Promise((r) => setTimeout(r, 1500));
    expect((await get(id)).status).toBe('IDLE');
    expect(receiver.deliveries.filter((d) => d.body.streamId === id && d.body.status === 'LIVE')).toEqual([]);
    const next = await t.call('POST', path('livestreams'), {});
    expect(next.status).toBe(201);
    expect((await t.call('POST', path('active-livestream/stop'))).status).toBe(200);
    expect((await t.call('GET', path('livestreams'))).body.data).toHaveLength(3);
  }, 30_000);

  it('the ingest refuses the encoder (another publisher holds the stream key): ERRORED with its webhook', async () => {
    const start = await t.call('POST', path('livestreams'), { name: 'contested' });
    expect(start.status).toBe(201);
    const ls = start.body.data;
    // While the recorder page joins, an outside encoder with the leaked key takes the ingest: it goes
    // LIVE, and the meeting's own encoder is refused when it connects, so its ffmpeg exits non-zero.
    const intruder = publish(`${ls.ingest_server}/${ls.stream_key}`, 60);
    await until(async () => (await get(ls.id)).status === 'LIVE', 10_000, 'LIVE by the outside publisher');
    const failed = await until(async () => {
      const l = await get(ls.id);
      return l.status === 'ERRORED' ? l : undefined;
    }, 40_000, 'ERRORED');
    expect(failed.error).toMatch(/encoder/);
    // The failed livestream releases its ingest, which drops the outside publisher too.
    expect(await intruder).not.toBe(0);
    // The ingest closing after the failure changes nothing: the first failure's status and message stay.
    expect(await get(ls.id)).toMatchObject({ status: 'ERRORED', error: failed.error });
    expect((await t.call('GET', path('active-livestream'))).status).toBe(404);
    const one = (await t.call('GET', `${f.base}/livestreams/${ls.id}`)).body.data;
    expect(one.session).toMatchObject({ livestream_id: ls.id, stopped_time: expect.any(String), err_message: failed.error });

    const hooks = await until(() => {
      const mine = receiver.deliveries.filter((d) => d.body.streamId === ls.id);
      return mine.length >= 2 ? mine : undefined;
    }, 10_000, 'webhooks');
    expect(hooks.map((d) => d.body.status)).toEqual(['LIVE', 'OFFLINE']);
    for (const d of hooks) {
      expect(d.verified).toBe(true);
      expect(d.body).toMatchObject({ event: 'livestreaming.statusUpdate', manualIngest: false, meeting: { id: meetingId } });
    }
    expect(hooks[1].body.error).toBe(failed.error);
    // Nothing is left on: the meeting can start a livestream again.
    const next = await t.call('POST', path('livestreams'), {});
    expect(next.status).toBe(201);
    expect((await t.call('POST', path('active-livestream/stop'))).status).toBe(200);
  }, 90_000);

  it('live_stream_on_start: the first join starts it; it stops by itself when everyone has left', async () => {
    const auto = await createMeeting(t, f, { title: 'On air', live_stream_on_start: true });
    expect((await t.call('GET', `${f.base}/meetings/${auto}`)).body.data.live_stream_on_start).toBe(true);
    const p = await addParticipant(t, f, auto, 'guest', 'group_call_host', 'Guest');
    const client = await connect(t, p.token);
    let id = '';
    try {
      expect((await client.request({ t: 'join' })).ok).toBe(true);
      const active = await until(async () => (await t.call('GET', `${f.base}/meetings/${auto}/active-livestream`)).body.data, 10_000, 'an active livestream');
      id = active.id;
      expect(active).toMatchObject({ meeting_id: auto, name: 'On air' });
      await until(async () => (await get(id)).status === 'LIVE', 40_000, 'LIVE');
      // The livestream's page is a hidden participant: not counted, not announced.
      expect((await t.call('GET', `${f.base}/meetings/${auto}/active-session`)).body.data).toMatchObject({ live_participants: 1, max_concurrent_participants: 1 });
      expect(client.events.filter((e) => e.t === 'peerJoined')).toEqual([]);
    } finally {
      client.ws.close();
    }
    // Everyone left: the livestream ends (keep-alive capped at 0 here) and the session with it.
    await until(async () => (await get(id)).status === 'IDLE', 20_000, 'IDLE after everyone left');
    const hooks = await until(() => {
      const mine = receiver.deliveries.filter((d) => d.body.streamId === id);
      return mine.length >= 2 ? mine : undefined;
    }, 10_000, 'webhooks');
    expect(hooks.map((d) => d.body.status)).toEqual(['LIVE', 'IDLE']);
    expect(hooks[1].body.meeting).toMatchObject({ id: auto });
    expect((await t.call('GET', `${f.base}/livestreams/${id}`)).body.data.session.stopped_time).toEqual(expect.any(String));
    await until(async () => (await t.call('GET', `${f.base}/meetings/${auto}/active-session`)).status === 404, 15_000, 'the session ended');
  }, 90_000);
});
