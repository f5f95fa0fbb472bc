/**
 * `ScriptHost` over Miniflare 4 / workerd: one runtime instance (one workerd process) per tenant,
 * one worker per script, requests sent straight to each worker's own loopback socket, outbound
 * `fetch()` and Node bindings served by Node handlers, and a CPU/memory watchdog that replaces a
 * runaway instance. See `index.ts` for the contract.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { randomBytes, randomUUID } from 'node:crypto';
import type { Miniflare, WorkerOptions } from 'miniflare';
import type { Logger } from '../core/log.ts';
import {
  ScriptError,
  ScriptLimitError,
  type FetchContext,
  type Guest,
  type InvocationInfo,
  type LoadOptions,
  type NodeBinding,
  type ScriptFailure,
  type ScriptFailureKind,
  type ScriptHost,
  type ServeContext,
} from './index.ts';
import {
  CONFIG_BINDING,
  GUEST_CODE_HEADER,
  GUEST_HEADER,
  GUEST_PROBE_HEADER,
  H,
  NET_BINDING,
  NET_KEY_BINDING,
  PRELUDE_MODULE,
  WRAPPER_MODULE,
  netOriginBinding,
  netSource,
  preludeSource,
  wrapperSource,
  type Grant,
} from './modules.ts';
import {
  bindRuntimeToHost,
  claimNewestRuntimeChild,
  releaseRuntimeChild,
  rssBytes,
  schedNs,
} from './proc.ts';
import { listenOn } from '../core/listen.ts';

export interface HostOptions {
  log: Logger;
  /** Added to a script's `cpuMs` before the watchdog acts (measurement granularity), ms. */
  cpuSlackMs?: number;
  /** Watchdog sampling period while requests are in flight, ms. */
  watchdogTickMs?: number;
  /** Smallest resident-set growth treated as a memory overrun, MB. */
  memoryFloorMb?: number;
  /** Wall-clock budget per request unless the script's limits say otherwise, ms. */
  wallTimeoutMs?: number;
  /** Running instances kept; the least recently used idle one is stopped beyond it (restarted on demand). */
  maxInstances?: number;
  /** CPU budget for scripts that set none, ms. */
  defaultCpuMs?: number;
  defaultCompatibilityDate?: string;
}

/** Header on every failure response the host builds: the failure's kind. */
export const FAILURE_HEADER = 'x-outpost-script-failure';

const DEFAULT_CODES: Record<ScriptFailureKind, [status: number, code: number]> = {
  exception: [500, 1101],
  limit: [500, 1101],
  subrequests: [500, 1101],
  cpu: [503, 1102],
  memory: [503, 1102],
  timeout: [504, 1102],
  unavailable: [503, 1105],
};

/** The default answer for a failure: `error code: NNNN` as plain text. */
export function defaultFailureResponse(f: ScriptFailure): Response {
  const [status, code] = DEFAULT_CODES[f.kind];
  return new Response(`error code: ${f.code ?? code}\n`, {
    status,
    headers: { 'content-type': 'text/plain; charset=utf-8', [FAILURE_HEADER]: f.kind },
  });
}

const MODULE_ROOT = '/outpost-script';
/** The worker holding the net binding's module (origin connections, instance key). */
const NET_WORKER = 'outpost-net';
/** Origin addresses a tenant's instance keeps connections for; beyond it, origins go through Node. */
const MAX_DIRECT_ORIGINS = 16;
/** A watchdog interval in which the runtime wanted the CPU for less than this share is idle. */
const IDLE_SHARE = 0.2;
/** The span over which that share is judged, ms. */
const IDLE_WINDOW_MS = 20;
/** Bodies up to this size are read whole instead of streamed. */
const BUFFER_LIMIT = 256 * 1024;

const MODULE_TYPES = {
  esm: 'ESModule',
  commonjs: 'CommonJS',
  text: 'Text',
  data: 'Data',
  wasm: 'CompiledWasm',
} as const;

interface Invocation {
  id: string;
  tenant: string;
  scriptId: string;
  context: unknown;
  opts: LoadOptions;
  instance: Instance;
  subrequests: number;
  cpuMs: number;
  /** `fetch()` calls allowed (the call's limit, else the script's). */
  subrequestLimit?: number;
  failure?: ScriptFailure;
  failed: Promise<ScriptFailure>;
  fail(f: Omit<ScriptFailure, 'tenant' | 'scriptId'>): void;
  done: boolean;
  timer?: NodeJS.Timeout;
  /** The guest of a pool script it runs. */
  guest?: string;
  /** Last time it was seen doing something (begun, a fetch() or binding call, an answer to one). */
  lastActive: number;
  /** Stopped with its instance although it never got the CPU: it may be sent again. */
  retriable?: boolean;
}

class Instance {
  mf?: Miniflare;
  pid?: number;
  /** Sent with every request to the runtime and every call back; scripts never see it. */
  readonly key = randomBytes(18).toString('base64url');
  /** Origin address → index of its connection in the net binding. */
  readonly origins: Map<string, number>;
  readonly urls = new Map<string, URL>();
  readonly inflight = new Set<Invocation>();
  /** The Node servers its scripts' outbound calls and bindings reach. */
  readonly servers: http.Server[] = [];
  /** Watchdog state: CPU at the last sample, continuous busy time without progress. */
  lastCpu?: number;
  lastRunnable = 0;
  /** CPU wanted and wall time since the last idleness verdict, ns. */
  windowWanted = 0;
  windowWall = 0;
  windowTotal = 0;
  lastSampleAt = 0;
  busyNs = 0;
  progress = false;
  baselineRss?: number;
  dead = false;
  retired = false;
  lastUsed = Date.now();

  constructor(
    readonly tenant: string,
    readonly scripts: Map<string, LoadOptions>,
    readonly workerNames: Map<string, string>,
    origins: readonly string[],
  ) {
    this.origins = new Map(origins.map((address, i) => [address, i]));
  }
}

interface PendingLoad {
  scriptId: string;
  opts: LoadOptions | null;
  resolve(): void;
  reject(err: unknown): void;
}

interface Tenant {
  name: string;
  scripts: Map<string, LoadOptions>;
  instance?: Instance;
  starting?: Promise<Instance>;
  pending: PendingLoad[];
  chain: Promise<void>;
  scheduled: boolean;
  /** Origin addresses its requests were granted; the next instance connects to each directly. */
  origins: string[];
  /** An instance restart that adds newly seen origins is queued. */
  refreshing: boolean;
}

export function createScriptHost(opts: HostOptions): ScriptHost {
  bindRuntimeToHost();
  return new MiniflareScriptHost(opts);
}

