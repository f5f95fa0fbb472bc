/**
 * TURN server (RFC 8656) with STUN Binding (RFC 8489), UDP relaying only,
 * reachable over UDP, TCP and optionally TLS.
 *
 * Authentication is the long-term credential mechanism with TURN REST
 * shared-secret usernames (`<unix-expiry-seconds>:<label>`, password =
 * base64(HMAC-SHA1(secret, username))), so credentials minted by the API for
 * coturn's `use-auth-secret` work unchanged. Several secrets may be valid at
 * once (one per relay key), hence `secretsFor()` returns candidates.
 *
 * Revocation: a periodic sweep asks `secretsFor()` again for every username
 * with live allocations and tears down those no longer backed by a secret.
 *
 * UDP clients with an allocation get a socket of their own, connected to them
 * and sharing the listener's address and port (SO_REUSEADDR), as coturn does:
 * one listener buffer shared by every client was where datagrams were lost
 * under load. Limitation: the kernel finds a datagram's socket by scanning the
 * sockets on that port, so tens of thousands of UDP allocations on one port
 * cost lookup time per datagram.
 */
import { createHmac, randomBytes, randomFillSync, timingSafeEqual } from 'node:crypto';
import dgram from 'node:dgram';
import dns from 'node:dns';
import net from 'node:net';
import tls from 'node:tls';
import {
  Attr,
  FAMILY_IPV4,
  FAMILY_IPV6,
  HEADER_LENGTH,
  MAGIC_COOKIE,
  MAX_CHANNEL,
  MAX_CHANNEL_RFC5766,
  MIN_CHANNEL,
  StunClass,
  StunMethod,
  TRANSPORT_UDP,
  attrErrorCode,
  attrString,
  attrUInt32,
  attrUnknownAttributes,
  attrXorAddress,
  canonicalIp,
  decodeAddressFamily,
  decodeChannelNumber,
  decodeRequestedTransport,
  decodeStun,
  decodeString,
  decodeUInt32,
  decodeXorAddress,
  encodeMessageType,
  encodeStun,
  getAttribute,
  getAttributes,
  longTermKey,
  parseIp,
  restPassword,
  streamFrameLength,
  unknownRequiredAttributes,
  verifyIntegrity,
  verifyIntegritySha256,
  type OutgoingAttribute,
  type StunMessage,
  type TransportAddress,
} from './stun.ts';

export interface TurnServerOptions {
  /** Listen address, default '127.0.0.1'. */
  host: string;
  /** 0 = pick a free port. */
  udpPort: number;
  /** 0 = pick a free port, trying the UDP port number first so one number serves both. */
  tcpPort: number;
  /** Optional TURN over TLS. */
  tls?: { port: number; cert: string | Buffer; key: string | Buffer };
  /**
   * Extra listeners for the platform's alternative ports (53/udp, 80/tcp, 443/tls). One that
   * cannot be opened is skipped with a warning and reported in `alternateFailures`.
   */
  alternates?: Array<{ form: AlternateForm; port: number }>;
  /** e.g. 'outpost.local' */
  realm: string;
  /** Address relayed sockets bind to and advertise, default '127.0.0.1'. */
  relayAddress: string;
  /** Inclusive port range for relayed sockets; [0, 0] lets the OS choose. */
  relayPortRange: [number, number];
  /** Loopback and private ranges are refused as peers unless true. */
  allowLoopbackPeers: boolean;
  /** Allocations per username; beyond it Allocate gets 486. */
  maxAllocationsPerUsername: number;
  /** Default 600; capped at 3600. */
  defaultLifetimeSec?: number;
  /** Nonce validity; an older nonce gets 438 Stale Nonce. Default 600. */
  nonceTtlSec?: number;
  /** Millisecond clock, injectable for tests. */
  now?: () => number;
  /** Given the USERNAME, return candidate HMAC secrets (one per relay key that could have minted it), or [] if the username is unknown/revoked. */
  secretsFor(username: string): string[] | Promise<string[]>;
  log?: (level: 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>) => void;
  /**
   * Only accept RFC 8656 channel numbers (0x4000-0x4FFF). Default false: the
   * RFC 5766 range up to 0x7FFF is accepted too, because RFC 5766 clients
   * (e.g. turnutils_uclient) pick channels from it and would otherwise get 400.
   */
  strictChannelNumbers?: boolean;
}

export type AlternateForm = 'udp53' | 'tcp80' | 'tls443';

export interface TurnServer {
  udpPort: number;
  tcpPort: number;
  tlsPort?: number;
  /** Alternative listeners that opened, by form. */
  alternatePorts: Partial<Record<AlternateForm, number>>;
  /** Alternative listeners that could not be opened, with the reason. */
  alternateFailures: Array<{ form: AlternateForm; port: number; error: string }>;
  /** Tear down every allocation whose username is revoked now (called by the API on revoke / key delete). */
  dropUsername(username: string): void;
  /** Re-check all live allocations: drop those whose secretsFor() returns [] or whose expiry passed. */
  sweep(): Promise<void>;
  stats(): { allocations: number; relayedPackets: number };
  close(): Promise<void>;
}

const SOFTWARE = 'Outpost TURN';
const MAX_LIFETIME_SEC = 3600;
const DEFAULT_LIFETIME_SEC = 600;
const DEFAULT_NONCE_TTL_SEC = 600;
const PERMISSION_LIFETIME_MS = 300_000;
const CHANNEL_LIFETIME_MS = 600_000;
const RESERVATION_LIFETIME_MS = 30_000;
const SWEEP_INTERVAL_MS = 1_000;
const MAX_PORT_ATTEMPTS = 64;
/** Relayed data to a TCP client is dropped (as UDP would) once this much is queued. */
const MAX_STREAM_BACKLOG = 1 << 20;
/** Largest possible frame is a STUN message with a 64 KiB body. */
const MAX_STREAM_PENDING = HEADER_LENGTH + 0xffff + 4;
/** A stream that has not allocated by then is closed, so idle connections cannot pile up. */
const STREAM_IDLE_MS = 60_000;
const SOCKET_BUFFER_BYTES = 1 << 21;
/** STUN bodies are limited to 64 KiB: XOR-PEER-ADDRESS (IPv6) and the DATA header must fit too. */
const MAX_DATA_INDICATION_PAYLOAD = 0xffff - 24 - 4 - 3;

/** Attributes the codec knows but this server does not implement (answered with 420). */
const UNSUPPORTED_ATTRIBUTES: ReadonlySet<number> = new Set([
  Attr.ChangeRequest,
  Attr.PasswordAlgorithm,
  Attr.Userhash,
]);

const DATA_INDICATION_TYPE = encodeMessageType(StunMethod.Data, StunClass.Indication);

type LinkKind = 'udp' | 'tcp' | 'tls';

/** The client side of a 5-tuple: a UDP source address or one TCP/TLS connection. */
interface ClientLink {
  kind: LinkKind;
  /** Remote address as the OS reports it (used for sending and lookups). */
  address: string;
  port: number;
  stream: net.Socket | null;
  /** UDP links: the alternative-port socket the client talks to (null: the main UDP socket). */
  socket?: dgram.Socket | null;
  /**
   * UDP links with an allocation: a socket of their own, bound to the listener's address and port
   * and connected to the client (see `openClientSocket`). Null until it is ready or when it could
   * not be opened: the listener socket serves then.
   */
  connected?: dgram.Socket | null;
  /** Stream links carry their allocation directly; UDP uses the 5-tuple map. */
  allocation: Allocation | null;
}

interface Permission {
  expiresAt: number;
  /** Peer IP as 4 or 16 bytes, kept so Data indications need no parsing. */
  ip: Buffer;
}

