/**
 * Independent livestreams with a real RTMP publisher: ffmpeg pushes a test pattern (lavfi testsrc
 * and sine, H.264/AAC) to the livestream's ingest with its stream key; the livestream goes LIVE,
 * ffprobe reads the HLS playback URL Outpost serves, and it returns to IDLE when the publisher
 * stops, each change a signed `livestreaming.statusUpdate` webhook. A wrong stream key is refused
 * (the publisher fails and nothing is written). `GET /livestreams/{id}` answers `{livestream, session}`:
 * no session before the first publisher, then its stretch. Media, not storage: SQLite pass only.
 */
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
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

describe.skipIf(sqlitePassOnly('livestreams drive ffmpeg and RTMP, not storage'))('livestreams', () => {
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
});
