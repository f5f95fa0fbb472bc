/**
 * Independent livestreams with a real RTMP publisher: ffmpeg pushes a test pattern (lavfi testsrc
 * and sine, H.264/AAC) to the livestream's ingest with its stream key; the livestream goes LIVE,
 * ffprobe reads the HLS playback URL Outpost serves, and it returns to IDLE when the publisher
 * stops, each change a signed `livestreaming.statusUpdate` webhook. A wrong stream key is refused
 * (the publisher fails and nothing is written). `GET /livestreams/{id}` answers `{livestream, session}`:
 * no session before the first publisher, then its stretch; each later stretch is a session of its
 * own (paged newest first, `/livestreams/sessions/{id}`, `…/active-livestream-session` while on air,
 * `/analytics/livestreams/daywise`). The list filters by creation time and sorts (over HTTP and
 * the official client). Off air, the HLS output stays playable (a wrong-key publisher leaves it)
 * until the retention has passed, then it is deleted, also at start (restart: SQLite pass).
 * Sessions are stored, so this runs on both backends.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
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
    // Off air, the finished playlist stays playable (for the retention time, an hour by default).
    const replay = await fetch(ls.playback_url);
    expect(replay.status).toBe(200);
    expect(await replay.text()).toContain('#EXT-X-ENDLIST');
    // A publisher with a wrong key does not touch it.
    expect((await publish(`${ls.ingest_server}/not-the-key`, 3)).code).not.toBe(0);
    expect((await fetch(ls.playback_url)).status).toBe(200);
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

  it('the list filters by creation time (inclusive, ISO), sorts ASC or DSC and pages the result; bad values are 400', async () => {
    const g = await createApp(t, 'list');
    const made: { id: string; created_at: string }[] = [];
    for (const name of ['one', 'two', 'three']) made.push((await t.call('POST', `${g.base}/livestreams`, { name })).body.data);
    const byTime = (dir: 1 | -1) => (a: { id: string; created_at: string }, b: { id: string; created_at: string }) => dir * (a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id));
    const ids = (r: { body: { data: { id: string }[] } }) => r.body.data.map((l) => l.id);
    const list = (q: string) => t.call('GET', `${g.base}/livestreams?${q}`);

    expect(ids(await list(''))).toEqual([...made].sort(byTime(-1)).map((l) => l.id));
    expect(ids(await list('sort_order=ASC'))).toEqual([...made].sort(byTime(1)).map((l) => l.id));
    expect(ids(await list('sort_order=DSC'))).toEqual([...made].sort(byTime(-1)).map((l) => l.id));

    // Both ends inclusive: from the second's creation time to the third's.
    const [from, to] = [made[1].created_at, made[2].created_at];
    const inRange = made.filter((l) => l.created_at >= from && l.created_at <= to);
    expect(inRange.length).toBeGreaterThanOrEqual(2);
    const ranged = await list(`start_time=${encodeURIComponent(from)}&end_time=${encodeURIComponent(to)}&sort_order=ASC`);
    expect(ranged.status).toBe(200);
    expect(ids(ranged)).toEqual([...inRange].sort(byTime(1)).map((l) => l.id));
    expect(ranged.body.paging).toMatchObject({ total_count: inRange.length, start_offset: 1, end_offset: inRange.length });
    // Paging applies to the filtered set.
    const second = await list(`start_time=${encodeURIComponent(from)}&sort_order=ASC&per_page=1&page_no=2`);
    expect(ids(second)).toEqual([[...inRange].sort(byTime(1))[1].id]);
    expect(second.body.paging).toMatchObject({ total_count: inRange.length, start_offset: 2, end_offset: 2 });
    const future = await list(`start_time=${encodeURIComponent(new Date(Date.now() + 3_600_000).toISOString())}`);
    expect(future.body.data).toEqual([]);
    expect(future.body.paging.total_count).toBe(0);
    const before = await list(`end_time=${encodeURIComponent(new Date(Date.parse(made[0].created_at) - 1).toISOString())}`);
    expect(before.body.data).toEqual([]);
    // An offset is a time zone, not a shift: the same instant written in +02:00 selects the same.
    const offset = new Date(Date.parse(from) + 2 * 3_600_000).toISOString().replace('Z', '+02:00');
    expect(ids(await list(`start_time=${encodeURIComponent(offset)}&end_time=${encodeURIComponent(to)}&sort_order=ASC`))).toEqual(ids(ranged));

    for (const [q, param] of [
      ['start_time=yesterday', 'start_time'],
      ['end_time=2026-13-01T00:00:00Z', 'end_time'],
      [`start_time=${encodeURIComponent(to)}&end_time=${encodeURIComponent(new Date(Date.parse(to) - 1000).toISOString())}`, 'start_time'],
      ['sort_order=UP', 'sort_order'],
    ]) {
      const r = await list(q);
      expect(r.status, q).toBe(400);
      expect(r.body).toMatchObject({ success: false, error: { code: 400 } });
      expect(r.body.error.message, q).toContain(param);
    }

    // The official client sends the same parameters.
    const cf = sdk(t).realtimeKit.livestreams;
    const viaClient = await cf.getAllLivestreams(g.appId, { account_id: t.accountId, start_time: from, end_time: to, sort_order: 'ASC', per_page: 1, page_no: 1 });
    expect((viaClient.data as unknown as { id: string }[]).map((l) => l.id)).toEqual([[...inRange].sort(byTime(1))[0].id]);
    const newestFirst = await cf.getAllLivestreams(g.appId, { account_id: t.accountId, sort_order: 'DSC', exclude_meetings: true });
    expect((newestFirst.data as unknown as { id: string }[]).map((l) => l.id)).toEqual([...made].sort(byTime(-1)).map((l) => l.id));
    await expect(cf.getAllLivestreams(g.appId, { account_id: t.accountId, start_time: 'not-a-date' })).rejects.toMatchObject({ status: 400 });
  });
});

describe('livestream HLS retention', () => {
  let t: TestServer;
  let f: Fixture;
  const dataDir = mkdtempSync(join(tmpdir(), 'outpost-hls-retention-'));
  const hls = (id: string) => join(dataDir, 'realtime-kit', 'hls', id);

  beforeAll(async () => {
    t = await startTestServer({ meetingsLivestreamRetention: 1 }, { dataDir });
    f = await createApp(t, 'retention');
  });
  afterAll(async () => {
    await t?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('off air, the HLS output is deleted after the retention; folders no livestream owns go too', async () => {
    const ls = (await t.call('POST', `${f.base}/livestreams`, { name: 'short' })).body.data;
    const stray = hls('not-a-livestream');
    mkdirSync(stray, { recursive: true });
    writeFileSync(join(stray, 'index.m3u8'), '#EXTM3U\n');
    expect((await publish(`${ls.ingest_server}/${ls.stream_key}`, 3)).code).toBe(0);
    await until(async () => (await t.call('GET', `${f.base}/livestreams/${ls.id}`)).body.data.livestream.status === 'IDLE', 10_000, 'IDLE');
    await until(() => !existsSync(hls(ls.id)) && !existsSync(stray), 20_000, 'HLS folders removed');
    expect((await fetch(ls.playback_url)).status).toBe(404);
    // The livestream itself stays, and a new stretch on air writes a fresh folder.
    expect((await t.call('GET', `${f.base}/livestreams/${ls.id}`)).body.data.livestream.status).toBe('IDLE');
    const pushing = publish(`${ls.ingest_server}/${ls.stream_key}`, 6);
    await until(async () => (await fetch(ls.playback_url)).status === 200, 15_000, 'playlist of the new stretch');
    expect((await pushing).code).toBe(0);
    await until(async () => (await t.call('GET', `${f.base}/livestreams/${ls.id}`)).body.data.livestream.status === 'IDLE', 10_000, 'IDLE again');
  }, 60_000);

  it.skipIf(sqlitePassOnly('the restart keeps the SQLite file; each PostgreSQL test server has a schema of its own'))('a start removes the output of livestreams off air for longer than the retention and keeps newer ones', async () => {
    const old = (await t.call('POST', `${f.base}/livestreams`, { name: 'old' })).body.data;
    const recent = (await t.call('POST', `${f.base}/livestreams`, { name: 'recent' })).body.data;
    await t.stop();
    for (const id of [old.id, recent.id]) {
      mkdirSync(hls(id), { recursive: true });
      writeFileSync(join(hls(id), 'index.m3u8'), '#EXTM3U\n#EXT-X-ENDLIST\n');
    }
    const twoHoursAgo = new Date(Date.now() - 2 * 3_600_000);
    utimesSync(join(hls(old.id), 'index.m3u8'), twoHoursAgo, twoHoursAgo);
    utimesSync(hls(old.id), twoHoursAgo, twoHoursAgo);
    t = await startTestServer({ meetingsLivestreamRetention: 3600 }, { dataDir });
    expect(existsSync(hls(old.id))).toBe(false);
    expect(existsSync(hls(recent.id))).toBe(true);
    expect((await fetch(`${t.url}/realtime/kit/livestreams/${recent.id}/hls/index.m3u8`)).status).toBe(200);
  }, 30_000);
});
