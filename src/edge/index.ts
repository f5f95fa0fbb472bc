/**
 * @module edge — the HTTP edge for proxied traffic (spec 001 request handling):
 * host → zone → proxied DNS record → origin, the request phases in the platform's order, origin
 * handlers for names other areas own, and one `edge.request` event per request.
 * Extension points (service `edge`, see `EdgeService`): `addPhase({name, order, run})` with
 * `PHASE_ORDER[name]`, `addOriginHandler({matches, handle})`.
 * HTTPS with SNI, HTTP/2 by ALPN and client certificates on `--edge-tls-port` (see tls/listener.ts).
 * LIMITATIONS: plain HTTP/1.1 on the edge port itself;
 * origins are reached over plain HTTP on port 80 unless an origin rule says otherwise; visitor
 * geography is `XX` unless the test headers are enabled (`--edge-test-headers`).
 */
import { defineArea } from '../core/area.ts';
import { raw } from '../core/router.ts';
import { ZONE_INDEX, type ZoneIndex } from '../areas/dns/index.ts';
import type { Socket } from 'node:net';
import { EdgeServer, type PinnedRoute } from './server.ts';
import type { EdgeRequest, HostRouter, OriginHandler, Phase } from './types.ts';
import { accessRulesPhase, challenge, customRulesPhase, originRulesPhase } from './phases/security.ts';
import { EdgeTlsListener } from './tls/listener.ts';
import { tlsContextPhase } from './tls/phase.ts';

export { PHASE_ORDER, type PinnedRoute } from './server.ts';
export { tlsClientAuthOf } from './tls/phase.ts';
export { ruleContext } from './phases/security.ts';
export type {
  EdgeRequest,
  HostRoute,
  HostRouter,
  OriginHandler,
  Phase,
  RequestEvent,
  Route,
  OriginTarget,
} from './types.ts';
export { errorPage, escapeHtml, sendErrorPage, EDGE_ERRORS } from './error-pages.ts';
export {
  OriginFetcher,
  directOrigin,
  platformHeaders,
  type OriginFetcherOptions,
} from './origin-fetch.ts';

/** What other areas get from `ctx.services.require<EdgeService>(EDGE)`. */
export interface EdgeService {
  addPhase(phase: Phase): void;
  addOriginHandler(handler: OriginHandler): void;
  /** Claims host names before zone routing (see `HostRouter`). */
  addHostRouter(router: HostRouter): void;
  /** Runs HTTP from a socket accepted elsewhere through the edge, to a fixed zone and origin. */
  acceptSocket(socket: Socket, pin: PinnedRoute): void;
  /** Answers the challenge interstitial unless the visitor holds a clearance; true if answered. */
  challenge(er: EdgeRequest): boolean;
}
export const EDGE = 'edge';

export default defineArea({
  name: 'edge',
  mount(ctx) {
    const { config, events, log } = ctx;
    const index = ctx.services.require<ZoneIndex>(ZONE_INDEX);
    const edge = new EdgeServer({
      config,
      clock: ctx.clock,
      events,
      log: log.child({ area: 'edge' }),
      index,
    });
    edge.addPhase(accessRulesPhase(ctx.services, edge.challenger));
    edge.addPhase(customRulesPhase(ctx.services, edge.challenger));
    edge.addPhase(originRulesPhase(ctx.services));
    // The HTTPS listener (see tls/listener.ts) is on only when a TLS port is configured.
    const tls = config.edgeTlsPort === undefined ? undefined : new EdgeTlsListener(config.dataDir, index, edge, log.child({ area: 'edge-tls' }));
    if (tls) {
      edge.addPhase(tlsContextPhase((name) => tls.zoneChecksClients(name)));
      ctx.router.add(
        { method: 'GET', path: '/edge/tls/ca_certificate', operationId: 'outpost-edge-ca-certificate', summary: "The edge's local CA certificate (PEM), for clients to trust", auth: 'public', tags: ['edge'] },
        async () => raw(new Response(tls.ca.certificatePem(), { headers: { 'content-type': 'application/x-pem-file' } })),
      );
    }
    ctx.services.provide<EdgeService>(EDGE, {
      addPhase: (p) => edge.addPhase(p),
      addOriginHandler: (h) => edge.addOriginHandler(h),
      addHostRouter: (r) => edge.addHostRouter(r),
      acceptSocket: (socket, pin) => edge.acceptSocket(socket, pin),
      challenge: (er) => challenge(er, edge.challenger),
    });
    return {
      async start() {
        const port = await edge.listen(config.host, config.edgePort);
        const rows = [
          {
            name: 'edge (proxied HTTP)',
            protocol: 'http',
            address: `http://${config.host}:${port}`,
          },
        ];
        if (tls && config.edgeTlsPort !== undefined) {
          const tlsPort = await tls.listen(config.host, config.edgeTlsPort);
          rows.push({ name: `edge (proxied HTTPS, CA ${tls.ca.certPath})`, protocol: 'https', address: `https://${config.host}:${tlsPort}` });
        }
        return rows;
      },
      stop: async () => {
        await tls?.close();
        await edge.close();
      },
    };
  },
});
