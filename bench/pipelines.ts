/**
 * Pipelines: accepted MB/s and events/s into one stream over HTTP with durability on (every 200
 * is fsync'd, group commit), and the end-to-end latency from a 200 to the row being in a finished
 * sink file and in a committed Iceberg snapshot (an r2_data_catalog sink on an idle stream); beside the physical limits measured in the same run on the same data: JSON.parse
 * MB/s of the same bodies, and fsync'd append MB/s on this disk (one writer, same body size,
 * `write` + `fdatasync` per body, and batched eight bodies per sync like a loaded group commit).
 * Outpost runs as its own `outpost serve` process; the load comes from this one.
 *
 *   npm run bench -- pipelines [--seconds 5] [--concurrency 16] [--events 1000] [--samples 20] [--ingest-only]
 */
import http from 'node:http';
import { closeSync, fdatasyncSync, mkdtempSync, openSync, readdirSync, readFileSync, writeSync, writevSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { sinkFiles } from '../src/areas/pipelines/query.ts';
import { IcebergTable } from '../src/areas/pipelines/iceberg.ts';
import { catalogRoot } from '../src/areas/pipelines/runner.ts';
import type { StoredSink } from '../src/areas/pipelines/schemas.ts';
import { intOption, UsageError } from './lib/args.ts';
import { int, ms, table } from './lib/format.ts';
import { tempDir } from './lib/procs.ts';
import { summariseProfile } from './lib/profile.ts';

export const description = 'HTTP ingest MB/s and events/s with fsync, 200-to-sink latency; beside JSON.parse MB/s and fsync append MB/s';

const USAGE = `usage: npm run bench -- pipelines [options]

  --seconds N       length of each throughput phase (default 5)
  --concurrency N   requests in flight during ingest (default 16)
  --events N        events per request body (default 1000, about 180 KB)
  --samples N       end-to-end latency samples (default 20)
  --ingest-only     no pipeline reads the stream; stop after the ingest phase
  --cpu-prof        V8 CPU profile of the Outpost process (kept in a temp directory, path printed)
`;

const TOKEN = 'outpost-bench-token-pipelines-0123456789';
const ACCOUNT = 'abcdefabcdefabcdefabcdefabcdef02';

function parse(args: string[]) {
  const o = { seconds: 5, concurrency: 16, events: 1000, samples: 20, ingestOnly: false, cpuProf: false };
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const v = args[++i];
    if (a === '--ingest-only' || a === '--cpu-prof') {
      if (a === '--ingest-only') o.ingestOnly = true;
      else o.cpuProf = true;
      i--;
    } else if (a === '--seconds') o.seconds = intOption(a, v, 1, 600);
    else if (a === '--concurrency') o.concurrency = intOption(a, v, 1, 256);
    else if (a === '--events') o.events = intOption(a, v, 1, 5000);
    else if (a === '--samples') o.samples = intOption(a, v, 1, 1000);
    else if (a === '--help') throw new UsageError(USAGE);
    else throw new UsageError(`unknown option ${a}\n\n${USAGE}`);
  }
  return o;
}

function body(events: number, tag: string): Buffer {
  const rows = Array.from({ length: events }, (_, i) => ({ id: `${tag}-${i}`, user: i % 977, path: `/products/${i % 131}`, amount: (i * 7.31) % 500, country: ['de', 'fr', 'us', 'jp'][i % 4], ts: 1740823200000 + i }));
  return Buffer.from(JSON.stringify(rows));
}

/** User + system CPU seconds of a process (all its threads), from /proc; NaN elsewhere. */
function cpuSeconds(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
    // utime and stime are fields 14 and 15 of the line (11 and 12 after the command name), in ticks.
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return NaN;
  }
}

const percentile = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