class MiniflareScriptHost implements ScriptHost {
  private readonly tenants = new Map<string, Tenant>();
  private readonly invocations = new Map<string, Invocation>();
  /** Code of pool scripts' guests, by id. */
  private readonly guests = new Map<string, LoadOptions>();
  private readonly log: Logger;
  private readonly cpuSlackNs: number;
  private readonly tickMs: number;
  private readonly memoryFloor: number;
  private readonly wallMs: number;
  private readonly maxInstances: number;
  private readonly defaultCpuMs: number;
  private readonly compatibilityDate: string;
  private watchdog?: NodeJS.Timeout;
  private closed = false;
  private readonly agent = new http.Agent({
    keepAlive: true,
    maxSockets: 256,
    maxFreeSockets: 64,
    scheduling: 'lifo',
  });

  constructor(o: HostOptions) {
    this.log = o.log;
    this.cpuSlackNs = (o.cpuSlackMs ?? 250) * 1e6;
    this.tickMs = o.watchdogTickMs ?? 5;
    this.memoryFloor = (o.memoryFloorMb ?? 512) * 1024 * 1024;
    this.wallMs = o.wallTimeoutMs ?? 30_000;
    this.maxInstances = o.maxInstances ?? 64;
    this.defaultCpuMs = o.defaultCpuMs ?? 50;
    this.compatibilityDate = o.defaultCompatibilityDate ?? '2025-01-01';
  }

  // ---------------------------------------------------------------- load / unload

  has(tenant: string, scriptId: string): boolean {
    return this.tenants.get(tenant)?.scripts.has(scriptId) ?? false;
  }

