/**
 * The `analytics_engine` binding from a real script in workerd: uploaded through the API, run by
 * real requests, its points queried back through the SQL endpoint; limits dropped without an
 * exception, sampling that keeps `SUM(_sample_interval)` a correct count, and points acknowledged
 * before a graceful stop found again after a restart.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { uploadScript } from '../workflows/helpers.ts';

const SCRIPT = `
export default {
  async fetch(req, env) {
    const u = new URL(req.url);
    const mode = u.searchParams.get('mode');
    if (mode === 'many') {
      const n = Number(u.searchParams.get('n'));
      for (let i = 0; i < n; i++) env.BULK.writeDataPoint({ blobs: ['bulk'], doubles: [i] });
      return new Response('wrote ' + n);
    }
    if (mode === 'bad') {
      const results = [];
      for (const p of [
        { blobs: Array.from({ length: 21 }, () => 'x') },
        { blobs: ['y'.repeat(16 * 1024 + 1)] },
        { indexes: ['a', 'b'] },
        { doubles: ['not a number'] },
        { indexes: ['i'.repeat(97)] },
        undefined,
        'text',
        { blobs: 'not an array' },
      ]) {
        try { results.push(env.AE.writeDataPoint(p)); } catch (e) { return new Response('threw: ' + e.message, { status: 500 }); }
      }
      env.AE.writeDataPoint({ blobs: ['after-bad', new TextEncoder().encode('bytes').buffer], doubles: [1], indexes: ['ok'] });
      return new Response('returned ' + JSON.stringify(results));
    }
    env.AE.writeDataPoint({
      blobs: [u.searchParams.get('c') ?? 'none', req.method],
      doubles: [Number(u.searchParams.get('v') ?? 1), 2],
      indexes: [u.searchParams.get('i') ?? 'k'],
    });
    return new Response('ok');
  },
};
`;

const BINDINGS = [
  { type: 'analytics_engine', name: 'AE', dataset: 'requests' },
  { type: 'analytics_engine', name: 'BULK' },
];

let t: TestServer;
// One account id across restarts (on PostgreSQL each server gets a fresh schema and seeds anew).
const ACCOUNT = '0123456789abcdef0123456789abcdef';
const dataDir = mkdtempSync(join(tmpdir(), 'outpost-analytics-'));

async function invoke(t: TestServer, path: string, method = 'GET'): Promise<{ status: number; text: string }> {
  const res = await fetch(`${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/writer/invoke${path}`, {
    method,
    headers: { authorization: `Bearer ${t.token}` },
  });
  return { status: res.status, text: await res.text() };
}

async function sql(t: TestServer, query: string): Promise<any> {
  const res = await fetch(`${t.api}/accounts/${t.accountId}/analytics_engine/sql`, {
    method: 'POST',
    headers: { authorization: `Bearer ${t.token}` },
    body: query,
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${res.status} ${text}`);
  return JSON.parse(text);
}

/** Polls a count until it reaches `want` (points reach the store within a flush interval). */
async function waitForCount(t: TestServer, query: string, want: number): Promise<number> {
  let got = -1;
  for (let i = 0; i < 100; i++) {
    const r = await sql(t, query);
    got = Number(Object.values(r.data[0] ?? { n: 0 })[0]);
    if (got >= want) return got;
    await new Promise((r) => setTimeout(r, 100));
  }
  return got;
}

