/**
 * Dispatch namespaces: (1) requests/s and p50/p99 through the edge → dispatcher script →
 * customer script (hello world) beside the same customer code on its own zone route, in the same
 * run (sides alternate round by round; medians reported); (2) the time from the `PUT` of a new
 * customer script to its first answer through the dispatcher; (3) requests/s through the
 * dispatcher with many distinct customer scripts in rotation (customers are guests of a few pooled
 * runtime processes, so this is the cost of many tenants). See bench/README.md ("dispatch").
 *
 *   npm run bench -- dispatch [--seconds 5] [--rounds 3] [--connections 32] [--customers 1000]
 */
import http from 'node:http';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseOrExit } from './lib/args.ts';
import { startOutpost } from './lib/outpost.ts';
import { int, ms, ratio, table } from './lib/format.ts';
import { getOnce, loadDescription, loadHost, median, type Measured } from './lib/host-load.ts';
import { closedLoop, makeTarget } from './lib/load.ts';
import {
  installCleanupHandlers,
  Interrupted,
  runCleanups,
  tempDir,
  throwIfInterrupted,
} from './lib/procs.ts';

export const description =
  'edge → dispatcher → customer script vs the same script on its own route; PUT → first answer; many customers in rotation';

const ZONE = 'dispatchbench.example';
const ORIGIN_IP = '127.0.33.1';

const USAGE = `usage: npm run bench -- dispatch [options]

  --seconds N       length of each measured run (default 5)
  --rounds N        rounds; each measures both sides once (default 3)
  --warmup N        unmeasured seconds per side before the first round (default 1)
  --connections N   concurrent connections (default 32)
  --customers N     distinct customer scripts in the rotation run (default 1000; they share
                    the pooled runtime processes)
  --fresh N         new customer scripts timed from PUT to first answer (default 5)
`;

interface Options {
  seconds: number;
  rounds: number;
  warmup: number;
  connections: number;
  customers: number;
  fresh: number;
}

