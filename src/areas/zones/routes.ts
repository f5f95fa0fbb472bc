/** Thin handlers for `/zones`. */
import type { AreaContext } from '../../core/area.ts';
import { accounts, GLOBAL_SCOPE } from '../../core/accounts.ts';
import { apiError } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import { limitOffset, pageFrom, pageOf } from '../../core/pagination.ts';
import type { Filter } from '../../core/storage/collection.ts';
import { CreateZoneBody, EditZoneBody, ListZonesQuery, type Zone } from './schemas.ts';
import { normaliseZoneName } from './names.ts';
import { zones } from './store.ts';
import { z } from 'zod';

type ZoneField = 'name' | 'status' | 'account.name' | 'type';

export function mountZoneRoutes(ctx: AreaContext): void {
  const { router, database, clock, config, events } = ctx;
  const db = database.db;
  const read = { permission: 'zone', level: 'read' } as const;
  const edit = { permission: 'zone', level: 'edit' } as const;

  router.add(
    { method: 'GET', path: '/zones', operationId: 'zones-get', summary: 'List zones', auth: read, query: ListZonesQuery, tags: ['zones'] },
    async ({ query, principal }) => {
      const filters: Filter<ZoneField>[] = [];
      if (query.name) filters.push(textFilter('name', query.name));
      if (query.status) filters.push({ field: 'status', op: 'eq', value: query.status });
      if (query['account.name']) filters.push(textFilter('account.name', query['account.name']));
      if (query.type && query.type.length > 0) filters.push({ field: 'type', op: 'in', value: query.type });
      // Every zone has the same plan, so ordering by plan falls back to the name.
      const order = query.order === 'account.id' ? 'account.name' : query.order === 'plan.id' ? 'name' : query.order;
      // Without a type filter internal zones are left out; that holds whatever `match` says.
      const hideInternal = !query.type || query.type.length === 0;
      const inMemory = !principal!.isRoot || (hideInternal && query.match === 'any');
      if (hideInternal && !inMemory) filters.push({ field: 'type', op: 'ne', value: 'internal' });
      const q = { filters, match: query.match, order: order ?? ('name' as const), direction: query.direction };
      const scope = query['account.id'] ?? null;
      if (!inMemory) {
        const { items, total } = await zones.list(db, scope, { ...q, ...limitOffset(query) });
        return pageFrom(items.map((d) => d.body), total, query);
      }
      // Scoped tokens see only the zones their policies reach.
      const { items } = await zones.list(db, scope, q);
      const visible = items.filter(
        (d) => (!hideInternal || d.body.type !== 'internal') && principal!.allows('zone', 'read', { accountId: d.scopeId, zoneId: d.id }),
      );
      return pageOf(visible.map((d) => d.body), query);
    },
  );

  router.add(
    { method: 'POST', path: '/zones', operationId: 'zones-post', summary: 'Create a zone', auth: edit, body: CreateZoneBody, tags: ['zones'] },
    async ({ body, principal }) => {
      principal!.require('zone', 'edit', { accountId: body.account.id });
      const normalised = normaliseZoneName(body.name);
      if ('error' in normalised) throw apiError('zone_invalid_name', body.name, normalised.error);
      return db.transaction().execute(async (tx) => {
        const account = await accounts.get(tx, GLOBAL_SCOPE, body.account.id);
        if (!account) throw apiError('account_not_found', body.account.id);
        const dupes = await zones.list(tx, account.id, { filters: [{ field: 'name', op: 'eq', value: normalised.name }] });
        if (dupes.total > 0) throw apiError('zone_exists', normalised.name);
        const now = clock.now().toISOString();
        const active = config.zoneActivation === 'immediate';
        const zone: Zone = {
          id: hexId(),
          name: normalised.name,
          status: active ? 'active' : 'pending',
          paused: false,
          type: body.type ?? 'full',
          development_mode: 0,
          name_servers: [...config.nameServers],
          original_name_servers: null,
          original_registrar: null,
          original_dnshost: null,
          vanity_name_servers: [],
          created_on: now,
          modified_on: now,
          activated_on: active ? now : null,
          account: { id: account.id, name: account.body.name },
          // The spec types owner.id as an identifier string (not nullable): the owning account.
          owner: { id: account.id, type: 'organization', name: account.body.name },
          meta: { step: 2, custom_certificate_quota: 0, page_rule_quota: 3, phishing_detected: false },
          plan: FREE_PLAN,
          permissions: ['#zone:read', '#zone:edit', '#dns_records:read', '#dns_records:edit'],
          ...(body.type === 'partial' ? { verification_key: `${hexId()}-${hexId().slice(0, 12)}`, cname_suffix: 'cdn.outpost.local' } : {}),
        };
        await zones.insert(tx, account.id, zone.id, zone, clock.now());
        return zone;
      }).then((zone) => {
        events.publish('zone.created', zone);
        return zone;
      });
    },
  );

  router.add(
    { method: 'GET', path: '/zones/:zone_id', operationId: 'zones-0-get', summary: 'Zone details', auth: read, tags: ['zones'] },
    async ({ resolved }) => resolved.zone_id as Zone,
  );

  router.add(
    { method: 'PATCH', path: '/zones/:zone_id', operationId: 'zones-0-patch', summary: 'Edit a zone (one of paused, type, vanity_name_servers)', auth: edit, body: EditZoneBody, tags: ['zones'] },
    async ({ params, body }) => {
      const changes = (['paused', 'type', 'vanity_name_servers'] as const).filter((k) => body[k] !== undefined);
      if (changes.length !== 1) throw apiError('zone_patch_one');
      return db.transaction().execute(async (tx) => {
        const doc = await zones.findById(tx, params.zone_id);
        if (!doc) throw apiError('zone_not_found', params.zone_id);
        const next: Zone = { ...doc.body, ...pick(body, changes[0]), modified_on: clock.now().toISOString() };
        if (next.vanity_name_servers) next.vanity_name_servers = next.vanity_name_servers.map((n) => n.toLowerCase());
        return (await zones.update(tx, doc, next, clock.now())).body;
      }).then((zone) => {
        events.publish('zone.changed', zone);
        return zone;
      });
    },
  );

  router.add(
    { method: 'DELETE', path: '/zones/:zone_id', operationId: 'zones-0-delete', summary: 'Delete a zone and everything in it', auth: edit, tags: ['zones'] },
    async ({ params }) => {
      await db.transaction().execute(async (tx) => {
        const doc = await zones.findById(tx, params.zone_id);
        if (!doc) throw apiError('zone_not_found', params.zone_id);
        await zones.delete(tx, doc.scopeId, doc.id);
        // Zone-scoped resources of every area use the zone id as their scope.
        await tx.deleteFrom('documents').where('scope_id', '=', doc.id).execute();
      });
      events.publish('zone.deleted', { id: params.zone_id });
      return { id: params.zone_id };
    },
  );

  router.add(
    { method: 'PUT', path: '/zones/:zone_id/activation_check', operationId: 'put-zones-zone_id-activation_check', summary: 'Run the activation check (activates a pending zone)', auth: edit, tags: ['zones'] },
    async ({ params }) => {
      const activated = await db.transaction().execute(async (tx) => {
        const doc = await zones.findById(tx, params.zone_id);
        if (!doc) throw apiError('zone_not_found', params.zone_id);
        if (doc.body.status === 'active') return undefined;
        const now = clock.now().toISOString();
        return (await zones.update(tx, doc, { ...doc.body, status: 'active', activated_on: now, modified_on: now }, clock.now())).body;
      });
      if (activated) events.publish('zone.changed', activated);
      return { id: params.zone_id };
    },
  );
}

