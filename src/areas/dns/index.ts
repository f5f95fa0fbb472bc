/**
 * @module dns — DNS records of a zone (spec 001 "DNS record": list with `type` filter, create,
 * update, delete; exact paths, PATCH, export/import and batch from the official document).
 * Validation per type, relative names completed to the zone, CNAME exclusivity and identical
 * records are enforced by record-rules.ts; zone files by zonefile.ts. Publishes `dns.changed`
 * after every committed write (the edge and the authoritative DNS server listen to it).
 * The authoritative DNS server (server.ts, wire.ts; docs/dns-server.md) answers for every active
 * zone over UDP and TCP on `--dns-port`; proxied records answer with `--edge-addresses`.
 * Aliases: none — the spec leaves the paths open and the official client's paths are served.
 * LIMITATIONS: the `tag.*`, `comment.*` and `search` list filters are not implemented; record
 * `settings` are stored and returned but do not change resolution; `ttl` ordering is done in memory.
 */
import { defineArea } from '../../core/area.ts';
import { ConfigError } from '../../core/config.ts';
import { edgeAddressesFor, startDnsServer, type DnsServer } from './server.ts';
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