interface ChannelBinding {
  number: number;
  peerAddress: string;
  peerPort: number;
  expiresAt: number;
}

interface Allocation {
  link: ClientLink;
  username: string;
  key: Buffer;
  /** Transaction id of the Allocate that created it, to answer retransmissions. */
  allocateTid: Buffer;
  allocateResponse: Buffer;
  relay: dgram.Socket;
  relayPort: number;
  expiresAt: number;
  permissions: Map<string, Permission>;
  channels: Map<number, ChannelBinding>;
  /** peer address -> peer port -> binding, so the peer->client path builds no strings. */
  channelsByPeer: Map<string, Map<number, ChannelBinding>>;
  /** A UDP client's own socket was asked for (at its first permission: see `openClientSocket`). */
  ownSocketRequested: boolean;
  closed: boolean;
}

interface Reservation {
  socket: dgram.Socket;
  port: number;
  expiresAt: number;
}

interface AuthResult {
  username: string;
  key: Buffer;
  integrity: 'sha1' | 'sha256';
}

interface RelayBinding {
  socket: dgram.Socket;
  port: number;
  reserved?: { socket: dgram.Socket; port: number };
}

type LogFn = NonNullable<TurnServerOptions['log']>;

export async function startTurnServer(opts: TurnServerOptions): Promise<TurnServer> {
  const server = new OutpostTurnServer(opts);
  await server.listen();
  return server;
}

class OutpostTurnServer implements TurnServer {
  udpPort = 0;
  tcpPort = 0;
  tlsPort?: number;
  alternatePorts: Partial<Record<AlternateForm, number>> = {};
  alternateFailures: Array<{ form: AlternateForm; port: number; error: string }> = [];
  private extraSockets: dgram.Socket[] = [];
  private extraServers: net.Server[] = [];

  private readonly host: string;
  private readonly realm: string;
  private readonly relayAddress: string;
  private readonly relayFamily: 4 | 6;
  private readonly defaultLifetimeSec: number;
  private readonly nonceTtlMs: number;
  private readonly now: () => number;
  private readonly log: LogFn;
  private readonly nonceKey = randomBytes(32);
  private readonly maxChannel: number;

  private udp: dgram.Socket | null = null;
  private tcp: net.Server | null = null;
  private tlsServer: tls.Server | null = null;
  private readonly streams = new Set<net.Socket>();

  private readonly allocations = new Set<Allocation>();
  /** UDP 5-tuples: client port -> client address -> allocation (no per-packet key strings). */
  private readonly udpAllocations = new Map<number, Map<string, Allocation>>();
  private readonly byUsername = new Map<string, Set<Allocation>>();
  /** Allocations being created, counted against quota and guarded against duplicates. */
  private readonly pendingTuples = new Set<string>();
  private readonly pendingPerUser = new Map<string, number>();
  private readonly reservations = new Map<string, Reservation>();
  private readonly relayPortsInUse = new Set<number>();

  private relayedPackets = 0;
  private sweepTimer: NodeJS.Timeout | null = null;
  private sweeping = false;
  private closed = false;

  private tidPool = Buffer.allocUnsafe(12 * 512);
  private tidPoolOffset = this.tidPool.length;

  constructor(private readonly opts: TurnServerOptions) {
    this.host = opts.host || '127.0.0.1';
    this.realm = opts.realm;
    this.relayAddress = opts.relayAddress || '127.0.0.1';
    const relayIp = parseIp(this.relayAddress);
    if (!relayIp) throw new Error(`relayAddress must be an IP literal: ${this.relayAddress}`);
    this.relayFamily = relayIp.length === 4 ? 4 : 6;
    this.defaultLifetimeSec = Math.min(
      Math.max(opts.defaultLifetimeSec ?? DEFAULT_LIFETIME_SEC, 1),
      MAX_LIFETIME_SEC,
    );
    this.nonceTtlMs = Math.max(opts.nonceTtlSec ?? DEFAULT_NONCE_TTL_SEC, 1) * 1000;
    this.now = opts.now ?? Date.now;
    this.log = opts.log ?? (() => {});
    this.maxChannel = opts.strictChannelNumbers ? MAX_CHANNEL : MAX_CHANNEL_RFC5766;
  }

  // -------------------------------------------------------------------------
  // Lifecycle

  async listen(): Promise<void> {
    try {
      await this.listenUdp();
      await this.listenTcp();
      if (this.opts.tls) await this.listenTls(this.opts.tls);
      for (const alt of this.opts.alternates ?? []) await this.listenAlternate(alt.form, alt.port);
    } catch (err) {
      await this.close();
      throw err;
    }
    if (this.relayAddress === '0.0.0.0' || this.relayAddress === '::') {
      this.log('warn', 'relayAddress is a wildcard; clients will be told to send to it', {
        relayAddress: this.relayAddress,
      });
    }
    this.sweepTimer = setInterval(() => this.periodicSweep(), SWEEP_INTERVAL_MS);
    this.sweepTimer.unref();
    this.log('info', 'turn server listening', {
      host: this.host,
      udpPort: this.udpPort,
      tcpPort: this.tcpPort,
      tlsPort: this.tlsPort,
      relayAddress: this.relayAddress,
    });
  }

  private async listenUdp(): Promise<void> {
    const socket = await bindListener(
      net.isIPv6(this.host) ? 'udp6' : 'udp4',
      this.host,
      this.opts.udpPort,
    );
    this.udp = socket;
    setBufferSizes(socket);
    socket.on('error', (err) => this.log('warn', 'udp socket error', { error: String(err) }));
    socket.on('message', (buf, rinfo) => this.onUdpMessage(buf, rinfo, null));
    this.udpPort = socket.address().port;
  }

  /** One alternative-port listener; a failure to open it is reported, not fatal. */
  private async listenAlternate(form: AlternateForm, port: number): Promise<void> {
    try {
      if (form === 'udp53') {
        const socket = await bindListener(net.isIPv6(this.host) ? 'udp6' : 'udp4', this.host, port);
        setBufferSizes(socket);
        socket.on('error', (err) => this.log('warn', 'udp socket error', { error: String(err) }));
        socket.on('message', (buf, rinfo) => this.onUdpMessage(buf, rinfo, socket));
        this.extraSockets.push(socket);
        this.alternatePorts[form] = socket.address().port;
        return;
      }
      const tlsCfg = this.opts.tls;
      if (form === 'tls443' && !tlsCfg) throw new Error('TURN over TLS is off (--relay-tls)');
      const server =
        form === 'tls443'
          ? tls.createServer({ cert: tlsCfg!.cert, key: tlsCfg!.key }, (socket) => this.onStreamConnection(socket, 'tls'))
          : net.createServer((socket) => this.onStreamConnection(socket, 'tcp'));
      server.on('error', (err) => this.log('warn', 'alternative listener error', { form, error: String(err) }));
      this.alternatePorts[form] = await listenServer(server, this.host, port);
      this.extraServers.push(server);
    } catch (err) {
      const error = (err as Error).message ?? String(err);
      this.alternateFailures.push({ form, port, error });
    }
  }

  private async listenTcp(): Promise<void> {
    const server = net.createServer((socket) => this.onStreamConnection(socket, 'tcp'));
    server.on('error', (err) => this.log('warn', 'tcp server error', { error: String(err) }));
    this.tcp = server;
    const wanted = this.opts.tcpPort;
    if (wanted !== 0) {
      this.tcpPort = await listenServer(server, this.host, wanted);
      return;
    }
    // Prefer the UDP port number so clients can use one port for both.
    try {
      this.tcpPort = await listenServer(server, this.host, this.udpPort);
    } catch {
      this.tcpPort = await listenServer(server, this.host, 0);
    }
  }

