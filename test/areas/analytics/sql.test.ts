/**
 * The SQL endpoint over a dataset with known contents (written through the engine the binding
 * uses, on a hand-moved clock): every function of the dialect against an answer worked out here,
 * the output formats, and the refusals (DDL, table functions, other accounts, long queries).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lastServer } from '../rulesets/probe.ts';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';
import { manualClock } from '../../../src/core/clock.ts';
import type { AnalyticsEngine } from '../../../src/areas/analytics/index.ts';

const BASE = new Date('2026-01-15T12:00:00.000Z');
const clock = manualClock(BASE);
let t: TestServer;
let engine: AnalyticsEngine;
const OTHER_ACCOUNT = 'f'.repeat(32);

interface Point {
  i: number;
  blob1: string;
  blob2: string;
  blob3: string;
  double1: number;
  double2: number;
  index1: string;
}
const points: Point[] = Array.from({ length: 100 }, (_, i) => ({
  i,
  blob1: `b${i % 4}`,
  blob2: i < 50 ? 'lo' : 'hi',
  blob3: i < 70 ? 'a' : 'b',
  double1: i + 1,
  double2: (i % 3) + 1,
  index1: `idx${i % 10}`,
}));

/** ClickHouse's quantileExactWeighted: the first value, in order, whose running weight reaches ⌈q·Σw⌉. */
function weightedQuantile(values: [number, number][], q: number): number {
  const sorted = [...values].sort((a, b) => a[0] - b[0]);
  const threshold = Math.ceil(sorted.reduce((s, [, w]) => s + w, 0) * q);
  let acc = 0;
  for (const [v, w] of sorted) {
    acc += w;
    if (acc >= threshold) return v;
  }
  return sorted[sorted.length - 1][0];
}

