/**
 * @module runtime — the host for users' scripts, shared by snippets,
 * hosted scripts and workflows. One `ScriptHost` per server, provided as service `'runtime'`
 * (`ctx.services.require<ScriptHost>(RUNTIME)`) by the `runtime` area, which is mounted after the
 * edge. Scripts run in workerd through Miniflare 4.
 *
 * ## Using it
 * ```ts
 * const host = ctx.services.require<ScriptHost>(RUNTIME);
 * await host.load(tenant, 'my-script', {
 *   modules: [{ name: 'main.js', type: 'esm', content: source }],
 *   mainModule: 'main.js',
 *   compatibilityDate: '2025-01-01',
 *   bindings: {
 *     STEPS: { type: 'service', fetch: async (req, info) => new Response('from Node') }, // env.STEPS.fetch(...)
 *     SETTINGS: { type: 'json', value: { a: 1 } },
 *   },
 *   limits: { cpuMs: 50, subrequests: 50 },
 *   outbound: async (req, info) => fetch(req),                 // every fetch() the script makes
 * });
 * const res = await host.fetch(tenant, 'my-script', new Request('https://example.com/'), { cf: { colo: 'LHR' } });
 * ```
 *
 * ## Guarantees
 * - **Tenants are isolated**: every tenant gets its own workerd process (one Miniflare instance);
 *   every script is its own worker (own isolate and globals) inside it. Nothing is shared between
 *   tenants, and a tenant's runaway script never stops another tenant's.
 * - **load** replaces a script atomically: a new instance with the tenant's scripts is started,
 *   and only when it is ready does it take new requests; the old one finishes its in-flight
 *   requests and is then disposed. Loads issued together (same tick) share one start. A script
 *   that does not start rejects with `ScriptError {message, location, scriptId}` (for example
 *   `Unexpected token ')'` at `main.js:3:29`) and the previous version stays live.
 * - **fetch** never hangs and never throws for script failures: an uncaught exception, CPU or
 *   memory overrun, subrequest limit, or wall-clock timeout answers with the failure's `Response`
 *   (`LoadOptions.errorResponse`, default: `error code: 1101/1102/…` text with status 500/503 and
 *   header `x-outpost-script-failure: <kind>`). Exceptions are logged with message and location.
 *   `fetch` throws only for caller errors (script not loaded).
 * - **CPU**: workerd enforces no CPU limit, so a watchdog samples the CPU time of each busy
 *   runtime process. When it has run without any sign of progress (a subrequest, a binding call,
 *   response headers or body) for longer than the largest `cpuMs` among its in-flight requests
 *   plus the configured slack (`--runtime-cpu-slack`, default 250 ms: workerd itself pauses that
 *   long under load), the instance is killed, every request in flight on it answers with the
 *   `cpu` failure, and a fresh instance is started for the next request.
 * - **Memory**: the same watchdog disposes an instance whose resident set grows past its
 *   baseline by more than `limits.memoryMb` (at least `--runtime-memory-floor`, default 512 MB),
 *   answering `memory`.
 * - **Outbound**: every `fetch()` a script makes is counted inside the invocation; beyond
 *   `limits.subrequests` the script's `fetch` throws and the invocation answers the `subrequests`
 *   failure. A bodiless call to the host of `FetchContext.origin` goes from workerd straight to that
 *   origin address (the hot path, docs/runtime.md); every other call reaches `LoadOptions.outbound`
 *   (default: a plain `fetch` with redirects not followed by Node; the runtime follows them and each
 *   hop counts) with the invocation's `context`. An `outbound` or binding may throw
 *   `ScriptLimitError` to end the invocation with its own failure (snippets: 1201).
 * - **serve** is `fetch` for a request on a Node HTTP server: sockets are piped both ways.
 * - **Node bindings** (`{type: 'service', fetch}`) are reached from the script as
 *   `env[NAME].fetch(...)` and receive `info` with the invocation's context too (undefined for a
 *   call made outside a request, e.g. at the top level).
 * - Outbound calls and binding calls of a script arrive at a loopback server of that script only,
 *   so which tenant and script made a call is never taken from the script's own headers.
 *
 * Helpers for outbound handlers: `networkFetch` (the default outbound), `responseOf` and
 * `writeResponse` (Node HTTP ↔ Fetch API, small bodies read whole). See docs/runtime.md.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

export const RUNTIME = 'runtime';

export interface ScriptModule {
  /** Module name as imported by the others (`main.js`, `lib/util.js`); no leading `/`. */
  name: string;
  type: 'esm' | 'commonjs' | 'text' | 'data' | 'wasm';
  content: string | Uint8Array;
}

