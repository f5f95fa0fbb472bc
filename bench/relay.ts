/**
 * TURN relay: relayed messages/s (and loss) and allocations/s, Outpost's relay beside coturn
 * started with the same shared secret, in the same run, sides alternating. The load generator is
 * coturn's `turnutils_uclient`; a second allocation measure uses a small STUN client in this
 * process. See bench/README.md ("relay") for the method.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import dgram from 'node:dgram';
import { existsSync, readFileSync } from 'node:fs';
import net from 'node:net';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import {
  Attr,
  StunClass,
  StunMethod,
  TRANSPORT_UDP,
  attrRequestedTransport,
  attrString,
  attrUInt32,
  decodeErrorCode,
  decodeStun,
  decodeString,
  encodeStun,
  getAttribute,
  longTermKey,
  newTransactionId,
  type OutgoingAttribute,
} from '../src/areas/calls/stun.ts';
import { int, ratio, table } from './lib/format.ts';
import { startOutpost } from './lib/outpost.ts';
import {
  abortSignal,
  installCleanupHandlers,
  Interrupted,
  onCleanup,
  runCleanups,
  tempDir,
  throwIfInterrupted,
} from './lib/procs.ts';
import { intOption, UsageError } from './lib/args.ts';

export const description =
  'TURN relayed msgs/s, loss and allocations/s with turnutils_uclient: Outpost relay vs coturn (same shared secret)';

const UCLIENT = '/usr/bin/turnutils_uclient';
const TURNSERVER = '/usr/bin/turnserver';
const REALM = 'outpost.test';
/** Relayed-address ranges, disjoint so the two servers never compete for a port. */
const OUTPOST_RELAY_PORTS = '10000-29999';
const COTURN_RELAY_PORTS = [40000, 59999] as const;

const USAGE = `usage: npm run bench -- relay [options]

  --rounds N          rounds; each runs every measurement on both sides, order alternating (default 2)
  --clients N         turnutils_uclient -m per load process (default 20)
  --messages N        turnutils_uclient -n per session (default 4000)
  --length N          message length in bytes, -l (default 120)
  --interval MS       per-session send interval, -z (default 0 = as fast as the client loops)
  --procs N           turnutils_uclient processes in parallel for the relay load (default 2)
  --no-tcp            skip the TCP relay load (UDP only)
  --paced-messages N  -n of an extra UDP run at -z 20 (50 msgs/s per session): loss at a fixed
                      offered load rather than at saturation (default 500; 0 = skip)
  --alloc-procs N     parallel turnutils_uclient processes for the allocation run (default 16)
  --alloc-clients N   -m of each of them (default 20; -y -c, so N allocations each)
  --alloc-seconds N   length of the in-bench STUN client allocation run (default 5; 0 = skip)
  --alloc-loops N     concurrent allocate/release loops of that client (default 32)
  --coturn-threads N  coturn --relay-threads (default: coturn's own default, one per CPU)

Needs coturn (Debian package 'coturn': turnserver and turnutils_uclient); installs it with
apt-get when missing and running as root.
`;

interface Options {
  rounds: number;
  clients: number;
  messages: number;
  length: number;
  interval: number;
  procs: number;
  tcp: boolean;
  pacedMessages: number;
  allocProcs: number;
  allocClients: number;
  allocSeconds: number;
  allocLoops: number;
  coturnThreads?: number;
}


