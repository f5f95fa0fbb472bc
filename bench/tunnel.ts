/**
 * Requests/s, p50/p99 latency and streaming MB/s through edge → tunnel → origin, beside edge →
 * origin directly and raw loopback TCP (iperf3), in one run. Outpost (`outpost serve`), the
 * connector (`outpost tunnel run`) and the origin are separate processes; the load comes from this
 * process. The two HTTP paths alternate round by round; the median round is reported.
 *
 *   npm run bench -- tunnel [--seconds 5] [--rounds 3] [--concurrency 32] [--stream-mib 512]
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { int, ms, ratio, table } from './lib/format.ts';
import { closedLoop, makeTarget, type PhaseResult } from './lib/load.ts';
import {
  installCleanupHandlers,
  onCleanup,
  runCleanups,
  spawnNode,
  tempDir,
  throwIfInterrupted,
} from './lib/procs.ts';

export const description =
  'req/s, p50/p99 and streaming MB/s through edge → tunnel → origin vs edge → origin vs iperf3 loopback';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin', 'outpost.js');
/** The edge reaches proxied A records on port 80: the origin binds port 80 of this address. */
const ORIGIN_IP = '127.0.21.1';
const ZONE = 'tunnelbench.example.com';
const BODY = `${'hello from the tunnel bench origin '.padEnd(99, '.')}\n`;

const USAGE = `usage: npm run bench -- tunnel [options]

  --seconds N       length of each measured request phase (default 5)
  --rounds N        rounds, each measuring both paths (default 3)
  --concurrency N   request loops, one keep-alive connection each (default 32)
  --stream-mib N    size of each streamed download, MiB (default 512)

The origin binds ${ORIGIN_IP}:80 (needs root or CAP_NET_BIND_SERVICE). iperf3 is optional.
`;

interface Options {
  seconds: number;
  rounds: number;
  concurrency: number;
  streamMib: number;
}

function parse(argv: string[]): Options | 'help' {
  const o: Options = { seconds: 5, rounds: 3, concurrency: 32, streamMib: 512 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--help' || a === '-h') return 'help';
    const v = Number(argv[++i]);
    if (!Number.isInteger(v) || v < 1) throw new Error(`${a} needs a positive integer`);
    if (a === '--seconds') o.seconds = v;
    else if (a === '--rounds') o.rounds = v;
    else if (a === '--concurrency') o.concurrency = v;
    else if (a === '--stream-mib') o.streamMib = v;
    else throw new Error(`unknown option ${a}`);
  }
  return o;
}

const ORIGIN_SOURCE = `
import http from 'node:http';
const body = ${JSON.stringify(BODY)};
const chunk = Buffer.alloc(256 * 1024, 7);
http.createServer((req, res) => {
  const m = /^\\/stream\\/(\\d+)$/.exec(req.url);
  if (!m) { res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length }); return res.end(body); }
  const total = Number(m[1]);
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': total });
  let sent = 0;
  const pump = () => {
    while (sent < total) {
      const c = total - sent >= chunk.length ? chunk : chunk.subarray(0, total - sent);
      sent += c.length;
      if (!res.write(c)) return void res.once('drain', pump);
    }
    res.end();
  };
  pump();
}).listen(80, '${ORIGIN_IP}', () => console.log('origin listening'));
`;

async function api(
  base: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<any> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = (await res.json()) as { success: boolean; result: unknown; errors: unknown };
  if (!json.success) throw new Error(`${method} ${path}: ${JSON.stringify(json.errors)}`);
  return json.result;
}

/** Downloads one body of `bytes` through the edge for `host`; MB/s (10^6 bytes). */
function download(edge: URL, host: string, bytes: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let got = 0;
    http
      .get(
        {
          host: edge.hostname,
          port: edge.port,
          path: `/stream/${bytes}`,
          headers: { host },
          agent: false,
        },
        (res) => {
          res.on('data', (c: Buffer) => (got += c.length));
          res.on('end', () =>
            got === bytes
              ? resolve(bytes / 1e6 / ((performance.now() - t0) / 1000))
              : reject(new Error(`short body: ${got}`)),
          );
          res.on('error', reject);
        },
      )
      .on('error', reject);
  });
}

