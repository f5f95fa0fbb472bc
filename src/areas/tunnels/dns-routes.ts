/**
 * DNS routes: a proxied CNAME `<tunnel id>.cfargotunnel.com` at a hostname, written through the
 * DNS area's exported record functions (its rules and errors apply; `dns.changed` is published).
 * - spec: `POST /accounts/{account_id}/tunnels/{tunnel_id}/connections {hostname}` finds the zone
 *   of the account owning the hostname (longest suffix); `DELETE …/connections/{route_id}` removes
 *   the CNAME if it still points at the tunnel;
 * - the platform connector's form: `PUT /zones/{zone_id}/tunnels/{tunnel_id}/routes {type: "dns",
 *   user_hostname, overwrite_existing}` → `{cname: new|updated|unchanged, name}`.
 * An existing record at the name is a conflict (the DNS area's 400) unless `overwrite_existing`,
 * which replaces a CNAME or removes A/AAAA records first.
 */
import { apiError, ApiError, CODES } from '../../core/errors.ts';
import { uuid } from '../../core/ids.ts';
import { deleteRecord, recordsNamed, upsertRecord, type StoredRecord } from '../dns/index.ts';
import { zones, type Zone } from '../zones/index.ts';
import { DnsRouteBody, TUNNEL_PARAMS, ZoneRouteBody } from './schemas.ts';
import type { TunnelsService } from './service.ts';
import { dnsRoutes, getTunnel, type StoredDnsRoute } from './store.ts';

const tags = ['tunnel routes'];

function normalName(hostname: string): string {
  return hostname.trim().toLowerCase().replace(/\.$/, '');
}

/**
 * Deletes the CNAME a DNS route created, if it is still there and still points at the tunnel (a
 * record the user changed since is left alone).
 */
export async function removeRouteRecord(svc: TunnelsService, accountId: string, route: StoredDnsRoute): Promise<void> {
  const { database, clock, events } = svc.ctx;
  const zone = (await zones.get(svc.db, accountId, route.zone_id))?.body;
  if (!zone) return;
  const current = (await recordsNamed(svc.db, zone.id, route.hostname)).find((r) => r.id === route.dns_record_id);
  if (current && current.type === 'CNAME' && current.content === `${route.tunnel_id}.cfargotunnel.com`) {
    await deleteRecord({ database, clock, events }, zone, current.id);
  }
}

