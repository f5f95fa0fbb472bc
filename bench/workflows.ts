/**
 * Workflows: instance creations/s and steps/s for a 10-step workflow with 100 instances running at
 * once, and the wake-up latency after `step.sleep('1 second')`, for Outpost on SQLite and on
 * PostgreSQL beside Miniflare's local workflows engine (npm `miniflare`, persistent storage) running
 * the same workflow class, and beside this disk's durable-commit rate (write + fdatasync) measured in
 * the same run. Sides alternate round by round; medians are reported. See bench/README.md
 * ("workflows").
 *
 *   npm run bench -- workflows [--backend sqlite|postgres|both] [--rounds 3] [--instances 100]
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, fdatasyncSync, openSync, writeSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Miniflare } from 'miniflare';
import pg from 'pg';
import { int, ms, ratio, table } from './lib/format.ts';
import { parseOrExit } from './lib/args.ts';
import {
  installCleanupHandlers,
  Interrupted,
  onCleanup,
  runCleanups,
  spawnNode,
  tempDir,
  throwIfInterrupted,
} from './lib/procs.ts';

export const description =
  'workflow creations/s, steps/s (10-step workflow, 100 at once) and wake-up latency after sleep(1 s), SQLite and PostgreSQL, vs Miniflare and the disk';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUTPOST_BIN = join(ROOT, 'bin', 'outpost.js');
const DEFAULT_PG_URL = 'postgres://postgres@127.0.0.1:5432/test';

const USAGE = `usage: npm run bench -- workflows [options]

  --backend sqlite|postgres|both   Outpost storage engine(s) (default both)
  --rounds N                       rounds; each measures every side once (default 3)
  --instances N                    instances started at once per round (default 100)
  --steps N                        steps per instance (default 10)
  --sleepers N                     instances timing the wake-up after sleep('1 second') (default 20)
  --rest-creates N                 instances created over REST per round, 16 at a time (default 500)
  --pg-url URL                     PostgreSQL server (default ${DEFAULT_PG_URL}, or OUTPOST_BENCH_PG_URL)
`;

type Backend = 'sqlite' | 'postgres';

interface Options {
  backends: Backend[];
  rounds: number;
  instances: number;
  steps: number;
  sleepers: number;
  restCreates: number;
  pgUrl: string;
}

function parseOptions(argv: string[]): Options | 'help' {
  const o: Options = {
    backends: ['sqlite', 'postgres'],
    rounds: 3,
    instances: 100,
    steps: 10,
    sleepers: 20,
    restCreates: 500,
    pgUrl: process.env.OUTPOST_BENCH_PG_URL ?? DEFAULT_PG_URL,
  };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
    if (flag === '--help' || flag === '-h') return 'help';
    const value = inline ?? argv[++i];
    if (value === undefined) throw new Error(`${flag} needs a value\n${USAGE}`);
    if (flag === '--backend') {
      if (!['sqlite', 'postgres', 'both'].includes(value))
        throw new Error(`--backend: sqlite, postgres or both\n${USAGE}`);
      o.backends = value === 'both' ? ['sqlite', 'postgres'] : [value as Backend];
    } else if (flag === '--pg-url') {
      o.pgUrl = value;
    } else {
      const key = {
        '--rounds': 'rounds',
        '--instances': 'instances',
        '--steps': 'steps',
        '--sleepers': 'sleepers',
        '--rest-creates': 'restCreates',
      }[flag] as 'rounds' | 'instances' | 'steps' | 'sleepers' | 'restCreates' | undefined;
      if (!key) throw new Error(`unknown option ${flag}\n${USAGE}`);
      const n = Number(value);
      if (!Number.isInteger(n) || n < 1 || n > 100_000)
        throw new Error(`${flag} needs a positive integer`);
      o[key] = n;
    }
  }
  return o;
}

/** The workflow script both engines run. Each instance reports its end to the collector. */
const SCRIPT = `
import { WorkflowEntrypoint } from 'cloudflare:workers';
export class BenchSteps extends WorkflowEntrypoint {
  async run(event, step) {
    const p = event.payload;
    let acc = 0;
    for (let i = 0; i < p.steps; i++) acc += await step.do('step ' + i, async () => i);
    await fetch(p.collector + '/done/' + p.run + '?v=' + acc);
    return acc;
  }
}
export class BenchSleep extends WorkflowEntrypoint {
  async run(event, step) {
    const p = event.payload;
    const t0 = await step.do('t0', async () => Date.now());
    await step.sleep('nap', '1 second');
    const t1 = await step.do('t1', async () => Date.now());
    await fetch(p.collector + '/done/' + p.run + '?v=' + (t1 - t0 - 1000));
    return t1 - t0;
  }
}
export default {
  async fetch(req, env) {
    const body = await req.json();
    const binding = env[body.binding];
    const t = Date.now();
    await Promise.all(body.ids.map((id) => binding.create({ id, params: body.params })));
    return Response.json({ ms: Date.now() - t });
  },
};
`;

