/**
 * The edge listener: accepts visitors' HTTP requests, routes them by host, runs the request
 * phases in the platform's order, and hands the request to the origin (an address through the
 * proxy, or an origin handler such as a tunnel). Every request ends in one `edge.request` event.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { randomBytes } from 'node:crypto';
import type { Config } from '../core/config.ts';
import type { Clock } from '../core/clock.ts';
import { Challenger, VERIFY_PATH } from './challenge.ts';
import type { EventBus } from '../core/events.ts';
import type { Logger } from '../core/log.ts';
import type { ZoneIndex } from '../areas/dns/index.ts';
import { OriginProxy, type ProxyOutcome } from './proxy.ts';
import { routeHost } from './routing.ts';
import { sendErrorPage } from './error-pages.ts';
import type {
  EdgeRequest,
  HostRoute,
  HostRouter,
  OriginHandler,
  OriginTarget,
  Phase,
  RequestEvent,
  Route,
} from './types.ts';
import { listenOn } from '../core/listen.ts';
import { hostnameOf } from '../core/host.ts';

/** Ray ids: a random per-process prefix and a counter — unique, and no entropy call per request. */
const RAY_PREFIX = randomBytes(4).toString('hex');
let rayCounter = randomBytes(4).readUInt32BE(0);
function nextRayId(): string {
  rayCounter = (rayCounter + 1) >>> 0;
  return RAY_PREFIX + rayCounter.toString(16).padStart(8, '0');
}

/** Request phases in the platform's order; areas register under these names. */
export const PHASE_ORDER: Record<string, number> = {
  ddos_l7: 10,
  http_request_sanitize: 20,
  http_request_dynamic_redirect: 30,
  http_request_transform: 40,
  http_config_settings: 50,
  http_request_origin: 60,
  http_ratelimit: 70,
  http_request_api_gateway_early: 80,
  ip_access_rules: 85,
  http_request_firewall_custom: 90,
  http_request_firewall_managed: 100,
  http_request_sbfm: 110,
  http_request_api_gateway_late: 120,
  http_request_redirect: 130,
  http_request_late_transform: 140,
  http_request_cache_settings: 150,
  http_request_snippets: 160,
  http_request_cloud_connector: 170,
};

/** A route fixed for every request of one socket (see `acceptSocket`). */
export interface PinnedRoute {
  route: Route;
  origin: OriginTarget;
  scheme: 'http' | 'https';
}

export interface EdgeDeps {
  config: Config;
  clock: Clock;
  events: EventBus;
  log: Logger;
  index: ZoneIndex;
}

export class EdgeServer {
  private readonly phases: Phase[] = [];
  private readonly handlers: OriginHandler[] = [];
  private readonly hostRouters: HostRouter[] = [];
  private readonly proxy: OriginProxy;
  private server?: http.Server;
  private readonly pinned = new WeakMap<Socket, PinnedRoute & { originHost: string }>();
  /** Upgraded (WebSocket) client sockets, which http.Server no longer tracks. */
  private readonly upgraded = new Set<Socket>();

  readonly challenger: Challenger;

  constructor(private readonly deps: EdgeDeps) {
    this.challenger = new Challenger(() => deps.clock.now().getTime());
    this.proxy = new OriginProxy({
      connectTimeoutMs: deps.config.originConnectTimeoutMs,
      responseTimeoutMs: deps.config.originResponseTimeoutMs,
    });
  }

  addPhase(phase: Phase): void {
    this.phases.push(phase);
    this.phases.sort((a, b) => a.order - b.order);
  }

  addOriginHandler(handler: OriginHandler): void {
    this.handlers.push(handler);
  }

  /** Host names an area serves without a proxied DNS record (consulted before zone routing). */
  addHostRouter(router: HostRouter): void {
    this.hostRouters.push(router);
  }

  private routeByArea(host: string): HostRoute | undefined {
    for (const r of this.hostRouters) {
      const hit = r(host);
      if (hit) return hit;
    }
    return undefined;
  }

  /**
   * Serves HTTP arriving on a socket another listener accepted (proxied applications with
   * `traffic_type` http/https): the requests run through every phase, with the zone and origin
   * fixed by the caller instead of found from the Host header.
   */
  acceptSocket(socket: Socket, pin: PinnedRoute): void {
    if (!this.server) {
      socket.destroy();
      return;
    }
    this.pinned.set(socket, { ...pin, originHost: pin.origin.host });
    this.server.emit('connection', socket);
  }

  /** Serves HTTP/1.1 on a socket another listener accepted and decrypted (the TLS listener). */
  acceptConnection(socket: Socket): void {
    if (this.server) this.server.emit('connection', socket);
    else socket.destroy();
  }

  /** Runs one request that arrived elsewhere (HTTP/2 on the TLS listener) through the edge. */
  handleRequest(req: IncomingMessage, res: ServerResponse): void {
    void this.handle(req, res, undefined);
  }

