/**
 * Builds the whole server: database, bootstrap, the API app with every area mounted under
 * `/client/v4` and at `/`, data-plane listeners, and a graceful stop that lets in-flight requests
 * finish before the database closes.
 */
import type { Server as HttpServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Hono } from 'hono';
import { serve } from '@hono/node-server';
import { randomBytes } from 'node:crypto';
import { AREAS } from './areas.ts';
import type { Area, AreaContext, DataPlane, Listener } from './core/area.ts';
import { AuthService } from './core/auth.ts';
import { bootstrap, type Seeded } from './core/bootstrap.ts';
import { systemClock, type Clock } from './core/clock.ts';
import type { Config } from './core/config.ts';
import { failure } from './core/envelope.ts';
import { ApiError, apiError } from './core/errors.ts';
import { createEventBus, type EventBus } from './core/events.ts';
import { createLogger, type Logger } from './core/log.ts';
import { PermissionRegistry } from './core/permissions.ts';
import { RateLimiter } from './core/ratelimit.ts';
import { Router } from './core/router.ts';
import { Services } from './core/services.ts';
import { Upgrades } from './core/upgrades.ts';
import { hostnameOf } from './core/host.ts';
import { openDatabase, type Database } from './core/storage/db.ts';
import { VersionConflict } from './core/storage/collection.ts';

export const API_PREFIX = '/client/v4';
export const VERSION = '0.1.0';

export interface StartOptions {
  clock?: Clock;
  logger?: Logger;
  areas?: Area[];
}

export interface RunningServer {
  config: Config;
  apiUrl: string;
  apiPort: number;
  seeded: Seeded;
  listeners: Listener[];
  database: Database;
  /** The change-event bus (tests observe edge request events through it). */
  events: EventBus;
  app: Hono;
  stop(): Promise<void>;
}

function rayId(): string {
  return randomBytes(8).toString('hex');
}

export function buildApp(
  ctxBase: Omit<AreaContext, 'router'>,
  areas: Area[],
): { app: Hono; router: Router; planes: DataPlane[] } {
  const { config, log } = ctxBase;
  const app = new Hono({ strict: false });
  // A trailing slash names the same resource (deploy tools send `…/instances/`).
  const api = new Hono({ strict: false });
  const rateLimiter = config.rateLimit ? new RateLimiter(config.rateLimit, () => ctxBase.clock.now().getTime()) : undefined;
  const router = new Router(api, ctxBase.auth, { bodyLimit: config.bodyLimit, rateLimiter, apiPrefix: API_PREFIX });

  app.use(async (c, next) => {
    const id = rayId();
    c.set('rayId' as never, id as never);
    const started = performance.now();
    await next();
    c.header('cf-ray', `${id}-OUT`);
    if (log.isLevelEnabled('debug')) {
      log.debug({ ray: id, method: c.req.method, path: c.req.path, status: c.res.status, ms: +(performance.now() - started).toFixed(2) }, 'request');
    }
  });
  // The media host serves only the media forwarding API (`/v1/apps/{appId}/…`); the same routes
  // stay reachable on the API port under any other host name, so pages call them same-origin.
  const mediaHost = config.sfuHost.toLowerCase();
  app.use(async (c, next) => {
    if (hostnameOf(c.req.header('host')) !== mediaHost || c.req.path.startsWith('/v1/apps/')) return next();
    return c.json({ errorCode: 'not_found', errorDescription: `${c.req.path} is not an operation of the media host (its operations are under /v1/apps/{appId}/)` }, 404);
  });
  app.get('/healthz', (c) => c.json({ status: 'ok', version: VERSION }));

  const ctx: AreaContext = { ...ctxBase, router };
  const planes = areas.map((area) => area.mount(ctx)).filter((p): p is DataPlane => !!p);
  api.get('/openapi.json', (c) =>
    c.json(router.openapi({ title: 'Outpost management API', version: VERSION, serverUrl: API_PREFIX })),
  );

  app.route(API_PREFIX, api);
  app.route('/', api);

  app.notFound((c) => {
    const path = c.req.path.startsWith(API_PREFIX) ? c.req.path.slice(API_PREFIX.length) || '/' : c.req.path;
    const allowed = router.methodsFor(path);
    if (allowed.length > 0) {
      const err = apiError('method_not_allowed', c.req.method);
      c.header('allow', allowed.join(', '));
      return c.json(failure(err.errors), 405);
    }
    return c.json(failure(apiError('no_route').errors), 404);
  });
  app.onError((err, c) => {
    if (err instanceof ApiError) {
      for (const [k, v] of Object.entries(err.headers)) c.header(k, v);
      return c.json(failure(err.errors), err.status as 400);
    }
    if (err instanceof VersionConflict) {
      c.header('x-should-retry', 'true');
      return c.json(failure([{ code: 1002, message: `${err.message}; retry the request` }]), 409);
    }
    const id = c.get('rayId' as never) as string;
    log.error({ ray: id, err }, 'unhandled error');
    return c.json(failure(apiError('internal', `ray ${id}`).errors), 500);
  });
  return { app, router, planes };
}