// ==== the collector: instances report their end here ============================================

interface Run {
  expected: number;
  values: number[];
  ended?: number;
  done: Promise<void>;
  resolve: () => void;
}

class Collector {
  private readonly runs = new Map<string, Run>();
  url = '';
  private server?: http.Server;

  async start(): Promise<void> {
    this.server = http.createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
      const u = new URL(req.url ?? '/', 'http://x');
      const m = /^\/done\/([^/]+)$/.exec(u.pathname);
      const run = m ? this.runs.get(m[1]) : undefined;
      if (run) {
        run.values.push(Number(u.searchParams.get('v')));
        if (run.values.length === run.expected) {
          run.ended = performance.now();
          run.resolve();
        }
      }
      req.resume();
      res.end('ok');
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', () => r()));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    onCleanup('stop the collector', () => new Promise<void>((r) => this.server!.close(() => r())));
  }

  expect(name: string, n: number): Run {
    let resolve!: () => void;
    const done = new Promise<void>((r) => (resolve = r));
    const run: Run = { expected: n, values: [], done, resolve };
    this.runs.set(name, run);
    return run;
  }
}

async function within<T>(p: Promise<T>, msTimeout: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} did not finish within ${msTimeout} ms`)),
      msTimeout,
    );
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

// ==== the sides ==================================================================================

interface Side {
  label: string;
  /** Sends `{binding, ids, params}` to the script's fetch handler; answers the script's `{ms}`. */
  create(body: unknown): Promise<{ ms: number }>;
  restCreate?(count: number): Promise<number>;
}

function cleanEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !k.startsWith('OUTPOST_')) env[k] = v;
  return env;
}

function anyFreePortEnv(): Record<string, string> {
  const env: Record<string, string> = {
    OUTPOST_EDGE_PORT: '0',
    OUTPOST_DNS_PORT: '0',
    OUTPOST_TURN_PORT: '0',
  };
  const help = spawnSync(process.execPath, [OUTPOST_BIN, '--help'], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 30_000,
  });
  for (const m of (help.stdout ?? '').matchAll(/0 = any free port\)\s*\[(OUTPOST_[A-Z0-9_]+)\]/g))
    env[m[1]] = '0';
  delete env.OUTPOST_API_PORT;
  return env;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

function request(
  url: string,
  method: string,
  headers: Record<string, string>,
  body?: string | Buffer,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      {
        method,
        headers: {
          ...headers,
          ...(body ? { 'content-length': String(Buffer.byteLength(body)) } : {}),
        },
        agent,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function startOutpost(backend: Backend, o: Options): Promise<Side> {
  const token = randomBytes(20).toString('hex');
  const accountId = randomBytes(16).toString('hex');
  const dir = tempDir('outpost-bench-wf-');
  const args = [OUTPOST_BIN, 'serve', '--api-port', '0', '--data-dir', dir.path];
  if (backend === 'postgres') {
    const schema = `bench_wf_${randomBytes(4).toString('hex')}`;
    args.push('--database', o.pgUrl, '--database-schema', schema);
    onCleanup(`drop schema ${schema}`, async () => {
      const c = new pg.Client({ connectionString: o.pgUrl });
      await c.connect();
      try {
        await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await c.end();
      }
    });
  }
  const child = await spawnNode(`outpost (${backend})`, args, {
    cwd: ROOT,
    env: {
      ...cleanEnv(),
      ...anyFreePortEnv(),
      OUTPOST_API_TOKEN: token,
      OUTPOST_ACCOUNT_ID: accountId,
      OUTPOST_LOG_LEVEL: 'warn',
    },
    ready: /management API\s+http\s+(http:\/\/\S+)\/client\/v4/,
    timeoutMs: 60_000,
  });
  const api = `${child.ready[1]}/client/v4`;
  const auth = { authorization: `Bearer ${token}` };
  // Upload the script (spec form: JSON metadata part + module part); its bindings define the workflows.
  const boundary = `----bench${randomBytes(8).toString('hex')}`;
  const metadata = {
    main_module: 'bench.js',
    compatibility_date: '2025-01-01',
    bindings: [
      { type: 'workflow', name: 'STEPS', workflow_name: 'bench-steps', class_name: 'BenchSteps' },
      { type: 'workflow', name: 'SLEEP', workflow_name: 'bench-sleep', class_name: 'BenchSleep' },
      { type: 'workflow', name: 'QUEUED', workflow_name: 'bench-queued', class_name: 'BenchSleep' },
    ],
  };
  const multipart = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="metadata"\r\nContent-Type: application/json\r\n\r\n${JSON.stringify(metadata)}\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="bench.js"; filename="bench.js"\r\nContent-Type: application/javascript+module\r\n\r\n${SCRIPT}\r\n--${boundary}--\r\n`,
  );
  const up = await request(
    `${api}/accounts/${accountId}/workers/scripts/bench-wf`,
    'PUT',
    { ...auth, 'content-type': `multipart/form-data; boundary=${boundary}` },
    multipart,
  );
  if (up.status !== 200)
    throw new Error(`script upload failed: ${up.status} ${up.body.slice(0, 500)}`);
  // REST creations go to a workflow that runs one instance at a time, so the rest stay queued and
  // the measurement is the create path itself.
  const put = await request(
    `${api}/accounts/${accountId}/workflows/bench-queued`,
    'PUT',
    { ...auth, 'content-type': 'application/json' },
    JSON.stringify({
      class_name: 'BenchSleep',
      script_name: 'bench-wf',
      concurrency: { limit: 1 },
    }),
  );
  if (put.status !== 200)
    throw new Error(`workflow PUT failed: ${put.status} ${put.body.slice(0, 500)}`);
  const invoke = `${api}/_outpost/accounts/${accountId}/workers/scripts/bench-wf/invoke/`;
  let restSeq = 0;
  return {
    label: `Outpost ${backend === 'sqlite' ? 'SQLite' : 'PostgreSQL'}`,
    async create(body) {
      const res = await request(
        invoke,
        'POST',
        { ...auth, 'content-type': 'application/json' },
        JSON.stringify(body),
      );
      if (res.status !== 200)
        throw new Error(
          `create through the binding failed: ${res.status} ${res.body.slice(0, 500)}`,
        );
      return JSON.parse(res.body) as { ms: number };
    },
    async restCreate(count) {
      const started = performance.now();
      let next = 0;
      const worker = async () => {
        while (next < count) {
          next++;
          const res = await request(
            `${api}/accounts/${accountId}/workflows/bench-queued/instances`,
            'POST',
            { ...auth, 'content-type': 'application/json' },
            JSON.stringify({
              id: `rest-${++restSeq}`,
              params: { collector: 'http://127.0.0.1:9', run: 'none' },
            }),
          );
          if (res.status !== 200)
            throw new Error(`REST create failed: ${res.status} ${res.body.slice(0, 300)}`);
        }
      };
      await Promise.all(Array.from({ length: 16 }, worker));
      return count / ((performance.now() - started) / 1000);
    },
  };
}