function parseOptions(argv: string[]): Options | 'help' {
  const o: Options = {
    rounds: 2,
    clients: 20,
    messages: 4000,
    length: 120,
    interval: 0,
    procs: 2,
    tcp: true,
    pacedMessages: 500,
    allocProcs: 16,
    allocClients: 20,
    allocSeconds: 5,
    allocLoops: 32,
  };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
    const value = (): string | undefined => inline ?? argv[++i];
    switch (flag) {
      case '--help':
      case '-h':
        return 'help';
      case '--rounds':
        o.rounds = intOption(flag, value(), 1, 50);
        break;
      case '--clients':
        o.clients = intOption(flag, value(), 1, 1000);
        break;
      case '--messages':
        o.messages = intOption(flag, value(), 10, 1_000_000);
        break;
      case '--length':
        o.length = intOption(flag, value(), 16, 1400);
        break;
      case '--interval':
        o.interval = intOption(flag, value(), 0, 1000);
        break;
      case '--procs':
        o.procs = intOption(flag, value(), 1, 32);
        break;
      case '--no-tcp':
        o.tcp = false;
        break;
      case '--paced-messages':
        o.pacedMessages = intOption(flag, value(), 0, 100_000);
        break;
      case '--alloc-procs':
        o.allocProcs = intOption(flag, value(), 1, 200);
        break;
      case '--alloc-clients':
        o.allocClients = intOption(flag, value(), 2, 500);
        break;
      case '--alloc-seconds':
        o.allocSeconds = intOption(flag, value(), 0, 600);
        break;
      case '--alloc-loops':
        o.allocLoops = intOption(flag, value(), 1, 1000);
        break;
      case '--coturn-threads':
        o.coturnThreads = intOption(flag, value(), 1, 64);
        break;
      default:
        throw new UsageError(`unknown option ${argv[i]}`);
    }
  }
  return o;
}

