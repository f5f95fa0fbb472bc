/**
 * Scripts serving edge traffic. Three ways in:
 *
 * - a zone route (`example.com/api/*` → script): the edge phase `workers_routes` runs after every
 *   request phase (snippets included) and answers with the script in place of the origin; the
 *   script's `fetch()` to the request's own host name reaches the zone's origin (`OriginFetcher`,
 *   after origin rules), as on the platform; a route without a script turns scripts off;
 * - a custom domain (a host name bound to a script, no DNS record needed): the script is the
 *   origin, so a `fetch()` to its own host goes to the network like any other subrequest;
 * - `<script>.<account subdomain>.<suffix>` for scripts enabled on the account's subdomain.
 *
 * Custom domains and subdomain names are claimed before zone routing (a `HostRouter`) and answered
 * by an origin handler for the reserved origin name `ORIGIN_NAME`, so custom domains still pass
 * through their zone's request phases. A script failure answers the platform's error page (1101
 * for an exception, 1102 for an exceeded resource limit).
 */
import type { Logger } from '../../core/log.ts';
import {
  directOrigin,
  escapeHtml,
  type EdgeRequest,
  type HostRoute,
  type OriginFetcher,
} from '../../edge/index.ts';
import { networkFetch, writeResponse, type InvocationInfo } from '../../runtime/index.ts';
import { RuntimeUnavailable, scriptIdOf, type ScriptRegistry } from './registry.ts';
import { matchPattern, type TriggerViews } from './triggers.ts';

/** Origin name the host router hands to the origin handler (`.invalid` never resolves). */
export const ORIGIN_NAME = 'script.outpost.invalid';
export const ROUTES_PHASE = 'workers_routes';
/** After every request phase the platform runs before a route's script. */
export const ROUTES_PHASE_ORDER = 180;

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

export const SCRIPT_ERRORS = {
  1101: { status: 500, title: 'Worker threw exception' },
  1102: { status: 503, title: 'Worker exceeded resource limits' },
  1042: { status: 503, title: 'Worker not available' },
} as const;
type ScriptErrorCode = keyof typeof SCRIPT_ERRORS;

/** What the outbound handler learns about the invocation it serves. */
export interface EdgeInvocation {
  er: EdgeRequest;
  /** A route's script reaches the origin by fetching its own host; others have no origin. */
  origin: boolean;
}

export class WorkersEdge {
  constructor(
    private readonly registry: ScriptRegistry,
    private readonly views: TriggerViews,
    private readonly origin: OriginFetcher,
    private readonly suffix: string,
    private readonly log: Logger,
  ) {}

  /** Claims custom domains and `<script>.<subdomain>.<suffix>` before zone routing. */
  routeHost(host: string): HostRoute | undefined {
    const domain = this.views.domain(host);
    if (domain) {
      return {
        route: {
          zoneId: domain.zoneId,
          zoneName: domain.zoneName,
          accountId: domain.accountId,
          recordName: host,
          recordType: 'CNAME',
          content: ORIGIN_NAME,
        },
        originHost: ORIGIN_NAME,
      };
    }
    if (!host.endsWith(`.${this.suffix}`)) return undefined;
    const labels = host.slice(0, -this.suffix.length - 1).split('.');
    if (labels.length !== 2) return undefined;
    const accountId = this.views.accountOfSubdomain(labels[1]);
    if (!accountId) return undefined;
    return {
      route: {
        zoneId: '',
        zoneName: this.suffix,
        accountId,
        recordName: host,
        recordType: 'CNAME',
        content: ORIGIN_NAME,
      },
      originHost: ORIGIN_NAME,
    };
  }

  /** The origin handler for hosts `routeHost` claimed. */
  async serveClaimed(er: EdgeRequest): Promise<void> {
    const domain = this.views.domain(er.host);
    if (domain) {
      await this.run(er, domain.accountId, domain.service, false);
      return;
    }
    const script = er.host.split('.')[0];
    if (!(await this.views.subdomainEnabled(er.route.accountId, script))) {
      await this.answer(er, notFound(er, `There is no script at ${er.host}`));
      return;
    }
    await this.run(er, er.route.accountId, script, false);
  }