async function sql(query: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${t.api}/accounts/${t.accountId}/analytics_engine/sql`, {
    method: 'POST',
    headers: { authorization: `Bearer ${t.token}`, 'content-type': 'text/plain', ...headers },
    body: query,
  });
  const text = await res.text();
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: res.status, type: res.headers.get('content-type') ?? '', text, body };
}

async function one(query: string): Promise<unknown> {
  const r = await sql(query);
  expect(r.status, r.text).toBe(200);
  return Object.values(r.body.data[0])[0];
}

beforeAll(async () => {
  t = await startTestServer({ analyticsFlushMs: 50 }, { clock });
  engine = (lastServer().services.require<{ engine(): AnalyticsEngine | undefined }>('analytics').engine())!;
  for (const p of points) {
    clock.set(new Date(BASE.getTime() + p.i * 60_000));
    engine.write(t.accountId, 'ds', [
      { blobs: [p.blob1, p.blob2, p.blob3], doubles: [p.double1, p.double2], indexes: [p.index1] },
    ]);
  }
  engine.write(OTHER_ACCOUNT, 'secret_ds', [{ blobs: ['theirs'] }]);
  await engine.store.flush();
}, 60_000);
afterAll(() => t.stop());

describe('answers with known values', () => {
  it('counts, sums and sampling column', async () => {
    const r = await sql('SELECT count() AS n, SUM(_sample_interval) AS s, sum(double1), avg(double1), min(double1), max(double1) FROM ds');
    expect(r.status).toBe(200);
    expect(r.type).toContain('application/json');
    expect(r.body.data).toEqual([{ n: '100', s: '100', 'sum(double1)': 5050, 'avg(double1)': 50.5, 'min(double1)': 1, 'max(double1)': 100 }]);
    expect(r.body.meta).toEqual([
      { name: 'n', type: 'UInt64' },
      { name: 's', type: 'Int128' },
      { name: 'sum(double1)', type: 'Float64' },
      { name: 'avg(double1)', type: 'Float64' },
      { name: 'min(double1)', type: 'Float64' },
      { name: 'max(double1)', type: 'Float64' },
    ]);
    expect(r.body.rows).toBe(1);
    expect(r.body.rows_before_limit_at_least).toBe(1);
  });

  it('GROUP BY a blob, ORDER BY, HAVING, LIMIT and OFFSET with rows_before_limit_at_least', async () => {
    const r = await sql('SELECT blob1, count() AS c, sum(double1) AS total FROM ds GROUP BY blob1 HAVING c > 0 ORDER BY total DESC LIMIT 2 OFFSET 1');
    const sums = [0, 1, 2, 3].map((k) => points.filter((p) => p.i % 4 === k).reduce((s, p) => s + p.double1, 0));
    const order = [0, 1, 2, 3].sort((a, b) => sums[b] - sums[a]);
    expect(r.body.data).toEqual(order.slice(1, 3).map((k) => ({ blob1: `b${k}`, c: '25', total: sums[k] })));
    expect(r.body.rows).toBe(2);
    expect(r.body.rows_before_limit_at_least).toBe(4);
    const all = await sql('SELECT blob1 FROM ds GROUP BY blob1 ORDER BY blob1 LIMIT ALL');
    expect(all.body.data.map((d: any) => d.blob1)).toEqual(['b0', 'b1', 'b2', 'b3']);
    const comma = await sql('SELECT blob1 FROM ds GROUP BY blob1 ORDER BY blob1 ASC LIMIT 1, 2');
    expect(comma.body.data.map((d: any) => d.blob1)).toEqual(['b1', 'b2']);
  });

  it('quantiles: quantile, quantileExact, quantileExactWeighted and quantileWeighted', async () => {
    expect(await one('SELECT quantile(0.5)(double1) FROM ds')).toBe(50.5);
    expect(await one('SELECT quantile(0.9)(double1) FROM ds')).toBeCloseTo(90.1, 6);
    expect(await one('SELECT quantileExact(0.5)(double1) FROM ds')).toBe(50);
    const vw = points.map((p) => [p.double1, p.double2] as [number, number]);
    for (const q of [0, 0.25, 0.5, 0.99, 1]) {
      expect(await one(`SELECT quantileExactWeighted(${q})(double1, double2) FROM ds`)).toBe(weightedQuantile(vw, q));
      expect(await one(`SELECT quantileWeighted(${q}, double1, double2) FROM ds`)).toBe(weightedQuantile(vw, q));
    }
    const r = await sql('SELECT blob2, quantileExactWeighted(0.5)(double1, _sample_interval) AS p50 FROM ds GROUP BY blob2 ORDER BY blob2');
    expect(r.body.data).toEqual([
      { blob2: 'hi', p50: weightedQuantile(points.filter((p) => p.i >= 50).map((p) => [p.double1, 1]), 0.5) },
      { blob2: 'lo', p50: weightedQuantile(points.filter((p) => p.i < 50).map((p) => [p.double1, 1]), 0.5) },
    ]);
  });

  it('time buckets with toStartOfInterval and INTERVAL', async () => {
    const r = await sql("SELECT toStartOfInterval(timestamp, INTERVAL '30' MINUTE) AS t, count() AS c FROM ds GROUP BY t ORDER BY t");
    expect(r.body.data).toEqual([
      { t: '2026-01-15 12:00:00', c: '30' },
      { t: '2026-01-15 12:30:00', c: '30' },
      { t: '2026-01-15 13:00:00', c: '30' },
      { t: '2026-01-15 13:30:00', c: '10' },
    ]);
    expect(r.body.meta[0]).toEqual({ name: 't', type: 'DateTime' });
    const hourly = await sql('SELECT toStartOfHour(timestamp) AS h, count() AS c FROM ds GROUP BY h ORDER BY h');
    expect(hourly.body.data).toEqual([
      { h: '2026-01-15 12:00:00', c: '60' },
      { h: '2026-01-15 13:00:00', c: '40' },
    ]);
  });

  it('NOW() - INTERVAL and BETWEEN dates filter on the timestamp', async () => {
    // The clock stands at the last point (12:00 + 99 min = 13:39): after 12:39 come points 40..99.
    expect(await one("SELECT count() FROM ds WHERE timestamp > NOW() - INTERVAL '1' HOUR")).toBe('60');
    expect(await one("SELECT count() FROM ds WHERE timestamp >= NOW() - INTERVAL '1' HOUR")).toBe('61');
    expect(await one("SELECT count() FROM ds WHERE timestamp BETWEEN '2026-01-15 12:00:00' AND '2026-01-15 12:09:00'")).toBe('10');
    expect(await one("SELECT count() FROM ds WHERE timestamp > NOW() - INTERVAL '1' DAY")).toBe('100');
  });

  it('filters on the index, LIKE, IN, CASE and subqueries in FROM', async () => {
    expect(await one("SELECT count() FROM ds WHERE index1 = 'idx3'")).toBe('10');
    expect(await one("SELECT sum(double1) FROM ds WHERE index1 IN ('idx0', 'idx1')")).toBe(
      points.filter((p) => p.i % 10 < 2).reduce((s, p) => s + p.double1, 0),
    );
    expect(await one("SELECT count() FROM ds WHERE blob1 LIKE 'b%' AND blob2 NOT LIKE 'l%'")).toBe('50');
    const r = await sql("SELECT CASE WHEN double1 > 90 THEN 'top' WHEN double1 > 50 THEN 'mid' ELSE 'low' END AS band, count() AS c FROM ds GROUP BY band ORDER BY band");
    expect(r.body.data).toEqual([
      { band: 'low', c: '50' },
      { band: 'mid', c: '40' },
      { band: 'top', c: '10' },
    ]);
    const sub = await sql('SELECT max(c) AS m FROM (SELECT blob3, count() AS c FROM ds GROUP BY blob3)');
    expect(sub.body.data).toEqual([{ m: '70' }]);
  });

  it('the other aggregates', async () => {
    expect(await one('SELECT count(DISTINCT blob1) FROM ds')).toBe('4');
    expect(await one('SELECT sum(DISTINCT double2) FROM ds')).toBe(6);
    expect(await one('SELECT avg(DISTINCT double2) FROM ds')).toBe(2);
    expect(await one('SELECT argMax(blob1, double1) FROM ds')).toBe('b3');
    expect(await one('SELECT argMin(index1, double1) FROM ds')).toBe('idx0');
    expect(await one('SELECT topK(1)(blob3) FROM ds')).toEqual(['a']);
    expect(await one('SELECT topK(blob3) FROM ds')).toEqual(['a', 'b']);
    expect(await one('SELECT countIf(double1 > 50) FROM ds')).toBe('50');
    expect(await one("SELECT sumIf(double1, blob2 = 'lo') FROM ds")).toBe(1275);
    expect(await one("SELECT avgIf(double1, blob2 = 'hi') FROM ds")).toBe(75.5);
    expect(await one('SELECT first_value(blob1) FROM (SELECT blob1 FROM ds ORDER BY double1 LIMIT 3)')).toBe('b0');
    expect(await one('SELECT last_value(blob1) FROM (SELECT blob1 FROM ds ORDER BY double1 LIMIT 3)')).toBe('b2');
    expect(await one('SELECT uniq(index1) FROM ds')).toBe('10');
  });

  it('scalar functions: conditional, date-time, string, encoding, math, rounding, bits and conversions', async () => {
    const cases: [string, unknown][] = [
      ["if(1 > 2, 'y', 'n')", 'n'],
      ["multiIf(1 > 2, 'a', 2 > 1, 'b', 'c')", 'b'],
      ["toUnixTimestamp(toDateTime('2026-01-15 12:00:00'))", Date.UTC(2026, 0, 15, 12) / 1000],
      ['toDateTime(0)', '1970-01-01 00:00:00'],
      ["formatDateTime(toDateTime('2026-01-15 12:34:56'), '%Y/%m/%d %H')", '2026/01/15 12'],
      ["toYear(toDateTime('2026-01-15 12:34:56'))", 2026],
      ["toHour(toDateTime('2026-01-15 12:34:56'))", 12],
      ["toStartOfDay(toDateTime('2026-01-15 12:34:56'))", '2026-01-15 00:00:00'],
      ['now()', '2026-01-15 13:39:00'],
      ["lower('AbC')", 'abc'],
      ["upper('AbC')", 'ABC'],
      ["length('héllo')", '6'], // UInt64: quoted, as ClickHouse prints 64-bit integers
      ["concat('a', 'b', 'c')", 'abc'],
      ["substring('abcdef', 2, 3)", 'bcd'],
      ["position('abcdef', 'cd')", '3'],
      ["startsWith('abcdef', 'ab')", true],
      ["replaceAll('a-b-c', '-', '+')", 'a+b+c'],
      ["hex('AB')", '4142'],
      ["base64Encode('hello')", 'aGVsbG8='],
      ["base64Decode('aGVsbG8=')", 'hello'],
      ['abs(-3.5)', 3.5],
      ['round(2.567, 2)', 2.57],
      ['floor(2.7)', 2],
      ['floor(2.567, 2)', 2.56],
      ["substring('abcdef' FROM 3)", 'cdef'],
      ['ceil(2.1)', 3],
      ['intDiv(7, 2)', 3],
      ['sqrt(16)', 4],
      ['pow(2, 10)', 1024],
      ['bitAnd(12, 10)', 8],
      ['bitOr(12, 10)', 14],
      ['bitXor(12, 10)', 6],
      ['bitShiftLeft(1, 4)', 16],
      ['toString(42)', '42'],
      ["toFloat64('2.5')", 2.5],
      ["toUInt32('7')", 7],
      ["toInt64('7')", '7'],
      ['CAST(3 AS String)', '3'],
      ['1 + 2 * 3', 7],
    ];
    for (const [expr, want] of cases) {
      const r = await sql(`SELECT ${expr} AS v`);
      expect(r.status, `${expr}: ${r.text}`).toBe(200);
      expect(r.body.data[0].v, expr).toEqual(want);
    }
  });

  it('names unaliased columns as ClickHouse does', async () => {
    const r = await sql('SELECT count(), sum(double1), double1 + 1 FROM ds GROUP BY double1 ORDER BY double1 LIMIT 1');
    expect(r.body.meta.map((m: any) => m.name)).toEqual(['count()', 'sum(double1)', 'plus(double1, 1)']);
  });
});

describe('statements and formats', () => {
  it('SHOW TABLES lists the account\'s datasets and the platform datasets only', async () => {
    const r = await sql('SHOW TABLES');
    expect(r.status).toBe(200);
    const names = r.body.data.map((d: any) => d.dataset);
    expect(names).toContain('ds');
    expect(names).toContain('outpost_http_requests');
    expect(names).toContain('outpost_spectrum_events');
    expect(names).not.toContain('secret_ds');
  });

  it('SHOW TIMEZONE and SHOW TIMEZONES', async () => {
    expect((await sql('SHOW TIMEZONE')).body.data).toEqual([{ timezone: 'Etc/UTC' }]);
    const zones = (await sql('SHOW TIMEZONES')).body.data.map((d: any) => d.name);
    expect(zones).toContain('Europe/London');
  });

  it('FORMAT JSONEachRow and TabSeparated', async () => {
    const nd = await sql('SELECT blob1, count() AS c FROM ds GROUP BY blob1 ORDER BY blob1 LIMIT 2 FORMAT JSONEachRow');
    expect(nd.type).toContain('application/x-ndjson');
    expect(nd.text).toBe('{"blob1":"b0","c":"25"}\n{"blob1":"b1","c":"25"}\n');
    const tsv = await sql('SELECT blob1, count() AS c FROM ds GROUP BY blob1 ORDER BY blob1 LIMIT 2 FORMAT TabSeparated');
    expect(tsv.text).toBe('b0\t25\nb1\t25\n');
  });

  it('GET with ?query=, a JSON-encoded string body, and any content type', async () => {
    const q = encodeURIComponent('SELECT count() AS c FROM ds');
    const get = await fetch(`${t.api}/accounts/${t.accountId}/analytics_engine/sql?query=${q}`, { headers: { authorization: `Bearer ${t.token}` } });
    expect(((await get.json()) as any).data).toEqual([{ c: '100' }]);
    const json = await sql(JSON.stringify('SELECT count() AS c FROM ds'), { 'content-type': 'application/json' });
    expect(json.body.data).toEqual([{ c: '100' }]);
    const form = await sql('SELECT count() AS c FROM ds', { 'content-type': 'application/x-www-form-urlencoded' });
    expect(form.body.data).toEqual([{ c: '100' }]);
  });
});

describe('refusals', () => {
  it('DDL and DML statements answer 400 and change nothing', async () => {
    for (const q of ['CREATE TABLE x (a Int32)', 'DROP TABLE ds', "INSERT INTO ds (blob1) VALUES ('x')", "DELETE FROM ds WHERE blob1 = 'b0'", 'ATTACH TABLE t', "COPY ds TO '/tmp/x.csv'"]) {
      const r = await sql(q);
      expect(r.status, q).toBe(400);
      expect(r.type).toContain('text/plain');
    }
    expect(await one('SELECT count() FROM ds')).toBe('100');
  });

  it('table functions and file readers answer 400', async () => {
    for (const q of ["SELECT * FROM read_csv('/etc/passwd')", "SELECT read_csv('/etc/passwd')", "SELECT * FROM read_text('/etc/hostname')", "SELECT * FROM 'file.parquet'", 'SELECT * FROM main.ae_x', "SELECT getenv('HOME')"]) {
      const r = await sql(q);
      expect(r.status, `${q}: ${r.text}`).toBe(400);
    }
  });

  it("another account's dataset and internal tables are unknown here", async () => {
    for (const q of ['SELECT * FROM secret_ds', `SELECT * FROM ae_${OTHER_ACCOUNT}`, 'SELECT * FROM platform_http_requests']) {
      const r = await sql(q);
      expect(r.status, q).toBe(400);
      expect(r.text).toMatch(/Unknown dataset/);
    }
  });

  it('JOIN, UNION, WITH and window functions answer 400', async () => {
    for (const q of ['SELECT * FROM ds JOIN ds AS b ON 1 = 1', 'SELECT 1 UNION ALL SELECT 2', 'WITH a AS (SELECT 1) SELECT * FROM a', 'SELECT count() OVER () FROM ds', 'SELECT 1; SELECT 2']) {
      const r = await sql(q);
      expect(r.status, q).toBe(400);
    }
  });

  it('a syntax error answers 400 with the parser message and position', async () => {
    const r = await sql('SELECT blob1 FRM ds');
    expect(r.status).toBe(400);
    expect(r.text).toMatch(/line 1, column \d+/);
    expect(r.text).toMatch(/Expected/);
  });

  it('an over-long or empty query answers 400', async () => {
    const long = `SELECT count() FROM ds WHERE blob1 IN (${Array.from({ length: 20_000 }, (_, i) => `'v${i}'`).join(',')})`;
    const r = await sql(long);
    expect(r.status).toBe(400);
    expect(r.text).toMatch(/too long/);
    expect((await sql('   ')).status).toBe(400);
  });

  it('an unknown column answers 422 with the reason', async () => {
    const r = await sql('SELECT nope FROM ds');
    expect(r.status).toBe(422);
    expect(r.text).toMatch(/nope/);
  });

  it('needs a token with Account Analytics Read', async () => {
    const anon = await sql('SELECT 1', { authorization: '' });
    expect(anon.status).toBe(401);
    const dnsOnly = await createToken(t, ['DNS Read'], { [`com.cloudflare.api.account.${t.accountId}`]: '*' });
    const denied = await sql('SELECT 1', { authorization: `Bearer ${dnsOnly}` });
    expect(denied.status).toBe(403);
    const reader = await createToken(t, ['Account Analytics Read'], { [`com.cloudflare.api.account.${t.accountId}`]: '*' });
    const ok = await sql('SELECT count() AS c FROM ds', { authorization: `Bearer ${reader}` });
    expect(ok.status).toBe(200);
    expect(ok.body.data).toEqual([{ c: '100' }]);
  });
});

describe('query time limit', () => {
  let slow: TestServer;
  beforeAll(async () => {
    // 1 ms: a quiet machine finishes even this query in under 20 ms, so the limit must be below any real run.
    slow = await startTestServer({ analyticsQueryTimeoutMs: 1 });
    const e = lastServer().services.require<{ engine(): AnalyticsEngine | undefined }>('analytics').engine()!;
    e.write(slow.accountId, 'big', [{ blobs: ['seed'] }]);
    await e.store.flush();
    // Half a million rows straight into the account's table: far more work than 1 ms allows.
    await e.store.run(
      `INSERT INTO "ae_${slow.accountId}" (dataset, "timestamp", _sample_interval, blob1, double1) SELECT 'big', TIMESTAMP '2026-01-01', 1, 'b' || (i % 1000), i FROM range(500000) r(i)`,
    );
  }, 60_000);
  afterAll(() => slow?.stop());

  it('answers 504 with the reason once the limit is over', async () => {
    const res = await fetch(`${slow.api}/accounts/${slow.accountId}/analytics_engine/sql`, {
      method: 'POST',
      headers: { authorization: `Bearer ${slow.token}` },
      body: 'SELECT count(DISTINCT concat(blob1, toString(double1))) AS n, quantileExactWeighted(0.5)(double1, _sample_interval) AS q FROM big',
    });
    expect(res.status).toBe(504);
    expect(res.headers.get('content-type')).toContain('text/plain');
    expect(await res.text()).toMatch(/time limit of 0.001 s/);
  });
});
