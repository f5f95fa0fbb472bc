/**
 * TCP throughput (iperf3) and new connections per second through a proxied TCP application
 * (Outpost's L4 proxy), beside HAProxy in `mode tcp` (one thread — the main comparison, as Node
 * runs JavaScript on one thread — and its default thread count) and the same traffic sent
 * directly on loopback, in one run with the sides alternating round by round. See bench/README.md
 * ("l4") for the method.
 *
 *   npm run bench -- l4 [--seconds 5] [--rounds 3] [--warmup 1] [--streams 1] [--concurrency 32]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, constants as fsConstants, writeFileSync } from 'node:fs';
import net from 'node:net';
import { availableParallelism, loadavg } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { int, ratio, table } from './lib/format.ts';
import {
  abortSignal,
  installCleanupHandlers,
  Interrupted,
  onCleanup,
  runCleanups,
  spawnNode,
  tempDir,
  throwIfInterrupted,
} from './lib/procs.ts';
import { intOption, UsageError, parseOrExit } from './lib/args.ts';

export const description =
  'TCP throughput (iperf3) and new connections/s through a proxied TCP app: Outpost vs HAProxy mode tcp vs direct';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUTPOST_BIN = join(ROOT, 'bin', 'outpost.js');
const TOOLS = { iperf3: 'iperf3', haproxy: 'haproxy' } as const;
const EXTRA_PATH_DIRS = ['/usr/sbin', '/sbin', '/usr/local/sbin'];
const PAYLOAD = 64;
/** Client source addresses for the connection test, so that TIME_WAIT never runs out of ports. */
const SOURCES = Array.from({ length: 32 }, (_, i) => `127.0.7.${i + 1}`);

const USAGE = `usage: npm run bench -- l4 [options]

  --seconds N       length of each measured run (default 5)
  --rounds N        rounds; each runs every side once, in the same order (default 3)
  --warmup N        unmeasured run per side and test before the first round, seconds (default 1; 0 = none)
  --streams N       parallel iperf3 streams (iperf3 -P, default 1)
  --concurrency N   connection loops of the new-connections test (default 32)

Needs iperf3 and haproxy (Debian packages of those names); installs them with apt-get when
missing and running as root, else exits with 2 and says what to install.
`;

interface Options {
  seconds: number;
  rounds: number;
  warmup: number;
  streams: number;
  concurrency: number;
}


function parseOptions(argv: string[]): Options | 'help' {
  const o: Options = { seconds: 5, rounds: 3, warmup: 1, streams: 1, concurrency: 32 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--help' || a === '-h') return 'help';
    else if (a === '--seconds') o.seconds = intOption(a, argv[++i], 1, 600);
    else if (a === '--rounds') o.rounds = intOption(a, argv[++i], 1, 50);
    else if (a === '--warmup') o.warmup = intOption(a, argv[++i], 0, 60);
    else if (a === '--streams') o.streams = intOption(a, argv[++i], 1, 16);
    else if (a === '--concurrency') o.concurrency = intOption(a, argv[++i], 1, 1024);
    else throw new UsageError(`unknown option ${a}`);
  }
  return o;
}