  load(tenant: string, scriptId: string, opts: LoadOptions): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the script host is closed'));
    checkOptions(opts);
    return this.enqueue(tenant, scriptId, opts);
  }

  unload(tenant: string, scriptId: string): Promise<void> {
    if (!this.has(tenant, scriptId)) return Promise.resolve();
    return this.enqueue(tenant, scriptId, null);
  }

  private tenant(name: string): Tenant {
    let t = this.tenants.get(name);
    if (!t) {
      t = {
        name,
        scripts: new Map(),
        pending: [],
        chain: Promise.resolve(),
        scheduled: false,
        origins: [],
        refreshing: false,
      };
      this.tenants.set(name, t);
    }
    return t;
  }

  /** Queues a change; changes queued in the same tick are applied with one instance start. */
  private enqueue(tenantName: string, scriptId: string, opts: LoadOptions | null): Promise<void> {
    const t = this.tenant(tenantName);
    return new Promise<void>((resolve, reject) => {
      t.pending.push({ scriptId, opts, resolve, reject });
      if (t.scheduled) return;
      t.scheduled = true;
      t.chain = t.chain.then(() => {
        t.scheduled = false;
        return this.applyPending(t);
      });
    });
  }

  private async applyPending(t: Tenant): Promise<void> {
    let batch = t.pending.splice(0);
    while (batch.length > 0) {
      const desired = new Map(t.scripts);
      for (const p of batch) {
        if (p.opts) desired.set(p.scriptId, p.opts);
        else desired.delete(p.scriptId);
      }
      try {
        await this.replaceInstance(t, desired);
        for (const p of batch) p.resolve();
        batch = [];
      } catch (err) {
        // A start that failed because of one script rejects that script's change; the rest retry.
        const culprit = err instanceof ScriptError ? err.scriptId : undefined;
        const bad = culprit === undefined ? [] : batch.filter((p) => p.scriptId === culprit);
        const rejected = bad.length === 0 ? batch : bad;
        for (const p of rejected) p.reject(err);
        batch = bad.length === 0 ? [] : batch.filter((p) => p.scriptId !== culprit);
      }
    }
    if (t.scripts.size === 0 && t.pending.length === 0 && !t.instance) this.tenants.delete(t.name);
  }

  /** Starts an instance with `desired`, swaps it in, retires the old one. */
  private async replaceInstance(t: Tenant, desired: Map<string, LoadOptions>): Promise<void> {
    if (desired.size === 0) {
      t.scripts = desired;
      const old = t.instance;
      t.instance = undefined;
      if (old) this.retire(old);
      return;
    }
    const inst = await this.startInstance(t.name, desired, t.origins);
    if (this.closed) {
      await this.dispose(inst);
      throw new Error('the script host is closed');
    }
    t.scripts = desired;
    const old = t.instance;
    t.instance = inst;
    if (old) this.retire(old);
    this.enforceInstanceCap(inst);
  }

  private async startInstance(
    tenant: string,
    scripts: Map<string, LoadOptions>,
    origins: readonly string[],
  ): Promise<Instance> {
    const names = new Map<string, string>();
    let i = 0;
    for (const id of scripts.keys()) names.set(id, `s${i++}`);
    const inst = new Instance(tenant, scripts, names, origins.slice());
    const workers: WorkerOptions[] = [];
    try {
      for (const [scriptId, opts] of scripts) {
        const address = await this.listenFor(inst, scriptId, opts);
        workers.push(this.workerOptions(names.get(scriptId)!, opts, address));
      }
    } catch (err) {
      closeServers(inst);
      throw err;
    }
    workers.push(netWorker(inst));
    const started = performance.now();
    let startupErr = '';
    // Miniflare installs SIGINT/SIGTERM handlers that exit at once; Outpost stops gracefully and
    // closes its runtime instances itself, so those handlers are taken off again below.
    // Loaded on first use: it is the heaviest module Outpost has, and most processes never run a script.
    const { Miniflare } = await import('miniflare');
    const mf = new Miniflare({
      host: '127.0.0.1',
      port: 0,
      workers,
      handleRuntimeStdio: (stdout: Readable, stderr: Readable) => {
        inst.pid = claimNewestRuntimeChild();
        const sink = (stream: Readable, level: 'info' | 'warn') => {
          let buf = '';
          stream.on('data', (chunk: Buffer) => {
            const text = chunk.toString();
            if (!inst.mf) startupErr += text;
            buf += text;
            let nl: number;
            while ((nl = buf.indexOf('\n')) >= 0) {
              const line = buf.slice(0, nl);
              buf = buf.slice(nl + 1);
              if (line.trim())
                this.log[level]({ tenant, pid: inst.pid, output: line }, 'script output');
            }
          });
          stream.on('error', () => {});
        };
        sink(stdout, 'info');
        sink(stderr, 'warn');
      },
    });
    releaseSignalHandlers();
    try {
      await mf.ready;
      for (const [scriptId, name] of names)
        inst.urls.set(scriptId, await mf.unsafeGetDirectURL(name));
    } catch (err) {
      releaseRuntimeChild(inst.pid);
      closeServers(inst);
      await mf.dispose().catch(() => {});
      // The runtime's own message arrives on stderr; give the pipe a moment to drain.
      await new Promise((r) => setTimeout(r, 5));
      throw startupError(startupErr, names, err as Error);
    }
    inst.mf = mf;
    inst.baselineRss = inst.pid ? rssBytes(inst.pid) : undefined;
    this.log.debug(
      {
        tenant,
        scripts: scripts.size,
        pid: inst.pid,
        ms: +(performance.now() - started).toFixed(1),
      },
      'runtime instance started',
    );
    return inst;
  }

  /**
   * The Node side of one script: a loopback HTTP server its runtime reaches for every `fetch()`
   * and every call to a Node binding (workerd keeps connections to it alive). One per script, so
   * a request's origin is known from where it arrives, not from anything the script could forge.
   */
  private async listenFor(inst: Instance, scriptId: string, opts: LoadOptions): Promise<string> {
    const handlers = new Map<string, NodeBinding>();
    for (const [name, b] of Object.entries(opts.bindings ?? {}))
      if (b.type === 'service') handlers.set(name, b);
    const server = http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
      if (opts.loader && req.headers[GUEST_CODE_HEADER] !== undefined)
        return this.serveGuestCode(inst, req, res);
      const binding = req.headers[H.binding];
      // A guest's binding calls resolve against the guest's bindings (its invocation says which).
      const inv = opts.loader ? this.invocationFor(inst, scriptId, req) : undefined;
      const guestBinding =
        inv?.guest !== undefined && typeof binding === 'string'
          ? inv.opts.bindings?.[binding]
          : undefined;
      const handler =
        guestBinding?.type === 'service'
          ? guestBinding
          : typeof binding === 'string' && inv?.guest === undefined
            ? handlers.get(binding)
            : undefined;
      const served = handler
        ? this.serveBinding(inst, scriptId, handler, req, res)
        : this.serveOutbound(inst, scriptId, inv?.guest !== undefined ? inv.opts : opts, req, res);
      served.catch((err: unknown) => {
        this.log.error({ err, tenant: inst.tenant, scriptId }, 'outbound handling failed');
        refuse(res, 'internal error');
      });
    });
    inst.servers.push(server);
    const { port } = await listenOn(server, 0, '127.0.0.1');
    return `127.0.0.1:${port}`;
  }

  private workerOptions(name: string, opts: LoadOptions, nodeAddress: string): WorkerOptions {
    const main = opts.modules.find((m) => m.name === opts.mainModule)!;
    const userModules = opts.modules.map((m) => ({
      type: MODULE_TYPES[m.type],
      path: `${MODULE_ROOT}/${m.name}`,
      contents: m.content,
    }));
    // A pool script is host code: its main module runs as is, first in the list.
    const modules = opts.loader
      ? [
          ...userModules.filter((m) => m.path === `${MODULE_ROOT}/${opts.mainModule}`),
          ...userModules.filter((m) => m.path !== `${MODULE_ROOT}/${opts.mainModule}`),
        ]
      : [
          {
            type: 'ESModule' as const,
            path: `${MODULE_ROOT}/${WRAPPER_MODULE}`,
            contents: wrapperSource(opts.mainModule, main.type === 'esm'),
          },
          {
            type: 'ESModule' as const,
            path: `${MODULE_ROOT}/${PRELUDE_MODULE}`,
            contents: preludeSource(),
          },
          ...userModules,
        ];
    const flags = [...(opts.compatibilityFlags ?? [])];
    if (!flags.some((f) => f === 'nodejs_compat' || f === 'nodejs_als')) flags.push('nodejs_als');
    const node = { external: { address: nodeAddress, http: {} } };
    const bindings: Record<string, unknown> = {};
    const serviceBindings: Record<string, typeof node> = {};
    const nodeBindings: string[] = [];
    for (const [bname, b] of Object.entries(opts.bindings ?? {})) {
      if (b.type === 'service') {
        nodeBindings.push(bname);
        serviceBindings[bname] = node;
      } else bindings[bname] = b.value;
    }
    bindings[CONFIG_BINDING] = { nodeBindings };
    return {
      name,
      modulesRoot: MODULE_ROOT,
      modules,
      compatibilityDate: opts.compatibilityDate ?? this.compatibilityDate,
      compatibilityFlags: flags,
      bindings: bindings as WorkerOptions['bindings'],
      serviceBindings,
      outboundService: node,
      wrappedBindings: { [NET_BINDING]: { scriptName: NET_WORKER } },
      unsafeDirectSockets: [{ host: '127.0.0.1', port: 0 }],
      ...(opts.loader ? { workerLoaders: { [opts.loader]: {} } } : {}),
    } as WorkerOptions;
  }

  /** Stops `inst` once its in-flight requests are done. */
  private retire(inst: Instance): void {
    inst.retired = true;
    if (inst.inflight.size === 0) void this.dispose(inst);
  }

  private async dispose(inst: Instance): Promise<void> {
    if (inst.dead) return;
    inst.dead = true;
    releaseRuntimeChild(inst.pid);
    closeServers(inst);
    await inst.mf
      ?.dispose()
      .catch((err: unknown) =>
        this.log.warn({ err, tenant: inst.tenant }, 'runtime instance dispose failed'),
      );
  }

  private enforceInstanceCap(keep: Instance): void {
    const running = [...this.tenants.values()]
      .map((t) => t.instance)
      .filter((x): x is Instance => !!x && !x.dead);
    if (running.length <= this.maxInstances) return;
    const idle = running
      .filter((x) => x !== keep && x.inflight.size === 0)
      .sort((a, b) => a.lastUsed - b.lastUsed);
    for (const inst of idle.slice(0, running.length - this.maxInstances)) {
      const t = this.tenants.get(inst.tenant);
      if (t?.instance === inst) t.instance = undefined;
      void this.dispose(inst);
    }
  }

  /** The tenant's running instance, starting one (after an overrun or eviction) if needed. */
  private async running(t: Tenant): Promise<Instance> {
    if (t.instance && !t.instance.dead) return t.instance;
    if (!t.starting) {
      const scripts = t.scripts;
      t.starting = this.startInstance(t.name, scripts, t.origins)
        .then((inst) => {
          if (this.closed || t.scripts !== scripts) {
            // Replaced or closed meanwhile: this start is stale.
            void this.dispose(inst);
            if (this.closed) throw new Error('the script host is closed');
            return this.running(t);
          }
          t.instance = inst;
          this.enforceInstanceCap(inst);
          return inst;
        })
        .finally(() => (t.starting = undefined));
    }
    return t.starting;
  }

  // ---------------------------------------------------------------- fetch

  async fetch(
    tenant: string,
    scriptId: string,
    req: Request,
    ctx: FetchContext = {},
  ): Promise<Response> {
    const headers: Record<string, string | string[]> = {};
    for (const [name, value] of req.headers) {
      if (name === 'set-cookie' || INTERNAL_REQUEST_HEADERS.has(name)) continue;
      headers[name] = value;
    }
    const hasBody = req.body !== null && req.method !== 'GET' && req.method !== 'HEAD';
    const body = hasBody
      ? Readable.fromWeb(req.body as import('node:stream/web').ReadableStream<Uint8Array>)
      : undefined;
    const r = await this.call(
      tenant,
      scriptId,
      { method: req.method, url: req.url, headers, body },
      ctx,
    );
    if (r instanceof Response) return r;
    const status = r.res.statusCode!;
    const nullBody = status === 204 || status === 205 || status === 304 || req.method === 'HEAD';
    return responseOf(r.res, nullBody, r.done);
  }

  async serve(
    tenant: string,
    scriptId: string,
    req: IncomingMessage,
    res: ServerResponse,
    ctx: ServeContext,
  ): Promise<void> {
    const headers: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value === undefined || INTERNAL_REQUEST_HEADERS.has(name) || ctx.dropHeaders?.has(name))
        continue;
      headers[name] = value;
    }
    if (ctx.headers) Object.assign(headers, ctx.headers);
    const method = req.method ?? 'GET';
    const declared = Number(req.headers['content-length']);
    const hasBody =
      method !== 'GET' &&
      method !== 'HEAD' &&
      (req.headers['transfer-encoding'] !== undefined || declared > 0);
    const r = await this.call(
      tenant,
      scriptId,
      { method, url: ctx.url, headers, body: hasBody ? req : undefined },
      ctx,
    );
    if (r instanceof Response) {
      // The failure marker is for callers of `fetch`; a client never sees it.
      const headers = new Headers(r.headers);
      if (!ctx.keepFailureMarker) headers.delete(FAILURE_HEADER);
      const failure = new Response(r.body, { status: r.status, statusText: r.statusText, headers });
      return writeResponse(failure, res, ctx.responseHeaders);
    }
    const from = r.res;
    const out: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(from.headers))
      if (value !== undefined && !HOP_BY_HOP_RESPONSE.has(name)) out[name] = value;
    if (ctx.responseHeaders) Object.assign(out, ctx.responseHeaders);
    res.writeHead(from.statusCode!, from.statusMessage, out);
    await new Promise<void>((resolve) => {
      const finish = () => {
        r.done();
        resolve();
      };
      from.once('end', finish);
      from.once('error', (err) => {
        res.destroy(err);
        finish();
      });
      res.once('close', () => {
        if (!from.complete) from.destroy();
        finish();
      });
      from.pipe(res);
    });
  }

  /**
   * One invocation: the request goes to the worker's socket and its answer comes back raw, or a
   * failure comes back as the caller's error Response. `done` ends the invocation once the body
   * has been read or abandoned.
   */
  private async call(
    tenant: string,
    scriptId: string,
    req: {
      method: string;
      url: string;
      headers: Record<string, string | string[]>;
      body?: Readable;
    },
    ctx: FetchContext,
    again = true,
  ): Promise<Response | { res: IncomingMessage; done: () => void }> {
    const t = this.tenants.get(tenant);
    const opts = t?.scripts.get(scriptId);
    if (!t || !opts) throw new Error(`script ${scriptId} is not loaded for ${tenant}`);
    const errorResponse = ctx.errorResponse ?? opts.errorResponse ?? defaultFailureResponse;
    let inst: Instance;
    try {
      inst = await this.running(t);
    } catch (err) {
      this.log.error({ err, tenant, scriptId }, 'runtime instance did not start');
      return errorResponse({
        kind: 'unavailable',
        message: (err as Error).message,
        tenant,
        scriptId,
      });
    }
    const url = inst.urls.get(scriptId);
    const scriptOpts = inst.scripts.get(scriptId);
    if (!url || !scriptOpts)
      return errorResponse({
        kind: 'unavailable',
        message: 'script is being replaced',
        tenant,
        scriptId,
      });
    const guest = scriptOpts.loader ? ctx.guest : undefined;
    if (scriptOpts.loader && !guest) throw new Error(`a call to the pool ${tenant} names no guest`);
    const runOpts = guest?.opts ?? scriptOpts;
    if (guest) this.guests.set(guest.id, guest.opts);
    const inv = this.begin(inst, tenant, scriptId, runOpts, ctx.context, ctx.limits);
    inv.guest = guest?.id;
    const { headers } = req;
    headers[H.invocation] = inv.id;
    headers[H.url] = req.url;
    headers[H.key] = inst.key;
    headers[H.grant] = JSON.stringify(this.grant(t, inst, runOpts, guest ? {} : ctx));
    if (guest) headers[GUEST_HEADER] = guest.id;
    headers.host = new URL(req.url).host;
    if (ctx.cf) headers[H.cfBlob] = JSON.stringify(ctx.cf);
    if (!req.body) headers['content-length'] ??= '0';
    const pending: { request?: http.ClientRequest } = {};
    let res: IncomingMessage | ScriptFailure;
    try {
      res = await Promise.race([
        this.send(url, req.method, headers, req.body, pending).catch((err: unknown) => {
          // A kept-alive connection the runtime closed just as it was reused: nothing reached
          // the script, so a bodiless request is sent once more on a fresh connection.
          if (!pending.request?.reusedSocket || req.body || inv.failure) throw err;
          return this.send(url, req.method, headers, undefined, pending);
        }),
        inv.failed,
      ]);
    } catch (err) {
      // The connection broke: the instance was killed (its failure says why) or crashed.
      res =
        inv.failure ??
        this.failInvocation(inv, {
          kind: 'unavailable',
          message: `runtime unavailable: ${(err as Error).message}`,
        });
    }
    if (!(res instanceof http.IncomingMessage)) {
      pending.request?.destroy();
      this.end(inv);
      // Stopped with a pool instance whose CPU another guest took: it never ran, so a bodiless
      // request is sent once more (to the fresh instance).
      if (inv.retriable && again && !req.body && !this.closed)
        return this.call(tenant, scriptId, req, ctx, false);
      return errorResponse(res);
    }
    inst.progress = true;
    const limitHit = res.headers[H.failure];
    if (typeof limitHit === 'string') {
      res.resume();
      const f = inv.failure ?? this.failInvocation(inv, parseFailure(limitHit));
      this.end(inv);
      return errorResponse(f);
    }
    if (res.headers[H.scriptError] !== undefined) {
      const body = (await readJson(res)) as {
        name?: string;
        message?: string;
        location?: string;
        stack?: string;
      };
      const message = `${body.name ?? 'Error'}: ${body.message ?? 'unknown error'}`;
      this.log.warn(
        { tenant, scriptId, location: body.location, stack: body.stack },
        `script exception: ${message}`,
      );
      const f =
        inv.failure ??
        this.failInvocation(inv, { kind: 'exception', message, location: body.location });
      this.end(inv);
      return errorResponse(f);
    }
    if (inv.failure) {
      res.resume();
      this.end(inv);
      return errorResponse(inv.failure);
    }
    return { res, done: () => this.end(inv) };
  }

  /** One request to a worker's socket; resolves with its response head (body unread). */
  private send(
    url: URL,
    method: string,
    headers: Record<string, string | string[]>,
    body: Readable | undefined,
    pending: { request?: http.ClientRequest },
  ): Promise<IncomingMessage> {
    return new Promise<IncomingMessage>((resolve, reject) => {
      const out = http.request(
        { host: url.hostname, port: url.port, method, path: '/', headers, agent: this.agent },
        (res) => {
          const status = res.statusCode ?? 502;
          if (status < 200 || status > 599) {
            res.resume();
            reject(
              new Error(
                `the script answered with status ${status}, which this host does not pass on`,
              ),
            );
            return;
          }
          resolve(res);
        },
      );
      pending.request = out;
      out.on('error', reject);
      if (body) {
        body.on('error', (err) => out.destroy(err));
        body.pipe(out);
      } else out.end();
    });
  }

  /**
   * What the invocation may do inside the runtime: its subrequest limit, and the origin its
   * same-host `fetch()` reaches directly when the instance holds a connection to that address.
   * A new address is added to the tenant's list and the instance restarted in the background;
   * until then its requests take the Node path.
   */
  private grant(t: Tenant, inst: Instance, opts: LoadOptions, ctx: FetchContext): Grant {
    const grant: Grant = { limit: ctx.limits?.subrequests ?? opts.limits?.subrequests };
    const o = ctx.origin;
    if (!o) return grant;
    const i = inst.origins.get(o.address);
    if (i !== undefined) {
      grant.origin = {
        i,
        host: o.host,
        hostHeader: o.hostHeader,
        clientIp: o.clientIp,
        headers: o.headers,
        once: o.once,
      };
    } else if (!t.origins.includes(o.address) && t.origins.length < MAX_DIRECT_ORIGINS) {
      t.origins.push(o.address);
      this.refreshOrigins(t);
    }
    return grant;
  }

  /** Restarts the tenant's instance so that it connects to every origin in its list. */
  private refreshOrigins(t: Tenant): void {
    if (t.refreshing) return;
    t.refreshing = true;
    t.chain = t.chain.then(async () => {
      t.refreshing = false;
      if (this.closed || t.scripts.size === 0) return;
      try {
        await this.replaceInstance(t, t.scripts);
        this.log.debug(
          { tenant: t.name, origins: t.origins.length },
          'runtime connects to origins directly',
        );
      } catch (err) {
        this.log.warn({ err, tenant: t.name }, 'runtime restart for direct origins failed');
      }
    });
  }

  private begin(
    inst: Instance,
    tenant: string,
    scriptId: string,
    opts: LoadOptions,
    context: unknown,
    limits?: FetchContext['limits'],
  ): Invocation {
    let settle!: (f: ScriptFailure) => void;
    const inv: Invocation = {
      id: randomUUID(),
      tenant,
      scriptId,
      context,
      opts,
      instance: inst,
      subrequests: 0,
      cpuMs: limits?.cpuMs ?? opts.limits?.cpuMs ?? this.defaultCpuMs,
      subrequestLimit: limits?.subrequests ?? opts.limits?.subrequests,
      failed: new Promise<ScriptFailure>((r) => (settle = r)),
      fail: (f) => {
        if (inv.failure) return;
        inv.failure = { ...f, tenant, scriptId };
        settle(inv.failure);
      },
      done: false,
      lastActive: performance.now(),
    };
    const wall = opts.limits?.wallMs ?? this.wallMs;
    inv.timer = setTimeout(
      () => inv.fail({ kind: 'timeout', message: `no response within ${wall} ms` }),
      wall,
    );
    inv.timer.unref();
    this.invocations.set(inv.id, inv);
    inst.inflight.add(inv);
    inst.lastUsed = Date.now();
    this.startWatchdog();
    return inv;
  }

  private failInvocation(
    inv: Invocation,
    f: Omit<ScriptFailure, 'tenant' | 'scriptId'>,
  ): ScriptFailure {
    inv.fail(f);
    return inv.failure!;
  }

  private end(inv: Invocation): void {
    if (inv.done) return;
    inv.done = true;
    clearTimeout(inv.timer);
    this.invocations.delete(inv.id);
    const inst = inv.instance;
    inst.inflight.delete(inv);
    if (inst.retired && inst.inflight.size === 0) void this.dispose(inst);
  }

  // ---------------------------------------------------------------- outbound and bindings

  private invocationFor(
    inst: Instance,
    scriptId: string,
    req: IncomingMessage,
  ): Invocation | undefined {
    const id = req.headers[H.invocation];
    const inv = typeof id === 'string' ? this.invocations.get(id) : undefined;
    if (!inv || inv.done || inv.failure || inv.tenant !== inst.tenant || inv.scriptId !== scriptId)
      return undefined;
    inv.lastActive = performance.now();
    return inv;
  }

  private async serveOutbound(
    inst: Instance,
    scriptId: string,
    opts: LoadOptions,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    inst.progress = true;
    const inv = this.invocationFor(inst, scriptId, req);
    if (!inv)
      return refuse(res, 'fetch() is only available while the script is handling a request');
    // The prelude counts every fetch() inside the invocation (the direct ones never reach Node)
    // and sends the count with the instance key; without the key the call did not come from it.
    if (req.headers[H.key] !== inst.key)
      return refuse(res, "outbound calls are only accepted from the runtime's fetch()");
    const count = Number(req.headers[H.count]);
    inv.subrequests =
      Number.isSafeInteger(count) && count > inv.subrequests ? count : inv.subrequests + 1;
    const limit = inv.subrequestLimit;
    if (limit !== undefined && inv.subrequests > limit) {
      const message = `Too many subrequests: the limit is ${limit} per request`;
      inv.fail({ kind: 'subrequests', message });
      return refuse(res, message);
    }
    const request = toRequest(req);
    const info: InvocationInfo = {
      tenant: inv.tenant,
      scriptId,
      context: inv.context,
      guest: inv.guest,
      subrequests: inv.subrequests,
    };
    try {
      const response = opts.outbound
        ? await opts.outbound(request, info)
        : await networkFetch(request);
      inst.progress = true;
      if (inv) inv.lastActive = performance.now();
      await writeResponse(response, res);
    } catch (err) {
      if (err instanceof ScriptLimitError)
        inv.fail({ kind: err.kind, code: err.code, message: err.message });
      refuse(res, (err as Error).message || 'subrequest failed');
    }
  }

  private async serveBinding(
    inst: Instance,
    scriptId: string,
    handler: NodeBinding,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    inst.progress = true;
    const id = req.headers[H.invocation];
    const inv = this.invocationFor(inst, scriptId, req);
    const info: InvocationInfo = {
      tenant: inst.tenant,
      scriptId,
      context: inv?.context,
      guest: inv?.guest,
    };
    if (typeof id === 'string' && !inv)
      return refuse(res, 'the request this binding call belongs to has ended');
    try {
      // A binding that can answer on the raw request does so (no Fetch API objects in Node);
      // it declines before touching the body when it cannot.
      if (handler.serve && (await handler.serve(req, res, info))) {
        inst.progress = true;
        if (inv) inv.lastActive = performance.now();
        return;
      }
      const response = await handler.fetch(toRequest(req), info);
      inst.progress = true;
      if (inv) inv.lastActive = performance.now();
      await writeResponse(response, res);
    } catch (err) {
      if (err instanceof ScriptLimitError && inv)
        inv.fail({ kind: err.kind, code: err.code, message: err.message });
      refuse(res, (err as Error).message || 'binding call failed');
    }
  }

  // ---------------------------------------------------------------- watchdog

  private startWatchdog(): void {
    if (this.watchdog) return;
    this.watchdog = setInterval(() => this.sample(), this.tickMs);
    this.watchdog.unref();
  }

  private sample(): void {
    const busy = new Set<Instance>();
    for (const inv of this.invocations.values())
      if (!inv.instance.dead && inv.instance.pid) busy.add(inv.instance);
    if (busy.size === 0) {
      clearInterval(this.watchdog);
      this.watchdog = undefined;
      for (const t of this.tenants.values()) if (t.instance) t.instance.lastCpu = undefined;
      return;
    }
    const readings: [Instance, { cpu: number; runnable: number; total: number }][] = [];
    for (const inst of busy) {
      const reading = schedNs(inst.pid!);
      if (reading !== undefined) readings.push([inst, reading]);
    }
    const at = performance.now();
    // Judge after this turn's I/O callbacks have run: a response or subrequest that arrived while
    // this process was busy is progress, not a stall.
    setImmediate(() => this.judge(readings, at));
  }

  private judge(
    readings: [Instance, { cpu: number; runnable: number; total: number }][],
    at: number,
  ): void {
    for (const [inst, { cpu, runnable, total }] of readings) {
      if (inst.dead) continue;
      const wallNs = (at - inst.lastSampleAt) * 1e6;
      const used = inst.lastCpu === undefined ? 0 : cpu - inst.lastCpu;
      const wanted = runnable - inst.lastRunnable;
      // Progress, or a mostly idle interval (the runtime was sleeping, neither running nor waiting
      // for a core), ends a streak. Only CPU time really used counts toward the limit.
      // The kernel updates these counters at its tick (a few ms), so one short interval can read
      // zero for a thread that spins; idleness is judged over several intervals.
      // The process's total CPU time (kept current for a spinning thread) must stand still too.
      inst.windowWanted += wanted;
      inst.windowWall += wallNs;
      let idle = false;
      if (inst.windowWall >= IDLE_WINDOW_MS * 1e6) {
        idle = inst.windowWanted < inst.windowWall * IDLE_SHARE && total === inst.windowTotal;
        inst.windowWanted = 0;
        inst.windowWall = 0;
        inst.windowTotal = total;
      }
      if (inst.lastCpu === undefined || inst.progress || idle) {
        inst.busyNs = 0;
        if (inst.lastCpu === undefined || inst.progress) inst.windowWanted = inst.windowWall = 0;
      } else inst.busyNs += used;
      inst.lastSampleAt = at;
      inst.lastCpu = cpu;
      inst.lastRunnable = runnable;
      inst.progress = false;
      let cpuMs = 0;
      let memMb = 0;
      const pool = this.isPool(inst);
      for (const inv of pool ? this.suspects(inst) : inst.inflight) {
        cpuMs = Math.max(cpuMs, inv.cpuMs);
        memMb = Math.max(memMb, inv.opts.limits?.memoryMb ?? 0);
      }
      if (inst.inflight.size === 0) continue;
      if (inst.busyNs > cpuMs * 1e6 + this.cpuSlackNs) {
        this.kill(inst, 'cpu', `Exceeded the CPU time limit (${cpuMs} ms)`);
        continue;
      }
      // A pool's resident set grows with the guests its loader holds: not a guest's overrun.
      if (inst.baselineRss !== undefined && !pool) {
        const rss = rssBytes(inst.pid!);
        const limit = Math.max(memMb * 1024 * 1024, this.memoryFloor);
        if (rss !== undefined && rss - inst.baselineRss > limit)
          this.kill(
            inst,
            'memory',
            `Exceeded the memory limit (${Math.round(limit / 1048576)} MB)`,
          );
      }
    }
  }

  /** Disposes a runaway instance; its in-flight requests answer `kind`; the next request gets a fresh one. */
  private kill(inst: Instance, kind: 'cpu' | 'memory', message: string): void {
    const t = this.tenants.get(inst.tenant);
    this.log.warn(
      { tenant: inst.tenant, pid: inst.pid, kind, inflight: inst.inflight.size },
      `runtime instance stopped: ${message}`,
    );
    // In a pool only the invocations that could have held the CPU are failed with the overrun;
    // the others never ran and may be sent again.
    const suspects = this.isPool(inst) ? this.suspects(inst) : inst.inflight;
    for (const inv of inst.inflight) {
      if (suspects.has(inv)) inv.fail({ kind, message });
      else {
        inv.retriable = true;
        inv.fail({ kind: 'unavailable', message: 'the runtime instance was stopped' });
      }
    }
    void this.dispose(inst);
    if (t?.instance === inst) {
      t.instance = undefined;
      if (!this.closed && t.scripts.size > 0)
        this.running(t).catch((err: unknown) =>
          this.log.error({ err, tenant: t.name }, 'runtime instance restart failed'),
        );
    }
  }

  private isPool(inst: Instance): boolean {
    for (const o of inst.scripts.values()) if (o.loader) return true;
    return false;
  }

  /**
   * The in-flight invocation taken to hold a pool's only thread: the one silent the longest (a
   * request that arrives while the thread spins cannot have run, and is silent for less). One
   * that only waits on a timer while another spins would be taken instead: it fails, the other
   * is sent again and is the suspect on its own next time.
   */
  private suspects(inst: Instance): Set<Invocation> {
    let first: Invocation | undefined;
    for (const inv of inst.inflight) if (!first || inv.lastActive < first.lastActive) first = inv;
    return new Set(first ? [first] : []);
  }

  // ---------------------------------------------------------------- guests

  async checkGuest(tenant: string, scriptId: string, guest: Guest): Promise<void> {
    checkOptions(guest.opts);
    const t = this.tenants.get(tenant);
    if (!t?.scripts.get(scriptId)?.loader)
      throw new Error(`${scriptId} of ${tenant} is not a pool script`);
    this.guests.set(guest.id, guest.opts);
    const inst = await this.running(t);
    const url = inst.urls.get(scriptId);
    if (!url) throw new Error('the pool script is being replaced');
    const res = await this.send(
      url,
      'GET',
      {
        [H.key]: inst.key,
        [GUEST_HEADER]: guest.id,
        [GUEST_PROBE_HEADER]: '1',
        host: 'probe',
        'content-length': '0',
      },
      undefined,
      {},
    );
    const text = await new Promise<string>((resolve) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
      res.on('error', () => resolve(''));
    });
    if (res.statusCode === 204) return;
    this.guests.delete(guest.id);
    if (res.statusCode !== 422) throw new Error(`the pool answered ${res.statusCode}: ${text}`);
    // "Failed to start Worker:\nUncaught SyntaxError: …\n  at index.js:3:9"
    const m = /(?:Uncaught )?([^\n]*?(?:Error|Exception)[^\n]*)(?:\n\s+at ([^\n]+))?/.exec(
      text.replace(/^Failed to start Worker:\s*/, ''),
    );
    if (m) throw new ScriptError(m[1].trim(), m[2]?.trim().replace(/^\(|\)$/g, ''), guest.id);
    throw new ScriptError(text.trim() || 'the script did not start', undefined, guest.id);
  }

  dropGuest(id: string): void {
    this.guests.delete(id);
  }

  /** A pool script asks for a guest's code (its loader does not hold it). */
  private serveGuestCode(inst: Instance, req: IncomingMessage, res: ServerResponse): void {
    if (req.headers[H.key] !== inst.key) return refuse(res, 'not the runtime');
    const id = req.headers[GUEST_HEADER];
    const opts = typeof id === 'string' ? this.guests.get(id) : undefined;
    if (!opts) {
      res.writeHead(404).end();
      return;
    }
    const main = opts.modules.find((m) => m.name === opts.mainModule)!;
    const flags = [...(opts.compatibilityFlags ?? [])];
    if (!flags.some((f) => f === 'nodejs_compat' || f === 'nodejs_als')) flags.push('nodejs_als');
    const env: Record<string, unknown> = {};
    const nodeBindings: string[] = [];
    for (const [name, b] of Object.entries(opts.bindings ?? {})) {
      if (b.type === 'service') nodeBindings.push(name);
      else env[name] = b.value;
    }
    env[CONFIG_BINDING] = { nodeBindings };
    const modules = [
      {
        name: WRAPPER_MODULE,
        type: 'esm',
        content: wrapperSource(opts.mainModule, main.type === 'esm'),
      },
      { name: PRELUDE_MODULE, type: 'esm', content: preludeSource(inst.key) },
      ...opts.modules.map((m) => ({
        name: m.name,
        type: m.type,
        content:
          typeof m.content === 'string' && m.type !== 'data' && m.type !== 'wasm'
            ? m.content
            : Buffer.from(m.content).toString('base64'),
      })),
    ];
    const body = JSON.stringify({
      compatibilityDate: opts.compatibilityDate ?? this.compatibilityDate,
      compatibilityFlags: flags,
      mainModule: WRAPPER_MODULE,
      modules,
      env,
      nodeBindings,
    });
    res.writeHead(200, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
    });
    res.end(body);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.watchdog);
    this.watchdog = undefined;
    const all: Instance[] = [];
    for (const t of this.tenants.values()) {
      await t.chain.catch(() => {});
      await t.starting?.catch(() => {});
      if (t.instance) all.push(t.instance);
    }
    for (const inv of this.invocations.values()) {
      inv.fail({ kind: 'unavailable', message: 'the script host is shutting down' });
      all.push(inv.instance);
    }
    await Promise.all([...new Set(all)].map((i) => this.dispose(i)));
    this.agent.destroy();
    this.tenants.clear();
    this.invocations.clear();
  }
}

