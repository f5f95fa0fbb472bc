/**
 * The modules the host adds beside a user's script. The wrapper becomes the worker's main module:
 * it restores the caller's URL, exposes `request.cf` as `request.edge` too, runs the user's
 * `fetch` inside an async context that carries the invocation id, and turns an uncaught exception
 * into a marked 500 the host reports. The prelude (evaluated before any user module) makes every
 * `fetch()` and every call to a Node binding carry that invocation id, so the host can count and
 * attribute subrequests, and turns the host's refusals into exceptions in the script.
 */

/** Header names on the private hop between the host and the runtime. */
export const H = {
  invocation: 'x-outpost-rt-invocation',
  binding: 'x-outpost-rt-binding',
  url: 'x-outpost-rt-url',
  scriptError: 'x-outpost-rt-script-error',
  outboundError: 'x-outpost-rt-outbound-error',
  cfBlob: 'MF-CF-Blob',
} as const;

export const PRELUDE_MODULE = '__outpost_prelude.js';
export const WRAPPER_MODULE = '__outpost_main.js';
/** JSON binding with the wrapper's settings; removed from the user's `env`. */
export const CONFIG_BINDING = '__OUTPOST_RUNTIME';

export function preludeSource(): string {
  return `import { AsyncLocalStorage } from 'node:async_hooks';
export const als = new AsyncLocalStorage();
const H_INV = ${JSON.stringify(H.invocation)};
const H_URL = ${JSON.stringify(H.url)};
const H_BINDING = ${JSON.stringify(H.binding)};
const H_OUT_ERR = ${JSON.stringify(H.outboundError)};
const nativeFetch = globalThis.fetch;
function tag(input, init) {
  const req = new Request(input, init);
  const store = als.getStore();
  if (store !== undefined) req.headers.set(H_INV, store);
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
export function wrapFetcher(fetcher, name) {
  return new Proxy(fetcher, {
    get(target, prop) {
      if (prop === 'fetch') return (input, init) => {
        const req = tag(input, init);
        req.headers.set(H_BINDING, name);
        return target.fetch(req).then(checked);
      };
      const v = Reflect.get(target, prop);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}
Object.defineProperty(globalThis, 'fetch', {
  value: function fetch(input, init) { return nativeFetch(tag(input, init)).then(checked); },
  writable: true,
  configurable: true,
  enumerable: true,
});
`;
}

/** The generated main module for a script whose own main module is `userMain`. */
export function wrapperSource(userMain: string, isEsm: boolean): string {
  const spec = JSON.stringify('./' + userMain);
  return `import { als, wrapFetcher } from './${PRELUDE_MODULE}';
import * as userModule from ${spec};
${isEsm ? `export * from ${spec};\n` : ''}const H_INV = ${JSON.stringify(H.invocation)};
const H_URL = ${JSON.stringify(H.url)};
const H_ERR = ${JSON.stringify(H.scriptError)};
const CONFIG = ${JSON.stringify(CONFIG_BINDING)};
let userEnv;
function envFor(env) {
  if (userEnv !== undefined) return userEnv;
  const cfg = env[CONFIG] ?? { nodeBindings: [] };
  const out = {};
  for (const key of Object.keys(env)) {
    if (key === CONFIG) continue;
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
    const id = request.headers.get(H_INV);
    const url = request.headers.get(H_URL);
    if (id === null || url === null) return new Response('Forbidden', { status: 403 });
    const headers = new Headers(request.headers);
    headers.delete(H_INV);
    headers.delete(H_URL);
    const hasBody = request.method !== 'GET' && request.method !== 'HEAD';
    const req = new Request(url, { method: request.method, headers, body: hasBody ? request.body : null, cf: request.cf, redirect: 'manual' });
    Object.defineProperty(req, 'edge', { get() { return this.cf; }, configurable: true });
    return als.run(id, async () => {
      try {
        const res = await invoke(userModule.default, req, envFor(env), ctx);
        if (!(res instanceof Response)) throw new TypeError('The fetch handler did not return a Response');
        return res;
      } catch (err) {
        return failure(err);
      }
    });
  },
};
`;
}
