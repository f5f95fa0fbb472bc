/**
 * Customer scripts in the runtime, and the `dispatch_namespace` binding that reaches them.
 *
 * A customer script (`dispatch:<namespace_id>:<script>`) is a guest of one of the pool scripts
 * (`dispatch-pool:<n>`, a workerd process whose Worker Loader holds the guests): it is loaded in
 * milliseconds, validated by loading it there without running a handler. A customer whose call
 * overran its CPU (or memory) in a pool is quarantined: from then on it is its own runtime tenant,
 * its own workerd process, as every customer was before pools. The dispatcher's `env.NS.get(name, args, opts)`
 * returns a fetcher whose calls go to this module's Node binding with the call's options in a
 * header; the host then runs the customer's script with the call's `limits` (CPU via the watchdog,
 * subrequests counted in the runtime) and, when the binding names an outbound script, hands every
 * `fetch()` of the customer to that script with the call's `outbound` values in its env.
 *
 * A failure of the customer (not found, over a limit) is answered to the binding with a marker
 * header; the dispatcher's shim turns it into the exception the platform throws, so the
 * dispatcher can catch it. An uncaught exception in the customer's code answers the 1101 page.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AreaContext } from '../../../core/area.ts';
import { apiError } from '../../../core/errors.ts';
import type { BlobStore } from '../../../core/storage/blobs.ts';
import {
  networkFetch,
  poolSource,
  ScriptError,
  defaultFailureResponse,
  type Guest,
  type InvocationInfo,
  type ScriptFailure,
} from '../../../runtime/index.ts';
import type { BindingExtension, ScriptRegistry } from '../registry.ts';
import type { LoadOptions, HostBinding } from '../host.ts';
import { scriptContents, scripts, type StoredBinding, type StoredContent } from '../store.ts';
import { WRAPPER_MODULE } from '../wrapper.ts';
import { serveAsset, workerFirst } from './assets.ts';
import {
  dispatchContents,
  dispatchScripts,
  namespaces,
  scopeOf,
  type DispatchScript,
  type NamespaceRecord,
} from './store.ts';

export const DISPATCH_MODULE = 'outpost-dispatch-main.mjs';
const CALL_HEADER = 'x-outpost-dispatch';
const ERROR_HEADER = 'x-outpost-dispatch-error';
const PARAMS_HEADER = 'x-outpost-outbound-params';
const ASSETS_BINDING = '__OUTPOST_ASSETS';
const MAIN = 'main';
/** Headers of the runtime's own requests to Node (invocation, key, binding name). */
const RUNTIME_HEADER_PREFIX = 'x-outpost-rt-';

/** The dispatcher's options for one call, as the shim sends them. */
interface CallSpec {
  script: string;
  url: string;
  limits?: { cpuMs?: unknown; subRequests?: unknown };
  outbound?: Record<string, unknown>;
}

/** Where the customer's `fetch()` calls go, per call. */
interface CallContext {
  accountId: string;
  outboundService?: string;
  params?: Record<string, unknown>;
}

interface Live {
  etag: string;
  script: DispatchScript;
  namespace: NamespaceRecord;
  /** Set when the script runs as a guest of a pool (else it has its own process). */
  pool?: { tenant: string; guest: Guest };
  /** An assets-only script: nothing is loaded in the runtime. */
  assetsOnly?: boolean;
}

/** Runtime processes shared by customer scripts (each holds a Worker Loader). */
const POOLS = 2;
const POOL_SCRIPT = 'pool';
const POOL_MODULE = 'pool.js';
const POOL_LOADER = 'LOADER';
const POOL_NODE = 'NODE';

/** The pool a customer's tenant runs in: a stable spread over the pools. */
function poolOf(tenant: string): string {
  let h = 0;
  for (let i = 0; i < tenant.length; i++) h = (h * 31 + tenant.charCodeAt(i)) >>> 0;
  return `dispatch-pool:${h % POOLS}`;
}

export const tenantOf = (namespaceId: string, name: string): string =>
  `dispatch:${namespaceId}:${name}`;