const log = (s: string) => process.stdout.write(`${s}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Tools and child processes
// ---------------------------------------------------------------------------------------------

function which(name: string): string | undefined {
  for (const dir of [...(process.env.PATH ?? '').split(delimiter), ...EXTRA_PATH_DIRS].filter(Boolean)) {
    try {
      accessSync(join(dir, name), fsConstants.X_OK);
      return join(dir, name);
    } catch {
      // not here
    }
  }
  return undefined;
}

function runToEnd(cmd: string, args: string[], timeoutMs: number, inherit = false): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: ['ignore', inherit ? 'inherit' : 'pipe', inherit ? 'inherit' : 'pipe'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    let out = '';
    child.stdout?.on('data', (d: Buffer) => (out += d));
    child.stderr?.on('data', (d: Buffer) => (out += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    const onAbort = () => child.kill('SIGTERM');
    abortSignal.addEventListener('abort', onAbort);
    child.once('error', (err) => {
      out += err.message;
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      abortSignal.removeEventListener('abort', onAbort);
      resolve({ code: code ?? -1, out });
    });
  });
}

async function ensureTools(): Promise<Record<keyof typeof TOOLS, string> | string> {
  let missing = Object.values(TOOLS).filter((t) => !which(t));
  if (missing.length > 0) {
    if (process.getuid?.() !== 0) return `missing: ${missing.join(', ')}. Install the Debian packages, e.g. as root: apt-get install -y ${missing.join(' ')}`;
    log(`missing ${missing.join(', ')}: running apt-get update && apt-get install -y ${missing.join(' ')}`);
    await runToEnd('apt-get', ['update'], 10 * 60_000, true);
    throwIfInterrupted();
    const r = await runToEnd('apt-get', ['install', '-y', '--no-install-recommends', ...missing], 15 * 60_000, true);
    throwIfInterrupted();
    missing = Object.values(TOOLS).filter((t) => !which(t));
    if (missing.length > 0) return `apt-get install exited with ${r.code}; still missing: ${missing.join(', ')}`;
  }
  return { iperf3: which('iperf3')!, haproxy: which('haproxy')! };
}

/** A long-running tool in its own process group, stopped on cleanup. */
function spawnTool(name: string, cmd: string, args: string[]): { proc: ChildProcess; output: () => string } {
  const proc = spawn(cmd, args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const keep = (d: Buffer) => {
    out = (out + d.toString()).slice(-16_384);
  };
  proc.stdout!.on('data', keep);
  proc.stderr!.on('data', keep);
  proc.once('error', (err) => keep(Buffer.from(`\n${name}: ${err.message}\n`)));
  const signal = (s: NodeJS.Signals) => {
    if (proc.exitCode !== null || proc.signalCode !== null || proc.pid === undefined) return;
    try {
      process.kill(-proc.pid, s);
    } catch {
      // already gone
    }
  };
  onCleanup(
    `stop ${name}`,
    async () => {
      signal('SIGTERM');
      const exited = new Promise((r) => proc.once('exit', r));
      if (!(await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]))) signal('SIGKILL');
    },
    () => signal('SIGKILL'),
  );
  return { proc, output: () => out };
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}

async function waitForPort(name: string, port: number, output: () => string): Promise<void> {
  const until = Date.now() + 15_000;
  while (!(await canConnect(port))) {
    throwIfInterrupted();
    if (Date.now() > until) throw new Error(`${name} does not accept connections on ${port}:\n${output()}`);
    await sleep(50);
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

// ---------------------------------------------------------------------------------------------
// The peers
// ---------------------------------------------------------------------------------------------

/** Echoes and passes the client's FIN on: one exchange per connection in the connection test. */
const ECHO_SOURCE = `import net from 'node:net';
const server = net.createServer({ allowHalfOpen: true, noDelay: true }, (s) => {
  s.on('error', () => s.destroy());
  s.pipe(s);
});
server.maxConnections = 100000;
server.listen(Number(process.argv[2]), '127.0.0.1', 4096, () => process.stdout.write('echo listening\\n'));
process.on('SIGTERM', () => process.exit(0));
`;

function haproxyConfig(threads: number | undefined, routes: [number, number][]): string {
  return [
    'global',
    '  maxconn 8000',
    ...(threads ? [`  nbthread ${threads}`] : []),
    'defaults',
    '  mode tcp',
    '  timeout connect 5s',
    '  timeout client 60s',
    '  timeout server 60s',
    ...routes.flatMap(([front, back], i) => [`listen l${i}`, `  bind 127.0.0.1:${front}`, `  server s 127.0.0.1:${back}`]),
    '',
  ].join('\n');
}

interface Outpost {
  api: string;
  token: string;
}

async function api(o: Outpost, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${o.api}${path}`, {
    method,
    headers: { authorization: `Bearer ${o.token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(15_000),
  });
  const json = (await res.json()) as { success: boolean; result: any; errors: unknown };
  if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status} ${JSON.stringify(json.errors)}`);
  return json.result;
}

async function startOutpost(dataDir: string): Promise<Outpost> {
  const token = randomBytes(24).toString('hex');
  const accountId = randomBytes(16).toString('hex');
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('OUTPOST_') && k !== 'NODE_OPTIONS' && v !== undefined) env[k] = v;
  const child = await spawnNode('outpost', [OUTPOST_BIN, 'serve', '--api-port', '0', '--edge-port', '0', '--dns-port', '0', '--turn-port', '0', '--spectrum-bind-addresses', '127.0.0.1', '--data-dir', dataDir], {
    cwd: ROOT,
    env: { ...env, OUTPOST_API_TOKEN: token, OUTPOST_ACCOUNT_ID: accountId, OUTPOST_LOG_LEVEL: 'warn', OUTPOST_DDOS_DETECTION: 'false' /* its load is a flood to L4 detection */ },
    ready: /management API\s+http\s+(http:\/\/\S+\/client\/v4)/,
  });
  return { api: child.ready[1], token };
}

// ---------------------------------------------------------------------------------------------
// The two tests
// ---------------------------------------------------------------------------------------------

