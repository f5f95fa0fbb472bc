/**
 * `outpost tunnel run`: keeps N connections (default 4) to the edge, each an HTTP/1.1 upgrade
 * turned into an HTTP/2 connection where this process is the server. Lost connections come back
 * with exponential backoff (with jitter; reset once a connection was established). The remote
 * configuration arrives on the connections and replaces the ingress rules atomically: requests in
 * flight keep the rule they matched. A local configuration (`--config` file or `--url`) serves
 * until a remote one arrives. SIGINT/SIGTERM close the connections gracefully (GOAWAY), letting
 * requests in flight finish within the grace period.
 */
import http from 'node:http';
import https from 'node:https';
import http2, { type ServerHttp2Session } from 'node:http2';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { compileIngress, type CompiledIngress, type TunnelConfig } from './ingress.ts';
import { OriginHandler } from './origin.ts';
import {
  CONNECT_PATH,
  H,
  H2_CONNECTION_WINDOW,
  H2_MAX_SESSION_MEMORY,
  H2_SETTINGS,
  PING_INTERVAL_MS,
  PING_TIMEOUT_MS,
  TUNNEL_UPGRADE,
} from './protocol.ts';
import type { TunnelToken } from './token.ts';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };
const LABEL: Record<LogLevel, string> = { debug: 'DBG', info: 'INF', warn: 'WRN', error: 'ERR' };

export type Log = (level: LogLevel, message: string, fields?: Record<string, unknown>) => void;

export function createLog(min: LogLevel, out: NodeJS.WritableStream = process.stderr): Log {
  return (level, message, fields = {}) => {
    if (LEVELS[level] < LEVELS[min]) return;
    const extra = Object.entries(fields)
      .map(
        ([k, v]) =>
          `${k}=${typeof v === 'string' ? (/\s/.test(v) ? JSON.stringify(v) : v) : JSON.stringify(v)}`,
      )
      .join(' ');
    out.write(
      `${new Date().toISOString()} ${LABEL[level]} ${message}${extra ? ' ' + extra : ''}\n`,
    );
  };
}

export function clientVersion(): string {
  try {
    return (
      JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
        version: string;
      }
    ).version;
  } catch {
    return '0.0.0';
  }
}

export interface RunOptions {
  token: TunnelToken;
  /** The raw token, sent to the edge. */
  tokenText: string;
  /** Base URL of the edge (the token's `e` unless overridden). */
  edge: string;
  haConnections: number;
  localConfig?: TunnelConfig;
  backoffBaseMs: number;
  backoffMaxMs: number;
  gracePeriodMs: number;
  log: Log;
}

type Outcome = 'established' | 'retry-now';

export class TunnelConnector {
  readonly clientId = randomUUID();
  readonly version = clientVersion();
  private ingress: CompiledIngress;
  private configVersion = 0;
  private remote = false;
  private stopping = false;
  private readonly origin: OriginHandler;
  private readonly sessions = new Set<ServerHttp2Session>();
  private readonly sockets = new Set<Socket>();
  private readonly requests = new Set<http.ClientRequest>();
  private readonly wakers = new Set<() => void>();
  private loops: Promise<void>[] = [];
  /** Connection index → connection id while connected. */
  readonly connected = new Map<number, string>();

  constructor(private readonly opts: RunOptions) {
    this.ingress = compileIngress(opts.localConfig ?? {}, { allowEmpty: true });
    this.origin = new OriginHandler({
      ingress: () => this.ingress,
      applyConfig: (version, config) => this.apply(version, config),
      log: opts.log,
    });
  }

  start(): void {
    const { log } = this.opts;
    log('info', `Starting tunnel connector`, {
      tunnelID: this.opts.token.t,
      connectorID: this.clientId,
      version: this.version,
      edge: this.opts.edge,
      connections: this.opts.haConnections,
    });
    for (let i = 0; i < this.opts.haConnections; i++) this.loops.push(this.loop(i));
  }

  /** Applies a configuration pushed by the edge; older versions are ignored. */
  private apply(version: number, config: unknown): number {
    if (!Number.isInteger(version) || version < 1)
      throw new Error(`invalid configuration version ${version}`);
    if (this.remote && version <= this.configVersion) return this.configVersion;
    const compiled = compileIngress((config ?? {}) as TunnelConfig, { allowEmpty: true });
    if (!this.remote && this.opts.localConfig)
      this.opts.log(
        'warn',
        'The tunnel is remotely managed: the remote configuration replaces the local one',
      );
    this.ingress = compiled;
    this.configVersion = version;
    this.remote = true;
    this.opts.log('info', 'Updated to new configuration', {
      version,
      config: JSON.stringify(config),
    });
    return version;
  }

