/** Thin handlers for `/zones/{zone_id}/dns_records…`. */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { ApiError } from '../../core/errors.ts';
import { limitOffset, pageFrom, pageOf, pageQuery } from '../../core/pagination.ts';
import type { Filter, FilterOp } from '../../core/storage/collection.ts';
import { lockScope } from '../../core/storage/locks.ts';
import { qBool, qString, validate } from '../../core/validate.ts';
import type { Zone } from '../zones/index.ts';
import { applyPatch, canonicalizeRecord } from './record-rules.ts';
import { DnsRecordInput, DnsRecordPatch } from './schemas.ts';
import { deleteRecord, dnsRecords, getRecord, insertRecord, replaceRecord, type RecordField, type StoredRecord } from './store.ts';
import { exportZoneFile, parseZoneFile } from './zonefile.ts';
import { COMMENT_KEYS, extraFilters, recordPredicate, TAG_KEYS } from './list-filters.ts';
import type { DnsChange } from './zone-index.ts';

const text = qString().optional();
/** A filter that may be given several times (`tag=a:1&tag=b:2`). */
const repeatable = z.union([z.string().max(1000), z.array(z.string().max(1000)).max(50)]).optional();
export const ListRecordsQuery = z.object({
  ...pageQuery({ perPage: 100, min: 1, max: 5_000_000 }),
  type: qString(z.string().transform((s) => s.toUpperCase())).optional(),
  name: text,
  'name.exact': text,
  'name.contains': text,
  'name.startswith': text,
  'name.endswith': text,
  content: text,
  'content.exact': text,
  'content.contains': text,
  'content.startswith': text,
  'content.endswith': text,
  proxied: qBool().optional(),
  match: qString(z.enum(['any', 'all'])).optional(),
  tag_match: qString(z.enum(['any', 'all'])).optional(),
  search: text,
  ...Object.fromEntries([...COMMENT_KEYS, ...TAG_KEYS].map((k) => [k, repeatable])),
  order: qString(z.enum(['type', 'name', 'content', 'ttl', 'proxied'])).optional(),
  direction: qString(z.enum(['asc', 'desc'])).optional(),
});

const BatchBody = z.object({
  deletes: z.array(z.object({ id: z.string() })).optional(),
  patches: z.array(z.object({ id: z.string() }).passthrough()).optional(),
  puts: z.array(z.object({ id: z.string() }).passthrough()).optional(),
  posts: z.array(z.unknown()).optional(),
});

const RECORD_ID = { dns_record_id: 'hex32' } as const;