beforeAll(async () => {
  t = await startTestServer({ analyticsFlushMs: 50, analyticsSampleRate: 100, accountId: ACCOUNT }, { dataDir });
  const up = await uploadScript(t, 'writer', SCRIPT, { bindings: BINDINGS });
  expect(up.status, JSON.stringify(up.body)).toBe(200);
}, 120_000);
afterAll(async () => {
  await t?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('writeDataPoint from a script', () => {
  it('stores points written by real requests and answers aggregates over them', async () => {
    const sent: { c: string; v: number; i: string; method: string }[] = [];
    for (let k = 0; k < 24; k++) {
      const p = { c: ['red', 'green', 'blue'][k % 3], v: k + 1, i: `user${k % 6}`, method: k % 4 === 0 ? 'POST' : 'GET' };
      sent.push(p);
      const r = await invoke(t, `/x?c=${p.c}&v=${p.v}&i=${p.i}`, p.method);
      expect(r.text).toBe('ok');
    }
    expect(await waitForCount(t, 'SELECT count() FROM requests', 24)).toBe(24);
    const byColour = await sql(t, 'SELECT blob1 AS colour, count() AS n, sum(double1) AS total FROM requests GROUP BY colour ORDER BY colour');
    const expected = ['blue', 'green', 'red'].map((c) => ({
      colour: c,
      n: String(sent.filter((s) => s.c === c).length),
      total: sent.filter((s) => s.c === c).reduce((a, s) => a + s.v, 0),
    }));
    expect(byColour.data).toEqual(expected);
    const posts = await sql(t, "SELECT count() AS n FROM requests WHERE blob2 = 'POST' AND index1 = 'user0'");
    expect(posts.data).toEqual([{ n: String(sent.filter((s) => s.method === 'POST' && s.i === 'user0').length) }]);
    const ts = await sql(t, 'SELECT min(timestamp) AS first, max(_sample_interval) AS si FROM requests');
    expect(Math.abs(Date.parse(ts.data[0].first.replace(' ', 'T') + 'Z') - Date.now())).toBeLessThan(120_000);
    expect(ts.data[0].si).toBe(1);
  });

  it('drops points over the limits without throwing, and keeps the good ones', async () => {
    const r = await invoke(t, '/?mode=bad');
    expect(r.status).toBe(200);
    expect(r.text).toBe('returned [null,null,null,null,null,null,null,null]');
    expect(await waitForCount(t, "SELECT count() FROM requests WHERE blob1 = 'after-bad'", 1)).toBe(1);
    const row = await sql(t, "SELECT blob2, index1 FROM requests WHERE blob1 = 'after-bad'");
    expect(row.data).toEqual([{ blob2: 'bytes', index1: 'ok' }]);
    // Only the good point of that request arrived (the dataset name defaults to the binding name).
    const all = await sql(t, "SELECT count() AS n FROM requests WHERE blob1 NOT IN ('red', 'green', 'blue')");
    expect(all.data).toEqual([{ n: '1' }]);
  });

  it('samples above the configured rate and SUM(_sample_interval) still counts every write', async () => {
    // 5 requests × 200 writes = 1,000 writes at a rate of 100 per minute.
    for (let k = 0; k < 5; k++) expect((await invoke(t, '/?mode=many&n=200')).text).toBe('wrote 200');
    let r: any;
    for (let i = 0; i < 100; i++) {
      r = await sql(t, 'SELECT count() AS n, SUM(_sample_interval) AS total, max(_sample_interval) AS si FROM BULK');
      if (Math.abs(Number(r.data[0].total) - 1000) <= Number(r.data[0].si)) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    const { n, total, si } = r.data[0];
    expect(Number(n)).toBeLessThan(600);
    expect(si).toBeGreaterThan(1);
    expect(Math.abs(Number(total) - 1000)).toBeLessThanOrEqual(si);
  });

  it('refuses a bad dataset name at upload', async () => {
    const bad = await uploadScript(t, 'bad-ds', 'export default { fetch() { return new Response(""); } }', {
      bindings: [{ type: 'analytics_engine', name: 'AE', dataset: 'has-dash' }],
    });
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.body)).toMatch(/dataset/);
    const reserved = await uploadScript(t, 'bad-ds', 'export default { fetch() { return new Response(""); } }', {
      bindings: [{ type: 'analytics_engine', name: 'AE', dataset: 'outpost_http_requests' }],
    });
    expect(reserved.status).toBe(400);
  });
});

describe('durability', () => {
  it('keeps points acknowledged before a graceful stop', async () => {
    await t.stop();
    // A long flush interval: the points are still buffered when the server stops.
    t = await startTestServer({ analyticsFlushMs: 600_000, accountId: ACCOUNT }, { dataDir });
    const up = await uploadScript(t, 'writer', SCRIPT, { bindings: BINDINGS });
    expect(up.status).toBe(200);
    const before = Number((await sql(t, 'SELECT count() AS n FROM requests')).data[0].n);
    for (let k = 0; k < 10; k++) expect((await invoke(t, `/?c=durable&v=${k}`)).text).toBe('ok');
    // The binding's calls leave the script after its response; give them a moment to arrive.
    await new Promise((r) => setTimeout(r, 500));
    await t.stop();
    t = await startTestServer({ analyticsFlushMs: 50, accountId: ACCOUNT }, { dataDir });
    const after = await sql(t, "SELECT count() AS n, sum(double1) AS s FROM requests WHERE blob1 = 'durable'");
    expect(after.data).toEqual([{ n: '10', s: 45 }]);
    expect(Number((await sql(t, 'SELECT count() AS n FROM requests')).data[0].n)).toBe(before + 10);
  }, 120_000);
});
