/**
 * One proxied TCP connection: IP access rules (when `ip_firewall` is on), TLS termination at the
 * edge (`tls` flexible/full/strict), an origin chosen among the candidates with failover, the
 * PROXY header (v1 or v2) written before anything else (before the origin TLS handshake too),
 * then bytes both ways (`Relay`): a side stops being read while the other cannot take more
 * (backpressure), and a FIN is passed on (half-close: both sockets allow half-open connections).
 * Plain sockets read into pooled, reused buffers instead of a new buffer per read: at gigabits per
 * second the per-read buffers make the garbage collector, not the proxy, the bottleneck.
 */
import net from 'node:net';
import tls from 'node:tls';
import type { AppPlan } from './app-rules.ts';
import { FlowStats, type AppRuntime, type Binding, type Flow, type ProxyDeps } from './flow.ts';
import type { Candidate } from './origins.ts';
import { plainIp, proxyV1, proxyV2, type Endpoint } from './proxy-protocol.ts';

const TLS_HANDSHAKE_MS = 10_000;
/** Size of the reusable read buffer of each plain socket. */
const READ_BUFFER = 64 * 1024;
/** Read buffers kept for reuse by later connections (at most 16 MiB). */
const POOL_MAX = 256;
const pool: Buffer[] = [];
/** How long a closed side's peer may take to flush what it still holds before it is cut. */
const FLUSH_MS = 30_000;

type Stream = net.Socket | tls.TLSSocket;

function takeBuffer(): Buffer {
  return pool.pop() ?? Buffer.allocUnsafe(READ_BUFFER);
}

export class TcpFlow implements Flow {
  private readonly stats: FlowStats;
  private client: Stream;
  private origin?: Stream;
  private closed = false;
  private openSides = 0;
  /** Read buffers of this flow's sockets, back to the pool once both sockets are destroyed. */
  private readonly buffers: Buffer[] = [];
  private readonly toOrigin = new Relay((n) => (this.stats.ingress += n));
  private readonly toClient = new Relay((n) => (this.stats.egress += n));