  private async listenTls(cfg: NonNullable<TurnServerOptions['tls']>): Promise<void> {
    const server = tls.createServer({ cert: cfg.cert, key: cfg.key }, (socket) =>
      this.onStreamConnection(socket, 'tls'),
    );
    server.on('tlsClientError', (err) =>
      this.log('info', 'tls handshake failed', { error: String(err) }),
    );
    server.on('error', (err) => this.log('warn', 'tls server error', { error: String(err) }));
    this.tlsServer = server;
    this.tlsPort = await listenServer(server, this.host, cfg.port);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    for (const alloc of [...this.allocations]) this.deleteAllocation(alloc, 'server closing');
    for (const r of this.reservations.values()) closeQuietly(r.socket);
    this.reservations.clear();
    for (const s of this.streams) s.destroy();
    this.streams.clear();
    const waits: Promise<void>[] = [];
    if (this.udp) waits.push(closeDgram(this.udp));
    if (this.tcp) waits.push(closeServer(this.tcp));
    if (this.tlsServer) waits.push(closeServer(this.tlsServer));
    for (const socket of this.extraSockets) waits.push(closeDgram(socket));
    for (const server of this.extraServers) waits.push(closeServer(server));
    await Promise.all(waits);
  }

  stats(): { allocations: number; relayedPackets: number } {
    return { allocations: this.allocations.size, relayedPackets: this.relayedPackets };
  }

  dropUsername(username: string): void {
    this.dropUsernameFor(username, 'credential revoked');
  }

  // -------------------------------------------------------------------------
  // Sweeping: expiry of allocations, permissions, channels, reservations, and revocation.

  private periodicSweep(): void {
    if (this.sweeping || this.closed) return;
    this.sweeping = true;
    this.sweep()
      .catch((err) => this.log('error', 'sweep failed', { error: String(err) }))
      .finally(() => {
        this.sweeping = false;
      });
  }

  async sweep(): Promise<void> {
    const now = this.now();
    this.expireState(now);
    const checks: Promise<void>[] = [];
    for (const username of [...this.byUsername.keys()])
      checks.push(this.recheckUsername(username, now));
    await Promise.all(checks);
  }

  private expireState(now: number): void {
    for (const alloc of [...this.allocations]) {
      if (alloc.expiresAt <= now) {
        this.deleteAllocation(alloc, 'lifetime expired');
        continue;
      }
      for (const [ip, perm] of alloc.permissions)
        if (perm.expiresAt <= now) alloc.permissions.delete(ip);
      for (const ch of alloc.channels.values()) if (ch.expiresAt <= now) removeChannel(alloc, ch);
    }
    for (const [token, r] of this.reservations) {
      if (r.expiresAt > now) continue;
      this.reservations.delete(token);
      this.relayPortsInUse.delete(r.port);
      closeQuietly(r.socket);
    }
  }

  /** Drops the username's allocations when it expired or no current secret reproduces their key. */
  private async recheckUsername(username: string, now: number): Promise<void> {
    if (usernameExpired(username, now)) {
      this.dropUsernameFor(username, 'credential expired');
      return;
    }
    let secrets: string[];
    try {
      secrets = await this.opts.secretsFor(username);
    } catch (err) {
      // A transient lookup failure should not cut live calls; the next sweep retries.
      this.log('warn', 'secretsFor failed during sweep', { username, error: String(err) });
      return;
    }
    const set = this.byUsername.get(username);
    if (!set) return;
    const valid = secrets.map((s) => longTermKey(username, this.realm, restPassword(s, username)));
    for (const alloc of [...set]) {
      if (!valid.some((k) => k.equals(alloc.key)))
        this.deleteAllocation(alloc, 'credential revoked', true);
    }
  }

  private dropUsernameFor(username: string, reason: string): void {
    const set = this.byUsername.get(username);
    if (!set) return;
    for (const alloc of [...set]) this.deleteAllocation(alloc, reason, true);
  }

  // -------------------------------------------------------------------------
  // Ingress

  private onUdpMessage(buf: Buffer, rinfo: dgram.RemoteInfo, socket: dgram.Socket | null): void {
    try {
      const top = buf.length > 0 ? buf[0] & 0xc0 : 0xc0;
      if (top === 0x40) {
        const alloc = this.udpAllocations.get(rinfo.port)?.get(rinfo.address);
        if (alloc !== undefined) this.relayChannelData(alloc, buf);
        return;
      }
      if (top !== 0) return;
      const alloc = this.udpAllocations.get(rinfo.port)?.get(rinfo.address);
      const link = alloc?.link ?? udpLink(rinfo, socket);
      this.handleStun(link, buf);
    } catch (err) {
      this.log('error', 'udp message handling failed', { error: String(err) });
    }
  }

  /** A datagram on an allocation's own client socket: the 5-tuple is known, no lookup needed. */
  private onClientSocketMessage(alloc: Allocation, buf: Buffer, rinfo: dgram.RemoteInfo): void {
    if (alloc.closed) {
      this.onUdpMessage(buf, rinfo, alloc.link.socket ?? null);
      return;
    }
    try {
      const top = buf.length > 0 ? buf[0] & 0xc0 : 0xc0;
      if (top === 0x40) this.relayChannelData(alloc, buf);
      else if (top === 0) this.handleStun(alloc.link, buf);
    } catch (err) {
      this.log('error', 'udp message handling failed', { error: String(err) });
    }
  }

  private onStreamConnection(socket: net.Socket, kind: LinkKind): void {
    if (this.closed) {
      socket.destroy();
      return;
    }
    this.streams.add(socket);
    socket.setNoDelay(true);
    const link: ClientLink = {
      kind,
      address: socket.remoteAddress ?? '',
      port: socket.remotePort ?? 0,
      stream: socket,
      allocation: null,
    };
    let pending: Buffer | null = null;
    const idle = setTimeout(() => {
      if (!link.allocation) socket.destroy();
    }, STREAM_IDLE_MS);
    idle.unref();
    socket.on('data', (chunk: Buffer) => {
      try {
        const buf: Buffer = pending ? Buffer.concat([pending, chunk]) : chunk;
        pending = this.consumeStream(link, buf);
      } catch (err) {
        this.log('error', 'stream handling failed', { error: String(err) });
        socket.destroy();
      }
    });
    socket.on('error', () => socket.destroy());
    socket.on('close', () => {
      clearTimeout(idle);
      this.streams.delete(socket);
      if (link.allocation) this.deleteAllocation(link.allocation, 'connection closed');
    });
  }

  /** Handles every complete frame in `buf`; returns the unconsumed tail (or null). */
  private consumeStream(link: ClientLink, buf: Buffer): Buffer | null {
    let off = 0;
    while (off < buf.length) {
      const frameLength = streamFrameLength(buf, off, buf.length - off);
      if (frameLength < 0) {
        // Not STUN nor ChannelData: the stream cannot be resynchronised.
        link.stream?.destroy();
        return null;
      }
      if (frameLength === 0 || off + frameLength > buf.length) break;
      const frame = buf.subarray(off, off + frameLength);
      off += frameLength;
      if ((frame[0] & 0xc0) === 0x40) {
        if (link.allocation) this.relayChannelData(link.allocation, frame);
      } else {
        this.handleStun(link, frame);
      }
    }
    if (off >= buf.length) return null;
    const rest = buf.subarray(off);
    if (rest.length > MAX_STREAM_PENDING) {
      link.stream?.destroy();
      return null;
    }
    return rest;
  }

