/**
 * Independent livestreams with a real RTMP publisher: ffmpeg pushes a test pattern (lavfi testsrc
 * and sine, H.264/AAC) to the livestream's ingest with its stream key; the livestream goes LIVE,
 * ffprobe reads the HLS playback URL Outpost serves, and it returns to IDLE when the publisher
 * stops, each change a signed `livestreaming.statusUpdate` webhook. A wrong stream key is refused
 * (the publisher fails and nothing is written). `GET /livestreams/{id}` answers `{livestream, session}`:
 * no session before the first publisher, then its stretch; each later stretch is a session of its
 * own (paged newest first, `/livestreams/sessions/{id}`, `…/active-livestream-session` while on air,
 * `/analytics/livestreams/daywise`). Sessions are stored, so this runs on both backends.
 */
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { sdk } from '../../support/sdk.ts';
import { createApp, startReceiver, until, type Fixture } from './support.ts';

const run = promisify(execFile);

function publish(url: string, seconds: number): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-re', '-f', 'lavfi', '-i', 'testsrc=size=320x240:rate=25', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=44100', '-t', String(seconds), '-c:v', 'libx264', '-preset', 'ultrafast', '-g', '25', '-pix_fmt', 'yuv420p', '-c:a', 'aac', '-f', 'flv', url], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    p.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => p.kill('SIGKILL'), (seconds + 20) * 1000);
    p.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