const log = (s: string) => process.stdout.write(`${s}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

// ---------------------------------------------------------------------------------------------
// Tools and processes
// ---------------------------------------------------------------------------------------------

function ensureCoturn(): string | undefined {
  if (existsSync(UCLIENT) && existsSync(TURNSERVER)) return undefined;
  if (process.getuid?.() !== 0)
    return `coturn is missing: install it as root (apt-get install -y coturn)`;
  log('installing coturn (apt-get)…');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
  const r = spawnSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'coturn'], {
    stdio: 'inherit',
    env,
  });
  if (r.status !== 0 || !existsSync(UCLIENT)) return 'apt-get install coturn failed';
  return undefined;
}

interface Tool {
  proc: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
  kill: () => void;
}

/** Spawns a non-Node child; it is killed on cleanup (and at exit) if still running. */
function spawnTool(
  name: string,
  cmd: string,
  args: string[],
  onLine?: (line: string) => void,
): Tool {
  const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let pending = '';
  const onData = (d: Buffer) => {
    const s = d.toString('utf8');
    out += s;
    if (out.length > 256 * 1024) out = out.slice(-128 * 1024);
    if (!onLine) return;
    pending += s;
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const l of lines) onLine(l);
  };
  proc.stdout!.on('data', onData);
  proc.stderr!.on('data', onData);
  let done = false;
  const exited = new Promise<number | null>((resolve) => {
    proc.once('close', (code) => {
      done = true;
      resolve(code);
    });
    proc.once('error', (err) => {
      out += `\n[spawn error] ${err.message}\n`;
      done = true;
      resolve(null);
    });
  });
  const kill = () => {
    if (!done && proc.pid !== undefined) {
      try {
        proc.kill('SIGKILL');
      } catch {
        // already gone
      }
    }
  };
  const release = onCleanup(
    `kill ${name} (pid ${proc.pid})`,
    async () => {
      kill();
      await exited;
    },
    kill,
  );
  void exited.then(() => release());
  return { proc, output: () => out, exited, kill };
}

/** A port free on 127.0.0.1 for both UDP and TCP right now. */
async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const udp = dgram.createSocket('udp4');
    const port = await new Promise<number>((resolve, reject) => {
      udp.once('error', reject);
      udp.bind(0, '127.0.0.1', () => resolve(udp.address().port));
    });
    const ok = await new Promise<boolean>((resolve) => {
      const srv = net.createServer();
      srv.once('error', () => resolve(false));
      srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
    });
    udp.close();
    if (ok) return port;
  }
  throw new Error('no free port found');
}

/** One STUN Binding over UDP; true when answered within `timeoutMs`. */
function stunPing(port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = dgram.createSocket('udp4');
    const tid = newTransactionId();
    const finish = (ok: boolean) => {
      clearTimeout(timer);
      sock.close();
      resolve(ok);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    sock.on('message', (buf) => {
      const r = decodeStun(buf);
      if (r.ok && r.message.transactionId.equals(tid))
        finish(r.message.cls === StunClass.SuccessResponse);
    });
    sock.bind(0, '127.0.0.1', () =>
      sock.send(
        encodeStun({
          method: StunMethod.Binding,
          cls: StunClass.Request,
          transactionId: tid,
          attributes: [],
        }),
        port,
        '127.0.0.1',
      ),
    );
  });
}

// ---------------------------------------------------------------------------------------------
// The two servers
// ---------------------------------------------------------------------------------------------

interface Side {
  key: 'outpost' | 'coturn';
  label: string;
  port: number;
  pid: number;
  crashed: () => boolean;
}

/** CPU seconds (user + system, all threads) a process has used so far, from /proc. */
function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Fields 14 and 15 of stat(5), counted from after the command name (which is field 2).
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return NaN;
  }
}

const CLOCK_TICKS = 100;

interface Credential {
  username: string;
  credential: string;
  secret: string;
}

async function startRelayOutpost(dataDir: string): Promise<{ side: Side; cred: Credential }> {
  const { child, accountId, api, call } = await startOutpost(dataDir, {
    args: ['--relay-allow-loopback', '--relay-quota', '1000000', '--relay-ports', OUTPOST_RELAY_PORTS],
    ready: /TURN\/STUN relay\s+udp(?:\+tcp)?\s+127\.0\.0\.1:(\d+)/,
  });
  const apiUrl = api.replace(/\/client\/v4$/, '');
  const port = Number(child.ready[1]);
  const { uid, key: secret } = await call<{ uid: string; key: string }>('POST', `/accounts/${accountId}/calls/turn_keys`, { name: 'bench' });
  const gen = await fetch(`${apiUrl}/v1/turn/keys/${uid}/credentials/generate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ttl: 4 * 3600 }),
  });
  if (gen.status !== 201)
    throw new Error(`credential generate failed: ${gen.status} ${await gen.text()}`);
  const ice = (
    (await gen.json()) as { iceServers: { urls: string[]; username: string; credential: string } }
  ).iceServers;
  if (!ice.urls.includes(`turn:127.0.0.1:${port}?transport=udp`)) {
    throw new Error(`the generated URLs do not name the relay port ${port}: ${ice.urls.join(' ')}`);
  }
  return {
    side: {
      key: 'outpost',
      label: 'Outpost relay',
      port,
      pid: child.proc.pid ?? 0,
      crashed: child.crashed,
    },
    cred: { username: ice.username, credential: ice.credential, secret },
  };
}

async function startCoturn(
  dir: string,
  secret: string,
  threads: number | undefined,
): Promise<Side> {
  const port = await freePort();
  const args = [
    '-n',
    '--log-file=stdout',
    '--listening-ip=127.0.0.1',
    `--listening-port=${port}`,
    '--relay-ip=127.0.0.1',
    `--min-port=${COTURN_RELAY_PORTS[0]}`,
    `--max-port=${COTURN_RELAY_PORTS[1]}`,
    '--use-auth-secret',
    `--static-auth-secret=${secret}`,
    `--realm=${REALM}`,
    '--allow-loopback-peers',
    '--no-cli',
    '--no-tls',
    '--no-dtls',
    `--userdb=${join(dir, 'turndb')}`,
    `--pidfile=${join(dir, 'turnserver.pid')}`,
    ...(threads ? [`--relay-threads=${threads}`] : []),
  ];
  const tool = spawnTool('turnserver', TURNSERVER, args);
  let exited = false;
  void tool.exited.then(() => (exited = true));
  const deadline = Date.now() + 15_000;
  while (!(await stunPing(port))) {
    if (exited) throw new Error(`turnserver exited during start:\n${tool.output().slice(-3000)}`);
    if (Date.now() > deadline)
      throw new Error(`turnserver did not answer STUN on ${port}:\n${tool.output().slice(-3000)}`);
    throwIfInterrupted();
    await sleep(100);
  }
  const label = `coturn ${coturnVersion()}${threads ? ` (${threads} relay thread${threads > 1 ? 's' : ''})` : ''}`;
  return { key: 'coturn', label, port, pid: tool.proc.pid ?? 0, crashed: () => exited };
}

