/**
 * Running snippets: turns stored snippets into runtime scripts (one runtime tenant per zone),
 * and runs the matching snippets of a request as a chain. Snippet i's `fetch()` to the request's
 * own host is its `fetch(request)`: it goes to snippet i+1, and the last one's to the origin
 * through the edge (`OriginFetcher`, after origin rules). A second such call is error 1201. Any
 * other `fetch()` is a subrequest to the network. Every `fetch()` counts toward the subrequest
 * limit (1202). CPU and memory overruns (1203, 1204) come from the runtime's watchdog.
 */
import { Readable } from 'node:stream';
import type { Logger } from '../../core/log.ts';
import {
  directOrigin,
  escapeHtml,
  type EdgeRequest,
  type OriginFetcher,
} from '../../edge/index.ts';
import {
  FAILURE_HEADER,
  networkFetch,
  ScriptError,
  ScriptLimitError,
  type InvocationInfo,
  type LoadOptions,
  type ScriptFailure,
  type ScriptHost,
  writeResponse,
} from '../../runtime/index.ts';
import { CF_OVERRIDE_HEADER, type Cf } from './cf.ts';
import type { StoredSnippet } from './store.ts';

export const ENTRY_MODULE = '__snippet_entry.js';
const ONCE_MESSAGE = 'fetch(request) was called more than once for the same request';
const ONCE = { code: 1201, message: ONCE_MESSAGE };
export const GUARD_MODULE = '__snippet_guard.js';

/** Platform error codes of snippet execution. */
export const SNIPPET_ERRORS = {
  1101: { status: 500, title: 'Snippet threw an exception' },
  1201: { status: 500, title: 'fetch(request) called more than once' },
  1202: { status: 500, title: 'Subrequest limit exceeded' },
  1203: { status: 503, title: 'CPU time limit exceeded' },
  1204: { status: 503, title: 'Memory limit exceeded' },
  1205: { status: 503, title: 'Snippet not available yet' },
} as const;
type SnippetErrorCode = keyof typeof SNIPPET_ERRORS;

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);
/** Visitor request headers a snippet never sees. */
const VISITOR_DROPPED: ReadonlySet<string> = new Set([...HOP_BY_HOP, CF_OVERRIDE_HEADER]);

export interface EngineLimits {
  cpuMs: number;
  subrequests: number;
  memoryMb: number;
  wallMs: number;
}

/** One link of a chain: what the outbound handler of snippet `index` needs. */
interface Link {
  chain: Chain;
  index: number;
  originCalls: number;
}

interface Chain {
  er: EdgeRequest;
  zoneId: string;
  names: string[];
  cf: Cf;
  /** The first failure anywhere in the chain; it becomes the answer. */
  failure?: Response;
}

function guardSource(): string {
  return `const unavailable = (what) => () => { throw new Error(what + ' is not available in snippets'); };
const hide = (name, what) => Object.defineProperty(globalThis, name, { get: unavailable(what), configurable: true });
hide('caches', 'The Cache API (caches)');
hide('WebSocketPair', 'WebSocket (WebSocketPair)');
hide('WebSocket', 'WebSocket');
hide('HTMLRewriter', 'HTML rewriting (HTMLRewriter)');
Object.defineProperty(globalThis, 'addEventListener', {
  value: () => { throw new Error('addEventListener is not supported in snippets; use export default { async fetch(request) { ... } }'); },
  configurable: true,
});
`;
}

function entrySource(main: string): string {
  return `import './${GUARD_MODULE}';
import * as snippet from ${JSON.stringify('./' + main)};
const handler = snippet.default;
if (handler === null || typeof handler !== 'object' || typeof handler.fetch !== 'function') {
  throw new Error('A snippet needs a default export with a fetch(request) handler: export default { async fetch(request) { ... } }');
}
const NO_BINDINGS = new Proxy({}, {
  get(_, key) {
    if (typeof key === 'symbol' || key === 'then' || key === 'toJSON') return undefined;
    throw new Error('env.' + String(key) + ': bindings (key-value, databases, object storage, stateful objects) are not available in snippets');
  },
});
export default { fetch: (request, env, ctx) => handler.fetch(request, NO_BINDINGS, ctx) };
`;
}

export class SnippetEngine {
  private readonly loading = new Map<string, Promise<void>>();
  /** Names loaded in the runtime, per zone. */
  private readonly deployed = new Map<string, Set<string>>();