// ---------------------------------------------------------------- helpers

/** The worker whose module is the net binding: one connection per origin address, the key. */
function netWorker(inst: Instance): WorkerOptions {
  const serviceBindings: Record<string, { external: { address: string; http: object } }> = {};
  for (const [address, i] of inst.origins)
    serviceBindings[netOriginBinding(i)] = { external: { address, http: {} } };
  return {
    name: NET_WORKER,
    modulesRoot: MODULE_ROOT,
    modules: [
      {
        type: 'ESModule',
        path: `${MODULE_ROOT}/__outpost_net.js`,
        contents: netSource(inst.origins.size),
      },
    ],
    bindings: { [NET_KEY_BINDING]: inst.key },
    serviceBindings,
  } as WorkerOptions;
}

const FAILURE_KINDS = new Set<ScriptFailureKind>(['subrequests', 'limit']);

/** Request headers never passed to the runtime from a caller (they are the host's, or per hop). */
const INTERNAL_REQUEST_HEADERS = new Set([
  H.cfBlob.toLowerCase(),
  'connection',
  'keep-alive',
  'transfer-encoding',
]);
/** Response headers that describe the hop from the runtime, not the script's answer. */
const HOP_BY_HOP_RESPONSE = new Set(['connection', 'keep-alive', 'transfer-encoding']);