function coturnVersion(): string {
  const r = spawnSync(TURNSERVER, ['--version'], { encoding: 'utf8', timeout: 5000 });
  return (r.stdout || r.stderr || '').trim().split('\n').pop()?.trim() ?? '';
}

// ---------------------------------------------------------------------------------------------
// turnutils_uclient runs
// ---------------------------------------------------------------------------------------------

interface Progress {
  at: number;
  sessions: number;
  sent: number;
  received: number;
}

interface ClientRun {
  code: number | null;
  spawnedAt: number;
  /** When "Total connect time" was printed (every allocation and channel bind done). */
  connectedAt?: number;
  progress: Progress[];
  output: string;
  killedByUs: boolean;
}

/**
 * Runs one turnutils_uclient. `stopWhen` is asked on every progress line; true kills the client
 * (its own end-of-run wait adds ~10 s of idling the numbers do not need).
 */
function runUclient(
  args: string[],
  stopWhen: (run: ClientRun) => boolean,
  timeoutMs: number,
): Promise<ClientRun> {
  const run: ClientRun = {
    code: null,
    spawnedAt: performance.now(),
    progress: [],
    output: '',
    killedByUs: false,
  };
  let tool: Tool | undefined = undefined;
  const onLine = (line: string) => {
    if (run.connectedAt === undefined && line.includes('Total connect time'))
      run.connectedAt = performance.now();
    const m = /start_mclient: msz=(\d+), tot_send_msgs=(\d+), tot_recv_msgs=(\d+)/.exec(line);
    if (m) {
      run.progress.push({
        at: performance.now(),
        sessions: Number(m[1]),
        sent: Number(m[2]),
        received: Number(m[3]),
      });
      if (stopWhen(run) && tool) {
        run.killedByUs = true;
        tool.kill();
      }
    }
  };
  tool = spawnTool('turnutils_uclient', UCLIENT, args, onLine);
  const t = tool;
  // On SIGINT/SIGTERM the registered cleanups kill every client.
  const timer = setTimeout(() => t.kill(), timeoutMs);
  return t.exited.then((code) => {
    clearTimeout(timer);
    run.code = code;
    run.output = t.output();
    return run;
  });
}

interface RelayResult {
  /** Delivered messages per second during the steady part of the run (all processes). */
  rate: number;
  sent: number;
  received: number;
  planned: number;
  ok: boolean;
  note?: string;
}

/**
 * `procs` clients in parallel, each `-y -m clients -n messages -l length -z interval`. The rate is
 * the slope of the received count between the first progress line with traffic and the last one
 * before the count stopped growing, per process, summed. Loss is counted after the client has
 * sent everything and its received count stood still for two progress lines.
 */