async function startMiniflare(): Promise<Side> {
  const dir = tempDir('miniflare-bench-wf-');
  const mf = new Miniflare({
    modules: true,
    script: SCRIPT,
    compatibilityDate: '2025-01-01',
    workflows: {
      STEPS: { name: 'bench-steps', className: 'BenchSteps' },
      SLEEP: { name: 'bench-sleep', className: 'BenchSleep' },
    },
    workflowsPersist: dir.path,
  });
  onCleanup('dispose Miniflare', () => mf.dispose());
  await mf.ready;
  return {
    label: 'Miniflare',
    async create(body) {
      const res = await mf.dispatchFetch('http://bench.local/', {
        method: 'POST',
        body: JSON.stringify(body),
      });
      if (res.status !== 200)
        throw new Error(
          `Miniflare create failed: ${res.status} ${(await res.text()).slice(0, 500)}`,
        );
      return (await res.json()) as { ms: number };
    },
  };
}

// ==== measurements ===============================================================================

interface RoundResult {
  createsPerSec: number;
  stepsPerSec: number;
  wake: number[];
  restCreates?: number;
}

async function measure(
  side: Side,
  collector: Collector,
  o: Options,
  round: number,
): Promise<RoundResult> {
  const tag = `${side.label.replace(/\W+/g, '-')}-${round}-${randomBytes(3).toString('hex')}`;
  const steps = collector.expect(`${tag}-steps`, o.instances);
  const ids = Array.from({ length: o.instances }, (_, i) => `${tag}-s${i}`);
  const started = performance.now();
  const created = await side.create({
    binding: 'STEPS',
    ids,
    params: { steps: o.steps, collector: collector.url, run: `${tag}-steps` },
  });
  await within(steps.done, 300_000, `${side.label}: ${o.instances} instances`);
  const total = (steps.ended! - started) / 1000;
  const bad = steps.values.filter((v) => v !== (o.steps * (o.steps - 1)) / 2);
  if (bad.length > 0) throw new Error(`${side.label}: wrong results ${bad.slice(0, 5).join(', ')}`);

  const sleepers = collector.expect(`${tag}-sleep`, o.sleepers);
  await side.create({
    binding: 'SLEEP',
    ids: Array.from({ length: o.sleepers }, (_, i) => `${tag}-z${i}`),
    params: { collector: collector.url, run: `${tag}-sleep` },
  });
  await within(sleepers.done, 120_000, `${side.label}: sleepers`);
  return {
    createsPerSec: o.instances / (created.ms / 1000),
    stepsPerSec: (o.instances * o.steps) / total,
    wake: sleepers.values,
    restCreates: side.restCreate ? await side.restCreate(o.restCreates) : undefined,
  };
}

