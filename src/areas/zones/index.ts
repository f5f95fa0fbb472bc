/**
 * @module zones — zones (spec 001 "Zone", `GET /zones`; create/edit/delete and the activation
 * check from the official document).
 * Registers the `zone_id` path resolver every zone-scoped area relies on for 404s and token scopes.
 * Zone deletion removes every document scoped to the zone (DNS records and later zone settings)
 * in the same transaction and publishes `zone.deleted`.
 * Aliases: none.
 * LIMITATIONS: no registrar — activation is immediate by default (`--zone-activation manual`
 * keeps zones pending until `PUT /zones/{id}/activation_check`); plans are a fixed free plan;
 * `name` and `account.name` filters support the `contains:`, `starts_with:`, `ends_with:`, `equal:`,
 * `not_equal:` forms and their `_case_sensitive` variants; `account.name` contains/starts/ends
 * matching ignores case even in the `_case_sensitive` form. `order=plan.id` orders by name (one
 * plan for every zone). Without a `type` filter, `internal` zones are not listed (spec).
 */
import { defineArea } from '../../core/area.ts';
import { apiError } from '../../core/errors.ts';
import { zones } from './store.ts';
import type { Zone } from './schemas.ts';
import { mountZoneRoutes } from './routes.ts';

export type { Zone } from './schemas.ts';
/** Read access for data planes that index zones (the DNS area's zone index). */
export { zones } from './store.ts';

export default defineArea({
  name: 'zones',
  mount(ctx) {
    ctx.permissions.define({ key: 'zone', name: 'Zone', scope: 'zone' });
    // Every zone-scoped request resolves its zone: keep recent lookups for a few seconds, and
    // drop an entry as soon as this process changes or deletes the zone.
    const cache = new Map<string, { zone: Zone; at: number }>();
    const CACHE_MS = 5_000;
    const forget = (p: unknown) => cache.delete((p as { id: string }).id);
    ctx.events.subscribe('zone.changed', forget);
    ctx.events.subscribe('zone.deleted', forget);
    ctx.router.resolveParam('zone_id', async (id) => {
      const now = Date.now();
      const hit = cache.get(id);
      let zone = hit && now - hit.at < CACHE_MS ? hit.zone : undefined;
      if (!zone) {
        const doc = await zones.findById(ctx.database.db, id);
        if (!doc) throw apiError('zone_not_found', id);
        zone = doc.body;
        if (cache.size > 10_000) cache.clear();
        cache.set(id, { zone, at: now });
      }
      return { target: { accountId: zone.account.id, zoneId: id }, value: zone };
    });
    mountZoneRoutes(ctx);
  },
});