async function relayRun(
  o: Options,
  side: Side,
  cred: Credential,
  transport: 'udp' | 'tcp',
): Promise<RelayResult> {
  const args = [
    ...(transport === 'tcp' ? ['-t'] : []),
    '-y',
    '-m',
    String(o.clients),
    '-n',
    String(o.messages),
    '-l',
    String(o.length),
    '-z',
    String(o.interval),
    '-p',
    String(side.port),
    '-u',
    cred.username,
    '-w',
    cred.credential,
    '127.0.0.1',
  ];
  // Done when nothing moved for two progress lines after traffic started (the client has sent
  // what it could: over TCP it drops messages itself when the connection backs up).
  const settled = (run: ClientRun): boolean => {
    const p = run.progress;
    if (p.length < 3 || p[p.length - 1].sent === 0) return false;
    const [a, b, c] = p.slice(-3);
    return a.sent === c.sent && a.received === b.received && b.received === c.received;
  };
  const timeoutMs = 60_000 + o.messages * Math.max(o.interval, 1) * 2;
  const runs = await Promise.all(
    Array.from({ length: o.procs }, () => runUclient(args, settled, timeoutMs)),
  );
  let rate = 0;
  let sent = 0;
  let received = 0;
  let planned = 0;
  let ok = true;
  const notes: string[] = [];
  for (const run of runs) {
    const p = run.progress;
    planned += maxSessions(run) * o.messages;
    const last = p[p.length - 1];
    sent += last?.sent ?? 0;
    received += last?.received ?? 0;
    if (!run.killedByUs && run.code !== 0) {
      ok = false;
      notes.push(`client exit ${run.code}: ${lastLines(run.output)}`);
    }
    const first = p.findIndex((x) => x.received > 0);
    let end = p.length - 1;
    while (end > 0 && p[end].received === p[end - 1].received) end--;
    // The line at `end` is the first one showing the final count: traffic ended before it.
    const stop = end - 1;
    if (first < 0 || stop <= first) {
      notes.push('too few progress lines during traffic for a rate (use more --messages)');
      continue;
    }
    rate += ((p[stop].received - p[first].received) / (p[stop].at - p[first].at)) * 1000;
  }
  return { rate, sent, received, planned, ok, note: notes.join('; ') || undefined };
}

function maxSessions(run: ClientRun): number {
  return run.progress.reduce((m, p) => Math.max(m, p.sessions), 0);
}

function lastLines(output: string): string {
  return output
    .trim()
    .split('\n')
    .filter((l) => !/Protocol not supported/.test(l))
    .slice(-3)
    .join(' | ');
}

interface AllocResult {
  allocations: number;
  seconds: number;
  rate: number;
  failures: number;
  note?: string;
}

/**
 * `allocProcs` clients started together, each `-y -c -m allocClients -n 1`: every client makes
 * allocClients allocations (in pairs, each with a channel bind to its partner) and then prints
 * "Total connect time". Allocations/s = all allocations / time until the last client got there.
 * turnutils_uclient pauses between pairs, so one process alone cannot load a server.
 */
async function allocRun(o: Options, side: Side, cred: Credential): Promise<AllocResult> {
  const args = [
    '-y',
    '-c',
    '-m',
    String(o.allocClients),
    '-n',
    '1',
    '-z',
    '0',
    '-p',
    String(side.port),
    '-u',
    cred.username,
    '-w',
    cred.credential,
    '127.0.0.1',
  ];
  const started = performance.now();
  const runs = await Promise.all(
    Array.from({ length: o.allocProcs }, () =>
      runUclient(args, (run) => run.connectedAt !== undefined && run.progress.length > 0, 60_000),
    ),
  );
  let allocations = 0;
  let failures = 0;
  let lastConnect = started;
  const notes = new Set<string>();
  for (const run of runs) {
    const sessions = maxSessions(run);
    if (run.connectedAt === undefined || sessions === 0) {
      failures++;
      notes.add(lastLines(run.output));
      continue;
    }
    allocations += sessions;
    lastConnect = Math.max(lastConnect, run.connectedAt);
  }
  const seconds = (lastConnect - started) / 1000;
  return {
    allocations,
    seconds,
    rate: seconds > 0 ? allocations / seconds : NaN,
    failures,
    note: [...notes].join('; ') || undefined,
  };
}

// ---------------------------------------------------------------------------------------------
// In-bench allocation client: Allocate (401) → Allocate (auth) → Refresh 0, one socket each
// ---------------------------------------------------------------------------------------------

class StunUdp {
  private readonly sock = dgram.createSocket('udp4');
  private waiting = new Map<string, (buf: Buffer) => void>();

