/**
 * The modules the host adds beside a user's script.
 *
 * - The **wrapper** becomes the worker's main module: it checks that the request comes from the
 *   host (the instance key), restores the caller's URL, exposes `request.cf` as `request.edge` too,
 *   runs the user's `fetch` inside an async context holding the invocation's state, and turns an
 *   uncaught exception or a limit the invocation ran into into a marked answer the host reports.
 * - The **prelude** (evaluated before any user module) replaces `fetch()`: every call is counted
 *   against the invocation's subrequest limit here, inside the invocation; a bodiless call to the
 *   request's own host goes straight to the origin address the host granted (one hop, no Node in
 *   between); every other call goes to the host's outbound server with the invocation id, the
 *   count and the instance key. Calls to Node bindings carry the invocation id too.
 * - The **net** module is a wrapped binding holding the origin connections and the instance key.
 *   The prelude claims it once, at its own evaluation, before any user code runs; a later claim
 *   (from a script importing `cloudflare:workers`) throws, so a script never holds the origin
 *   connections or the key and cannot go around the count.
 */

/** Header names on the private hop between the host and the runtime. */
export const H = {
  invocation: 'x-outpost-rt-invocation',
  binding: 'x-outpost-rt-binding',
  url: 'x-outpost-rt-url',
  /** The instance key: proves a request to the runtime, or a call back to Node, is the host's own. */
  key: 'x-outpost-rt-key',
  /** JSON `Grant`: the invocation's subrequest limit and direct origin. */
  grant: 'x-outpost-rt-grant',
  /** Subrequests made so far by the invocation (on outbound calls to Node). */
  count: 'x-outpost-rt-count',
  scriptError: 'x-outpost-rt-script-error',
  /** JSON `{kind, code?, message}`: a limit the invocation ran into inside the runtime. */
  failure: 'x-outpost-rt-failure',
  outboundError: 'x-outpost-rt-outbound-error',
  cfBlob: 'MF-CF-Blob',
} as const;

/** What the host grants one invocation (sent as JSON in `H.grant`). */
export interface Grant {
  limit?: number;
  origin?: {
    /** Index of the origin connection in the net binding. */
    i: number;
    /** Requests to this host name go to the origin. */
    host: string;
    /** `Host` header for the origin (default: the request URL's host). */
    hostHeader?: string;
    /** Appended to `X-Forwarded-For`. */
    clientIp: string;
    /** Set on every origin request (`cf-connecting-ip`, `cf-ray`, …). */
    headers: Record<string, string>;
    /** At most one call to the origin; a second one fails the invocation with this. */
    once?: { code: number; message: string };
  };
}

export const PRELUDE_MODULE = '__outpost_prelude.js';
export const WRAPPER_MODULE = '__outpost_main.js';
/** On a request to a pool script: the id of the guest the request is for. */
export const GUEST_HEADER = 'x-outpost-rt-guest';
/** On a pool script's request to Node: it asks for the guest's code. */
export const GUEST_CODE_HEADER = 'x-outpost-rt-guest-code';
/** On a request to a pool script: load the guest and report whether it starts; run nothing. */
export const GUEST_PROBE_HEADER = 'x-outpost-rt-guest-probe';
/** JSON binding with the wrapper's settings; removed from the user's `env`. */
export const CONFIG_BINDING = '__OUTPOST_RUNTIME';
/** The wrapped binding the prelude claims (origin connections and the instance key). */
export const NET_BINDING = '__OUTPOST_NET';
/** Inner bindings of the net module. */
export const NET_KEY_BINDING = 'KEY';
export const netOriginBinding = (i: number): string => `ORIGIN_${i}`;

/** The wrapped binding: hands its inner bindings to the first caller only. */
export function netSource(origins: number): string {
  return `export default function (inner) {
  let claimed = false;
  return {
    claim() {
      if (claimed) throw new Error('this binding is reserved for the runtime');
      claimed = true;
      const origins = [];
      for (let i = 0; i < ${origins}; i++) origins.push(inner['ORIGIN_' + i]);
      return { key: inner.${NET_KEY_BINDING}, origins };
    },
  };
}
`;
}