/** A small JSON body (the wrapper's exception report); `{}` if it is not JSON. */
function readJson(res: IncomingMessage): Promise<unknown> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      } catch {
        resolve({});
      }
    });
    res.on('error', () => resolve({}));
  });
}

/** A limit reported by the prelude (`H.failure`); anything unexpected counts as an exception. */
function parseFailure(text: string): Omit<ScriptFailure, 'tenant' | 'scriptId'> {
  try {
    const f = JSON.parse(text) as { kind?: string; code?: number; message?: string };
    if (FAILURE_KINDS.has(f.kind as ScriptFailureKind) && typeof f.message === 'string')
      return {
        kind: f.kind as ScriptFailureKind,
        code: typeof f.code === 'number' ? f.code : undefined,
        message: f.message,
      };
  } catch {
    // fall through
  }
  return { kind: 'exception', message: 'the runtime reported a malformed failure' };
}

function closeServers(inst: Instance): void {
  for (const server of inst.servers) {
    server.close();
    server.closeAllConnections();
  }
}

function checkOptions(opts: LoadOptions): void {
  const names = new Set<string>();
  for (const m of opts.modules) {
    if (
      !m.name ||
      m.name.startsWith('/') ||
      m.name.includes('..') ||
      m.name.startsWith('__outpost')
    ) {
      throw new ScriptError(`invalid module name ${JSON.stringify(m.name)}`);
    }
    if (names.has(m.name)) throw new ScriptError(`module ${m.name} is listed twice`);
    if (!(m.type in MODULE_TYPES))
      throw new ScriptError(`module ${m.name}: unknown type ${String(m.type)}`);
    names.add(m.name);
  }
  const main = opts.modules.find((m) => m.name === opts.mainModule);
  if (!main) throw new ScriptError(`main module ${opts.mainModule} is not among the modules`);
  if (main.type !== 'esm' && main.type !== 'commonjs')
    throw new ScriptError(`main module ${opts.mainModule} must be JavaScript`);
  for (const name of Object.keys(opts.bindings ?? {})) {
    if (!/^[A-Za-z_$][\w$]*$/.test(name) || name === CONFIG_BINDING)
      throw new ScriptError(`invalid binding name ${name}`);
  }
}

