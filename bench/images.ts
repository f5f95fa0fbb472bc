/**
 * Images: the imgproxy/imagor workload (2000×1333 JPEG → fit inside 500×500, JPEG q80) with 16
 * requests in flight through Outpost's delivery (`/<hash>/<id>/w=500,h=500,fit=scale-down,q=80`,
 * every request a cache miss), beside raw sharp doing the same resize 16 at a time in the same
 * process, phases alternating round by round; then the cached path (one hot URL). CPU ms per
 * transform is the process's user+system CPU time over the phase divided by the transforms done
 * (the load generator's own share is in Outpost's figure). See bench/README.md ("images").
 *
 *   npm run bench -- images [--seconds 4] [--rounds 2] [--concurrency 16] [--images 8]
 */
import http from 'node:http';
import { join } from 'node:path';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import sharp from 'sharp';
import { loadConfig } from '../src/core/config.ts';
import { createLogger } from '../src/core/log.ts';
import { startServer } from '../src/server.ts';
import { intOption, UsageError, parseOrExit } from './lib/args.ts';
import { int, ms, ratio, table } from './lib/format.ts';

export const description = '2000×1333 JPEG → fit 500×500 q80, 16 concurrent: delivery vs raw sharp; cached path req/s';

const USAGE = `usage: npm run bench -- images [options]

  --seconds N       length of each measured phase (default 4)
  --rounds N        rounds; each measures delivery and raw sharp once (default 2)
  --concurrency N   requests / transforms in flight (default 16)
  --images N        distinct source pictures (default 8)
`;

interface Options {
  seconds: number;
  rounds: number;
  concurrency: number;
  images: number;
}

function parse(argv: string[]): Options | 'help' {
  const o: Options = { seconds: 4, rounds: 2, concurrency: 16, images: 8 };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
    if (flag === '--help' || flag === '-h') return 'help';
    const key = flag.replace(/^--/, '') as keyof Options;
    if (!(key in o)) throw new UsageError(`unknown option ${argv[i]}`);
    o[key] = intOption(flag, inline ?? argv[++i], 1, 1000);
  }
  return o;
}

/** A photo-like 2000×1333 JPEG: smooth gradients plus fine noise, different per seed. */
async function picture(seed: number): Promise<Buffer> {
  const w = 2000;
  const h = 1333;
  const data = Buffer.alloc(w * h * 3);
  let x = seed * 7919 + 1;
  for (let y = 0; y < h; y++) {
    for (let i = 0; i < w; i++) {
      x = (x * 1103515245 + 12345) & 0x7fffffff;
      const n = (x >> 16) & 31;
      const o = (y * w + i) * 3;
      data[o] = ((i * 255) / w + n + seed * 20) & 255;
      data[o + 1] = ((y * 255) / h + n) & 255;
      data[o + 2] = (((i + y) * 128) / (w + h) + n * 2) & 255;
    }
  }
  return sharp(data, { raw: { width: w, height: h, channels: 3 } }).jpeg({ quality: 90 }).toBuffer();
}

interface Measured {
  done: number;
  seconds: number;
  cpuMs: number;
  p50: number;
  p99: number;
  errors: number;
}

async function measure(concurrency: number, seconds: number, task: (i: number) => Promise<boolean>): Promise<Measured> {
  const lat: number[] = [];
  let done = 0;
  let errors = 0;
  let n = 0;
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const deadline = start + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        const t0 = performance.now();
        const ok = await task(n++).catch(() => false);
        if (ok) {
          done++;
          lat.push(performance.now() - t0);
        } else errors++;
      }
    }),
  );
  const elapsed = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpu0);
  lat.sort((a, b) => a - b);
  const pct = (q: number) => (lat.length ? lat[Math.min(lat.length - 1, Math.ceil(q * lat.length) - 1)] : NaN);
  return { done, seconds: elapsed, cpuMs: (cpu.user + cpu.system) / 1000, p50: pct(0.5), p99: pct(0.99), errors };
}

function get(port: number, path: string, agent: http.Agent): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent }, (res) => {
      let size = 0;
      res.on('data', (c: Buffer) => (size += c.length));
      res.on('end', () => resolve(res.statusCode === 200 && size > 0));
      res.on('error', () => resolve(false));
    });
    req.on('error', () => resolve(false));
  });
}

