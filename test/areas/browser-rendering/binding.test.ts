/**
 * A hosted script with a `browser` binding runs `@cloudflare/puppeteer` unchanged (bundled the
 * way a script build would): launch with keep_alive, pages (goto, title, evaluate, content,
 * screenshot, pdf, type, click), sessions/limits/history, reconnecting to the kept-alive session
 * from a later request, and Browser.close ending it.
 */
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { oneBackendOnly, requireChromium, startOrigin, type Origin } from './fixture.ts';

describe.skipIf(oneBackendOnly())('browser binding for scripts', () => {
  let t: TestServer;
  let origin: Origin;

  beforeAll(async () => {
    requireChromium();
    origin = await startOrigin();
    t = await startTestServer({ browserAllow: ['127.0.0.0/8'], browserSessions: 2 });
    const bundle = await build({
      entryPoints: [fileURLToPath(new URL('./worker-src.js', import.meta.url))],
      bundle: true,
      format: 'esm',
      platform: 'browser',
      conditions: ['workerd', 'worker', 'browser'],
      external: ['node:*'],
      write: false,
      logLevel: 'silent',
    });
    const form = new FormData();
    const metadata = { main_module: 'index.js', bindings: [{ type: 'browser', name: 'MYBROWSER' }], compatibility_date: '2025-09-01', compatibility_flags: ['nodejs_compat'] };
    form.append('metadata', new Blob([JSON.stringify(metadata)], { type: 'application/json' }));
    form.append('index.js', new Blob([bundle.outputFiles[0].text], { type: 'application/javascript+module' }), 'index.js');
    const up = await fetch(`${t.api}/accounts/${t.accountId}/workers/scripts/pptr`, { method: 'PUT', headers: { authorization: `Bearer ${t.token}` }, body: form });
    if (up.status !== 200) throw new Error(`upload failed: ${await up.text()}`);
  }, 120_000);

  afterAll(async () => {
    await t?.stop();
    await origin?.close();
  });

  const invoke = async (path: string) => {
    const res = await fetch(`${t.url}/client/v4/_outpost/accounts/${t.accountId}/workers/scripts/pptr/invoke/${path}`, { headers: { authorization: `Bearer ${t.token}` } });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${text}`);
    return JSON.parse(text);
  };

  let first: { sessionId: string; shot: string };

  it('launch, drive a page, keep the session and list it', async () => {
    first = await invoke(`launch?url=${encodeURIComponent(origin.url + '/')}`);
    expect(first).toMatchObject({ title: 'Fixture page', text: 'rendered by script 42', hasScript: true, pdf: '%PDF-' });
    expect(Buffer.from(first.shot, 'base64').subarray(1, 4).toString()).toBe('PNG');
    expect(origin.seen.some((s) => s.userAgent === 'ScriptAgent/2.0')).toBe(true);

    const info = await invoke('info');
    expect(info.sessions.map((s: { sessionId: string }) => s.sessionId)).toContain(first.sessionId);
    expect(info.limits).toMatchObject({ maxConcurrentSessions: 2, concurrent: info.sessions.length, total: 86_400_000 });
    expect(info.limits.remaining).toBeLessThan(info.limits.total);
    expect(info.history[0].sessionId).toBe(first.sessionId);
  }, 120_000);

  it('reconnects to the kept session from a later request, and Browser.close ends it', async () => {
    const second = await invoke(`reconnect?session=${first.sessionId}&url=${encodeURIComponent(origin.url + '/form')}`);
    expect(second.greeting).toBe('Hello, Ada');

    // Browser.close is answered first and the session ends just after it: wait for that.
    const open = (x: { sessions: { sessionId: string }[] }) => x.sessions.some((s) => s.sessionId === first.sessionId);
    let after = await invoke('info');
    for (let i = 0; i < 50 && open(after); i++) {
      await new Promise((r) => setTimeout(r, 100));
      after = await invoke('info');
    }
    expect(open(after)).toBe(false);
    expect(after.history[0]).toMatchObject({ sessionId: first.sessionId, closeReasonText: 'closed by Browser.close' });
  }, 120_000);

  it('keep_alive: more than 600000 ms is refused; a session idle past its keep_alive is closed', async () => {
    const tooLong = await invoke('acquire?keep_alive=600001');
    expect(tooLong.error).toMatch(/keep_alive must be an integer from 0 to 600000/);
    const short = await invoke('acquire?keep_alive=1500');
    expect(short.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    const open = (x: { sessions: { sessionId: string }[] }) => x.sessions.some((s) => s.sessionId === short.sessionId);
    let info = await invoke('info');
    for (let i = 0; i < 40 && open(info); i++) {
      await new Promise((r) => setTimeout(r, 250));
      info = await invoke('info');
    }
    expect(open(info)).toBe(false);
    const closed = info.history.find((h: { sessionId: string }) => h.sessionId === short.sessionId);
    expect(closed?.closeReasonText).toMatch(/idle for more than keep_alive \(1500 ms\)/);
  }, 60_000);
});
