/**
 * The connector's side of each HTTP/2 stream the edge opens: configuration pushes, visitors'
 * HTTP requests (matched against the ingress rules and proxied to the origin with streamed
 * bodies in both directions), WebSocket upgrades, and private-network TCP (`CONNECT`).
 * Backpressure is HTTP/2 flow control on the edge side and `pipe()` on the origin side.
 */
import http, { type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import type { Duplex } from 'node:stream';
import {
  constants as h2c,
  type IncomingHttpHeaders as H2Headers,
  type ServerHttp2Stream,
} from 'node:http2';
import {
  matchRule,
  type CompiledIngress,
  type CompiledRule,
  type ResolvedOriginRequest,
} from './ingress.ts';
import {
  endToEndHeaders,
  H,
  META_CLOUDFLARED,
  META_ORIGIN,
  splitHostPort,
  UPDATE_CONFIGURATION,
} from './protocol.ts';

export interface OriginContext {
  /** The rules in force when a stream starts; a new configuration never touches started streams. */
  ingress(): CompiledIngress;
  /** Applies a pushed configuration; returns the version now in force. */
  applyConfig(version: number, config: unknown): number;
  log(
    level: 'debug' | 'info' | 'warn' | 'error',
    message: string,
    fields?: Record<string, unknown>,
  ): void;
}

const HELLO = `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Hello from the tunnel</title></head>
<body><h1>Congrats! You created a tunnel!</h1><p>This page is served by the Outpost connector (hello_world service).</p></body></html>
`;

/** Keep-alive agents per origin and options, shared across configuration versions. */
class Agents {
  private readonly pool = new Map<string, http.Agent>();

  get(protocol: 'http:' | 'https:', o: ResolvedOriginRequest): http.Agent {
    const key = `${protocol}|${o.keepAliveConnections}|${o.keepAliveTimeoutMs}|${o.noTLSVerify}|${o.caPool ?? ''}|${o.tcpKeepAliveMs}`;
    let agent = this.pool.get(key);
    if (!agent) {
      const common = {
        keepAlive: true,
        maxFreeSockets: Math.max(1, o.keepAliveConnections),
        timeout: o.keepAliveTimeoutMs,
        keepAliveMsecs: o.tcpKeepAliveMs,
        scheduling: 'lifo' as const,
      };
      agent =
        protocol === 'https:'
          ? new https.Agent({
              ...common,
              rejectUnauthorized: !o.noTLSVerify,
              ca: o.caPool ? readFileSync(o.caPool) : undefined,
            })
          : new http.Agent(common);
      this.pool.set(key, agent);
    }
    return agent;
  }

  destroy(): void {
    for (const a of this.pool.values()) a.destroy();
    this.pool.clear();
  }
}

export class OriginHandler {
  private readonly agents = new Agents();

  constructor(private readonly ctx: OriginContext) {}

  close(): void {
    this.agents.destroy();
  }

  /** Entry point for every stream of every connection. */
  onStream(stream: ServerHttp2Stream, headers: H2Headers): void {
    stream.on('error', () => {});
    const method = String(headers[':method'] ?? 'GET');
    const upgrade = headers[H.upgrade];
    if (upgrade === UPDATE_CONFIGURATION) return this.configuration(stream);
    if (method === 'CONNECT') return this.tcp(stream, String(headers[':authority'] ?? ''));
    const authority = String(headers[':authority'] ?? '');
    const path = String(headers[':path'] ?? '/');
    const rule = matchRule(this.ctx.ingress(), authority, path);
    const s = rule.service;
    if (s.kind === 'status') {
      drain(stream);
      return respond(
        stream,
        { ':status': s.code, [H.responseMeta]: META_CLOUDFLARED, 'content-length': 0 },
        '',
      );
    }
    if (s.kind === 'hello_world') {
      drain(stream);
      return respond(
        stream,
        {
          ':status': 200,
          'content-type': 'text/html; charset=utf-8',
          [H.responseMeta]: META_ORIGIN,
        },
        method === 'HEAD' ? '' : HELLO,
      );
    }
    if (s.kind === 'http' || s.kind === 'unix') {
      if (typeof upgrade === 'string' && upgrade)
        return this.upgrade(stream, headers, rule, upgrade);
      return this.http(stream, headers, rule);
    }
    drain(stream);
    this.fail(stream, 502, `the ${rule.serviceText} service is not supported by this connector`);
  }

  private configuration(stream: ServerHttp2Stream): void {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      let status = 200;
      let body: Record<string, unknown>;
      try {
        const parsed = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          version: number;
          config: unknown;
        };
        body = { lastAppliedVersion: this.ctx.applyConfig(Number(parsed.version), parsed.config) };
      } catch (err) {
        status = 400;
        body = { lastAppliedVersion: -1, err: (err as Error).message };
      }
      respond(
        stream,
        { ':status': status, 'content-type': 'application/json' },
        JSON.stringify(body),
      );
    });
  }

  private fail(stream: ServerHttp2Stream, status: number, message: string): void {
    this.ctx.log('warn', message);
    respond(
      stream,
      {
        ':status': status,
        'content-type': 'text/plain; charset=utf-8',
        [H.responseMeta]: META_CLOUDFLARED,
      },
      `${message}\n`,
    );
  }

  private originRequest(
    headers: H2Headers,
    rule: CompiledRule,
    upgrade?: string,
  ): http.ClientRequest {
    const s = rule.service;
    const o = rule.options;
    const out: OutgoingHttpHeaders = endToEndHeaders(headers as IncomingHttpHeaders);
    const authority = String(headers[':authority'] ?? '');
    out.host = o.httpHostHeader ?? authority;
    if (upgrade) {
      out.connection = 'Upgrade';
      out.upgrade = upgrade;
    }
    const method = String(headers[':method'] ?? 'GET');
    const path = String(headers[':path'] ?? '/');
    if (s.kind === 'unix') {
      const lib = s.tls ? https : http;
      return lib.request({
        socketPath: s.path,
        method,
        path,
        headers: out,
        rejectUnauthorized: !o.noTLSVerify,
        servername: o.originServerName,
      });
    }
    if (s.kind !== 'http') throw new Error('not an HTTP service');
    const lib = s.protocol === 'https:' ? https : http;
    const sni =
      o.originServerName ??
      (o.matchSNItoHost ? authority.replace(/:\d+$/, '') : net.isIP(s.host) ? undefined : s.host);
    return lib.request({
      host: s.host,
      port: s.port,
      method,
      path,
      headers: out,
      agent: upgrade ? false : this.agents.get(s.protocol, o),
      servername: s.protocol === 'https:' ? sni : undefined,
      rejectUnauthorized: !o.noTLSVerify,
    });
  }

  /** Arms the connect timeout of an origin request; the callback runs if it fires. */
  private connectTimer(req: http.ClientRequest, ms: number, onTimeout: () => void): void {
    const timer = setTimeout(onTimeout, ms);
    req.on('socket', (socket: net.Socket) => {
      if (socket.connecting) socket.once('connect', () => clearTimeout(timer));
      else clearTimeout(timer);
    });
    req.on('close', () => clearTimeout(timer));
  }

  private http(stream: ServerHttp2Stream, headers: H2Headers, rule: CompiledRule): void {
    let req: http.ClientRequest;
    try {
      req = this.originRequest(headers, rule);
    } catch (err) {
      return this.fail(stream, 502, `origin request failed: ${(err as Error).message}`);
    }
    let answered = false;
    this.connectTimer(req, rule.options.connectTimeoutMs, () => {
      req.destroy(
        Object.assign(new Error(`dial to ${rule.serviceText} timed out`), { code: 'ETIMEDOUT' }),
      );
    });
    req.on('error', (err) => {
      if (!answered && !stream.headersSent && !stream.destroyed) {
        answered = true;
        this.fail(
          stream,
          502,
          `Unable to reach the origin service ${rule.serviceText}: ${err.message}`,
        );
      } else if (!stream.destroyed) stream.close(h2c.NGHTTP2_INTERNAL_ERROR);
    });
    req.on('response', (res) => {
      answered = true;
      if (stream.destroyed) {
        res.destroy();
        return;
      }
      const out = endToEndHeaders(res.headers);
      try {
        stream.respond({ ...out, ':status': res.statusCode ?? 502, [H.responseMeta]: META_ORIGIN });
      } catch (err) {
        res.destroy();
        return this.fail(stream, 502, `invalid origin response: ${(err as Error).message}`);
      }
      res.pipe(stream);
      res.on('error', () => stream.close(h2c.NGHTTP2_INTERNAL_ERROR));
    });
    stream.on('close', () => {
      if (
        !req.destroyed &&
        !(req as http.ClientRequest & { res?: http.IncomingMessage }).res?.complete
      )
        req.destroy();
    });
    stream.pipe(req);
  }

  private upgrade(
    stream: ServerHttp2Stream,
    headers: H2Headers,
    rule: CompiledRule,
    protocol: string,
  ): void {
    let req: http.ClientRequest;
    try {
      req = this.originRequest(headers, rule, protocol);
    } catch (err) {
      return this.fail(stream, 502, `origin request failed: ${(err as Error).message}`);
    }
    this.connectTimer(req, rule.options.connectTimeoutMs, () =>
      req.destroy(new Error(`dial to ${rule.serviceText} timed out`)),
    );
    req.on('error', (err) => {
      if (!stream.headersSent && !stream.destroyed)
        this.fail(
          stream,
          502,
          `Unable to reach the origin service ${rule.serviceText}: ${err.message}`,
        );
      else stream.destroy();
    });
    req.on('response', (res) => {
      // The origin declined the upgrade: an ordinary answer.
      stream.respond({
        ...endToEndHeaders(res.headers),
        ':status': res.statusCode ?? 502,
        [H.responseMeta]: META_ORIGIN,
      });
      res.pipe(stream);
    });
    req.on('upgrade', (res, socket, head) => {
      if (stream.destroyed) {
        socket.destroy();
        return;
      }
      stream.respond({
        ...endToEndHeaders(res.headers),
        ':status': 200,
        [H.upgrade]: protocol,
        [H.responseMeta]: META_ORIGIN,
      });
      if (head.length) stream.write(head);
      splice(stream, socket);
    });
    stream.on('close', () => {
      if (!req.destroyed && !req.writableEnded) req.destroy();
    });
    req.end();
  }

  private tcp(stream: ServerHttp2Stream, authority: string): void {
    const target = splitHostPort(authority);
    if (!target) {
      return respond(
        stream,
        { ':status': 400, [H.responseMeta]: META_CLOUDFLARED, [H.dialError]: 'EINVAL' },
        '',
      );
    }
    const socket = net.connect({ host: target.host, port: target.port, allowHalfOpen: true });
    socket.setNoDelay(true);
    const timer = setTimeout(
      () => socket.destroy(Object.assign(new Error('connect timeout'), { code: 'ETIMEDOUT' })),
      this.ctx.ingress().warpConnectTimeoutMs,
    );
    socket.once('connect', () => {
      clearTimeout(timer);
      if (stream.destroyed) return void socket.destroy();
      stream.respond({ ':status': 200 });
      splice(stream, socket);
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      if (!stream.headersSent && !stream.destroyed) {
        this.ctx.log('debug', `private network dial to ${authority} failed: ${err.message}`);
        respond(
          stream,
          {
            ':status': err.code === 'ETIMEDOUT' ? 504 : 502,
            [H.responseMeta]: META_CLOUDFLARED,
            [H.dialError]: err.code ?? 'EIO',
          },
          '',
        );
      }
    });
    stream.on('close', () => socket.destroy());
  }
}

function respond(stream: ServerHttp2Stream, headers: OutgoingHttpHeaders, body: string): void {
  if (stream.destroyed || stream.headersSent) return;
  try {
    stream.respond(headers);
    stream.end(body);
  } catch {
    stream.destroy();
  }
}

/** Reads and discards a request body we do not forward. */
function drain(stream: ServerHttp2Stream): void {
  stream.resume();
}

/** Joins an HTTP/2 stream and a socket in both directions, half-closes included. */
export function splice(stream: Duplex & { rstCode?: number }, socket: Duplex): void {
  stream.pipe(socket);
  socket.pipe(stream);
  const stop = () => {
    if (!socket.destroyed) socket.destroy();
    if (!stream.destroyed) stream.destroy();
  };
  socket.on('error', stop);
  stream.on('error', stop);
  socket.on('close', () => {
    // Let data already queued on the stream go out before it closes.
    if (!stream.destroyed) stream.end();
  });
  stream.on('close', () => {
    if (stream.rstCode) socket.destroy();
    else if (!socket.destroyed) socket.end();
  });
}
