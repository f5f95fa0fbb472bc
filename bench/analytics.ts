/**
 * Analytics: (1) `writeDataPoint` points/s from a hosted script in workerd under concurrent
 * requests, counted back through SQL; (2) the five query shapes of the platform's docs (count by
 * blob, quantile, time buckets, top-K, filter by index) over a generated dataset (10 million points
 * by default) through Outpost's SQL endpoint (HTTP, parse, translate, DuckDB, ClickHouse JSON)
 * beside the same translated SQL on raw DuckDB (`@duckdb/node-api`, same database, no HTTP), run
 * alternately in one process. See bench/README.md ("analytics").
 *
 *   npm run bench -- analytics [--points 10000000] [--runs 7] [--seconds 3] [--concurrency 16]
 */
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../src/core/config.ts';
import { createLogger } from '../src/core/log.ts';
import { defineArea } from '../src/core/area.ts';
import type { Services } from '../src/core/services.ts';
import { AREAS } from '../src/areas.ts';
import { startServer } from '../src/server.ts';
import type { AnalyticsEngine } from '../src/areas/analytics/index.ts';
import { intOption, UsageError } from './lib/args.ts';
import { int, ms, ratio, table } from './lib/format.ts';
import { tempDir } from './lib/procs.ts';

export const description =
  'writeDataPoint points/s from a script; five docs queries over 10M points, SQL endpoint vs raw DuckDB (p50/p99)';

const USAGE = `usage: npm run bench -- analytics [options]

  --points N        points generated for the query phase (default 10000000)
  --runs N          runs of each query on each side, alternating (default 7)
  --seconds N       length of the writeDataPoint phase (default 3)
  --concurrency N   requests in flight in the writeDataPoint phase (default 16)
`;

const TOKEN = 'outpost-bench-token-analytics-0123456789';
const ACCOUNT = 'abcdefabcdefabcdefabcdefabcdef01';
const PER_REQUEST = 200;

const QUERIES: [string, string][] = [
  ['count by blob', 'SELECT blob1 AS city, SUM(_sample_interval) AS n FROM bench GROUP BY city ORDER BY n DESC'],
  ['quantile', 'SELECT blob1 AS city, quantileExactWeighted(0.5)(double1, _sample_interval) AS p50 FROM bench GROUP BY city ORDER BY city'],
  ['time buckets', "SELECT toStartOfInterval(timestamp, INTERVAL '1' HOUR) AS t, SUM(_sample_interval) AS n, avg(double1) AS mean FROM bench WHERE timestamp > NOW() - INTERVAL '7' DAY GROUP BY t ORDER BY t"],
  ['top-K', 'SELECT blob2 AS path, SUM(_sample_interval) AS n FROM bench GROUP BY path ORDER BY n DESC LIMIT 10'],
  ['filter by index', "SELECT count() AS n, sum(double1) AS total FROM bench WHERE index1 = 'user4242'"],
];

const SCRIPT = `export default {
  async fetch(req, env) {
    if (new URL(req.url).search === '?none') return new Response('ok');
    for (let i = 0; i < ${PER_REQUEST}; i++) env.AE.writeDataPoint({ blobs: ['bench', 'w' + (i % 5)], doubles: [i], indexes: ['k' + i] });
    return new Response('ok');
  },
};`;

function parse(args: string[]) {
  const o = { points: 10_000_000, runs: 7, seconds: 3, concurrency: 16 };
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const v = args[++i];
    if (a === '--points') o.points = intOption(a, v, 1000, 100_000_000);
    else if (a === '--runs') o.runs = intOption(a, v, 1, 1000);
    else if (a === '--seconds') o.seconds = intOption(a, v, 1, 600);
    else if (a === '--concurrency') o.concurrency = intOption(a, v, 1, 1024);
    else throw new UsageError(`unknown option ${a}`);
  }
  return o;
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
}