/**
 * `embeddedKey`: the prelude of a guest (a script a pool script loads with its Worker Loader),
 * which has no net binding of its own: the instance key is a constant of this module (not
 * exported, so user code cannot read it) and every `fetch()` goes through the host.
 */
export function preludeSource(embeddedKey?: string): string {
  return `import * as workers from 'cloudflare:workers';
import { AsyncLocalStorage } from 'node:async_hooks';
const als = new AsyncLocalStorage();
const H_INV = ${JSON.stringify(H.invocation)};
const H_URL = ${JSON.stringify(H.url)};
const H_KEY = ${JSON.stringify(H.key)};
const H_GRANT = ${JSON.stringify(H.grant)};
const H_COUNT = ${JSON.stringify(H.count)};
const H_BINDING = ${JSON.stringify(H.binding)};
const H_OUT_ERR = ${JSON.stringify(H.outboundError)};
const NET = ${JSON.stringify(NET_BINDING)};
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host']);
const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const MAX_REDIRECTS = 20;
const nativeFetch = globalThis.fetch;
// Claimed before any user module is evaluated; on a runtime without an importable env, at the
// first request (user code cannot reach env before that).
let net = ${embeddedKey === undefined ? 'undefined' : `{ key: ${JSON.stringify(embeddedKey)}, origins: [] }`};
function claim(env) {
  if (net === undefined && env !== undefined && env !== null && env[NET] !== undefined) net = env[NET].claim();
  return net;
}
try { claim(workers.env); } catch {}
const genuine = new WeakSet();

/** The state of the invocation a request from the host starts, or undefined if it is not the host's. */
export function enter(request, env) {
  const n = claim(env);
  const key = request.headers.get(H_KEY);
  if (n === undefined || key === null || key !== n.key) return undefined;
  let grant = {};
  try { grant = JSON.parse(request.headers.get(H_GRANT) ?? '{}'); } catch {}
  const state = { id: request.headers.get(H_INV), limit: grant.limit, origin: grant.origin, count: 0, originCalls: 0, failure: undefined };
  genuine.add(state);
  return state;
}
export function run(state, fn) {
  if (!genuine.has(state)) throw new Error('not an invocation of this runtime');
  return als.run(state, fn);
}
function fail(state, kind, code, message) {
  state.failure ??= { kind, code, message };
  return new Error(message);
}
function tag(req, state) {
  if (state !== undefined) {
    req.headers.set(H_INV, state.id);
    req.headers.set(H_COUNT, String(state.count));
    if (net !== undefined) req.headers.set(H_KEY, net.key);
  }
  req.headers.set(H_URL, req.url);
  return req;
}
async function checked(res) {
  const err = res.headers.get(H_OUT_ERR);
  if (err !== null) {
    try { await res.body?.cancel(); } catch {}
    throw new Error(decodeURIComponent(err));
  }
  return res;
}
function viaHost(req, state) {
  return nativeFetch(tag(req, state)).then(checked);
}
async function toOrigin(req, url, state, o, hops) {
  if (o.once !== undefined && ++state.originCalls > 1) throw fail(state, 'limit', o.once.code, o.once.message);
  const conn = net?.origins[o.i];
  // Bodies take the host's path, where a failed origin is answered with the edge's error page.
  if (conn === undefined || req.body !== null) return viaHost(req, state);
  const headers = new Headers();
  for (const [name, value] of req.headers) if (!HOP_BY_HOP.has(name) && !name.startsWith('x-outpost-rt-')) headers.append(name, value);
  const prior = req.headers.get('x-forwarded-for');
  headers.set('x-forwarded-for', prior && !prior.endsWith(o.clientIp) ? prior + ', ' + o.clientIp : (prior ?? o.clientIp));
  for (const [name, value] of Object.entries(o.headers)) headers.set(name, value);
  let res;
  try {
    res = await conn.fetch('http://' + (o.hostHeader ?? url.host) + url.pathname + url.search, { method: req.method, headers, redirect: 'manual' });
  } catch {
    // Not connected: the host retries and answers with the edge's error page (521, 522, 502…).
    return viaHost(req, state);
  }
  return follow(req, url, res, hops);
}
function follow(req, url, res, hops) {
  if (req.redirect === 'manual' || !REDIRECTS.has(res.status) || !res.headers.has('location')) return res;
  if (req.redirect === 'error') throw new TypeError('fetch: redirect refused (redirect: "error")');
  if (hops >= MAX_REDIRECTS) throw new TypeError('fetch: too many redirects');
  const next = new URL(res.headers.get('location'), url);
  const method = res.status === 303 || ((res.status === 301 || res.status === 302) && req.method === 'POST') ? 'GET' : req.method;
  return counted(new Request(next, { method, headers: req.headers, redirect: 'follow' }), hops + 1);
}
async function counted(req, hops) {
  const state = als.getStore();
  if (state === undefined) return viaHost(req, undefined);
  if (state.failure !== undefined) throw new Error(state.failure.message);
  state.count++;
  if (state.limit !== undefined && state.count > state.limit)
    throw fail(state, 'subrequests', undefined, 'Too many subrequests: the limit is ' + state.limit + ' per request');
  const o = state.origin;
  if (o !== undefined) {
    const url = new URL(req.url);
    if (url.hostname === o.host) return toOrigin(req, url, state, o, hops);
  }
  return viaHost(req, state);
}
export function wrapFetcher(fetcher, name) {
  return new Proxy(fetcher, {
    get(target, prop) {
      if (prop === 'fetch') return (input, init) => {
        const req = tag(new Request(input, init), als.getStore());
        req.headers.delete(H_COUNT);
        req.headers.delete(H_KEY);
        req.headers.set(H_BINDING, name);
        return target.fetch(req).then(checked);
      };
      const v = Reflect.get(target, prop);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}
Object.defineProperty(globalThis, 'fetch', {
  value: async function fetch(input, init) { return counted(new Request(input, init), 0); },
  writable: true,
  configurable: true,
  enumerable: true,
});
`;
}