/** Turns the runtime's startup output into a ScriptError naming the script and location. */
function startupError(output: string, names: Map<string, string>, err: Error): ScriptError {
  const byWorker = new Map([...names].map(([id, w]) => [w, id]));
  const m = /service core:user:([^:\s]+): (?:Uncaught )?([^\n]+)(?:\n\s+at ([^\n]+))?/.exec(output);
  if (m) {
    const location = m[3]?.trim().replace(/^\(|\)$/g, '');
    return new ScriptError(m[2].trim(), location, byWorker.get(m[1]));
  }
  const line = output.split('\n').find((l) => /error/i.test(l));
  return new ScriptError(line?.trim() || err.message);
}

/** Builds a Request from the runtime's HTTP request to a Node handler. */
function toRequest(req: IncomingMessage): Request {
  const headers = new Headers();
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i].toLowerCase();
    if (
      name.startsWith('x-outpost-rt-') ||
      name === 'host' ||
      name === 'connection' ||
      name === 'transfer-encoding' ||
      name === 'keep-alive'
    )
      continue;
    headers.append(req.rawHeaders[i], req.rawHeaders[i + 1]);
  }
  // The script's URL (with its scheme) rides in a header; when the runtime follows a redirect it
  // keeps that header, so it only counts when host and path still agree.
  const full = req.headers[H.url];
  const hostPath = `${req.headers.host ?? 'localhost'}${req.url ?? '/'}`;
  let url = `http://${hostPath}`;
  if (typeof full === 'string') {
    const parsed = URL.canParse(full) ? new URL(full) : undefined;
    if (parsed && parsed.host + parsed.pathname + parsed.search === hostPath) url = full;
    else if (parsed) url = `${parsed.protocol}//${hostPath}`;
  }
  const method = req.method ?? 'GET';
  const hasBody = method !== 'GET' && method !== 'HEAD';
  const init: RequestInit & { duplex?: 'half' } = { method, headers, redirect: 'manual' };
  if (hasBody) {
    init.body = Readable.toWeb(req) as ReadableStream<Uint8Array>;
    init.duplex = 'half';
  }
  return new Request(url, init);
}

