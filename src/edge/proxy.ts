/**
 * Forwarding to origins: keep-alive connection pools, streamed bodies in both directions with
 * backpressure (pipe), WebSocket upgrades, the headers origins expect from this platform, and the
 * platform's error statuses for each way an origin can fail.
 */
import http, { type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { EdgeRequest } from './types.ts';
import { sendErrorPage, type EdgeErrorCode } from './error-pages.ts';
import { platformHeaders } from './origin-fetch.ts';

export interface ProxyOptions {
  connectTimeoutMs: number;
  responseTimeoutMs: number;
}

/** Responses up to this size are buffered and written in one go; larger ones stream. */
const SMALL_BODY = 64 * 1024;

/** Hop-by-hop headers (RFC 9110 §7.6.1) are never forwarded. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

export interface ProxyOutcome {
  status: number;
  bytesIn: number;
  bytesOut: number;
  originMs?: number;
  error?: string;
}

export class OriginProxy {
  private readonly httpAgent = new http.Agent({
    keepAlive: true,
    maxSockets: 512,
    maxFreeSockets: 128,
    scheduling: 'lifo',
  });
  private readonly httpsAgent = new https.Agent({
    keepAlive: true,
    maxSockets: 512,
    maxFreeSockets: 128,
    scheduling: 'lifo',
  });

  constructor(private readonly opts: ProxyOptions) {}

  close(): void {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }

  /** The request headers for the origin. */
  originHeaders(er: EdgeRequest, keepUpgrade: boolean): OutgoingHttpHeaders {
    const src = er.req.headers;
    const connectionListed = new Set(
      (src.connection ?? '')
        .toLowerCase()
        .split(',')
        .map((s) => s.trim()),
    );
    const out: OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(src)) {
      if (value === undefined) continue;
      if (
        (HOP_BY_HOP.has(name) || connectionListed.has(name)) &&
        !(keepUpgrade && (name === 'upgrade' || name === 'connection'))
      )
        continue;
      out[name] = value;
    }
    out.host = er.origin.hostHeader ?? er.req.headers.host ?? er.host;
    const prior = src['x-forwarded-for'];
    out['x-forwarded-for'] = prior
      ? `${Array.isArray(prior) ? prior.join(', ') : prior}, ${er.clientIp}`
      : er.clientIp;
    Object.assign(out, platformHeaders(er));
    if (keepUpgrade) {
      out.connection = 'Upgrade';
      out.upgrade = src.upgrade;
    }
    return out;
  }

  /** Proxies an ordinary request; resolves when the response is finished (or failed). */
  forward(er: EdgeRequest): Promise<ProxyOutcome> {
    const res = er.res!;
    const { req } = er;
    const outcome: ProxyOutcome = { status: 0, bytesIn: 0, bytesOut: 0 };
    const lib = er.origin.protocol === 'https:' ? https : http;
    return new Promise((resolve) => {
      let settled = false;
      const finish = (code?: EdgeErrorCode, error?: string) => {
        if (settled) return;
        settled = true;
        clearTimeout(connectTimer);
        if (code) {
          outcome.status = res.headersSent ? res.statusCode : code >= 1000 ? 530 : code;
          outcome.error = error;
          sendErrorPage(res, code, er.rayId, er.host);
        }
        resolve(outcome);
      };
      const sentAt = performance.now();
      const upstream = lib.request({
        host: er.origin.host,
        port: er.origin.port,
        method: req.method,
        path: req.url,
        headers: this.originHeaders(er, false),
        agent: er.origin.protocol === 'https:' ? this.httpsAgent : this.httpAgent,
        servername:
          er.origin.protocol === 'https:' && !net.isIP(er.origin.host) ? er.origin.host : undefined,
      });
      // Timers are per request only while connecting a new socket; pooled sockets are connected.
      let connectTimer: NodeJS.Timeout | undefined;
      upstream.on('socket', (socket) => {
        const awaitResponse = () => {
          clearTimeout(connectTimer);
          // An idle timeout on the socket (cheap internal timers): no byte from the origin for
          // this long before its response headers → 524.
          upstream.setTimeout(this.opts.responseTimeoutMs, () => {
            upstream.destroy(new Error('response timeout'));
            finish(524, 'origin response timeout');
          });
        };
        if ((socket as net.Socket).connecting) {
          connectTimer = setTimeout(() => {
            upstream.destroy(new Error('connect timeout'));
            finish(522, 'origin connect timeout');
          }, this.opts.connectTimeoutMs);
          socket.once('connect', awaitResponse);
        } else awaitResponse();
      });
      upstream.on('error', (err: NodeJS.ErrnoException) => {
        if (settled) return;
        if (err.code === 'ECONNREFUSED') finish(521, err.message);
        else if (err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') finish(1016, err.message);
        else if (res.headersSent) {
          // The origin died mid-body: cut the client off rather than pretend the body is complete.
          res.destroy(err);
          finish(undefined, err.message);
        } else finish(502, err.message);
      });
      upstream.on('response', (originRes) => {
        upstream.setTimeout(0);
        outcome.originMs = +(performance.now() - sentAt).toFixed(2);
        outcome.status = originRes.statusCode ?? 502;
        res.writeHead(
          outcome.status,
          originRes.statusMessage,
          responseHeaders(originRes.headers, er.rayId),
        );
        // Byte counts come from Content-Length when the origin sends one; only bodies of unknown
        // length are counted chunk by chunk.
        const declared = Number(originRes.headers['content-length']);
        if (Number.isFinite(declared) && declared <= SMALL_BODY) {
          // A small body is gathered and sent with the headers in one write.
          outcome.bytesOut = declared;
          const chunks: Buffer[] = [];
          originRes.on('data', (chunk: Buffer) => chunks.push(chunk));
          originRes.on('end', () => {
            res.end(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks));
          });
        } else {
          if (Number.isFinite(declared)) outcome.bytesOut = declared;
          else originRes.on('data', (chunk: Buffer) => (outcome.bytesOut += chunk.length));
          originRes.pipe(res);
        }
        originRes.on('end', () => finish());
        originRes.on('error', (err) => {
          res.destroy(err);
          finish(undefined, err.message);
        });
      });
      res.on('close', () => {
        // The client went away: stop work at the origin too.
        if (!res.writableFinished) upstream.destroy();
        finish();
      });
      const declaredIn = Number(req.headers['content-length']);
      const chunked = req.headers['transfer-encoding'] !== undefined;
      if (Number.isFinite(declaredIn)) outcome.bytesIn = declaredIn;
      else if (chunked) req.on('data', (chunk: Buffer) => (outcome.bytesIn += chunk.length));
      // Most requests have no body: end at once instead of setting up a pipe.
      if (!chunked && !(declaredIn > 0)) upstream.end();
      else req.pipe(upstream);
    });
  }

  /** Proxies a WebSocket (or any HTTP/1.1 Upgrade) by splicing the two sockets after the 101. */
  upgrade(er: EdgeRequest): Promise<ProxyOutcome> {
    const { socket: client, head } = er.upgrade!;
    const outcome: ProxyOutcome = { status: 0, bytesIn: 0, bytesOut: 0 };
    const lib = er.origin.protocol === 'https:' ? https : http;
    return new Promise((resolve) => {
      const fail = (code: EdgeErrorCode, error: string) => {
        outcome.status = code >= 1000 ? 530 : code;
        outcome.error = error;
        if (client.writable)
          client.end(
            `HTTP/1.1 ${outcome.status} Edge Error\r\ncf-ray: ${er.rayId}-OUT\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`,
          );
        resolve(outcome);
      };
      const upstream = lib.request({
        host: er.origin.host,
        port: er.origin.port,
        method: er.req.method,
        path: er.req.url,
        headers: this.originHeaders(er, true),
        timeout: this.opts.connectTimeoutMs,
      });
      upstream.on('timeout', () =>
        upstream.destroy(Object.assign(new Error('connect timeout'), { code: 'ETIMEDOUT' })),
      );
      upstream.on('error', (err: NodeJS.ErrnoException) => {
        if (err.code === 'ECONNREFUSED') fail(521, err.message);
        else if (err.code === 'ETIMEDOUT') fail(522, err.message);
        else if (err.code === 'ENOTFOUND') fail(1016, err.message);
        else fail(502, err.message);
      });
      upstream.on('response', (originRes) => {
        // The origin declined the upgrade: relay its answer as a plain response.
        outcome.status = originRes.statusCode ?? 502;
        const lines = [`HTTP/1.1 ${outcome.status} ${originRes.statusMessage ?? ''}`];
        for (const [k, v] of Object.entries(responseHeaders(originRes.headers, er.rayId)))
          lines.push(`${k}: ${String(v)}`);
        client.write(lines.join('\r\n') + '\r\nconnection: close\r\n\r\n');
        originRes.pipe(client);
        originRes.on('end', () => resolve(outcome));
      });
      upstream.on('upgrade', (originRes, originSocket, originHead) => {
        outcome.status = 101;
        upstream.setTimeout(0);
        const lines = [`HTTP/1.1 101 ${originRes.statusMessage ?? 'Switching Protocols'}`];
        for (let i = 0; i < originRes.rawHeaders.length; i += 2)
          lines.push(`${originRes.rawHeaders[i]}: ${originRes.rawHeaders[i + 1]}`);
        lines.push(`cf-ray: ${er.rayId}-OUT`);
        client.write(lines.join('\r\n') + '\r\n\r\n');
        if (originHead.length) client.write(originHead);
        if (head.length) originSocket.write(head);
        originSocket.on('data', (d: Buffer) => (outcome.bytesOut += d.length));
        client.on('data', (d: Buffer) => (outcome.bytesIn += d.length));
        originSocket.pipe(client);
        client.pipe(originSocket);
        const done = () => {
          originSocket.destroy();
          client.destroy();
          resolve(outcome);
        };
        originSocket.on('close', done);
        client.on('close', done);
        originSocket.on('error', () => client.destroy());
        client.on('error', () => originSocket.destroy());
      });
      upstream.end();
    });
  }
}

function responseHeaders(src: IncomingHttpHeaders, rayId: string): OutgoingHttpHeaders {
  const connectionListed = new Set(
    (src.connection ?? '')
      .toLowerCase()
      .split(',')
      .map((s) => s.trim()),
  );
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(src)) {
    if (value === undefined || HOP_BY_HOP.has(name) || connectionListed.has(name)) continue;
    out[name] = value;
  }
  out['cf-ray'] = `${rayId}-OUT`;
  return out;
}