async function iperf(bin: string, port: number, seconds: number, streams: number): Promise<{ gbps: number; error?: string }> {
  const r = await runToEnd(bin, ['-c', '127.0.0.1', '-p', String(port), '-t', String(seconds), '-P', String(streams), '-J'], (seconds + 30) * 1000);
  throwIfInterrupted();
  try {
    const j = JSON.parse(r.out) as { end?: { sum_received?: { bits_per_second?: number } }; error?: string };
    if (j.error) return { gbps: NaN, error: j.error };
    return { gbps: (j.end?.sum_received?.bits_per_second ?? NaN) / 1e9 };
  } catch {
    return { gbps: NaN, error: r.out.slice(0, 300) || `iperf3 exited with ${r.code}` };
  }
}

/**
 * Closed-loop connection churn: each loop connects, sends 64 bytes, reads them back, closes,
 * and starts over. Counts completed exchanges per second.
 */
async function connectionRate(port: number, seconds: number, concurrency: number): Promise<{ rate: number; errors: Map<string, number> }> {
  const payload = randomBytes(PAYLOAD);
  const errors = new Map<string, number>();
  let done = 0;
  let n = 0;
  const started = performance.now();
  const deadline = started + seconds * 1000;
  const once = () =>
    new Promise<void>((resolve) => {
      let got = 0;
      const s = net.connect({ port, host: '127.0.0.1', localAddress: SOURCES[n++ % SOURCES.length], allowHalfOpen: true, noDelay: true }, () => s.write(payload));
      const timer = setTimeout(() => s.destroy(new Error('timeout')), 10_000);
      s.on('data', (d: Buffer) => {
        got += d.length;
        if (got >= PAYLOAD) s.end();
      });
      s.on('error', (err: NodeJS.ErrnoException) => errors.set(err.code ?? err.message, (errors.get(err.code ?? err.message) ?? 0) + 1));
      s.on('close', () => {
        clearTimeout(timer);
        if (got === PAYLOAD) done++;
        else if (!s.errored) errors.set('short answer', (errors.get('short answer') ?? 0) + 1);
        resolve();
      });
    });
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline && !abortSignal.aborted) await once();
    }),
  );
  throwIfInterrupted();
  return { rate: done / ((performance.now() - started) / 1000), errors };
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

interface Side {
  key: string;
  label: string;
  iperfPort: number;
  echoPort: number;
  gbps: number[];
  rates: number[];
  errors: Map<string, number>;
}

function median(xs: number[]): number {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

const gb = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : '–');
const span = (xs: number[], f: (n: number) => string) => (xs.length ? `${f(Math.min(...xs))}–${f(Math.max(...xs))}` : '–');