  private handleStun(link: ClientLink, buf: Buffer): void {
    const res = decodeStun(buf);
    if (!res.ok) {
      // A damaged FINGERPRINT means it may not be STUN at all: drop silently.
      const header = res.header;
      if (header && header.cls === StunClass.Request && res.reason !== 'FINGERPRINT mismatch') {
        this.sendError(link, header.method, header.transactionId, 400, 'Bad Request');
      }
      return;
    }
    const msg = res.message;
    if (msg.cls === StunClass.Request) {
      this.handleRequest(link, msg).catch((err) => {
        this.log('error', 'request handling failed', { method: msg.method, error: String(err) });
        this.sendError(link, msg.method, msg.transactionId, 500, 'Server Error');
      });
    } else if (msg.cls === StunClass.Indication && msg.method === StunMethod.Send) {
      this.handleSendIndication(link, msg);
    }
    // Responses and other indications are not meant for a server.
  }

  // -------------------------------------------------------------------------
  // Relaying (hot paths)

  /** Client -> peer over a bound channel. `buf` starts with the 4-byte ChannelData header. */
  private relayChannelData(alloc: Allocation, buf: Buffer): void {
    if (buf.length < 4) return;
    const length = buf.readUInt16BE(2);
    if (4 + length > buf.length) return;
    const ch = alloc.channels.get(buf.readUInt16BE(0));
    if (ch === undefined) return;
    const now = this.now();
    if (ch.expiresAt <= now) return;
    const perm = alloc.permissions.get(ch.peerAddress);
    if (perm === undefined || perm.expiresAt <= now) return;
    this.relayedPackets++;
    alloc.relay.send(buf, 4, length, ch.peerPort, ch.peerAddress);
  }

  /** Peer -> client: ChannelData when a channel is bound, otherwise a Data indication. */
  private onPeerData(alloc: Allocation, data: Buffer, rinfo: dgram.RemoteInfo): void {
    // A throw here would escape the socket's event emitter and take the process down.
    try {
      this.forwardPeerData(alloc, data, rinfo);
    } catch (err) {
      this.log('error', 'peer data handling failed', { error: String(err) });
    }
  }

  private forwardPeerData(alloc: Allocation, data: Buffer, rinfo: dgram.RemoteInfo): void {
    if (alloc.closed) return;
    const now = this.now();
    const address =
      this.relayFamily === 4 ? rinfo.address : (canonicalIp(rinfo.address) ?? rinfo.address);
    const perm = alloc.permissions.get(address);
    if (perm === undefined || perm.expiresAt <= now) return;
    this.relayedPackets++;
    const ch = alloc.channelsByPeer.get(address)?.get(rinfo.port);
    if (ch !== undefined && ch.expiresAt > now) {
      this.sendChannelDataToClient(alloc.link, ch.number, data);
    } else if (data.length <= MAX_DATA_INDICATION_PAYLOAD) {
      this.sendToClient(alloc.link, this.buildDataIndication(perm.ip, rinfo.port, data), true);
    }
  }

  private sendChannelDataToClient(link: ClientLink, channel: number, data: Buffer): void {
    const frame = 4 + data.length;
    // Stream transports need ChannelData padded to a multiple of 4.
    const size = link.stream ? (frame + 3) & ~3 : frame;
    const out = Buffer.allocUnsafe(size);
    out.writeUInt16BE(channel, 0);
    out.writeUInt16BE(data.length, 2);
    data.copy(out, 4);
    if (size > frame) out.fill(0, frame, size);
    this.sendToClient(link, out, true);
  }

  /** Data indication with XOR-PEER-ADDRESS and DATA, written directly for speed. */
  private buildDataIndication(peerIp: Buffer, peerPort: number, data: Buffer): Buffer {
    const addrLength = peerIp.length === 4 ? 8 : 20;
    const dataPadded = (data.length + 3) & ~3;
    const total = HEADER_LENGTH + 4 + addrLength + 4 + dataPadded;
    const out = Buffer.allocUnsafe(total);
    out.writeUInt16BE(DATA_INDICATION_TYPE, 0);
    out.writeUInt16BE(total - HEADER_LENGTH, 2);
    out.writeUInt32BE(MAGIC_COOKIE, 4);
    this.fillTransactionId(out, 8);
    let off = HEADER_LENGTH;
    out.writeUInt16BE(Attr.XorPeerAddress, off);
    out.writeUInt16BE(addrLength, off + 2);
    out[off + 4] = 0;
    out[off + 5] = peerIp.length === 4 ? FAMILY_IPV4 : FAMILY_IPV6;
    out.writeUInt16BE((peerPort ^ (MAGIC_COOKIE >>> 16)) & 0xffff, off + 6);
    if (peerIp.length === 4) {
      out.writeUInt32BE((peerIp.readUInt32BE(0) ^ MAGIC_COOKIE) >>> 0, off + 8);
    } else {
      out.writeUInt32BE((peerIp.readUInt32BE(0) ^ MAGIC_COOKIE) >>> 0, off + 8);
      for (let i = 0; i < 12; i++) out[off + 12 + i] = peerIp[4 + i] ^ out[8 + i];
    }
    off += 4 + addrLength;
    out.writeUInt16BE(Attr.Data, off);
    out.writeUInt16BE(data.length, off + 2);
    data.copy(out, off + 4);
    const end = off + 4 + data.length;
    if (end < total) out.fill(0, end, total);
    return out;
  }

  /** Indication transaction ids come from a pre-filled random pool to avoid a syscall per packet. */
  private fillTransactionId(out: Buffer, offset: number): void {
    if (this.tidPoolOffset + 12 > this.tidPool.length) {
      randomFillSync(this.tidPool);
      this.tidPoolOffset = 0;
    }
    this.tidPool.copy(out, offset, this.tidPoolOffset, this.tidPoolOffset + 12);
    this.tidPoolOffset += 12;
  }

  /** `droppable` data is discarded when a stream client is not keeping up, as UDP would lose it. */
  private sendToClient(link: ClientLink, buf: Buffer, droppable: boolean): void {
    // A request whose secretsFor() resolved after close() must not touch closed sockets.
    if (this.closed) return;
    const stream = link.stream;
    if (stream === null) {
      const own = link.connected;
      if (own) own.send(buf);
      else (link.socket ?? this.udp)?.send(buf, link.port, link.address);
      return;
    }
    if (stream.destroyed || !stream.writable) return;
    if (droppable && stream.writableLength > MAX_STREAM_BACKLOG) return;
    stream.write(buf);
  }

  private handleSendIndication(link: ClientLink, msg: StunMessage): void {
    const alloc = this.allocationFor(link);
    if (!alloc) return;
    // Indications cannot be answered, so unknown comprehension-required attributes mean drop.
    if (unknownRequiredAttributes(msg, UNSUPPORTED_ATTRIBUTES).length > 0) return;
    const peer = decodeXorAddress(getAttribute(msg, Attr.XorPeerAddress), msg.transactionId);
    const data = getAttribute(msg, Attr.Data);
    if (!peer || !data || peer.port === 0) return;
    const perm = alloc.permissions.get(peer.address);
    if (perm === undefined || perm.expiresAt <= this.now()) return;
    this.relayedPackets++;
    alloc.relay.send(data, peer.port, peer.address);
  }

  // -------------------------------------------------------------------------
  // Requests

  private async handleRequest(link: ClientLink, msg: StunMessage): Promise<void> {
    if (msg.method === StunMethod.Binding) {
      if (this.rejectUnknownAttributes(link, msg, null)) return;
      this.handleBinding(link, msg);
      return;
    }
    const turnMethods: number[] = [
      StunMethod.Allocate,
      StunMethod.Refresh,
      StunMethod.CreatePermission,
      StunMethod.ChannelBind,
    ];
    if (!turnMethods.includes(msg.method)) {
      this.sendError(link, msg.method, msg.transactionId, 400, 'Bad Request');
      return;
    }
    const auth = await this.authenticate(link, msg);
    if (!auth || this.closed) return;
    if (this.rejectUnknownAttributes(link, msg, auth)) return;
    switch (msg.method) {
      case StunMethod.Allocate:
        await this.handleAllocate(link, msg, auth);
        return;
      case StunMethod.Refresh:
        this.handleRefresh(link, msg, auth);
        return;
      case StunMethod.CreatePermission:
        this.handleCreatePermission(link, msg, auth);
        return;
      case StunMethod.ChannelBind:
        this.handleChannelBind(link, msg, auth);
        return;
    }
  }