  private backoff(attempt: number): number {
    const base = Math.min(
      this.opts.backoffMaxMs,
      this.opts.backoffBaseMs * 2 ** Math.min(attempt, 20),
    );
    return Math.round(base * (0.8 + Math.random() * 0.4));
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.wakers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.wakers.add(wake);
    });
  }

  private async loop(index: number): Promise<void> {
    const { log } = this.opts;
    let attempt = 0;
    let immediate = 0;
    while (!this.stopping) {
      let outcome: Outcome | undefined;
      try {
        outcome = await this.connectOnce(index);
      } catch (err) {
        if (!this.stopping)
          log('warn', `Connection ${index} failed: ${(err as Error).message}`, {
            connIndex: index,
          });
      }
      if (this.stopping) break;
      if (outcome === 'retry-now' && immediate++ < 3) continue;
      immediate = 0;
      if (outcome === 'established') attempt = 0;
      const delay = this.backoff(attempt++);
      log('info', `Retrying connection in ${delay}ms`, { connIndex: index });
      await this.sleep(delay);
    }
  }

  private connectUrl(): URL {
    const base = new URL(this.opts.edge);
    const prefix = base.pathname.replace(/\/+$/, '');
    return new URL(`${base.protocol}//${base.host}${prefix}${CONNECT_PATH}`);
  }

  /** One connection: resolves when it ends after having been established; rejects if it never was. */
  private connectOnce(index: number): Promise<Outcome> {
    const { log } = this.opts;
    return new Promise((resolve, reject) => {
      const url = this.connectUrl();
      const lib = url.protocol === 'https:' ? https : http;
      const req = lib.request({
        protocol: url.protocol,
        host: url.hostname.replace(/^\[|\]$/g, ''),
        port: url.port || (url.protocol === 'https:' ? 443 : 80),
        path: url.pathname,
        method: 'GET',
        agent: false,
        headers: {
          connection: 'Upgrade',
          upgrade: TUNNEL_UPGRADE,
          authorization: `Bearer ${this.opts.tokenText}`,
          [H.clientId]: this.clientId,
          [H.connIndex]: String(index),
          [H.haConnections]: String(this.opts.haConnections),
          [H.version]: this.version,
          [H.arch]: `${process.platform}_${process.arch}`,
          [H.features]: 'http2,websocket,private-network',
        },
      });
      this.requests.add(req);
      req.setTimeout(15_000, () => req.destroy(new Error('timed out waiting for the edge')));
      req.on('error', (err) => {
        this.requests.delete(req);
        reject(err);
      });
      req.on('response', (res) => {
        this.requests.delete(req);
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          if (res.statusCode === 503 && res.headers[H.retry] === 'now') return resolve('retry-now');
          let message = Buffer.concat(chunks).toString('utf8').slice(0, 500);
          try {
            message = (JSON.parse(message) as { errors: { message: string }[] }).errors
              .map((e) => e.message)
              .join('; ');
          } catch {
            // Not an envelope: keep the text.
          }
          reject(new Error(`the edge refused the connection (${res.statusCode}): ${message}`));
        });
        res.on('error', reject);
      });
      req.on('upgrade', (res, socket: Socket, head: Buffer) => {
        this.requests.delete(req);
        req.setTimeout(0);
        socket.setTimeout(0);
        socket.setNoDelay(true);
        socket.setKeepAlive(true, 15_000);
        if (this.stopping) {
          socket.destroy();
          return resolve('established');
        }
        const connectionId = String(res.headers[H.connectionId] ?? '');
        const location = String(res.headers[H.colo] ?? '');
        if (head.length) socket.unshift(head);
        const server = http2.createServer({
          settings: H2_SETTINGS,
          maxSessionMemory: H2_MAX_SESSION_MEMORY,
        });
        server.on('stream', (stream, headers) => this.origin.onStream(stream, headers));
        let session: ServerHttp2Session | undefined;
        server.once('session', (s: ServerHttp2Session) => {
          session = s;
          this.sessions.add(s);
          s.on('error', (err) => log('debug', `Connection ${index} session error: ${err.message}`));
          s.once('connect', () => {
            try {
              s.setLocalWindowSize(H2_CONNECTION_WINDOW);
            } catch {
              // Closed before it could grow its window.
            }
          });
        });
        this.sockets.add(socket);
        server.emit('connection', socket);
        this.connected.set(index, connectionId);
        log('info', 'Registered tunnel connection', {
          connIndex: index,
          connection: connectionId,
          location,
          protocol: 'http2',
        });
        const ping = setInterval(() => {
          if (!session || session.closed || session.destroyed) return;
          const timeout = setTimeout(
            () => socket.destroy(new Error('ping timeout')),
            PING_TIMEOUT_MS,
          );
          try {
            session.ping((err) => {
              clearTimeout(timeout);
              if (err && !this.stopping) socket.destroy();
            });
          } catch {
            clearTimeout(timeout);
          }
        }, PING_INTERVAL_MS);
        socket.on('error', () => {});
        socket.once('close', () => {
          clearInterval(ping);
          this.sockets.delete(socket);
          if (session) this.sessions.delete(session);
          this.connected.delete(index);
          if (!this.stopping)
            log('warn', 'Connection terminated', { connIndex: index, connection: connectionId });
          resolve('established');
        });
      });
      req.end();
    });
  }

  /** Graceful stop: GOAWAY on every connection, then wait for streams up to the grace period. */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.opts.log('info', 'Stopping: closing tunnel connections', {
      gracePeriodMs: this.opts.gracePeriodMs,
    });
    for (const wake of [...this.wakers]) wake();
    for (const req of this.requests) req.destroy();
    const closing = [...this.sessions].map(
      (s) =>
        new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            s.destroy();
            resolve();
          }, this.opts.gracePeriodMs);
          s.close(() => {
            clearTimeout(timer);
            resolve();
          });
        }),
    );
    await Promise.all(closing);
    for (const socket of this.sockets) socket.destroy();
    await Promise.allSettled(this.loops);
    this.origin.close();
  }
}
