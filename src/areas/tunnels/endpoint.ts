/**
 * The connector and private-network access endpoints on the management API port:
 * - `GET /_outpost/tunnel/connect` (`Upgrade: outpost-tunnel`, `Authorization: Bearer <tunnel
 *   token>`): after `101` the socket carries HTTP/2 with this side as the CLIENT; the connection is
 *   registered, receives the tunnel's configuration, is pinged, and serves visitors' requests;
 * - `GET /_outpost/tunnel/access` (`Upgrade: outpost-tcp`, `Authorization: Bearer <API token>`,
 *   `outpost-destination: ip:port`): after `101` the socket is a TCP stream to that private address,
 *   carried by a `CONNECT` stream to the connector whose tunnel owns the covering IP route.
 *
 * Both are HTTP/1.1 upgrades claimed through the server's upgrade registry (`ctx.upgrades`),
 * which also closes the upgraded sockets on a graceful stop.
 */
import { STATUS_CODES, type IncomingMessage } from 'node:http';
import http2, { constants as h2c, type ClientHttp2Session } from 'node:http2';
import net, { type Socket } from 'node:net';
import { timingSafeEqual } from 'node:crypto';
import type { AuthService, Principal } from '../../core/auth.ts';
import { ApiError, CODES } from '../../core/errors.ts';
import type { Logger } from '../../core/log.ts';
import { HEX32, UUID, uuid } from '../../core/ids.ts';
import type { Executor } from '../../core/storage/db.ts';
import {
  ACCESS_PATH,
  ACCESS_UPGRADE,
  CONNECT_PATH,
  H,
  H2_CONNECTION_WINDOW,
  H2_MAX_SESSION_MEMORY,
  H2_SETTINGS,
  joinHostPort,
  PING_INTERVAL_MS,
  PING_TIMEOUT_MS,
  splitHostPort,
  TUNNEL_UPGRADE,
  UPDATE_CONFIGURATION,
} from '../../connector/protocol.ts';
import { decodeToken, secretBytes, TokenError } from '../../connector/token.ts';
import { splice } from '../../connector/origin.ts';
import type { ConnectionRegistry, LiveConnection } from './registry.ts';
import { tunnels, type StoredConfig, type StoredRoute } from './store.ts';

export interface EndpointDeps {
  db: Executor;
  auth: AuthService;
  registry: ConnectionRegistry;
  log: Logger;
  now(): Date;
  coloName: string;
  currentConfig(accountId: string, tunnelId: string): Promise<StoredConfig | undefined>;
  findRoute(
    principal: Principal,
    ip: string,
    opts: { accountId?: string; virtualNetworkId?: string },
  ): Promise<{ accountId: string; route: StoredRoute } | undefined>;
}

const PREFIX = '/client/v4';
const CONFIG_PUSH_TIMEOUT_MS = 10_000;