  constructor(
    private readonly host: ScriptHost,
    private readonly origin: OriginFetcher,
    private readonly limits: EngineLimits,
    private readonly log: Logger,
    private readonly load: (zoneId: string, name: string) => Promise<StoredSnippet | undefined>,
  ) {}

  static tenant(zoneId: string): string {
    return `snippets:${zoneId}`;
  }

  /** Loads (or replaces) a snippet in the runtime; throws ScriptError when it does not start. */
  async deploy(
    zoneId: string,
    s: Pick<StoredSnippet, 'snippet_name' | 'main_module' | 'files'>,
  ): Promise<void> {
    await this.host.load(SnippetEngine.tenant(zoneId), s.snippet_name, this.options(s));
    let names = this.deployed.get(zoneId);
    if (!names) this.deployed.set(zoneId, (names = new Set()));
    names.add(s.snippet_name);
  }

  async undeploy(zoneId: string, name: string): Promise<void> {
    this.deployed.get(zoneId)?.delete(name);
    await this.host.unload(SnippetEngine.tenant(zoneId), name);
  }

  /** Unloads every snippet of a deleted zone. */
  async undeployZone(zoneId: string): Promise<void> {
    const names = [...(this.deployed.get(zoneId) ?? [])];
    this.deployed.delete(zoneId);
    await Promise.all(names.map((n) => this.host.unload(SnippetEngine.tenant(zoneId), n)));
  }

  private options(s: Pick<StoredSnippet, 'main_module' | 'files'>): LoadOptions {
    const main = s.files.find((f) => f.name === s.main_module);
    if (!main) throw new ScriptError(`main module ${s.main_module} is not among the files`);
    return {
      modules: [
        { name: ENTRY_MODULE, type: 'esm', content: entrySource(s.main_module) },
        { name: GUARD_MODULE, type: 'esm', content: guardSource() },
        {
          name: s.main_module,
          type: 'esm',
          content: Buffer.from(main.content, 'base64').toString('utf8'),
        },
      ],
      mainModule: ENTRY_MODULE,
      compatibilityDate: '2025-01-01',
      limits: {
        cpuMs: this.limits.cpuMs,
        subrequests: this.limits.subrequests,
        memoryMb: this.limits.memoryMb,
        wallMs: this.limits.wallMs,
      },
      outbound: (req, info) => this.outbound(req, info),
      errorResponse: (f) => failureResponse(f),
    };
  }

  /** Makes sure a stored snippet is loaded (after a restart, or an eviction of its zone). */
  private async ensure(zoneId: string, name: string): Promise<boolean> {
    const tenant = SnippetEngine.tenant(zoneId);
    if (this.host.has(tenant, name)) return true;
    const key = `${zoneId}/${name}`;
    let p = this.loading.get(key);
    if (!p) {
      p = (async () => {
        const stored = await this.load(zoneId, name);
        if (stored) await this.deploy(zoneId, stored);
      })().finally(() => this.loading.delete(key));
      this.loading.set(key, p);
    }
    try {
      await p;
    } catch (err) {
      this.log.error({ err, zone: zoneId, snippet: name }, 'snippet did not load');
      return false;
    }
    return this.host.has(tenant, name);
  }

  /** Runs `names` in order on the request and answers it. */
  async run(er: EdgeRequest, names: string[], cf: Cf): Promise<void> {
    const res = er.res!;
    const chain: Chain = { er, zoneId: er.route.zoneId, names, cf };
    // One snippet (the common case): the visitor's socket is piped to the runtime and back.
    if (names.length === 1 && (await this.ensure(chain.zoneId, names[0]))) {
      const link: Link = { chain, index: 0, originCalls: 0 };
      try {
        await this.host.serve(SnippetEngine.tenant(chain.zoneId), names[0], er.req, res, {
          url: visitorUrl(er),
          dropHeaders: VISITOR_DROPPED,
          responseHeaders: { 'cf-ray': `${er.rayId}-OUT` },
          cf,
          context: link,
          origin: directOrigin(er, ONCE),
        });
      } catch (err) {
        this.log.error({ err, ray: er.rayId }, 'snippet failed');
        if (!res.headersSent) await writeResponse(errorPage(1205, er, (err as Error).message), res);
      }
      return;
    }
    let response: Response;
    try {
      response = await this.step(chain, 0, visitorRequest(er));
    } catch (err) {
      this.log.error({ err, ray: er.rayId }, 'snippet chain failed');
      response = errorPage(1205, er, (err as Error).message);
    }
    if (chain.failure && chain.failure !== response) {
      void response.body?.cancel().catch(() => {});
      response = chain.failure;
    }
    // The failure marker is for this host only.
    if (response.headers.has(FAILURE_HEADER)) {
      const headers = new Headers(response.headers);
      headers.delete(FAILURE_HEADER);
      response = new Response(response.body, {
        status: response.status,
        statusText: response.statusText,
        headers,
      });
    }
    await writeResponse(response, res, { 'cf-ray': `${er.rayId}-OUT` });
  }

