/**
 * Workers at the edge: requests/s and p50/p99 through Outpost's edge to a bare node:http origin,
 * for a zone route whose script fetches the origin (adding a header on the way) beside a route of
 * the same zone without a script, in the same run (sides alternate round by round; medians
 * reported). Load comes from wrk when installed, else from a Node keep-alive request loop. See
 * bench/README.md ("workers").
 *
 *   npm run bench -- workers [--seconds 5] [--rounds 3] [--connections 32]
 */
import { writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseOrExit } from './lib/args.ts';
import { startOutpost } from './lib/outpost.ts';
import { int, ms, ratio, table } from './lib/format.ts';
import { getOnce, loadDescription, loadHost, median, type Measured } from './lib/host-load.ts';
import {
  installCleanupHandlers,
  Interrupted,
  runCleanups,
  spawnNode,
  tempDir,
  throwIfInterrupted,
} from './lib/procs.ts';

export const description =
  'edge req/s and p99 through a route whose script fetches the origin vs a route without a script';

const ORIGIN_IP = '127.0.32.1';
const ZONE = 'workersbench.example';
const SCRIPT_HOST = `www.${ZONE}`;
const PLAIN_HOST = `plain.${ZONE}`;

const USAGE = `usage: npm run bench -- workers [options]

  --seconds N       length of each measured run (default 5)
  --rounds N        rounds; each measures both sides once (default 3)
  --warmup N        unmeasured seconds per side before the first round (default 1)
  --connections N   concurrent connections (default 32)

The origin listens on ${ORIGIN_IP}:80 (binding it needs root). wrk is used when on PATH.
`;

interface Options {
  seconds: number;
  rounds: number;
  warmup: number;
  connections: number;
}

function parseOptions(argv: string[]): Options | 'help' {
  const o: Options = { seconds: 5, rounds: 3, warmup: 1, connections: 32 };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
    if (flag === '--help' || flag === '-h') return 'help';
    const key = flag.replace(/^--/, '') as keyof Options;
    if (!(key in o)) throw new Error(`unknown option ${argv[i]}\n${USAGE}`);
    const n = Number(inline ?? argv[++i]);
    if (!Number.isInteger(n) || n < (key === 'warmup' ? 0 : 1))
      throw new Error(`${flag} needs a positive integer`);
    o[key] = n;
  }
  return o;
}

const ORIGIN_SOURCE = `import http from 'node:http';
const body = Buffer.from('hello from the workers bench origin\\n');
const server = http.createServer({ keepAliveTimeout: 300000 }, (req, res) => {
  req.resume();
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length, 'x-origin-saw': String(req.headers['x-worker'] ?? '') });
  res.end(body);
});
server.listen(80, ${JSON.stringify(ORIGIN_IP)}, () => process.stdout.write('origin listening\\n'));
process.on('SIGTERM', () => process.exit(0));
`;

const SCRIPT = `export default {
  async fetch(request) {
    const req = new Request(request);
    req.headers.set('x-worker', 'bench');
    const res = await fetch(req);
    const out = new Response(res.body, res);
    out.headers.set('x-worker-ran', '1');
    return out;
  },
};
`;

interface Side {
  label: string;
  host: string;
}

export async function main(argv: string[]): Promise<number> {
  const o = parseOrExit(argv, parseOptions, USAGE);
  if (typeof o === 'number') return o;
  installCleanupHandlers();
  const log = (s: string) => process.stdout.write(`${s}\n`);
  try {
    const dir = tempDir('outpost-bench-workers-');
    const originFile = join(dir.path, 'origin.mjs');
    writeFileSync(originFile, ORIGIN_SOURCE);
    await spawnNode('origin', [originFile], { cwd: dir.path, ready: /origin listening/ });

    const outpost = await startOutpost(join(dir.path, 'data'));
    const { edge, accountId, call } = outpost;
    const zone = await call(
      'POST',
      '/zones',
      JSON.stringify({ name: ZONE, account: { id: accountId } }),
    );
    for (const name of ['www', 'plain'])
      await call(
        'POST',
        `/zones/${zone.id}/dns_records`,
        JSON.stringify({ type: 'A', name, content: ORIGIN_IP, proxied: true, ttl: 1 }),
      );
    const form = new FormData();
    form.set(
      'metadata',
      JSON.stringify({ main_module: 'index.js', compatibility_date: '2025-01-01' }),
    );
    form.set('index.js', new Blob([SCRIPT], { type: 'application/javascript+module' }), 'index.js');
    await call('PUT', `/accounts/${accountId}/workers/scripts/bench`, form);
    await call(
      'POST',
      `/zones/${zone.id}/workers/routes`,
      JSON.stringify({ pattern: `${SCRIPT_HOST}/*`, script: 'bench' }),
    );
    await call(
      'POST',
      `/zones/${zone.id}/workers/routes`,
      JSON.stringify({ pattern: `${PLAIN_HOST}/*` }),
    );
    const check = await getOnce(edge, SCRIPT_HOST);
    if (
      check.status !== 200 ||
      check.headers['x-origin-saw'] !== 'bench' ||
      check.headers['x-worker-ran'] !== '1'
    )
      throw new Error(`the script did not run: ${check.status} ${JSON.stringify(check.headers)}`);
    const plainCheck = await getOnce(edge, PLAIN_HOST);
    if (plainCheck.status !== 200 || plainCheck.headers['x-worker-ran'] !== undefined)
      throw new Error('the route without a script ran the script');

    const sides: Side[] = [
      { label: 'route without a script', host: PLAIN_HOST },
      { label: 'route → script → fetch(origin)', host: SCRIPT_HOST },
    ];
    const measure = (s: Side, seconds: number) =>
      loadHost(edge.href, s.host, seconds, o.connections);
    log(
      `node ${process.version}; ${availableParallelism()} CPUs shared by the load generator, Outpost, workerd and the origin`,
    );
    log(
      `load: ${loadDescription(o.connections)}, ${o.seconds} s × ${o.rounds} round(s) per side, ${o.warmup} s warm-up`,
    );
    if (o.warmup > 0) for (const s of sides) await measure(s, o.warmup);
    const results = new Map<string, Measured[]>(sides.map((s) => [s.label, []]));
    for (let r = 0; r < o.rounds; r++) {
      for (const s of sides) {
        throwIfInterrupted();
        results.get(s.label)!.push(await measure(s, o.seconds));
      }
    }
    const base = median(results.get(sides[0].label)!.map((m) => m.rps));
    const rows = sides.map((s) => {
      const ms_ = results.get(s.label)!;
      const rps = median(ms_.map((m) => m.rps));
      return [
        s.label,
        int(rps),
        ms(median(ms_.map((m) => m.p50))),
        ms(median(ms_.map((m) => m.p99))),
        ratio(rps, base),
        int(ms_.reduce((a, m) => a + m.errors, 0)),
      ];
    });
    log('');
    log(
      table(
        ['edge (same zone, same origin)', 'req/s', 'p50 ms', 'p99 ms', 'vs no script', 'errors'],
        rows,
      ),
    );

    return 0;
  } catch (err) {
    if (err instanceof Interrupted) return 130;
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    return 1;
  } finally {
    await runCleanups();
  }
}