  async listen(host: string, port: number): Promise<number> {
    const server = http.createServer(
      { keepAliveTimeout: 65_000, requestTimeout: 0 },
      (req, res) => {
        void this.handle(req, res, undefined);
      },
    );
    server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      this.upgraded.add(socket);
      socket.once('close', () => this.upgraded.delete(socket));
      void this.handle(req, undefined, { socket, head });
    });
    server.on('clientError', (_err, socket) => {
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    });
    this.server = server;
    return (await listenOn(server, port, host)).port;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => server.closeAllConnections(), 5_000);
      server.close(() => {
        clearTimeout(timer);
        resolve();
      });
      server.closeIdleConnections();
      for (const socket of this.upgraded) socket.destroy();
    });
    this.proxy.close();
  }

  private clientOf(req: IncomingMessage): { ip: string; country: string; asn: number } {
    const raw = req.socket.remoteAddress ?? '0.0.0.0';
    let ip = raw.startsWith('::ffff:') ? raw.slice(7) : raw;
    let country = 'XX';
    let asn = 0;
    if (this.deps.config.edgeTestHeaders) {
      const h = req.headers;
      if (typeof h['x-outpost-client-ip'] === 'string') ip = h['x-outpost-client-ip'];
      if (typeof h['x-outpost-country'] === 'string')
        country = h['x-outpost-country'].toUpperCase();
      if (typeof h['x-outpost-asn'] === 'string') asn = Number(h['x-outpost-asn']) || 0;
    }
    return { ip, country, asn };
  }

  private async handle(
    req: IncomingMessage,
    res: ServerResponse | undefined,
    upgrade: EdgeRequest['upgrade'],
  ): Promise<void> {
    const startedAt = performance.now();
    const rayId = nextRayId();
    const host = hostnameOf(req.headers.host);
    const client = this.clientOf(req);
    let outcome: ProxyOutcome = { status: 0, bytesIn: 0, bytesOut: 0 };
    let er: EdgeRequest | undefined;
    try {
      const pinned = this.pinned.get(req.socket);
      const routed =
        pinned ??
        (this.hostRouters.length > 0 ? this.routeByArea(host) : undefined) ??
        routeHost(this.deps.index, host, (t) => this.handlers.some((h) => h.matches(t)));
      if ('error' in routed) {
        outcome.status = this.reject(
          res,
          upgrade,
          routed.error === 1016 ? 1016 : 1001,
          rayId,
          host,
        );
        return;
      }
      er = {
        rayId,
        req,
        res,
        upgrade,
        host,
        clientIp: client.ip,
        scheme: pinned?.scheme ?? ((req.socket as Partial<TLSSocket>).encrypted ? 'https' : 'http'),
        route: routed.route,
        origin: pinned
          ? { ...pinned.origin }
          : { host: routed.originHost, port: 80, protocol: 'http:' },
        visitor: { country: client.country, asn: client.asn, continent: 'XX', city: '' },
        fields: {},
        matchedRules: [],
        skipPhases: new Set(),
        startedAt,
      };
      if (res && req.method === 'POST' && req.url === VERIFY_PATH) {
        outcome.status = await this.verifyChallenge(er, res);
        return;
      }
      for (const phase of this.phases) {
        if (er.skipPhases.size > 0 && er.skipPhases.has(phase.name)) continue;
        if ((await phase.run(er)) === 'handled') {
          outcome.status = res?.statusCode ?? 0;
          return;
        }
      }
      const handler = this.handlers.find((h) => h.matches(er!.origin.host));
      if (handler) {
        await handler.handle(er);
        outcome.status = res?.statusCode ?? 101;
      } else if (upgrade) {
        outcome = await this.proxy.upgrade(er);
      } else {
        outcome = await this.proxy.forward(er);
      }
    } catch (err) {
      this.deps.log.error({ ray: rayId, err }, 'edge request failed');
      outcome.status = this.reject(res, upgrade, 502, rayId, host);
      outcome.error = (err as Error).message;
    } finally {
      this.emit(req, rayId, host, client.ip, startedAt, outcome, er);
    }
  }

  /** The interstitial's answer: a clearance cookie for a solved challenge, 403 otherwise. */
  private async verifyChallenge(er: EdgeRequest, res: ServerResponse): Promise<number> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of er.req) {
      size += (chunk as Buffer).length;
      if (size > 4096) break;
      chunks.push(chunk as Buffer);
    }
    const cookie = this.challenger.verify(
      new URLSearchParams(Buffer.concat(chunks).toString('utf8')),
      er.clientIp,
    );
    const status = cookie ? 200 : 403;
    res.writeHead(status, {
      'content-type': 'text/plain',
      'cf-ray': `${er.rayId}-OUT`,
      ...(cookie ? { 'set-cookie': cookie } : {}),
    });
    res.end(cookie ? 'ok' : 'challenge failed');
    return status;
  }

  private reject(
    res: ServerResponse | undefined,
    upgrade: EdgeRequest['upgrade'],
    code: 1001 | 1016 | 502,
    rayId: string,
    host: string,
  ): number {
    const status = code >= 1000 ? 530 : code;
    if (res) sendErrorPage(res, code, rayId, host);
    else if (upgrade)
      upgrade.socket.end(
        `HTTP/1.1 ${status} Edge Error\r\ncf-ray: ${rayId}-OUT\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`,
      );
    return status;
  }

  private emit(
    req: IncomingMessage,
    rayId: string,
    host: string,
    clientIp: string,
    startedAt: number,
    o: ProxyOutcome,
    er?: EdgeRequest,
  ): void {
    const debug = this.deps.log.isLevelEnabled('debug');
    if (!debug && !this.deps.events.listening('edge.request')) return;
    const event: RequestEvent = {
      rayId,
      zoneId: er?.route.zoneId,
      host,
      method: req.method ?? 'GET',
      path: (req.url ?? '/').split('?')[0],
      status: o.status,
      clientIp,
      bytesIn: o.bytesIn,
      bytesOut: o.bytesOut,
      durationMs: +(performance.now() - startedAt).toFixed(2),
      originMs: o.originMs,
      matchedRules: er?.matchedRules ?? [],
      error: o.error,
      timestamp: new Date().toISOString(),
    };
    this.deps.events.publish('edge.request', event);
    if (debug) this.deps.log.debug({ edge: event }, 'edge request');
  }
}