/** The generated main module for a script whose own main module is `userMain`. */
export function wrapperSource(userMain: string, isEsm: boolean): string {
  const spec = JSON.stringify('./' + userMain);
  return `import { enter, run, wrapFetcher } from './${PRELUDE_MODULE}';
import * as userModule from ${spec};
${isEsm ? `export * from ${spec};\n` : ''}const INTERNAL = [${[H.invocation, H.url, H.key, H.grant, GUEST_HEADER].map((h) => JSON.stringify(h)).join(', ')}];
const H_URL = ${JSON.stringify(H.url)};
const H_ERR = ${JSON.stringify(H.scriptError)};
const H_FAILURE = ${JSON.stringify(H.failure)};
const HIDDEN = [${JSON.stringify(CONFIG_BINDING)}, ${JSON.stringify(NET_BINDING)}];
const CONFIG = ${JSON.stringify(CONFIG_BINDING)};
let userEnv;
function envFor(env) {
  if (userEnv !== undefined) return userEnv;
  const cfg = env[CONFIG] ?? { nodeBindings: [] };
  const out = {};
  for (const key of Object.keys(env)) {
    if (HIDDEN.includes(key)) continue;
    out[key] = cfg.nodeBindings.includes(key) ? wrapFetcher(env[key], key) : env[key];
  }
  return (userEnv = Object.freeze(out));
}
function locate(stack) {
  for (const line of String(stack ?? '').split('\\n')) {
    const m = /\\(?((?:[^\\s()]+\\/)?[^\\s()/]+\\.(?:m?js|cjs)):(\\d+):(\\d+)\\)?\\s*$/.exec(line);
    if (m && !m[1].includes('__outpost_')) return m[1] + ':' + m[2] + ':' + m[3];
  }
  return undefined;
}
function failure(err) {
  const body = {
    name: err?.name ?? 'Error',
    message: err?.message ?? String(err),
    stack: typeof err?.stack === 'string' ? err.stack : undefined,
    location: locate(err?.stack),
  };
  return new Response(JSON.stringify(body), { status: 500, headers: { [H_ERR]: '1', 'content-type': 'application/json' } });
}
async function invoke(handler, request, env, ctx) {
  if (handler !== null && typeof handler === 'object' && typeof handler.fetch === 'function') return handler.fetch(request, env, ctx);
  if (typeof handler === 'function' && typeof handler.prototype?.fetch === 'function') return new handler(ctx, env).fetch(request);
  throw new TypeError('The script has no default export with a fetch handler');
}
export default {
  async fetch(request, env, ctx) {
    const state = enter(request, env);
    const url = request.headers.get(H_URL);
    if (state === undefined || url === null) return new Response('Forbidden', { status: 403 });
    const headers = new Headers(request.headers);
    for (const name of INTERNAL) headers.delete(name);
    const hasBody = request.method !== 'GET' && request.method !== 'HEAD';
    const req = new Request(url, { method: request.method, headers, body: hasBody ? request.body : null, cf: request.cf, redirect: 'manual' });
    Object.defineProperty(req, 'edge', { get() { return this.cf; }, configurable: true });
    const res = await run(state, async () => {
      try {
        const r = await invoke(userModule.default, req, envFor(env), ctx);
        if (!(r instanceof Response)) throw new TypeError('The fetch handler did not return a Response');
        return r;
      } catch (err) {
        return state.failure === undefined ? failure(err) : undefined;
      }
    });
    if (state.failure !== undefined) {
      try { await res?.body?.cancel(); } catch {}
      return new Response(null, { status: 500, headers: { [H_FAILURE]: JSON.stringify(state.failure) } });
    }
    return res;
  },
};
`;
}