function pick<T extends object, K extends keyof T>(obj: T, key: K): Pick<T, K> {
  return { [key]: obj[key] } as Pick<T, K>;
}

/**
 * The `name` and `account.name` filters accept `equal:` (default), `not_equal:`, `contains:`,
 * `starts_with:`, `ends_with:` and the `*_case_sensitive` forms.
 */
function textFilter(field: 'name' | 'account.name', raw: string): Filter<ZoneField> {
  const m = /^(contains|starts_with|ends_with|equal|not_equal)(_case_sensitive)?:(.*)$/.exec(raw);
  const kind = (m?.[1] ?? 'equal') as 'contains' | 'starts_with' | 'ends_with' | 'equal' | 'not_equal';
  const value = m ? m[3] : raw;
  const op = ({ contains: 'contains', starts_with: 'startswith', ends_with: 'endswith', equal: 'eq', not_equal: 'ne' } as const)[kind];
  if (field === 'name') {
    // Zone names are stored in lowercase, so a case-sensitive search for capitals matches no zone
    // (`=` against the raw value) and its not_equal matches every zone (`!=` against it).
    if (m?.[2] && value !== value.toLowerCase()) return { field, op: op === 'ne' ? 'ne' : 'eq', value };
    return { field, op, value: value.toLowerCase() };
  }
  return { field, op, value };
}

const FREE_PLAN = {
  id: '0feeeeeeeeeeeeeeeeeeeeeeeeeeeeee',
  name: 'Free Website',
  price: 0,
  currency: 'USD',
  frequency: '',
  is_subscribed: false,
  can_subscribe: false,
  legacy_id: 'free',
  legacy_discount: false,
  externally_managed: false,
};

export type { z };
