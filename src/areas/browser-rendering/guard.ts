/**
 * What rendered pages may reach. Private, loopback, link-local and other non-public addresses are
 * refused unless an operator allows their range (`--browser-allow 127.0.0.0/8`). Every Chromium
 * Outpost starts sends all its traffic (HTTP, HTTPS tunnels, WebSockets) through `GuardProxy`, a
 * loopback forward proxy that resolves the host itself, checks every address and connects to the
 * checked one, so neither a redirect, a subresource nor a DNS answer that changes between check and
 * use gets past it.
 */
import http from 'node:http';
import net from 'node:net';
import { lookup } from 'node:dns/promises';
import type { Duplex } from 'node:stream';
import type { Logger } from '../../core/log.ts';
import { listenOn } from '../../core/listen.ts';

interface Cidr {
  family: 4 | 6;
  bytes: Buffer;
  prefix: number;
}

/** Ranges that are not the public internet (IANA special-purpose registries, abridged). */
const BLOCKED = [
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12',
  '192.0.0.0/24', '192.0.2.0/24', '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24',
  '203.0.113.0/24', '224.0.0.0/4', '240.0.0.0/4',
  '::/128', '::1/128', '::ffff:0:0/96', '64:ff9b::/96', '100::/64', '2001:db8::/32', 'fc00::/7',
  'fe80::/10', 'ff00::/8',
].map((c) => parseCidr(c)!);

function toBytes(ip: string): Buffer | undefined {
  const family = net.isIP(ip);
  if (family === 4) return Buffer.from(ip.split('.').map(Number));
  if (family !== 6) return undefined;
  let text = ip;
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  let tail: number[] = [];
  if (v4) {
    tail = v4[1].split('.').map(Number);
    text = text.slice(0, -v4[1].length) + '0:0';
  }
  const [head, rest] = text.split('::');
  const h = head ? head.split(':') : [];
  const r = rest !== undefined && rest !== '' ? rest.split(':') : [];
  const groups = rest === undefined ? h : [...h, ...Array(8 - h.length - r.length).fill('0'), ...r];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  if (v4) out.set(tail, 12);
  return out;
}

export function parseCidr(text: string): Cidr | undefined {
  const [ip, len] = text.trim().split('/');
  const bytes = toBytes(ip);
  if (!bytes) return undefined;
  const family = bytes.length === 4 ? 4 : 6;
  const prefix = len === undefined ? bytes.length * 8 : Number(len);
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > bytes.length * 8) return undefined;
  return { family, bytes, prefix };
}

function contains(c: Cidr, addr: Buffer): boolean {
  if (addr.length !== c.bytes.length) return false;
  let bits = c.prefix;
  for (let i = 0; bits > 0; i++, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if ((addr[i] & mask) !== (c.bytes[i] & mask)) return false;
  }
  return true;
}

export class AddressPolicy {
  private readonly allowed: Cidr[];

  constructor(allow: string[]) {
    this.allowed = allow.map((a) => {
      const c = parseCidr(a);
      if (!c) throw new Error(`--browser-allow: ${a} is not an address or CIDR range`);
      return c;
    });
  }

  /** Undefined when the address may be reached, else why not. */
  check(ip: string): string | undefined {
    let bytes = toBytes(ip);
    if (!bytes) return `${ip} is not an IP address`;
    // An IPv4-mapped IPv6 address is judged as the IPv4 address it carries.
    if (bytes.length === 16 && bytes.subarray(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff) {
      bytes = bytes.subarray(12);
    }
    if (this.allowed.some((c) => contains(c, bytes))) return undefined;
    if (BLOCKED.some((c) => contains(c, bytes))) {
      return `${ip} is a private or loopback address; an operator can allow its range with --browser-allow`;
    }
    return undefined;
  }

  /** Resolves `host` and returns an address that may be reached, or throws with the reason. */
  async resolve(host: string): Promise<string> {
    const bare = host.replace(/^\[|\]$/g, '');
    const addrs = net.isIP(bare) ? [bare] : (await lookup(bare, { all: true })).map((a) => a.address);
    if (addrs.length === 0) throw new BlockedError(`${host} does not resolve`);
    for (const a of addrs) {
      const why = this.check(a);
      if (why) throw new BlockedError(`${host}: ${why}`);
    }
    return addrs[0];
  }
}

export class BlockedError extends Error {}

/** Marks the proxy's own answers (`blocked`, `unreachable`), so a page load can report them. */
export const GUARD_HEADER = 'x-outpost-guard';

/** A forward proxy on loopback that lets Chromium reach only what the policy allows. */
export class GuardProxy {
  private server?: http.Server;
  private readonly sockets = new Set<Duplex>();
  address = '';

  constructor(
    private readonly policy: AddressPolicy,
    private readonly log: Logger,
  ) {}

  async start(): Promise<string> {
    if (this.address) return this.address;
    const server = http.createServer((req, res) => void this.forward(req, res));
    server.on('connect', (req, socket: Duplex, head: Buffer) => void this.tunnel(req, socket, head));
    server.on('connection', (s: net.Socket) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    const { port } = await listenOn(server, 0, '127.0.0.1');
    this.server = server;
    this.address = `127.0.0.1:${port}`;
    return this.address;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.address = '';
  }

  private async forward(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let url: URL;
    try {
      url = new URL(req.url ?? '');
    } catch {
      res.writeHead(400).end('absolute URL expected');
      return;
    }
    let ip: string;
    try {
      ip = await this.policy.resolve(url.hostname);
    } catch (err) {
      this.refuse(res, err, url.hostname);
      return;
    }
    const headers = { ...req.headers };
    delete headers['proxy-connection'];
    const upstream = http.request(
      { host: ip, port: url.port || 80, method: req.method, path: url.pathname + url.search, headers, setHost: false },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.rawHeaders);
        up.pipe(res);
      },
    );
    upstream.on('error', (err) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain', [GUARD_HEADER]: 'unreachable' });
      res.end(`${url.host} could not be reached: ${(err as NodeJS.ErrnoException).code ?? err.message}`);
    });
    req.pipe(upstream);
  }

  private async tunnel(req: http.IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    socket.on('error', () => {});
    const m = /^(.*):(\d+)$/.exec(req.url ?? '');
    if (!m) {
      socket.end('HTTP/1.1 400 Bad Request\r\n\r\n');
      return;
    }
    let ip: string;
    try {
      ip = await this.policy.resolve(m[1]);
    } catch (err) {
      this.log.info({ host: m[1], reason: (err as Error).message }, 'browser request blocked');
      socket.end('HTTP/1.1 403 Forbidden\r\n\r\n');
      return;
    }
    const up = net.connect(Number(m[2]), ip, () => {
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length) up.write(head);
      up.pipe(socket);
      socket.pipe(up);
    });
    this.sockets.add(up);
    up.on('close', () => this.sockets.delete(up));
    up.on('error', () => socket.destroy());
    socket.on('close', () => up.destroy());
  }

  private refuse(res: http.ServerResponse, err: unknown, host: string): void {
    const message = err instanceof BlockedError ? err.message : `${host}: ${(err as Error).message}`;
    this.log.info({ host, reason: message }, 'browser request blocked');
    res.writeHead(403, { 'content-type': 'text/plain', [GUARD_HEADER]: 'blocked' }).end(message);
  }
}
