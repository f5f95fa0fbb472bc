/**
 * "Send this Request to the request's origin and give me the Response": the origin leg of the
 * edge for code that holds a Fetch API `Request` instead of the visitor's socket (a snippet's
 * `fetch(request)`). Same target (`er.origin`, after origin rules), same forwarded headers and
 * the same error statuses as the proxy; bodies stream both ways and are passed on undecoded.
 */
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { Readable } from 'node:stream';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import type { DirectOrigin } from '../runtime/index.ts';
import type { EdgeRequest } from './types.ts';
import { EDGE_ERRORS, errorPage, type EdgeErrorCode } from './error-pages.ts';

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
const NULL_BODY = new Set([101, 204, 205, 304]);
const BUFFER_LIMIT = 256 * 1024;

/** The headers the platform adds to every request it sends to an origin (beside X-Forwarded-For). */
export function platformHeaders(er: EdgeRequest): Record<string, string> {
  return {
    'x-forwarded-proto': er.scheme,
    'cf-connecting-ip': er.clientIp,
    'cf-ray': `${er.rayId}-OUT`,
    'cf-visitor': `{"scheme":"${er.scheme}"}`,
    'cf-ipcountry': er.visitor.country,
  };
}

/**
 * Where a script's same-host `fetch()` may go without passing through Node (the runtime's
 * `DirectOrigin`): plain-HTTP address origins only; names (tunnels, external hosts) and TLS
 * origins are left to the origin fetcher. `once`: at most one such call (snippets, 1201).
 */
export function directOrigin(
  er: EdgeRequest,
  once?: DirectOrigin['once'],
): DirectOrigin | undefined {
  const { origin } = er;
  const family = net.isIP(origin.host);
  if (origin.protocol !== 'http:' || family === 0) return undefined;
  return {
    address: family === 6 ? `[${origin.host}]:${origin.port}` : `${origin.host}:${origin.port}`,
    host: er.host,
    hostHeader: origin.hostHeader,
    clientIp: er.clientIp,
    headers: platformHeaders(er),
    once,
  };
}

export interface OriginFetcherOptions {
  connectTimeoutMs: number;
  responseTimeoutMs: number;
}

export class OriginFetcher {
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

  constructor(private readonly opts: OriginFetcherOptions) {}

  close(): void {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }

  /** Sends `request` (its method, path, query, headers, body) to `er.origin`. */
  fetch(er: EdgeRequest, request: Request): Promise<Response> {
    const url = new URL(request.url);
    const headers: http.OutgoingHttpHeaders = {};
    for (const [name, value] of request.headers) {
      if (HOP_BY_HOP.has(name)) continue;
      if (name === 'set-cookie') continue;
      headers[name] = value;
    }
    headers.host = er.origin.hostHeader ?? (url.host || er.host);
    const prior = request.headers.get('x-forwarded-for');
    headers['x-forwarded-for'] =
      prior && !prior.endsWith(er.clientIp) ? `${prior}, ${er.clientIp}` : (prior ?? er.clientIp);
    Object.assign(headers, platformHeaders(er));
    const tls = er.origin.protocol === 'https:';
    const hasBody = request.body !== null && request.method !== 'GET' && request.method !== 'HEAD';
    if (!hasBody && request.method !== 'GET' && request.method !== 'HEAD')
      headers['content-length'] = '0';
    return new Promise<Response>((resolve) => {
      let settled = false;
      const fail = (code: EdgeErrorCode) => {
        if (settled) return;
        settled = true;
        clearTimeout(connectTimer);
        const page = errorPage(code, er.rayId, er.host);
        resolve(
          new Response(page.body, {
            status: page.status,
            statusText: EDGE_ERRORS[code].title,
            headers: { 'content-type': 'text/html; charset=utf-8', 'cf-ray': `${er.rayId}-OUT` },
          }),
        );
      };
      const upstream = (tls ? https : http).request({
        host: er.origin.host,
        port: er.origin.port,
        method: request.method,
        path: url.pathname + url.search,
        headers,
        agent: tls ? this.httpsAgent : this.httpAgent,
        servername: tls && !net.isIP(er.origin.host) ? er.origin.host : undefined,
      });
      let connectTimer: NodeJS.Timeout | undefined;
      upstream.on('socket', (socket) => {
        const awaitResponse = () => {
          clearTimeout(connectTimer);
          upstream.setTimeout(this.opts.responseTimeoutMs, () => {
            upstream.destroy(new Error('response timeout'));
            fail(524);
          });
        };
        if ((socket as net.Socket).connecting) {
          connectTimer = setTimeout(() => {
            upstream.destroy(new Error('connect timeout'));
            fail(522);
          }, this.opts.connectTimeoutMs);
          socket.once('connect', awaitResponse);
        } else awaitResponse();
      });
      upstream.on('error', (err: NodeJS.ErrnoException) => {
        if (err.code === 'ECONNREFUSED') fail(521);
        else if (err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') fail(1016);
        else fail(502);
      });
      upstream.on('response', (res) => {
        upstream.setTimeout(0);
        if (settled) {
          res.resume();
          return;
        }
        settled = true;
        const out = new Headers();
        for (let i = 0; i < res.rawHeaders.length; i += 2) {
          const name = res.rawHeaders[i];
          if (HOP_BY_HOP.has(name.toLowerCase())) continue;
          out.append(name, res.rawHeaders[i + 1]);
        }
        const status = res.statusCode ?? 502;
        if (status < 200 || status > 599) {
          res.resume();
          settled = false;
          fail(502);
          return;
        }
        const init = { status, statusText: res.statusMessage, headers: out };
        if (NULL_BODY.has(status) || request.method === 'HEAD') {
          res.resume();
          resolve(new Response(null, init));
          return;
        }
        // Small bodies of known length are read whole: cheaper than a stream per request.
        const length = Number(res.headers['content-length']);
        if (Number.isFinite(length) && length <= BUFFER_LIMIT) {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve(new Response(Buffer.concat(chunks) as Uint8Array<ArrayBuffer>, init)),
          );
          res.on('error', () => resolve(new Response(null, { status: 502 })));
          return;
        }
        resolve(new Response(Readable.toWeb(res) as ReadableStream<Uint8Array>, init));
      });
      if (hasBody) {
        const body = Readable.fromWeb(request.body as NodeReadableStream<Uint8Array>);
        body.on('error', (err) => upstream.destroy(err));
        body.pipe(upstream);
      } else upstream.end();
    });
  }
}