  constructor(private readonly port: number) {
    this.sock.on('message', (buf) => {
      if (buf.length < 20) return;
      const id = buf.subarray(8, 20).toString('hex');
      const w = this.waiting.get(id);
      if (w) {
        this.waiting.delete(id);
        w(buf);
      }
    });
    this.sock.on('error', () => {});
  }

  open(address: string): Promise<void> {
    return new Promise((resolve) => this.sock.bind(0, address, () => resolve()));
  }

  close(): void {
    this.sock.close();
  }

  /** A request and its answer; retransmits twice at 500 ms, then gives up. */
  async request(
    method: number,
    attrs: OutgoingAttribute[],
    key?: Buffer,
  ): Promise<ReturnType<typeof decodeStun>> {
    const tid = newTransactionId();
    const buf = encodeStun(
      { method, cls: StunClass.Request, transactionId: tid, attributes: attrs },
      { integrityKey: key, fingerprint: true },
    );
    const id = tid.toString('hex');
    for (let attempt = 0; attempt < 3; attempt++) {
      const answer = new Promise<Buffer | null>((resolve) => {
        const timer = setTimeout(() => {
          this.waiting.delete(id);
          resolve(null);
        }, 500);
        this.waiting.set(id, (b) => {
          clearTimeout(timer);
          resolve(b);
        });
      });
      this.sock.send(buf, this.port, '127.0.0.1');
      const got = await answer;
      if (got) return decodeStun(got);
    }
    return { ok: false, reason: 'timeout' } as ReturnType<typeof decodeStun>;
  }
}

let sourceCounter = 0;

/**
 * A fresh client address for every allocation. coturn keeps a released allocation's 5-tuple for a
 * while (a new Allocate from it gets 437), and the kernel soon hands the same ephemeral port out
 * again; spreading the sources over 127.1.0.0/16 keeps every 5-tuple new.
 */
function nextSource(): string {
  const n = sourceCounter++ % 65_024;
  return `127.1.${(n >> 8) & 255}.${n & 255 || 1}`;
}

/** One allocation's life; undefined when it went through, else what went wrong. */
async function allocateOnce(port: number, cred: Credential): Promise<string | undefined> {
  const c = new StunUdp(port);
  await c.open(nextSource());
  const what = (step: string, r: ReturnType<typeof decodeStun>) =>
    r.ok
      ? `${step}: ${decodeErrorCode(getAttribute(r.message, Attr.ErrorCode))?.code ?? `class ${r.message.cls}`}`
      : `${step}: ${r.reason}`;
  try {
    const transport = attrRequestedTransport(TRANSPORT_UDP);
    const first = await c.request(StunMethod.Allocate, [transport]);
    if (!first.ok || decodeErrorCode(getAttribute(first.message, Attr.ErrorCode))?.code !== 401)
      return what('allocate without auth', first);
    const realm = decodeString(getAttribute(first.message, Attr.Realm)) ?? '';
    const nonce = decodeString(getAttribute(first.message, Attr.Nonce)) ?? '';
    const key = longTermKey(cred.username, realm, cred.credential);
    const auth = [
      attrString(Attr.Username, cred.username),
      attrString(Attr.Realm, realm),
      attrString(Attr.Nonce, nonce),
    ];
    const alloc = await c.request(StunMethod.Allocate, [transport, ...auth], key);
    if (!alloc.ok || alloc.message.cls !== StunClass.SuccessResponse)
      return what('allocate', alloc);
    const release = await c.request(
      StunMethod.Refresh,
      [attrUInt32(Attr.Lifetime, 0), ...auth],
      key,
    );
    if (!release.ok || release.message.cls !== StunClass.SuccessResponse)
      return what('refresh 0', release);
    return undefined;
  } finally {
    c.close();
  }
}

