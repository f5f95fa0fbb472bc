/**
 * DDoS detection, in one run:
 * 1. detection latency over several floods (wrk from 127.0.0.1 against one host at its full
 *    speed, far above the default thresholds): flood start → first mitigated request (the
 *    attack's start, the request that crossed the threshold is the first one blocked) and →
 *    start alert received by a webhook; p50 and max;
 * 2. a legitimate client (127.0.0.9, 2 connections, one GET every 20 ms each) in req/s without
 *    an attack and during the floods;
 * 3. the cost of detection when no attack runs: edge req/s (wrk) with detection on (thresholds
 *    scaled so nothing fires: every request is still counted) beside detection off, alternating.
 * Outpost runs in this process (default windows: 1 s, 3 cool-down windows); wrk is its own process.
 *
 *   npm run bench -- ddos [--floods 5] [--seconds 5] [--rounds 2] [--connections 32]
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig, type Config } from '../src/core/config.ts';
import { createLogger } from '../src/core/log.ts';
import { startServer, type RunningServer } from '../src/server.ts';
import { intOption, UsageError } from './lib/args.ts';
import { int, ms, ratio, table } from './lib/format.ts';
import { loadHost, median, which } from './lib/host-load.ts';

export const description = 'DDoS: detection latency (flood → mitigation, → alert), legit req/s under attack, edge req/s with detection on vs off';

const ORIGIN_IP = '127.0.24.1';
const LEGIT_IP = '127.0.0.9';
const HOST = 'www.ddosbench.test';
const TOKEN = 'outpost-bench-root-token-0123456789abcdef';

interface Side {
  server: RunningServer;
  edge: URL;
  dir: string;
}

async function api(s: Side, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${s.server.apiUrl}/client/v4${path}`, { method, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const json = (await res.json()) as any;
  if (!json.success) throw new Error(`${method} ${path}: ${JSON.stringify(json.errors)}`);
  return json.result;
}

async function side(overrides: Partial<Config>): Promise<Side> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-ddos-bench-'));
  const config = loadConfig({}, {}, { apiPort: 0, edgePort: 0, dnsPort: 0, turnPort: 0, dataDir: dir, apiToken: TOKEN, logLevel: 'silent', ...overrides });
  const server = await startServer(config, { logger: createLogger('silent') });
  const s: Side = { server, edge: new URL(server.listeners.find((l) => l.name.startsWith('edge'))!.address), dir };
  const zone = await api(s, 'POST', '/zones', { name: 'ddosbench.test', account: { id: server.seeded.accountId } });
  await api(s, 'POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'www', content: ORIGIN_IP, proxied: true, ttl: 1 });
  return s;
}

async function stopSide(s: Side): Promise<void> {
  await s.server.stop();
  rmSync(s.dir, { recursive: true, force: true });
}

/**
 * A paced client from LEGIT_IP (each connection one GET every 20 ms, about 100 req/s in all: an
 * ordinary client, under every threshold); returns a stop function answering ok req/s and failures.
 */
function legitLoop(edge: URL, connections = 2): () => Promise<{ rps: number; failed: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections, localAddress: LEGIT_IP });
  let running = true;
  let ok = 0;
  let failed = 0;
  const started = performance.now();
  const one = () =>
    new Promise<void>((resolve) => {
      const req = http.request({ host: edge.hostname, port: edge.port, path: '/', agent, headers: { host: HOST } }, (res) => {
        res.resume();
        res.on('end', () => {
          if (res.statusCode === 200) ok++;
          else failed++;
          resolve();
        });
      });
      req.on('error', () => {
        failed++;
        resolve();
      });
      req.end();
    });
  const workers = Array.from({ length: connections }, async () => {
    while (running) {
      await one();
      await new Promise((r) => setTimeout(r, 20));
    }
  });
  return async () => {
    running = false;
    await Promise.all(workers);
    agent.destroy();
    return { rps: (ok * 1000) / (performance.now() - started), failed };
  };
}