  private rejectUnknownAttributes(
    link: ClientLink,
    msg: StunMessage,
    auth: AuthResult | null,
  ): boolean {
    const unknown = unknownRequiredAttributes(msg, UNSUPPORTED_ATTRIBUTES);
    if (unknown.length === 0) return false;
    this.sendError(
      link,
      msg.method,
      msg.transactionId,
      420,
      'Unknown Attribute',
      [attrUnknownAttributes(unknown)],
      auth,
    );
    return true;
  }

  private handleBinding(link: ClientLink, msg: StunMessage): void {
    const attrs: OutgoingAttribute[] = [];
    const mapped = attrXorAddress(
      Attr.XorMappedAddress,
      link.address,
      link.port,
      msg.transactionId,
    );
    if (mapped) attrs.push(mapped);
    this.sendResponse(link, msg.method, msg.transactionId, attrs, null);
  }

  /**
   * Long-term credential check (RFC 8489 §9.2.4). Sends the error response itself
   * and returns null when the request is not authenticated.
   */
  private async authenticate(link: ClientLink, msg: StunMessage): Promise<AuthResult | null> {
    const challenge = (code: number, reason: string): null => {
      this.sendError(link, msg.method, msg.transactionId, code, reason, this.challengeAttributes());
      return null;
    };
    if (msg.integrityStart < 0 && msg.integritySha256Start < 0)
      return challenge(401, 'Unauthorized');
    const username = decodeString(getAttribute(msg, Attr.Username));
    const realm = decodeString(getAttribute(msg, Attr.Realm));
    const nonce = decodeString(getAttribute(msg, Attr.Nonce));
    if (!username || realm === undefined || nonce === undefined) {
      this.sendError(link, msg.method, msg.transactionId, 400, 'Bad Request');
      return null;
    }
    if (!this.nonceValid(nonce)) return challenge(438, 'Stale Nonce');
    if (realm !== this.realm) return challenge(401, 'Unauthorized');
    if (usernameExpired(username, this.now())) return challenge(401, 'Unauthorized');
    const secrets = await this.opts.secretsFor(username);
    const useSha256 = msg.integritySha256Start >= 0;
    for (const secret of secrets) {
      const key = longTermKey(username, this.realm, restPassword(secret, username));
      const ok = useSha256 ? verifyIntegritySha256(msg, key) : verifyIntegrity(msg, key);
      if (ok) return { username, key, integrity: useSha256 ? 'sha256' : 'sha1' };
    }
    return challenge(401, 'Unauthorized');
  }

  private challengeAttributes(): OutgoingAttribute[] {
    return [attrString(Attr.Realm, this.realm), attrString(Attr.Nonce, this.mintNonce())];
  }

  /** Stateless nonce: hex expiry + truncated HMAC, so no per-client nonce table is needed. */
  private mintNonce(): string {
    const expiry = Math.floor((this.now() + this.nonceTtlMs) / 1000)
      .toString(16)
      .padStart(12, '0');
    return expiry + this.nonceMac(expiry);
  }

  private nonceMac(expiry: string): string {
    return createHmac('sha256', this.nonceKey).update(expiry).digest('hex').slice(0, 24);
  }

  private nonceValid(nonce: string): boolean {
    if (nonce.length !== 36 || !/^[0-9a-f]+$/.test(nonce)) return false;
    const expiry = nonce.slice(0, 12);
    const mac = Buffer.from(nonce.slice(12), 'hex');
    if (!timingSafeEqual(mac, Buffer.from(this.nonceMac(expiry), 'hex'))) return false;
    return parseInt(expiry, 16) * 1000 > this.now();
  }

  private async handleAllocate(
    link: ClientLink,
    msg: StunMessage,
    auth: AuthResult,
  ): Promise<void> {
    const existing = this.allocationFor(link);
    if (existing) {
      if (existing.allocateTid.equals(msg.transactionId) && existing.username === auth.username) {
        this.sendToClient(link, existing.allocateResponse, false);
      } else {
        this.sendError(link, msg.method, msg.transactionId, 437, 'Allocation Mismatch', [], auth);
      }
      return;
    }
    const tupleKey = `${link.kind}|${link.address}|${link.port}`;
    // A retransmission racing the first attempt is dropped; the client retries and gets the cached answer.
    if (this.pendingTuples.has(tupleKey)) return;

    const fail = (code: number, reason: string): void =>
      this.sendError(link, msg.method, msg.transactionId, code, reason, [], auth);
    const transport = decodeRequestedTransport(getAttribute(msg, Attr.RequestedTransport));
    if (transport === undefined) return fail(400, 'Bad Request');
    if (transport !== TRANSPORT_UDP) return fail(442, 'Unsupported Transport Protocol');
    const evenPort = getAttribute(msg, Attr.EvenPort);
    const token = getAttribute(msg, Attr.ReservationToken);
    const familyAttr = getAttribute(msg, Attr.RequestedAddressFamily);
    if (token && (evenPort || familyAttr)) return fail(400, 'Bad Request');
    if (evenPort && evenPort.length < 1) return fail(400, 'Bad Request');
    if (token && token.length !== 8) return fail(400, 'Bad Request');
    if (familyAttr) {
      const family = decodeAddressFamily(familyAttr);
      if (family !== FAMILY_IPV4 && family !== FAMILY_IPV6)
        return fail(440, 'Address Family not Supported');
      if ((family === FAMILY_IPV4 ? 4 : 6) !== this.relayFamily)
        return fail(440, 'Address Family not Supported');
    } else if (!token && this.relayFamily === 6) {
      // RFC 8656 §7.2: without REQUESTED-ADDRESS-FAMILY the relayed address must be IPv4.
      return fail(440, 'Address Family not Supported');
    }
    const live =
      (this.byUsername.get(auth.username)?.size ?? 0) +
      (this.pendingPerUser.get(auth.username) ?? 0);
    if (live >= this.opts.maxAllocationsPerUsername) return fail(486, 'Allocation Quota Reached');
    const lifetimeSec = this.grantedLifetime(decodeUInt32(getAttribute(msg, Attr.Lifetime)));

    this.pendingTuples.add(tupleKey);
    this.pendingPerUser.set(auth.username, (this.pendingPerUser.get(auth.username) ?? 0) + 1);
    let binding: RelayBinding | null;
    try {
      binding = token
        ? this.takeReservation(token)
        : await this.bindRelay(
            evenPort !== undefined,
            evenPort !== undefined && (evenPort[0] & 0x80) !== 0,
          );
    } finally {
      this.pendingTuples.delete(tupleKey);
      const n = (this.pendingPerUser.get(auth.username) ?? 1) - 1;
      if (n > 0) this.pendingPerUser.set(auth.username, n);
      else this.pendingPerUser.delete(auth.username);
    }
    if (!binding) return fail(508, 'Insufficient Capacity');
    if (this.closed || (link.stream && link.stream.destroyed)) {
      this.releaseBinding(binding);
      return;
    }
    this.createAllocation(link, msg, auth, binding, lifetimeSec);
  }

