/**
 * DNS record create / get / list-page throughput and latency through the management API, on
 * SQLite and on PostgreSQL, beside a baseline (bench/baseline-server.ts: bare node:http doing the
 * same inserts and selects on the same engine). See bench/README.md for the method.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, statSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { int, ms, ratio, table } from './lib/format.ts';
import {
  closedLoop,
  makeTarget,
  openLoop,
  send,
  type Check,
  type OpenLoopResult,
  type PhaseResult,
  type Req,
  type Target,
} from './lib/load.ts';
import {
  abortSignal,
  installCleanupHandlers,
  Interrupted,
  onCleanup,
  runCleanups,
  spawnNode,
  tempDir,
  throwIfInterrupted,
  type Child,
} from './lib/procs.ts';
import { summariseProfile, type ProfileSummary } from './lib/profile.ts';

export const description =
  'DNS record create/get/list req/s and p50/p99 at 32 keep-alive connections, SQLite and PostgreSQL, vs a bare node:http baseline';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUTPOST_BIN = join(ROOT, 'bin', 'outpost.js');
const BASELINE_SERVER = join(ROOT, 'bench', 'baseline-server.ts');
const API = '/client/v4';
const DEFAULT_PG_URL = 'postgres://postgres@127.0.0.1:5432/test';

type Backend = 'sqlite' | 'postgres';
type Op = 'create' | 'get' | 'list';
type SideKey = 'ours' | 'baseline';

interface Options {
  seconds: number;
  warmup: number;
  backends: Backend[];
  concurrency: number;
  rate: number;
  rateSeconds: number;
  perPage: number;
  pgUrl: string;
  cpuProf: boolean;
}

const USAGE = `usage: npm run bench -- api-crud [options]

  --backend sqlite|postgres|both   storage engine(s) to measure (default both)
  --seconds N                      length of each measured phase (default 5)
  --warmup N                       unmeasured warm-up before each phase, seconds (default 1)
  --concurrency N                  request loops = keep-alive connections (default 32)
  --rate N                         open-loop requests per second, SQLite only (default 1000; 0 = skip)
  --rate-seconds N                 length of each open-loop run (default: --seconds)
  --per-page N                     list page size (default 50)
  --pg-url URL                     PostgreSQL server (default ${DEFAULT_PG_URL}, or OUTPOST_BENCH_PG_URL)
  --cpu-prof                       write V8 CPU profiles of both servers and summarise Outpost's
`;

function parseOptions(argv: string[]): Options {
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) throw new UsageError(`unexpected argument ${a}`);
    const eq = a.indexOf('=');
    if (eq > 0) flags[a.slice(2, eq)] = a.slice(eq + 1);
    else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) flags[a.slice(2)] = argv[++i];
    else flags[a.slice(2)] = 'true';
  }
  const known = [
    'backend',
    'seconds',
    'warmup',
    'concurrency',
    'rate',
    'rate-seconds',
    'per-page',
    'pg-url',
    'cpu-prof',
    'help',
  ];
  for (const k of Object.keys(flags))
    if (!known.includes(k)) throw new UsageError(`unknown option --${k}`);
  if (flags.help) throw new UsageError('');
  const num = (name: string, def: number, min: number, max: number, integer = false): number => {
    if (flags[name] === undefined) return def;
    const n = Number(flags[name]);
    if (!Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n))) {
      throw new UsageError(
        `--${name}: expected ${integer ? 'an integer' : 'a number'} in ${min}..${max}, got ${flags[name]}`,
      );
    }
    return n;
  };
  const backend = flags.backend ?? 'both';
  if (!['sqlite', 'postgres', 'both'].includes(backend))
    throw new UsageError(`--backend: expected sqlite, postgres or both`);
  const seconds = num('seconds', 5, 0.5, 600);
  return {
    seconds,
    warmup: num('warmup', 1, 0, 60),
    backends: backend === 'both' ? ['sqlite', 'postgres'] : [backend as Backend],
    concurrency: num('concurrency', 32, 1, 1024, true),
    rate: num('rate', 1000, 0, 100_000, true),
    rateSeconds: num('rate-seconds', seconds, 0.5, 600),
    perPage: num('per-page', 50, 1, 1000, true),
    pgUrl: flags['pg-url'] ?? process.env.OUTPOST_BENCH_PG_URL ?? DEFAULT_PG_URL,
    cpuProf: flags['cpu-prof'] === 'true',
  };
}

class UsageError extends Error {}

// ---------------------------------------------------------------------------------------------
// Servers

interface Side {
  key: SideKey;
  child: Child;
  target: Target;
  zoneId: string;
  /** Ids of the records this side holds, in creation order (roughly: loops run concurrently). */
  ids: string[];
  seq: number;
}