export function mountDnsRoutes(ctx: AreaContext): void {
  const { router, database, clock, events } = ctx;
  const db = database.db;
  const read = { permission: 'dns', level: 'read' } as const;
  const edit = { permission: 'dns', level: 'edit' } as const;
  const tags = ['dns'];
  /** One transaction per write, with the zone's records locked against concurrent writers. */
  const write = <T>(zone: Zone, fn: (tx: typeof db) => Promise<T>) =>
    db.transaction().execute(async (tx) => {
      await lockScope(tx, database.dialect, `dns:${zone.id}`);
      return fn(tx as unknown as typeof db);
    });
  /** Tells the data planes what changed, synchronously, before the API answers. */
  const changed = (zone: Zone, upserted: StoredRecord[], deleted: string[] = []) =>
    events.publish('dns.changed', { zoneId: zone.id, upserted, deleted } satisfies DnsChange);

  router.add(
    { method: 'GET', path: '/zones/:zone_id/dns_records', operationId: 'dns-records-for-a-zone-list-dns-records', summary: 'List DNS records', auth: read, query: ListRecordsQuery, tags },
    async ({ resolved, query }) => {
      const zone = resolved.zone_id as Zone;
      const filters = listFilters(query);
      const extra = extraFilters(query as Record<string, unknown>);
      if (extra) {
        // Comments, tags and search have no indexed column: filter, sort and page in memory.
        const keep = recordPredicate(filters, extra, query.match);
        const rows = (await dnsRecords.all(db, zone.id)).map((d) => d.body).filter(keep);
        const key = query.order ?? 'created_on';
        const cmp = (a: StoredRecord, b: StoredRecord) => {
          const x = (a as unknown as Record<string, string | number | boolean>)[key];
          const y = (b as unknown as Record<string, string | number | boolean>)[key];
          return x < y ? -1 : x > y ? 1 : 0;
        };
        rows.sort(cmp);
        if (query.direction === 'desc') rows.reverse();
        return pageOf(rows, query);
      }
      const base = { filters, match: query.match, direction: query.direction };
      if (query.order === 'ttl') {
        // ttl is not an indexed column: sort this (rare) order in memory.
        const { items } = await dnsRecords.list(db, zone.id, base);
        const sorted = items.map((d) => d.body).sort((a, b) => a.ttl - b.ttl);
        if (query.direction === 'desc') sorted.reverse();
        return pageOf(sorted, query);
      }
      const { items, total } = await dnsRecords.list(db, zone.id, { ...base, order: query.order ?? 'created_on', ...limitOffset(query) });
      return pageFrom(items.map((d) => d.body), total, query);
    },
  );

  router.add(
    { method: 'POST', path: '/zones/:zone_id/dns_records', operationId: 'dns-records-for-a-zone-create-dns-record', summary: 'Create a DNS record', auth: edit, body: DnsRecordInput, tags },
    async ({ resolved, body }) => {
      const zone = resolved.zone_id as Zone;
      const rec = canonicalizeRecord(body, zone.name);
      const stored = await write(zone, (tx) => insertRecord(tx, zone, rec, clock));
      changed(zone, [stored]);
      return stored;
    },
  );

  router.add(
    { method: 'GET', path: '/zones/:zone_id/dns_records/export', operationId: 'dns-records-for-a-zone-export-dns-records', summary: 'Export the zone as a BIND zone file', auth: read, tags },
    async ({ resolved }) => {
      const zone = resolved.zone_id as Zone;
      const records = (await dnsRecords.all(db, zone.id)).map((d) => d.body);
      return new Response(exportZoneFile(zone.name, records, clock.now()), { headers: { 'content-type': 'text/plain; charset=utf-8' } });
    },
  );

  router.add(
    { method: 'POST', path: '/zones/:zone_id/dns_records/import', operationId: 'dns-records-for-a-zone-import-dns-records', summary: 'Import a BIND zone file (multipart field `file`)', auth: edit, bodyType: 'multipart', tags },
    async ({ resolved, form }) => {
      const zone = resolved.zone_id as Zone;
      const file = form!.files.find((f) => f.field === 'file') ?? form!.files[0];
      const textField = form!.fields.file;
      const source = file ? file.data.toString('utf8') : typeof textField === 'string' ? textField : undefined;
      if (source === undefined) throw new ApiError(400, [{ code: 81045, message: 'file: a multipart part named file with the zone file is required' }]);
      const proxiedAll = form!.fields.proxied === 'true';
      const parsed = parseZoneFile(source, zone.name);
      if (parsed.errors.length > 0) {
        throw new ApiError(400, parsed.errors.slice(0, 20).map((e) => ({ code: 81045, message: `line ${e.line}: ${e.message}` })));
      }
      const records = parsed.records.map((input, i) => {
        const withProxy = proxiedAll && ['A', 'AAAA', 'CNAME'].includes(input.type) ? { ...input, proxied: true } : input;
        return withItem(`record ${i + 1} (${input.type} ${input.name})`, () => canonicalizeRecord(withProxy, zone.name));
      });
      const inserted = await write(zone, async (tx) => {
        const out: StoredRecord[] = [];
        for (const rec of records) {
          try {
            out.push(await insertRecord(tx, zone, rec, clock));
          } catch (err) {
            // Records identical to existing ones are skipped, as the platform does on re-import.
            if (err instanceof ApiError && err.errors[0]?.code === 81058) continue;
            throw err;
          }
        }
        return out;
      });
      if (inserted.length > 0) changed(zone, inserted);
      return { recs_added: inserted.length, total_records_parsed: records.length };
    },
  );

  router.add(
    { method: 'POST', path: '/zones/:zone_id/dns_records/batch', operationId: 'dns-records-for-a-zone-batch-dns-records', summary: 'Apply deletes, patches, puts and posts atomically', auth: edit, body: BatchBody, tags },
    async ({ resolved, body }) => {
      const zone = resolved.zone_id as Zone;
      const result = await write(zone, async (tx) => {
        const out = { deletes: [] as StoredRecord[], patches: [] as StoredRecord[], puts: [] as StoredRecord[], posts: [] as StoredRecord[] };
        for (const [i, d] of (body.deletes ?? []).entries()) {
          await withItemAsync(`deletes.${i}`, async () => {
            const doc = await getRecord(tx, zone.id, d.id);
            await deleteRecord(tx, zone.id, d.id);
            out.deletes.push(doc.body);
          });
        }
        for (const [i, p] of (body.patches ?? []).entries()) {
          await withItemAsync(`patches.${i}`, async () => {
            const patch = validate(DnsRecordPatch, p, 'body');
            const doc = await getRecord(tx, zone.id, p.id);
            out.patches.push(await replaceRecord(tx, zone, doc, applyPatch(doc.body, patch, zone.name), clock));
          });
        }
        for (const [i, p] of (body.puts ?? []).entries()) {
          await withItemAsync(`puts.${i}`, async () => {
            const input = validate(DnsRecordInput, p, 'body');
            const doc = await getRecord(tx, zone.id, p.id);
            out.puts.push(await replaceRecord(tx, zone, doc, canonicalizeRecord(input, zone.name), clock));
          });
        }
        for (const [i, p] of (body.posts ?? []).entries()) {
          await withItemAsync(`posts.${i}`, async () => {
            const input = validate(DnsRecordInput, p, 'body');
            out.posts.push(await insertRecord(tx, zone, canonicalizeRecord(input, zone.name), clock));
          });
        }
        return out;
      });
      changed(zone, [...result.patches, ...result.puts, ...result.posts], result.deletes.map((r) => r.id));
      return result;
    },
  );

  router.add(
    { method: 'GET', path: '/zones/:zone_id/dns_records/:dns_record_id', operationId: 'dns-records-for-a-zone-dns-record-details', summary: 'DNS record details', auth: read, params: RECORD_ID, tags },
    async ({ resolved, params }) => (await getRecord(db, (resolved.zone_id as Zone).id, params.dns_record_id)).body,
  );

  router.add(
    { method: 'PUT', path: '/zones/:zone_id/dns_records/:dns_record_id', operationId: 'dns-records-for-a-zone-update-dns-record', summary: 'Overwrite a DNS record', auth: edit, params: RECORD_ID, body: DnsRecordInput, tags },
    async ({ resolved, params, body }) => {
      const zone = resolved.zone_id as Zone;
      const rec = canonicalizeRecord(body, zone.name);
      const stored = await write(zone, async (tx) => replaceRecord(tx, zone, await getRecord(tx, zone.id, params.dns_record_id), rec, clock));
      changed(zone, [stored]);
      return stored;
    },
  );

  router.add(
    { method: 'PATCH', path: '/zones/:zone_id/dns_records/:dns_record_id', operationId: 'dns-records-for-a-zone-patch-dns-record', summary: 'Update fields of a DNS record', auth: edit, params: RECORD_ID, body: DnsRecordPatch, tags },
    async ({ resolved, params, body }) => {
      const zone = resolved.zone_id as Zone;
      const stored = await write(zone, async (tx) => {
        const doc = await getRecord(tx, zone.id, params.dns_record_id);
        return replaceRecord(tx, zone, doc, applyPatch(doc.body, body, zone.name), clock);
      });
      changed(zone, [stored]);
      return stored;
    },
  );

  router.add(
    { method: 'DELETE', path: '/zones/:zone_id/dns_records/:dns_record_id', operationId: 'dns-records-for-a-zone-delete-dns-record', summary: 'Delete a DNS record', auth: edit, params: RECORD_ID, tags },
    async ({ resolved, params }) => {
      const zone = resolved.zone_id as Zone;
      await write(zone, (tx) => deleteRecord(tx, zone.id, params.dns_record_id));
      changed(zone, [], [params.dns_record_id]);
      return { id: params.dns_record_id };
    },
  );
}

