/**
 * DNS records: one collection scoped by zone, with the list filters' fields (type, name, content,
 * proxied) extracted into indexed columns so filtering and paging happen in SQL.
 * Writes run in one transaction per request with the zone locked, so the duplicate and CNAME rules
 * hold under concurrent writers; a batch is all-or-nothing.
 */
import { defineCollection, type Doc } from '../../core/storage/collection.ts';
import type { Executor } from '../../core/storage/db.ts';
import type { Clock } from '../../core/clock.ts';
import { hexId } from '../../core/ids.ts';
import { apiError } from '../../core/errors.ts';
import type { Zone } from '../zones/index.ts';
import { findConflict, type CanonicalRecord } from './record-rules.ts';

export interface StoredRecord extends CanonicalRecord {
  id: string;
  zone_id: string;
  zone_name: string;
  created_on: string;
  modified_on: string;
  meta: { auto_added: boolean; managed_by_apps: boolean; managed_by_argo_tunnel: boolean };
  comment_modified_on?: string;
  tags_modified_on?: string;
}

export type RecordField = 'type' | 'name' | 'content' | 'proxied';

export const dnsRecords = defineCollection<StoredRecord, RecordField>({
  kind: 'dns_record',
  indexes: {
    type: (r) => r.type,
    name: (r) => r.name,
    content: (r) => r.content,
    proxied: (r) => String(r.proxied),
  },
});

/** Records already at `name` in the zone, minus the one being replaced. */
async function neighbours(db: Executor, zoneId: string, name: string, exceptId?: string): Promise<CanonicalRecord[]> {
  const { items } = await dnsRecords.list(db, zoneId, { filters: [{ field: 'name', op: 'eq', value: name }], withTotal: false });
  return items.filter((d) => d.id !== exceptId).map((d) => d.body);
}

export async function insertRecord(db: Executor, zone: Zone, rec: CanonicalRecord, clock: Clock): Promise<StoredRecord> {
  const conflict = findConflict(await neighbours(db, zone.id, rec.name), rec, zone.name);
  if (conflict) throw conflict;
  const now = clock.now();
  const ts = now.toISOString();
  const stored: StoredRecord = {
    ...rec,
    id: hexId(),
    zone_id: zone.id,
    zone_name: zone.name,
    created_on: ts,
    modified_on: ts,
    meta: { auto_added: false, managed_by_apps: false, managed_by_argo_tunnel: false },
  };
  await dnsRecords.insert(db, zone.id, stored.id, stored, now);
  return stored;
}

export async function getRecord(db: Executor, zoneId: string, id: string): Promise<Doc<StoredRecord>> {
  const doc = await dnsRecords.get(db, zoneId, id);
  if (!doc) throw apiError('dns_not_found');
  return doc;
}

export async function replaceRecord(
  db: Executor,
  zone: Zone,
  doc: Doc<StoredRecord>,
  rec: CanonicalRecord,
  clock: Clock,
): Promise<StoredRecord> {
  const conflict = findConflict(await neighbours(db, zone.id, rec.name, doc.id), rec, zone.name);
  if (conflict) throw conflict;
  const ts = clock.now().toISOString();
  const prev = doc.body;
  const next: StoredRecord = {
    ...rec,
    id: prev.id,
    zone_id: prev.zone_id,
    zone_name: prev.zone_name,
    created_on: prev.created_on,
    modified_on: ts,
    meta: prev.meta,
    ...(prev.comment !== rec.comment ? { comment_modified_on: ts } : prev.comment_modified_on ? { comment_modified_on: prev.comment_modified_on } : {}),
    ...(prev.tags.join('\n') !== rec.tags.join('\n') ? { tags_modified_on: ts } : prev.tags_modified_on ? { tags_modified_on: prev.tags_modified_on } : {}),
  };
  return (await dnsRecords.update(db, doc, next, clock.now())).body;
}

export async function deleteRecord(db: Executor, zoneId: string, id: string): Promise<void> {
  if (!(await dnsRecords.delete(db, zoneId, id))) throw apiError('dns_not_found');
}