function hex(bytes: number): string {
  return randomBytes(bytes).toString('hex');
}

/** The parent's environment without OUTPOST_* settings, so a developer's shell cannot skew a run. */
function cleanEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !k.startsWith('OUTPOST_')) env[k] = v;
  return env;
}

/**
 * Every listener port Outpost's --help says accepts 0, as environment settings of 0, so a run never
 * collides with another Outpost on a fixed default port (DNS, TURN, edge…). Environment rather than
 * flags: an unknown flag is an error, an unknown variable is not.
 */
let portEnvCache: Record<string, string> | undefined;
function anyFreePortEnv(): Record<string, string> {
  if (portEnvCache) return portEnvCache;
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
  return (portEnvCache = env);
}

/**
 * One directory per server: Node writes one profile per thread (tsx's loader runs in a worker),
 * named by pid and thread; the main thread's is the largest.
 */
function profArgs(o: Options, profDir: string | undefined, name: string): string[] {
  if (!o.cpuProf || !profDir) return [];
  const dir = join(profDir, name);
  mkdirSync(dir, { recursive: true });
  return ['--cpu-prof', `--cpu-prof-dir=${dir}`];
}

function mainThreadProfile(dir: string): string | undefined {
  let best: { file: string; size: number } | undefined;
  try {
    for (const f of readdirSync(dir)) {
      if (!f.endsWith('.cpuprofile')) continue;
      const size = statSync(join(dir, f)).size;
      if (!best || size > best.size) best = { file: join(dir, f), size };
    }
  } catch {
    return undefined;
  }
  return best?.file;
}

async function startOurs(
  o: Options,
  backend: Backend,
  dataDir: string,
  schema: string | undefined,
  profDir?: string,
): Promise<Side> {
  const token = hex(20);
  const accountId = hex(16);
  const args = [
    ...profArgs(o, profDir, `outpost-${backend}`),
    OUTPOST_BIN,
    'serve',
    '--api-port',
    '0',
    '--data-dir',
    dataDir,
  ];
  if (backend === 'postgres') args.push('--database', o.pgUrl, '--database-schema', schema!);
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
  });
  const target = makeTarget(
    'ours',
    child.ready[1],
    { authorization: `Bearer ${token}` },
    o.concurrency,
  );
  const res = await send(target, {
    method: 'POST',
    path: `${API}/zones`,
    body: JSON.stringify({ name: `bench-${hex(4)}.example.com`, account: { id: accountId } }),
  });
  const zoneId =
    res.status === 200
      ? (JSON.parse(res.body) as { result?: { id?: string } }).result?.id
      : undefined;
  if (!zoneId)
    throw new Error(`creating the benchmark zone failed: ${res.status} ${res.body.slice(0, 500)}`);
  return { key: 'ours', child, target, zoneId, ids: [], seq: 0 };
}

async function startBaseline(
  o: Options,
  backend: Backend,
  dataDir: string,
  schema: string | undefined,
  profDir?: string,
): Promise<Side> {
  const engineArgs =
    backend === 'sqlite'
      ? ['--engine', 'sqlite', '--file', join(dataDir, 'baseline.db')]
      : ['--engine', 'postgres', '--url', o.pgUrl, '--schema', schema!];
  const child = await spawnNode(
    `baseline (${backend})`,
    [
      ...profArgs(o, profDir, `baseline-${backend}`),
      '--import',
      'tsx',
      BASELINE_SERVER,
      ...engineArgs,
    ],
    {
      cwd: ROOT,
      env: cleanEnv(),
      ready: /baseline listening (http:\/\/\S+)/,
      stdinPipe: true,
    },
  );
  // Same request headers as Outpost gets, so both parse the same bytes; the baseline ignores them.
  const target = makeTarget(
    'baseline',
    child.ready[1],
    { authorization: `Bearer ${hex(20)}` },
    o.concurrency,
  );
  return { key: 'baseline', child, target, zoneId: hex(16), ids: [], seq: 0 };
}