async function iperf(seconds: number): Promise<number | undefined> {
  const port = await new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
  const run = (args: string[]) =>
    new Promise<{ code: number | null; out: string }>((resolve) => {
      const p = spawn('iperf3', args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      p.stdout.on('data', (d) => (out += d));
      p.on('error', () => resolve({ code: -1, out: '' }));
      p.on('exit', (code) => resolve({ code, out }));
    });
  const server = spawn('iperf3', ['-s', '-1', '-p', String(port), '-B', '127.0.0.1'], {
    stdio: 'ignore',
  });
  let serverFailed = false;
  server.on('error', () => (serverFailed = true));
  onCleanup(
    'stop iperf3 server',
    () => void server.kill(),
    () => void server.kill('SIGKILL'),
  );
  await new Promise((r) => setTimeout(r, 300));
  if (serverFailed) return undefined;
  const r = await run(['-c', '127.0.0.1', '-p', String(port), '-t', String(seconds), '-J']);
  try {
    return (
      (JSON.parse(r.out) as { end: { sum_received: { bits_per_second: number } } }).end.sum_received
        .bits_per_second /
      8 /
      1e6
    );
  } catch {
    return undefined;
  }
}

function median<T>(xs: T[], key: (x: T) => number): T {
  return [...xs].sort((a, b) => key(a) - key(b))[Math.floor(xs.length / 2)];
}

export async function main(argv: string[]): Promise<number> {
  const opts = parse(argv);
  if (opts === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  installCleanupHandlers();
  try {
    const dir = tempDir('outpost-bench-tunnel-');
    writeFileSync(join(dir.path, 'origin.mjs'), ORIGIN_SOURCE);
    await spawnNode('origin', [join(dir.path, 'origin.mjs')], {
      cwd: dir.path,
      ready: /origin listening/,
    });

    const token = randomBytes(24).toString('hex');
    const accountId = randomBytes(16).toString('hex');
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env))
      if (!k.startsWith('OUTPOST_') && v !== undefined) env[k] = v;
    const outpost = await spawnNode(
      'outpost',
      [
        BIN,
        'serve',
        '--api-port',
        '0',
        '--edge-port',
        '0',
        '--dns-port',
        '0',
        '--turn-port',
        '0',
        '--data-dir',
        join(dir.path, 'data'),
      ],
      {
        cwd: ROOT,
        env: {
          ...env,
          OUTPOST_API_TOKEN: token,
          OUTPOST_ACCOUNT_ID: accountId,
          OUTPOST_LOG_LEVEL: 'warn',
          // Benchmark load from one address is a flood to DDoS detection; bench/ddos measures its cost.
          OUTPOST_DDOS_DETECTION: 'false',
        },
        ready: /edge \(proxied HTTP\)\s+http\s+(http:\/\/\S+)/,
      },
    );
    const edge = new URL(outpost.ready[1]);
    const base = /management API\s+http\s+(http:\/\/\S+\/client\/v4)/.exec(outpost.output())![1];

    const zone = await api(base, token, 'POST', '/zones', {
      name: ZONE,
      account: { id: accountId },
    });
    await api(base, token, 'POST', `/zones/${zone.id}/dns_records`, {
      type: 'A',
      name: `direct.${ZONE}`,
      content: ORIGIN_IP,
      proxied: true,
    });
    const tun = await api(base, token, 'POST', `/accounts/${accountId}/tunnels`, {
      name: 'bench',
      tunnel_secret: randomBytes(32).toString('base64'),
    });
    await api(base, token, 'PUT', `/accounts/${accountId}/tunnels/${tun.id}/configurations`, {
      config: { ingress: [{ service: `http://${ORIGIN_IP}:80` }] },
    });
    await api(base, token, 'POST', `/accounts/${accountId}/tunnels/${tun.id}/connections`, {
      hostname: `tunnel.${ZONE}`,
    });

    const connector = spawn(
      process.execPath,
      [BIN, 'tunnel', 'run', '--token', tun.token, '--log-level', 'warn'],
      { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] },
    );
    onCleanup(
      'stop connector',
      async () => {
        if (connector.exitCode !== null) return;
        connector.kill('SIGTERM');
        await new Promise((r) => connector.once('exit', r));
      },
      () => void connector.kill('SIGKILL'),
    );
    const deadline = Date.now() + 30_000;
    for (;;) {
      throwIfInterrupted();
      const s = await api(base, token, 'GET', `/accounts/${accountId}/cfd_tunnel/${tun.id}`);
      if (s.status === 'healthy' && s.connections.length === 4) break;
      if (Date.now() > deadline) throw new Error('the connector did not connect within 30 s');
      await new Promise((r) => setTimeout(r, 200));
    }

    const sides = [
      { label: 'edge → origin', host: `direct.${ZONE}` },
      { label: 'edge → tunnel → origin', host: `tunnel.${ZONE}` },
    ];
    const check = (_: unknown, res: { body: string }) =>
      res.body === BODY ? undefined : `unexpected body ${res.body.slice(0, 80)}`;
    const results = new Map<string, PhaseResult[]>(sides.map((s) => [s.label, []]));
    for (const s of sides) {
      await closedLoop({
        target: makeTarget(s.label, edge.href, { host: s.host }, opts.concurrency),
        concurrency: opts.concurrency,
        durationMs: 1000,
        next: () => ({ method: 'GET', path: '/' }),
      });
    }
    for (let round = 0; round < opts.rounds; round++) {
      for (const s of sides) {
        throwIfInterrupted();
        const target = makeTarget(s.label, edge.href, { host: s.host }, opts.concurrency);
        const r = await closedLoop({
          target,
          concurrency: opts.concurrency,
          durationMs: opts.seconds * 1000,
          next: () => ({ method: 'GET', path: '/' }),
          check,
        });
        target.agent.destroy();
        results.get(s.label)!.push(r);
        process.stderr.write(
          `round ${round + 1} ${s.label}: ${int(r.rate)} req/s${r.errors ? `, ${r.errors} errors (${r.errorSummary()})` : ''}\n`,
        );
      }
    }
    const bytes = opts.streamMib * 1024 * 1024;
    const streams = new Map<string, number[]>(sides.map((s) => [s.label, []]));
    for (let round = 0; round < opts.rounds; round++) {
      for (const s of sides) {
        throwIfInterrupted();
        streams.get(s.label)!.push(await download(edge, s.host, bytes));
      }
    }
    const raw = await iperf(Math.max(2, opts.seconds));

    const rows = sides.map((s) => {
      const r = median(results.get(s.label)!, (x) => x.rate);
      const mbps = median(streams.get(s.label)!, (x) => x);
      return { label: s.label, r, mbps };
    });
    const [direct, tunnel] = rows;
    process.stdout.write(
      `\n${table(
        ['path', 'req/s', 'p50 ms', 'p99 ms', 'errors', 'stream MB/s'],
        [
          ...rows.map(({ label, r, mbps }) => [
            label,
            int(r.rate),
            ms(r.latency.percentile(0.5)),
            ms(r.latency.percentile(0.99)),
            int(r.errors),
            int(mbps),
          ]),
          ['raw loopback TCP (iperf3)', '', '', '', '', raw === undefined ? 'n/a' : int(raw)],
        ],
      )}\n\n`,
    );
    process.stdout.write(
      `tunnel / direct: ${ratio(tunnel.r.rate, direct.r.rate)} req/s (target ≥ 0.70x), ${ratio(tunnel.mbps, direct.mbps)} stream\n` +
        `tunnel stream / raw loopback TCP: ${raw === undefined ? 'n/a (iperf3 missing)' : ratio(tunnel.mbps, raw)} (target ≥ 0.30x)\n` +
        `(${opts.rounds} rounds × ${opts.seconds} s, ${opts.concurrency} connections, ${opts.streamMib} MiB per download; median round shown)\n`,
    );
    return rows.some(({ r }) => r.errors > 0) ? 1 : 0;
  } finally {
    await runCleanups();
  }
}
