/**
 * The tunnels area's collections, all scoped by account: tunnels (soft-deleted: a deleted tunnel
 * keeps its row with `deleted_at` so `is_deleted=true` can list it and its name is free again),
 * their remote configurations (one row per tunnel, the latest version), private network routes
 * and the DNS routes created through the tunnel API.
 */
import { defineCollection, type Doc } from '../../core/storage/collection.ts';
import type { Executor } from '../../core/storage/db.ts';
import { apiError } from '../../core/errors.ts';
import type { TunnelConfig } from '../../connector/ingress.ts';

export interface StoredTunnel {
  id: string;
  account_tag: string;
  name: string;
  created_at: string;
  deleted_at: string | null;
  conns_active_at: string | null;
  conns_inactive_at: string | null;
  config_src: 'local' | 'cloudflare';
  tun_type: 'cfd_tunnel';
  metadata: Record<string, unknown>;
  /** base64; never answered. */
  secret: string;
}

export const tunnels = defineCollection<StoredTunnel, 'name' | 'deleted'>({
  kind: 'cfd_tunnel',
  indexes: { name: (t) => t.name, deleted: (t) => (t.deleted_at ? '1' : '0') },
});

export interface StoredConfig {
  account_id: string;
  tunnel_id: string;
  version: number;
  config: TunnelConfig;
  source: 'local' | 'cloudflare';
  created_at: string;
}

export const tunnelConfigs = defineCollection<StoredConfig>({ kind: 'cfd_tunnel_config' });

export interface StoredRoute {
  id: string;
  network: string;
  tunnel_id: string;
  comment: string;
  virtual_network_id: string | null;
  created_at: string;
  deleted_at: string | null;
}

export const ipRoutes = defineCollection<StoredRoute, 'tunnel_id' | 'network'>({
  kind: 'teamnet_route',
  indexes: { tunnel_id: (r) => r.tunnel_id, network: (r) => r.network },
});

export interface StoredDnsRoute {
  id: string;
  tunnel_id: string;
  hostname: string;
  zone_id: string;
  zone_name: string;
  dns_record_id: string;
  created_at: string;
}

export const dnsRoutes = defineCollection<StoredDnsRoute, 'tunnel_id' | 'hostname'>({
  kind: 'tunnel_dns_route',
  indexes: { tunnel_id: (r) => r.tunnel_id, hostname: (r) => r.hostname },
});

/** A live (not deleted) tunnel of the account, or 404. */
export async function getTunnel(
  db: Executor,
  accountId: string,
  tunnelId: string,
): Promise<Doc<StoredTunnel>> {
  const doc = await tunnels.get(db, accountId, tunnelId);
  if (!doc || doc.body.deleted_at) throw apiError('tunnel_not_found', tunnelId);
  return doc;
}

/** Live tunnels of an account with that name (names are unique among live tunnels). */
export async function tunnelsNamed(
  db: Executor,
  accountId: string,
  name: string,
): Promise<Doc<StoredTunnel>[]> {
  const { items } = await tunnels.list(db, accountId, {
    filters: [
      { field: 'name', op: 'eq', value: name },
      { field: 'deleted', op: 'eq', value: '0' },
    ],
  });
  return items;
}
