/**
 * @module dns — DNS records of a zone (spec 001 "DNS record": list with `type` filter, create,
 * update, delete; exact paths, PATCH, export/import and batch from the official document).
 * Validation per type, relative names completed to the zone, CNAME exclusivity and identical
 * records are enforced by record-rules.ts; zone files by zonefile.ts. Publishes `dns.changed`
 * after every committed write (the edge and the authoritative DNS server listen to it).
 * Aliases: none — the spec leaves the paths open and the official client's paths are served.
 * LIMITATIONS: the `tag.*`, `comment.*` and `search` list filters are not implemented; record
 * `settings` are stored and returned but do not change resolution; `ttl` ordering is done in memory.
 */
import { defineArea } from '../../core/area.ts';
import { mountDnsRoutes } from './routes.ts';
import { ZoneIndex } from './zone-index.ts';

export { ZoneIndex, type IndexedZone } from './zone-index.ts';
export type { StoredRecord } from './store.ts';
/** Service name of the shared in-memory zone index (`ctx.services.require<ZoneIndex>(ZONE_INDEX)`). */
export const ZONE_INDEX = 'dns.zone-index';

export default defineArea({
  name: 'dns',
  mount(ctx) {
    ctx.permissions.define({ key: 'dns', name: 'DNS', scope: 'zone' });
    mountDnsRoutes(ctx);
    const index = new ZoneIndex(ctx.database.db);
    ctx.services.provide(ZONE_INDEX, index);
    return {
      async start() {
        index.follow(ctx.events);
        await index.load();
      },
      async stop() {
        index.stop();
      },
    };
  },
});
