/**
 * @module dns — DNS records of a zone (spec 001 "DNS record": list with `type` filter, create,
 * update, delete; exact paths, PATCH, export/import and batch from the official document).
 * Validation per type, relative names completed to the zone, CNAME exclusivity and identical
 * records are enforced by record-rules.ts; zone files by zonefile.ts. Publishes `dns.changed`
 * after every committed write (the edge and the authoritative DNS server listen to it).
 * The authoritative DNS server (server.ts, wire.ts; docs/dns-server.md) answers for every active
 * zone over UDP and TCP on `--dns-port`; proxied records answer with `--edge-addresses`.
 * Aliases: none — the spec leaves the paths open and the official client's paths are served.
 * LIMITATIONS: record `settings` are stored and returned but do not change resolution; `ttl`
 * ordering, and lists filtered by comment, tag or search, are done in memory.
 */
import type { z } from 'zod';
import { defineArea } from '../../core/area.ts';
import type { Clock } from '../../core/clock.ts';
import { ConfigError } from '../../core/config.ts';
import type { EventBus } from '../../core/events.ts';
import { hexId } from '../../core/ids.ts';
import type { Database, Executor } from '../../core/storage/db.ts';
import { lockScope } from '../../core/storage/locks.ts';
import { validate } from '../../core/validate.ts';
import type { Zone } from '../zones/index.ts';
import { canonicalizeRecord, findConflict, sameRecordData } from './record-rules.ts';
import { DnsRecordInput } from './schemas.ts';
import { dnsRecords, type StoredRecord } from './store.ts';
import type { DnsChange } from './zone-index.ts';
import { edgeAddressesFor, startDnsServer, type DnsServer } from './server.ts';
import { mountDnsRoutes } from './routes.ts';
import { ZoneIndex } from './zone-index.ts';

export { ZoneIndex, type IndexedZone } from './zone-index.ts';
export type { StoredRecord } from './store.ts';
/** Service name of the shared in-memory zone index (`ctx.services.require<ZoneIndex>(ZONE_INDEX)`). */
export const ZONE_INDEX = 'dns.zone-index';

// --- records owned by other areas ----------------------------------------------------------------

/** What `upsertRecord` and `deleteRecord` need from the calling area's context. */
export interface RecordWriter {
  database: Database;
  clock: Clock;
  events: EventBus;
}

/**
 * For areas that keep DNS records on a user's behalf (proxied applications): creates a record, or
 * replaces record `opts.id` when it exists. An identical record already at the name is returned
 * unchanged. The API's record rules apply (validation, CNAME exclusivity) and failures are the
 * API's errors; `dns.changed` is published after the commit, as the DNS routes do.
 * `managedByApps` sets `meta.managed_by_apps`.
 */
export async function upsertRecord(
  w: RecordWriter,
  zone: Zone,
  input: z.input<typeof DnsRecordInput>,
  opts: { id?: string; managedByApps?: boolean } = {},
): Promise<StoredRecord> {
  const rec = canonicalizeRecord(validate(DnsRecordInput, input, 'body'), zone.name);
  const outcome = await w.database.db.transaction().execute(async (tx) => {
    await lockScope(tx, w.database.dialect, `dns:${zone.id}`);
    const current = opts.id ? await dnsRecords.get(tx, zone.id, opts.id) : undefined;
    const { items } = await dnsRecords.list(tx, zone.id, { filters: [{ field: 'name', op: 'eq', value: rec.name }] });
    const others = items.filter((d) => d.id !== current?.id).map((d) => d.body);
    if (!current) {
      const same = others.find((r) => sameRecordData(r, rec));
      if (same) return { record: same, changed: false };
    }
    const conflict = findConflict(others, rec, zone.name);
    if (conflict) throw conflict;
    const now = w.clock.now();
    const ts = now.toISOString();
    const meta = {
      auto_added: false,
      managed_by_apps: opts.managedByApps ?? current?.body.meta.managed_by_apps ?? false,
      managed_by_argo_tunnel: current?.body.meta.managed_by_argo_tunnel ?? false,
    };
    if (current) {
      const next: StoredRecord = { ...rec, id: current.id, zone_id: zone.id, zone_name: zone.name, created_on: current.body.created_on, modified_on: ts, meta };
      await dnsRecords.update(tx, current, next, now);
      return { record: next, changed: true };
    }
    const stored: StoredRecord = { ...rec, id: hexId(), zone_id: zone.id, zone_name: zone.name, created_on: ts, modified_on: ts, meta };
    await dnsRecords.insert(tx, zone.id, stored.id, stored, now);
    return { record: stored, changed: true };
  });
  if (outcome.changed) w.events.publish('dns.changed', { zoneId: zone.id, upserted: [outcome.record], deleted: [] } satisfies DnsChange);
  return outcome.record;
}

/** Deletes record `id` of the zone if it exists and publishes `dns.changed`; says whether it existed. */
export async function deleteRecord(w: RecordWriter, zone: Zone, id: string): Promise<boolean> {
  const deleted = await w.database.db.transaction().execute(async (tx) => {
    await lockScope(tx, w.database.dialect, `dns:${zone.id}`);
    return dnsRecords.delete(tx, zone.id, id);
  });
  if (deleted) w.events.publish('dns.changed', { zoneId: zone.id, upserted: [], deleted: [id] } satisfies DnsChange);
  return deleted;
}

/** The records of a zone at an absolute name (any case, with or without the trailing dot). */
export async function recordsNamed(db: Executor, zoneId: string, name: string): Promise<StoredRecord[]> {
  const value = name.toLowerCase().replace(/\.$/, '');
  const { items } = await dnsRecords.list(db, zoneId, { filters: [{ field: 'name', op: 'eq', value }] });
  return items.map((d) => d.body);
}

export default defineArea({
  name: 'dns',
  mount(ctx) {
    ctx.permissions.define({ key: 'dns', name: 'DNS', scope: 'zone' });
    mountDnsRoutes(ctx);
    const index = new ZoneIndex(ctx.database.db);
    ctx.services.provide(ZONE_INDEX, index);
    let server: DnsServer | undefined;
    return {
      async start() {
        index.follow(ctx.events);
        await index.load();
        const { config } = ctx;
        let edge;
        try {
          edge = edgeAddressesFor(config.host, config.edgeAddresses);
        } catch (err) {
          throw new ConfigError(`--edge-addresses: ${(err as Error).message}`);
        }
        const log = ctx.log.child({ area: 'dns' });
        try {
          server = await startDnsServer({ host: config.host, port: config.dnsPort, edge, zones: index, clock: ctx.clock, log });
        } catch (err) {
          // A taken port (5353 is also mDNS's) must not keep the API from starting; say so instead.
          if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
          log.warn({ port: config.dnsPort }, 'authoritative DNS not started: port in use (choose another with --dns-port)');
          return [{ name: 'authoritative DNS', protocol: 'udp+tcp', address: `not listening: port ${config.dnsPort} in use` }];
        }
        return server.listeners;
      },
      async stop() {
        await server?.stop();
        server = undefined;
        index.stop();
      },
    };
  },
});
