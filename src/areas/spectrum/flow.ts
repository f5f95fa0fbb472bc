/**
 * What the TCP and UDP proxies share: an application's run-time state (its plan, listeners and
 * open flows), the dependencies they reach out to, and the bookkeeping every flow does for
 * analytics (bytes since the previous event, duration, one `disconnect` per `connect`).
 */
import type dgram from 'node:dgram';
import type net from 'node:net';
import type { EdgeService } from '../../edge/index.ts';
import type { Config } from '../../core/config.ts';
import type { Logger } from '../../core/log.ts';
import type { AccessRuleService } from '../access-rules/index.ts';
import type { DdosL4Guard } from '../ddos/index.ts';
import type { SpectrumAnalytics, EventName } from './analytics.ts';
import type { AppPlan } from './app-rules.ts';
import type { OriginResolver } from './origins.ts';
import type { EdgeCertificates } from './tls.ts';

export interface ProxyDeps {
  config: Config;
  log: Logger;
  analytics: SpectrumAnalytics;
  resolver: OriginResolver;
  certs: EdgeCertificates;
  /** The IP access rule service, when the access-rules area is mounted. */
  accessRules(): AccessRuleService | undefined;
  /** The account of a zone (for account-level access rules). */
  accountOf(zoneId: string): string | undefined;
  /** CAs for `tls: strict` origins (undefined = the system roots). */
  originCa?: string[];
  /** The edge, for `traffic_type` http/https applications (absent when the edge is not mounted). */
  edge(): EdgeService | undefined;
  /** DDoS detection for datagrams and connections (absent when the ddos area is off). */
  ddos?(): DdosL4Guard | undefined;
}

/** One listening socket of an application. */
export interface Binding {
  key: string;
  transport: 'tcp' | 'udp';
  address: string;
  /** The port the application asked for. */
  port: number;
  /** The port actually bound (differs when a port below 1024 was mapped). */
  boundPort: number;
  server?: net.Server;
  socket?: dgram.Socket;
  /** UDP flows by client `address|port`. */
  udpFlows?: Map<string, Flow>;
}

export interface AppRuntime {
  plan: AppPlan;
  bindings: Binding[];
  flows: Set<Flow>;
  /** Round-robin counter over origin candidates. */
  turn: number;
}

export interface Flow {
  readonly binding: Binding;
  /** Ends the flow at once (application deleted or its port closed). */
  close(): void;
  /** Reports bytes moved since the last event, for long flows. */
  progress(): void;
  /** Milliseconds since the last datagram either way (UDP). */
  idleMs?(now: number): number;
}

/** Byte counters and the event sequence of one flow. */
export class FlowStats {
  ingress = 0;
  egress = 0;
  private reportedIn = 0;
  private reportedOut = 0;
  private readonly started = performance.now();
  private connected = false;
  private ended = false;

  constructor(
    private readonly deps: ProxyDeps,
    private readonly plan: AppPlan,
    private readonly ipVersion: 4 | 6,
  ) {}

  private emit(event: EventName, durationMs?: number): void {
    const bytesIngress = this.ingress - this.reportedIn;
    const bytesEgress = this.egress - this.reportedOut;
    this.reportedIn = this.ingress;
    this.reportedOut = this.egress;
    this.deps.analytics.record({ zoneId: this.plan.zoneId, appId: this.plan.id, event, ipVersion: this.ipVersion, bytesIngress, bytesEgress, durationMs });
  }

  connect(): void {
    this.connected = true;
    this.emit('connect');
  }

  filtered(): void {
    this.ended = true;
    this.emit('clientFiltered');
  }

  originError(): void {
    this.emit('originError');
  }

  progress(): void {
    if (this.connected && !this.ended && (this.ingress !== this.reportedIn || this.egress !== this.reportedOut)) this.emit('progress');
  }

  /** Idempotent; only a connected flow reports `disconnect`. */
  disconnect(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.connected) this.emit('disconnect', Math.round((performance.now() - this.started) * 1000) / 1000);
  }
}