export async function main(argv: string[]): Promise<number> {
  const o = parseOrExit(argv, parse, USAGE);
  if (typeof o === 'number') return o;
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-images-'));
  const token = 'bench-images-token-0123456789abcdef01234567';
  const config = loadConfig({}, {}, { apiPort: 0, edgePort: 0, dnsPort: 0, turnPort: 0, dataDir: dir, database: join(dir, 'outpost.db'), apiToken: token, logLevel: 'warn' });
  const server = await startServer(config, { logger: createLogger('warn') });
  const agent = new http.Agent({ keepAlive: true, maxSockets: o.concurrency });
  try {
    process.stdout.write(`sharp ${sharp.versions.sharp}, libvips ${sharp.versions.vips}; ${o.images} source pictures 2000×1333; ${o.concurrency} in flight; ${o.seconds} s per phase\n`);
    const files: string[] = [];
    const ids: string[] = [];
    let hash = '';
    for (let i = 0; i < o.images; i++) {
      const data = await picture(i);
      const file = join(dir, `src${i}.jpg`);
      writeFileSync(file, data);
      files.push(file);
      const form = new FormData();
      form.append('file', new Blob([new Uint8Array(data)], { type: 'image/jpeg' }), `src${i}.jpg`);
      const res = await fetch(`${server.apiUrl}/client/v4/accounts/${server.seeded.accountId}/images/v1`, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: form });
      const body = (await res.json()) as { result: { id: string; variants: string[] } };
      if (res.status !== 200) throw new Error(`upload failed: ${JSON.stringify(body)}`);
      ids.push(body.result.id);
      hash = new URL(body.result.variants[0]).pathname.split('/')[1];
    }
    // Every delivery request is a cache miss: the same transform under option spellings that do
    // not change the output (`sharpen=0`, `gamma=1`, … on and off) give distinct cache keys.
    const NEUTRAL = ['sharpen=0', 'gamma=1', 'brightness=1', 'contrast=1', 'dpr=1', 'rotate=0', 'metadata=copyright', 'gravity=center', 'background=white', 'g=center'];
    const variantFor = (n: number) => {
      const extra = NEUTRAL.filter((_, bit) => (Math.floor(n / o.images) >> bit) & 1);
      return ['w=500', 'h=500', 'fit=scale-down', 'q=80', ...extra].join(',');
    };
    let counter = 0;
    const delivery = () => {
      const n = counter++;
      if (n / o.images >= 1 << NEUTRAL.length) throw new Error('ran out of distinct URLs; lower --seconds');
      return get(server.apiPort, `/${hash}/${ids[n % o.images]}/${variantFor(n)}`, agent);
    };
    const raw = async (i: number) => {
      const out = await sharp(files[i % files.length]).resize(500, 500, { fit: 'inside', withoutEnlargement: true }).jpeg({ quality: 80 }).toBuffer();
      return out.length > 0;
    };
    // Check once: both produce a 500×333 JPEG.
    const check = await fetch(`${server.apiUrl}/${hash}/${ids[0]}/w=500,h=500,fit=scale-down,q=80`);
    const m = await sharp(Buffer.from(await check.arrayBuffer())).metadata();
    if (check.status !== 200 || m.width !== 500 || m.height !== 333 || m.format !== 'jpeg') throw new Error(`delivery check failed: ${check.status} ${m.width}×${m.height} ${m.format}`);
    counter = o.images; // the check above cached the first spelling of image 0

    await measure(o.concurrency, 1, raw);
    await measure(o.concurrency, 1, delivery);
    const ours: Measured[] = [];
    const peer: Measured[] = [];
    for (let r = 0; r < o.rounds; r++) {
      const a = await measure(o.concurrency, o.seconds, delivery);
      const b = await measure(o.concurrency, o.seconds, raw);
      ours.push(a);
      peer.push(b);
      process.stdout.write(`round ${r + 1}: delivery ${(a.done / a.seconds).toFixed(1)}/s, raw sharp ${(b.done / b.seconds).toFixed(1)}/s\n`);
    }
    const hot = `/${hash}/${ids[0]}/w=500,h=500,fit=scale-down,q=80`;
    await get(server.apiPort, hot, agent);
    const cached = await measure(o.concurrency, o.seconds, () => get(server.apiPort, hot, agent));

    const sum = (xs: Measured[]) => xs.reduce((acc, x) => ({ done: acc.done + x.done, seconds: acc.seconds + x.seconds, cpuMs: acc.cpuMs + x.cpuMs, p50: Math.max(acc.p50, x.p50), p99: Math.max(acc.p99, x.p99), errors: acc.errors + x.errors }), { done: 0, seconds: 0, cpuMs: 0, p50: 0, p99: 0, errors: 0 });
    const a = sum(ours);
    const b = sum(peer);
    const rate = (x: Measured) => x.done / x.seconds;
    const row = (name: string, x: Measured, vs: string) => [name, rate(x).toFixed(1), ms(x.cpuMs / Math.max(1, x.done)), ms(x.p50), ms(x.p99), int(x.done), vs, int(x.errors)];
    process.stdout.write(
      '\n' +
        table(
          ['side', 'transforms/s', 'CPU ms each', 'p50 ms', 'p99 ms', 'done', 'vs raw sharp', 'errors'],
          [row('Outpost delivery (cache miss)', a, ratio(rate(a), rate(b))), row('raw sharp (same process)', b, '1.00x'), row('Outpost delivery (cached, hot URL)', cached, ratio(rate(cached), rate(b)))],
        ) +
        '\n\nreference: imgproxy ~21 ms CPU per request on this workload (published, 8C/16T machine)\n',
    );
    return a.errors + b.errors + cached.errors > 0 ? 1 : 0;
  } finally {
    agent.destroy();
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
