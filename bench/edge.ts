/**
 * Requests/s and p50/p99 latency of a small response (~100-byte body from a bare node:http
 * origin) through Outpost's edge with ten custom firewall rules installed, beside nginx and
 * caddy reverse-proxying the same origin, and the origin itself as a reference. Load comes from
 * wrk; sides alternate round by round and the median per side is reported. See bench/README.md
 * ("edge") for the method.
 *
 *   npm run bench -- edge [--seconds 5] [--rounds 3] [--warmup 1] [--connections 32] [--cpu-prof]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  accessSync,
  chmodSync,
  constants as fsConstants,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { intOption, UsageError } from './lib/args.ts';

export const description =
  'edge proxy req/s and p50/p99 for a ~100-byte origin response: Outpost (10 custom rules) vs nginx and caddy, via wrk';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUTPOST_BIN = join(ROOT, 'bin', 'outpost.js');
const ORIGIN_IP = '127.0.20.1';
const ORIGIN_PORT = 80;
const ZONE = 'edgebench.example.com';
const HOST = `www.${ZONE}`;
const RULE_PHASE = 'http_request_firewall_custom';
const RULE_COUNT = 10;
/** The origin's answer: exactly 100 bytes. */
const ORIGIN_BODY = `${'hello from the bench origin '.padEnd(99, '.')}\n`;
const TOOLS = ['nginx', 'caddy', 'wrk'] as const;
const EXTRA_PATH_DIRS = ['/usr/sbin', '/sbin', '/usr/local/sbin'];

const USAGE = `usage: npm run bench -- edge [options]

  --seconds N       length of each measured wrk run (default 5)
  --rounds N        rounds; each runs every side once, in the same order (default 3)
  --warmup N        unmeasured wrk run per side before the first round, seconds (default 1; 0 = none)
  --connections N   wrk connections (default 32; one wrk thread)
  --cpu-prof        afterwards, one extra Outpost run under node --cpu-prof; prints the top
                    self-time functions and keeps the .cpuprofile (path printed)

Needs nginx, caddy and wrk (Debian packages of those names); installs them with apt-get when
missing and running as root. The origin listens on ${ORIGIN_IP}:${ORIGIN_PORT}, so port 80 there
must be free (and binding it needs root or CAP_NET_BIND_SERVICE).
`;

interface Options {
  seconds: number;
  rounds: number;
  warmup: number;
  connections: number;
  cpuProf: boolean;
}

class Interrupted extends Error {
  constructor() {
    super('interrupted');
  }
}

function parseOptions(argv: string[]): Options | 'help' {
  const o: Options = { seconds: 5, rounds: 3, warmup: 1, connections: 32, cpuProf: false };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
    const value = (): string | undefined => inline ?? argv[++i];
    switch (flag) {
      case '--help':
      case '-h':
        return 'help';
      case '--seconds':
        o.seconds = intOption(flag, value(), 1, 3600);
        break;
      case '--rounds':
        o.rounds = intOption(flag, value(), 1, 100);
        break;
      case '--warmup':
        o.warmup = intOption(flag, value(), 0, 600);
        break;
      case '--connections':
        o.connections = intOption(flag, value(), 1, 10_000);
        break;
      case '--cpu-prof':
        o.cpuProf = true;
        break;
      default:
        throw new UsageError(`unknown option ${argv[i]}`);
    }
  }
  return o;
}

// ---------------------------------------------------------------------------------------------
// Child processes and clean-up
// ---------------------------------------------------------------------------------------------

interface Proc {
  name: string;
  child: ChildProcess;
  /** Everything written to stdout and stderr (the last 64 KiB). */
  output: () => string;
  /** Only stdout, in full (for wrk). */
  stdout: () => string;
  exited: boolean;
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const OUTPUT_CAP = 64 * 1024;

class Children {
  readonly procs = new Set<Proc>();
  readonly dirs = new Set<string>();
  interrupted = false;

