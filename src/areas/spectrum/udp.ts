/**
 * Proxied UDP: one flow per client address and port on each edge socket. A flow checks the IP
 * access rules once, picks an origin, and talks to it from its own connected socket, so replies
 * find their way back to the right client. With `proxy_protocol` simple (the platform's 38-byte
 * header) or v2 (a DGRAM header), every datagram to the origin carries the client's address and
 * the header an origin echoes back is removed. A flow ends after `--spectrum-udp-idle-timeout`
 * without a datagram either way. When the origin answers with ICMP port unreachable (the socket
 * reports ECONNREFUSED), the flow moves to the next candidate.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import { FlowStats, type AppRuntime, type Binding, type Flow, type ProxyDeps } from './flow.ts';
import type { Candidate } from './origins.ts';
import { parseSimpleHeader, plainIp, proxyV2, simpleHeader, v2HeaderLength, type Endpoint } from './proxy-protocol.ts';

/** Datagrams a flow holds while it is still being set up. */
const MAX_PENDING = 64;

export class UdpFlow implements Flow {
  private readonly stats: FlowStats;
  private state: 'pending' | 'open' | 'blocked' | 'closed' = 'pending';
  private queue: Buffer[] = [];
  private origin?: dgram.Socket;
  private candidates: Candidate[] = [];
  private current = -1;
  private lastActive = Date.now();
  private lastDatagram?: Buffer;
  private readonly client: Endpoint;
  private readonly edge: Endpoint;

  constructor(
    private readonly deps: ProxyDeps,
    private readonly rt: AppRuntime,
    readonly binding: Binding,
    private readonly key: string,
    private readonly rinfo: dgram.RemoteInfo,
  ) {
    this.client = { ip: plainIp(rinfo.address), port: rinfo.port };
    this.edge = { ip: plainIp(binding.address === '::' ? '::' : binding.address), port: binding.boundPort };
    this.stats = new FlowStats(deps, rt.plan, net.isIPv6(this.client.ip) ? 6 : 4);
  }

  /** Re-reads the state after an await (it may have been closed meanwhile). */
  private isClosed(): boolean {
    return this.state === 'closed';
  }

  idleMs(now: number): number {
    return now - this.lastActive;
  }

  progress(): void {
    this.stats.progress();
  }

  close(): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.queue = [];
    try {
      this.origin?.close();
    } catch {
      // already closed
    }
    this.binding.udpFlows?.delete(this.key);
    this.rt.flows.delete(this);
    this.stats.disconnect();
  }

  fromClient(msg: Buffer): void {
    this.lastActive = Date.now();
    if (this.state === 'open') this.send(msg);
    else if (this.state === 'pending' && this.queue.length < MAX_PENDING) this.queue.push(msg);
  }

  async start(): Promise<void> {
    const plan = this.rt.plan;
    if (plan.ipFirewall && (await this.blocked())) {
      // Stay in the table as `blocked` until idle, so a chatty client is not re-checked per datagram.
      this.state = 'blocked';
      this.queue = [];
      this.stats.filtered();
      return;
    }
    if (this.state !== 'pending') return;
    this.stats.connect();
    try {
      this.candidates = await this.deps.resolver.candidates(plan, this.binding.port, this.rt.turn++);
    } catch (err) {
      this.deps.log.warn({ err, app: plan.id }, 'origin resolution failed');
    }
    if (!(await this.next())) return;
    const pending = this.queue;
    this.queue = [];
    for (const msg of pending) this.send(msg);
  }

  private async blocked(): Promise<boolean> {
    const service = this.deps.accessRules();
    const accountId = this.deps.accountOf(this.rt.plan.zoneId);
    if (!service || !accountId) return false;
    try {
      return (await service.decide(this.rt.plan.zoneId, accountId, { ip: this.client.ip }))?.mode === 'block';
    } catch (err) {
      this.deps.log.warn({ err, app: this.rt.plan.id }, 'IP access rule check failed; flow allowed');
      return false;
    }
  }

  /** Connects to the next candidate; false (and the flow closed) when none is left. */
  private async next(): Promise<boolean> {
    try {
      this.origin?.close();
    } catch {
      // already closed
    }
    this.origin = undefined;
    while (++this.current < this.candidates.length) {
      if (this.isClosed()) return false;
      const c = this.candidates[this.current];
      try {
        this.origin = await connect(c);
        if (this.isClosed()) {
          this.origin.close();
          return false;
        }
        this.state = 'open';
        this.wire(this.origin, c);
        return true;
      } catch {
        this.deps.resolver.markDown(c);
      }
    }
    this.stats.originError();
    this.close();
    return false;
  }

  private wire(sock: dgram.Socket, c: Candidate): void {
    const proto = this.rt.plan.proxyProtocol;
    sock.on('message', (msg) => {
      this.lastActive = Date.now();
      let payload: Buffer = msg;
      if (proto === 'simple') payload = parseSimpleHeader(msg)?.payload ?? msg;
      else if (proto === 'v2') payload = msg.subarray(v2HeaderLength(msg));
      this.stats.egress += payload.length;
      try {
        this.binding.socket?.send(payload, this.rinfo.port, this.rinfo.address);
      } catch {
        // The edge socket closed meanwhile (the application went away).
      }
    });
    sock.on('error', (err: NodeJS.ErrnoException) => {
      if (sock !== this.origin || this.state === 'closed') return;
      // ICMP port unreachable from the origin: fail over, and resend what it did not take.
      this.deps.resolver.markDown(c);
      this.deps.log.debug({ app: this.rt.plan.id, origin: `${c.host}:${c.port}`, err: err.code }, 'UDP origin failed; trying the next one');
      const last = this.lastDatagram;
      void this.next().then((ok) => {
        if (ok && last) this.send(last, false);
      });
    });
  }

  private send(msg: Buffer, count = true): void {
    const proto = this.rt.plan.proxyProtocol;
    const header = proto === 'simple' ? simpleHeader(this.client, this.edge) : proto === 'v2' ? proxyV2(this.client, this.edge, 'udp') : undefined;
    if (count) this.stats.ingress += msg.length;
    this.lastDatagram = msg;
    try {
      this.origin?.send(header ? Buffer.concat([header, msg]) : msg, (err) => {
        if (err) this.deps.log.debug({ app: this.rt.plan.id, err: err.message }, 'UDP send to origin failed');
      });
    } catch {
      // The origin socket was closed meanwhile (failover or the flow ending).
    }
  }
}

function connect(c: Candidate): Promise<dgram.Socket> {
  return new Promise((resolve, reject) => {
    const sock = dgram.createSocket(net.isIPv6(c.host) ? 'udp6' : 'udp4');
    sock.once('error', (err) => {
      sock.close();
      reject(err);
    });
    sock.connect(c.port, c.host, () => {
      sock.removeAllListeners('error');
      resolve(sock);
    });
  });
}