  /** The `workers_routes` phase: a matching route's script answers the request. */
  async routePhase(er: EdgeRequest): Promise<'continue' | 'handled'> {
    if (!er.res || !er.route.zoneId || er.origin.host === ORIGIN_NAME) return 'continue';
    const routes = await this.views.zoneRoutes(er.route.zoneId);
    if (routes.length === 0) return 'continue';
    const url = er.req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const hit = routes.find((r) => matchPattern(r.match, er.scheme, er.host, path));
    if (!hit?.script) return 'continue';
    er.matchedRules.push(hit.id);
    await this.run(er, er.route.accountId, hit.script, true);
    return 'handled';
  }

  /** Runs `script` for the request and writes its answer. */
  private async run(
    er: EdgeRequest,
    accountId: string,
    script: string,
    origin: boolean,
  ): Promise<void> {
    if (er.upgrade) {
      er.upgrade.socket.end(
        `HTTP/1.1 501 Not Implemented\r\ncf-ray: ${er.rayId}-OUT\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`,
      );
      return;
    }
    try {
      if (!this.registry.isLive(accountId, script))
        await this.registry.ensureLoaded(accountId, script);
    } catch (err) {
      if (!(err instanceof RuntimeUnavailable))
        this.log.error({ err, ray: er.rayId, script }, 'script could not run');
      await this.answer(er, page(1042, er, `${script}: ${(err as Error).message}`));
      return;
    }
    const context: EdgeInvocation = { er, origin };
    // The visitor's socket is piped to the runtime and back; a route's same-host fetch() goes from
    // the runtime straight to an address origin (docs/runtime.md, "The hot path").
    await this.registry.requireHost().serve(accountId, scriptIdOf(script), er.req, er.res!, {
      url: `${er.scheme}://${er.req.headers.host ?? er.host}${er.req.url ?? '/'}`,
      dropHeaders: HOP_BY_HOP,
      headers: {
        'cf-connecting-ip': er.clientIp,
        'cf-ray': `${er.rayId}-OUT`,
        'cf-ipcountry': er.visitor.country,
      },
      responseHeaders: { 'cf-ray': `${er.rayId}-OUT` },
      cf: cfOf(er),
      context,
      origin: origin ? directOrigin(er) : undefined,
      errorResponse: (f) =>
        page(
          f.kind === 'cpu' || f.kind === 'memory' || f.kind === 'timeout' ? 1102 : 1101,
          er,
          f.kind === 'exception'
            ? 'The script threw an exception; see the server log for its message and location.'
            : `The script stopped: ${f.kind}.`,
        ),
    });
  }

  private answer(er: EdgeRequest, response: Response): Promise<void> {
    return writeResponse(response, er.res!, { 'cf-ray': `${er.rayId}-OUT` });
  }

  /** Every `fetch()` an edge-served script makes. */
  outbound(req: Request, info: InvocationInfo): Promise<Response> {
    const inv = info.context as EdgeInvocation | undefined;
    if (inv?.origin && new URL(req.url).hostname === inv.er.host)
      return this.origin.fetch(inv.er, req);
    return networkFetch(req);
  }
}

function cfOf(er: EdgeRequest): Record<string, unknown> {
  return {
    colo: 'LOC',
    country: er.visitor.country,
    continent: er.visitor.continent,
    city: er.visitor.city,
    asn: er.visitor.asn,
    timezone: 'UTC',
    httpProtocol: `HTTP/${er.req.httpVersion}`,
    clientAcceptEncoding: er.req.headers['accept-encoding'] ?? '',
  };
}

function notFound(er: EdgeRequest, detail: string): Response {
  return new Response(`${detail}\n`, {
    status: 404,
    headers: { 'content-type': 'text/plain; charset=utf-8', 'cf-ray': `${er.rayId}-OUT` },
  });
}

/** The platform's script error page. */
export function page(code: ScriptErrorCode, er: EdgeRequest, detail: string): Response {
  const spec = SCRIPT_ERRORS[code];
  const body = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Error ${code}: ${escapeHtml(spec.title)} | ${escapeHtml(er.host)}</title></head>
<body>
<h1>Error ${code}</h1>
<h2>${escapeHtml(spec.title)}</h2>
<p>${escapeHtml(detail)}</p>
<p>Ray ID: <code>${er.rayId}</code> &bull; Host: ${escapeHtml(er.host)} &bull; Served by Outpost</p>
</body></html>
`;
  return new Response(body, {
    status: spec.status,
    statusText: spec.title,
    headers: {
      'content-type': 'text/html; charset=utf-8',
      'cache-control': 'no-store',
      'x-outpost-error-code': String(code),
    },
  });
}
