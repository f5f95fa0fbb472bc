/**
 * The edge's HTTPS listener (`--edge-tls-port`): TLS with SNI, a certificate per active zone from
 * the local CA (or the operator's own in `<data>/edge-tls/zones/<zone>/cert.pem` + `key.pem`),
 * HTTP/2 or HTTP/1.1 chosen by ALPN, and optional client certificates (mTLS) checked against the
 * zone's `<data>/edge-tls/zones/<zone>/client-ca.pem`.
 *
 * Connections are accepted here and handed to the edge: HTTP/1.1 sockets go to the edge's own HTTP
 * server (so keep-alive and WebSocket upgrades behave as on the plain port), HTTP/2 sessions to an
 * HTTP/2 server whose requests enter the same pipeline. A client certificate is always asked for
 * and never required at the handshake: whether it was valid is a request attribute that rules act
 * on (`cf.tls_client_auth.cert_verified`), as on the platform.
 * Names outside any active zone fail the handshake (no certificate to present).
 */
import http2, { type Http2ServerRequest, type Http2ServerResponse } from 'node:http2';
import tls, { type SecureContext, type TLSSocket } from 'node:tls';
import type { Socket } from 'node:net';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ZoneIndex } from '../../areas/dns/index.ts';
import type { Logger } from '../../core/log.ts';
import { LocalCa } from './ca.ts';
import { listenOn } from '../../core/listen.ts';

/** What the listener needs from the edge server. */
export interface TlsEdgeTarget {
  /** Serves HTTP/1.1 on an accepted (already decrypted) socket. */
  acceptConnection(socket: Socket): void;
  /** Runs one request (HTTP/2 compatibility objects) through the edge. */
  handleRequest(req: IncomingMessage, res: ServerResponse): void;
}

interface ZoneContext {
  context: SecureContext;
  /** Stamp of the operator files it was built from ('' = issued by the local CA). */
  stamp: string;
  /** Whether the zone checks client certificates. */
  mtls: boolean;
}

const PSEUDO = /^:/;
/** Secure contexts kept (one per zone, plus one per deeper host name asked for). */
const MAX_CONTEXTS = 2_000;

export class EdgeTlsListener {
  readonly ca: LocalCa;
  private server?: tls.Server;
  private readonly h2 = http2.createServer();
  private readonly contexts = new Map<string, Promise<ZoneContext>>();
  private readonly sockets = new Set<TLSSocket>();

  constructor(
    dataDir: string,
    private readonly index: ZoneIndex,
    private readonly edge: TlsEdgeTarget,
    private readonly log: Logger,
  ) {
    this.ca = new LocalCa(dataDir);
    this.h2.on('request', (req: Http2ServerRequest, res: Http2ServerResponse) => {
      this.edge.handleRequest(asHttp1Request(req), asHttp1Response(res));
    });
    this.h2.on('sessionError', () => undefined);
  }

  /** Directory of operator-supplied files for one zone. */
  zoneDir(zoneName: string): string {
    return join(this.ca.dir, 'zones', zoneName);
  }

