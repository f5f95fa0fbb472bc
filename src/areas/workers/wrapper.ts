/**
 * The main module Outpost generates around an uploaded script. It imports the user's main module
 * and answers three kinds of requests:
 *
 * - internal, carrying the per-server secret header: `/__outpost/workflows/attempt` runs one
 *   attempt of a workflow class's `run(event, step)`; `/__outpost/scheduled` calls the
 *   `scheduled` handler (cron triggers);
 * - everything else goes to the user's default export (`fetch`).
 *
 * The `step` object and the workflow bindings call back into the engine over the Node service
 * binding `__OUTPOST_WORKFLOWS` (see `protocol.ts`). A step whose result is in the attempt's cache
 * returns it without a call; a new `step.do` runs its callback here and reports the result or the
 * error; `sleep`, `sleepUntil` and `waitForEvent` ask the engine, which either answers at once or
 * records a timer or a wait. To suspend, the step returns a promise that never settles; once no
 * step is in flight the attempt answers `suspended` and the user's `run` is abandoned. A later
 * attempt replays `run` from the top with the memoised results. A never-settling promise (rather
 * than a thrown error) keeps user `try/catch` blocks from swallowing a suspension.
 *
 * Values crossing the boundary (params, step outputs, event payloads) are encoded as JSON with
 * tagged forms for what JSON lacks (undefined, Date, Map, Set, BigInt, RegExp, binary, non-finite
 * numbers); functions, symbols and circular references are refused at the call.
 */

import { IMAGES_SHIM } from '../images/index.ts';
import { BROWSER_SHIM } from '../browser-rendering/index.ts';

/** Name of the service binding through which the script reaches the workflows engine. */
export const ENGINE_BINDING = '__OUTPOST_WORKFLOWS';
export const SECRET_HEADER = 'x-outpost-internal';
export const ATTEMPT_PATH = '/__outpost/workflows/attempt';
export const SCHEDULED_PATH = '/__outpost/scheduled';
export const WRAPPER_MODULE = 'outpost-workflows-main.mjs';
/** Internal service bindings of `kv_namespace` bindings are named with this prefix. */
export const KV_BINDING_PREFIX = '__OUTPOST_KV_';

export interface WrapperConfig {
  /** The user's main module name, as uploaded. */
  userMain: string;
  secret: string;
  /** Workflow bindings: env name → workflow name. */
  workflows: Record<string, string>;
  /** Script-side parts of bindings other areas implement (`BindingExtension.shim`). */
  extensions?: string[];
  /** Key-value bindings: env name → internal service binding name. */
  kv?: Record<string, string>;
  /** `images` bindings: env names (the object is built by the images area's shim). */
  images?: string[];
  /** Browser bindings (env names), wrapped by the browser rendering shim. */
  browsers?: string[];
}

export function wrapperSource(cfg: WrapperConfig): string {
  const spec = `./${cfg.userMain.replace(/^\.\//, '')}`;
  const config = {
    secret: cfg.secret,
    workflows: cfg.workflows,
    kv: cfg.kv ?? {},
    images: cfg.images ?? [],
    browsers: cfg.browsers ?? [],
    engine: ENGINE_BINDING,
  };
  return `import * as __user from ${JSON.stringify(spec)};
import { NonRetryableError as __NonRetryableError } from 'cloudflare:workflows';
import { waitUntil as __waitUntil } from 'cloudflare:workers';
const __CFG = ${JSON.stringify(config)};
const __EXT = [${(cfg.extensions ?? []).join(',\n')}];
${LIBRARY}
${cfg.images?.length ? IMAGES_SHIM : ''}
${cfg.browsers?.length ? BROWSER_SHIM : ''}
export default {
  async fetch(request, env, ctx) {
    if (request.headers.get(${JSON.stringify(SECRET_HEADER)}) === __CFG.secret) {
      const path = new URL(request.url).pathname;
      if (path === ${JSON.stringify(ATTEMPT_PATH)}) return __runAttempt(request, env, ctx);
      if (path === ${JSON.stringify(SCHEDULED_PATH)}) return __runScheduled(request, env, ctx);
    }
    const h = __user.default;
    const uenv = __wrapEnv(env);
    if (typeof h === 'function') {
      const o = new h(ctx, uenv);
      if (typeof o.fetch === 'function') return __settled(o.fetch(request), uenv);
    } else if (h && typeof h.fetch === 'function') {
      return __settled(h.fetch(request, uenv, ctx), uenv);
    }
    return new Response('This script has no fetch handler', { status: 500 });
  },
};
`;
}