/** write(4 KiB) + fdatasync in a loop for `seconds`: durable commits/s of the temp directory's disk. */
function fsyncRate(seconds: number): number {
  const dir = tempDir('outpost-bench-fsync-');
  const fd = openSync(join(dir.path, 'probe'), 'w');
  const block = Buffer.alloc(4096, 7);
  let n = 0;
  const end = performance.now() + seconds * 1000;
  try {
    while (performance.now() < end) {
      writeSync(fd, block, 0, block.length, (n % 256) * 4096);
      fdatasyncSync(fd);
      n++;
    }
  } finally {
    closeSync(fd);
  }
  return n / seconds;
}

function median(xs: number[]): number {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  return s.length === 0
    ? NaN
    : s.length % 2
      ? s[(s.length - 1) / 2]
      : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
}

export async function main(argv: string[]): Promise<number> {
  const o = parseOrExit(argv, parseOptions, USAGE);
  if (typeof o === 'number') return o;
  installCleanupHandlers();
  try {
    const collector = new Collector();
    await collector.start();
    process.stdout.write(
      `workflows benchmark: ${o.instances} instances × ${o.steps} steps at once, ${o.sleepers} sleepers, ${o.rounds} rounds, ${availableParallelism()} CPUs\n`,
    );
    const fsyncBefore = fsyncRate(2);
    const sides: Side[] = [];
    for (const b of o.backends) {
      if (b === 'postgres') {
        const c = new pg.Client({ connectionString: o.pgUrl });
        try {
          await c.connect();
          await c.end();
        } catch (err) {
          process.stderr.write(
            `PostgreSQL at ${o.pgUrl} is not reachable (${(err as Error).message}); skipping it\n`,
          );
          continue;
        }
      }
      sides.push(await startOutpost(b, o));
    }
    sides.push(await startMiniflare());
    // Warm-up: one full-size run per side (runtime start, JIT, caches), not measured.
    for (const side of sides) await measure(side, collector, o, -1);
    const results = new Map<string, RoundResult[]>(sides.map((s) => [s.label, []]));
    for (let round = 0; round < o.rounds; round++) {
      for (const side of sides) {
        throwIfInterrupted();
        const r = await measure(side, collector, o, round);
        results.get(side.label)!.push(r);
        process.stdout.write(
          `round ${round + 1} ${side.label.padEnd(20)} ${int(r.stepsPerSec).padStart(7)} steps/s  ${int(r.createsPerSec).padStart(7)} creates/s (binding)${r.restCreates ? `  ${int(r.restCreates)} creates/s (REST)` : ''}  wake p50 ${ms(median(r.wake))} ms\n`,
        );
      }
    }
    const fsyncAfter = fsyncRate(2);
    const fsync = (fsyncBefore + fsyncAfter) / 2;

    const summary = sides.map((s) => {
      const rs = results.get(s.label)!;
      const wake = rs.flatMap((r) => r.wake);
      return {
        label: s.label,
        steps: median(rs.map((r) => r.stepsPerSec)),
        creates: median(rs.map((r) => r.createsPerSec)),
        rest: rs[0]?.restCreates === undefined ? NaN : median(rs.map((r) => r.restCreates!)),
        p50: percentile(wake, 50),
        p99: percentile(wake, 99),
      };
    });
    const mf = summary.find((s) => s.label === 'Miniflare')!;
    process.stdout.write('\n');
    process.stdout.write(
      table(
        [
          'side',
          'steps/s',
          'vs Miniflare',
          'steps/s ÷ fsync/s',
          'creates/s (binding)',
          'vs Miniflare',
          'creates/s (REST)',
          'wake p50 ms',
          'wake p99 ms',
        ],
        summary.map((s) => [
          s.label,
          int(s.steps),
          s === mf ? '' : ratio(s.steps, mf.steps),
          ratio(s.steps, fsync),
          int(s.creates),
          s === mf ? '' : ratio(s.creates, mf.creates),
          Number.isFinite(s.rest) ? int(s.rest) : '–',
          ms(s.p50),
          ms(s.p99),
        ]),
      ),
    );
    process.stdout.write(
      `\n\ndisk: ${int(fsync)} durable commits/s (4 KiB write + fdatasync, before ${int(fsyncBefore)}, after ${int(fsyncAfter)})\n`,
    );
    process.stdout.write(
      "wake = time from the step before step.sleep('1 second') to the step after it, minus 1 s\n",
    );
    const ours = summary.filter((s) => s !== mf);
    const ahead = ours.every((s) => s.steps > mf.steps);
    const rate = ours.every((s) => s.creates >= 100 && (!Number.isFinite(s.rest) || s.rest >= 100));
    process.stdout.write(
      `targets: steps/s ahead of Miniflare: ${ahead ? 'yes' : 'no'}; >= 100 creations/s: ${rate ? 'yes' : 'no'}\n`,
    );
    return 0;
  } catch (err) {
    if (err instanceof Interrupted) return 130;
    process.stderr.write(`workflows benchmark failed: ${(err as Error).stack ?? String(err)}\n`);
    return 1;
  } finally {
    agent.destroy();
    await runCleanups();
  }
}