function parseOptions(argv: string[]): Options | 'help' {
  const o: Options = {
    seconds: 5,
    rounds: 3,
    warmup: 1,
    connections: 32,
    customers: 1000,
    fresh: 5,
  };
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

const HELLO = `export default {
  async fetch() {
    return new Response('hello world\\n', { headers: { 'x-hello': '1' } });
  },
};
`;

// The customer's name is the first hostname label or, on the paths host, the first path segment.
const DISPATCHER = `export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    let name = url.hostname.split('.')[0];
    if (name === 'paths') name = url.pathname.split('/')[1];
    try {
      return await env.CUSTOMERS.get(name).fetch(request);
    } catch (e) {
      return new Response(e.message, { status: 404 });
    }
  },
};
`;

export async function main(argv: string[]): Promise<number> {
  const o = parseOrExit(argv, parseOptions, USAGE);
  if (typeof o === 'number') return o;
  installCleanupHandlers();
  const log = (s: string) => process.stdout.write(`${s}\n`);
  try {
    const dir = tempDir('outpost-bench-dispatch-');
    const outpost = await startOutpost(join(dir.path, 'data'));
    const { edge, accountId, call } = outpost;
    const upload = (path: string, bindings: unknown[] = []) => {
      const form = new FormData();
      form.set(
        'metadata',
        JSON.stringify({ main_module: 'index.js', compatibility_date: '2025-01-01', bindings }),
      );
      const source = bindings.length ? DISPATCHER : HELLO;
      form.set(
        'index.js',
        new Blob([source], { type: 'application/javascript+module' }),
        'index.js',
      );
      return call('PUT', path, form);
    };
    const zone = await call(
      'POST',
      '/zones',
      JSON.stringify({ name: ZONE, account: { id: accountId } }),
    );
    for (const name of ['own', 'hello', 'paths'])
      await call(
        'POST',
        `/zones/${zone.id}/dns_records`,
        JSON.stringify({ type: 'A', name, content: ORIGIN_IP, proxied: true, ttl: 1 }),
      );
    await call(
      'POST',
      `/accounts/${accountId}/workers/dispatch/namespaces`,
      JSON.stringify({ name: 'customers' }),
    );
    const scripts = `/accounts/${accountId}/workers/dispatch/namespaces/customers/scripts`;
    await upload(`/accounts/${accountId}/workers/scripts/own`);
    await upload(`/accounts/${accountId}/workers/scripts/dispatcher`, [
      { type: 'dispatch_namespace', name: 'CUSTOMERS', namespace: 'customers' },
    ]);
    await upload(`${scripts}/hello`);
    for (const [pattern, script] of [
      [`own.${ZONE}/*`, 'own'],
      [`hello.${ZONE}/*`, 'dispatcher'],
      [`paths.${ZONE}/*`, 'dispatcher'],
    ])
      await call('POST', `/zones/${zone.id}/workers/routes`, JSON.stringify({ pattern, script }));
    for (const host of [`own.${ZONE}`, `hello.${ZONE}`]) {
      const check = await getOnce(edge, host);
      if (check.status !== 200 || check.headers['x-hello'] !== '1')
        throw new Error(`${host} did not answer hello: ${check.status}`);
    }

    log(
      `node ${process.version}; ${availableParallelism()} CPUs shared by the load generator, Outpost and workerd`,
    );
    log(
      `load: ${loadDescription(o.connections)}, ${o.seconds} s × ${o.rounds} round(s) per side, ${o.warmup} s warm-up`,
    );
    const sides = [
      { label: 'customer script on its own route', host: `own.${ZONE}` },
      { label: 'edge → dispatcher → customer script', host: `hello.${ZONE}` },
    ];
    const measure = (host: string, seconds: number) =>
      loadHost(edge.href, host, seconds, o.connections);
    if (o.warmup > 0) for (const s of sides) await measure(s.host, o.warmup);
    const results = new Map<string, Measured[]>(sides.map((s) => [s.label, []]));
    for (let r = 0; r < o.rounds; r++) {
      for (const s of sides) {
        throwIfInterrupted();
        results.get(s.label)!.push(await measure(s.host, o.seconds));
      }
    }
    const base = median(results.get(sides[0].label)!.map((m) => m.rps));
    log('');
    log(
      table(
        ['hello world', 'req/s', 'p50 ms', 'p99 ms', 'vs own route', 'errors'],
        sides.map((s) => {
          const m = results.get(s.label)!;
          const rps = median(m.map((x) => x.rps));
          return [
            s.label,
            int(rps),
            ms(median(m.map((x) => x.p50))),
            ms(median(m.map((x) => x.p99))),
            ratio(rps, base),
            int(m.reduce((a, x) => a + x.errors, 0)),
          ];
        }),
      ),
    );

    // PUT of a new customer script → its first answer through the dispatcher.
    const get = (path: string) =>
      new Promise<number>((resolve, reject) => {
        http
          .get(
            { host: edge.hostname, port: edge.port, path, headers: { host: `paths.${ZONE}` } },
            (res) => {
              res.resume();
              res.on('end', () => resolve(res.statusCode ?? 0));
            },
          )
          .on('error', reject);
      });
    const putMs: number[] = [];
    const firstMs: number[] = [];
    for (let i = 0; i < o.fresh; i++) {
      throwIfInterrupted();
      const t0 = performance.now();
      await upload(`${scripts}/fresh${i}`);
      const t1 = performance.now();
      const status = await get(`/fresh${i}/`);
      const t2 = performance.now();
      if (status !== 200) throw new Error(`fresh${i} answered ${status}`);
      putMs.push(t1 - t0);
      firstMs.push(t2 - t0);
    }
    log('');
    log(
      table(
        ['new customer script', 'median ms', 'max ms'],
        [
          [
            "PUT answered (validated: loaded by a pool's Worker Loader)",
            ms(median(putMs)),
            ms(Math.max(...putMs)),
          ],
          [
            'PUT sent → first answer through the dispatcher',
            ms(median(firstMs)),
            ms(Math.max(...firstMs)),
          ],
        ],
      ),
    );

    // Many customers in rotation.
    const uploadStart = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < o.customers) {
          throwIfInterrupted();
          await upload(`${scripts}/c${next++}`);
        }
      }),
    );
    log('');
    log(
      `${o.customers} customer scripts uploaded in ${ms(performance.now() - uploadStart)} ms (8 at a time)`,
    );
    const target = makeTarget('rotation', edge.href, { host: `paths.${ZONE}` }, o.connections);
    let n = 0;
    const rotate = () => ({ method: 'GET' as const, path: `/c${n++ % o.customers}/` });
    await closedLoop({
      target,
      concurrency: o.connections,
      durationMs: o.warmup * 1000,
      next: rotate,
    });
    const rot: Measured[] = [];
    for (let r = 0; r < o.rounds; r++) {
      throwIfInterrupted();
      const p = await closedLoop({
        target,
        concurrency: o.connections,
        durationMs: o.seconds * 1000,
        next: rotate,
        check: (_req, res) => (res.status === 200 ? undefined : `status ${res.status}`),
        checkAll: true,
      });
      rot.push({
        rps: p.rate,
        p50: p.latency.percentile(0.5),
        p99: p.latency.percentile(0.99),
        errors: p.errors,
      });
    }
    target.agent.destroy();
    log('');
    log(
      table(
        ['through the dispatcher', 'req/s', 'p50 ms', 'p99 ms', 'errors'],
        [
          [
            `${o.customers} customers in rotation (Node keep-alive loop)`,
            int(median(rot.map((x) => x.rps))),
            ms(median(rot.map((x) => x.p50))),
            ms(median(rot.map((x) => x.p99))),
            int(rot.reduce((a, x) => a + x.errors, 0)),
          ],
        ],
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