/** The in-script library (plain JavaScript, runs inside the runtime). */
const LIBRARY = String.raw`
const __MAX_BYTES = 1048576;
const __DAY = 86400000;
const __YEAR = 365 * __DAY;
const __UNITS = [
  [/^(ms|msecs?|milliseconds?)$/, 1],
  [/^(s|secs?|seconds?)$/, 1000],
  [/^(m|mins?|minutes?)$/, 60000],
  [/^(h|hrs?|hours?)$/, 3600000],
  [/^(d|days?)$/, __DAY],
  [/^(w|weeks?)$/, 7 * __DAY],
  [/^(months?)$/, 30 * __DAY],
  [/^(y|yrs?|years?)$/, 365 * __DAY],
];
const __NEVER = () => new Promise(() => {});

function __parseDuration(v, what) {
  if (typeof v === 'number') {
    if (!Number.isFinite(v) || v < 0) throw new TypeError(what + ': invalid duration ' + v);
    return v;
  }
  if (typeof v === 'string') {
    const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$/.exec(v);
    if (m) {
      const unit = m[2].toLowerCase();
      for (const [re, f] of __UNITS) if (re.test(unit)) return Math.round(Number(m[1]) * f);
    }
    if (/^\s*\d+\s*$/.test(v)) return Number(v);
  }
  throw new TypeError(what + ': invalid duration ' + JSON.stringify(v) + ' (use milliseconds or text such as "10 seconds")');
}

function __checkName(name) {
  if (typeof name !== 'string' || name.length === 0) throw new TypeError('Step name must be a non-empty string');
  if (name.length > 256) throw new TypeError('Step name must be at most 256 characters');
  if (/[\u0000-\u001f]/.test(name)) throw new TypeError('Step name must not contain control characters');
}

function __b64(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i += 32768) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 32768));
  return btoa(s);
}
function __unb64(text) {
  const s = atob(text);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

function __enc(v, stack) {
  if (v === null || typeof v === 'boolean' || typeof v === 'string') return v;
  if (typeof v === 'number') {
    if (Number.isFinite(v) && !Object.is(v, -0)) return v;
    return { $t: 'n', v: Object.is(v, -0) ? '-0' : String(v) };
  }
  if (v === undefined) return { $t: 'u' };
  if (typeof v === 'bigint') return { $t: 'b', v: v.toString() };
  if (typeof v === 'function') throw new TypeError('functions are not serializable');
  if (typeof v === 'symbol') throw new TypeError('symbols are not serializable');
  if (stack.includes(v)) throw new TypeError('circular references are not serializable');
  stack.push(v);
  try {
    if (Array.isArray(v)) {
      const out = new Array(v.length);
      for (let i = 0; i < v.length; i++) out[i] = __enc(v[i], stack);
      return out;
    }
    if (v instanceof Date) return { $t: 'd', v: v.getTime() };
    if (v instanceof RegExp) return { $t: 'r', v: [v.source, v.flags] };
    if (v instanceof Map) return { $t: 'm', v: [...v].map(([k, x]) => [__enc(k, stack), __enc(x, stack)]) };
    if (v instanceof Set) return { $t: 's', v: [...v].map((x) => __enc(x, stack)) };
    if (v instanceof ArrayBuffer) return { $t: 'ab', v: __b64(new Uint8Array(v)) };
    if (ArrayBuffer.isView(v)) return { $t: 'ta', k: v.constructor.name, v: __b64(new Uint8Array(v.buffer, v.byteOffset, v.byteLength)) };
    if (v instanceof Error) return { $t: 'e', v: { name: String(v.name), message: String(v.message) } };
    if (v instanceof Promise || v instanceof WeakMap || v instanceof WeakSet || (typeof ReadableStream !== 'undefined' && v instanceof ReadableStream)) {
      throw new TypeError((v.constructor && v.constructor.name) + ' objects are not serializable');
    }
    const out = {};
    for (const k of Object.keys(v)) out[k] = __enc(v[k], stack);
    return Object.prototype.hasOwnProperty.call(out, '$t') ? { $t: 'o', v: out } : out;
  } finally {
    stack.pop();
  }
}

function __dec(v) {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(__dec);
  switch (v.$t) {
    case undefined: {
      const o = {};
      for (const k of Object.keys(v)) o[k] = __dec(v[k]);
      return o;
    }
    case 'u': return undefined;
    case 'n': return Number(v.v);
    case 'b': return BigInt(v.v);
    case 'd': return new Date(v.v === null ? NaN : v.v);
    case 'r': return new RegExp(v.v[0], v.v[1]);
    case 'm': return new Map(v.v.map(([k, x]) => [__dec(k), __dec(x)]));
    case 's': return new Set(v.v.map(__dec));
    case 'ab': return __unb64(v.v).buffer;
    case 'ta': {
      const bytes = __unb64(v.v);
      const C = globalThis[v.k];
      if (C === DataView) return new DataView(bytes.buffer);
      if (typeof C === 'function' && C.BYTES_PER_ELEMENT) return new C(bytes.buffer, 0, bytes.byteLength / C.BYTES_PER_ELEMENT);
      return bytes;
    }
    case 'e': {
      const e = new Error(v.v.message);
      e.name = v.v.name;
      return e;
    }
    case 'o': return __dec(v.v);
    default: return v;
  }
}

function __encodeChecked(value, what) {
  let encoded;
  try {
    encoded = __enc(value, []);
  } catch (e) {
    throw new TypeError(what + ' is not serializable: ' + (e && e.message));
  }
  const size = new TextEncoder().encode(JSON.stringify(encoded)).byteLength;
  if (size > __MAX_BYTES) throw new RangeError(what + ' is ' + size + ' bytes; the limit is ' + __MAX_BYTES + ' bytes (1 MiB)');
  return encoded;
}

function __errView(e) {
  if (e instanceof Error || (e && typeof e === 'object' && 'message' in e)) {
    return { name: String(e.name || 'Error'), message: String(e.message) };
  }
  return { name: 'Error', message: String(e) };
}

function __isNonRetryable(e) {
  if (!e || typeof e !== 'object') return false;
  return e.name === 'NonRetryableError' || e instanceof __NonRetryableError || /^NonRetryableError/.test(String(e.message || ''));
}

function __toError(view) {
  let e;
  if (view.name === 'NonRetryableError') {
    e = new __NonRetryableError(view.message);
  } else {
    e = new Error(view.message);
    e.name = view.name;
  }
  return e;
}

async function __rpc(env, msg) {
  const res = await env[__CFG.engine].fetch('http://outpost.internal/rpc', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(msg),
  });
  const text = await res.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error('Workflows engine answered ' + res.status + ': ' + text.slice(0, 300));
  }
  if (body && body.error) throw __toError(body.error);
  return body;
}

function __json(body) {
  return new Response(JSON.stringify(body), { headers: { 'content-type': 'application/json' } });
}

// ---- step configuration ---------------------------------------------------------------------
const __DEFAULT_RETRIES = { limit: 5, delay: 10000, backoff: 'exponential' };
const __DEFAULT_TIMEOUT = '10 minutes';

function __stepConfig(cfg) {
  if (cfg === undefined) cfg = {};
  if (cfg === null || typeof cfg !== 'object') throw new TypeError('step.do: the configuration must be an object');
  for (const k of Object.keys(cfg)) {
    if (k !== 'retries' && k !== 'timeout' && k !== 'sensitive') throw new TypeError('step.do: unknown configuration key ' + JSON.stringify(k));
  }
  const r = cfg.retries === undefined ? {} : cfg.retries;
  if (r === null || typeof r !== 'object') throw new TypeError('step.do: retries must be an object');
  for (const k of Object.keys(r)) {
    if (k !== 'limit' && k !== 'delay' && k !== 'backoff') throw new TypeError('step.do: unknown retries key ' + JSON.stringify(k));
  }
  const retries = { ...__DEFAULT_RETRIES };
  for (const k of Object.keys(r)) if (r[k] !== undefined) retries[k] = r[k];
  if (typeof retries.limit !== 'number' || !Number.isInteger(retries.limit) || retries.limit < 0) {
    throw new TypeError('step.do: retries.limit must be an integer >= 0');
  }
  if (typeof retries.delay === 'function') throw new TypeError('step.do: retries.delay as a function is not supported by Outpost');
  const delayMs = __parseDuration(retries.delay, 'step.do: retries.delay');
  if (!['constant', 'linear', 'exponential'].includes(retries.backoff)) {
    throw new TypeError('step.do: retries.backoff must be constant, linear or exponential');
  }
  const timeout = cfg.timeout === undefined || cfg.timeout === null ? __DEFAULT_TIMEOUT : cfg.timeout;
  const timeoutMs = __parseDuration(timeout, 'step.do: timeout');
  if (timeoutMs <= 0) throw new TypeError('step.do: timeout must be greater than 0');
  if (cfg.sensitive !== undefined && cfg.sensitive !== 'output') throw new TypeError("step.do: sensitive must be 'output'");
  const view = { retries: { limit: retries.limit, delay: retries.delay, backoff: retries.backoff }, timeout };
  if (cfg.sensitive) view.sensitive = cfg.sensitive;
  return { view, delayMs, timeoutMs };
}

function __withTimeout(fn, ms) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => {
      const e = new Error('Execution timed out after ' + ms + 'ms');
      e.name = 'WorkflowTimeoutError';
      reject(e);
    }, ms);
  });
  return Promise.race([Promise.resolve().then(fn), timeout]).finally(() => clearTimeout(timer));
}

// ---- one attempt ----------------------------------------------------------------------------
class __Attempt {
  constructor(env, req) {
    this.env = env;
    this.req = req;
    this.counters = new Map();
    this.calls = 0;
    this.inflight = 0;
    this.suspended = false;
    this.yielded = false;
    this.started = Date.now();
    this.settled = new Promise((resolve) => (this.resolveSettled = resolve));
    this.step = {
      do: (name, a, b) => __do(this, name, a, b),
      sleep: (name, duration) => __sleep(this, name, { durationMs: __sleepMs(duration, 'step.sleep') }),
      sleepUntil: (name, at) => __sleep(this, name, { untilMs: __untilMs(at) }),
      waitForEvent: (name, opts) => __wait(this, name, opts),
    };
  }
  next(type, name) {
    const k = type + '\u0000' + name;
    const n = (this.counters.get(k) || 0) + 1;
    this.counters.set(k, n);
    return n;
  }
  countStep() {
    if (++this.calls > this.req.stepLimit) {
      throw new __NonRetryableError('This instance reached the limit of ' + this.req.stepLimit + ' steps');
    }
  }
  suspend() {
    this.suspended = true;
    this.check();
  }
  // After a successful step: an old attempt stops here and the engine replays it at once, which
  // keeps every attempt within the runtime's wall-clock budget.
  yieldIfOld() {
    if (Date.now() - this.started < this.req.yieldAfterMs) return false;
    this.yielded = true;
    this.suspend();
    return true;
  }
  check() {
    if (this.suspended && this.inflight === 0) this.resolveSettled();
  }
  rpc(msg) {
    msg.attempt = this.req.attemptId;
    return __rpc(this.env, msg);
  }
}

function __sleepMs(duration, what) {
  const ms = __parseDuration(duration, what);
  if (ms > __YEAR) throw new RangeError(what + ': the maximum is 365 days');
  return ms;
}

function __untilMs(at) {
  const t = at instanceof Date ? at.getTime() : typeof at === 'number' ? at : typeof at === 'string' ? Date.parse(at) : NaN;
  if (!Number.isFinite(t)) throw new TypeError('step.sleepUntil: the timestamp must be a Date or milliseconds since the epoch');
  return t;
}

async function __do(a, name, x, y) {
  __checkName(name);
  const fn = typeof x === 'function' ? x : y;
  if (typeof fn !== 'function') throw new TypeError('step.do: the last argument must be a function');
  const config = __stepConfig(typeof x === 'function' ? undefined : x);
  const count = a.next('do', name);
  const key = 'do:' + count + ':' + name;
  if (a.suspended) return __NEVER();
  a.countStep();
  const cached = a.req.cache[key];
  if (cached) {
    if (cached.e) throw __toError(cached.e);
    return __dec(cached.v);
  }
  a.inflight++;
  try {
    let attempt = (a.req.attempts[key] || 0) + 1;
    for (;;) {
      const started = Date.now();
      let value;
      let error;
      let failed = false;
      let fatal = false;
      try {
        value = await __withTimeout(() => fn({ attempt }), config.timeoutMs);
      } catch (e) {
        error = e;
        failed = true;
      }
      let encoded;
      if (!failed) {
        try {
          encoded = __encodeChecked(value, 'The output of step "' + name + '"');
        } catch (e) {
          error = e;
          failed = true;
          fatal = true;
        }
      }
      const msg = { op: 'step', key, name, count, config: config.view, elapsedMs: Date.now() - started };
      if (failed) {
        msg.error = __errView(error);
        msg.nonRetryable = fatal || __isNonRetryable(error);
      } else {
        msg.value = encoded;
      }
      const reply = await a.rpc(msg);
      if (reply.stop) {
        a.suspend();
        return __NEVER();
      }
      if (reply.ok) return a.yieldIfOld() ? __NEVER() : __dec(encoded);
      if (reply.final) throw __toError(reply.final);
      if (reply.retryIn > 0) {
        a.suspend();
        return __NEVER();
      }
      attempt++;
    }
  } finally {
    a.inflight--;
    a.check();
  }
}

async function __sleep(a, name, body) {
  __checkName(name);
  const count = a.next('sleep', name);
  const key = 'sleep:' + count + ':' + name;
  if (a.suspended) return __NEVER();
  if (a.req.cache[key]) return;
  a.inflight++;
  try {
    const reply = await a.rpc({ op: 'sleep', key, name, count, ...body });
    if (reply.final) throw __toError(reply.final);
    if (reply.done) return;
    a.suspend();
    return __NEVER();
  } finally {
    a.inflight--;
    a.check();
  }
}

function __event(ev) {
  return { type: ev.type, payload: __dec(ev.payload), timestamp: new Date(ev.timestamp) };
}

async function __wait(a, name, opts) {
  __checkName(name);
  if (opts === null || typeof opts !== 'object') throw new TypeError('step.waitForEvent: options { type, timeout? } are required');
  const type = opts.type !== undefined ? opts.type : opts.event;
  if (typeof type !== 'string' || type.length === 0) throw new TypeError('step.waitForEvent: options.type must be a non-empty string');
  const timeoutMs = opts.timeout === undefined ? __DAY : __sleepMs(opts.timeout, 'step.waitForEvent: timeout');
  const count = a.next('waitForEvent', name);
  const key = 'waitForEvent:' + count + ':' + name;
  if (a.suspended) return __NEVER();
  a.countStep();
  const cached = a.req.cache[key];
  if (cached) {
    if (cached.e) throw __toError(cached.e);
    return __event(cached.v);
  }
  a.inflight++;
  try {
    const reply = await a.rpc({ op: 'wait', key, name, count, type, timeoutMs });
    if (reply.event) return __event(reply.event);
    if (reply.final) throw __toError(reply.final);
    a.suspend();
    return __NEVER();
  } finally {
    a.inflight--;
    a.check();
  }
}

async function __runAttempt(request, env, ctx) {
  const req = await request.json();
  const Cls = __user[req.className];
  if (typeof Cls !== 'function') {
    return __json({ outcome: 'error', fatal: true, error: { name: 'Error', message: 'The script does not export a class named ' + req.className } });
  }
  const a = new __Attempt(env, req);
  const uenv = __wrapEnv(env);
  const params = __dec(req.params);
  const event = { payload: params, params, timestamp: new Date(req.timestamp), instanceId: req.instanceId };
  const running = (async () => {
    const inst = new Cls(ctx, uenv);
    if (typeof inst.run !== 'function') throw new TypeError(req.className + '.run is not a function');
    return inst.run(event, a.step);
  })();
  const r = await Promise.race([
    running.then((v) => ({ v }), (e) => ({ e, failed: true })),
    a.settled.then(() => ({ suspended: true })),
  ]);
  if (r.suspended) return __json({ outcome: 'suspended', yielded: a.yielded });
  if (r.failed) return __json({ outcome: 'error', error: __errView(r.e) });
  try {
    return __json({ outcome: 'complete', output: __encodeChecked(r.v, 'The workflow output') });
  } catch (e) {
    return __json({ outcome: 'error', error: __errView(e) });
  }
}

async function __runScheduled(request, env, ctx) {
  const body = await request.json();
  const h = __user.default;
  const uenv = __wrapEnv(env);
  const event = { type: 'scheduled', cron: body.cron, scheduledTime: body.scheduledTime, noRetry() {} };
  try {
    if (typeof h === 'function') {
      const o = new h(ctx, uenv);
      if (typeof o.scheduled !== 'function') return __json({ outcome: 'error', error: { name: 'Error', message: 'The script has no scheduled handler' } });
      await o.scheduled(event);
    } else if (h && typeof h.scheduled === 'function') {
      await h.scheduled(event, uenv, ctx);
    } else {
      return __json({ outcome: 'error', error: { name: 'Error', message: 'The script has no scheduled handler' } });
    }
    return __json({ outcome: 'ok' });
  } catch (e) {
    return __json({ outcome: 'error', error: __errView(e) });
  }
}

// ---- workflow bindings ----------------------------------------------------------------------
function __retention(r) {
  if (r === undefined || r === null) return undefined;
  if (typeof r === 'string' || typeof r === 'number') return { success: r, error: r };
  return {
    success: r.successRetention !== undefined ? r.successRetention : r.success_retention,
    error: r.errorRetention !== undefined ? r.errorRetention : r.error_retention,
  };
}

function __createItem(o, what) {
  if (o === undefined || o === null) o = {};
  if (typeof o !== 'object') throw new TypeError(what + ': options must be an object');
  const item = { params: __encodeChecked(o.params === undefined ? {} : o.params, 'params') };
  if (o.id !== undefined) item.id = o.id;
  const retention = __retention(o.retention);
  if (retention) item.retention = retention;
  return item;
}

function __binding(env, workflow) {
  const call = (msg) => {
    msg.workflow = workflow;
    return __rpc(env, msg);
  };
  const handle = (id) => ({
    id,
    async status() {
      const r = await call({ op: 'status', id });
      const s = { status: r.status };
      if (r.error) s.error = r.error;
      if (r.output !== undefined) s.output = __dec(r.output);
      return s;
    },
    async pause() { await call({ op: 'pause', id }); },
    async resume() { await call({ op: 'resume', id }); },
    async terminate() { await call({ op: 'terminate', id }); },
    async restart(opts) { await call({ op: 'restart', id, from: opts && opts.from }); },
    async sendEvent(ev) {
      if (ev === null || typeof ev !== 'object' || typeof ev.type !== 'string' || ev.type.length === 0) {
        throw new TypeError('sendEvent: { type, payload } with a non-empty type is required');
      }
      await call({ op: 'sendEvent', id, type: ev.type, payload: __encodeChecked(ev.payload, 'The event payload') });
    },
  });
  return {
    async create(opts) {
      const r = await call({ op: 'create', ...__createItem(opts, 'create') });
      return handle(r.id);
    },
    async createBatch(list) {
      if (!Array.isArray(list)) throw new TypeError('createBatch: expected an array of { id?, params? }');
      const items = list.map((o) => __createItem(o, 'createBatch'));
      const r = await call({ op: 'createBatch', items });
      return r.ids.map(handle);
    },
    async get(id) {
      const r = await call({ op: 'get', id });
      return handle(r.id);
    },
  };
}

let __env;
function __wrapEnv(env) {
  if (__env && __env.raw === env) return __env.out;
  const out = {};
  for (const k of Object.keys(env))
    if (k !== __CFG.engine && !k.startsWith('__OUTPOST')) out[k] = env[k];
  for (const [name, workflow] of Object.entries(__CFG.workflows)) out[name] = __binding(env, workflow);
  for (const [name, internal] of Object.entries(__CFG.kv)) out[name] = __kv(env[internal], name);
  for (const name of __CFG.images) out[name] = __imagesBinding(env[name]);
  for (const name of __CFG.browsers) out[name] = __outpostBrowser(env[name]);
  const settle = [];
  for (const ext of __EXT) {
    const s = ext(env, out, __waitUntil);
    if (typeof s === 'function') settle.push(s);
  }
  Object.defineProperty(out, '__outpostSettle', { value: () => Promise.all(settle.map((s) => s())) });
  __env = { raw: env, out };
  return out;
}

/** The handler's answer once what the extensions' bindings still send for this request is sent. */
async function __settled(answer, uenv) {
  try {
    return await answer;
  } finally {
    await uenv.__outpostSettle().catch(() => {});
  }
}

// ---- key-value bindings ---------------------------------------------------------------------
async function __kvError(res, what) {
  const text = await res.text();
  throw new Error(what + ': ' + (text || 'failed with status ' + res.status));
}

function __kvType(opts) {
  const type = typeof opts === 'string' ? opts : (opts && opts.type) || 'text';
  if (!['text', 'json', 'arrayBuffer', 'stream'].includes(type)) throw new TypeError('Unknown response type ' + JSON.stringify(type) + ' (use text, json, arrayBuffer or stream)');
  return type;
}

async function __kvValue(res, type) {
  if (type === 'stream') return res.body;
  if (type === 'arrayBuffer') return res.arrayBuffer();
  const text = await res.text();
  return type === 'json' ? JSON.parse(text) : text;
}

function __kv(fetcher, name) {
  const url = (path, params) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) q.set(k, String(v));
    return 'http://kv.outpost.internal' + path + '?' + q.toString();
  };
  const read = async (key, opts, withMetadata) => {
    if (Array.isArray(key)) throw new TypeError(name + '.get: reading many keys at once is not supported by Outpost; call get once per key');
    if (typeof key !== 'string') throw new TypeError(name + '.get: the key must be a string');
    const type = __kvType(opts);
    const res = await fetcher.fetch(url('/value', { key }));
    if (res.status === 404) return withMetadata ? { value: null, metadata: null, cacheStatus: null } : null;
    if (!res.ok) await __kvError(res, name + '.get');
    const value = await __kvValue(res, type);
    if (!withMetadata) return value;
    const meta = res.headers.get('x-kv-metadata');
    return { value, metadata: meta ? JSON.parse(decodeURIComponent(meta)) : null, cacheStatus: null };
  };
  return {
    get: (key, opts) => read(key, opts, false),
    getWithMetadata: (key, opts) => read(key, opts, true),
    async put(key, value, opts) {
      if (typeof key !== 'string') throw new TypeError(name + '.put: the key must be a string');
      let body = value;
      if (typeof value === 'string' || value instanceof ArrayBuffer || ArrayBuffer.isView(value) || value instanceof ReadableStream) body = value;
      else throw new TypeError(name + '.put: the value must be a string, ArrayBuffer, ArrayBufferView or ReadableStream');
      const o = opts || {};
      const headers = {};
      if (o.metadata !== undefined && o.metadata !== null) headers['x-kv-metadata'] = encodeURIComponent(JSON.stringify(o.metadata));
      const res = await fetcher.fetch(url('/value', { key, expiration: o.expiration, expiration_ttl: o.expirationTtl }), { method: 'PUT', headers, body });
      if (!res.ok) await __kvError(res, name + '.put');
    },
    async delete(key) {
      if (typeof key !== 'string') throw new TypeError(name + '.delete: the key must be a string');
      const res = await fetcher.fetch(url('/value', { key }), { method: 'DELETE' });
      if (!res.ok) await __kvError(res, name + '.delete');
    },
    async list(opts) {
      const o = opts || {};
      const res = await fetcher.fetch(url('/keys', { prefix: o.prefix, cursor: o.cursor, limit: o.limit }));
      if (!res.ok) await __kvError(res, name + '.list');
      const out = await res.json();
      const result = { keys: out.keys, list_complete: out.list_complete, cacheStatus: null };
      if (out.cursor) result.cursor = out.cursor;
      return result;
    },
  };
}
`;
