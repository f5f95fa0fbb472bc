/**
 * Browser rendering: screenshot and PDF of a local page through Outpost's REST actions (warm pool)
 * beside a cold `puppeteer-core` launch of the same Chromium per request, in the same run —
 * latency p50/p99 of sequential requests and requests/s at the given concurrency; then content and
 * markdown requests/s through the pool. See bench/README.md ("browser").
 *
 *   npm run bench -- browser [--requests 10] [--seconds 5] [--concurrency 2] [--pool 2]
 */
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';
import { loadConfig } from '../src/core/config.ts';
import { createLogger } from '../src/core/log.ts';
import { startServer } from '../src/server.ts';
import { CHROMIUM_FLAGS } from '../src/areas/browser-rendering/pool.ts';
import { intOption, UsageError } from './lib/args.ts';
import { ms, ratio, table } from './lib/format.ts';

export const description = 'screenshot/pdf p50/p99 and req/s: warm pool vs a cold puppeteer-core launch per request; content/markdown req/s';

const CHROMIUM = '/usr/bin/chromium';
const TOKEN = 'bench-browser-token-0123456789abcdef';
const PAGE = `<!doctype html><title>Bench</title><style>body{font-family:sans-serif}</style>
<h1>Benchmark page</h1><p id="o">…</p><ul>${Array.from({ length: 30 }, (_, i) => `<li><a href="/p${i}">item ${i}</a></li>`).join('')}</ul>
<script>document.getElementById('o').textContent = 'rendered ' + Date.now();</script>`;

interface Options {
  requests: number;
  seconds: number;
  concurrency: number;
  pool: number;
}

function parse(argv: string[]): Options {
  const o: Options = { requests: 10, seconds: 5, concurrency: 2, pool: 2 };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
    const value = inline ?? argv[++i];
    if (flag === '--requests') o.requests = intOption(flag, value, 2, 1000);
    else if (flag === '--seconds') o.seconds = intOption(flag, value, 1, 600);
    else if (flag === '--concurrency') o.concurrency = intOption(flag, value, 1, 64);
    else if (flag === '--pool') o.pool = intOption(flag, value, 1, 16);
    else throw new UsageError(`unknown option ${flag}`);
  }
  return o;
}

function pct(samples: number[], p: number): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
}

async function sequential(n: number, one: () => Promise<void>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await one();
    out.push(performance.now() - t);
  }
  return out;
}

async function throughput(seconds: number, concurrency: number, one: () => Promise<void>): Promise<number> {
  const end = performance.now() + seconds * 1000;
  let done = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        await one();
        done++;
      }
    }),
  );
  return done / ((performance.now() - started) / 1000);
}

export async function main(argv: string[]): Promise<number> {
  let o: Options;
  try {
    o = parse(argv);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\nusage: npm run bench -- browser [--requests N] [--seconds N] [--concurrency N] [--pool N]\n`);
    return 2;
  }
  const origin = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(PAGE));
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', () => r()));
  const pageUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}/`;
  const dataDir = mkdtempSync(join(tmpdir(), 'outpost-bench-browser-'));
  const config = loadConfig({}, {}, {
    apiPort: 0, edgePort: 0, dnsPort: 0, turnPort: 0, dataDir, database: join(dataDir, 'outpost.db'), apiToken: TOKEN, logLevel: 'silent',
    browserPoolSize: o.pool, browserAllow: ['127.0.0.0/8'], browserConcurrency: 1000, browserRate: { requests: 0, windowSeconds: 1 },
  });
  const server = await startServer(config, { logger: createLogger('silent') });
  const api = `${server.apiUrl}/client/v4/accounts/${server.seeded.accountId}/browser-rendering`;
  const warm = (action: string, body: unknown) => async () => {
    const res = await fetch(`${api}/${action}`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const bytes = await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`${action}: ${res.status} ${Buffer.from(bytes).toString().slice(0, 200)}`);
  };
  const cold = (kind: 'screenshot' | 'pdf') => async () => {
    const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-cold-'));
    const browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, userDataDir: dir, args: CHROMIUM_FLAGS });
    try {
      const page = await browser.newPage();
      await page.setViewport({ width: 1280, height: 720 });
      await page.goto(pageUrl, { waitUntil: 'load' });
      if (kind === 'screenshot') await page.screenshot({ type: 'png' });
      else await page.pdf({ format: 'a4' });
    } finally {
      await browser.close();
      rmSync(dir, { recursive: true, force: true });
    }
  };
  const shotBody = { url: pageUrl, viewport: { width: 1280, height: 720 } };
  const rows: string[][] = [];
  try {
    await warm('content', { url: pageUrl })(); // starts the pool
    for (const kind of ['screenshot', 'pdf'] as const) {
      const body = kind === 'pdf' ? { url: pageUrl, pdfOptions: { format: 'A4' } } : shotBody;
      const w = await sequential(o.requests, warm(kind, body));
      const c = await sequential(o.requests, cold(kind));
      const wr = await throughput(o.seconds, o.concurrency, warm(kind, body));
      const cr = await throughput(o.seconds, o.concurrency, cold(kind));
      rows.push([`${kind} warm pool`, ms(pct(w, 50)), ms(pct(w, 99)), wr.toFixed(1), ratio(pct(c, 50), pct(w, 50))]);
      rows.push([`${kind} cold launch`, ms(pct(c, 50)), ms(pct(c, 99)), cr.toFixed(1), '1.00x']);
    }
    for (const action of ['content', 'markdown']) {
      const r = await throughput(o.seconds, o.concurrency, warm(action, { url: pageUrl }));
      rows.push([`${action} warm pool`, '', '', r.toFixed(1), '']);
    }
  } finally {
    await server.stop();
    origin.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
  process.stdout.write(`browser rendering — ${o.requests} sequential requests per side, then ${o.seconds} s at concurrency ${o.concurrency}; pool of ${o.pool}\n`);
  process.stdout.write(table(['side', 'p50', 'p99', 'req/s', 'p50 speed-up'], rows) + '\n');
  return 0;
}