  /** Each child leads its own process group, so stopping it also stops its workers. */
  spawn(
    name: string,
    cmd: string,
    args: string[],
    opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {},
  ): Proc {
    if (this.interrupted) throw new Interrupted();
    const child = spawn(cmd, args, {
      cwd: opts.cwd ?? ROOT,
      env: opts.env ?? process.env,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let combined = '';
    let out = '';
    const keep = (chunk: Buffer) => {
      combined += chunk.toString('utf8');
      if (combined.length > OUTPUT_CAP * 2) combined = combined.slice(-OUTPUT_CAP);
    };
    child.stdout!.on('data', (chunk: Buffer) => {
      keep(chunk);
      if (out.length < 1024 * 1024) out += chunk.toString('utf8');
    });
    child.stderr!.on('data', keep);
    const proc: Proc = {
      name,
      child,
      output: () => combined.slice(-OUTPUT_CAP),
      stdout: () => out,
      exited: false,
      done: new Promise((resolve) => {
        child.once('error', (err) => {
          combined += `\n${name}: ${err.message}\n`;
          proc.exited = true;
          resolve({ code: -1, signal: null });
        });
        child.once('close', (code, signal) => {
          proc.exited = true;
          resolve({ code, signal });
        });
      }),
    };
    this.procs.add(proc);
    void proc.done.then(() => this.procs.delete(proc));
    return proc;
  }

  private signal(proc: Proc, signal: NodeJS.Signals): void {
    const pid = proc.child.pid;
    if (pid === undefined || proc.exited) return;
    try {
      process.kill(-pid, signal);
    } catch {
      try {
        process.kill(pid, signal);
      } catch {
        // already gone
      }
    }
  }

  /** SIGTERM (or `signal`), then SIGKILL to the group after `graceMs`. */
  async stop(proc: Proc, signal: NodeJS.Signals = 'SIGTERM', graceMs = 5_000): Promise<void> {
    if (proc.exited) return;
    this.signal(proc, signal);
    if (await settlesWithin(proc.done, graceMs)) return;
    this.signal(proc, 'SIGKILL');
    await settlesWithin(proc.done, 2_000);
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.procs].map((p) => this.stop(p)));
  }

  tempDir(prefix: string): string {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    this.dirs.add(dir);
    return dir;
  }

  removeDirs(): void {
    for (const dir of this.dirs) rmSync(dir, { recursive: true, force: true });
    this.dirs.clear();
  }

  /** Last resort on process exit: synchronous only. */
  killAllNow(): void {
    for (const proc of this.procs) this.signal(proc, 'SIGKILL');
    this.removeDirs();
  }