export function mountDnsRoutes(svc: TunnelsService): void {
  const { router, clock, database, events } = svc.ctx;
  const db = svc.db;
  const writer = { database, clock, events };

  /** Creates or updates the proxied CNAME; says what happened. */
  async function route(
    zone: Zone,
    name: string,
    tunnelId: string,
    overwrite: boolean,
  ): Promise<{ record: StoredRecord; cname: 'new' | 'updated' | 'unchanged' }> {
    const target = `${tunnelId}.cfargotunnel.com`;
    const input = { type: 'CNAME' as const, name, content: target, proxied: true, ttl: 1 };
    const existing = await recordsNamed(db, zone.id, name);
    const cname = existing.find((r) => r.type === 'CNAME');
    if (cname && cname.content === target && cname.proxied)
      return { record: cname, cname: 'unchanged' };
    if (cname && (cname.content === target || overwrite))
      return {
        record: await upsertRecord(writer, zone, input, { id: cname.id }),
        cname: 'updated',
      };
    if (existing.length > 0 && overwrite) {
      for (const r of existing)
        if (r.type === 'A' || r.type === 'AAAA') await deleteRecord(writer, zone, r.id);
      return { record: await upsertRecord(writer, zone, input), cname: 'updated' };
    }
    return { record: await upsertRecord(writer, zone, input), cname: 'new' };
  }

  /** Remembers the route so the spec's DELETE can find it. */
  async function remember(
    accountId: string,
    tunnelId: string,
    zone: Zone,
    record: StoredRecord,
  ): Promise<StoredDnsRoute> {
    const now = clock.now();
    return svc.write(accountId, async (tx) => {
      const prior = (await dnsRoutes.findBy(tx, 'hostname', record.name)).find(
        (d) => d.scopeId === accountId,
      );
      const body: StoredDnsRoute = {
        id: prior?.id ?? uuid(),
        tunnel_id: tunnelId,
        hostname: record.name,
        zone_id: zone.id,
        zone_name: zone.name,
        dns_record_id: record.id,
        created_at: prior?.body.created_at ?? now.toISOString(),
      };
      if (prior) await dnsRoutes.update(tx, prior, body, now);
      else await dnsRoutes.insert(tx, accountId, body.id, body, now);
      return body;
    });
  }

  router.add(
    {
      method: 'POST',
      path: '/accounts/:account_id/tunnels/:tunnel_id/connections',
      operationId: 'tunnels-create-dns-route',
      summary: 'Route a hostname to the tunnel (proxied CNAME in the zone owning it)',
      auth: { permission: 'cloudflare_tunnel', level: 'edit' },
      params: TUNNEL_PARAMS,
      body: DnsRouteBody,
      tags,
    },
    async ({ params, body, principal }) => {
      const accountId = params.account_id;
      await svc.requireAccount(accountId);
      await getTunnel(db, accountId, params.tunnel_id);
      const name = normalName(body.hostname);
      const owner = (await zones.all(db, accountId))
        .map((d) => d.body)
        .filter((z) => name === z.name || name.endsWith(`.${z.name}`))
        .sort((a, b) => b.name.length - a.name.length)[0];
      if (!owner) throw apiError('tunnel_dns_no_zone', name, accountId);
      principal?.require('dns', 'edit', { accountId, zoneId: owner.id });
      const done = await route(owner, name, params.tunnel_id, body.overwrite_existing ?? false);
      const saved = await remember(accountId, params.tunnel_id, owner, done.record);
      return { ...saved, cname: done.cname };
    },
  );

  router.add(
    {
      method: 'DELETE',
      path: '/accounts/:account_id/tunnels/:tunnel_id/connections/:route_id',
      operationId: 'tunnels-delete-dns-route',
      summary: 'Remove a hostname route (and its CNAME while it points at the tunnel)',
      auth: { permission: 'cloudflare_tunnel', level: 'edit' },
      params: { ...TUNNEL_PARAMS, route_id: 'uuid' },
      tags,
    },
    async ({ params, principal }) => {
      const accountId = params.account_id;
      await svc.requireAccount(accountId);
      const doc = await dnsRoutes.get(db, accountId, params.route_id);
      if (!doc || doc.body.tunnel_id !== params.tunnel_id)
        throw apiError('tunnel_dns_route_not_found', params.route_id);
      const zone = (await zones.get(db, accountId, doc.body.zone_id))?.body;
      if (zone) {
        principal?.require('dns', 'edit', { accountId, zoneId: zone.id });
        const current = (await recordsNamed(db, zone.id, doc.body.hostname)).find(
          (r) => r.id === doc.body.dns_record_id,
        );
        if (
          current &&
          current.type === 'CNAME' &&
          current.content === `${params.tunnel_id}.cfargotunnel.com`
        ) {
          await deleteRecord(writer, zone, current.id);
        }
      }
      await svc.write(accountId, (tx) => dnsRoutes.delete(tx, accountId, doc.id));
      return { id: doc.id };
    },
  );

  router.add(
    {
      method: 'PUT',
      path: '/zones/:zone_id/tunnels/:tunnel_id/routes',
      operationId: 'tunnel-route-dns',
      summary: 'Route a hostname of the zone to a tunnel, as the platform connector does',
      auth: { permission: 'dns', level: 'edit' },
      params: TUNNEL_PARAMS,
      body: ZoneRouteBody,
      tags,
    },
    async ({ resolved, params, body }) => {
      const zone = resolved.zone_id as Zone;
      if (body.type !== 'dns')
        throw apiError(
          'tunnel_route_invalid',
          `type: only "dns" routes are supported, got ${JSON.stringify(body.type)}`,
        );
      if (!body.user_hostname)
        throw apiError('tunnel_route_invalid', 'user_hostname: required for dns routes');
      await getTunnel(db, zone.account.id, params.tunnel_id);
      const name = normalName(body.user_hostname);
      if (name !== zone.name && !name.endsWith(`.${zone.name}`)) {
        throw new ApiError(400, [
          {
            code: CODES.dns_outside_zone.code,
            message: `DNS name ${name} is not inside zone ${zone.name}.`,
          },
        ]);
      }
      const done = await route(zone, name, params.tunnel_id, body.overwrite_existing ?? false);
      await remember(zone.account.id, params.tunnel_id, zone, done.record);
      return { cname: done.cname, name };
    },
  );
}