async function withPg<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    // Nothing here may wait forever on a lock held by a server that is going away.
    await client.query("SET lock_timeout = '15s'");
    return await fn(client);
  } finally {
    await client.end();
  }
}

// ---------------------------------------------------------------------------------------------
// Requests

/** A small deterministic PRNG, so both sides read the same sequence of indexes and pages. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function createReq(side: Side): Req {
  const n = side.seq++;
  return {
    method: 'POST',
    path: `${API}/zones/${side.zoneId}/dns_records`,
    body: JSON.stringify({ type: 'A', name: `h${n}`, content: `192.0.2.${(n % 254) + 1}`, ttl: 1 }),
    op: 'create',
  };
}

function getReq(side: Side, rnd: () => number): Req {
  const id = side.ids[Math.floor(rnd() * side.ids.length)];
  return { method: 'GET', path: `${API}/zones/${side.zoneId}/dns_records/${id}`, op: 'get' };
}

function listReq(side: Side, rnd: () => number, perPage: number): Req {
  const fullPages = Math.max(1, Math.floor(side.ids.length / perPage));
  const page = 1 + Math.floor(rnd() * fullPages);
  return {
    method: 'GET',
    path: `${API}/zones/${side.zoneId}/dns_records?per_page=${perPage}&page=${page}`,
    op: 'list',
  };
}

function parse(body: string): any {
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}

/** Every create answer must carry the new id; it is collected for the read phases. */
function createCheck(side: Side): Check {
  return (_req, res) => {
    const id = parse(res.body)?.result?.id;
    if (typeof id !== 'string' || !/^[0-9a-f]{32}$/.test(id))
      return `no record id in ${res.body.slice(0, 200)}`;
    side.ids.push(id);
    return undefined;
  };
}

function readCheck(side: Side, perPage: number): Check {
  return (req, res) => {
    const body = parse(res.body);
    if (req.op === 'get') {
      const want = req.path.slice(req.path.lastIndexOf('/') + 1);
      return body?.result?.id === want
        ? undefined
        : `expected record ${want}, got ${res.body.slice(0, 200)}`;
    }
    const items = body?.result;
    const total = body?.result_info?.total_count;
    if (!Array.isArray(items) || items.length !== Math.min(perPage, side.ids.length)) {
      return `expected a full page of ${perPage}, got ${Array.isArray(items) ? items.length : res.body.slice(0, 200)}`;
    }
    if (total !== side.ids.length) return `expected total_count ${side.ids.length}, got ${total}`;
    return undefined;
  };
}

// ---------------------------------------------------------------------------------------------
// Phases

interface OpResult {
  op: Op;
  ours: PhaseResult;
  baseline: PhaseResult;
}

interface BackendResult {
  backend: Backend;
  ops: OpResult[];
  rows: number;
  notes: string[];
  fixedRate?: { ours: OpenLoopResult; baseline: OpenLoopResult };
  profile?: ProfileSummary;
  profileFiles: string[];
}

const PAD = { ours: 'ours    ', baseline: 'baseline' };

function log(line: string): void {
  process.stdout.write(`${line}\n`);
}

/** Ends a phase early on an interrupt or when either server has died. */
function stopWhen(...sides: Side[]): () => boolean {
  return () => abortSignal.aborted || sides.some((s) => s.child.crashed());
}

function ensureAlive(...sides: Side[]): void {
  throwIfInterrupted();
  for (const s of sides) {
    if (s.child.crashed())
      throw new Error(`${s.child.name} exited during the run:\n${s.child.output().slice(-4000)}`);
  }
}