/** The platform's messages for a customer that cannot answer. */
const FAILURE_MESSAGES: Partial<Record<ScriptFailure['kind'], string>> = {
  cpu: 'Worker exceeded CPU time limit.',
  subrequests: 'Worker exceeded subrequest limit.',
  memory: 'Worker exceeded memory limit.',
  timeout: 'Worker exceeded wall time limit.',
  unavailable: 'Worker is unavailable.',
};

function failed(message: string): Response {
  return new Response(null, {
    status: 500,
    headers: { [ERROR_HEADER]: encodeURIComponent(message) },
  });
}

/** The answer to the dispatcher for a customer that failed: the shim throws the message. */
function failureResponse(f: ScriptFailure): Response {
  const m = FAILURE_MESSAGES[f.kind];
  return m ? failed(m) : defaultFailureResponse(f);
}

/** The call's `limits`, or what is wrong with them. */
function callLimits(spec: CallSpec): { cpuMs?: number; subrequests?: number } | string {
  const limits: { cpuMs?: number; subrequests?: number } = {};
  for (const [k, v] of [
    ['cpuMs', spec.limits?.cpuMs],
    ['subrequests', spec.limits?.subRequests],
  ] as const) {
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0)
      return `limits.${k === 'cpuMs' ? 'cpuMs' : 'subRequests'} must be a non-negative number`;
    limits[k] = Math.floor(v);
  }
  return limits;
}

/** Main module of a customer script: `assets` bindings, and a refusal of scripts with no handler. */
function customerMain(userMain: string, assetsBinding: string | undefined): string {
  const spec = JSON.stringify(`./${userMain.replace(/^\.\//, '')}`);
  return `import * as __user from ${spec};
import __inner from ${JSON.stringify(`./${WRAPPER_MODULE}`)};
const __d = __user.default;
const __handlers = !__d ? [] : typeof __d === 'function'
  ? Object.getOwnPropertyNames(__d.prototype).filter((k) => k !== 'constructor' && typeof __d.prototype[k] === 'function')
  : Object.keys(__d).filter((k) => typeof __d[k] === 'function');
if (__handlers.length === 0) throw new Error('No event handlers were registered. This script does nothing.');
const __ASSETS = ${JSON.stringify(assetsBinding ?? null)};
let __last;
function __env(env) {
  if (!__ASSETS) return env;
  if (__last && __last.raw === env) return __last.out;
  const out = Object.assign({}, env);
  out[__ASSETS] = { fetch: (input, init) => env.${ASSETS_BINDING}.fetch(new Request(input, init)) };
  __last = { raw: env, out };
  return out;
}
export default {
  fetch(request, env, ctx) { return __inner.fetch(request, __env(env), ctx); },
};
`;
}

/** Main module of an outbound script: the call's `outbound` values join its env. */
function outboundMain(secret: string): string {
  return `import __inner from ${JSON.stringify(`./${WRAPPER_MODULE}`)};
const __S = ${JSON.stringify(secret)};
export default {
  fetch(request, env, ctx) {
    const p = request.headers.get(${JSON.stringify(PARAMS_HEADER)});
    if (p === null || !p.startsWith(__S + ':')) return __inner.fetch(request, env, ctx);
    const headers = new Headers(request.headers);
    headers.delete(${JSON.stringify(PARAMS_HEADER)});
    const params = JSON.parse(decodeURIComponent(p.slice(__S.length + 1)));
    return __inner.fetch(new Request(request, { headers }), Object.assign({}, env, params), ctx);
  },
};
`;
}

/** Script side of a `dispatch_namespace` binding (a `BindingExtension` shim). */
export function dispatchShim(b: StoredBinding): string {
  return `((env, out) => {
  const node = env[${JSON.stringify(nodeBindingName(b.name))}];
  out[${JSON.stringify(b.name)}] = {
    get(name, args, options) {
      if (typeof name !== 'string' || name.length === 0) throw new TypeError('get() needs the name of a script in the namespace');
      const o = options || {};
      const limits = o.limits ? { cpuMs: o.limits.cpuMs, subRequests: o.limits.subRequests } : undefined;
      const outbound = o.outbound;
      return {
        async fetch(input, init) {
          const req = new Request(input, init);
          const headers = new Headers(req.headers);
          headers.set(${JSON.stringify(CALL_HEADER)}, encodeURIComponent(JSON.stringify({ script: name, url: req.url, limits, outbound })));
          const res = await node.fetch(new Request(req, { headers }));
          const err = res.headers.get(${JSON.stringify(ERROR_HEADER)});
          if (err !== null) {
            await res.arrayBuffer().catch(() => {});
            throw new Error(decodeURIComponent(err));
          }
          return res;
        },
        connect() { throw new Error('connect() is not supported on dispatched scripts by this server'); },
      };
    },
  };
})`;
}