  check(): void {
    if (this.interrupted) throw new Interrupted();
  }
}

function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    void p.then(() => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

function canConnect(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** Waits until `host:port` accepts connections; fails if `proc` exits first. */
async function waitForPort(
  kids: Children,
  proc: Proc,
  host: string,
  port: number,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    kids.check();
    if (proc.exited)
      throw new Error(`${proc.name} exited during start-up:\n${indent(proc.output())}`);
    if (await canConnect(host, port)) return;
    await sleep(100);
  }
  throw new Error(
    `${proc.name} did not listen on ${host}:${port} within ${timeoutMs} ms:\n${indent(proc.output())}`,
  );
}

function indent(s: string): string {
  const text = s.trim() || '(no output)';
  return text
    .split('\n')
    .slice(-40)
    .map((l) => `    ${l}`)
    .join('\n');
}

// ---------------------------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------------------------

function which(name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), ...EXTRA_PATH_DIRS].filter(Boolean);
  for (const dir of dirs) {
    const file = join(dir, name);
    try {
      accessSync(file, fsConstants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

async function runInherited(
  kids: Children,
  cmd: string,
  args: string[],
  timeoutMs: number,
): Promise<number> {
  kids.check();
  const child = spawn(cmd, args, {
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  const done = new Promise<number>((resolve) => {
    child.once('error', () => resolve(-1));
    child.once('close', (code) => resolve(code ?? -1));
  });
  if (await settlesWithin(done, timeoutMs)) return done;
  child.kill('SIGTERM');
  await settlesWithin(done, 5_000);
  return -1;
}

/** Paths of nginx, caddy and wrk, installing them first when missing and running as root. */
async function ensureTools(
  kids: Children,
  log: (s: string) => void,
): Promise<Record<(typeof TOOLS)[number], string> | string> {
  let missing = TOOLS.filter((t) => !which(t));
  if (missing.length > 0) {
    const command = 'apt-get update && apt-get install -y nginx caddy wrk';
    if (process.getuid?.() !== 0) {
      return `missing: ${missing.join(', ')}. Install them (Debian packages nginx, caddy, wrk), e.g. as root: ${command}`;
    }
    log(`missing ${missing.join(', ')}: running ${command}`);
    log('[1/2] apt-get update');
    const updated = await runInherited(kids, 'apt-get', ['update'], 10 * 60_000);
    kids.check();
    if (updated !== 0) log(`apt-get update exited with ${updated}; trying the install anyway`);
    log('[2/2] apt-get install -y nginx caddy wrk');
    const code = await runInherited(
      kids,
      'apt-get',
      ['install', '-y', 'nginx', 'caddy', 'wrk'],
      15 * 60_000,
    );
    kids.check();
    missing = TOOLS.filter((t) => !which(t));
    if (missing.length > 0)
      return `apt-get install exited with ${code}; still missing: ${missing.join(', ')}`;
    log('installed nginx, caddy, wrk');
  }
  return { nginx: which('nginx')!, caddy: which('caddy')!, wrk: which('wrk')! };
}

function toolVersion(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (d: Buffer) => (text += d.toString()));
    child.stderr.on('data', (d: Buffer) => (text += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    child.once('error', () => resolve('?'));
    child.once('close', () => {
      clearTimeout(timer);
      const line = text.split('\n').find((l) => l.trim()) ?? '?';
      resolve(line.trim());
    });
  });
}

// ---------------------------------------------------------------------------------------------
// The origin, the proxies and Outpost
// ---------------------------------------------------------------------------------------------

const ORIGIN_SOURCE = `import http from 'node:http';
const body = Buffer.from(${JSON.stringify(ORIGIN_BODY)});
const server = http.createServer({ keepAliveTimeout: 300000 }, (req, res) => {
  req.resume();
  res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'content-length': body.length });
  res.end(body);
});
server.on('error', (err) => {
  process.stderr.write('origin: ' + (err.code || '') + ' ' + err.message + '\\n');
  process.exit(1);
});
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
server.listen(${ORIGIN_PORT}, ${JSON.stringify(ORIGIN_IP)}, () => process.stdout.write('origin listening\\n'));
`;

async function startOrigin(kids: Children, dir: string): Promise<Proc> {
  const file = join(dir, 'origin.mjs');
  writeFileSync(file, ORIGIN_SOURCE);
  const env = { ...process.env };
  delete env.NODE_OPTIONS;
  const proc = kids.spawn('origin', process.execPath, [file], { env, cwd: dir });
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && !proc.output().includes('origin listening')) {
    kids.check();
    if (proc.exited) {
      let hint = '';
      if (proc.output().includes('EADDRINUSE')) {
        hint = `\n${ORIGIN_IP}:${ORIGIN_PORT} is taken: another server listens on port 80 (a system nginx or caddy service started by the package install? stop it, e.g. systemctl stop nginx caddy)`;
      } else if (proc.output().includes('EACCES')) {
        hint = `\nbinding port ${ORIGIN_PORT} needs root or CAP_NET_BIND_SERVICE`;
      }
      throw new Error(`the origin did not start:\n${indent(proc.output())}${hint}`);
    }
    await sleep(50);
  }
  if (!proc.output().includes('origin listening'))
    throw new Error('the origin did not start within 10 s');
  return proc;
}

function nginxConfig(dir: string, port: number, workers: string): string {
  return `daemon off;
master_process on;
worker_processes ${workers};
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'error.log')} error;
events {
  worker_connections 4096;
}
http {
  access_log off;
  client_body_temp_path ${join(dir, 'client_body')};
  proxy_temp_path ${join(dir, 'proxy')};
  fastcgi_temp_path ${join(dir, 'fastcgi')};
  uwsgi_temp_path ${join(dir, 'uwsgi')};
  scgi_temp_path ${join(dir, 'scgi')};
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  upstream origin {
    server ${ORIGIN_IP}:${ORIGIN_PORT};
    keepalive 64;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
  }
  server {
    listen 127.0.0.1:${port};
    server_name _;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
    }
  }
}
`;
}

async function startNginx(
  kids: Children,
  bin: string,
  parent: string,
  label: string,
  workers: string,
): Promise<string> {
  const dir = join(parent, `nginx-${workers}`);
  mkdirSync(dir, { recursive: true });
  // Workers drop to an unprivileged user; let them reach their temp paths.
  chmodSync(parent, 0o755);
  chmodSync(dir, 0o755);
  const port = await freePort();
  const conf = join(dir, 'nginx.conf');
  writeFileSync(conf, nginxConfig(dir, port, workers));
  const proc = kids.spawn(label, bin, ['-p', `${dir}/`, '-c', conf, '-e', join(dir, 'error.log')]);
  await waitForPort(kids, proc, '127.0.0.1', port, 10_000);
  return `http://127.0.0.1:${port}/`;
}

async function startCaddy(
  kids: Children,
  bin: string,
  parent: string,
  label: string,
  gomaxprocs: number | undefined,
): Promise<string> {
  const dir = join(parent, `caddy-${gomaxprocs ?? 'default'}`);
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const config = {
    admin: { disabled: true },
    logging: { logs: { default: { level: 'ERROR' } } },
    apps: {
      http: {
        servers: {
          bench: {
            listen: [`127.0.0.1:${port}`],
            automatic_https: { disable: true },
            routes: [
              {
                handle: [
                  {
                    handler: 'reverse_proxy',
                    upstreams: [{ dial: `${ORIGIN_IP}:${ORIGIN_PORT}` }],
                    transport: {
                      protocol: 'http',
                      keep_alive: { enabled: true, max_idle_conns_per_host: 64 },
                    },
                  },
                ],
              },
            ],
          },
        },
      },
    },
  };
  const file = join(dir, 'caddy.json');
  writeFileSync(file, JSON.stringify(config, null, 2));
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: dir,
    XDG_CONFIG_HOME: join(dir, 'config'),
    XDG_DATA_HOME: join(dir, 'data'),
  };
  if (gomaxprocs === undefined) delete env.GOMAXPROCS;
  else env.GOMAXPROCS = String(gomaxprocs);
  const proc = kids.spawn(label, bin, ['run', '--config', file], { env, cwd: dir });
  await waitForPort(kids, proc, '127.0.0.1', port, 15_000);
  return `http://127.0.0.1:${port}/`;
}

interface Outpost {
  proc: Proc;
  apiUrl: string;
  edgeUrl: string;
  token: string;
  accountId: string;
}

function outpostEnv(token: string, accountId: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('OUTPOST_') && k !== 'NODE_OPTIONS') env[k] = v;
  }
  env.OUTPOST_API_TOKEN = token;
  env.OUTPOST_ACCOUNT_ID = accountId;
  env.OUTPOST_LOG_LEVEL = 'warn';
  // Benchmark load from one address is a flood to DDoS detection; bench/ddos measures its cost.
  env.OUTPOST_DDOS_DETECTION = 'false';
  return env;
}

async function startOutpost(
  kids: Children,
  dataDir: string,
  nodeFlags: string[] = [],
): Promise<Outpost> {
  const token = randomBytes(24).toString('hex');
  const accountId = randomBytes(16).toString('hex');
  const env = outpostEnv(token, accountId);
  const ports = ['--api-port', '0', '--edge-port', '0', '--turn-port', '0'];
  for (const withDns of [true, false]) {
    const args = [
      ...nodeFlags,
      OUTPOST_BIN,
      'serve',
      ...ports,
      ...(withDns ? ['--dns-port', '0'] : []),
      '--data-dir',
      dataDir,
    ];
    const proc = kids.spawn('outpost', process.execPath, args, { env, cwd: ROOT });
    const deadline = Date.now() + 60_000;
    let apiUrl: string | undefined;
    let edgeUrl: string | undefined;
    while (Date.now() < deadline && !proc.exited && !(apiUrl && edgeUrl)) {
      kids.check();
      const text = stripAnsi(proc.output());
      apiUrl = /management API\s+http\s+(http:\/\/\S+)/.exec(text)?.[1];
      edgeUrl = /edge \(proxied HTTP\)\s+http\s+(http:\/\/\S+)/.exec(text)?.[1];
      if (!(apiUrl && edgeUrl)) await sleep(50);
    }
    if (apiUrl && edgeUrl)
      return {
        proc,
        apiUrl: apiUrl.replace(/\/$/, ''),
        edgeUrl: `${edgeUrl.replace(/\/$/, '')}/`,
        token,
        accountId,
      };
    await kids.stop(proc);
    const out = proc.output();
    if (withDns && /dns-port/i.test(out) && /unknown|unrecognized|not allowed/i.test(out)) continue;
    throw new Error(`Outpost did not print its listener table:\n${indent(out)}`);
  }
  throw new Error('Outpost did not start');
}

function stripAnsi(s: string): string {
  return s.replace(/\x1b\[[0-9;]*m/g, '');
}

interface ApiAnswer {
  status: number;
  body: any;
}

async function api(o: Outpost, method: string, path: string, body?: unknown): Promise<ApiAnswer> {
  const res = await fetch(`${o.apiUrl}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${o.token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // keep the text
  }
  return { status: res.status, body: parsed };
}

function apiError(what: string, a: ApiAnswer): Error {
  return new Error(`${what}: HTTP ${a.status} ${JSON.stringify(a.body).slice(0, 500)}`);
}

function ruleExpression(n: number): string {
  return `http.request.uri.path eq "/blocked-${n}" and ip.src in {192.0.2.0/24}`;
}

/** Zone, proxied record, custom rules; returns the rules status line. */
async function configureOutpost(o: Outpost): Promise<{ rules: string; rulesInstalled: boolean }> {
  const zone = await api(o, 'POST', '/zones', { name: ZONE, account: { id: o.accountId } });
  if (zone.status !== 200 || !zone.body?.result?.id) throw apiError('creating the zone', zone);
  const zoneId: string = zone.body.result.id;
  const record = await api(o, 'POST', `/zones/${zoneId}/dns_records`, {
    type: 'A',
    name: 'www',
    content: ORIGIN_IP,
    proxied: true,
    ttl: 1,
  });
  if (record.status !== 200 || !record.body?.result?.id)
    throw apiError('creating the proxied record', record);

  const path = `/zones/${zoneId}/rulesets/phases/${RULE_PHASE}/entrypoint`;
  const rules = Array.from({ length: RULE_COUNT }, (_, i) => ({
    action: 'block',
    expression: ruleExpression(i + 1),
    description: `rule ${i + 1}`,
  }));
  const put = await api(o, 'PUT', path, { rules });
  if (put.status === 404 || put.status === 405 || put.status === 501) {
    return {
      rules: `custom rules: not available (PUT …${RULE_PHASE}/entrypoint answered ${put.status}); measured without rules`,
      rulesInstalled: false,
    };
  }
  if (put.status !== 200) throw apiError('installing the custom rules', put);

  const got = await api(o, 'GET', path);
  if (got.status !== 200) throw apiError('reading the custom rules back', got);
  const installed: { expression?: string; action?: string; enabled?: boolean }[] =
    got.body?.result?.rules ?? [];
  const expected = rules.map((r) => r.expression);
  const ok =
    installed.length === RULE_COUNT &&
    installed.every(
      (r, i) => r.expression === expected[i] && r.action === 'block' && r.enabled !== false,
    );
  if (!ok) {
    throw new Error(
      `the custom rules read back differ from those installed: ${JSON.stringify(got.body?.result?.rules ?? got.body).slice(0, 800)}`,
    );
  }
  return {
    rules: `custom rules: ${RULE_COUNT} installed and read back (GET …${RULE_PHASE}/entrypoint, version ${String(got.body.result.version ?? '?')}); none matches the load (client 127.0.0.1, path /)`,
    rulesInstalled: true,
  };
}

/** One GET with the benchmark's Host header; checks status and body. */
function probe(url: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const req = http.get(url, { headers: { host: HOST }, agent: false, timeout: 5_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => {
        if (res.statusCode !== 200) resolve(`HTTP ${res.statusCode}: ${body.slice(0, 200)}`);
        else if (body !== ORIGIN_BODY)
          resolve(`unexpected body: ${JSON.stringify(body.slice(0, 200))}`);
        else resolve(undefined);
      });
      res.on('error', (err) => resolve(err.message));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve(err.message));
  });
}

async function probeUntilOk(
  kids: Children,
  label: string,
  url: string,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: string | undefined = 'not tried';
  while (Date.now() < deadline) {
    kids.check();
    last = await probe(url);
    if (last === undefined) return;
    await sleep(200);
  }
  throw new Error(
    `${label} does not answer GET ${url} (Host: ${HOST}) with the origin's 200: ${last}`,
  );
}

// ---------------------------------------------------------------------------------------------
// wrk
// ---------------------------------------------------------------------------------------------

interface WrkResult {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  non2xx: number;
  socketErrors: number;
  errorText: string;
  /** When wrk ran, in microseconds of the monotonic clock (the clock of V8's CPU profiles). */
  window: { startUs: number; endUs: number };
}

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

function parseWrk(text: string): Omit<WrkResult, 'window'> {
  const num = (re: RegExp): number | undefined => {
    const m = re.exec(text);
    return m ? Number(m[1]) : undefined;
  };
  const latency = (pct: string): number => {
    const m = new RegExp(`^\\s*${pct}(?:\\.0+)?%\\s+([\\d.]+)(us|ms|s|m|h)\\s*$`, 'm').exec(text);
    return m ? Number(m[1]) * UNIT_MS[m[2]] : NaN;
  };
  const rps = num(/^Requests\/sec:\s+([\d.]+)/m);
  if (rps === undefined) throw new Error(`could not parse wrk's output:\n${indent(text)}`);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(text);
  const socketErrors = sock ? sock.slice(1, 5).reduce((a, b) => a + Number(b), 0) : 0;
  const non2xx = num(/Non-2xx or 3xx responses:\s+(\d+)/) ?? 0;
  return {
    rps,
    p50: latency('50'),
    p99: latency('99'),
    requests: num(/(\d+) requests in /) ?? 0,
    non2xx,
    socketErrors,
    errorText: [sock?.[0], non2xx ? `Non-2xx or 3xx responses: ${non2xx}` : undefined]
      .filter(Boolean)
      .join('; '),
  };
}

async function runWrk(
  kids: Children,
  wrk: string,
  url: string,
  seconds: number,
  connections: number,
): Promise<WrkResult> {
  const args = [
    '-t1',
    `-c${connections}`,
    `-d${seconds}s`,
    '--latency',
    '-H',
    `Host: ${HOST}`,
    url,
  ];
  const startUs = Number(process.hrtime.bigint() / 1000n);
  const proc = kids.spawn('wrk', wrk, args);
  const finished = await settlesWithin(proc.done, (seconds + 30) * 1000);
  if (!finished) {
    await kids.stop(proc, 'SIGKILL');
    throw new Error(`wrk did not finish within ${seconds + 30} s (${url})`);
  }
  kids.check();
  const { code } = await proc.done;
  if (code !== 0) throw new Error(`wrk exited with ${code}:\n${indent(proc.output())}`);
  const endUs = Number(process.hrtime.bigint() / 1000n);
  return { ...parseWrk(proc.stdout()), window: { startUs, endUs } };
}

// ---------------------------------------------------------------------------------------------
// CPU profile summary
// ---------------------------------------------------------------------------------------------

interface CpuProfile {
  nodes: {
    id: number;
    callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
    children?: number[];
  }[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

function frameKey(frame: CpuProfile['nodes'][number]['callFrame']): string {
  const name = frame.functionName || '(anonymous)';
  if (!frame.url) return name;
  let where = frame.url.replace(/^file:\/\//, '');
  if (where.startsWith(ROOT)) where = where.slice(ROOT.length);
  const nm = where.lastIndexOf('node_modules/');
  if (nm >= 0) where = where.slice(nm + 'node_modules/'.length);
  return `${name}  ${where}:${frame.lineNumber + 1}:${frame.columnNumber + 1}`;
}

function frameGroup(frame: CpuProfile['nodes'][number]['callFrame']): string {
  const url = frame.url.replace(/^file:\/\//, '');
  if (!url) return frame.functionName.startsWith('(') ? frame.functionName : 'native / builtins';
  if (url.startsWith('node:')) {
    const mod = url
      .slice(5)
      .replace(/^internal\//, '')
      .split('/')[0];
    return `node:${mod.replace(/\.js$/, '')}`;
  }
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const parts = url.slice(nm + 'node_modules/'.length).split('/');
    return parts[0].startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0];
  }
  if (url.startsWith(ROOT)) {
    const rel = url.slice(ROOT.length);
    return rel.split('/').slice(0, 3).join('/');
  }
  return url;
}

/**
 * Self and inclusive time from a V8 .cpuprofile, restricted to the samples taken inside `window`
 * (the measured wrk run) when the profile's clock covers it; otherwise the whole profile.
 */
function summariseProfile(
  file: string,
  top: number,
  window: { startUs: number; endUs: number },
): string {
  const prof = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const covers = prof.startTime <= window.startUs && prof.endTime >= window.endUs;
  const selfUs = new Map<number, number>();
  let t = prof.startTime;
  for (let i = 0; i < prof.samples.length; i++) {
    t += prof.timeDeltas[i] ?? 0;
    if (covers && (t < window.startUs || t > window.endUs)) continue;
    // timeDeltas[i + 1] is the time until the next sample, i.e. how long sample i ran.
    const dt = prof.timeDeltas[i + 1] ?? 0;
    selfUs.set(prof.samples[i], (selfUs.get(prof.samples[i]) ?? 0) + Math.max(0, dt));
  }
  let total = 0;
  let idle = 0;
  const byKey = new Map<string, number>();
  const byGroup = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const frame = byId.get(id)!.callFrame;
    total += us;
    if (frame.functionName === '(idle)') {
      idle += us;
      continue;
    }
    const key = frameKey(frame);
    byKey.set(key, (byKey.get(key) ?? 0) + us);
    const group = frameGroup(frame);
    byGroup.set(group, (byGroup.get(group) ?? 0) + us);
  }
  // Inclusive time of Outpost's own functions (src/), each counted once per stack.
  const parent = new Map<number, number>();
  for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const inclusive = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const seen = new Set<string>();
    for (
      let cur: number | undefined = id, depth = 0;
      cur !== undefined && depth < 10_000;
      cur = parent.get(cur), depth++
    ) {
      const frame = byId.get(cur)!.callFrame;
      if (!frame.url.includes(`${ROOT}src/`)) continue;
      const key = frameKey(frame);
      if (seen.has(key)) continue;
      seen.add(key);
      inclusive.set(key, (inclusive.get(key) ?? 0) + us);
    }
  }
  const busy = total - idle;
  const pct = (us: number) => `${((100 * us) / Math.max(busy, 1)).toFixed(1).padStart(5)}%`;
  const lines: string[] = [];
  lines.push(
    covers
      ? 'samples: the measured wrk run only (start-up, set-up and warm-up left out)'
      : "samples: the whole profile (its clock did not cover the wrk run's window)",
  );
  lines.push(
    `profile: ${(total / 1e6).toFixed(1)} s sampled, ${(busy / 1e6).toFixed(1)} s busy (${((100 * busy) / Math.max(total, 1)).toFixed(0)}%); percentages are of busy time`,
  );
  lines.push('', `top ${top} functions by self time:`);
  for (const [key, us] of [...byKey].sort((a, b) => b[1] - a[1]).slice(0, top))
    lines.push(`  ${pct(us)}  ${key}`);
  lines.push('', 'self time by module:');
  for (const [key, us] of [...byGroup].sort((a, b) => b[1] - a[1]).slice(0, 15))
    lines.push(`  ${pct(us)}  ${key}`);
  lines.push('', "Outpost's own functions (src/) by inclusive time:");
  for (const [key, us] of [...inclusive].sort((a, b) => b[1] - a[1]).slice(0, 15))
    lines.push(`  ${pct(us)}  ${key}`);
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

interface Side {
  key: string;
  label: string;
  url: string;
  runs: WrkResult[];
}

function median(xs: number[]): number {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

function fmtInt(n: number): string {
  return Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–';
}

function fmtMs(n: number): string {
  if (!Number.isFinite(n)) return '–';
  if (n < 10) return n.toFixed(2);
  if (n < 100) return n.toFixed(1);
  return n.toFixed(0);
}

function fmtRatio(a: number, b: number): string {
  return Number.isFinite(a) && b > 0 ? `${(a / b).toFixed(2)}x` : '–';
}

function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) =>
    r
      .map((s, i) => (i === 0 ? s.padEnd(widths[i]) : s.padStart(widths[i])))
      .join('  ')
      .trimEnd();
  return [line(headers), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

function report(sides: Side[], mainCount: number): { text: string; errors: number } {
  const med = new Map(sides.map((s) => [s.key, median(s.runs.map((r) => r.rps))]));
  const nginx = med.get('nginx') ?? NaN;
  const caddy = med.get('caddy') ?? NaN;
  let errors = 0;
  const rows = sides.map((s, i) => {
    const errs = s.runs.reduce((a, r) => a + r.non2xx + r.socketErrors, 0);
    errors += errs;
    const rps = med.get(s.key)!;
    const range = s.runs.map((r) => r.rps);
    return [
      (i >= mainCount ? '  ' : '') + s.label,
      fmtInt(rps),
      fmtMs(median(s.runs.map((r) => r.p50))),
      fmtMs(median(s.runs.map((r) => r.p99))),
      fmtRatio(rps, nginx),
      fmtRatio(rps, caddy),
      `${fmtInt(Math.min(...range))}–${fmtInt(Math.max(...range))}`,
      String(errs),
    ];
  });
  const text = table(
    ['side', 'req/s', 'p50 ms', 'p99 ms', 'vs nginx', 'vs caddy', 'req/s min–max', 'errors'],
    rows,
  );
  return { text, errors };
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

export async function main(argv: string[]): Promise<number> {
  let opts: Options | 'help';
  try {
    opts = parseOptions(argv);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`edge: ${err.message}\n\n${USAGE}`);
      return 2;
    }
    throw err;
  }
  if (opts === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  const o = opts;
  const log = (s: string) => process.stdout.write(`${s}\n`);
  const kids = new Children();
  const onSignal = () => {
    if (kids.interrupted) {
      kids.killAllNow();
      process.exit(130);
    }
    kids.interrupted = true;
    process.stderr.write('\nedge: interrupted, stopping child processes…\n');
    void kids.stopAll();
  };
  const onExit = () => kids.killAllNow();
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('exit', onExit);
  try {
    return await run(o, kids, log);
  } catch (err) {
    if (err instanceof Interrupted || kids.interrupted) {
      process.stderr.write('edge: interrupted\n');
      return 130;
    }
    process.stderr.write(`edge: ${(err as Error).stack ?? String(err)}\n`);
    return 1;
  } finally {
    await kids.stopAll();
    kids.removeDirs();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    process.off('exit', onExit);
  }
}

async function run(o: Options, kids: Children, log: (s: string) => void): Promise<number> {
  const tools = await ensureTools(kids, log);
  if (typeof tools === 'string') {
    process.stderr.write(`edge: ${tools}\n`);
    return 2;
  }
  const cores = availableParallelism();
  const [nginxV, caddyV, wrkV] = await Promise.all([
    toolVersion(tools.nginx, ['-v']),
    toolVersion(tools.caddy, ['version']),
    toolVersion(tools.wrk, ['-v']),
  ]);
  log(`node ${process.version}; ${nginxV}; caddy ${caddyV}; ${wrkV.replace(/ Copyright.*$/, '')}`);
  log(
    `${cores} CPU core(s), load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}; wrk, the proxy under load and the origin share them`,
  );

  const tmp = kids.tempDir('outpost-bench-edge-');
  log(`starting the origin on ${ORIGIN_IP}:${ORIGIN_PORT}, Outpost, nginx ×2, caddy ×2 …`);
  await startOrigin(kids, tmp);
  const originUrl = `http://${ORIGIN_IP}:${ORIGIN_PORT}/`;
  await probeUntilOk(kids, 'the origin', originUrl, 5_000);

  const outpost = await startOutpost(kids, join(tmp, 'outpost-data'));
  const { rules } = await configureOutpost(outpost);
  await probeUntilOk(kids, "Outpost's edge", outpost.edgeUrl, 10_000);
  log(rules);

  const sides: Side[] = [
    { key: 'outpost', label: 'outpost edge', url: outpost.edgeUrl, runs: [] },
    {
      key: 'nginx',
      label: 'nginx (1 worker)',
      url: await startNginx(kids, tools.nginx, tmp, 'nginx', '1'),
      runs: [],
    },
    {
      key: 'caddy',
      label: 'caddy (GOMAXPROCS=1)',
      url: await startCaddy(kids, tools.caddy, tmp, 'caddy', 1),
      runs: [],
    },
    {
      key: 'nginx-auto',
      label: `nginx (workers auto = ${cores})`,
      url: await startNginx(kids, tools.nginx, tmp, 'nginx-auto', 'auto'),
      runs: [],
    },
    {
      key: 'caddy-all',
      label: `caddy (GOMAXPROCS=${cores}, default)`,
      url: await startCaddy(kids, tools.caddy, tmp, 'caddy-all', undefined),
      runs: [],
    },
    { key: 'origin', label: 'origin direct (no proxy)', url: originUrl, runs: [] },
  ];
  const mainCount = 3;
  for (const s of sides.slice(1, 5)) await probeUntilOk(kids, s.label, s.url, 10_000);

  const perRun = o.seconds + 0.5;
  const estimate = Math.ceil(sides.length * (o.warmup + o.rounds * perRun));
  log(
    `load: wrk -t1 -c${o.connections} -d${o.seconds}s --latency -H 'Host: ${HOST}' <side>; ${o.rounds} round(s) × ${sides.length} sides, ${o.warmup} s warm-up each (~${estimate} s)`,
  );
  if (o.warmup > 0) {
    for (const s of sides) {
      kids.check();
      await runWrk(kids, tools.wrk, s.url, o.warmup, o.connections);
    }
  }
  for (let round = 1; round <= o.rounds; round++) {
    const parts: string[] = [];
    for (const s of sides) {
      kids.check();
      const r = await runWrk(kids, tools.wrk, s.url, o.seconds, o.connections);
      s.runs.push(r);
      parts.push(`${s.key} ${fmtInt(r.rps)}${r.errorText ? ` (${r.errorText})` : ''}`);
    }
    log(`round ${round}/${o.rounds} req/s: ${parts.join(', ')}`);
  }

  const { text, errors } = report(sides, mainCount);
  log('');
  log(
    `median of ${o.rounds} round(s) of ${o.seconds} s, wrk -t1 -c${o.connections}, ${ORIGIN_BODY.length}-byte body; ratios are req/s over the side named`,
  );
  log(rules);
  log(text);
  if (errors > 0)
    log(
      `\nERRORS: some runs had non-2xx answers or socket errors (see the round lines); exit code 1`,
    );

  // The measured processes are no longer needed; stop Outpost before profiling a fresh one.
  await kids.stop(outpost.proc);

  if (o.cpuProf) await profileOutpost(o, kids, tools.wrk, tmp, log);
  return errors > 0 ? 1 : 0;
}

async function profileOutpost(
  o: Options,
  kids: Children,
  wrk: string,
  tmp: string,
  log: (s: string) => void,
): Promise<void> {
  // Kept after the run (not registered for removal), so the profile can be opened in a viewer.
  const profDir = mkdtempSync(join(tmpdir(), 'outpost-edge-prof-'));
  log(
    `\nprofiling: a fresh Outpost under node --cpu-prof, ${o.warmup} s warm-up, then ${o.seconds} s of the same load`,
  );
  const outpost = await startOutpost(kids, join(tmp, 'outpost-prof-data'), [
    '--cpu-prof',
    '--cpu-prof-dir',
    profDir,
  ]);
  await configureOutpost(outpost);
  await probeUntilOk(kids, "Outpost's edge (profiled)", outpost.edgeUrl, 10_000);
  if (o.warmup > 0) await runWrk(kids, wrk, outpost.edgeUrl, o.warmup, o.connections);
  const r = await runWrk(kids, wrk, outpost.edgeUrl, o.seconds, o.connections);
  log(
    `profiled run: ${fmtInt(r.rps)} req/s, p50 ${fmtMs(r.p50)} ms, p99 ${fmtMs(r.p99)} ms (profiler overhead included)`,
  );
  // SIGTERM lets Outpost shut down and exit normally, which is when V8 writes the profile.
  await kids.stop(outpost.proc, 'SIGTERM', 20_000);
  // One file per thread (tsx's loader runs in a worker); the main thread's has thread id 0.
  const files = readdirSync(profDir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .sort(
      (x, y) => Number(!/\.0\.\d+\.cpuprofile$/.test(x)) - Number(!/\.0\.\d+\.cpuprofile$/.test(y)),
    );
  if (files.length === 0) {
    log(`no .cpuprofile was written in ${profDir}`);
    return;
  }
  const file = join(profDir, files[0]);
  log(`profile: ${file}`);
  log(summariseProfile(file, 25, r.window));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`edge: ${(err as Error).stack ?? String(err)}\n`);
      process.exit(1);
    },
  );
}