  constructor(
    private readonly deps: ProxyDeps,
    private readonly rt: AppRuntime,
    readonly binding: Binding,
    private readonly raw: net.Socket,
  ) {
    this.client = raw;
    // A listener on one address only takes clients of its family; only `::` needs to ask.
    const family = binding.address === '::' ? net.isIP(plainIp(raw.remoteAddress)) : net.isIP(binding.address);
    this.stats = new FlowStats(deps, rt.plan, family === 6 ? 6 : 4);
    raw.on('error', () => this.close());
    raw.once('close', () => {
      if (!this.origin) this.close();
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.client.destroy();
    this.raw.destroy();
    this.origin?.destroy();
    // Destroyed sockets read no more, and their pending writes were cancelled: reuse the buffers.
    for (const b of this.buffers.splice(0)) if (pool.length < POOL_MAX) pool.push(b);
    this.rt.flows.delete(this);
    this.stats.disconnect();
  }

  progress(): void {
    this.stats.progress();
  }

  /**
   * Ends a connection no origin took with a FIN rather than a reset: what the client sent is read
   * and dropped first (closing with unread bytes would reset the connection).
   */
  private turnAway(): void {
    const c = this.client;
    c.on('data', () => undefined);
    c.resume();
    c.end();
    const timer = setTimeout(() => this.close(), 1000);
    timer.unref();
    c.once('close', () => {
      clearTimeout(timer);
      this.close();
    });
    c.once('end', () => this.close());
  }

  async run(): Promise<void> {
    const plan = this.rt.plan;
    const client = (): Endpoint => ({ ip: plainIp(this.raw.remoteAddress), port: this.raw.remotePort ?? 0 });

    if (plan.ipFirewall && (await this.blocked(plan, client().ip))) {
      this.stats.filtered();
      this.closed = true;
      this.rt.flows.delete(this);
      this.raw.destroy();
      return;
    }
    if (this.closed) return;
    this.stats.connect();

    if (plan.tls !== 'off') {
      const ok = await this.terminateTls(plan);
      if (!ok || this.closed) return this.close();
    }

    let header: Buffer | undefined;
    if (plan.proxyProtocol === 'v1' || plan.proxyProtocol === 'v2') {
      const edge: Endpoint = { ip: plainIp(this.raw.localAddress), port: this.raw.localPort ?? this.binding.boundPort };
      header = plan.proxyProtocol === 'v1' ? proxyV1(client(), edge) : proxyV2(client(), edge, 'tcp');
    }
    const origin = await this.connectOrigin(plan, header);
    if (this.closed) {
      origin?.destroy();
      return;
    }
    if (!origin) {
      this.stats.originError();
      return this.turnAway();
    }
    this.origin = origin;
    this.splice(this.client, origin);
  }

  private async blocked(plan: AppPlan, ip: string): Promise<boolean> {
    const service = this.deps.accessRules();
    const accountId = this.deps.accountOf(plan.zoneId);
    if (!service || !accountId) return false;
    try {
      const decision = await service.decide(plan.zoneId, accountId, { ip });
      // Only block and allow rules apply at layer 4; challenges need a browser.
      return decision?.mode === 'block';
    } catch (err) {
      this.deps.log.warn({ err, app: plan.id }, 'IP access rule check failed; connection allowed');
      return false;
    }
  }

  private async terminateTls(plan: AppPlan): Promise<boolean> {
    let context: tls.SecureContext;
    try {
      context = this.deps.certs.get(plan.hostname) ?? (await this.deps.certs.ensure(plan.hostname));
    } catch (err) {
      this.deps.log.error({ err, app: plan.id }, 'no edge certificate for a TLS application');
      return false;
    }
    if (this.closed) return false;
    const secure = new tls.TLSSocket(this.raw, { isServer: true, secureContext: context });
    this.client = secure;
    secure.on('error', () => this.close());
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), TLS_HANDSHAKE_MS);
      secure.once('secure', () => {
        clearTimeout(timer);
        // Hold client bytes until the origin is there (pipe resumes the stream).
        secure.pause();
        resolve(true);
      });
      secure.once('close', () => {
        clearTimeout(timer);
        resolve(false);
      });
    });
  }

  private async connectOrigin(plan: AppPlan, header: Buffer | undefined): Promise<Stream | undefined> {
    let candidates: Candidate[];
    try {
      candidates = await this.deps.resolver.candidates(plan, this.binding.port, this.rt.turn++);
    } catch (err) {
      this.deps.log.warn({ err, app: plan.id }, 'origin resolution failed');
      return undefined;
    }
    for (const c of candidates) {
      if (this.closed) return undefined;
      try {
        const secure = plan.tls === 'full' || plan.tls === 'strict';
        const buffer = secure ? undefined : takeBuffer();
        let s: net.Socket;
        try {
          s = await dial(c, this.deps.config.originConnectTimeoutMs, buffer && { buffer, callback: (n, buf) => this.toClient.forward(n, buf) });
        } catch (err) {
          if (buffer && pool.length < POOL_MAX) pool.push(buffer);
          throw err;
        }
        if (buffer) this.buffers.push(buffer);
        if (header) s.write(header);
        const out = secure ? await secureOrigin(s, c, plan.tls === 'strict', this.deps.originCa) : s;
        this.deps.resolver.markUp(c);
        return out;
      } catch (err) {
        this.deps.resolver.markDown(c);
        this.deps.log.debug({ app: plan.id, origin: `${c.host}:${c.port}`, err: (err as Error).message }, 'origin failed; trying the next one');
      }
    }
    return undefined;
  }

  /**
   * Bytes both ways with backpressure and half-close; the flow ends when both sides are closed.
   * A plain client socket is taken over with a reusable read buffer (as plain origin sockets are
   * made), so bytes move without a buffer allocated per read; TLS sides go through `pipe`.
   */
  private splice(client: Stream, origin: Stream): void {
    if (client === this.raw && !(client instanceof tls.TLSSocket)) {
      const buffer = takeBuffer();
      const adopted = adopt(this.raw, { buffer, callback: (n, buf) => this.toOrigin.forward(n, buf) });
      if (adopted) {
        this.client = client = adopted;
        this.buffers.push(buffer);
      } else if (pool.length < POOL_MAX) pool.push(buffer);
    }
    for (const s of [client, origin]) s.on('error', () => this.close());
    if (client.destroyed || origin.destroyed) return this.close();
    this.openSides = 2;
    const closed = (peer: Stream) => {
      closeAfterFlush(peer);
      if (--this.openSides === 0) this.close();
    };
    client.once('close', () => closed(origin));
    origin.once('close', () => closed(client));
    this.toOrigin.connect(client, origin);
    this.toClient.connect(origin, client);
    origin.resume();
    client.resume();
  }
}

/**
 * One direction of a flow. A source made with a reusable read buffer calls `forward` for every
 * read: the bytes are written on at once, and when the write cannot complete synchronously the
 * source is paused until it has (the buffer is not read into while a write still holds it). Other
 * sources are piped, which does the same with a buffer per read.
 */
class Relay {
  private src?: Stream;
  private dst?: Stream;
  private waiting = false;
  private viaPipe = false;
  /** Reads that came before `connect` (copied: the buffer is reused). */
  private early: Buffer[] = [];