  private createAllocation(
    link: ClientLink,
    msg: StunMessage,
    auth: AuthResult,
    binding: RelayBinding,
    lifetimeSec: number,
  ): void {
    const attrs: OutgoingAttribute[] = [];
    const relayed = attrXorAddress(
      Attr.XorRelayedAddress,
      this.relayAddress,
      binding.port,
      msg.transactionId,
    );
    const mapped = attrXorAddress(
      Attr.XorMappedAddress,
      link.address,
      link.port,
      msg.transactionId,
    );
    if (relayed) attrs.push(relayed);
    if (mapped) attrs.push(mapped);
    attrs.push(attrUInt32(Attr.Lifetime, lifetimeSec));
    if (binding.reserved)
      attrs.push({ type: Attr.ReservationToken, value: this.reserve(binding.reserved) });
    const response = this.encodeResponse(msg.method, msg.transactionId, attrs, auth);

    const alloc: Allocation = {
      link,
      username: auth.username,
      key: auth.key,
      allocateTid: Buffer.from(msg.transactionId),
      allocateResponse: response,
      relay: binding.socket,
      relayPort: binding.port,
      expiresAt: this.now() + lifetimeSec * 1000,
      permissions: new Map(),
      channels: new Map(),
      channelsByPeer: new Map(),
      ownSocketRequested: false,
      closed: false,
    };
    binding.socket.on('message', (data, rinfo) => this.onPeerData(alloc, data, rinfo));
    this.registerAllocation(alloc);
    this.log('info', 'allocation created', {
      username: auth.username,
      client: `${link.kind}:${link.address}:${link.port}`,
      relayPort: binding.port,
      lifetimeSec,
    });
    this.sendToClient(link, response, false);
  }

  /** RFC 8656 §7.2: min(requested, max), but never below the default. */
  private grantedLifetime(requested: number | undefined): number {
    if (requested === undefined) return this.defaultLifetimeSec;
    return Math.max(this.defaultLifetimeSec, Math.min(requested, MAX_LIFETIME_SEC));
  }

  private handleRefresh(link: ClientLink, msg: StunMessage, auth: AuthResult): void {
    const alloc = this.ownedAllocation(link, msg, auth);
    if (!alloc) return;
    const familyAttr = getAttribute(msg, Attr.RequestedAddressFamily);
    if (familyAttr) {
      const family = decodeAddressFamily(familyAttr) === FAMILY_IPV6 ? 6 : 4;
      if (family !== this.relayFamily) {
        this.sendError(
          link,
          msg.method,
          msg.transactionId,
          443,
          'Peer Address Family Mismatch',
          [],
          auth,
        );
        return;
      }
    }
    const requested = decodeUInt32(getAttribute(msg, Attr.Lifetime));
    if (requested === 0) {
      this.deleteAllocation(alloc, 'refreshed to zero');
      this.sendResponse(link, msg.method, msg.transactionId, [attrUInt32(Attr.Lifetime, 0)], auth);
      return;
    }
    const lifetimeSec = this.grantedLifetime(requested);
    alloc.expiresAt = this.now() + lifetimeSec * 1000;
    this.sendResponse(
      link,
      msg.method,
      msg.transactionId,
      [attrUInt32(Attr.Lifetime, lifetimeSec)],
      auth,
    );
  }

  private handleCreatePermission(link: ClientLink, msg: StunMessage, auth: AuthResult): void {
    const alloc = this.ownedAllocation(link, msg, auth);
    if (!alloc) return;
    const values = getAttributes(msg, Attr.XorPeerAddress);
    const peers: TransportAddress[] = [];
    for (const v of values) {
      const peer = decodeXorAddress(v, msg.transactionId);
      if (!peer) break;
      peers.push(peer);
    }
    if (values.length === 0 || peers.length !== values.length) {
      this.sendError(link, msg.method, msg.transactionId, 400, 'Bad Request', [], auth);
      return;
    }
    for (const peer of peers) if (!this.checkPeer(link, msg, auth, peer)) return;
    const expiresAt = this.now() + PERMISSION_LIFETIME_MS;
    for (const peer of peers) installPermission(alloc, peer.address, expiresAt);
    this.ensureOwnSocket(alloc);
    this.sendResponse(link, msg.method, msg.transactionId, [], auth);
  }

  private handleChannelBind(link: ClientLink, msg: StunMessage, auth: AuthResult): void {
    const alloc = this.ownedAllocation(link, msg, auth);
    if (!alloc) return;
    const bad = (): void =>
      this.sendError(link, msg.method, msg.transactionId, 400, 'Bad Request', [], auth);
    const channel = decodeChannelNumber(getAttribute(msg, Attr.ChannelNumber));
    const peer = decodeXorAddress(getAttribute(msg, Attr.XorPeerAddress), msg.transactionId);
    if (channel === undefined || !peer || peer.port === 0) return bad();
    if (channel < MIN_CHANNEL || channel > this.maxChannel) return bad();
    if (!this.checkPeer(link, msg, auth, peer)) return;
    const now = this.now();
    const byNumber = alloc.channels.get(channel);
    if (
      byNumber &&
      byNumber.expiresAt > now &&
      (byNumber.peerAddress !== peer.address || byNumber.peerPort !== peer.port)
    ) {
      return bad();
    }
    const byPeer = alloc.channelsByPeer.get(peer.address)?.get(peer.port);
    if (byPeer && byPeer.expiresAt > now && byPeer.number !== channel) return bad();
    if (byNumber && byNumber !== byPeer) removeChannel(alloc, byNumber);
    if (byPeer && byPeer !== byNumber) removeChannel(alloc, byPeer);
    bindChannel(alloc, channel, peer, now + CHANNEL_LIFETIME_MS);
    installPermission(alloc, peer.address, now + PERMISSION_LIFETIME_MS);
    this.ensureOwnSocket(alloc);
    this.sendResponse(link, msg.method, msg.transactionId, [], auth);
  }

  /** Allocation for this 5-tuple owned by the authenticated user; otherwise answers 437/441. */
  private ownedAllocation(link: ClientLink, msg: StunMessage, auth: AuthResult): Allocation | null {
    const alloc = this.allocationFor(link);
    if (!alloc) {
      this.sendError(link, msg.method, msg.transactionId, 437, 'Allocation Mismatch', [], auth);
      return null;
    }
    if (alloc.username !== auth.username) {
      this.sendError(link, msg.method, msg.transactionId, 441, 'Wrong Credentials', [], auth);
      return null;
    }
    return alloc;
  }

  /** Peer must match the relay's family and be an allowed destination; answers 443/403 otherwise. */
  private checkPeer(
    link: ClientLink,
    msg: StunMessage,
    auth: AuthResult,
    peer: TransportAddress,
  ): boolean {
    if (peer.family !== this.relayFamily) {
      this.sendError(
        link,
        msg.method,
        msg.transactionId,
        443,
        'Peer Address Family Mismatch',
        [],
        auth,
      );
      return false;
    }
    const ip = parseIp(peer.address);
    if (!ip || !isPeerAllowed(ip, this.opts.allowLoopbackPeers)) {
      this.sendError(link, msg.method, msg.transactionId, 403, 'Forbidden', [], auth);
      return false;
    }
    return true;
  }

  // -------------------------------------------------------------------------
  // Relay sockets and reservations

  private async bindRelay(even: boolean, reserveNext: boolean): Promise<RelayBinding | null> {
    const type = this.relayFamily === 4 ? 'udp4' : 'udp6';
    let attempts = 0;
    for (const candidate of this.relayPortCandidates(even, reserveNext)) {
      if (attempts++ >= MAX_PORT_ATTEMPTS || this.closed) break;
      const socket = await bindUdp(type, this.relayAddress, candidate);
      if (!socket) continue;
      const port = socket.address().port;
      if (even && port % 2 !== 0) {
        closeQuietly(socket);
        continue;
      }
      let reserved: RelayBinding['reserved'];
      if (reserveNext) {
        const next = port + 1 <= 0xffff ? await bindUdp(type, this.relayAddress, port + 1) : null;
        if (!next) {
          closeQuietly(socket);
          continue;
        }
        reserved = { socket: next, port: port + 1 };
        this.prepareRelaySocket(next);
      }
      this.prepareRelaySocket(socket);
      this.relayPortsInUse.add(port);
      if (reserved) this.relayPortsInUse.add(reserved.port);
      return { socket, port, reserved };
    }
    return null;
  }