type ListQuery = z.infer<typeof ListRecordsQuery>;

const SUFFIX_OPS: Record<string, FilterOp> = { '': 'eq', exact: 'eq', contains: 'contains', startswith: 'startswith', endswith: 'endswith' };

function listFilters(q: ListQuery): Filter<RecordField>[] {
  const filters: Filter<RecordField>[] = [];
  if (q.type) filters.push({ field: 'type', op: 'eq', value: q.type });
  if (q.proxied !== undefined) filters.push({ field: 'proxied', op: 'eq', value: String(q.proxied) });
  for (const field of ['name', 'content'] as const) {
    for (const [suffix, op] of Object.entries(SUFFIX_OPS)) {
      const value = q[(suffix ? `${field}.${suffix}` : field) as keyof ListQuery];
      if (typeof value !== 'string') continue;
      // Names are stored lowercase without the trailing dot; match the same way.
      const v = field === 'name' ? value.toLowerCase().replace(/\.$/, '') : value;
      filters.push({ field, op, value: v });
    }
  }
  return filters;
}

/** Prefixes the messages of an item's errors with where the item sits in the request. */
function withItem<T>(where: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw prefixed(where, err);
  }
}

async function withItemAsync<T>(where: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw prefixed(where, err);
  }
}

function prefixed(where: string, err: unknown): unknown {
  if (!(err instanceof ApiError)) return err;
  return new ApiError(err.status, err.errors.map((e) => ({ ...e, message: `${where}: ${e.message}` })), err.headers);
}