  /** Snippet `index` on `request`, or the origin after the last one. */
  private async step(chain: Chain, index: number, request: Request): Promise<Response> {
    if (index >= chain.names.length) return this.origin.fetch(chain.er, request);
    const name = chain.names[index];
    if (!(await this.ensure(chain.zoneId, name))) {
      const r = errorPage(1205, chain.er, `snippet ${name} is not available`);
      chain.failure ??= r;
      return r;
    }
    const link: Link = { chain, index, originCalls: 0 };
    const last = index === chain.names.length - 1;
    const response = await this.host.fetch(SnippetEngine.tenant(chain.zoneId), name, request, {
      cf: chain.cf,
      context: link,
      origin: last ? directOrigin(chain.er, ONCE) : undefined,
    });
    // A failure anywhere answers the visitor; an inner one is also what the outer snippet's
    // fetch() sees, so keep a copy of it.
    if (response.headers.has(FAILURE_HEADER) && !chain.failure)
      chain.failure = index === 0 ? response : response.clone();
    return response;
  }

  private async outbound(req: Request, info: InvocationInfo): Promise<Response> {
    const link = info.context as Link | undefined;
    if (!link) return networkFetch(req);
    const { er } = link.chain;
    if (new URL(req.url).hostname === er.host) {
      link.originCalls++;
      if (link.originCalls > 1) throw new ScriptLimitError('limit', ONCE_MESSAGE, 1201);
      return this.step(link.chain, link.index + 1, req);
    }
    return networkFetch(req);
  }
}

/** The visitor's request as a Fetch API Request (its body streamed, not buffered). */
function visitorRequest(er: EdgeRequest): Request {
  const { req } = er;
  const headers = new Headers();
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i].toLowerCase();
    if (HOP_BY_HOP.has(name) || name === CF_OVERRIDE_HEADER) continue;
    headers.append(req.rawHeaders[i], req.rawHeaders[i + 1]);
  }
  const method = req.method ?? 'GET';
  const hasBody = method !== 'GET' && method !== 'HEAD';
  const init: RequestInit & { duplex?: 'half' } = { method, headers, redirect: 'manual' };
  if (hasBody) {
    init.body = Readable.toWeb(req) as ReadableStream<Uint8Array>;
    init.duplex = 'half';
  }
  return new Request(visitorUrl(er), init);
}

function visitorUrl(er: EdgeRequest): string {
  return `${er.scheme}://${er.req.headers.host ?? er.host}${er.req.url ?? '/'}`;
}

function failureResponse(f: ScriptFailure): Response {
  const code: SnippetErrorCode =
    f.code !== undefined && f.code in SNIPPET_ERRORS
      ? (f.code as SnippetErrorCode)
      : f.kind === 'cpu'
        ? 1203
        : f.kind === 'memory'
          ? 1204
          : f.kind === 'subrequests'
            ? 1202
            : f.kind === 'unavailable'
              ? 1205
              : 1101;
  const detail = f.location ? `${f.message} (${f.location})` : f.message;
  return page(code, detail, { [FAILURE_HEADER]: f.kind });
}

function errorPage(code: SnippetErrorCode, er: EdgeRequest, detail: string): Response {
  return page(code, detail, { 'cf-ray': `${er.rayId}-OUT` });
}

function page(code: SnippetErrorCode, detail: string, headers: Record<string, string>): Response {
  const spec = SNIPPET_ERRORS[code];
  const body = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Error ${code}: ${escapeHtml(spec.title)}</title></head>
<body>
<h1>Error ${code}</h1>
<h2>${escapeHtml(spec.title)}</h2>
<p>${escapeHtml(detail)}</p>
<p>Served by Outpost</p>
</body></html>
`;
  return new Response(body, {
    status: spec.status,
    statusText: spec.title,
    headers: {
      'content-type': 'text/html; charset=utf-8',
      'cache-control': 'no-store',
      'x-outpost-error-code': String(code),
      ...headers,
    },
  });
}