/**
 * Main module of a pool script (host code, not wrapped): every request names a guest; the guest
 * is taken from the Worker Loader's cache or loaded with the code Node hands out for its id, and
 * the request (host headers included: the guest's own wrapper checks the key and opens the
 * invocation) goes to it. Guests' `fetch()` and Node bindings go to the pool's Node binding.
 */
export function poolSource(loader: string, node: string): string {
  return `const H_KEY = ${JSON.stringify(H.key)};
const H_GUEST = ${JSON.stringify(GUEST_HEADER)};
const H_CODE = ${JSON.stringify(GUEST_CODE_HEADER)};
const H_PROBE = ${JSON.stringify(GUEST_PROBE_HEADER)};
let key;
function b64(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out.buffer;
}
function code(env, id) {
  return async () => {
    const res = await env[${JSON.stringify(node)}].fetch('http://outpost/guest', { headers: { [H_KEY]: key, [H_GUEST]: id, [H_CODE]: '1' } });
    if (!res.ok) throw new Error('Worker not found.');
    const c = await res.json();
    const modules = {};
    for (const m of c.modules) {
      if (m.type === 'esm') modules[m.name] = { js: m.content };
      else if (m.type === 'commonjs') modules[m.name] = { cjs: m.content };
      else if (m.type === 'text') modules[m.name] = { text: m.content };
      else if (m.type === 'data') modules[m.name] = { data: b64(m.content) };
      else if (m.type === 'wasm') modules[m.name] = { wasm: b64(m.content) };
    }
    const guestEnv = c.env;
    for (const n of c.nodeBindings) guestEnv[n] = env[${JSON.stringify(node)}];
    return {
      compatibilityDate: c.compatibilityDate,
      compatibilityFlags: c.compatibilityFlags,
      mainModule: c.mainModule,
      modules,
      env: guestEnv,
      globalOutbound: env[${JSON.stringify(node)}],
    };
  };
}
export default {
  async fetch(request, env) {
    key ??= env.${NET_BINDING}.claim().key;
    if (request.headers.get(H_KEY) !== key) return new Response('Forbidden', { status: 403 });
    const id = request.headers.get(H_GUEST);
    if (id === null) return new Response('no guest named', { status: 400 });
    const worker = env[${JSON.stringify(loader)}].get(id, code(env, id));
    if (request.headers.get(H_PROBE) !== null) {
      try {
        // Without the key the guest's wrapper answers 403 and runs no user code.
        const res = await worker.getEntrypoint().fetch('http://probe/');
        await res.body?.cancel();
        return new Response(null, { status: 204 });
      } catch (e) {
        return new Response(String(e?.message ?? e), { status: 422 });
      }
    }
    return worker.getEntrypoint().fetch(request);
  },
};
`;
}
