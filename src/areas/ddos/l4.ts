/**
 * Network-layer detection for proxied TCP/UDP applications: the proxy asks `datagram` for every
 * UDP datagram and `connection` for every accepted TCP connection (the SYN rate the proxy sees),
 * before any flow is looked up; `true` means drop it. Counting is per application and per source
 * address, with the account's `ddos_l4` overrides (block or log). The calls are synchronous: the
 * account's profile is loaded in the background and the defaults apply until it is.
 *
 * Override expressions: `true`, or any expression of the rules language on `ip.src` (evaluated
 * once per source address and window); expressions on fields the rules language does not know
 * (`udp.dstport`, …) are taken to match all traffic.
 */
import { buildRequestContext, compileRule } from '../../edge/rules/index.ts';
import type { Logger } from '../../core/log.ts';
import { DDOS_L4_ID, type RuleForEdge, type RulesetService } from '../rulesets/index.ts';
import type { Detector, TargetRef } from './detector.ts';
import { ProfileCache, type Profile } from './overrides.ts';
import { AMPLIFICATION_PORTS } from './signatures.ts';

/** What the proxy tells about the application a packet or connection is for. */
export interface L4Target {
  appId: string;
  zoneId: string;
  hostname: string;
  accountId: string;
  /** Edge address and port the traffic arrived at. */
  address: string;
  port: number;
}

export interface DdosL4Guard {
  /** True when the datagram belongs to a mitigated flood and must be dropped. */
  datagram(app: L4Target, sourceIp: string, sourcePort: number, bytes: number): boolean;
  /** True when the connection belongs to a mitigated flood and must be closed. */
  connection(app: L4Target, sourceIp: string): boolean;
}

export const DDOS_L4 = 'ddos.l4';

function plain(ip: string): string {
  return ip.startsWith('::ffff:') ? ip.slice(7) : ip;
}

export class L4Guard implements DdosL4Guard {
  private readonly profiles: ProfileCache;
  /** Account id → its `ddos_l4` rules (loaded in the background). */
  private readonly rules = new Map<string, readonly RuleForEdge[]>();
  private readonly loading = new Set<string>();
  /** `account|source` → profile, cleared every window and on ruleset changes. */
  private bySource = new Map<string, Profile>();
  private readonly udp: Detector[];
  private readonly tcp: Detector[];

  constructor(
    private readonly detectors: Detector[],
    private readonly rulesets: () => RulesetService | undefined,
    private readonly zoneName: (zoneId: string) => string,
    private readonly log: Logger,
  ) {
    this.profiles = new ProfileCache(DDOS_L4_ID, detectors.map((d) => d.signature));
    this.udp = detectors.filter((d) => d.signature.stream === 'udp' || d.signature.stream === 'udp-amplification');
    this.tcp = detectors.filter((d) => d.signature.stream === 'tcp-connect');
  }

  /** Rulesets changed: reload the accounts' rules. */
  invalidate(): void {
    const accounts = [...this.rules.keys()];
    this.rules.clear();
    this.bySource = new Map();
    for (const a of accounts) this.load(a);
  }

  roll(): void {
    this.bySource = new Map();
  }

  private load(accountId: string): void {
    const service = this.rulesets();
    if (!service || this.loading.has(accountId)) return;
    this.loading.add(accountId);
    service
      .phaseRules('ddos_l4', '', accountId)
      .then((rules) => {
        this.rules.set(accountId, rules);
        this.bySource = new Map();
      })
      .catch((err) => this.log.warn({ err, account: accountId }, 'ddos_l4 overrides not loaded; defaults apply'))
      .finally(() => this.loading.delete(accountId));
  }

  private profile(accountId: string, source: string): Profile {
    const key = `${accountId}|${source}`;
    let p = this.bySource.get(key);
    if (p) return p;
    const rules = this.rules.get(accountId);
    if (!rules) this.load(accountId);
    p = this.profiles.pick(rules ?? [], (expression) => {
      try {
        return compileRule(expression)(buildRequestContext({ clientIp: source, host: '', headers: {} }));
      } catch {
        return true;
      }
    });
    if (this.bySource.size < 100_000) this.bySource.set(key, p);
    return p;
  }

  private check(list: Detector[], app: L4Target, source: string, bytes: number, protocol: string, sourcePort?: number): boolean {
    const profile = this.profile(app.accountId, source);
    const ref = (): TargetRef => ({
      zoneId: app.zoneId,
      zoneName: this.zoneName(app.zoneId),
      accountId: app.accountId,
      hostname: app.hostname,
      appId: app.appId,
      targetIp: app.address,
      targetPort: app.port,
      protocol,
    });
    let drop = false;
    for (const d of list) {
      const e = profile[this.detectors.indexOf(d)];
      if (!e.enabled) continue;
      if (d.signature.stream === 'udp-amplification' && (sourcePort === undefined || !AMPLIFICATION_PORTS.has(sourcePort))) continue;
      const a = d.hit(app.appId, ref, source, e.sensitivity, e.action, e.overrideRuleId, bytes);
      if (!a) continue;
      if (e.action === 'log') a.logged++;
      else if (!drop) {
        a.mitigated++;
        drop = true;
      }
    }
    return drop;
  }

  datagram(app: L4Target, sourceIp: string, sourcePort: number, bytes: number): boolean {
    return this.check(this.udp, app, plain(sourceIp), bytes, 'UDP', sourcePort);
  }

  connection(app: L4Target, sourceIp: string): boolean {
    return this.check(this.tcp, app, plain(sourceIp), 0, 'TCP');
  }
}