export const nodeBindingName = (name: string): string => `__OUTPOST_DISPATCH_${name}`;

export function checkDispatchBinding(b: StoredBinding): string | undefined {
  if (typeof b.namespace !== 'string' || b.namespace.length === 0)
    return 'namespace: the name of a dispatch namespace is required';
  if (b.outbound !== undefined) {
    const o = b.outbound as { worker?: { service?: unknown }; params?: unknown } | null;
    if (!o || typeof o !== 'object' || !o.worker || typeof o.worker.service !== 'string')
      return 'outbound.worker.service: the name of the outbound script is required';
    if (
      o.params !== undefined &&
      !(
        Array.isArray(o.params) &&
        o.params.every((p) => p && typeof (p as { name?: unknown }).name === 'string')
      )
    )
      return 'outbound.params: expected [{name}]';
  }
  return undefined;
}

export class DispatchRuntime {
  private readonly live = new Map<string, Live>();
  private readonly loading = new Map<string, Promise<void>>();
  private readonly outboundEtags = new Map<string, string>();
  private readonly namespaces = new Map<string, NamespaceRecord>();
  /** Customers stopped for a CPU or memory overrun in a pool: they run in their own process. */
  private readonly quarantined = new Set<string>();
  private readonly pools = new Map<string, Promise<void>>();
  private deploys = 0;

  constructor(
    private readonly ctx: AreaContext,
    private readonly registry: ScriptRegistry,
    private readonly blobs: BlobStore,
  ) {}

  /** The `BindingExtension` of `dispatch_namespace` bindings. */
  extension(): BindingExtension {
    return {
      check: checkDispatchBinding,
      shim: dispatchShim,
      bindings: (accountId, b) => ({
        [nodeBindingName(b.name)]: {
          type: 'service',
          fetch: (req) => this.dispatch(accountId, b, req),
          serve: (req, res) => this.serve(accountId, b, req, res),
        },
      }),
    };
  }

  private loadOptions(
    accountId: string,
    ns: NamespaceRecord,
    script: DispatchScript,
    content: StoredContent,
  ): LoadOptions {
    const base = this.registry.loadOptions(accountId, script, content);
    const bindings: Record<string, HostBinding> = { ...base.bindings };
    if (script.assets?.binding) {
      const assets = script.assets;
      bindings[ASSETS_BINDING] = {
        type: 'service',
        fetch: async (req) =>
          (await serveAsset(this.blobs, ns.namespace_id, assets, req, 'binding')) ??
          new Response('Not Found', { status: 404 }),
      };
    }
    return {
      ...base,
      modules: [
        {
          name: DISPATCH_MODULE,
          type: 'esm',
          content: customerMain(script.main_module, script.assets?.binding),
        },
        ...base.modules,
      ],
      mainModule: DISPATCH_MODULE,
      bindings,
      // Defaults of an uncapped call; a dispatcher's `limits` replace them per call.
      limits: { cpuMs: 30_000, wallMs: this.ctx.config.runtimeWallTimeoutMs },
      outbound: (req, info) => this.outbound(req, info, base.outbound),
    };
  }