async function allocLoopRun(o: Options, side: Side, cred: Credential): Promise<AllocResult> {
  const started = performance.now();
  const until = started + o.allocSeconds * 1000;
  let allocations = 0;
  let failures = 0;
  const reasons = new Map<string, number>();
  await Promise.all(
    Array.from({ length: o.allocLoops }, async () => {
      while (performance.now() < until && !abortSignal.aborted) {
        const failed = await allocateOnce(side.port, cred);
        if (failed === undefined) allocations++;
        else {
          failures++;
          reasons.set(failed, (reasons.get(failed) ?? 0) + 1);
        }
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const note = reasons.size
    ? `${side.label}, in-bench client failures: ${[...reasons].map(([r, n]) => `${r} ×${n}`).join(', ')}`
    : undefined;
  return { allocations, seconds, rate: allocations / seconds, failures, note };
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

type Metric = 'udp' | 'tcp' | 'paced' | 'alloc' | 'allocLoop';

interface Samples {
  rate: number[];
  lossPct: number[];
  /** Messages the client dropped itself (TCP backpressure), % of those planned. */
  unsentPct: number[];
  /** Server CPU time per relayed message or per allocation, µs. */
  cpuUs: number[];
  failures: number;
  notes: string[];
}

export async function main(argv: string[]): Promise<number> {
  let opts: Options | 'help';
  try {
    opts = parseOptions(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`relay: ${err.message}\n\n${USAGE}`);
    return 2;
  }
  if (opts === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  const o = opts;
  installCleanupHandlers();
  try {
    const missing = ensureCoturn();
    if (missing) {
      process.stderr.write(`relay: ${missing}\n`);
      return 2;
    }
    return await run(o);
  } catch (err) {
    if (!(err instanceof Interrupted)) throw err;
    process.stderr.write('interrupted: no report\n');
    return 130;
  } finally {
    await runCleanups();
  }
}

async function run(o: Options): Promise<number> {
  const tmp = tempDir('outpost-bench-relay-');
  const loadAtStart = loadavg()[0];
  log(`relay: starting Outpost (node ${process.version}) and coturn on 127.0.0.1…`);
  const { side: outpost, cred } = await startRelayOutpost(join(tmp.path, 'outpost-data'));
  // coturn gets the key's secret: the very credential minted by Outpost's API works on both.
  const coturn = await startCoturn(tmp.path, cred.secret, o.coturnThreads);
  const sides = [outpost, coturn];
  log(
    `Outpost relay on :${outpost.port}; ${coturn.label} on :${coturn.port}; one credential from Outpost's API for both`,
  );

  const metrics: Metric[] = [
    'udp',
    ...(o.tcp ? (['tcp'] as const) : []),
    ...(o.pacedMessages > 0 ? (['paced'] as const) : []),
    'alloc',
    ...(o.allocSeconds > 0 ? (['allocLoop'] as const) : []),
  ];
  const paced: Options = { ...o, messages: o.pacedMessages, interval: 20 };
  const samples = new Map<string, Samples>();
  const slot = (side: Side, m: Metric) => {
    const k = `${side.key}:${m}`;
    if (!samples.has(k))
      samples.set(k, { rate: [], lossPct: [], unsentPct: [], cpuUs: [], failures: 0, notes: [] });
    return samples.get(k)!;
  };

  // Unmeasured warm-up of each side (JIT, socket buffers, relay port walk).
  for (const side of sides) {
    await relayRun({ ...o, procs: 1, clients: 4, messages: 500 }, side, cred, 'udp');
  }

  for (let round = 1; round <= o.rounds; round++) {
    const order = round % 2 === 1 ? sides : [...sides].reverse();
    const parts: string[] = [];
    for (const m of metrics) {
      for (const side of order) {
        throwIfInterrupted();
        if (side.crashed()) throw new Error(`${side.label} exited during the run`);
        const s = slot(side, m);
        const cpu0 = cpuSeconds(side.pid);
        const perUnit = (units: number) =>
          s.cpuUs.push(((cpuSeconds(side.pid) - cpu0) * 1e6) / units);
        if (m === 'udp' || m === 'tcp' || m === 'paced') {
          const r =
            m === 'paced'
              ? await relayRun(paced, side, cred, 'udp')
              : await relayRun(o, side, cred, m);
          perUnit(r.received);
          s.rate.push(r.rate);
          s.lossPct.push(r.sent > 0 ? (100 * (r.sent - r.received)) / r.sent : NaN);
          s.unsentPct.push(
            r.planned > 0 ? (100 * Math.max(0, r.planned - r.sent)) / r.planned : NaN,
          );
          if (!r.ok || r.sent === 0) s.failures++;
          if (r.note) s.notes.push(r.note);
          parts.push(`${side.key} ${m} ${int(r.rate)} msg/s`);
        } else {
          const r =
            m === 'alloc' ? await allocRun(o, side, cred) : await allocLoopRun(o, side, cred);
          perUnit(r.allocations);
          s.rate.push(r.rate);
          s.failures += r.failures;
          if (r.note) s.notes.push(r.note);
          parts.push(`${side.key} ${m} ${int(r.rate)}/s`);
        }
      }
    }
    log(`round ${round}/${o.rounds}: ${parts.join(', ')}`);
  }

  const names: Record<Metric, string> = {
    udp: `relayed msgs/s, UDP (${o.procs}× uclient -y -m ${o.clients} -n ${o.messages} -l ${o.length} -z ${o.interval})`,
    tcp: `relayed msgs/s, TCP (same, -t)`,
    paced: `relayed msgs/s, UDP paced (-z 20 -n ${o.pacedMessages}: ${int(o.procs * o.clients * 50)} msgs/s offered)`,
    alloc: `allocations/s (${o.allocProcs}× uclient -y -c -m ${o.allocClients} -n 1)`,
    allocLoop: `allocations/s (in-bench client, ${o.allocLoops} loops: 401, Allocate, Refresh 0)`,
  };
  const rows: string[][] = [];
  let failed = false;
  for (const m of metrics) {
    const a = slot(outpost, m);
    const b = slot(coturn, m);
    const ra = median(a.rate);
    const rb = median(b.rate);
    const pct = (xs: number[]) => (xs.length ? `${median(xs).toFixed(2)}%` : '');
    const cpu = (xs: number[]) => (xs.length ? median(xs).toFixed(1) : '');
    rows.push([
      names[m],
      int(ra),
      int(rb),
      ratio(ra, rb),
      pct(a.lossPct),
      pct(b.lossPct),
      pct(a.unsentPct),
      pct(b.unsentPct),
      cpu(a.cpuUs),
      cpu(b.cpuUs),
      `${a.failures}/${b.failures}`,
    ]);
    if (a.failures + b.failures > 0) failed = true;
  }
  log('');
  log(
    `machine: ${availableParallelism()} CPUs shared by the load generators and both servers; ` +
      `1-min load average ${loadAtStart.toFixed(1)} at start, ${loadavg()[0].toFixed(1)} at end`,
  );
  log(`median of ${o.rounds} round(s); sides alternate; ratio = Outpost / coturn (target ≥ 0.50x)`);
  log('');
  log(
    table(
      [
        'measure',
        'Outpost',
        'coturn',
        'ratio',
        'loss O',
        'loss c',
        'unsent O',
        'unsent c',
        'CPU µs O',
        'CPU µs c',
        'failed O/c',
      ],
      rows,
    ),
  );
  log(
    'loss = sent but not received, % of sent; unsent = dropped by the client itself (TCP backpressure), % of planned;\n' +
      'CPU µs = server CPU time (all threads, from /proc) per relayed message or per allocation over the whole run',
  );
  const notes = [...new Set([...samples.values()].flatMap((s) => s.notes))];
  if (notes.length) {
    log('');
    for (const n of notes.slice(0, 10)) log(`note: ${n}`);
  }
  if (failed)
    log(
      '\nSome runs failed or were cut short (see "failed runs"): these numbers are not a clean measurement.',
    );
  return failed ? 1 : 0;
}
