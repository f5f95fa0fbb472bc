/**
 * `outpost tunnel access --socks5 <host:port>`: a local SOCKS5 proxy (RFC 1928, no
 * authentication, CONNECT only). Each proxied TCP connection is one HTTP/1.1 upgrade to the
 * management API (`GET /_outpost/tunnel/access`, `Upgrade: outpost-tcp`, an API token, the
 * destination in `outpost-destination`); the edge finds the IP route covering the destination,
 * opens a `CONNECT` stream to a connector of that route's tunnel, and the connector dials the
 * address. Domain names are resolved here, as routes are by address.
 */
import http from 'node:http';
import https from 'node:https';
import net, { type AddressInfo, type Socket } from 'node:net';
import { lookup } from 'node:dns/promises';
import { ACCESS_PATH, ACCESS_UPGRADE, H, joinHostPort } from './protocol.ts';
import type { Log } from './run.ts';
import { listenOn } from '../core/listen.ts';

export interface AccessOptions {
  listenHost: string;
  listenPort: number;
  /** Base URL of the management API. */
  api: string;
  apiToken: string;
  account?: string;
  virtualNetwork?: string;
  log: Log;
}

/** SOCKS5 reply codes. */
const REP = {
  ok: 0,
  failure: 1,
  notAllowed: 2,
  netUnreachable: 3,
  hostUnreachable: 4,
  refused: 5,
  ttlExpired: 6,
  command: 7,
  addressType: 8,
} as const;

/** Reads exact byte counts from a socket before it is handed to the tunnel. */
class Reader {
  private buf = Buffer.alloc(0);
  private waiting?: { n: number; resolve: (b: Buffer) => void; reject: (e: Error) => void };
  private ended = false;

  constructor(private readonly socket: Socket) {
    socket.on('data', this.onData);
    socket.once('end', () => this.fail(new Error('client closed')));
    socket.once('error', (err) => this.fail(err));
  }

  private onData = (chunk: Buffer) => {
    this.buf = Buffer.concat([this.buf, chunk]);
    this.flush();
  };

  private fail(err: Error): void {
    this.ended = true;
    const w = this.waiting;
    this.waiting = undefined;
    w?.reject(err);
  }

  private flush(): void {
    const w = this.waiting;
    if (w && this.buf.length >= w.n) {
      this.waiting = undefined;
      const out = this.buf.subarray(0, w.n);
      this.buf = this.buf.subarray(w.n);
      w.resolve(out);
    }
  }

  read(n: number): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      if (this.ended && this.buf.length < n) return reject(new Error('client closed'));
      this.waiting = { n, resolve, reject };
      this.flush();
    });
  }

  /** Stops reading and returns what arrived beyond the handshake. */
  detach(): Buffer {
    this.socket.off('data', this.onData);
    this.socket.pause();
    const rest = this.buf;
    this.buf = Buffer.alloc(0);
    return rest;
  }
}

function reply(socket: Socket, rep: number): void {
  if (!socket.destroyed) socket.write(Buffer.from([5, rep, 0, 1, 0, 0, 0, 0, 0, 0]));
}

/** Maps the edge's refusal to a SOCKS5 reply code. */
function replyFor(status: number, dialError: string | undefined): number {
  if (status === 401 || status === 403) return REP.notAllowed;
  if (status === 404) return REP.netUnreachable;
  if (status === 503) return REP.netUnreachable;
  if (dialError === 'ECONNREFUSED') return REP.refused;
  if (dialError === 'ETIMEDOUT' || dialError === 'EHOSTUNREACH' || status === 504)
    return REP.hostUnreachable;
  if (dialError === 'ENETUNREACH') return REP.netUnreachable;
  return REP.failure;
}

export class SocksProxy {
  private server?: net.Server;
  private readonly sockets = new Set<Socket>();

  constructor(private readonly opts: AccessOptions) {}