export async function main(args: string[]): Promise<number> {
  let o: ReturnType<typeof parse>;
  try {
    o = parse(args);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\n\n${USAGE}`);
      return 2;
    }
    throw err;
  }
  let services: Services | undefined;
  AREAS.push(defineArea({ name: 'bench-probe', mount: (ctx) => void (services = ctx.services) }));
  const dir = tempDir('outpost-bench-analytics-');
  const config = loadConfig({}, {}, {
    apiPort: 0,
    edgePort: 0,
    dnsPort: 0,
    turnPort: 0,
    dataDir: dir.path,
    apiToken: TOKEN,
    accountId: ACCOUNT,
    logLevel: 'silent',
    analyticsFlushMs: 200,
    // Heavy queries over millions of points on a loaded machine may outlast the default 30 s.
    analyticsQueryTimeoutMs: 600_000,
  });
  const server = await startServer(config, { logger: createLogger('silent') });
  const api = `${server.apiUrl}/client/v4`;
  const auth = { authorization: `Bearer ${TOKEN}` };
  const engine = services!.require<{ engine(): AnalyticsEngine | undefined }>('analytics').engine()!;
  const sql = async (q: string): Promise<any> => {
    const res = await fetch(`${api}/accounts/${ACCOUNT}/analytics_engine/sql`, { method: 'POST', headers: auth, body: q });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`${res.status} ${text}`);
    return JSON.parse(text);
  };
  try {
    // ---- (1) writeDataPoint from a script
    const form = new FormData();
    form.append('metadata', new Blob([JSON.stringify({ main_module: 'index.js', compatibility_date: '2025-01-01', bindings: [{ type: 'analytics_engine', name: 'AE', dataset: 'writes' }] })], { type: 'application/json' }));
    form.append('index.js', new Blob([SCRIPT], { type: 'application/javascript+module' }), 'index.js');
    const up = await fetch(`${api}/accounts/${ACCOUNT}/workers/scripts/writer`, { method: 'PUT', headers: auth, body: form });
    if (up.status !== 200) throw new Error(`script upload failed: ${await up.text()}`);
    const invoke = `${api}/_outpost/accounts/${ACCOUNT}/workers/scripts/writer/invoke/`;
    await (await fetch(invoke, { headers: auth })).text();
    // The same script and path without writes is the baseline: what the runtime path costs alone.
    const drive = async (url: string): Promise<{ perSecond: number; requests: number }> => {
      let requests = 0;
      const started = performance.now();
      const end = started + o.seconds * 1000;
      await Promise.all(
        Array.from({ length: o.concurrency }, async () => {
          while (performance.now() < end) {
            const r = await fetch(url, { headers: auth });
            await r.text();
            if (r.status === 200) requests++;
          }
        }),
      );
      return { perSecond: requests / ((performance.now() - started) / 1000), requests };
    };
    const base = await drive(`${invoke}?none`);
    const writes = await drive(invoke);
    await new Promise((r) => setTimeout(r, 500));
    const stored = Number((await sql('SELECT SUM(_sample_interval) AS n FROM writes')).data[0].n);
    const written = (writes.requests + 1) * PER_REQUEST;
    process.stdout.write(`\nwriteDataPoint from a script (${o.concurrency} requests in flight, ${PER_REQUEST} points each, ${o.seconds} s per side)\n`);
    process.stdout.write(
      table(
        ['measure', 'writing', 'same script, no writes', 'ratio'],
        [
          ['requests/s', int(writes.perSecond), int(base.perSecond), ratio(writes.perSecond, base.perSecond)],
          ['points/s written', int(writes.perSecond * PER_REQUEST), '', ''],
          ['points written', int(written), '', ''],
          ['points counted by SQL', int(stored), '', ''],
        ],
      ) + '\n',
    );

    // ---- (2) the five queries over a generated dataset
    engine.write(ACCOUNT, 'bench', [{ blobs: ['seed'] }]);
    await engine.store.flush();
    const gen = performance.now();
    await engine.store.run(
      `INSERT INTO "ae_${ACCOUNT}" (dataset, "timestamp", _sample_interval, index1, blob1, blob2, double1)
       SELECT 'bench', now()::TIMESTAMP - to_seconds((i * 60480 // ${o.points})::BIGINT * 10), 1, 'user' || (i % 100000),
              'city' || (i % 100), '/path/' || ((i * 7919) % 1000), ((i * 104729) % 1000)::DOUBLE
       FROM range(${o.points}) r(i)`,
    );
    await engine.store.run('CHECKPOINT');
    const genS = (performance.now() - gen) / 1000;
    process.stdout.write(`\n${int(o.points)} points generated in ${genS.toFixed(1)} s; ${o.runs} runs per query and side, alternating\n`);
    const rows: string[][] = [];
    for (const [name, q] of QUERIES) {
      const raw = await engine.translateFor(ACCOUNT, q);
      const ours: number[] = [];
      const peer: number[] = [];
      // one warm-up each
      await sql(q);
      await engine.store.query(raw, 600_000);
      let resultRows = 0;
      for (let i = 0; i < o.runs; i++) {
        let t0 = performance.now();
        const r = await sql(q);
        ours.push(performance.now() - t0);
        resultRows = r.rows;
        t0 = performance.now();
        await engine.store.query(raw, 600_000);
        peer.push(performance.now() - t0);
      }
      const [o50, o99, p50, p99] = [pct(ours, 50), pct(ours, 99), pct(peer, 50), pct(peer, 99)];
      rows.push([name, String(resultRows), ms(o50), ms(p50), ratio(p50, o50), ms(o99), ms(p99), ratio(p99, o99)]);
    }
    process.stdout.write(
      table(
        ['query', 'rows', 'outpost p50 ms', 'duckdb p50 ms', 'speed vs raw', 'outpost p99 ms', 'duckdb p99 ms', 'speed vs raw'],
        rows,
      ) + '\n',
    );
    process.stdout.write('speed vs raw = raw DuckDB time / Outpost time (1.00x = no overhead; target ≥ 0.80x)\n');
    return 0;
  } finally {
    await server.stop();
    await dir.remove();
  }
}
