/**
 * The edge's origin handler for `<tunnel id>.cfargotunnel.com`: each visitor request becomes one
 * HTTP/2 stream on a live connection of the tunnel (round robin), with bodies streamed both ways;
 * a WebSocket becomes a stream carrying the upgraded bytes. No live connection: error 1033.
 */
import {
  constants as h2c,
  type ClientHttp2Stream,
  type IncomingHttpHeaders as H2Headers,
} from 'node:http2';
import { STATUS_CODES, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';
import {
  errorPage,
  sendErrorPage,
  type EdgeRequest,
  type OriginHandler,
} from '../../edge/index.ts';
import { endToEndHeaders, H, META_CLOUDFLARED } from '../../connector/protocol.ts';
import { splice } from '../../connector/origin.ts';
import type { ConnectionRegistry, LiveConnection } from './registry.ts';

export const TUNNEL_TARGET =
  /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.cfargotunnel\.com$/;

/** The headers the edge adds for origins, as for any proxied request. */
function visitorHeaders(er: EdgeRequest): OutgoingHttpHeaders {
  const out = endToEndHeaders(er.req.headers);
  const prior = er.req.headers['x-forwarded-for'];
  out['x-forwarded-for'] = prior
    ? `${Array.isArray(prior) ? prior.join(', ') : prior}, ${er.clientIp}`
    : er.clientIp;
  out['x-forwarded-proto'] = er.scheme;
  out['cf-connecting-ip'] = er.clientIp;
  out['cf-ray'] = `${er.rayId}-OUT`;
  out['cf-visitor'] = `{"scheme":"${er.scheme}"}`;
  out['cf-ipcountry'] = er.visitor.country;
  return out;
}

function responseHeaders(h: H2Headers, rayId: string): OutgoingHttpHeaders {
  const out = endToEndHeaders(h as IncomingHttpHeaders);
  delete out[H.responseMeta];
  delete out[H.upgrade];
  out['cf-ray'] = `${rayId}-OUT`;
  return out;
}

function rawError(
  socket: NodeJS.WritableStream & { destroyed: boolean },
  code: 1033 | 502,
  er: EdgeRequest,
): void {
  if (socket.destroyed) return;
  const page = errorPage(code, er.rayId, er.host);
  socket.end(
    `HTTP/1.1 ${page.status} Edge Error\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(page.body)}\r\ncf-ray: ${er.rayId}-OUT\r\nconnection: close\r\n\r\n${page.body}`,
  );
}

export function tunnelOriginHandler(
  registry: ConnectionRegistry,
  opts: { responseTimeoutMs: number },
): OriginHandler {
  return {
    matches: (target) => TUNNEL_TARGET.test(target),
    async handle(er) {
      const tunnelId = TUNNEL_TARGET.exec(er.origin.host)![1];
      const conn = registry.pick(tunnelId, er.route.accountId);
      if (!conn) {
        if (er.res) sendErrorPage(er.res, 1033, er.rayId, er.host);
        else if (er.upgrade) rawError(er.upgrade.socket, 1033, er);
        return;
      }
      if (er.upgrade) return proxyUpgrade(conn, er);
      return proxyHttp(conn, er, opts.responseTimeoutMs);
    },
  };
}

function open(
  conn: LiveConnection,
  headers: OutgoingHttpHeaders,
  endStream: boolean,
): ClientHttp2Stream | undefined {
  try {
    return conn.session.request(headers, { endStream });
  } catch {
    return undefined;
  }
}

function proxyHttp(
  conn: LiveConnection,
  er: EdgeRequest,
  responseTimeoutMs: number,
): Promise<void> {
  const { req } = er;
  const res = er.res!;
  const headers = visitorHeaders(er);
  headers[':method'] = req.method ?? 'GET';
  headers[':path'] = req.url ?? '/';
  headers[':scheme'] = er.scheme;
  headers[':authority'] = req.headers.host ?? er.host;
  const noBody =
    req.headers['transfer-encoding'] === undefined &&
    (req.headers['content-length'] === undefined || req.headers['content-length'] === '0');
  const stream = open(conn, headers, noBody);
  if (!stream) {
    sendErrorPage(res, 1033, er.rayId, er.host);
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      stream.close(h2c.NGHTTP2_CANCEL);
      if (!res.headersSent) sendErrorPage(res, 524, er.rayId, er.host);
      finish();
    }, responseTimeoutMs);
    stream.on('response', (h) => {
      clearTimeout(timer);
      const status = Number(h[':status']);
      if (h[H.responseMeta] === META_CLOUDFLARED && status === 502) {
        // The connector could not reach the origin: the platform's 502 page.
        stream.resume();
        sendErrorPage(res, 502, er.rayId, er.host);
        return finish();
      }
      res.writeHead(status, responseHeaders(h, er.rayId));
      stream.pipe(res);
    });
    stream.on('error', () => {
      if (!res.headersSent) sendErrorPage(res, 502, er.rayId, er.host);
      else res.destroy();
      finish();
    });
    stream.on('close', () => {
      if (!res.headersSent) {
        sendErrorPage(res, 502, er.rayId, er.host);
        finish();
      } else if (!res.writableEnded) {
        // Reset mid-body: cut the visitor off rather than pretend the body is complete.
        res.destroy();
      }
    });
    res.on('finish', finish);
    res.on('close', () => {
      if (!res.writableFinished && !stream.closed) stream.close(h2c.NGHTTP2_CANCEL);
      finish();
    });
    if (!noBody) req.pipe(stream);
  });
}

function proxyUpgrade(conn: LiveConnection, er: EdgeRequest): Promise<void> {
  const { socket, head } = er.upgrade!;
  const protocol = String(er.req.headers.upgrade ?? 'websocket').toLowerCase();
  const headers = visitorHeaders(er);
  headers[':method'] = er.req.method ?? 'GET';
  headers[':path'] = er.req.url ?? '/';
  headers[':scheme'] = er.scheme;
  headers[':authority'] = er.req.headers.host ?? er.host;
  headers[H.upgrade] = protocol;
  const stream = open(conn, headers, false);
  if (!stream) {
    rawError(socket, 1033, er);
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    let answered = false;
    stream.on('response', (h) => {
      answered = true;
      const status = Number(h[':status']);
      if (status === 200 && h[H.upgrade] === protocol) {
        const lines = [
          'HTTP/1.1 101 Switching Protocols',
          `Upgrade: ${protocol}`,
          'Connection: Upgrade',
        ];
        for (const [k, v] of Object.entries(responseHeaders(h, er.rayId))) {
          for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${String(one)}`);
        }
        socket.write(lines.join('\r\n') + '\r\n\r\n');
        if (head.length) stream.write(head);
        splice(stream, socket);
        socket.once('close', () => resolve());
        return;
      }
      if (h[H.responseMeta] === META_CLOUDFLARED && status === 502) {
        stream.resume();
        rawError(socket, 502, er);
        return resolve();
      }
      // The origin declined the upgrade: relay its answer and close.
      const lines = [`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Unknown'}`];
      for (const [k, v] of Object.entries(responseHeaders(h, er.rayId))) {
        for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${String(one)}`);
      }
      socket.write(lines.join('\r\n') + '\r\nconnection: close\r\n\r\n');
      stream.pipe(socket);
      stream.on('end', () => resolve());
    });
    stream.on('error', () => {
      if (!answered) rawError(socket, 502, er);
      else socket.destroy();
      resolve();
    });
    socket.once('close', () => {
      if (!stream.closed) stream.close(h2c.NGHTTP2_CANCEL);
      resolve();
    });
  });
}