function pathOf(url: string | undefined): string {
  const path = (url ?? '/').split('?')[0];
  return path.startsWith(PREFIX + '/') ? path.slice(PREFIX.length) : path;
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** Answers an upgrade request with an ordinary (failure envelope) response and closes. */
function refuse(
  socket: Socket,
  status: number,
  code: number,
  message: string,
  extra: Record<string, string> = {},
): void {
  if (socket.destroyed) return;
  const body = JSON.stringify({
    result: null,
    success: false,
    errors: [{ code, message }],
    messages: [],
  });
  const lines = [
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}`,
    'content-type: application/json',
    `content-length: ${Buffer.byteLength(body)}`,
    'connection: close',
  ];
  for (const [k, v] of Object.entries(extra)) lines.push(`${k}: ${v}`);
  socket.end(`${lines.join('\r\n')}\r\n\r\n${body}`);
}

export class TunnelEndpoint {
  private readonly sockets = new Set<Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private closed = false;

  constructor(private readonly deps: EndpointDeps) {}

  /** Closes every connector and access socket (server stop). */
  closeAll(): void {
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    this.timers.clear();
    this.deps.registry.closeAll();
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  private track(socket: Socket): void {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    socket.on('error', () => socket.destroy());
  }

  /** Takes an upgraded socket for the connector or the access path. */
  handleUpgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    const path = pathOf(req.url);
    const protocol = (header(req, 'upgrade') ?? '').toLowerCase();
    if (path === CONNECT_PATH && protocol === TUNNEL_UPGRADE) {
      this.track(socket);
      this.connector(req, socket, head).catch((err: unknown) => {
        this.deps.log.error({ err }, 'tunnel connector registration failed');
        refuse(socket, 500, CODES.internal.code, 'connector registration failed');
      });
      return;
    }
    if (path === ACCESS_PATH && protocol === ACCESS_UPGRADE) {
      this.track(socket);
      this.access(req, socket, head).catch((err: unknown) => {
        this.deps.log.error({ err }, 'private network access failed');
        refuse(socket, 500, CODES.internal.code, 'access failed');
      });
      return;
    }
    this.track(socket);
    refuse(socket, 426, CODES.validation.code, `expected Upgrade: ${path === CONNECT_PATH ? TUNNEL_UPGRADE : ACCESS_UPGRADE}`);
  }

  // --- connectors ------------------------------------------------------------------------------

  private async connector(req: IncomingMessage, socket: Socket, head: Buffer): Promise<void> {
    if (this.closed) return refuse(socket, 503, CODES.internal.code, 'the server is stopping');
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header(req, 'authorization') ?? '');
    const unauthorized = (why: string) =>
      refuse(socket, 401, CODES.tunnel_connector_unauthorized.code, `Unauthorized: ${why}`);
    if (!m) return unauthorized('the tunnel token is missing (Authorization: Bearer <token>)');
    let token;
    try {
      token = decodeToken(m[1]);
    } catch (err) {
      return unauthorized(
        err instanceof TokenError ? `invalid tunnel token: ${err.message}` : 'invalid tunnel token',
      );
    }
    if (!HEX32.test(token.a) || !UUID.test(token.t)) return unauthorized('Tunnel not found');
    const doc = await tunnels.get(this.deps.db, token.a, token.t);
    if (!doc || doc.body.deleted_at) return unauthorized('Tunnel not found');
    const stored = secretBytes(doc.body.secret);
    const given = secretBytes(token.s);
    if (!stored || !given || stored.length !== given.length || !timingSafeEqual(stored, given))
      return unauthorized('Invalid tunnel secret');
    if (socket.destroyed) return;

    const num = (name: string, min: number, max: number, fallback: number) => {
      const v = Number(header(req, name));
      return Number.isInteger(v) && v >= min && v <= max ? v : fallback;
    };
    const clientId = header(req, H.clientId)?.toLowerCase();
    const remote = socket.remoteAddress ?? '';
    const conn: LiveConnection = {
      id: uuid(),
      tunnelId: doc.id,
      accountId: doc.scopeId,
      clientId: clientId && UUID.test(clientId) ? clientId : uuid(),
      clientVersion: (header(req, H.version) ?? 'unknown').slice(0, 64),
      arch: (header(req, H.arch) ?? 'unknown').slice(0, 64),
      features: (header(req, H.features) ?? '')
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean)
        .slice(0, 32),
      connIndex: num(H.connIndex, 0, 255, 0),
      haConnections: num(H.haConnections, 1, 256, 4),
      originIp: remote.startsWith('::ffff:') ? remote.slice(7) : remote,
      openedAt: this.deps.now().toISOString(),
      coloName: this.deps.coloName,
      session: undefined as unknown as ClientHttp2Session,
      socket,
      ready: false,
      configVersion: 0,
      gone: false,
    };
    socket.write(
      [
        'HTTP/1.1 101 Switching Protocols',
        `Upgrade: ${TUNNEL_UPGRADE}`,
        'Connection: Upgrade',
        `${H.connectionId}: ${conn.id}`,
        `${H.colo}: ${conn.coloName}`,
        `${H.remoteConfig}: ${doc.body.config_src === 'cloudflare'}`,
        '',
        '',
      ].join('\r\n'),
    );
    if (head.length) socket.unshift(head);
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 15_000);
    const session = http2.connect('http://connector.invalid', {
      createConnection: () => socket,
      settings: H2_SETTINGS,
      maxSessionMemory: H2_MAX_SESSION_MEMORY,
    });
    conn.session = session;
    this.deps.registry.add(conn);
    const log = this.deps.log.child({
      tunnel: conn.tunnelId,
      connection: conn.id,
      connIndex: conn.connIndex,
    });
    session.on('error', (err) => log.debug({ err }, 'connector session error'));
    session.once('connect', () => {
      try {
        session.setLocalWindowSize(H2_CONNECTION_WINDOW);
      } catch {
        // The session closed before it could grow its window.
      }
    });
    // GOAWAY with NO_ERROR is a connector shutting down: gone, not pending reconnect.
    session.on('goaway', (code: number) =>
      this.deps.registry.remove(conn, code !== h2c.NGHTTP2_NO_ERROR),
    );
    session.once('close', () => this.deps.registry.remove(conn, true));
    socket.once('close', () => {
      this.deps.registry.remove(conn, true);
      session.destroy();
    });
    const ping = setInterval(() => {
      if (session.closed || session.destroyed) return;
      const timeout = setTimeout(() => session.destroy(new Error('ping timeout')), PING_TIMEOUT_MS);
      try {
        session.ping((err) => {
          clearTimeout(timeout);
          if (err) session.destroy();
        });
      } catch {
        clearTimeout(timeout);
      }
    }, PING_INTERVAL_MS);
    ping.unref();
    this.timers.add(ping);
    session.once('close', () => {
      clearInterval(ping);
      this.timers.delete(ping);
    });
    log.debug('connector connection registered');

    const config = await this.deps.currentConfig(conn.accountId, conn.tunnelId);
    if (config && config.version > 0) {
      try {
        await this.push(conn, config);
      } catch (err) {
        log.warn({ err }, 'connector did not take the configuration; closing the connection');
        session.destroy();
        return;
      }
    }
    this.deps.registry.markReady(conn);
  }

  /** Sends a configuration version over one connection and waits for the connector's answer. */
  push(conn: LiveConnection, config: Pick<StoredConfig, 'version' | 'config'>): Promise<void> {
    return new Promise((resolve, reject) => {
      let stream: http2.ClientHttp2Stream;
      try {
        stream = conn.session.request({
          ':method': 'POST',
          ':path': '/',
          [H.upgrade]: UPDATE_CONFIGURATION,
          'content-type': 'application/json',
        });
      } catch (err) {
        return reject(err as Error);
      }
      const timer = setTimeout(() => {
        stream.close(h2c.NGHTTP2_CANCEL);
        reject(new Error('configuration push timed out'));
      }, CONFIG_PUSH_TIMEOUT_MS);
      let status = 0;
      const chunks: Buffer[] = [];
      stream.on('response', (h) => (status = Number(h[':status'])));
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        clearTimeout(timer);
        const text = Buffer.concat(chunks).toString('utf8');
        if (status !== 200)
          return reject(new Error(`connector refused configuration ${config.version}: ${text}`));
        try {
          const applied = Number(
            (JSON.parse(text) as { lastAppliedVersion?: number }).lastAppliedVersion,
          );
          if (Number.isFinite(applied)) conn.configVersion = Math.max(conn.configVersion, applied);
        } catch {
          // An answer without a version still means the connector took the push.
        }
        resolve();
      });
      stream.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      stream.end(JSON.stringify({ version: config.version, config: config.config }));
    });
  }

  /** Pushes a new configuration to every connection of the tunnel (best effort, logged). */
  broadcast(tunnelId: string, config: Pick<StoredConfig, 'version' | 'config'>): void {
    for (const conn of this.deps.registry.all(tunnelId)) {
      this.push(conn, config).catch((err: unknown) =>
        this.deps.log.warn(
          { err, tunnel: tunnelId, connection: conn.id },
          'configuration push failed',
        ),
      );
    }
  }

  // --- private network access ------------------------------------------------------------------

  private async access(req: IncomingMessage, socket: Socket, head: Buffer): Promise<void> {
    let principal: Principal;
    try {
      principal = await this.deps.auth.authenticate(
        { get: (name: string) => header(req, name.toLowerCase()) },
        socket.remoteAddress,
      );
    } catch (err) {
      if (err instanceof ApiError)
        return refuse(
          socket,
          err.status,
          err.errors[0]?.code ?? 10000,
          err.errors[0]?.message ?? 'unauthorized',
        );
      throw err;
    }
    const dest = splitHostPort(header(req, H.destination) ?? '');
    if (!dest || !net.isIP(dest.host)) {
      return refuse(
        socket,
        400,
        CODES.tunnel_route_invalid.code,
        `${H.destination} must be <ip>:<port>`,
      );
    }
    const account = header(req, H.account);
    const vnet = header(req, H.virtualNetwork);
    const found = await this.deps.findRoute(principal, dest.host, {
      accountId: account || undefined,
      virtualNetworkId: vnet || undefined,
    });
    if (!found)
      return refuse(
        socket,
        404,
        CODES.tunnel_no_route_for_ip.code,
        `No route covers ${dest.host} in the accounts this token can reach`,
      );
    const conn = this.deps.registry.pick(found.route.tunnel_id, found.accountId);
    if (!conn)
      return refuse(
        socket,
        503,
        1033,
        `Tunnel ${found.route.tunnel_id} (route ${found.route.network}) has no live connection`,
      );
    if (socket.destroyed) return;
    let stream: http2.ClientHttp2Stream;
    try {
      stream = conn.session.request({
        ':method': 'CONNECT',
        ':authority': joinHostPort(dest.host, dest.port),
      });
    } catch (err) {
      return refuse(socket, 502, 1033, `tunnel connection unusable: ${(err as Error).message}`);
    }
    let answered = false;
    stream.on('response', (h) => {
      answered = true;
      const status = Number(h[':status']);
      if (status !== 200) {
        stream.close(h2c.NGHTTP2_CANCEL);
        const dialError = String(h[H.dialError] ?? 'EIO');
        return refuse(
          socket,
          status === 504 ? 504 : 502,
          1034,
          `the connector could not reach ${joinHostPort(dest.host, dest.port)}: ${dialError}`,
          { [H.dialError]: dialError },
        );
      }
      socket.write(
        `HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${ACCESS_UPGRADE}\r\nConnection: Upgrade\r\n${H.connectionId}: ${conn.id}\r\n\r\n`,
      );
      if (head.length) stream.write(head);
      socket.setNoDelay(true);
      splice(stream, socket);
    });
    stream.on('error', (err) => {
      if (!answered) refuse(socket, 502, 1034, `tunnel stream failed: ${err.message}`);
      else socket.destroy();
    });
    socket.once('close', () => {
      if (!answered) stream.close(h2c.NGHTTP2_CANCEL);
    });
  }
}