function phaseLine(backend: Backend, side: SideKey, what: string, r: PhaseResult): string {
  const errors = r.errors > 0 ? `  ${int(r.errors)} ERRORS (${r.errorSummary()})` : '  0 errors';
  return `[${backend}] ${PAD[side]} ${what.padEnd(7)} ${int(r.rate).padStart(7)} req/s  p50 ${ms(r.latency.percentile(0.5)).padStart(6)} ms  p99 ${ms(r.latency.percentile(0.99)).padStart(6)} ms  (${int(r.ok)} ok in ${(r.elapsedMs / 1000).toFixed(1)} s)${errors}`;
}

async function runPhase(
  o: Options,
  backend: Backend,
  side: Side,
  op: Op,
  other: Side,
): Promise<PhaseResult> {
  const seed = { create: 1, get: 2, list: 3 }[op];
  const build = (rnd: () => number) => () =>
    op === 'create'
      ? createReq(side)
      : op === 'get'
        ? getReq(side, rnd)
        : listReq(side, rnd, o.perPage);
  const check = op === 'create' ? createCheck(side) : readCheck(side, o.perPage);
  const base = {
    target: side.target,
    concurrency: o.concurrency,
    check,
    checkAll: op === 'create',
    stop: stopWhen(side, other),
  };
  if (o.warmup > 0) {
    const w = await closedLoop({
      ...base,
      durationMs: o.warmup * 1000,
      next: build(prng(seed + 100)),
    });
    if (w.errors > 0)
      log(
        `[${backend}] ${PAD[side.key]} ${op} warm-up: ${int(w.errors)} errors (${w.errorSummary()}); first: ${w.errorSamples[0]}`,
      );
  }
  ensureAlive(side, other);
  const r = await closedLoop({ ...base, durationMs: o.seconds * 1000, next: build(prng(seed)) });
  ensureAlive(side, other);
  log(phaseLine(backend, side.key, op, r));
  for (const s of r.errorSamples) log(`           error sample: ${s}`);
  return r;
}

/**
 * List cost grows with the zone's size, so before the read phases the baseline is brought to the
 * same number of records as Outpost: extra records are deleted (oldest kept), missing ones created.
 */
async function equalise(o: Options, backend: Backend, ours: Side, base: Side): Promise<string> {
  const want = ours.ids.length;
  const had = base.ids.length;
  if (had < want) {
    const r = await closedLoop({
      target: base.target,
      concurrency: o.concurrency,
      durationMs: 120_000,
      maxRequests: want - had,
      next: () => createReq(base),
      check: createCheck(base),
      checkAll: true,
      stop: stopWhen(ours, base),
    });
    throwIfInterrupted();
    if (r.errors > 0)
      throw new Error(`topping up the baseline failed: ${r.errorSummary()}; ${r.errorSamples[0]}`);
  }
  if (base.ids.length > want) {
    const res = await send(base.target, {
      method: 'POST',
      path: '/_bench/trim',
      body: JSON.stringify({ zone_id: base.zoneId, keep: want }),
    });
    const ids = parse(res.body)?.result?.ids;
    if (res.status !== 200 || !Array.isArray(ids))
      throw new Error(`trimming the baseline failed: ${res.status} ${res.body.slice(0, 300)}`);
    base.ids = ids as string[];
  }
  if (base.ids.length !== want)
    throw new Error(`could not equalise record counts: ours ${want}, baseline ${base.ids.length}`);
  const how =
    had > want
      ? `baseline trimmed from ${int(had)}`
      : had < want
        ? `baseline topped up from ${int(had)}`
        : 'already equal';
  return `[${backend}] records per side for get/list: ${int(want)} (${how})`;
}

function fixedRateLine(backend: Backend, side: SideKey, r: OpenLoopResult, rate: number): string {
  const a = r.all;
  const errors = a.errors > 0 ? `  ${int(a.errors)} ERRORS (${a.errorSummary()})` : '  0 errors';
  const shed = a.notSent > 0 ? `  ${int(a.notSent)} not sent (in-flight limit)` : '';
  return `[${backend}] ${PAD[side]} fixed ${int(rate)}/s  sent ${int(r.scheduled - a.notSent)}${shed}  p50 ${ms(a.latency.percentile(0.5))} ms  p99 ${ms(a.latency.percentile(0.99))} ms  max ${ms(a.latency.max())} ms${errors}`;
}