  /**
   * Loads a customer's script into its own tenant; a script that does not start (syntax error,
   * exception at the top level, no handler) is refused with 400 naming the line.
   */
  async deploy(
    accountId: string,
    ns: NamespaceRecord,
    script: DispatchScript,
    content: StoredContent,
  ): Promise<void> {
    const host = this.registry.requireHost();
    const tenant = tenantOf(ns.namespace_id, script.id);
    if (script.main_module === '') {
      // Assets-only: nothing runs; the previous code of this name (if any) is let go.
      if (script.bindings.length > 0 || script.assets?.binding)
        throw apiError(
          'worker_invalid',
          'an assets-only script (no main module) has no code to bind; upload a module to use bindings',
        );
      await this.unload(ns.namespace_id, script.id);
      this.live.set(tenant, { etag: script.etag, script, namespace: ns, assetsOnly: true });
      return;
    }
    const opts = this.loadOptions(accountId, ns, script, content);
    try {
      if (!this.quarantined.has(tenant)) {
        const pool = poolOf(tenant);
        await this.ensurePool(pool);
        // A new id for every deploy: the loader's cache never hands out older code.
        const guest: Guest = { id: `${tenant}#${++this.deploys}`, opts };
        try {
          await host.checkGuest(pool, POOL_SCRIPT, guest);
        } catch (err) {
          if (err instanceof ScriptError) throw err;
          // The pool did not answer (restarting, overloaded): the script gets its own process.
          this.ctx.log.warn({ err, tenant }, 'pool unavailable; customer script loaded on its own');
          await host.load(tenant, MAIN, opts);
          this.live.set(tenant, { etag: script.etag, script, namespace: ns });
          return;
        }
        const prev = this.live.get(tenant);
        if (prev?.pool) host.dropGuest(prev.pool.guest.id);
        this.live.set(tenant, {
          etag: script.etag,
          script,
          namespace: ns,
          pool: { tenant: pool, guest },
        });
        return;
      }
      await host.load(tenant, MAIN, opts);
    } catch (err) {
      this.live.delete(tenant);
      if (err instanceof ScriptError) {
        const at =
          err.location &&
          !err.location.startsWith(DISPATCH_MODULE) &&
          !err.location.startsWith(WRAPPER_MODULE)
            ? ` at ${err.location}`
            : '';
        throw apiError('worker_invalid', `Uncaught ${err.message}${at}`);
      }
      throw err;
    }
    this.live.set(tenant, { etag: script.etag, script, namespace: ns });
  }

  /** Drops what this server remembers of a deleted namespace. */
  forgetNamespace(accountId: string, name: string): void {
    this.namespaces.delete(`${accountId}/${name}`);
  }

  /** Starts a pool's process with its Worker Loader (once). */
  private ensurePool(pool: string): Promise<void> {
    const host = this.registry.requireHost();
    let p = this.pools.get(pool);
    if (p && host.has(pool, POOL_SCRIPT)) return p;
    p = host.load(pool, POOL_SCRIPT, {
      modules: [{ name: POOL_MODULE, type: 'esm', content: poolSource(POOL_LOADER, POOL_NODE) }],
      mainModule: POOL_MODULE,
      loader: POOL_LOADER,
      bindings: {
        [POOL_NODE]: { type: 'service', fetch: async () => new Response(null, { status: 404 }) },
      },
      limits: { cpuMs: 30_000, wallMs: this.ctx.config.runtimeWallTimeoutMs },
    });
    p.catch(() => this.pools.delete(pool));
    this.pools.set(pool, p);
    return p;
  }

  /** A pooled customer that overran its CPU or memory runs in its own process from now on. */
  private pooledFailure(tenant: string): (f: ScriptFailure) => Response {
    return (f) => {
      if (f.kind === 'cpu' || f.kind === 'memory') {
        const live = this.live.get(tenant);
        if (live?.pool) {
          this.quarantined.add(tenant);
          this.live.delete(tenant);
          this.registry.host()?.dropGuest(live.pool.guest.id);
          this.ctx.log.warn({ tenant, kind: f.kind }, 'customer script moved to its own process');
        }
      }
      return failureResponse(f);
    };
  }

  async unload(namespaceId: string, name: string): Promise<void> {
    const tenant = tenantOf(namespaceId, name);
    const prev = this.live.get(tenant);
    if (prev?.pool) this.registry.host()?.dropGuest(prev.pool.guest.id);
    this.live.delete(tenant);
    const host = this.registry.host();
    if (host?.has(tenant, MAIN)) await host.unload(tenant, MAIN);
  }

