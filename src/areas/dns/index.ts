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

export default defineArea({
  name: 'dns',
  mount(ctx) {
    ctx.permissions.define({ key: 'dns', name: 'DNS', scope: 'zone' });
    mountDnsRoutes(ctx);
  },
});