  constructor(private readonly count: (n: number) => void) {}

  connect(src: Stream, dst: Stream): void {
    this.src = src;
    this.dst = dst;
    for (const b of this.early) this.send(b);
    this.early = [];
    src.once('end', () => dst.end());
    if (!isAdopted(src)) {
      this.viaPipe = true;
      src.on('data', (c: Buffer) => this.count(c.length));
      src.pipe(dst, { end: false });
    }
  }

  forward(n: number, buf: Buffer): boolean {
    if (!this.dst) {
      this.early.push(Buffer.from(buf.subarray(0, n)));
      return true;
    }
    return this.send(buf.subarray(0, n));
  }

  private send(chunk: Buffer): boolean {
    this.count(chunk.length);
    const dst = this.dst!;
    if (dst.destroyed) return false;
    dst.write(chunk, this.written);
    if (dst.writableLength === 0) return true;
    this.waiting = true;
    return false;
  }

  private readonly written = (): void => {
    if (!this.waiting || this.viaPipe || !this.dst || this.dst.writableLength > 0) return;
    this.waiting = false;
    this.src?.resume();
  };
}

const ADOPTED = Symbol('spectrum.adopted');

function isAdopted(s: Stream): boolean {
  return (s as unknown as Record<symbol, boolean>)[ADOPTED] === true;
}

/**
 * Re-creates an accepted, still paused socket around its handle with a reusable read buffer
 * (`onread`, which net.Server does not offer for accepted sockets). Undefined when the socket is
 * not in that state; the caller then keeps the original.
 */
function adopt(raw: net.Socket, onread: OnRead): net.Socket | undefined {
  const holder = raw as unknown as { _handle?: object | null };
  const handle = holder._handle;
  if (!handle || raw.readableLength > 0 || !raw.isPaused() || raw.destroyed) return undefined;
  raw.removeAllListeners();
  holder._handle = null;
  raw.destroy();
  const s = new net.Socket({
    handle,
    allowHalfOpen: true,
    readable: true,
    writable: true,
    pauseOnCreate: true,
    onread,
  } as net.SocketConstructorOpts);
  (s as unknown as Record<symbol, boolean>)[ADOPTED] = true;
  return s;
}

function ignore(): void {}

/** Ends a socket whose peer is gone once what it holds is written, then closes it. */
function closeAfterFlush(s: Stream): void {
  if (s.destroyed) return;
  s.end();
  if (s.writableFinished) {
    s.destroy();
    return;
  }
  const timer = setTimeout(() => s.destroy(), FLUSH_MS);
  timer.unref();
  s.once('finish', () => {
    clearTimeout(timer);
    s.destroy();
  });
}

interface OnRead {
  buffer: Buffer;
  callback: (n: number, buf: Buffer) => boolean;
}

/**
 * Connects to an origin. With `onread` the socket reads into one reusable buffer (see `Relay`);
 * it starts paused either way, so nothing is read before the flow is spliced.
 */
function dial(c: Candidate, timeoutMs: number, onread?: OnRead): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({
      host: c.host,
      port: c.port,
      allowHalfOpen: true,
      noDelay: true,
      ...(onread ? { onread } : {}),
    });
    s.pause();
    if (onread) (s as unknown as Record<symbol, boolean>)[ADOPTED] = true;
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`connect timeout after ${timeoutMs} ms`));
    }, timeoutMs);
    const fail = (err: Error) => {
      clearTimeout(timer);
      s.destroy();
      reject(err);
    };
    s.once('connect', () => {
      clearTimeout(timer);
      // Errors from here on are the flow's; until it listens, keep them from being unhandled.
      s.off('error', fail);
      s.on('error', ignore);
      resolve(s);
    });
    s.on('error', fail);
  });
}

function secureOrigin(s: net.Socket, c: Candidate, strict: boolean, ca: string[] | undefined): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const servername = c.servername && net.isIP(c.servername) === 0 ? c.servername : undefined;
    const t = tls.connect({ socket: s, host: c.servername ?? c.host, servername, rejectUnauthorized: strict, ca: strict ? ca : undefined });
    const timer = setTimeout(() => {
      t.destroy();
      reject(new Error('origin TLS handshake timeout'));
    }, TLS_HANDSHAKE_MS);
    const fail = (err: Error) => {
      clearTimeout(timer);
      t.destroy();
      reject(err);
    };
    t.once('secureConnect', () => {
      clearTimeout(timer);
      t.off('error', fail);
      t.on('error', ignore);
      resolve(t);
    });
    t.on('error', fail);
  });
}