  /** The live record of a customer script, loading it when this server has not yet. */
  private async ensure(accountId: string, nsName: string, name: string): Promise<Live | undefined> {
    // The namespace record is cached: the hot path reads no storage once a script is live.
    const nsKey = `${accountId}/${nsName}`;
    let ns = this.namespaces.get(nsKey);
    if (!ns) {
      const nsDoc = await namespaces.get(this.ctx.database.db, accountId, nsName);
      if (!nsDoc) return undefined;
      ns = nsDoc.body;
      this.namespaces.set(nsKey, ns);
    }
    const tenant = tenantOf(ns.namespace_id, name);
    const host = this.registry.requireHost();
    const cached = this.live.get(tenant);
    if (cached && (cached.pool || cached.assetsOnly || host.has(tenant, MAIN))) return cached;
    const pending = this.loading.get(tenant);
    if (pending) {
      await pending.catch(() => {});
      return this.live.get(tenant);
    }
    const job = (async () => {
      const scope = scopeOf(accountId, ns.namespace_id);
      const doc = await dispatchScripts.get(this.ctx.database.db, scope, name);
      if (!doc) return;
      const content = await dispatchContents.get(this.ctx.database.db, scope, name);
      if (!content) return;
      await this.deploy(accountId, ns, doc.body, content.body);
    })();
    this.loading.set(tenant, job);
    try {
      await job;
    } finally {
      this.loading.delete(tenant);
    }
    return this.live.get(tenant);
  }