  async listen(host: string, port: number): Promise<number> {
    await this.ca.load();
    const fallback = await this.ca.issueServer('localhost', host);
    const server = tls.createServer({
      cert: fallback.certPem,
      key: fallback.keyPem,
      ALPNProtocols: ['h2', 'http/1.1'],
      requestCert: true,
      rejectUnauthorized: false,
      SNICallback: (servername, cb) => {
        this.contextFor(servername).then(
          (zc) => cb(null, zc.context),
          (err: Error) => cb(err),
        );
      },
    });
    server.on('secureConnection', (socket: TLSSocket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
      if (socket.alpnProtocol === 'h2') this.h2.emit('connection', socket);
      else this.edge.acceptConnection(socket);
    });
    server.on('tlsClientError', (err) => this.log.debug({ err: err.message }, 'edge TLS handshake failed'));
    this.server = server;
    return (await listenOn(server, port, host)).port;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const s of this.sockets) s.destroy();
    });
  }

  /** The secure context for a server name: the zone's, refreshed when the operator's files change. */
  private async contextFor(servername: string): Promise<ZoneContext> {
    const name = servername.toLowerCase().replace(/\.$/, '');
    const zone = this.index.zoneFor(name);
    if (!zone || zone.status !== 'active') throw new Error(`no active zone for ${name}`);
    // A name one label below the zone is covered by the zone's wildcard; deeper names get their own.
    const deeper = name.split('.').length > zone.name.split('.').length + 1;
    const key = deeper ? name : zone.name;
    const stamp = this.filesStamp(zone.name);
    const cached = this.contexts.get(key);
    if (cached) {
      const zc = await cached.catch(() => undefined);
      if (zc && zc.stamp === stamp) return zc;
    }
    const built = this.build(zone.name, deeper ? name : undefined, stamp);
    // Bounded: names below a zone are unlimited, so the oldest context makes room.
    if (this.contexts.size >= MAX_CONTEXTS) this.contexts.delete(this.contexts.keys().next().value as string);
    this.contexts.set(key, built);
    built.catch(() => this.contexts.delete(key));
    return built;
  }

  private filesStamp(zoneName: string): string {
    const dir = this.zoneDir(zoneName);
    return ['cert.pem', 'key.pem', 'client-ca.pem']
      .map((f) => {
        try {
          const st = statSync(join(dir, f));
          return `${st.mtimeMs}:${st.size}`;
        } catch {
          return '-';
        }
      })
      .join('|');
  }

  private async build(zoneName: string, extraName: string | undefined, stamp: string): Promise<ZoneContext> {
    const dir = this.zoneDir(zoneName);
    const read = (f: string): string | undefined => {
      try {
        return readFileSync(join(dir, f), 'utf8');
      } catch {
        return undefined;
      }
    };
    const ownCert = read('cert.pem');
    const ownKey = read('key.pem');
    const clientCa = read('client-ca.pem');
    const pair = ownCert && ownKey ? { certPem: ownCert, keyPem: ownKey } : await this.ca.issueServer(zoneName, extraName);
    const context = tls.createSecureContext({ cert: pair.certPem, key: pair.keyPem, ca: clientCa });
    this.log.debug({ zone: zoneName, own: Boolean(ownCert && ownKey), mtls: Boolean(clientCa) }, 'edge TLS context ready');
    return { context, stamp, mtls: Boolean(clientCa) };
  }

  /** Whether the zone of a server name checks client certificates (for the request attributes). */
  async zoneChecksClients(servername: string): Promise<boolean> {
    try {
      return (await this.contextFor(servername)).mtls;
    } catch {
      return false;
    }
  }
}

/**
 * HTTP/2 requests as the edge's HTTP/1.1 code reads them: `host` from `:authority`, no pseudo
 * headers (which no HTTP/1.1 origin accepts).
 */
function asHttp1Request(req: Http2ServerRequest): IncomingMessage {
  const src = req.headers;
  const headers: Record<string, string | string[] | undefined> = {};
  for (const [k, v] of Object.entries(src)) if (!PSEUDO.test(k)) headers[k] = v;
  if (!headers.host && src[':authority']) headers.host = src[':authority'];
  const rawHeaders: string[] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) if (!PSEUDO.test(raw[i])) rawHeaders.push(raw[i], raw[i + 1]);
  if (!src.host && src[':authority']) rawHeaders.push('host', String(src[':authority']));
  Object.defineProperty(req, 'headers', { value: headers, configurable: true });
  Object.defineProperty(req, 'rawHeaders', { value: rawHeaders, configurable: true });
  return req as unknown as IncomingMessage;
}

/** HTTP/2 has no reason phrases; the edge's writes pass one, which HTTP/2 would warn about. */
function asHttp1Response(res: Http2ServerResponse): ServerResponse {
  const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => unknown;
  Object.defineProperty(res, 'writeHead', {
    configurable: true,
    value: (status: number, reason?: unknown, headers?: unknown) =>
      typeof reason === 'string' || reason === undefined ? writeHead(status, headers) : writeHead(status, reason),
  });
  return res as unknown as ServerResponse;
}