export async function main(argv: string[]): Promise<number> {
  let floods = 5;
  let seconds = 5;
  let rounds = 2;
  let connections = 32;
  try {
    for (let i = 0; i < argv.length; i++) {
      const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
      const v = () => inline ?? argv[++i];
      if (flag === '--floods') floods = intOption(flag, v(), 1, 50);
      else if (flag === '--seconds') seconds = intOption(flag, v(), 1, 120);
      else if (flag === '--rounds') rounds = intOption(flag, v(), 1, 20);
      else if (flag === '--connections') connections = intOption(flag, v(), 1, 1024);
      else if (flag === '--help') {
        process.stdout.write('usage: npm run bench -- ddos [--floods 5] [--seconds 5] [--rounds 2] [--connections 32]\n');
        return 0;
      } else throw new UsageError(`unknown option ${flag}`);
    }
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\n`);
      return 2;
    }
    throw err;
  }
  if (!which('wrk')) process.stdout.write('wrk not found: load comes from a Node loop (slower; floods may stay under threshold)\n');

  const origin = http.createServer((_req, res) => res.end('hello from the ddos bench origin\n'));
  await new Promise<void>((r) => origin.listen(80, ORIGIN_IP, () => r()));
  const hooks: number[] = [];
  const receiver = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      if (body.includes('ALERT_STATE_EVENT_START')) hooks.push(Date.now());
      res.end('ok');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
  const load = [loadavg()[0]];

  // --- 1 + 2: floods against the default thresholds ------------------------------------------
  const a = await side({});
  const accountId = a.server.seeded.accountId;
  const hook = await api(a, 'POST', `/accounts/${accountId}/alerting/v3/destinations/webhooks`, { name: 'bench', url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/` });
  await api(a, 'POST', `/accounts/${accountId}/alerting/v3/policies`, { name: 'bench', alert_type: 'dos_attack_l7', enabled: true, mechanisms: { webhooks: [{ id: hook.id }] } });
  hooks.length = 0;
  const calm = legitLoop(a.edge);
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const legitCalm = await calm();
  const toMitigation: number[] = [];
  const toAlert: number[] = [];
  const legitDuring: number[] = [];
  /** Answers per second wrk got during each flood (mostly 403s once mitigated). */
  const floodRps: number[] = [];
  let legitFailed = 0;
  for (let i = 0; i < floods; i++) {
    const before = (await api(a, 'GET', `/accounts/${accountId}/ddos/attacks?per_page=100`)) as any[];
    const t0 = Date.now();
    const legit = legitLoop(a.edge);
    floodRps.push((await loadHost(a.edge.origin, HOST, 3, connections)).rps);
    const l = await legit();
    legitDuring.push(l.rps);
    legitFailed += l.failed;
    const list = (await api(a, 'GET', `/accounts/${accountId}/ddos/attacks?per_page=100`)) as any[];
    const fresh = list.filter((x) => !before.some((b) => b.id === x.id));
    const first = Math.min(...fresh.map((x) => Date.parse(x.start_time)));
    if (Number.isFinite(first)) toMitigation.push(first - t0);
    const hookAt = hooks.find((h) => h >= t0);
    if (hookAt) toAlert.push(hookAt - t0);
    // Wait for the attack to end before the next flood.
    for (let w = 0; w < 100; w++) {
      const running = (await api(a, 'GET', `/accounts/${accountId}/ddos/attacks?status=active`)) as any[];
      if (running.length === 0) break;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  load.push(loadavg()[0]);
  await stopSide(a);

  // --- 3: detection on (never firing) vs off -------------------------------------------------
  const on = await side({ ddosThresholdPercent: 100_000_000 });
  const off = await side({ ddosDetection: false });
  const rpsOn: number[] = [];
  const rpsOff: number[] = [];
  await loadHost(on.edge.origin, HOST, 1, connections);
  await loadHost(off.edge.origin, HOST, 1, connections);
  for (let r = 0; r < rounds; r++) {
    rpsOff.push((await loadHost(off.edge.origin, HOST, seconds, connections)).rps);
    rpsOn.push((await loadHost(on.edge.origin, HOST, seconds, connections)).rps);
  }
  load.push(loadavg()[0]);
  await stopSide(on);
  await stopSide(off);
  origin.close();
  receiver.close();

  const p50 = (xs: number[]) => (xs.length ? ms(median(xs)) : 'n/a');
  const max = (xs: number[]) => (xs.length ? ms(Math.max(...xs)) : 'n/a');
  process.stdout.write(`\nddos bench: ${floods} floods (wrk -t1 -c${connections}, 3 s each, default thresholds; wrk answers/s per flood: ${floodRps.map((x) => int(x)).join(' ')}), load average ${load.map((x) => x.toFixed(2)).join(' → ')}\n\n`);
  process.stdout.write(
    table(
      ['measure', 'p50', 'max', 'samples'],
      [
        ['flood start → first mitigated request', p50(toMitigation), max(toMitigation), `${toMitigation.length}/${floods}`],
        ['flood start → alert webhook received', p50(toAlert), max(toAlert), `${toAlert.length}/${floods}`],
      ],
    ) + '\n\n',
  );
  process.stdout.write(
    table(
      ['legitimate client (2 paced conns, other source)', 'req/s', 'non-200'],
      [
        ['no attack', int(legitCalm.rps), String(legitCalm.failed)],
        ['during floods (median)', int(median(legitDuring)), String(legitFailed)],
        ['ratio during / without', ratio(median(legitDuring), legitCalm.rps), ''],
      ],
    ) + '\n\n',
  );
  process.stdout.write(
    table(
      ['edge, no attack (wrk)', 'req/s (median)', 'rounds'],
      [
        ['detection off', int(median(rpsOff)), rpsOff.map((x) => int(x)).join(' ')],
        ['detection on', int(median(rpsOn)), rpsOn.map((x) => int(x)).join(' ')],
        ['on / off (target ≥ 0.9)', ratio(median(rpsOn), median(rpsOff)), ''],
      ],
    ) + '\n',
  );
  return 0;
}