  /**
   * The fast path of a dispatcher's call: the runtime's request to the binding is piped to the
   * customer's runtime and its answer piped back (`host.serve`), with no Fetch API objects in
   * Node. The same limits, context and failure answers as `dispatch`; anything else (bad options,
   * an unknown script, an asset to serve, a failure) is declined before the body is read and
   * answered by `dispatch`.
   */
  private async serve(
    accountId: string,
    binding: StoredBinding,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<boolean> {
    const head = req.headers[CALL_HEADER];
    if (typeof head !== 'string') return false;
    let spec: CallSpec;
    try {
      spec = JSON.parse(decodeURIComponent(head)) as CallSpec;
    } catch {
      return false;
    }
    if (typeof spec.url !== 'string' || !URL.canParse(spec.url)) return false;
    const limits = callLimits(spec);
    if (typeof limits === 'string') return false;
    const live = await this.ensure(accountId, String(binding.namespace), spec.script);
    if (!live || live.assetsOnly) return false;
    const assets = live.script.assets;
    if (assets && !workerFirst(assets.config, new URL(spec.url).pathname)) return false;
    // The dispatcher's runtime headers (its invocation, key, binding name) and the call's options
    // are not the customer's business; the host sets the customer's own.
    const drop = new Set([CALL_HEADER, 'host']);
    for (const name of Object.keys(req.headers))
      if (name.startsWith(RUNTIME_HEADER_PREFIX)) drop.add(name);
    const tenant = tenantOf(live.namespace.namespace_id, spec.script);
    const ctx = {
      url: spec.url,
      dropHeaders: drop,
      context: this.callContext(accountId, binding, spec),
      limits,
      keepFailureMarker: true,
    };
    const host = this.registry.requireHost();
    if (live.pool)
      await host.serve(live.pool.tenant, POOL_SCRIPT, req, res, {
        ...ctx,
        guest: live.pool.guest,
        errorResponse: this.pooledFailure(tenant),
      });
    else await host.serve(tenant, MAIN, req, res, { ...ctx, errorResponse: failureResponse });
    return true;
  }

  private callContext(accountId: string, binding: StoredBinding, spec: CallSpec): CallContext {
    const outbound = binding.outbound as
      { worker: { service: string }; params?: { name: string }[] } | undefined;
    let params: Record<string, unknown> | undefined;
    if (outbound) {
      const given = spec.outbound ?? {};
      params = {};
      const names = outbound.params?.map((p) => p.name) ?? Object.keys(given);
      for (const n of names) if (n in given) params[n] = given[n];
    }
    return { accountId, outboundService: outbound?.worker.service, params };
  }

  /** One call of a dispatcher's fetcher. */
  private async dispatch(
    accountId: string,
    binding: StoredBinding,
    req: Request,
  ): Promise<Response> {
    const head = req.headers.get(CALL_HEADER);
    if (!head) return failed('dispatch call without its options');
    let spec: CallSpec;
    try {
      spec = JSON.parse(decodeURIComponent(head)) as CallSpec;
    } catch {
      return failed('dispatch call with unreadable options');
    }
    const limits = callLimits(spec);
    if (typeof limits === 'string') return failed(limits);
    // The binding's request already carries the dispatcher's URL in the common case; it is only
    // rebuilt when the runtime could not keep it (a Fetch API object less per call otherwise).
    let request: Request;
    if (!URL.canParse(spec.url) || spec.url === req.url) {
      req.headers.delete(CALL_HEADER);
      request = req;
    } else {
      const headers = new Headers(req.headers);
      headers.delete(CALL_HEADER);
      request = new Request(spec.url, {
        method: req.method,
        headers,
        body: req.method === 'GET' || req.method === 'HEAD' ? undefined : req.body,
        // @ts-expect-error Node's fetch needs this for a streamed body
        duplex: 'half',
        redirect: 'manual',
      });
    }
    const live = await this.ensure(accountId, String(binding.namespace), spec.script);
    if (!live) return failed('Worker not found.');
    const assets = live.script.assets;
    if (live.assetsOnly && assets)
      return (await serveAsset(this.blobs, live.namespace.namespace_id, assets, request, 'only'))!;
    const path = new URL(request.url).pathname;
    if (assets && !workerFirst(assets.config, path)) {
      const served = await serveAsset(
        this.blobs,
        live.namespace.namespace_id,
        assets,
        request,
        'worker',
      );
      if (served) return served;
    }
    const tenant = tenantOf(live.namespace.namespace_id, spec.script);
    const context = this.callContext(accountId, binding, spec);
    const host = this.registry.requireHost();
    if (live.pool)
      return host.fetch(live.pool.tenant, POOL_SCRIPT, request, {
        context,
        limits,
        guest: live.pool.guest,
        errorResponse: this.pooledFailure(tenant),
      });
    return host.fetch(tenant, MAIN, request, { context, limits, errorResponse: failureResponse });
  }

  /** Every `fetch()` of a customer script: to the outbound script when the call names one. */
  private async outbound(
    req: Request,
    info: InvocationInfo,
    fallback: LoadOptions['outbound'],
  ): Promise<Response> {
    const c = info.context as CallContext | undefined;
    if (!c?.outboundService) return fallback ? fallback(req, info) : networkFetch(req);
    const host = this.registry.requireHost();
    const tenant = `dispatch-outbound:${c.accountId}:${c.outboundService}`;
    const doc = await scripts.get(this.ctx.database.db, c.accountId, c.outboundService);
    if (!doc) throw new Error(`the outbound script ${c.outboundService} does not exist`);
    if (this.outboundEtags.get(tenant) !== doc.body.etag || !host.has(tenant, MAIN)) {
      const content = await scriptContents.get(
        this.ctx.database.db,
        c.accountId,
        c.outboundService,
      );
      if (!content) throw new Error(`the outbound script ${c.outboundService} does not exist`);
      const base = this.registry.loadOptions(c.accountId, doc.body, content.body);
      await host.load(tenant, MAIN, {
        ...base,
        modules: [
          { name: DISPATCH_MODULE, type: 'esm', content: outboundMain(this.registry.secret) },
          ...base.modules,
        ],
        mainModule: DISPATCH_MODULE,
        limits: { cpuMs: 30_000, wallMs: this.ctx.config.runtimeWallTimeoutMs },
      });
      this.outboundEtags.set(tenant, doc.body.etag);
    }
    const headers = new Headers(req.headers);
    headers.set(
      PARAMS_HEADER,
      `${this.registry.secret}:${encodeURIComponent(JSON.stringify(c.params ?? {}))}`,
    );
    const body =
      req.method === 'GET' || req.method === 'HEAD' ? undefined : await req.arrayBuffer();
    return host.fetch(
      tenant,
      MAIN,
      new Request(req.url, { method: req.method, headers, body, redirect: 'manual' }),
    );
  }
}