describe('livestreams', () => {
  let t: TestServer;
  let f: Fixture;
  let publicKey = '';
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    t = await startTestServer();
    f = await createApp(t, 'live');
    publicKey = (await fetch(`${t.url}/.well-known/webhooks.json`).then((r) => r.json())).data.publicKey;
    receiver = await startReceiver(() => publicKey);
    expect((await t.call('POST', `${f.base}/webhooks`, { name: 'ls', url: `${receiver.url}/hook`, events: ['livestreaming.statusUpdate'] })).status).toBe(201);
  });
  afterAll(async () => {
    await receiver?.close();
    await t?.stop();
  });

  it('RTMP in with the stream key, HLS out; a wrong key is refused', async () => {
    const created = await t.call('POST', `${f.base}/livestreams`, { name: 'pattern' });
    expect(created.status).toBe(201);
    const ls = created.body.data;
    expect(ls.status).toBe('IDLE');
    expect(ls.ingest_server).toMatch(/^rtmp:\/\/127\.0\.0\.1:\d+\/live$/);
    expect(ls.playback_url).toMatch(/\.m3u8$/);

    const wrong = await publish(`${ls.ingest_server}/not-the-key`, 3);
    expect(wrong.code).not.toBe(0);
    const before = (await t.call('GET', `${f.base}/livestreams/${ls.id}`)).body.data;
    expect(before.livestream.status).toBe('IDLE');
    expect(before.session).toBeNull();
    expect((await fetch(ls.playback_url)).status).toBe(404);

    const pushing = publish(`${ls.ingest_server}/${ls.stream_key}`, 8);
    await until(async () => (await t.call('GET', `${f.base}/livestreams/${ls.id}`)).body.data.livestream.status === 'LIVE', 10_000, 'LIVE');
    await until(async () => (await fetch(ls.playback_url)).status === 200, 15_000, 'playlist');
    const probe = await run('ffprobe', ['-v', 'error', '-show_entries', 'stream=codec_type,width,height', '-of', 'json', ls.playback_url], { timeout: 20_000 });
    const streams = JSON.parse(probe.stdout).streams;
    expect(streams.map((s: { codec_type: string }) => s.codec_type).sort()).toEqual(['audio', 'video']);
    expect(streams.find((s: { codec_type: string }) => s.codec_type === 'video').width).toBe(320);
    const done = await pushing;
    expect(done.code).toBe(0);
    await until(async () => (await t.call('GET', `${f.base}/livestreams/${ls.id}`)).body.data.livestream.status === 'IDLE', 10_000, 'IDLE');
    // The publisher's stretch is the livestream's latest session.
    const after = (await t.call('GET', `${f.base}/livestreams/${ls.id}`)).body.data;
    expect(after.session).toMatchObject({ livestream_id: ls.id, err_message: null, stopped_time: expect.any(String), started_time: expect.any(String) });
    expect(after.session.ingest_seconds).toBeGreaterThanOrEqual(3);
    expect(after.paging).toMatchObject({ total_count: 1, start_offset: 1, end_offset: 1 });
    const page2 = (await t.call('GET', `${f.base}/livestreams/${ls.id}?page_no=2&per_page=1`)).body.data;
    expect(page2).toMatchObject({ livestream: { id: ls.id }, session: null, paging: { total_count: 1 } });

    const hooks = await until(() => {
      const mine = receiver.deliveries.filter((d) => d.body.streamId === ls.id);
      return mine.length >= 2 ? mine : undefined;
    }, 10_000, 'webhooks');
    expect(hooks.map((d) => d.body.status)).toEqual(['LIVE', 'IDLE']);
    for (const d of hooks) {
      expect(d.verified).toBe(true);
      expect(d.body.event).toBe('livestreaming.statusUpdate');
      expect(d.body.playbackUrl).toBe(ls.playback_url);
    }

    const overall = await t.call('GET', `${f.base}/analytics/livestreams/overall`);
    expect(overall.body.data.count).toBe(1);
    expect(overall.body.data.total_ingest_seconds).toBeGreaterThanOrEqual(3);
    expect(overall.body.data.total_viewer_seconds).toBeGreaterThan(0);
    const badRange = await t.call('GET', `${f.base}/analytics/livestreams/overall?start_time=200&end_time=100`);
    expect(badRange.status).toBe(400);
    const list = await t.call('GET', `${f.base}/livestreams?exclude_meetings=true`);
    expect(list.body.data.map((l: { id: string }) => l.id)).toEqual([ls.id]);
    expect((await t.call('GET', `${f.base}/livestreams/nope`)).status).toBe(404);
  }, 90_000);

  it('each stretch on air is a session of its own: paged newest first, by id, the active one, per day', async () => {
    const ls = (await t.call('POST', `${f.base}/livestreams`, { name: 'twice' })).body.data;
    const get = async (q = '') => (await t.call('GET', `${f.base}/livestreams/${ls.id}${q}`)).body.data;
    expect((await t.call('GET', `${f.base}/livestreams/${ls.id}/active-livestream-session`)).status).toBe(404);

    const first = publish(`${ls.ingest_server}/${ls.stream_key}`, 3);
    await until(async () => (await get()).livestream.status === 'LIVE', 10_000, 'LIVE');
    const active = await t.call('GET', `${f.base}/livestreams/${ls.id}/active-livestream-session`);
    expect(active.status).toBe(200);
    expect(active.body.data.livestream.id).toBe(ls.id);
    expect(active.body.data.session).toMatchObject({ livestream_id: ls.id, stopped_time: null, started_time: expect.any(String) });
    const firstId = active.body.data.session.id as string;
    expect((await first).code).toBe(0);
    await until(async () => (await get()).livestream.status === 'IDLE', 10_000, 'IDLE');
    expect((await t.call('GET', `${f.base}/livestreams/${ls.id}/active-livestream-session`)).status).toBe(404);

    expect((await publish(`${ls.ingest_server}/${ls.stream_key}`, 3)).code).toBe(0);
    await until(async () => (await get()).paging.total_count === 2 && (await get()).session.stopped_time !== null, 10_000, 'second session stopped');
    const newest = await get();
    expect(newest.session.id).not.toBe(firstId);
    expect(newest.paging).toMatchObject({ total_count: 2, start_offset: 1, end_offset: 1 });
    const older = await get('?page_no=2&per_page=1');
    expect(older.session).toMatchObject({ id: firstId, livestream_id: ls.id, err_message: null, stopped_time: expect.any(String) });
    expect(older.paging).toMatchObject({ total_count: 2, start_offset: 2, end_offset: 2 });
    expect((await get('?page_no=3&per_page=1')).session).toBeNull();

    const byId = await t.call('GET', `${f.base}/livestreams/sessions/${firstId}`);
    expect(byId.status).toBe(200);
    expect(byId.body.data).toMatchObject({ id: firstId, livestream_id: ls.id, stopped_time: older.session.stopped_time });
    expect(byId.body.data.ingest_seconds).toBeGreaterThanOrEqual(1);
    expect((await t.call('GET', `${f.base}/livestreams/sessions/nope`)).status).toBe(404);
    expect((await t.call('GET', `${f.base}/livestreams/nope/active-livestream-session`)).status).toBe(404);

    // The official client's calls for the same routes.
    const cf = sdk(t).realtimeKit.livestreams;
    const ids = { account_id: t.accountId, app_id: f.appId };
    expect((await cf.getLivestreamSessionDetailsForSessionID(firstId, ids)).data).toMatchObject({ id: firstId, livestream_id: ls.id });
    expect((await cf.getLivestreamSessionForLivestreamID(ls.id, { ...ids, page_no: 2, per_page: 1 })).data?.session?.id).toBe(firstId);
    await expect(cf.getActiveLivestreamsForLivestreamID(ls.id, ids)).rejects.toMatchObject({ status: 404 });
    const viaClient = await cf.getLivestreamAnalyticsDaywise(f.appId, { account_id: t.accountId, start_time: Math.floor(Date.now() / 1000) - 86400 });
    expect(viaClient.data?.find((d) => d.date === new Date().toISOString().slice(0, 10))?.count).toBe(3);

    // Daywise: every session of the app (this test's two and the first test's one) on today's row.
    const now = Math.floor(Date.now() / 1000);
    const today = new Date().toISOString().slice(0, 10);
    const days = await t.call('GET', `${f.base}/analytics/livestreams/daywise?start_time=${now - 2 * 86400}&end_time=${now}`);
    expect(days.status).toBe(200);
    expect(days.body.data).toHaveLength(3);
    const row = days.body.data.find((d: { date: string }) => d.date === today);
    expect(row.count).toBe(3);
    expect(row.total_ingest_seconds).toBeGreaterThanOrEqual(5);
    expect(days.body.data.filter((d: { date: string }) => d.date !== today).every((d: { count: number }) => d.count === 0)).toBe(true);
    const byDate = await t.call('GET', `${f.base}/analytics/livestreams/daywise?start_date=${today}&end_date=${today}`);
    expect(byDate.body.data).toEqual([row]);
    expect((await t.call('GET', `${f.base}/analytics/livestreams/daywise`)).body.data).toHaveLength(30);
    for (const bad of ['start_time=200&end_time=100', 'start_date=2026-02-01&end_date=2026-01-01', 'start_date=2026-02-30&end_date=2026-03-01', 'start_time=abc', 'start_date=2020-01-01&end_date=2026-01-01']) {
      const r = await t.call('GET', `${f.base}/analytics/livestreams/daywise?${bad}`);
      expect(r.status, bad).toBe(400);
      expect(r.body.success).toBe(false);
    }
  }, 90_000);
});
