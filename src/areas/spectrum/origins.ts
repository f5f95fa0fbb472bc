/**
 * Where a connection goes: the candidates of an application's origin for one edge port, in the
 * order to try them. `origin_direct` gives its addresses; `origin_dns` resolves the name through
 * Outpost's own zone data when the name lies in one of its zones (following CNAMEs, any record
 * type the app asks for, SRV included), else through the system resolver, whose answers are kept
 * for the app's `origin_dns.ttl`. Connections rotate over the candidates (round robin); a
 * candidate that failed is tried last for the next 30 s.
 */
import { promises as dns } from 'node:dns';
import net from 'node:net';
import type { IndexedZone, StoredRecord } from '../dns/index.ts';
import { originPortFor, type AppPlan } from './app-rules.ts';

export interface Candidate {
  host: string;
  port: number;
  /** Name for TLS (SNI and `strict` checks) when the origin was given by name. */
  servername?: string;
}

/** The part of the DNS area's zone index origin resolution reads. */
export interface ZoneLookup {
  zoneFor(host: string): IndexedZone | undefined;
  recordsAt(zone: IndexedZone, name: string): { owner: string; records: StoredRecord[] } | undefined;
}

type AddressType = 'A' | 'AAAA';
const MAX_CHAIN = 8;
const DOWN_MS = 30_000;
const NEGATIVE_CACHE_MS = 5_000;

export class OriginResolver {
  private readonly cache = new Map<string, { until: number; value: Promise<Candidate[]> }>();
  private readonly down = new Map<string, number>();

  constructor(private readonly zones: ZoneLookup | undefined) {}

  /** Candidates for a connection arriving on `edgePort`, healthy ones first, rotated by `turn`. */
  async candidates(plan: AppPlan, edgePort: number, turn: number): Promise<Candidate[]> {
    const all = await this.resolve(plan, edgePort);
    if (all.length === 0) return all;
    const start = turn % all.length;
    const rotated = [...all.slice(start), ...all.slice(0, start)];
    const now = Date.now();
    const up = rotated.filter((c) => (this.down.get(key(c)) ?? 0) <= now);
    const downList = rotated.filter((c) => (this.down.get(key(c)) ?? 0) > now);
    return [...up, ...downList];
  }

  markDown(c: Candidate): void {
    this.down.set(key(c), Date.now() + DOWN_MS);
  }

  markUp(c: Candidate): void {
    this.down.delete(key(c));
  }

  /** Forgets cached answers of an application (after an update). */
  forget(appId: string): void {
    for (const k of this.cache.keys()) if (k.startsWith(`${appId}|`)) this.cache.delete(k);
  }

  private async resolve(plan: AppPlan, edgePort: number): Promise<Candidate[]> {
    const o = plan.origin;
    if (o.kind === 'direct') {
      return o.targets.map((t) => ({ host: t.host, port: originPortFor(t.ports, edgePort, plan.ports) }));
    }
    if (o.type === 'SRV') {
      const load = () => this.srv(o.name);
      const targets = this.zones?.zoneFor(o.name) ? await load() : await this.cached(`${plan.id}|srv|${o.name}`, o.ttlMs, load);
      // SRV records carry the ports; an origin_port given beside them wins.
      return targets.map((c) => (o.ports ? { ...c, port: originPortFor(o.ports, edgePort, plan.ports) } : c));
    }
    const want: AddressType[] = o.type === 'A' ? ['A'] : o.type === 'AAAA' ? ['AAAA'] : ['A', 'AAAA'];
    const port = originPortFor(o.ports!, edgePort, plan.ports);
    const load = async () => (await this.addresses(o.name, want, 0)).map((host) => ({ host, port: 0, servername: o.name }));
    const inZone = this.zones?.zoneFor(o.name) !== undefined;
    const hosts = inZone ? await load() : await this.cached(`${plan.id}|addr|${o.name}|${o.type}`, o.ttlMs, load);
    return hosts.map((c) => ({ ...c, port }));
  }

  /**
   * Zone data is read on every connection (it is in memory and always current); system resolver
   * answers are cached for the app's TTL, failures for a few seconds.
   */
  private async cached(k: string, ttlMs: number, load: () => Promise<Candidate[]>): Promise<Candidate[]> {
    const now = Date.now();
    const hit = this.cache.get(k);
    if (hit && hit.until > now) return hit.value;
    const value = load();
    const entry = { until: now + ttlMs, value };
    this.cache.set(k, entry);
    value.then(
      (list) => {
        if (list.length === 0) entry.until = Date.now() + NEGATIVE_CACHE_MS;
      },
      () => this.cache.delete(k),
    );
    return value;
  }

  private async addresses(name: string, want: AddressType[], depth: number): Promise<string[]> {
    const inZone = this.fromZones(name, want, depth);
    if (inZone !== undefined) return inZone;
    try {
      const found = await dns.lookup(name, { all: true, verbatim: true });
      return found.filter((a) => want.includes(a.family === 4 ? 'A' : 'AAAA')).map((a) => a.address);
    } catch {
      return [];
    }
  }

  /** Undefined when no Outpost zone holds the name. */
  private fromZones(name: string, want: AddressType[], depth: number): string[] | undefined | Promise<string[]> {
    const zone = this.zones?.zoneFor(name);
    if (!zone) return undefined;
    const found = this.zones!.recordsAt(zone, name.toLowerCase());
    if (!found) return [];
    const addrs = found.records.filter((r) => (want as string[]).includes(r.type)).map((r) => r.content);
    if (addrs.length > 0) return addrs;
    const cname = found.records.find((r) => r.type === 'CNAME');
    if (cname && depth < MAX_CHAIN) return this.addresses(cname.content, want, depth + 1);
    return [];
  }

  private async srv(name: string): Promise<Candidate[]> {
    let entries: { target: string; port: number; priority: number; weight: number }[];
    const zone = this.zones?.zoneFor(name);
    if (zone) {
      const found = this.zones!.recordsAt(zone, name.toLowerCase());
      entries = (found?.records ?? [])
        .filter((r) => r.type === 'SRV' && r.data)
        .map((r) => ({
          target: String(r.data!.target),
          port: Number(r.data!.port),
          priority: Number(r.data!.priority ?? r.priority ?? 0),
          weight: Number(r.data!.weight),
        }));
    } else {
      try {
        entries = (await dns.resolveSrv(name)).map((s) => ({ target: s.name, port: s.port, priority: s.priority, weight: s.weight }));
      } catch {
        entries = [];
      }
    }
    entries.sort((a, b) => a.priority - b.priority || b.weight - a.weight);
    const out: Candidate[] = [];
    for (const e of entries) {
      const target = e.target.replace(/\.$/, '');
      if (!target || e.port === 0) continue;
      const hosts = net.isIP(target) ? [target] : await this.addresses(target, ['A', 'AAAA'], 0);
      for (const host of hosts) out.push({ host, port: e.port, servername: target });
    }
    return out;
  }
}

function key(c: Candidate): string {
  return `${c.host}|${c.port}`;
}
