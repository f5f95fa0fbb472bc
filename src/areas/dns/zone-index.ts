/**
 * An in-memory view of every zone and its records, for the data planes that answer per request
 * (the edge's host routing, the authoritative DNS server): lookups never touch the database.
 * Built at start, then kept current by the change events the zones and DNS areas publish after
 * each commit. The events carry the changed documents and are delivered synchronously, so a
 * change is in the index before its API call answers and no event costs a database read.
 */
import type { EventBus } from '../../core/events.ts';
import type { Executor } from '../../core/storage/db.ts';
import { zones, type Zone } from '../zones/index.ts';
import { dnsRecords, type StoredRecord } from './store.ts';

/** Payload of `dns.changed`. */
export interface DnsChange {
  zoneId: string;
  upserted: StoredRecord[];
  /** Ids of deleted records. */
  deleted: string[];
}

export interface IndexedZone {
  id: string;
  name: string;
  accountId: string;
  status: Zone['status'];
  paused: boolean;
  nameServers: string[];
  /** Bumped on every change, so derived views (the DNS server's) know when to rebuild. */
  version: number;
  /** Records by owner name (absolute, lowercase). */
  records: Map<string, StoredRecord[]>;
  /** Owner name of each record id. */
  ownerOf: Map<string, string>;
}

export class ZoneIndex {
  private byName = new Map<string, IndexedZone>();
  private byId = new Map<string, IndexedZone>();
  private unsubscribe: (() => void)[] = [];

  constructor(private readonly db: Executor) {}

  async load(): Promise<void> {
    const [allZones, allRecords] = await Promise.all([zones.all(this.db, null), dnsRecords.all(this.db, null)]);
    const byZone = new Map<string, StoredRecord[]>();
    for (const d of allRecords) {
      const list = byZone.get(d.scopeId) ?? [];
      list.push(d.body);
      byZone.set(d.scopeId, list);
    }
    this.byName.clear();
    this.byId.clear();
    for (const z of allZones) this.put(z.body, byZone.get(z.id) ?? []);
  }

  /** Keeps the index current from the change events. */
  follow(events: EventBus): void {
    this.unsubscribe.push(
      events.subscribe('dns.changed', (p) => this.applyRecords(p as DnsChange)),
      events.subscribe('zone.created', (p) => this.put(p as Zone, [])),
      events.subscribe('zone.changed', (p) => this.put(p as Zone, this.recordsOf((p as Zone).id))),
      events.subscribe('zone.deleted', (p) => this.remove((p as { id: string }).id)),
    );
  }

  private recordsOf(zoneId: string): StoredRecord[] {
    const z = this.byId.get(zoneId);
    return z ? [...z.records.values()].flat() : [];
  }

  /** Applies one change in time proportional to its size (the owner of each id is indexed). */
  private applyRecords(change: DnsChange): void {
    const zone = this.byId.get(change.zoneId);
    if (!zone) return;
    for (const id of [...change.deleted, ...change.upserted.map((r) => r.id)]) {
      const owner = zone.ownerOf.get(id);
      if (owner === undefined) continue;
      zone.ownerOf.delete(id);
      const kept = (zone.records.get(owner) ?? []).filter((r) => r.id !== id);
      if (kept.length > 0) zone.records.set(owner, kept);
      else zone.records.delete(owner);
    }
    for (const r of change.upserted) {
      const list = zone.records.get(r.name);
      if (list) list.push(r);
      else zone.records.set(r.name, [r]);
      zone.ownerOf.set(r.id, r.name);
    }
    zone.version++;
  }

  stop(): void {
    for (const off of this.unsubscribe) off();
    this.unsubscribe = [];
  }

  async reloadZone(zoneId: string): Promise<void> {
    const zone = await zones.findById(this.db, zoneId);
    if (!zone) {
      this.remove(zoneId);
      return;
    }
    const records = await dnsRecords.all(this.db, zoneId);
    this.put(zone.body, records.map((d) => d.body));
  }

  private put(zone: Zone, records: StoredRecord[]): void {
    const version = (this.byId.get(zone.id)?.version ?? 0) + 1;
    this.remove(zone.id);
    const byOwner = new Map<string, StoredRecord[]>();
    const ownerOf = new Map<string, string>();
    for (const r of records) {
      const list = byOwner.get(r.name) ?? [];
      list.push(r);
      byOwner.set(r.name, list);
      ownerOf.set(r.id, r.name);
    }
    const entry: IndexedZone = {
      id: zone.id,
      name: zone.name,
      accountId: zone.account.id,
      status: zone.status,
      paused: zone.paused,
      nameServers: zone.name_servers,
      version,
      records: byOwner,
      ownerOf,
    };
    // Two accounts may hold the same zone name; the active one serves.
    const existing = this.byName.get(zone.name);
    if (!existing || (existing.status !== 'active' && zone.status === 'active')) this.byName.set(zone.name, entry);
    this.byId.set(zone.id, entry);
  }

  private remove(zoneId: string): void {
    const entry = this.byId.get(zoneId);
    if (!entry) return;
    this.byId.delete(zoneId);
    if (this.byName.get(entry.name) === entry) {
      this.byName.delete(entry.name);
      for (const other of this.byId.values()) if (other.name === entry.name) this.byName.set(other.name, other);
    }
  }

  zoneById(id: string): IndexedZone | undefined {
    return this.byId.get(id);
  }

  /** The longest zone name that is a suffix of `host` (any status; callers check `status`). */
  zoneFor(host: string): IndexedZone | undefined {
    let name = host.toLowerCase().replace(/\.$/, '');
    for (;;) {
      const z = this.byName.get(name);
      if (z) return z;
      const dot = name.indexOf('.');
      if (dot < 0) return undefined;
      name = name.slice(dot + 1);
    }
  }

  /** Records at `name`: the exact owner, else the closest wildcard (`*.<parent>`) inside the zone. */
  recordsAt(zone: IndexedZone, name: string): { owner: string; records: StoredRecord[] } | undefined {
    const exact = zone.records.get(name);
    if (exact && exact.length > 0) return { owner: name, records: exact };
    let parent = name;
    while (parent !== zone.name) {
      const dot = parent.indexOf('.');
      if (dot < 0) return undefined;
      parent = parent.slice(dot + 1);
      const wild = zone.records.get(`*.${parent}`);
      if (wild && wild.length > 0) return { owner: `*.${parent}`, records: wild };
      // A name that exists (with other records below it) stops the wildcard (RFC 4592 closest encloser).
      if (zone.records.has(parent)) return undefined;
    }
    return undefined;
  }
}