  /**
   * Ports to try: a walk through the range from a random start (so allocations
   * are hard to guess), skipping ports this server already holds. With a range
   * starting at 0 the OS picks (0 is yielded repeatedly; the caller bounds attempts).
   */
  private *relayPortCandidates(even: boolean, reserveNext: boolean): Generator<number> {
    const [min, max] = this.opts.relayPortRange;
    if (min === 0) {
      for (let i = 0; i < MAX_PORT_ATTEMPTS; i++) yield 0;
      return;
    }
    const hi = Math.min(reserveNext ? max - 1 : max, 0xffff);
    if (hi < min) return;
    const size = hi - min + 1;
    const start = Math.floor(Math.random() * size);
    for (let i = 0; i < size; i++) {
      const port = min + ((start + i) % size);
      if (even && port % 2 !== 0) continue;
      if (this.relayPortsInUse.has(port) || (reserveNext && this.relayPortsInUse.has(port + 1)))
        continue;
      yield port;
    }
  }

  private prepareRelaySocket(socket: dgram.Socket): void {
    setBufferSizes(socket);
    socket.on('error', (err) => this.log('warn', 'relay socket error', { error: String(err) }));
  }

  private reserve(reserved: { socket: dgram.Socket; port: number }): Buffer {
    const token = randomBytes(8);
    this.reservations.set(token.toString('hex'), {
      socket: reserved.socket,
      port: reserved.port,
      expiresAt: this.now() + RESERVATION_LIFETIME_MS,
    });
    return token;
  }

  private takeReservation(token: Buffer): RelayBinding | null {
    const key = token.toString('hex');
    const r = this.reservations.get(key);
    if (!r) return null;
    this.reservations.delete(key);
    if (r.expiresAt <= this.now()) {
      this.relayPortsInUse.delete(r.port);
      closeQuietly(r.socket);
      return null;
    }
    return { socket: r.socket, port: r.port };
  }

  private releaseBinding(binding: RelayBinding): void {
    this.relayPortsInUse.delete(binding.port);
    closeQuietly(binding.socket);
    if (binding.reserved) {
      this.relayPortsInUse.delete(binding.reserved.port);
      closeQuietly(binding.reserved.socket);
    }
  }

  // -------------------------------------------------------------------------
  // Allocation bookkeeping

  private allocationFor(link: ClientLink): Allocation | null {
    if (link.stream) return link.allocation;
    return this.udpAllocations.get(link.port)?.get(link.address) ?? null;
  }

  /**
   * Data can flow once there is a permission, so that is when a UDP client gets its own socket:
   * allocations that never relay (probes, abandoned candidates) do not pay for one.
   */
  private ensureOwnSocket(alloc: Allocation): void {
    if (alloc.ownSocketRequested || alloc.link.stream) return;
    alloc.ownSocketRequested = true;
    void this.openClientSocket(alloc);
  }

  /**
   * Gives a UDP allocation's client a socket of its own: bound to the address and port the client
   * talks to (the listener shares them through SO_REUSEADDR) and connected to the client, so the
   * kernel queues that client's datagrams there rather than on the listener. Every client then has
   * a whole receive buffer for its bursts, where one shared buffer overflowed under load, and
   * replies leave through a connected socket (no address to resolve or route per datagram). This
   * is how coturn handles UDP clients too. When the socket cannot be opened (descriptor limits, a
   * race with the allocation's end) the listener keeps serving the client; nothing is lost.
   */
  private async openClientSocket(alloc: Allocation): Promise<void> {
    const link = alloc.link;
    const listener = link.socket ?? this.udp;
    if (!listener) return;
    let socket: dgram.Socket | null = null;
    try {
      const local = listener.address();
      socket = createUdpSocket(local.family === 'IPv6' ? 'udp6' : 'udp4', true);
      const s = socket;
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.bind({ address: local.address, port: local.port, exclusive: true }, () => {
          s.connect(link.port, link.address, () => {
            s.off('error', reject);
            resolve();
          });
        });
      });
    } catch (err) {
      if (socket) closeQuietly(socket);
      this.log('warn', 'no client socket for a UDP allocation; the listener serves it', {
        client: `${link.address}:${link.port}`,
        error: String(err),
      });
      return;
    }
    if (alloc.closed || this.closed) {
      closeQuietly(socket);
      return;
    }
    setBufferSizes(socket);
    socket.on('error', (err) => this.log('warn', 'client socket error', { error: String(err) }));
    socket.on('message', (buf, rinfo) => this.onClientSocketMessage(alloc, buf, rinfo));
    link.connected = socket;
  }

  private registerAllocation(alloc: Allocation): void {
    this.allocations.add(alloc);
    const link = alloc.link;
    if (link.stream) {
      link.allocation = alloc;
    } else {
      let byAddress = this.udpAllocations.get(link.port);
      if (!byAddress) this.udpAllocations.set(link.port, (byAddress = new Map()));
      byAddress.set(link.address, alloc);
    }
    let set = this.byUsername.get(alloc.username);
    if (!set) this.byUsername.set(alloc.username, (set = new Set()));
    set.add(alloc);
  }

  /** `closeLink` also ends a TCP/TLS control connection, so a revoked client notices at once. */
  private deleteAllocation(alloc: Allocation, reason: string, closeLink = false): void {
    if (alloc.closed) return;
    alloc.closed = true;
    this.allocations.delete(alloc);
    const link = alloc.link;
    if (link.stream) {
      if (link.allocation === alloc) link.allocation = null;
      if (closeLink) link.stream.destroy();
    } else {
      const byAddress = this.udpAllocations.get(link.port);
      if (byAddress?.get(link.address) === alloc) {
        byAddress.delete(link.address);
        if (byAddress.size === 0) this.udpAllocations.delete(link.port);
      }
      if (link.connected) {
        closeQuietly(link.connected);
        link.connected = null;
      }
    }
    const set = this.byUsername.get(alloc.username);
    if (set) {
      set.delete(alloc);
      if (set.size === 0) this.byUsername.delete(alloc.username);
    }
    this.relayPortsInUse.delete(alloc.relayPort);
    closeQuietly(alloc.relay);
    this.log('info', 'allocation deleted', {
      username: alloc.username,
      relayPort: alloc.relayPort,
      reason,
    });
  }

  // -------------------------------------------------------------------------
  // Responses

  private encodeResponse(
    method: number,
    transactionId: Buffer,
    attrs: OutgoingAttribute[],
    auth: AuthResult | null,
    cls: StunClass = StunClass.SuccessResponse,
  ): Buffer {
    attrs.push(attrString(Attr.Software, SOFTWARE));
    return encodeStun(
      { method, cls, transactionId, attributes: attrs },
      { integrityKey: auth?.key, integrity: auth?.integrity, fingerprint: true },
    );
  }

  private sendResponse(
    link: ClientLink,
    method: number,
    transactionId: Buffer,
    attrs: OutgoingAttribute[],
    auth: AuthResult | null,
  ): void {
    this.sendToClient(link, this.encodeResponse(method, transactionId, attrs, auth), false);
  }

  private sendError(
    link: ClientLink,
    method: number,
    transactionId: Buffer,
    code: number,
    reason: string,
    extra: OutgoingAttribute[] = [],
    auth: AuthResult | null = null,
  ): void {
    const attrs = [attrErrorCode(code, reason), ...extra];
    const buf = this.encodeResponse(method, transactionId, attrs, auth, StunClass.ErrorResponse);
    this.sendToClient(link, buf, false);
  }
}