  async listen(): Promise<AddressInfo> {
    const server = net.createServer((socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
      socket.on('error', () => socket.destroy());
      this.handle(socket).catch((err: unknown) => {
        this.opts.log('debug', `SOCKS5 session failed: ${(err as Error).message}`);
        socket.destroy();
      });
    });
    this.server = server;
    return listenOn(server, this.opts.listenPort, this.opts.listenHost);
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) =>
      this.server ? this.server.close(() => resolve()) : resolve(),
    );
  }

  private async handle(socket: Socket): Promise<void> {
    const r = new Reader(socket);
    const [ver, nmethods] = await r.read(2);
    if (ver !== 5) return void socket.destroy();
    const methods = await r.read(nmethods);
    if (!methods.includes(0)) {
      socket.end(Buffer.from([5, 0xff]));
      return;
    }
    socket.write(Buffer.from([5, 0]));
    const [, cmd, , atyp] = await r.read(4);
    let host: string;
    if (atyp === 1) host = [...(await r.read(4))].join('.');
    else if (atyp === 4) {
      const b = await r.read(16);
      host = Array.from({ length: 8 }, (_, i) => b.readUInt16BE(i * 2).toString(16)).join(':');
    } else if (atyp === 3) {
      const [len] = await r.read(1);
      host = (await r.read(len)).toString('utf8');
    } else {
      reply(socket, REP.addressType);
      return void socket.end();
    }
    const port = (await r.read(2)).readUInt16BE(0);
    if (cmd !== 1) {
      reply(socket, REP.command);
      return void socket.end();
    }
    let ip = host;
    if (!net.isIP(host)) {
      try {
        ip = (await lookup(host)).address;
      } catch {
        reply(socket, REP.hostUnreachable);
        return void socket.end();
      }
    }
    const rest = r.detach();
    await this.open(socket, ip, port, rest);
  }

  /** Opens the tunnel for one connection and splices it with the SOCKS client. */
  private open(client: Socket, ip: string, port: number, early: Buffer): Promise<void> {
    const base = new URL(this.opts.api);
    const prefix = base.pathname.replace(/\/+$/, '').replace(/\/client\/v4$/, '');
    const lib = base.protocol === 'https:' ? https : http;
    const headers: Record<string, string> = {
      connection: 'Upgrade',
      upgrade: ACCESS_UPGRADE,
      authorization: `Bearer ${this.opts.apiToken}`,
      [H.destination]: joinHostPort(ip, port),
    };
    if (this.opts.account) headers[H.account] = this.opts.account;
    if (this.opts.virtualNetwork) headers[H.virtualNetwork] = this.opts.virtualNetwork;
    const attempt = (retries: number): Promise<void> =>
      new Promise((resolve) => {
        const req = lib.request({
          host: base.hostname.replace(/^\[|\]$/g, ''),
          port: base.port || (base.protocol === 'https:' ? 443 : 80),
          path: `${prefix}${ACCESS_PATH}`,
          method: 'GET',
          agent: false,
          headers,
        });
        req.setTimeout(30_000, () => req.destroy(new Error('timed out waiting for the edge')));
        req.on('error', (err) => {
          this.opts.log('warn', `access to ${joinHostPort(ip, port)} failed: ${err.message}`);
          reply(client, REP.failure);
          client.end();
          resolve();
        });
        req.on('response', (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            if (res.statusCode === 503 && res.headers[H.retry] === 'now' && retries > 0)
              return void attempt(retries - 1).then(resolve);
            const dialError =
              typeof res.headers[H.dialError] === 'string'
                ? (res.headers[H.dialError] as string)
                : undefined;
            let message = Buffer.concat(chunks).toString('utf8');
            try {
              message = (JSON.parse(message) as { errors: { message: string }[] }).errors
                .map((e) => e.message)
                .join('; ');
            } catch {
              // Not an envelope.
            }
            this.opts.log(
              'info',
              `access to ${joinHostPort(ip, port)} refused (${res.statusCode}): ${message}`,
            );
            reply(client, replyFor(res.statusCode ?? 502, dialError));
            client.end();
            resolve();
          });
        });
        req.on('upgrade', (_res, upstream: Socket, head: Buffer) => {
          req.setTimeout(0);
          upstream.setTimeout(0);
          upstream.setNoDelay(true);
          reply(client, REP.ok);
          if (head.length) client.write(head);
          if (early.length) upstream.write(early);
          upstream.pipe(client);
          client.pipe(upstream);
          client.resume();
          const stop = () => {
            upstream.destroy();
            client.destroy();
          };
          upstream.on('error', stop);
          client.on('error', stop);
          upstream.once('close', () => client.end());
          client.once('close', () => upstream.end());
          this.opts.log('debug', `access to ${joinHostPort(ip, port)} opened`);
          resolve();
        });
        req.end();
      });
    return attempt(2);
  }
}
