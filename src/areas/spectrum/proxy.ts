/**
 * The L4 proxy of one server: the listeners of every application and their flows. `open` binds an
 * application's ports at once (all of them or none), `reconfigure` binds what is new before it
 * closes what is gone — ports kept by an update keep their listener and flows, and no other
 * application is touched — and `close` ends the listeners and every open flow. Ports below 1024
 * are bound at `port + --spectrum-port-offset` when binding them is not permitted (or always with
 * `--spectrum-map-low-ports`); the mapping shows in the application's `edge_ips.ips`.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import tls from 'node:tls';
import { ApiError, CODES, apiError } from '../../core/errors.ts';
import { formatHostPort, type AppPlan } from './app-rules.ts';
import type { AppRuntime, Binding, Flow, ProxyDeps } from './flow.ts';
import { TcpFlow } from './tcp.ts';
import { UdpFlow } from './udp.ts';

const PROGRESS_MS = 60_000;

interface Spec {
  key: string;
  transport: 'tcp' | 'udp';
  address: string;
  port: number;
}

function specsOf(plan: AppPlan): Spec[] {
  const out: Spec[] = [];
  for (const address of plan.addresses) {
    for (let port = plan.ports.start; port <= plan.ports.end; port++) {
      out.push({ key: `${plan.transport}|${address}|${port}`, transport: plan.transport, address, port });
    }
  }
  return out;
}

export class SpectrumProxy {
  private readonly apps = new Map<string, AppRuntime>();
  /** Listener key → application id, claimed before binding so concurrent requests cannot race. */
  private readonly claims = new Map<string, string>();
  private sweeper?: NodeJS.Timeout;
  private ticker?: NodeJS.Timeout;

  constructor(private readonly deps: ProxyDeps) {}

  /** Starts the UDP idle sweep and the progress reports of long flows. */
  start(): void {
    const idle = this.deps.config.spectrumUdpIdleTimeoutMs;
    this.sweeper = setInterval(() => this.sweepUdp(), Math.max(50, Math.min(1000, Math.floor(idle / 4))));
    this.sweeper.unref();
    this.ticker = setInterval(() => {
      for (const rt of this.apps.values()) for (const f of rt.flows) f.progress();
    }, PROGRESS_MS);
    this.ticker.unref();
  }

  has(appId: string): boolean {
    return this.apps.has(appId);
  }

  /** Application ids of a zone that have listeners here. */
  appsOfZone(zoneId: string): string[] {
    return [...this.apps.values()].filter((rt) => rt.plan.zoneId === zoneId).map((rt) => rt.plan.id);
  }

  /**
   * The addresses an application listens on, as `edge_ips.ips` shows them: the address alone, or
   * `address:port` (`address:start-end`) when its ports were mapped.
   */
  ips(appId: string): string[] | undefined {
    const rt = this.apps.get(appId);
    if (!rt) return undefined;
    return rt.plan.addresses.map((address) => {
      const bs = rt.bindings.filter((b) => b.address === address);
      if (bs.every((b) => b.boundPort === b.port)) return address;
      const ports = bs.map((b) => b.boundPort).sort((a, b) => a - b);
      const range = ports[0] === ports[ports.length - 1] ? String(ports[0]) : `${ports[0]}-${ports[ports.length - 1]}`;
      return formatHostPort(address, range);
    });
  }

  /** Listener table lines for `outpost serve`. */
  listeners(): { name: string; protocol: string; address: string }[] {
    return [...this.apps.values()].map((rt) => ({
      name: `proxied app ${rt.plan.hostname} (${rt.plan.transport}/${rangeText(rt.plan)})`,
      protocol: rt.plan.transport,
      address: rt.plan.addresses
        .map((address) => {
          const ports = rt.bindings.filter((b) => b.address === address).map((b) => b.boundPort);
          const lo = Math.min(...ports);
          const hi = Math.max(...ports);
          return formatHostPort(address, lo === hi ? lo : `${lo}-${hi}`);
        })
        .join(' '),
    }));
  }

  /** Binds every listener of a new application, or none (throws a 409/400 ApiError). */
  async open(plan: AppPlan): Promise<void> {
    if (this.apps.has(plan.id)) return this.reconfigure(plan);
    const rt: AppRuntime = { plan, bindings: [], flows: new Set(), turn: 0 };
    rt.bindings = await this.bindAll(rt, specsOf(plan));
    this.apps.set(plan.id, rt);
  }

  /** Applies a changed plan: new listeners first, then the ones no longer wanted are closed. */
  async reconfigure(plan: AppPlan): Promise<void> {
    const rt = this.apps.get(plan.id);
    if (!rt) return this.open(plan);
    const wanted = specsOf(plan);
    const have = new Map(rt.bindings.map((b) => [b.key, b]));
    const added = await this.bindAll(rt, wanted.filter((s) => !have.has(s.key)));
    const keep = new Set(wanted.map((s) => s.key));
    const gone = rt.bindings.filter((b) => !keep.has(b.key));
    rt.bindings = [...rt.bindings.filter((b) => keep.has(b.key)), ...added];
    rt.plan = plan;
    this.deps.resolver.forget(plan.id);
    await Promise.all(gone.map((b) => this.unbind(rt, b)));
  }

  /** Closes an application's listeners and ends its flows. */
  async close(appId: string): Promise<void> {
    const rt = this.apps.get(appId);
    if (!rt) return;
    this.apps.delete(appId);
    this.deps.resolver.forget(appId);
    await Promise.all(rt.bindings.map((b) => this.unbind(rt, b)));
    for (const f of [...rt.flows]) f.close();
  }

  async stop(): Promise<void> {
    clearInterval(this.sweeper);
    clearInterval(this.ticker);
    await Promise.all([...this.apps.keys()].map((id) => this.close(id)));
  }

  // --- binding -----------------------------------------------------------------------------------

  private async bindAll(rt: AppRuntime, specs: Spec[]): Promise<Binding[]> {
    for (const s of specs) {
      const owner = this.claims.get(s.key);
      if (owner !== undefined && owner !== rt.plan.id) {
        throw apiError('spectrum_edge_in_use', `${s.transport}/${formatHostPort(s.address, s.port)}`, ` by application ${owner}`);
      }
    }
    const claimed = specs.filter((s) => !this.claims.has(s.key));
    for (const s of claimed) this.claims.set(s.key, rt.plan.id);
    const bound: Binding[] = [];
    try {
      for (const s of specs) bound.push(await this.bind(rt, s));
      return bound;
    } catch (err) {
      await Promise.all(bound.map((b) => this.unbind(rt, b)));
      for (const s of claimed) if (this.claims.get(s.key) === rt.plan.id) this.claims.delete(s.key);
      throw bindError(err as NodeJS.ErrnoException, specs.find((s) => !bound.some((b) => b.key === s.key)));
    }
  }

  private async bind(rt: AppRuntime, s: Spec): Promise<Binding> {
    const { config } = this.deps;
    const mapped = s.port + config.spectrumPortOffset;
    const low = s.port < 1024 && mapped <= 65535;
    const attempt = (port: number) => (s.transport === 'tcp' ? this.listenTcp(rt, s, port) : this.listenUdp(rt, s, port));
    if (low && config.spectrumMapLowPorts) return attempt(mapped);
    try {
      return await attempt(s.port);
    } catch (err) {
      if (low && (err as NodeJS.ErrnoException).code === 'EACCES') {
        this.deps.log.info({ app: rt.plan.id, port: s.port, bound: mapped }, 'port below 1024 not permitted; bound at the mapped port');
        return attempt(mapped);
      }
      throw err;
    }
  }

  private listenTcp(rt: AppRuntime, s: Spec, port: number): Promise<Binding> {
    const binding: Binding = { key: s.key, transport: 'tcp', address: s.address, port: s.port, boundPort: port };
    const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true, noDelay: true });
    server.on('connection', (socket) => {
      if (this.dropByDdos(rt, binding, socket.remoteAddress, undefined, 0)) {
        socket.destroy();
        return;
      }
      if (rt.plan.trafficType !== 'direct' && this.deps.edge()) {
        this.handToEdge(rt, binding, socket).catch((err) => {
          this.deps.log.warn({ err, app: rt.plan.id }, 'HTTP application connection failed');
          socket.destroy();
        });
        return;
      }
      const flow = new TcpFlow(this.deps, rt, binding, socket);
      rt.flows.add(flow);
      flow.run().catch((err) => {
        this.deps.log.error({ err, app: rt.plan.id }, 'TCP flow failed');
        flow.close();
      });
    });
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: s.address, port, exclusive: true }, () => {
        server.off('error', reject);
        server.on('error', (err) => this.deps.log.warn({ err, app: rt.plan.id }, 'listener error'));
        binding.server = server;
        resolve(binding);
      });
    });
  }

  /**
   * `traffic_type` http/https: the edge serves the connection's requests (rules, events) and
   * forwards them to this application's origin; https is terminated here with the app's certificate.
   */
  private async handToEdge(rt: AppRuntime, binding: Binding, socket: net.Socket): Promise<void> {
    const plan = rt.plan;
    const [origin] = await this.deps.resolver.candidates(plan, binding.port, rt.turn++);
    if (!origin) throw new Error('no origin address for the application');
    const accountId = this.deps.accountOf(plan.zoneId) ?? '';
    let client: net.Socket = socket;
    if (plan.trafficType === 'https') {
      const context = this.deps.certs.get(plan.hostname) ?? (await this.deps.certs.ensure(plan.hostname));
      client = new tls.TLSSocket(socket, { isServer: true, secureContext: context });
    }
    socket.resume();
    this.deps.edge()!.acceptSocket(client, {
      route: { zoneId: plan.zoneId, zoneName: '', accountId, recordName: plan.hostname, recordType: 'CNAME', content: plan.hostname },
      origin: { host: origin.host, port: origin.port, protocol: plan.tls === 'full' || plan.tls === 'strict' ? 'https:' : 'http:' },
      scheme: plan.trafficType === 'https' ? 'https' : 'http',
    });
  }

  private listenUdp(rt: AppRuntime, s: Spec, port: number): Promise<Binding> {
    const binding: Binding = { key: s.key, transport: 'udp', address: s.address, port: s.port, boundPort: port, udpFlows: new Map() };
    const socket = dgram.createSocket({ type: net.isIPv6(s.address) ? 'udp6' : 'udp4' });
    socket.on('message', (msg, rinfo) => {
      if (this.dropByDdos(rt, binding, rinfo.address, rinfo.port, msg.length)) return;
      const key = `${rinfo.address}|${rinfo.port}`;
      let flow = binding.udpFlows!.get(key) as UdpFlow | undefined;
      if (!flow) {
        flow = new UdpFlow(this.deps, rt, binding, key, rinfo);
        binding.udpFlows!.set(key, flow);
        rt.flows.add(flow);
        flow.fromClient(msg);
        const started = flow;
        flow.start().catch((err) => {
          this.deps.log.error({ err, app: rt.plan.id }, 'UDP flow failed');
          started.close();
        });
        return;
      }
      flow.fromClient(msg);
    });
    return new Promise((resolve, reject) => {
      socket.once('error', reject);
      socket.bind({ address: s.address, port, exclusive: true }, () => {
        socket.off('error', reject);
        socket.on('error', (err) => this.deps.log.warn({ err, app: rt.plan.id }, 'UDP listener error'));
        binding.socket = socket;
        resolve(binding);
      });
    });
  }

  /** Asks DDoS detection about a datagram (with its source port) or a connection; true: drop it. */
  private dropByDdos(rt: AppRuntime, b: Binding, ip: string | undefined, port: number | undefined, bytes: number): boolean {
    const guard = this.deps.ddos?.();
    if (!guard || !ip) return false;
    const plan = rt.plan;
    const target = { appId: plan.id, zoneId: plan.zoneId, hostname: plan.hostname, accountId: this.deps.accountOf(plan.zoneId) ?? '', address: b.address, port: b.port };
    return port === undefined ? guard.connection(target, ip) : guard.datagram(target, ip, port, bytes);
  }

  private async unbind(rt: AppRuntime, b: Binding): Promise<void> {
    if (this.claims.get(b.key) === rt.plan.id) this.claims.delete(b.key);
    for (const f of [...rt.flows]) if (f.binding === b) f.close();
    if (b.server) {
      const server = b.server;
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    if (b.socket) {
      const socket = b.socket;
      await new Promise<void>((resolve) => socket.close(() => resolve()));
    }
  }

  private sweepUdp(): void {
    const now = Date.now();
    const idle = this.deps.config.spectrumUdpIdleTimeoutMs;
    for (const rt of this.apps.values()) {
      if (rt.plan.transport !== 'udp') continue;
      for (const f of [...rt.flows]) if ((f as Flow).idleMs && f.idleMs!(now) >= idle) f.close();
    }
  }
}

function rangeText(plan: AppPlan): string {
  return plan.ports.start === plan.ports.end ? String(plan.ports.start) : `${plan.ports.start}-${plan.ports.end}`;
}

function bindError(err: NodeJS.ErrnoException, spec: Spec | undefined): unknown {
  if (err instanceof ApiError || !spec) return err;
  const where = `${spec.transport}/${formatHostPort(spec.address, spec.port)}`;
  if (err.code === 'EADDRINUSE') return apiError('spectrum_edge_in_use', where, ' on this host');
  if (err.code === 'EADDRNOTAVAIL') {
    return new ApiError(400, [{ code: CODES.spectrum_invalid.code, message: `edge_ips: ${spec.address} is not an address of this host` }]);
  }
  if (err.code === 'EACCES') {
    return new ApiError(400, [{ code: CODES.spectrum_invalid.code, message: `protocol: binding ${where} is not permitted` }]);
  }
  return err;
}