/**
 * The default outbound: the network, redirects left to the runtime (each hop is a subrequest),
 * the body re-described after Node's fetch decoded it. Exported for outbound handlers.
 */
export async function networkFetch(req: Request): Promise<Response> {
  const res = await fetch(req, { redirect: 'manual' });
  // fetch() hands back a decoded body; the encoding headers no longer describe it.
  if (!res.headers.has('content-encoding')) return res;
  const headers = new Headers(res.headers);
  headers.delete('content-encoding');
  headers.delete('content-length');
  return new Response(res.body, { status: res.status, statusText: res.statusText, headers });
}

/** A Response from a Node HTTP response: small bodies of known length read whole, others streamed. */
export function responseOf(
  res: IncomingMessage,
  nullBody: boolean,
  done?: () => void,
): Promise<Response> {
  const headers = new Headers();
  for (let i = 0; i < res.rawHeaders.length; i += 2)
    headers.append(res.rawHeaders[i], res.rawHeaders[i + 1]);
  const init = { status: res.statusCode ?? 502, statusText: res.statusMessage, headers };
  if (nullBody) {
    res.resume();
    done?.();
    return Promise.resolve(new Response(null, init));
  }
  const length = Number(res.headers['content-length']);
  if (Number.isFinite(length) && length <= BUFFER_LIMIT) {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        done?.();
        resolve(
          new Response(
            (chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)) as Uint8Array<ArrayBuffer>,
            init,
          ),
        );
      });
      res.on('error', (err) => {
        done?.();
        reject(err);
      });
    });
  }
  if (done) res.once('close', done);
  return Promise.resolve(new Response(Readable.toWeb(res) as ReadableStream<Uint8Array>, init));
}