// ---------------------------------------------------------------------------
// Helpers

function udpLink(rinfo: dgram.RemoteInfo, socket: dgram.Socket | null): ClientLink {
  return { kind: 'udp', address: rinfo.address, port: rinfo.port, stream: null, socket, allocation: null };
}

function installPermission(alloc: Allocation, address: string, expiresAt: number): void {
  const existing = alloc.permissions.get(address);
  if (existing) {
    existing.expiresAt = Math.max(existing.expiresAt, expiresAt);
    return;
  }
  const ip = parseIp(address);
  if (ip) alloc.permissions.set(address, { expiresAt, ip });
}

function bindChannel(
  alloc: Allocation,
  number: number,
  peer: TransportAddress,
  expiresAt: number,
): void {
  const existing = alloc.channels.get(number);
  if (existing) {
    existing.expiresAt = expiresAt;
    return;
  }
  const ch: ChannelBinding = { number, peerAddress: peer.address, peerPort: peer.port, expiresAt };
  alloc.channels.set(number, ch);
  let byPort = alloc.channelsByPeer.get(peer.address);
  if (!byPort) alloc.channelsByPeer.set(peer.address, (byPort = new Map()));
  byPort.set(peer.port, ch);
}

function removeChannel(alloc: Allocation, ch: ChannelBinding): void {
  if (alloc.channels.get(ch.number) === ch) alloc.channels.delete(ch.number);
  const byPort = alloc.channelsByPeer.get(ch.peerAddress);
  if (byPort?.get(ch.peerPort) === ch) {
    byPort.delete(ch.peerPort);
    if (byPort.size === 0) alloc.channelsByPeer.delete(ch.peerAddress);
  }
}

/** TURN REST usernames start with the expiry in unix seconds; anything else is treated as expired. */
function usernameExpired(username: string, nowMs: number): boolean {
  const m = /^(\d{1,12})(?::|$)/.exec(username);
  if (!m) return true;
  return Number(m[1]) * 1000 < nowMs;
}

/**
 * Peers in loopback/private/link-local/unspecified space are refused unless
 * explicitly allowed, so a relay cannot be used to reach the operator's own network.
 * Multicast and reserved ranges are never relayed to.
 */
export function isPeerAllowed(ip: Buffer, allowPrivate: boolean): boolean {
  if (ip.length === 4) return isIpv4PeerAllowed(ip, allowPrivate);
  if (ip[0] === 0xff) return false; // multicast
  // NAT64 well-known prefix embeds an IPv4 destination.
  if (ip.readUInt32BE(0) === 0x0064ff9b && ip.readUInt32BE(4) === 0 && ip.readUInt32BE(8) === 0) {
    return isIpv4PeerAllowed(ip.subarray(12), allowPrivate);
  }
  if (allowPrivate) return true;
  let allZeroPrefix = true;
  for (let i = 0; i < 15; i++) if (ip[i] !== 0) allZeroPrefix = false;
  if (allZeroPrefix && (ip[15] === 0 || ip[15] === 1)) return false; // :: and ::1
  if ((ip[0] & 0xfe) === 0xfc) return false; // fc00::/7 unique local
  if (ip[0] === 0xfe && (ip[1] & 0xc0) === 0x80) return false; // fe80::/10 link local
  return true;
}

function isIpv4PeerAllowed(ip: Uint8Array, allowPrivate: boolean): boolean {
  const a = ip[0];
  const b = ip[1];
  if (a >= 224) return false; // multicast, reserved, broadcast
  if (allowPrivate) return true;
  if (a === 0 || a === 10 || a === 127) return false;
  if (a === 169 && b === 254) return false;
  if (a === 172 && b >= 16 && b <= 31) return false;
  if (a === 192 && b === 168) return false;
  if (a === 100 && b >= 64 && b <= 127) return false; // carrier-grade NAT
  return true;
}

/**
 * dgram resolves every destination through dns.lookup, which for an IP literal
 * still defers the send by a tick. Every address this server sends to is already
 * a literal, so answer those synchronously and only fall back to DNS otherwise.
 */
function literalLookup(
  hostname: string,
  options: dns.LookupOneOptions | number,
  callback: (err: NodeJS.ErrnoException | null, address: string, family: number) => void,
): void {
  const family = net.isIP(hostname);
  if (family !== 0) {
    callback(null, hostname, family);
    return;
  }
  const opts: dns.LookupOneOptions = typeof options === 'number' ? { family: options } : options;
  dns.lookup(hostname, opts, callback);
}

function createUdpSocket(type: 'udp4' | 'udp6', reuseAddr = false): dgram.Socket {
  return dgram.createSocket({
    type,
    reuseAddr,
    lookup: literalLookup as NonNullable<dgram.SocketOptions['lookup']>,
  });
}

/**
 * A client-facing UDP listener with SO_REUSEADDR, so each allocation's own connected socket can
 * share its address and port (`openClientSocket`). SO_REUSEADDR alone would let this bind succeed
 * beside another process's SO_REUSEADDR socket, so the port is first taken by a plain socket:
 * that fails as before when the port is in use, and with port 0 it picks a port nobody has.
 */
async function bindListener(
  type: 'udp4' | 'udp6',
  address: string,
  port: number,
): Promise<dgram.Socket> {
  let lastError: unknown;
  for (let attempt = 0; attempt < (port === 0 ? 8 : 1); attempt++) {
    const probe = createUdpSocket(type);
    const chosen = await new Promise<number>((resolve, reject) => {
      probe.once('error', reject);
      probe.bind({ address, port, exclusive: true }, () => resolve(probe.address().port));
    }).finally(() => closeQuietly(probe));
    await new Promise<void>((resolve) => setImmediate(resolve));
    const socket = createUdpSocket(type, true);
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once('error', reject);
        socket.bind({ address, port: chosen, exclusive: true }, () => {
          socket.off('error', reject);
          resolve();
        });
      });
      return socket;
    } catch (err) {
      // Someone took the port between the probe and this bind: try another one (port 0 only).
      closeQuietly(socket);
      lastError = err;
    }
  }
  throw lastError;
}

function bindUdp(
  type: 'udp4' | 'udp6',
  address: string,
  port: number,
): Promise<dgram.Socket | null> {
  return new Promise((resolve) => {
    const socket = createUdpSocket(type);
    const onError = (): void => {
      closeQuietly(socket);
      resolve(null);
    };
    socket.once('error', onError);
    socket.bind({ address, port, exclusive: true }, () => {
      socket.off('error', onError);
      resolve(socket);
    });
  });
}

function setBufferSizes(socket: dgram.Socket): void {
  // Larger kernel buffers absorb bursts; the kernel caps them at its own limits.
  try {
    socket.setRecvBufferSize(SOCKET_BUFFER_BYTES);
    socket.setSendBufferSize(SOCKET_BUFFER_BYTES);
  } catch {
    // Not fatal: defaults still work.
  }
}

function closeQuietly(socket: dgram.Socket): void {
  try {
    socket.close();
  } catch {
    // Already closed.
  }
}

function closeDgram(socket: dgram.Socket): Promise<void> {
  return new Promise((resolve) => {
    try {
      socket.close(() => resolve());
    } catch {
      resolve();
    }
  });
}

function listenServer(server: net.Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => reject(err);
    server.once('error', onError);
    server.listen({ host, port, exclusive: true }, () => {
      server.off('error', onError);
      const addr = server.address();
      resolve(typeof addr === 'object' && addr ? addr.port : port);
    });
  });
}

function closeServer(server: net.Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) {
      resolve();
      return;
    }
    server.close(() => resolve());
  });
}