function post(agent: http.Agent, port: number, path: string, payload: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': payload.length } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

export async function main(args: string[]): Promise<number> {
  let o: ReturnType<typeof parse>;
  try {
    o = parse(args);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(err.message);
      return args.includes('--help') ? 0 : 2;
    }
    throw err;
  }
  const dir = tempDir('outpost-bench-pipelines-');
  const profDir = o.cpuProf ? mkdtempSync(join(tmpdir(), 'outpost-bench-pipelines-prof-')) : undefined;
  // The server runs in its own process (as `outpost serve` does), the load in this one.
  const child = spawn(process.execPath, [...(profDir ? ['--cpu-prof', '--cpu-prof-dir', profDir] : []), fileURLToPath(new URL('../bin/outpost.js', import.meta.url)), 'serve', '--api-port', '0', '--edge-port', '0', '--turn-port', '0', '--dns-port', '0', '--data-dir', dir.path, '--pipelines-stream-rate', '4000000000', '--pipelines-tick-ms', '10'], {
    env: { ...process.env, OUTPOST_API_TOKEN: TOKEN, OUTPOST_ACCOUNT_ID: ACCOUNT, OUTPOST_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const apiUrl = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`outpost did not start:\n${out}`)), 60_000);
    child.stdout!.on('data', () => {
      const m = /management API\s+http\s+(http:\/\/\S+)\/client\/v4/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.once('exit', (code) => reject(new Error(`outpost exited with ${code}:\n${out}`)));
  });
  const server = { apiUrl, apiPort: Number(new URL(apiUrl).port) };
  try {
    const api = async (method: string, path: string, b?: unknown) => {
      const r = await fetch(`${server.apiUrl}/client/v4/accounts/${ACCOUNT}/pipelines/v1${path}`, { method, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: b === undefined ? undefined : JSON.stringify(b) });
      const j = (await r.json()) as { result: any; errors: unknown[] };
      if (!r.ok) throw new Error(`${method} ${path}: ${JSON.stringify(j.errors)}`);
      return j.result;
    };
    const stream = await api('POST', '/streams', { name: 'bench_events' });
    const sink: StoredSink = await api('POST', '/sinks', { name: 'bench_out', type: 'r2', format: { type: 'json' }, config: { bucket: 'bench', rolling_policy: { file_size_bytes: 64 * 1024 * 1024, inactivity_seconds: 0.05, interval_seconds: 1 } } });
    if (!o.ingestOnly) await api('POST', '/pipelines', { name: 'bench_pipe', sql: "INSERT INTO bench_out SELECT id, user, UPPER(country) AS country, CAST(amount AS int32) AS amount FROM bench_events WHERE path <> '/none'" });
    // A second, idle stream into an Iceberg table: its probes measure 200 → committed snapshot.
    const tableStream = await api('POST', '/streams', { name: 'bench_table_events' });
    await api('POST', '/sinks', { name: 'bench_table', type: 'r2_data_catalog', config: { bucket: 'bench', table_name: 'events', token: 'bench', rolling_policy: { inactivity_seconds: 0.05, interval_seconds: 1 } } });
    if (!o.ingestOnly) await api('POST', '/pipelines', { name: 'bench_table_pipe', sql: 'INSERT INTO bench_table SELECT id, user, UPPER(country) AS country, CAST(amount AS int32) AS amount FROM bench_table_events' });
    const payload = body(o.events, 'load');
    const mb = payload.length / 1e6;

    // 1. JSON.parse of the same bodies.
    let parsed = 0;
    let t0 = performance.now();
    while (performance.now() - t0 < o.seconds * 1000) {
      JSON.parse(payload.toString('utf8'));
      parsed++;
    }
    const parseMBs = (parsed * mb) / ((performance.now() - t0) / 1000);

    // 2. fsync'd appends on this disk: one sync per body, and one per eight bodies.
    const appendRate = (perSync: number) => {
      const fd = openSync(join(dir.path, `append-${perSync}.bin`), 'w');
      let n = 0;
      const start = performance.now();
      while (performance.now() - start < (o.seconds * 1000) / 2) {
        if (perSync === 1) writeSync(fd, payload);
        else writevSync(fd, Array.from({ length: perSync }, () => payload));
        fdatasyncSync(fd);
        n += perSync;
      }
      closeSync(fd);
      return (n * mb) / ((performance.now() - start) / 1000);
    };
    const append1 = appendRate(1);
    const append8 = appendRate(8);

    // 3. HTTP ingest with durability on.
    const agent = new http.Agent({ keepAlive: true, maxSockets: o.concurrency });
    const path = `/pipelines/ingest/${stream.id}`;
    let accepted = 0;
    let refused = 0;
    const cpuBefore = { outpost: cpuSeconds(child.pid!), bench: process.cpuUsage() };
    t0 = performance.now();
    const end = t0 + o.seconds * 1000;
    await Promise.all(
      Array.from({ length: o.concurrency }, async () => {
        while (performance.now() < end) {
          const status = await post(agent, server.apiPort, path, payload);
          if (status === 200) accepted++;
          else refused++;
        }
      }),
    );
    const secs = (performance.now() - t0) / 1000;
    const outpostCpu = (cpuSeconds(child.pid!) - cpuBefore.outpost) / secs;
    const benchUsage = process.cpuUsage(cpuBefore.bench);
    const benchCpu = (benchUsage.user + benchUsage.system) / 1e6 / secs;
    const ingestMBs = (accepted * mb) / secs;
    const eventsPerSec = (accepted * o.events) / secs;
    const cpuNote = `CPU during ingest (cores busy): Outpost ${Number.isNaN(outpostCpu) ? '?' : outpostCpu.toFixed(2)}, load generator ${benchCpu.toFixed(2)}, of ${availableParallelism()}`;
    process.stderr.write(`ingest phase: ${ingestMBs.toFixed(1)} MB/s, ${accepted} accepted, ${refused} refused; ${cpuNote}\n`);
    if (o.ingestOnly) return 0;

    // 4. End to end: 200 → the row in a finished sink file (after the load has drained).
    const files = () => sinkFiles(join(dir.path, 'pipelines', 'buckets'), ACCOUNT, sink);
    const drainEnd = Date.now() + 120_000;
    for (;;) {
      const rows = files().reduce((n, f) => n + readFileSync(f, 'utf8').split('\n').length - 1, 0);
      if (rows >= accepted * o.events || Date.now() > drainEnd) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const drained = performance.now();
    const latencies: number[] = [];
    for (let s = 0; s < o.samples; s++) {
      const before = new Set(files());
      const marker = body(1, `probe${s}`);
      const status = await post(agent, server.apiPort, path, marker);
      const acked = performance.now();
      if (status !== 200) throw new Error(`probe ${s} answered ${status}`);
      for (;;) {
        const fresh = files().filter((f) => !before.has(f));
        if (fresh.some((f) => readFileSync(f, 'utf8').includes(`"probe${s}-0"`))) break;
        if (performance.now() - acked > 10_000) throw new Error(`probe ${s} not in the sink after 10 s`);
        await new Promise((r) => setTimeout(r, 2));
      }
      latencies.push(performance.now() - acked);
    }
    const icebergTable = new IcebergTable(join(catalogRoot(join(dir.path, 'pipelines', 'buckets'), ACCOUNT, 'bench'), 'default', 'events'));
    const snapshots = () => icebergTable.metadata().metadata.snapshots.length;
    const tableLatencies: number[] = [];
    for (let s = 0; s < o.samples; s++) {
      const before = snapshots();
      const status = await post(agent, server.apiPort, `/pipelines/ingest/${tableStream.id}`, body(1, `table${s}`));
      const acked = performance.now();
      if (status !== 200) throw new Error(`table probe ${s} answered ${status}`);
      while (snapshots() === before) {
        if (performance.now() - acked > 10_000) throw new Error(`table probe ${s} not committed after 10 s`);
        await new Promise((r) => setTimeout(r, 2));
      }
      tableLatencies.push(performance.now() - acked);
    }
    agent.destroy();

    process.stdout.write(`\npipelines: ${o.concurrency} clients, ${o.events} events (${(payload.length / 1024).toFixed(0)} KB) per request, ${o.seconds} s per phase; durability on (fdatasync before each 200)\n\n`);
    process.stdout.write(
      table(
        ['measure', 'MB/s', 'events/s', 'note'],
        [
          ['HTTP ingest into one stream (Outpost)', ingestMBs.toFixed(1), int(eventsPerSec), `${int(accepted)} requests accepted, ${refused} refused`],
          ['JSON.parse of the same bodies (limit)', parseMBs.toFixed(1), int((parseMBs / mb) * o.events), 'one core, no I/O'],
          ["fsync'd append, 1 body per sync (limit)", append1.toFixed(1), int((append1 / mb) * o.events), 'write + fdatasync, this disk'],
          ["fsync'd append, 8 bodies per sync (limit)", append8.toFixed(1), int((append8 / mb) * o.events), 'writev + fdatasync, this disk'],
        ],
      ),
    );
    process.stdout.write(`\n${cpuNote}\n`);
    process.stdout.write(`sink drained ${int(accepted * o.events)} load events ${ms(drained - t0 - secs * 1000)} after the load ended\n`);
    process.stdout.write(`end to end (200 → row in a finished file, ${o.samples} probes): p50 ${ms(percentile(latencies, 50))}, p99 ${ms(percentile(latencies, 99))}, max ${ms(Math.max(...latencies))}\n`);
    process.stdout.write(`end to end (200 → row in a committed Iceberg snapshot, ${o.samples} probes): p50 ${ms(percentile(tableLatencies, 50))}, p99 ${ms(percentile(tableLatencies, 99))}, max ${ms(Math.max(...tableLatencies))}\n`);
    return 0;
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    await dir.remove();
    if (profDir) {
      for (const f of readdirSync(profDir).filter((n) => n.endsWith('.cpuprofile'))) {
        const sum = summariseProfile(join(profDir, f));
        process.stdout.write(`\nOutpost CPU profile ${join(profDir, f)}: busy ${ms(sum.busyMs)} ms\n`);
        process.stdout.write(table(['self ms', 'function'], sum.byFunction.map((x) => [ms(x.ms), x.name]), [1]));
        process.stdout.write(table(['self ms', 'place'], sum.byPlace.map((x) => [ms(x.ms), x.place]), [1]));
      }
    }
  }
}