/** Writes a Response to a Node HTTP response: small bodies of known length whole, others streamed. */
export async function writeResponse(
  response: Response,
  res: ServerResponse,
  extra?: Record<string, string>,
): Promise<void> {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of response.headers) {
    if (
      name === 'set-cookie' ||
      name === 'connection' ||
      name === 'keep-alive' ||
      name === 'transfer-encoding'
    )
      continue;
    headers[name] = value;
  }
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) headers['set-cookie'] = cookies;
  if (extra) Object.assign(headers, extra);
  if (res.headersSent || res.destroyed) {
    void response.body?.cancel().catch(() => {});
    return;
  }
  const length = Number(response.headers.get('content-length') ?? NaN);
  if (!response.body || (Number.isFinite(length) && length <= BUFFER_LIMIT)) {
    const body = response.body ? Buffer.from(await response.arrayBuffer()) : undefined;
    res.writeHead(response.status, response.statusText || undefined, headers);
    res.end(body);
    return;
  }
  res.writeHead(response.status, response.statusText || undefined, headers);
  const body = Readable.fromWeb(
    response.body as import('node:stream/web').ReadableStream<Uint8Array>,
  );
  await new Promise<void>((resolve) => {
    body.on('error', (err) => {
      res.destroy(err);
      resolve();
    });
    res.on('close', () => {
      body.destroy();
      resolve();
    });
    body.pipe(res);
  });
}

/** Answers a refused outbound call; the prelude turns it into an exception in the script. */
function refuse(res: ServerResponse, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(502, { [H.outboundError]: encodeURIComponent(message), 'content-length': '0' });
  res.end();
}

/**
 * Removes Miniflare's process-wide SIGINT/SIGTERM handlers (they call `process.exit` before the
 * server's graceful stop could run). Its `exit` hook stays: it still kills workerd on exit.
 */
function releaseSignalHandlers(): void {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    for (const listener of process.listeners(signal)) {
      if (listener.name === 'onSignalInt' || listener.name === 'onSignalTerm')
        process.removeListener(signal, listener);
    }
  }
}