/** What a Node binding or the outbound handler learns about the call. */
export interface InvocationInfo {
  tenant: string;
  scriptId: string;
  /** Whatever the caller passed as `ctx.context` to `host.fetch` (undefined outside one). */
  context?: unknown;
  /** The guest of a pool script the invocation ran (its id), if any. */
  guest?: string;
  /** Subrequests made so far by this invocation, this one included (outbound only). */
  subrequests?: number;
}

/** A binding implemented in Node, reached from the script as `env[name].fetch(...)`. */
export interface NodeBinding {
  type: 'service';
  fetch(req: Request, info: InvocationInfo): Promise<Response>;
  /**
   * Optional fast path: answers the call on Node's own request and response, without Fetch API
   * objects (a dispatcher's call to a customer script pipes them to the customer's runtime with
   * `serve`). Resolves `false`, before reading the body or writing anything, to leave the call to
   * `fetch`.
   */
  serve?(req: IncomingMessage, res: ServerResponse, info: InvocationInfo): Promise<boolean>;
}

export type Binding =
  NodeBinding | { type: 'json'; value: unknown } | { type: 'text'; value: string };

export interface ScriptLimits {
  /** CPU time per request before the watchdog steps in (plus the host's slack). */
  cpuMs?: number;
  /** `fetch()` calls per request. */
  subrequests?: number;
  /** Resident-set growth of the instance that counts as a memory overrun (raised to the host floor). */
  memoryMb?: number;
  /** Wall-clock budget per request (default: the host's). */
  wallMs?: number;
}

export type ScriptFailureKind =
  'exception' | 'cpu' | 'memory' | 'subrequests' | 'timeout' | 'unavailable' | 'limit';

export interface ScriptFailure {
  kind: ScriptFailureKind;
  /** Platform error code chosen by whoever raised it (snippets 1201–1204); undefined = default. */
  code?: number;
  message: string;
  /** `module:line:column` of an exception, when known. */
  location?: string;
  tenant: string;
  scriptId: string;
}

export interface LoadOptions {
  modules: ScriptModule[];
  mainModule: string;
  /** Default: the host's default compatibility date. */
  compatibilityDate?: string;
  compatibilityFlags?: string[];
  bindings?: Record<string, Binding>;
  limits?: ScriptLimits;
  /** Sees every `fetch()` the script makes; may throw `ScriptLimitError`. */
  outbound?: (req: Request, info: InvocationInfo) => Promise<Response>;
  /** Builds the caller's answer for a failure (default: `defaultFailureResponse`). */
  errorResponse?: (failure: ScriptFailure) => Response;
  /**
   * Makes this a pool script: a Worker Loader binding of this name is added, and the main module
   * is host code taken as is (no wrapper). Requests to it carry a `guest` (see `FetchContext`).
   */
  loader?: string;
}

/**
 * A script run by a pool script's Worker Loader inside the pool's process: `id` names it in the
 * loader's cache (a new id for new code), `opts` are its modules, bindings, outbound and limits.
 */
export interface Guest {
  id: string;
  opts: LoadOptions;
}

