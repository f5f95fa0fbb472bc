/**
 * Host routing: request host → the longest matching active zone → its proxied record at that
 * name (exact, then wildcard) → the origin. CNAMEs that point into Outpost's zones are followed;
 * external names are left for the connection to resolve (1016 if that fails); names an origin
 * handler claims (tunnels) are handed over as they are.
 */
import type { IndexedZone, StoredRecord, ZoneIndex } from '../areas/dns/index.ts';
import type { EdgeErrorCode } from './error-pages.ts';
import type { Route } from './types.ts';

const PROXIABLE = new Set(['A', 'AAAA', 'CNAME']);
const MAX_CHAIN = 8;

export type RouteResult = { route: Route; originHost: string } | { error: EdgeErrorCode };

function pick<T>(items: T[]): T {
  return items.length === 1 ? items[0] : items[Math.floor(Math.random() * items.length)];
}

export function routeHost(
  index: ZoneIndex,
  host: string,
  claimed: (target: string) => boolean,
): RouteResult {
  const zone = index.zoneFor(host);
  if (!zone || zone.status !== 'active' || zone.paused) return { error: 1001 };
  const found = index.recordsAt(zone, host);
  const proxied = found?.records.filter((r) => r.proxied && PROXIABLE.has(r.type)) ?? [];
  if (proxied.length === 0) return { error: 1001 };
  const addresses = proxied.filter((r) => r.type === 'A');
  const chosen =
    addresses.length > 0
      ? pick(addresses)
      : pick(
          proxied.filter((r) => r.type === 'AAAA').length > 0
            ? proxied.filter((r) => r.type === 'AAAA')
            : proxied,
        );
  const route: Route = {
    zoneId: zone.id,
    zoneName: zone.name,
    accountId: zone.accountId,
    recordName: found!.owner,
    recordType: chosen.type as Route['recordType'],
    content: chosen.content,
  };
  if (chosen.type !== 'CNAME') return { route, originHost: chosen.content };
  const target = followCname(index, chosen, claimed);
  return 'error' in target ? target : { route, originHost: target.host };
}

/** Follows a CNAME through Outpost's own zones to an address, or stops at an external name. */
function followCname(
  index: ZoneIndex,
  start: StoredRecord,
  claimed: (target: string) => boolean,
): { host: string } | { error: EdgeErrorCode } {
  let name = start.content.toLowerCase().replace(/\.$/, '');
  for (let depth = 0; depth < MAX_CHAIN; depth++) {
    if (claimed(name)) return { host: name };
    const zone: IndexedZone | undefined = index.zoneFor(name);
    if (!zone) return { host: name };
    const found = index.recordsAt(zone, name);
    if (!found) return { error: 1016 };
    const a = found.records.filter((r) => r.type === 'A');
    if (a.length > 0) return { host: pick(a).content };
    const aaaa = found.records.filter((r) => r.type === 'AAAA');
    if (aaaa.length > 0) return { host: pick(aaaa).content };
    const cname = found.records.find((r) => r.type === 'CNAME');
    if (!cname) return { error: 1016 };
    name = cname.content.toLowerCase().replace(/\.$/, '');
  }
  // A loop or an over-long chain resolves to nothing, as a resolver would give up.
  return { error: 1016 };
}
