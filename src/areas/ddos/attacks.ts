/**
 * Attack events: one record per detected attack, written when it starts and again when it ends
 * (start, end, target, rule, action, peak rate, mitigated and logged counts, top sources), in a
 * collection scoped by account. While an attack runs, reads overlay the live counters. Each start
 * and end is published on the event bus as `ddos.attack` for the alerting area.
 */
import type { Clock } from '../../core/clock.ts';
import type { EventBus } from '../../core/events.ts';
import type { Logger } from '../../core/log.ts';
import { defineCollection, type Filter } from '../../core/storage/collection.ts';
import type { Database } from '../../core/storage/db.ts';
import type { Attack } from './detector.ts';

export interface AttackRecord {
  id: string;
  layer: 'l7' | 'l4';
  status: 'active' | 'ended';
  attack_type: string;
  zone_id: string;
  zone_name: string;
  target_hostname: string;
  /** L4: the proxied application, its edge address, port and protocol. */
  app_id?: string;
  target_ip?: string;
  target_port?: number;
  protocol?: string;
  ruleset_id: string;
  rule_id: string;
  rule_description: string;
  category: string;
  /** The action applied: block, managed_challenge, challenge, js_challenge or log. */
  action: string;
  sensitivity_level: string;
  ruleset_override_id?: string;
  detection: 'single_source' | 'many_sources';
  start_time: string;
  end_time?: string;
  /** Highest rate seen: requests per second (L7), packets or connections per second (L4). */
  peak_rate: number;
  /** L4 datagrams: highest megabits per second. */
  peak_mbps?: number;
  mitigated: number;
  logged: number;
  /** Up to 20 of the mitigated source addresses. */
  sources: string[];
  source_count: number;
}

/** The payload of `ddos.attack` events. */
export interface AttackEvent {
  state: 'start' | 'end';
  accountId: string;
  attack: AttackRecord;
}

export const attacks = defineCollection<AttackRecord, 'zone_id' | 'layer' | 'status'>({
  kind: 'ddos_attack',
  indexes: { zone_id: (a) => a.zone_id, layer: (a) => a.layer, status: (a) => a.status },
});

export class AttackRecorder {
  /** Attacks running now, by id (their counters are live). */
  private readonly live = new Map<string, Attack>();
  /** Writes per attack run in order (the end never overtakes the start). */
  private readonly writes = new Map<string, Promise<unknown>>();

  constructor(
    private readonly database: Database,
    private readonly clock: Clock,
    private readonly events: EventBus,
    private readonly log: Logger,
  ) {}

  record(a: Attack, ended: boolean): AttackRecord {
    const s = a.signature;
    const sources = [...a.sources];
    const r: AttackRecord = {
      id: a.id,
      layer: s.layer,
      status: ended ? 'ended' : 'active',
      attack_type: s.attackType,
      zone_id: a.target.zoneId,
      zone_name: a.target.zoneName,
      target_hostname: a.target.hostname,
      ruleset_id: s.rulesetId,
      rule_id: s.ruleId,
      rule_description: s.description,
      category: s.category,
      action: a.action,
      sensitivity_level: a.sensitivity,
      detection: a.mode === 'source' ? 'single_source' : 'many_sources',
      start_time: new Date(a.startedAt).toISOString(),
      peak_rate: a.peakRate,
      mitigated: a.mitigated,
      logged: a.logged,
      sources: sources.slice(0, 20),
      source_count: sources.length,
    };
    if (a.target.appId) {
      r.app_id = a.target.appId;
      r.target_ip = a.target.targetIp;
      r.target_port = a.target.targetPort;
      r.protocol = a.target.protocol;
      r.peak_mbps = Math.round(a.peakBps / 10_000) / 100;
    }
    if (a.overrideRuleId) r.ruleset_override_id = a.overrideRuleId;
    if (ended) r.end_time = this.clock.now().toISOString();
    return r;
  }

  private chain(id: string, write: () => Promise<unknown>): void {
    const prev = this.writes.get(id) ?? Promise.resolve();
    const next = prev
      .then(write)
      .catch((err) => this.log.error({ err, attack: id }, 'attack event not stored'));
    this.writes.set(id, next);
    void next.then(() => {
      if (this.writes.get(id) === next) this.writes.delete(id);
    });
  }

  started(a: Attack): void {
    this.live.set(a.id, a);
    const rec = this.record(a, false);
    this.log.warn({ attack: rec.id, rule: rec.rule_id, target: rec.target_hostname, action: rec.action }, 'DDoS attack detected');
    this.chain(a.id, async () => {
      await attacks.insert(this.database.db, a.target.accountId, a.id, rec, this.clock.now());
      this.events.publish('ddos.attack', { state: 'start', accountId: a.target.accountId, attack: rec } satisfies AttackEvent);
    });
  }

  ended(a: Attack): void {
    this.live.delete(a.id);
    const rec = this.record(a, true);
    this.log.warn({ attack: rec.id, mitigated: rec.mitigated, peak: rec.peak_rate }, 'DDoS attack ended');
    this.chain(a.id, async () => {
      const doc = await attacks.get(this.database.db, a.target.accountId, a.id);
      if (doc) await attacks.update(this.database.db, doc, rec, this.clock.now());
      else await attacks.insert(this.database.db, a.target.accountId, a.id, rec, this.clock.now());
      this.events.publish('ddos.attack', { state: 'end', accountId: a.target.accountId, attack: rec } satisfies AttackEvent);
    });
  }

  /** Stored records with live counters for the running ones. */
  private overlay(r: AttackRecord): AttackRecord {
    const a = this.live.get(r.id);
    return a ? this.record(a, false) : r;
  }

  async list(accountId: string, q: { zoneId?: string; layer?: string; status?: string; limit: number; offset: number }): Promise<{ items: AttackRecord[]; total: number }> {
    // An attack that ended is no longer live: its stored record must say so before it is read.
    await this.flush();
    const filters: Filter<'zone_id' | 'layer' | 'status'>[] = [];
    if (q.zoneId) filters.push({ field: 'zone_id', op: 'eq', value: q.zoneId });
    if (q.layer) filters.push({ field: 'layer', op: 'eq', value: q.layer });
    if (q.status) filters.push({ field: 'status', op: 'eq', value: q.status });
    const { items, total } = await attacks.list(this.database.db, accountId, {
      filters,
      order: 'created_on',
      direction: 'desc',
      limit: q.limit,
      offset: q.offset,
      withTotal: true,
    });
    return { items: items.map((d) => this.overlay(d.body)), total };
  }

  async get(accountId: string, id: string): Promise<AttackRecord | undefined> {
    await this.writes.get(id);
    const doc = await attacks.get(this.database.db, accountId, id);
    return doc ? this.overlay(doc.body) : undefined;
  }

  /** Waits for pending writes (server stop). */
  async flush(): Promise<void> {
    await Promise.all([...this.writes.values()]);
  }
}