function report(sides: Side[]): string {
  const ref = sides.find((s) => s.key === 'haproxy1')!;
  const refG = median(ref.gbps);
  const refR = median(ref.rates);
  const rows = sides.map((s) => {
    const g = median(s.gbps);
    const r = median(s.rates);
    const errs = [...s.errors].map(([k, v]) => `${k}×${v}`).join(' ') || '0';
    return [s.label, gb(g), span(s.gbps, gb), ratio(g, refG), int(r), span(s.rates, int), ratio(r, refR), errs];
  });
  return table(['side', 'Gbit/s', 'Gbit/s min–max', 'vs haproxy 1t', 'conn/s', 'conn/s min–max', 'vs haproxy 1t', 'errors'], rows);
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

export async function main(argv: string[]): Promise<number> {
  const o = parseOrExit(argv, parseOptions, USAGE);
  if (typeof o === 'number') return o;
  installCleanupHandlers();
  try {
    return await run(o);
  } catch (err) {
    if (err instanceof Interrupted) {
      process.stderr.write('l4: interrupted: no report\n');
      return 130;
    }
    process.stderr.write(`l4: ${(err as Error).stack ?? String(err)}\n`);
    return 1;
  } finally {
    await runCleanups();
  }
}

async function run(o: Options): Promise<number> {
  const tools = await ensureTools();
  if (typeof tools === 'string') {
    process.stderr.write(`l4: ${tools}\n`);
    return 2;
  }
  const [iperfV, haproxyV] = await Promise.all([runToEnd(tools.iperf3, ['--version'], 5000), runToEnd(tools.haproxy, ['-v'], 5000)]);
  log(`l4: ${o.rounds} rounds × ${o.seconds} s per side and test, ${o.warmup} s warm-up; iperf3 -P ${o.streams}; ${o.concurrency} connection loops`);
  log(`tools: ${iperfV.out.split('\n')[0].trim()} | ${haproxyV.out.split('\n')[0].trim()} | node ${process.version}`);
  const dir = tempDir('outpost-bench-l4-').path;

  // Origins: an iperf3 server and an echo server, shared by every side.
  const iperfPort = await freePort();
  const iperfServer = spawnTool('iperf3 server', tools.iperf3, ['-s', '-p', String(iperfPort)]);
  await waitForPort('iperf3 server', iperfPort, iperfServer.output);
  const echoPort = await freePort();
  writeFileSync(join(dir, 'echo.mjs'), ECHO_SOURCE);
  await spawnNode('echo origin', [join(dir, 'echo.mjs'), String(echoPort)], { cwd: dir, ready: /echo listening/ });

  // Outpost: one app per origin.
  const outpost = await startOutpost(join(dir, 'outpost-data'));
  const account = (await api(outpost, 'GET', '/accounts'))[0].id as string;
  const zone = await api(outpost, 'POST', '/zones', { name: 'l4bench.example.com', account: { id: account } });
  const outPorts = [await freePort(), await freePort()];
  for (const [i, origin] of [iperfPort, echoPort].entries()) {
    await api(outpost, 'POST', `/zones/${zone.id}/spectrum/apps`, { protocol: `tcp/${outPorts[i]}`, dns: { type: 'CNAME', name: `p${i}.l4bench.example.com` }, origin_direct: [`tcp://127.0.0.1:${origin}`] });
  }

  // HAProxy, one thread and its default.
  const sides: Side[] = [
    { key: 'direct', label: 'direct (loopback)', iperfPort, echoPort, gbps: [], rates: [], errors: new Map() },
    { key: 'outpost', label: 'outpost', iperfPort: outPorts[0], echoPort: outPorts[1], gbps: [], rates: [], errors: new Map() },
  ];
  for (const [key, threads, label] of [
    ['haproxy1', 1, 'haproxy nbthread 1'],
    ['haproxyN', undefined, `haproxy default (${availableParallelism()} threads)`],
  ] as const) {
    const ports = [await freePort(), await freePort()];
    const cfg = join(dir, `${key}.cfg`);
    writeFileSync(cfg, haproxyConfig(threads, [[ports[0], iperfPort], [ports[1], echoPort]]));
    const h = spawnTool(label, tools.haproxy, ['-f', cfg, '-db']);
    await waitForPort(label, ports[1], h.output);
    sides.push({ key, label, iperfPort: ports[0], echoPort: ports[1], gbps: [], rates: [], errors: new Map() });
  }

  // Every side answers before anything is measured.
  for (const s of sides) {
    const r = await connectionRate(s.echoPort, 0.2, 1);
    if (r.rate === 0) throw new Error(`${s.label} does not echo: ${[...r.errors.keys()].join(', ')}`);
  }
  if (o.warmup > 0) {
    log('warm-up…');
    for (const s of sides) {
      await iperf(tools.iperf3, s.iperfPort, o.warmup, o.streams);
      await connectionRate(s.echoPort, o.warmup, o.concurrency);
    }
  }
  const load = loadavg()[0];
  for (let round = 1; round <= o.rounds; round++) {
    const line: string[] = [];
    for (const s of sides) {
      const t = await iperf(tools.iperf3, s.iperfPort, o.seconds, o.streams);
      if (t.error) s.errors.set(`iperf3: ${t.error}`, (s.errors.get(`iperf3: ${t.error}`) ?? 0) + 1);
      s.gbps.push(t.gbps);
      const c = await connectionRate(s.echoPort, o.seconds, o.concurrency);
      for (const [k, v] of c.errors) s.errors.set(k, (s.errors.get(k) ?? 0) + v);
      s.rates.push(c.rate);
      line.push(`${s.key} ${gb(t.gbps)} Gbit/s ${int(c.rate)} conn/s`);
    }
    log(`round ${round}: ${line.join(' | ')}`);
  }
  log('');
  log(`machine: ${availableParallelism()} CPUs shared by the load, the proxy and the origins; 1-min load average ${load.toFixed(1)} at the first round, ${loadavg()[0].toFixed(1)} at the end`);
  log('');
  log(report(sides));
  const out = sides.find((s) => s.key === 'outpost')!;
  const ref = sides.find((s) => s.key === 'haproxy1')!;
  const tg = median(out.gbps) / median(ref.gbps);
  const tr = median(out.rates) / median(ref.rates);
  log('');
  log(`targets vs haproxy nbthread 1: throughput ${tg.toFixed(2)}x (≥ 0.9: ${tg >= 0.9 ? 'met' : 'not met'}), new connections/s ${tr.toFixed(2)}x (≥ 0.5: ${tr >= 0.5 ? 'met' : 'not met'})`);
  return sides.some((s) => s.errors.size > 0) ? 1 : 0;
}
