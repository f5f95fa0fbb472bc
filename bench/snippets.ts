/**
 * Snippets at the edge: requests/s and p50/p99 through Outpost's edge to a bare node:http origin,
 * for a host whose requests run a header-rewriting snippet beside a host of the same zone with no
 * snippet, in the same run (sides alternate round by round; medians reported); then the time from
 * an upload (PUT …/snippets/{name}) to the first edge request served by the new code. Load comes
 * from wrk when installed, else from a Node keep-alive request loop. See bench/README.md
 * ("snippets").
 *
 *   npm run bench -- snippets [--seconds 5] [--rounds 3] [--connections 32] [--uploads 5]
 */
import { writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseOrExit } from './lib/args.ts';
import { startOutpost } from './lib/outpost.ts';
import { int, ms, ratio, table } from './lib/format.ts';
import { getOnce, loadDescription, loadHost, median, type Measured } from './lib/host-load.ts';
import {
  cpuMsOfTree,
  installCleanupHandlers,
  Interrupted,
  runCleanups,
  spawnNode,
  tempDir,
  throwIfInterrupted,
} from './lib/procs.ts';

export const description =
  'edge req/s and p99 with a header-rewriting snippet vs the same zone without one; upload-to-live time';

const ORIGIN_IP = '127.0.31.1';
const ZONE = 'snipbench.example';
const SNIPPET_HOST = `www.${ZONE}`;
const PLAIN_HOST = `plain.${ZONE}`;

const USAGE = `usage: npm run bench -- snippets [options]

  --seconds N       length of each measured run (default 5)
  --rounds N        rounds; each measures both sides once (default 3)
  --warmup N        unmeasured seconds per side before the first round (default 1)
  --connections N   concurrent connections (default 32)
  --uploads N       uploads timed from PUT to the first request served by the new code (default 5)

The origin listens on ${ORIGIN_IP}:80 (binding it needs root). wrk is used when on PATH.
`;

interface Options {
  seconds: number;
  rounds: number;
  warmup: number;
  connections: number;
  uploads: number;
}

function parseOptions(argv: string[]): Options | 'help' {
  const o: Options = { seconds: 5, rounds: 3, warmup: 1, connections: 32, uploads: 5 };
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
const body = Buffer.from('hello from the snippet bench origin\\n');
const server = http.createServer({ keepAliveTimeout: 300000 }, (req, res) => {
  req.resume();
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length, 'x-origin-saw': String(req.headers['x-snippet'] ?? '') });
  res.end(body);
});
server.listen(80, ${JSON.stringify(ORIGIN_IP)}, () => process.stdout.write('origin listening\\n'));
process.on('SIGTERM', () => process.exit(0));
`;

const snippetSource = (version: string) => `export default {
  async fetch(request) {
    const req = new Request(request);
    req.headers.set('x-snippet', ${JSON.stringify(version)});
    const res = await fetch(req);
    const out = new Response(res.body, res);
    out.headers.set('x-snippet-version', ${JSON.stringify(version)});
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
    const dir = tempDir('outpost-bench-snippets-');
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
    const upload = (version: string) => {
      const form = new FormData();
      form.set('metadata', JSON.stringify({ main_module: 'snippet.js' }));
      form.set(
        'files',
        new Blob([snippetSource(version)], { type: 'application/javascript+module' }),
        'snippet.js',
      );
      return call('PUT', `/zones/${zone.id}/snippets/rewrite`, form);
    };
    await upload('v0');
    await call(
      'PUT',
      `/zones/${zone.id}/snippets/snippet_rules`,
      JSON.stringify({
        rules: [
          { snippet_name: 'rewrite', expression: `http.host eq "${SNIPPET_HOST}"`, enabled: true },
        ],
      }),
    );
    const check = await getOnce(edge, SNIPPET_HOST);
    if (
      check.status !== 200 ||
      check.headers['x-origin-saw'] !== 'v0' ||
      check.headers['x-snippet-version'] !== 'v0'
    ) {
      throw new Error(`the snippet did not run: ${check.status} ${JSON.stringify(check.headers)}`);
    }
    const plainCheck = await getOnce(edge, PLAIN_HOST);
    if (plainCheck.status !== 200 || plainCheck.headers['x-snippet-version'] !== undefined)
      throw new Error('the plain host ran the snippet');

    const sides: Side[] = [
      { label: 'no snippet', host: PLAIN_HOST },
      { label: 'header-rewriting snippet', host: SNIPPET_HOST },
    ];
    const outpostCpu = () => cpuMsOfTree(outpost.child.proc.pid!) ?? NaN;
    const measure = async (s: Side, seconds: number): Promise<Measured> => {
      const cpu0 = outpostCpu();
      const m = await loadHost(edge.href, s.host, seconds, o.connections);
      m.cpuUs = ((outpostCpu() - cpu0) * 1000) / (m.rps * seconds);
      return m;
    };
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
        int(median(ms_.map((m) => m.cpuUs ?? NaN))),
        int(ms_.reduce((a, m) => a + m.errors, 0)),
      ];
    });
    log('');
    log(
      table(
        [
          'edge (same zone, same origin)',
          'req/s',
          'p50 ms',
          'p99 ms',
          'vs no snippet',
          'Outpost CPU µs/req',
          'errors',
        ],
        rows,
      ),
    );

    const uploads: { put: number; live: number }[] = [];
    for (let i = 1; i <= o.uploads; i++) {
      throwIfInterrupted();
      const version = `v${i}`;
      const t0 = performance.now();
      await upload(version);
      const put = performance.now() - t0;
      let live = NaN;
      for (let tries = 0; tries < 2000; tries++) {
        const res = await getOnce(edge, SNIPPET_HOST);
        if (res.headers['x-snippet-version'] === version) {
          live = performance.now() - t0;
          break;
        }
      }
      uploads.push({ put, live });
    }
    log('');
    log(
      table(
        ['upload → new code live', 'median ms', 'max ms'],
        [
          [
            'PUT answered',
            ms(median(uploads.map((u) => u.put))),
            ms(Math.max(...uploads.map((u) => u.put))),
          ],
          [
            'first request served by the new code',
            ms(median(uploads.map((u) => u.live))),
            ms(Math.max(...uploads.map((u) => u.live))),
          ],
        ],
      ),
    );
    log(
      `(${o.uploads} uploads; target < 500 ms. Each upload starts a new runtime instance with the zone's snippets and swaps it in.)`,
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