/** Open loop: requests due beyond this many in flight are not sent (bounds the client's memory). */
const FIXED_RATE_MAX_IN_FLIGHT = 2_000;

async function runFixedRate(
  o: Options,
  backend: Backend,
  side: Side,
  other: Side,
): Promise<OpenLoopResult> {
  const rndGet = prng(11);
  const rndList = prng(12);
  const r = await openLoop({
    target: side.target,
    rate: o.rate,
    durationMs: o.rateSeconds * 1000,
    maxInFlight: FIXED_RATE_MAX_IN_FLIGHT,
    next: (i) => (i % 2 === 0 ? getReq(side, rndGet) : listReq(side, rndList, o.perPage)),
    check: readCheck(side, o.perPage),
    stop: stopWhen(side, other),
  });
  ensureAlive(side, other);
  log(fixedRateLine(backend, side.key, r, o.rate));
  for (const s of r.all.errorSamples) log(`           error sample: ${s}`);
  return r;
}

async function runBackend(
  o: Options,
  backend: Backend,
  profDir: string | undefined,
): Promise<BackendResult> {
  const dir = tempDir(`outpost-bench-${backend}-`);
  const suffix = `${process.pid}_${hex(3)}`;
  const schemas =
    backend === 'postgres'
      ? { ours: `bench_ours_${suffix}`, baseline: `bench_base_${suffix}` }
      : undefined;
  // Registered before the servers start, so it runs after they have stopped.
  const dropSchemas = schemas
    ? onCleanup(`drop schemas ${schemas.ours}, ${schemas.baseline}`, () =>
        withPg(o.pgUrl, async (c) => {
          await c.query(`DROP SCHEMA IF EXISTS "${schemas.ours}" CASCADE`);
          await c.query(`DROP SCHEMA IF EXISTS "${schemas.baseline}" CASCADE`);
        }),
      )
    : undefined;
  const result: BackendResult = { backend, ops: [], rows: 0, notes: [], profileFiles: [] };
  let ours: Side | undefined;
  let base: Side | undefined;
  try {
    log(`[${backend}] starting Outpost and the baseline…`);
    mkdirSync(join(dir.path, 'ours'));
    ours = await startOurs(o, backend, join(dir.path, 'ours'), schemas?.ours, profDir);
    base = await startBaseline(o, backend, dir.path, schemas?.baseline, profDir);
    log(
      `[${backend}] ours ${ours.child.ready[1]} (pid ${ours.child.proc.pid}), baseline ${base.child.ready[1]} (pid ${base.child.proc.pid})`,
    );
    const sides = [ours, base] as const;

    const byOp = new Map<Op, Partial<Record<SideKey, PhaseResult>>>();
    for (const op of ['create', 'get', 'list'] as Op[]) {
      if (op === 'get') {
        const line = await equalise(o, backend, ours, base);
        log(line);
        result.rows = ours.ids.length;
        if (backend === 'postgres') {
          // Fresh statistics and visibility maps on both tables, rather than whatever autovacuum did.
          await withPg(o.pgUrl, async (c) => {
            await c.query(`VACUUM ANALYZE "${schemas!.ours}".documents`);
            await c.query(`VACUUM ANALYZE "${schemas!.baseline}".records`);
          });
        }
      }
      const entry: Partial<Record<SideKey, PhaseResult>> = {};
      for (const side of sides) {
        const other = side === ours ? base : ours;
        entry[side.key] = await runPhase(o, backend, side, op, other);
      }
      byOp.set(op, entry);
      result.ops.push({ op, ours: entry.ours!, baseline: entry.baseline! });
    }

    if (backend === 'sqlite' && o.rate > 0) {
      log(
        `[${backend}] open loop: ${int(o.rate)} req/s for ${o.rateSeconds} s, alternating get and list`,
      );
      const oursFixed = await runFixedRate(o, backend, ours, base);
      const baseFixed = await runFixedRate(o, backend, base, ours);
      result.fixedRate = { ours: oursFixed, baseline: baseFixed };
    }
  } finally {
    for (const s of [ours, base]) s?.target.agent.destroy();
    // Outpost first: with --cpu-prof its profile is written as it exits.
    if (ours) await ours.child.stop();
    if (base) await base.child.stop();
    await dropSchemas?.();
    await dir.remove();
  }
  if (profDir) {
    const oursProf = mainThreadProfile(join(profDir, `outpost-${backend}`));
    const baseProf = mainThreadProfile(join(profDir, `baseline-${backend}`));
    result.profileFiles = [oursProf, baseProf].filter((f): f is string => f !== undefined);
    if (oursProf) result.profile = summariseProfile(oursProf);
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Report

const TITLES: Record<Backend, string> = {
  sqlite: 'SQLite (better-sqlite3, WAL, synchronous=NORMAL)',
  postgres: 'PostgreSQL (pg Pool max 10)',
};
const OP_LABEL: Record<Op, string> = { create: 'create', get: 'get by id', list: 'list page' };

function errorCell(r: PhaseResult): string {
  return r.errors === 0 ? '0' : `${int(r.errors)} (${r.errorSummary()})`;
}

function backendTable(o: Options, r: BackendResult): string {
  const rows = r.ops.map(({ op, ours, baseline }) => [
    op === 'list' ? `${OP_LABEL[op]} (${o.perPage})` : OP_LABEL[op],
    int(ours.rate),
    int(baseline.rate),
    ratio(ours.rate, baseline.rate),
    `${ms(ours.latency.percentile(0.5))} / ${ms(ours.latency.percentile(0.99))}`,
    `${ms(baseline.latency.percentile(0.5))} / ${ms(baseline.latency.percentile(0.99))}`,
    errorCell(ours),
    errorCell(baseline),
  ]);
  const head = `${TITLES[r.backend]} — ${o.concurrency} keep-alive connections, ${o.seconds} s per phase after ${o.warmup} s warm-up; get/list over ${int(r.rows)} records per side`;
  const lines = [
    head,
    '',
    table(
      [
        'operation',
        'ours req/s',
        'baseline req/s',
        'ours/baseline',
        'ours p50/p99 ms',
        'baseline p50/p99 ms',
        'ours non-2xx',
        'baseline non-2xx',
      ],
      rows,
    ),
  ];
  const bad = r.ops.flatMap(({ op, ours, baseline }) =>
    (
      [
        ['ours', ours],
        ['baseline', baseline],
      ] as const
    )
      .filter(([, p]) => p.errors > 0)
      .map(
        ([side, p]) =>
          `  ! ${OP_LABEL[op]} (${side}): ${int(p.errors)} failed requests, not counted in req/s — ${p.errorSamples[0] ?? ''}`,
      ),
  );
  if (bad.length > 0) lines.push('', 'PHASES WITH ERRORS:', ...bad);
  return lines.join('\n');
}

function fixedRateTable(o: Options, r: BackendResult): string {
  const fr = r.fixedRate!;
  const rows: string[][] = [];
  for (const side of ['ours', 'baseline'] as const) {
    const res = fr[side];
    for (const op of ['get', 'list', 'all'] as const) {
      const p = op === 'all' ? res.all : res.byOp.get(op);
      if (!p) continue;
      const verdict =
        side === 'ours' && op === 'all'
          ? p.errors === 0 && p.notSent === 0 && p.latency.percentile(0.99) < 10
            ? 'p99 < 10 ms: PASS'
            : 'p99 < 10 ms: FAIL'
          : '';
      rows.push([
        side,
        op === 'all' ? 'get+list' : op === 'list' ? `list (${o.perPage})` : 'get',
        int(p.ok + p.errors),
        int(p.notSent),
        int(p.rate),
        ms(p.latency.percentile(0.5)),
        ms(p.latency.percentile(0.99)),
        ms(p.latency.percentile(0.999)),
        ms(p.latency.max()),
        p.errors === 0 ? '0' : `${int(p.errors)} (${p.errorSummary()})`,
        verdict,
      ]);
    }
  }
  return [
    `Fixed rate (open loop) — ${TITLES[r.backend]}, ${int(o.rate)} req/s for ${o.rateSeconds} s, get and list alternating over ${int(r.rows)} records; latency from each request's scheduled send time`,
    '',
    table(
      [
        'side',
        'operation',
        'sent',
        'not sent',
        'ok req/s',
        'p50 ms',
        'p99 ms',
        'p99.9 ms',
        'max ms',
        'non-2xx',
        'target',
      ],
      rows,
      [0, 1, 10],
    ),
    `  client send lag (max): ours ${ms(fr.ours.maxSendLagMs)} ms, baseline ${ms(fr.baseline.maxSendLagMs)} ms`,
    ...(['ours', 'baseline'] as const)
      .filter((side) => fr[side].all.rate < 0.95 * o.rate)
      .map(
        (side) =>
          `  ! ${side} could not keep up: served ${int(fr[side].all.rate)} of ${int(o.rate)} req/s offered; its latencies are mostly queueing` +
          (fr[side].all.notSent > 0
            ? `, and ${int(fr[side].all.notSent)} requests were not sent (${int(FIXED_RATE_MAX_IN_FLIGHT)} already in flight)`
            : ''),
      ),
  ].join('\n');
}

function profileReport(r: BackendResult): string {
  const p = r.profile!;
  const lines = [
    `CPU profile of Outpost (${r.backend}), ${int(p.busyMs)} ms on-CPU (idle excluded), self time:`,
  ];
  lines.push(
    '',
    table(
      ['where', 'ms', '%'],
      p.byPlace.map((x) => [x.place, int(x.ms), ((100 * x.ms) / p.busyMs).toFixed(1)]),
    ),
  );
  lines.push(
    '',
    table(
      ['function', 'ms', '%'],
      p.byFunction.map((x) => [x.name, int(x.ms), ((100 * x.ms) / p.busyMs).toFixed(1)]),
    ),
  );
  lines.push('', `profiles: ${r.profileFiles.join(', ')}`);
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------

export async function main(argv: string[]): Promise<number> {
  let o: Options;
  try {
    o = parseOptions(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    if (err.message) process.stderr.write(`api-crud: ${err.message}\n\n`);
    process.stderr.write(USAGE);
    return err.message ? 2 : 0;
  }
  installCleanupHandlers();
  try {
    if (o.backends.includes('postgres')) {
      try {
        await withPg(o.pgUrl, (c) => c.query('select 1'));
      } catch (err) {
        throw new Error(
          `PostgreSQL at ${o.pgUrl.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@')} is not reachable (${(err as Error).message}); ` +
            'start it, pass --pg-url, or use --backend sqlite',
        );
      }
    }
    // Profiles are kept after the run (open them in Chrome DevTools); nothing else is.
    const profDir = o.cpuProf ? mkdtempSync(join(tmpdir(), 'outpost-bench-prof-')) : undefined;
    log(
      `api-crud: ${o.backends.join(' + ')}, ${o.concurrency} connections, ${o.seconds} s phases, ${o.warmup} s warm-up` +
        (o.cpuProf ? ' (CPU profiling on: numbers are lower than usual)' : ''),
    );
    const loadAtStart = loadavg()[0];
    const results: BackendResult[] = [];
    for (const backend of o.backends) results.push(await runBackend(o, backend, profDir));

    log('');
    log(
      `machine: ${availableParallelism()} CPUs shared by client, servers and database; ` +
        `1-min load average ${loadAtStart.toFixed(1)} at start, ${loadavg()[0].toFixed(1)} at end`,
    );
    log('');
    for (const r of results) {
      log(backendTable(o, r));
      log('');
      if (r.fixedRate) {
        log(fixedRateTable(o, r));
        log('');
      }
    }
    for (const r of results) {
      if (r.profile) {
        log(profileReport(r));
        log('');
      }
    }
    const failed = results.some(
      (r) =>
        r.ops.some((x) => x.ours.errors + x.baseline.errors > 0) ||
        (r.fixedRate && r.fixedRate.ours.all.errors + r.fixedRate.baseline.all.errors > 0),
    );
    if (failed)
      log(
        'Some phases had failed requests (see above): these numbers are not a clean measurement.',
      );
    return failed ? 1 : 0;
  } catch (err) {
    if (!(err instanceof Interrupted)) throw err;
    process.stderr.write('interrupted: no report\n');
    return 130;
  } finally {
    await runCleanups();
  }
}
