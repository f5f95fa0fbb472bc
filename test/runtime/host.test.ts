/**
 * The script host against real workerd: load / replace / unload latency, isolation between
 * tenants, Node service bindings, outbound interception and subrequest limits, exceptions and
 * syntax errors with locations, and the CPU watchdog replacing a runaway instance.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/core/log.ts';
import {
  createScriptHost,
  FAILURE_HEADER,
  ScriptError,
  ScriptLimitError,
  type DirectOrigin,
  type LoadOptions,
  type ScriptHost,
} from '../../src/runtime/index.ts';

const esm = (content: string): Pick<LoadOptions, 'modules' | 'mainModule'> => ({
  modules: [{ name: 'main.js', type: 'esm', content }],
  mainModule: 'main.js',
});

let host: ScriptHost;

beforeAll(() => {
  host = createScriptHost({ log: createLogger('silent'), cpuSlackMs: 20, wallTimeoutMs: 10_000 });
});
afterAll(async () => {
  await host.close();
});

describe('load, replace, unload', () => {
  it('loads a script and serves requests with request.cf and request.edge', async () => {
    const t0 = performance.now();
    await host.load(
      't1',
      'hello',
      esm(`export default { async fetch(req) {
      return Response.json({ url: req.url, method: req.method, colo: req.cf?.colo, edge: req.edge?.colo, h: req.headers.get('x-a') });
    } }`),
    );
    const loadMs = performance.now() - t0;
    expect(host.has('t1', 'hello')).toBe(true);
    const res = await host.fetch(
      't1',
      'hello',
      new Request('https://example.com/p?q=1', { headers: { 'x-a': 'b' } }),
      { cf: { colo: 'LHR' } },
    );
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      url: 'https://example.com/p?q=1',
      method: 'GET',
      colo: 'LHR',
      edge: 'LHR',
      h: 'b',
    });
    expect(loadMs).toBeLessThan(5000);
  });

  it('replaces a script; the new code answers right after load resolves', async () => {
    const times: number[] = [];
    for (const v of [1, 2, 3]) {
      const t0 = performance.now();
      await host.load(
        't1',
        'hello',
        esm(`export default { fetch() { return new Response('v${v}'); } }`),
      );
      const res = await host.fetch('t1', 'hello', new Request('http://x/'));
      expect(await res.text()).toBe(`v${v}`);
      times.push(performance.now() - t0);
    }
    // Reported for the record; a replace is a new instance start (~100–400 ms on 2 cores).
    expect(Math.max(...times)).toBeLessThan(3000);
  });

  it('posts bodies through and streams responses back', async () => {
    await host.load(
      't1',
      'echo',
      esm(`export default { async fetch(req) {
      return new Response(req.body, { headers: { 'x-len': req.headers.get('content-length') ?? '' } });
    } }`),
    );
    const body = 'x'.repeat(100_000);
    const res = await host.fetch('t1', 'echo', new Request('http://x/', { method: 'POST', body }));
    expect((await res.text()).length).toBe(body.length);
  });

  it('rejects a syntax error with message and location, keeping the old version', async () => {
    const err = await host
      .load(
        't1',
        'hello',
        esm('export default {\n  fetch() {\n    return new Response("x" +);\n  }\n}'),
      )
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ScriptError);
    expect((err as ScriptError).message).toMatch(/SyntaxError: Unexpected token/);
    expect((err as ScriptError).location).toBe('main.js:3:29');
    expect(await (await host.fetch('t1', 'hello', new Request('http://x/'))).text()).toBe('v3');
  });

  it('reports an exception at the top level as a ScriptError', async () => {
    const err = await host
      .load('t1', 'top', esm(`throw new Error('boom at start');\nexport default {}`))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ScriptError);
    expect((err as ScriptError).message).toMatch(/boom at start/);
    expect(host.has('t1', 'top')).toBe(false);
  });

  it('loads several scripts issued together with one start; a bad one is rejected alone', async () => {
    const results = await Promise.allSettled([
      host.load('t3', 'a', esm(`export default { fetch() { return new Response('a'); } }`)),
      host.load('t3', 'b', esm(`export default { fetch() { return new Response('b' } }`)),
      host.load('t3', 'c', esm(`export default { fetch() { return new Response('c'); } }`)),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(await (await host.fetch('t3', 'a', new Request('http://x/'))).text()).toBe('a');
    expect(await (await host.fetch('t3', 'c', new Request('http://x/'))).text()).toBe('c');
  });

  it('unloads', async () => {
    await host.load('t4', 'gone', esm(`export default { fetch() { return new Response('x'); } }`));
    await host.unload('t4', 'gone');
    expect(host.has('t4', 'gone')).toBe(false);
    await expect(host.fetch('t4', 'gone', new Request('http://x/'))).rejects.toThrow(/not loaded/);
  });
});

describe('isolation and failures', () => {
  it('keeps globals apart between tenants and between scripts', async () => {
    const src = esm(
      `let n = 0; export default { fetch() { n++; globalThis.shared = (globalThis.shared ?? 0) + 1; return new Response(n + ':' + globalThis.shared); } }`,
    );
    await Promise.all([host.load('ta', 'count', src), host.load('tb', 'count', src)]);
    for (let i = 0; i < 3; i++)
      await (await host.fetch('ta', 'count', new Request('http://x/'))).text();
    expect(await (await host.fetch('ta', 'count', new Request('http://x/'))).text()).toBe('4:4');
    expect(await (await host.fetch('tb', 'count', new Request('http://x/'))).text()).toBe('1:1');
  });

  it('answers an uncaught exception with the platform error and its location', async () => {
    await host.load(
      't1',
      'throws',
      esm(`export default {\n  fetch() {\n    throw new TypeError('bad thing');\n  }\n}`),
    );
    const res = await host.fetch('t1', 'throws', new Request('http://x/'));
    expect(res.status).toBe(500);
    expect(res.headers.get(FAILURE_HEADER)).toBe('exception');
    expect(await res.text()).toContain('1101');
  });

  it('stops an infinite loop, answers the CPU failure, and the next request works', async () => {
    await host.load('tl', 'loop', {
      ...esm(
        `export default { fetch(req) { if (new URL(req.url).pathname === '/spin') { for (;;) {} } return new Response('fine'); } }`,
      ),
      limits: { cpuMs: 10 },
    });
    await host.load(
      'tm',
      'other',
      esm(`export default { fetch() { return new Response('other'); } }`),
    );
    const t0 = performance.now();
    const [spun, other] = await Promise.all([
      host.fetch('tl', 'loop', new Request('http://x/spin')),
      (async () => {
        await new Promise((r) => setTimeout(r, 20));
        const s = performance.now();
        const res = await host.fetch('tm', 'other', new Request('http://x/'));
        return { text: await res.text(), ms: performance.now() - s };
      })(),
    ]);
    const elapsed = performance.now() - t0;
    expect(spun.status).toBe(503);
    expect(spun.headers.get(FAILURE_HEADER)).toBe('cpu');
    expect(elapsed).toBeLessThan(1000);
    expect(other.text).toBe('other');
    expect(other.ms).toBeLessThan(500);
    const next = await host.fetch('tl', 'loop', new Request('http://x/'));
    expect(await next.text()).toBe('fine');
  });

  it('replaces an instance whose memory grows past the limit, answering the memory failure', async () => {
    const small = createScriptHost({
      log: createLogger('silent'),
      memoryFloorMb: 32,
      wallTimeoutMs: 10_000,
    });
    try {
      await small.load('tmem', 'hog', {
        ...esm(`const kept = [];
        export default { async fetch(req) {
          if (new URL(req.url).pathname === '/hog') {
            for (let i = 0; i < 400; i++) { kept.push(new Uint8Array(1 << 20).fill(i)); await new Promise((r) => setTimeout(r, 2)); }
          }
          return new Response('held ' + kept.length);
        } }`),
        limits: { memoryMb: 2 },
      });
      const t0 = performance.now();
      const res = await small.fetch('tmem', 'hog', new Request('http://x/hog'));
      expect(res.headers.get(FAILURE_HEADER)).toBe('memory');
      expect(performance.now() - t0).toBeLessThan(5000);
      expect(await (await small.fetch('tmem', 'hog', new Request('http://x/'))).text()).toBe(
        'held 0',
      );
    } finally {
      await small.close();
    }
  });

  it('answers the timeout failure when a script never responds', async () => {
    await host.load('t1', 'slow', {
      ...esm(
        `export default { async fetch() { await new Promise((r) => setTimeout(r, 5000)); return new Response('late'); } }`,
      ),
      limits: { wallMs: 300 },
    });
    const t0 = performance.now();
    const res = await host.fetch('t1', 'slow', new Request('http://x/'));
    expect(res.headers.get(FAILURE_HEADER)).toBe('timeout');
    expect(performance.now() - t0).toBeLessThan(2000);
  });
});

describe('bindings and outbound', () => {
  it('reaches a Node service binding with the invocation context', async () => {
    const seen: unknown[] = [];
    await host.load('t2', 'bound', {
      ...esm(`export default { async fetch(req, env) {
        const r = await env.NODE.fetch('http://binding/ask', { method: 'POST', body: 'q' });
        return new Response(await r.text() + '|' + env.CONF.k + '|' + env.TXT);
      } }`),
      bindings: {
        NODE: {
          type: 'service',
          fetch: async (req, info) => {
            seen.push(info.context);
            return new Response(`${req.method} ${new URL(req.url).pathname} ${await req.text()}`);
          },
        },
        CONF: { type: 'json', value: { k: 'v' } },
        TXT: { type: 'text', value: 'plain' },
      },
    });
    const res = await host.fetch('t2', 'bound', new Request('http://x/'), {
      context: { who: 'caller' },
    });
    expect(await res.text()).toBe('POST /ask q|v|plain');
    expect(seen).toEqual([{ who: 'caller' }]);
  });

  it('sends every fetch() through outbound, counts subrequests and enforces the limit', async () => {
    const seen: string[] = [];
    await host.load('t2', 'out', {
      ...esm(`export default { async fetch(req) {
        const n = Number(new URL(req.url).searchParams.get('n'));
        const out = [];
        for (let i = 0; i < n; i++) {
          try { out.push(await (await fetch('https://api.example/' + i, { headers: { 'x-i': String(i) } })).text()); }
          catch (e) { out.push('threw:' + e.message); }
        }
        return new Response(out.join(','));
      } }`),
      limits: { subrequests: 2 },
      outbound: async (req, info) => {
        seen.push(
          `${req.url} ${req.headers.get('x-i')} ${info.subrequests} ${String((info.context as { id: number }).id)}`,
        );
        return new Response(`r${info.subrequests}`);
      },
    });
    const ok = await host.fetch('t2', 'out', new Request('http://x/?n=2'), { context: { id: 7 } });
    expect(await ok.text()).toBe('r1,r2');
    expect(seen).toEqual(['https://api.example/0 0 1 7', 'https://api.example/1 1 2 7']);
    const over = await host.fetch('t2', 'out', new Request('http://x/?n=3'), {
      context: { id: 8 },
    });
    expect(over.headers.get(FAILURE_HEADER)).toBe('subrequests');
  });

  it('lets outbound end the invocation with its own failure', async () => {
    await host.load('t2', 'limited', {
      ...esm(
        `export default { async fetch() { try { await fetch('http://o/'); } catch {} return new Response('swallowed'); } }`,
      ),
      outbound: async () => {
        throw new ScriptLimitError('limit', 'not allowed', 1234);
      },
      errorResponse: (f) => new Response(`custom ${f.code} ${f.message}`, { status: 500 }),
    });
    const res = await host.fetch('t2', 'limited', new Request('http://x/'));
    expect(await res.text()).toBe('custom 1234 not allowed');
  });
});

describe('direct origin (the hot path)', () => {
  let origin: http.Server;
  let address: string;
  const seenAtOrigin: http.IncomingHttpHeaders[] = [];
  beforeAll(async () => {
    origin = http.createServer((req, res) => {
      seenAtOrigin.push({ ...req.headers, path: req.url });
      res.setHeader('content-type', 'text/plain');
      res.end(`origin ${req.method} ${req.url}`);
    });
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', () => r()));
    address = `127.0.0.1:${(origin.address() as AddressInfo).port}`;
  });
  afterAll(() => origin.close());

  const direct = (once = false): DirectOrigin => ({
    address,
    host: 'www.direct.test',
    clientIp: '192.0.2.7',
    headers: { 'cf-ray': 'abc-OUT', 'cf-connecting-ip': '192.0.2.7' },
    once: once ? { code: 1201, message: 'once only' } : undefined,
  });
  /** Runs requests until the instance holds a connection to the origin (it restarts in the background). */
  async function untilDirect(tenant: string, script: string, o: DirectOrigin): Promise<Response> {
    for (let i = 0; i < 100; i++) {
      const before = outboundCalls;
      const res = await host.fetch(tenant, script, new Request('http://www.direct.test/p?q=1'), {
        origin: o,
      });
      if (outboundCalls === before) return res;
      await res.body?.cancel();
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('the runtime never connected to the origin directly');
  }
  let outboundCalls = 0;
  const outbound = async (req: Request) => {
    outboundCalls++;
    return new Response(`via node ${new URL(req.url).pathname}`);
  };

  it('sends same-host fetch() from the runtime straight to the origin with the platform headers', async () => {
    await host.load('t3', 'proxy', {
      ...esm(`export default { async fetch(req) {
        const res = await fetch(req);
        return new Response('script saw: ' + (await res.text()), { headers: { 'x-script': '1' } });
      } }`),
      limits: { subrequests: 5 },
      outbound,
    });
    const res = await untilDirect('t3', 'proxy', direct());
    expect(await res.text()).toBe('script saw: origin GET /p?q=1');
    const last = seenAtOrigin.at(-1)!;
    expect(last.host).toBe('www.direct.test');
    expect(last['cf-ray']).toBe('abc-OUT');
    expect(last['x-forwarded-for']).toBe('192.0.2.7');
    expect(Object.keys(last).some((h) => h.startsWith('x-outpost-rt-'))).toBe(false);
    // Another host still goes through the outbound handler.
    await host.load('t3', 'other', {
      ...esm(`export default { async fetch() { return fetch('http://elsewhere.test/x'); } }`),
      outbound,
    });
    const before = outboundCalls;
    const other = await host.fetch('t3', 'other', new Request('http://www.direct.test/'), {
      origin: direct(),
    });
    expect(await other.text()).toBe('via node /x');
    expect(outboundCalls).toBe(before + 1);
  });

  it('counts direct calls toward the subrequest limit and keeps fetch(request) to one call when asked', async () => {
    await host.load('t3', 'many', {
      ...esm(`export default { async fetch(req) {
        for (let i = 0; i < 3; i++) { try { await (await fetch('http://www.direct.test/' + i)).text(); } catch {} }
        return new Response('swallowed');
      } }`),
      limits: { subrequests: 2 },
      outbound,
    });
    const over = await untilDirect('t3', 'many', direct());
    expect(over.headers.get(FAILURE_HEADER)).toBe('subrequests');
    const before = outboundCalls;
    const twice = await host.fetch('t3', 'many', new Request('http://www.direct.test/'), {
      origin: direct(true),
    });
    expect(twice.headers.get(FAILURE_HEADER)).toBe('limit');
    expect(outboundCalls).toBe(before);
  });

  it('keeps the origin connections and the instance key away from scripts', async () => {
    await host.load('t3', 'snoop', {
      ...esm(`import { env } from 'cloudflare:workers';
      export default { async fetch(req, handlerEnv) {
        let claimed;
        try { env.${'__OUTPOST_NET'}.claim(); claimed = 'claimed'; } catch (e) { claimed = e.message; }
        return Response.json({ claimed, hidden: Object.keys(handlerEnv) });
      } }`),
      outbound,
    });
    const res = await host.fetch('t3', 'snoop', new Request('http://www.direct.test/'));
    expect(await res.json()).toEqual({
      claimed: 'this binding is reserved for the runtime',
      hidden: [],
    });
  });

  it('falls back to outbound when the origin refuses the connection', async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', () => r()));
    const deadAddress = `127.0.0.1:${(closed.address() as AddressInfo).port}`;
    await new Promise<void>((r) => closed.close(() => r()));
    await host.load('t4', 'proxy', {
      ...esm(`export default { async fetch(req) { return fetch(req); } }`),
      outbound,
    });
    const o = { ...direct(), address: deadAddress };
    for (let i = 0; i < 15; i++) {
      const res = await host.fetch('t4', 'proxy', new Request('http://www.direct.test/dead'), {
        origin: o,
      });
      expect(await res.text()).toBe('via node /dead');
      await new Promise((r) => setTimeout(r, 100));
    }
  });
});