export interface FetchContext {
  /** `request.cf` (and `request.edge`) inside the script. */
  cf?: Record<string, unknown>;
  /** Passed to `outbound` and Node bindings as `info.context` for this invocation. */
  context?: unknown;
  /**
   * The request's origin, when it is a plain-HTTP address: the script's bodiless `fetch()` calls
   * to `host` then go from the runtime straight to `address` (counted, with these headers) instead
   * of through `outbound`. Other calls, calls with a body, and a connection that fails still take
   * `outbound`. See docs/runtime.md ("The hot path").
   */
  origin?: DirectOrigin;
  /** Builds the answer for a failure of this call (default: the script's `errorResponse`). */
  errorResponse?: (failure: ScriptFailure) => Response;
  /**
   * CPU and subrequest limits of this call, in place of the script's (a dispatcher sets them per
   * call to a customer's script).
   */
  limits?: Pick<ScriptLimits, 'cpuMs' | 'subrequests'>;
  /** The call is for this guest of the (pool) script. */
  guest?: Guest;
}

export interface DirectOrigin {
  /** `ip:port` (IPv6 in brackets) of the origin. */
  address: string;
  /** Host name whose requests go to the origin (lower case, no port). */
  host: string;
  /** `Host` header for the origin; default the request URL's host. */
  hostHeader?: string;
  /** The visitor's address, appended to `X-Forwarded-For`. */
  clientIp: string;
  /** Headers set on every request to the origin (`cf-connecting-ip`, `cf-ray`, …). */
  headers: Record<string, string>;
  /** At most one call reaches the origin; a second fails the invocation with this (snippets: 1201). */
  once?: { code: number; message: string };
}

/** `serve`'s context: what `fetch` learns from a Request, and what to do with the answer. */
export interface ServeContext extends FetchContext {
  /** The URL the script sees (`request.url`). */
  url: string;
  /** Request headers (lower case) not passed to the script. */
  dropHeaders?: ReadonlySet<string>;
  /** Request headers set for the script (the platform's `cf-*`). */
  headers?: Record<string, string>;
  /** Set on the answer, the script's or a failure's. */
  responseHeaders?: Record<string, string>;
  /**
   * Keep the failure marker header on a failure's answer: the caller is another script (a
   * dispatcher's binding call), which sees it as `fetch` callers do, not a client.
   */
  keepFailureMarker?: boolean;
}

export interface ScriptHost {
  /** Loads or replaces a script; throws `ScriptError` if it does not start. */
  load(tenant: string, scriptId: string, opts: LoadOptions): Promise<void>;
  /** Runs the script's `fetch` handler; failures come back as the platform's error response. */
  fetch(tenant: string, scriptId: string, req: Request, ctx?: FetchContext): Promise<Response>;
  /**
   * `fetch` for a request that arrived on a Node HTTP server: the body and the answer are piped
   * between the sockets without Fetch API objects (the edge's hot path). Resolves when the answer
   * is written (or the client went away).
   */
  serve(
    tenant: string,
    scriptId: string,
    req: IncomingMessage,
    res: ServerResponse,
    ctx: ServeContext,
  ): Promise<void>;
  unload(tenant: string, scriptId: string): Promise<void>;
  /**
   * Loads `guest` into the pool script's Worker Loader without running any of its handlers;
   * throws `ScriptError` (with the location) if it does not start.
   */
  checkGuest(tenant: string, scriptId: string, guest: Guest): Promise<void>;
  /** Forgets a guest's code (it was replaced or deleted). */
  dropGuest(id: string): void;
  has(tenant: string, scriptId: string): boolean;
  close(): Promise<void>;
}

/** A script that failed to start (syntax error, bad import, exception at the top level). */
export class ScriptError extends Error {
  constructor(
    message: string,
    readonly location?: string,
    readonly scriptId?: string,
  ) {
    super(message);
    this.name = 'ScriptError';
  }
}

/** Thrown by an `outbound` handler or a Node binding to end the invocation with a failure. */
export class ScriptLimitError extends Error {
  constructor(
    readonly kind: ScriptFailureKind,
    message: string,
    readonly code?: number,
  ) {
    super(message);
    this.name = 'ScriptLimitError';
  }
}

export {
  createScriptHost,
  defaultFailureResponse,
  networkFetch,
  responseOf,
  writeResponse,
  FAILURE_HEADER,
  type HostOptions,
} from './host.ts';
export { poolSource } from './modules.ts';