export async function startServer(config: Config, opts: StartOptions = {}): Promise<RunningServer> {
  const clock = opts.clock ?? systemClock;
  const log = opts.logger ?? createLogger(config.logLevel);
  const areas = opts.areas ?? AREAS;
  const database = await openDatabase({ url: config.database, schema: config.databaseSchema });
  const seeded = await bootstrap(database.db, config, clock);
  const permissions = new PermissionRegistry();
  const auth = new AuthService(database.db, clock, permissions, { email: config.apiEmail, keyHash: seeded.apiKeyHash });
  const base = { config, clock, log, events: createEventBus(), database, auth, permissions, services: new Services(), upgrades: new Upgrades() };
  const { app, planes } = buildApp(base, areas);

  const server = await listen(app, config.host, config.apiPort);
  server.on('upgrade', (req, socket, head) => base.upgrades.dispatch(server, req, socket as Socket, head));
  const apiPort = (server.address() as AddressInfo).port;
  const apiUrl = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${apiPort}`;
  const listeners: Listener[] = [{ name: 'management API', protocol: 'http', address: `${apiUrl}${API_PREFIX}` }];
  const started: DataPlane[] = [];
  try {
    for (const plane of planes) {
      started.push(plane);
      const ls = await plane.start?.();
      if (ls) listeners.push(...ls);
    }
  } catch (err) {
    await closeServer(server, 0);
    for (const plane of started.reverse()) await plane.stop?.();
    await database.close();
    throw err;
  }

  let stopping: Promise<void> | undefined;
  return {
    config,
    apiUrl,
    apiPort,
    seeded,
    listeners,
    database,
    events: base.events,
    app,
    stop: () =>
      (stopping ??= (async () => {
        const closing = closeServer(server, config.shutdownTimeoutMs);
        // Upgraded sockets (tunnel connectors) would keep the listener open; cut them now.
        base.upgrades.closeAll();
        await closing;
        for (const plane of [...started].reverse()) await plane.stop?.();
        await database.close();
        log.flush?.();
      })()),
  };
}

function listen(app: Hono, host: string, port: number): Promise<HttpServer> {
  return new Promise((resolve, reject) => {
    const server = serve({ fetch: app.fetch, hostname: host, port }, () => resolve(server as HttpServer)) as HttpServer;
    server.once('error', reject);
    server.keepAliveTimeout = 65_000;
  });
}

/** Stops accepting, lets in-flight requests finish, and cuts what is left after the budget. */
function closeServer(server: HttpServer, budgetMs: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => server.closeAllConnections(), budgetMs);
    server.close(() => {
      clearTimeout(timer);
      resolve();
    });
    server.closeIdleConnections();
  });
}
