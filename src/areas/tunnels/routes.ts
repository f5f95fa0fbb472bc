/**
 * Tunnel handlers over one store: the spec's `/accounts/{account_id}/tunnels…` and the official
 * `/accounts/{account_id}/cfd_tunnel…` (create, list, get, edit, delete, configurations, token,
 * connections and their cleanup, connectors), plus the connector endpoints' route entries.
 */
import { randomBytes } from 'node:crypto';
import type { Context } from 'hono';
import { apiError, ApiError, CODES } from '../../core/errors.ts';
import { uuid } from '../../core/ids.ts';
import { pageOf } from '../../core/pagination.ts';
import { VersionConflict } from '../../core/storage/collection.ts';
import type { Executor } from '../../core/storage/db.ts';
import { compileIngress, IngressError, type TunnelConfig } from '../../connector/ingress.ts';
import { ACCESS_PATH, CONNECT_PATH } from '../../connector/protocol.ts';
import { secretBytes } from '../../connector/token.ts';
import {
  CleanupQuery,
  CreateTunnelBody,
  EditTunnelBody,
  ListTunnelsQuery,
  PutConfigBody,
  TUNNEL_PARAMS,
} from './schemas.ts';
import type { TunnelsService } from './service.ts';
import {
  dnsRoutes,
  getTunnel,
  ipRoutes,
  tunnelConfigs,
  tunnels,
  tunnelsNamed,
  type StoredConfig,
  type StoredDnsRoute,
  type StoredTunnel,
} from './store.ts';
import { removeRouteRecord } from './dns-routes.ts';

const read = { permission: 'cloudflare_tunnel', level: 'read' } as const;
const edit = { permission: 'cloudflare_tunnel', level: 'edit' } as const;
const tags = ['tunnels'];

/** `tunnel_secret` must be base64 of at least 32 bytes; absent → 32 random bytes. */
function checkSecret(secret: string | undefined): string {
  if (secret === undefined) return randomBytes(32).toString('base64');
  const bytes = secretBytes(secret);
  if (!bytes || bytes.length < 32) {
    throw apiError(
      'tunnel_invalid',
      `tunnel_secret: must be base64 of at least 32 bytes${bytes ? ` (got ${bytes.length})` : ''}`,
    );
  }
  return secret.trim();
}

/** Validates a configuration with the connector's rules; 400 with its message otherwise. */
export function checkConfig(config: TunnelConfig): void {
  try {
    compileIngress(config);
  } catch (err) {
    if (err instanceof IngressError) throw apiError('tunnel_ingress_invalid', err.message);
    throw err;
  }
}

export function mountTunnelRoutes(svc: TunnelsService): void {
  const { router, clock } = svc.ctx;
  const db = svc.db;

  async function create(
    c: Context,
    accountId: string,
    body: CreateTunnelBody,
    defaultSrc: 'local' | 'cloudflare',
  ) {
    await svc.requireAccount(accountId);
    const secret = checkSecret(body.tunnel_secret);
    const now = clock.now();
    const tunnel: StoredTunnel = {
      id: uuid(),
      account_tag: accountId,
      name: body.name,
      created_at: now.toISOString(),
      deleted_at: null,
      conns_active_at: null,
      conns_inactive_at: null,
      config_src: body.config_src ?? defaultSrc,
      tun_type: 'cfd_tunnel',
      metadata: body.metadata ?? {},
      secret,
    };
    await svc.write(accountId, async (tx) => {
      if ((await tunnelsNamed(tx, accountId, body.name)).length > 0)
        throw apiError('tunnel_name_exists');
      await tunnels.insert(tx, accountId, tunnel.id, tunnel, now);
    });
    return svc.view(tunnel, svc.endpointUrl(c));
  }

  async function list(c: Context, accountId: string, q: ListTunnelsQuery) {
    await svc.requireAccount(accountId);
    const endpoint = svc.endpointUrl(c);
    if (q.tun_types && q.tun_types.length > 0 && !q.tun_types.some((t) => t === 'cfd_tunnel'))
      return pageOf([], q);
    const at = (s: string | undefined) => (s === undefined ? undefined : Date.parse(s));
    const existedAt = at(q.existed_at);
    const activeAt = at(q.was_active_at);
    const inactiveAt = at(q.was_inactive_at);
    const ts = (s: string | null) => (s === null ? undefined : Date.parse(s));
    const all = (await tunnels.all(db, accountId)).map((d) => d.body);
    const views = all
      .filter((t) => (q.is_deleted === true ? t.deleted_at !== null : t.deleted_at === null))
      .filter((t) => q.name === undefined || t.name === q.name)
      .filter((t) => q.uuid === undefined || t.id === q.uuid.toLowerCase())
      .filter((t) => q.include_prefix === undefined || t.name.startsWith(q.include_prefix))
      .filter((t) => q.exclude_prefix === undefined || !t.name.startsWith(q.exclude_prefix))
      .filter(
        (t) =>
          existedAt === undefined ||
          (Date.parse(t.created_at) <= existedAt &&
            (t.deleted_at === null || Date.parse(t.deleted_at) > existedAt)),
      )
      .filter((t) => activeAt === undefined || (ts(t.conns_active_at) ?? Infinity) <= activeAt)
      .filter(
        (t) => inactiveAt === undefined || (ts(t.conns_inactive_at) ?? Infinity) <= inactiveAt,
      )
      .map((t) => svc.view(t, endpoint))
      .filter((v) => q.status === undefined || v.status === q.status);
    return pageOf(views, q);
  }

  async function get(c: Context, accountId: string, tunnelId: string) {
    await svc.requireAccount(accountId);
    return svc.view(await getTunnel(db, accountId, tunnelId), svc.endpointUrl(c));
  }

  async function remove(c: Context, accountId: string, tunnelId: string) {
    await svc.requireAccount(accountId);
    const endpoint = svc.endpointUrl(c);
    const now = clock.now();
    const routes: StoredDnsRoute[] = [];
    const deleted = await svc.write(accountId, async (tx) => {
      routes.length = 0;
      const doc = await getTunnel(tx, accountId, tunnelId);
      if (svc.registry.hasLive(tunnelId)) throw apiError('tunnel_has_connections');
      const body: StoredTunnel = { ...doc.body, deleted_at: now.toISOString() };
      await tunnels.update(tx, doc, body, now);
      await tunnelConfigs.delete(tx, accountId, tunnelId);
      for (const r of await ipRoutes.findBy(tx, 'tunnel_id', tunnelId))
        await ipRoutes.delete(tx, r.scopeId, r.id);
      for (const r of await dnsRoutes.findBy(tx, 'tunnel_id', tunnelId)) {
        routes.push(r.body);
        await dnsRoutes.delete(tx, r.scopeId, r.id);
      }
      return body;
    });
    // The CNAMEs its DNS routes created go with the tunnel.
    for (const r of routes) await removeRouteRecord(svc, accountId, r);
    // Connections still registering lose their tunnel.
    svc.registry.disconnect(tunnelId);
    return svc.view(deleted, endpoint);
  }

  async function putConfig(c: Context, accountId: string, tunnelId: string, config: TunnelConfig) {
    await svc.requireAccount(accountId);
    svc.endpointUrl(c);
    checkConfig(config);
    const now = clock.now();
    const stored = await svc.write(accountId, async (tx) => {
      const doc = await getTunnel(tx, accountId, tunnelId);
      const prev = await tunnelConfigs.get(tx, accountId, tunnelId);
      const next: StoredConfig = {
        account_id: accountId,
        tunnel_id: tunnelId,
        version: (prev?.body.version ?? 0) + 1,
        config,
        source: 'cloudflare',
        created_at: now.toISOString(),
      };
      if (prev) await tunnelConfigs.update(tx, prev, next, now);
      else await tunnelConfigs.insert(tx, accountId, tunnelId, next, now);
      // Storing a configuration makes the tunnel remotely managed.
      if (doc.body.config_src !== 'cloudflare')
        await tunnels.update(tx, doc, { ...doc.body, config_src: 'cloudflare' }, now);
      return next;
    });
    svc.endpoint.broadcast(tunnelId, stored);
    return svc.configView((await getTunnel(db, accountId, tunnelId)).body, stored);
  }

  async function getConfig(c: Context, accountId: string, tunnelId: string) {
    await svc.requireAccount(accountId);
    svc.endpointUrl(c);
    const doc = await getTunnel(db, accountId, tunnelId);
    return svc.configView(doc.body, (await tunnelConfigs.get(db, accountId, tunnelId))?.body);
  }

  // --- the spec's family: /accounts/{account_id}/tunnels ---------------------------------------

  const SPEC = '/accounts/:account_id/tunnels';
  router.add(
    {
      method: 'POST',
      path: SPEC,
      operationId: 'tunnels-create',
      summary: 'Create a tunnel (remotely managed unless config_src says otherwise)',
      auth: edit,
      body: CreateTunnelBody,
      tags,
    },
    async ({ c, params, body }) => create(c, params.account_id, body, 'cloudflare'),
  );
  router.add(
    {
      method: 'GET',
      path: SPEC,
      operationId: 'cloudflare-tunnel-list-all-tunnels',
      summary: 'List tunnels',
      auth: read,
      query: ListTunnelsQuery,
      tags,
    },
    async ({ c, params, query }) => list(c, params.account_id, query),
  );
  router.add(
    {
      method: 'GET',
      path: `${SPEC}/:tunnel_id`,
      operationId: 'tunnels-get',
      summary: 'Get a tunnel (status, connections, token)',
      auth: read,
      params: TUNNEL_PARAMS,
      tags,
    },
    async ({ c, params }) => get(c, params.account_id, params.tunnel_id),
  );
  router.add(
    {
      method: 'DELETE',
      path: `${SPEC}/:tunnel_id`,
      operationId: 'tunnels-delete',
      summary: 'Delete a tunnel without live connections',
      auth: edit,
      params: TUNNEL_PARAMS,
      tags,
    },
    async ({ c, params }) => remove(c, params.account_id, params.tunnel_id),
  );
  // --- the official family: /accounts/{account_id}/cfd_tunnel ----------------------------------

  const CFD = '/accounts/:account_id/cfd_tunnel';
  router.add(
    {
      method: 'POST',
      path: CFD,
      operationId: 'cloudflare-tunnel-create-a-cloudflare-tunnel',
      summary: 'Create a tunnel',
      auth: edit,
      body: CreateTunnelBody,
      tags,
    },
    async ({ c, params, body }) => create(c, params.account_id, body, 'local'),
  );
  router.add(
    {
      method: 'GET',
      path: CFD,
      operationId: 'cloudflare-tunnel-list-cloudflare-tunnels',
      summary: 'List tunnels',
      auth: read,
      query: ListTunnelsQuery,
      tags,
    },
    async ({ c, params, query }) => list(c, params.account_id, query),
  );
  router.add(
    {
      method: 'GET',
      path: `${CFD}/:tunnel_id`,
      operationId: 'cloudflare-tunnel-get-a-cloudflare-tunnel',
      summary: 'Get a tunnel',
      auth: read,
      params: TUNNEL_PARAMS,
      tags,
    },
    async ({ c, params }) => get(c, params.account_id, params.tunnel_id),
  );
  router.add(
    {
      method: 'PATCH',
      path: `${CFD}/:tunnel_id`,
      operationId: 'cloudflare-tunnel-update-a-cloudflare-tunnel',
      summary: 'Rename a tunnel or rotate its secret',
      auth: edit,
      params: TUNNEL_PARAMS,
      body: EditTunnelBody,
      tags,
    },
    async ({ c, params, body }) => {
      const accountId = params.account_id;
      await svc.requireAccount(accountId);
      const secret = body.tunnel_secret === undefined ? undefined : checkSecret(body.tunnel_secret);
      const now = clock.now();
      const updated = await svc.write(accountId, async (tx) => {
        const doc = await getTunnel(tx, accountId, params.tunnel_id);
        if (
          body.name !== undefined &&
          body.name !== doc.body.name &&
          (await tunnelsNamed(tx, accountId, body.name)).length > 0
        ) {
          throw apiError('tunnel_name_exists');
        }
        const next: StoredTunnel = {
          ...doc.body,
          name: body.name ?? doc.body.name,
          secret: secret ?? doc.body.secret,
        };
        await tunnels.update(tx, doc, next, now);
        return next;
      });
      return svc.view(updated, svc.endpointUrl(c));
    },
  );
  router.add(
    {
      method: 'DELETE',
      path: `${CFD}/:tunnel_id`,
      operationId: 'cloudflare-tunnel-delete-a-cloudflare-tunnel',
      summary: 'Delete a tunnel without live connections',
      auth: edit,
      params: TUNNEL_PARAMS,
      tags,
    },
    async ({ c, params }) => remove(c, params.account_id, params.tunnel_id),
  );
  // Configurations: the same two operations under both families' paths.
  for (const [prefix, ids] of [
    [SPEC, { get: 'tunnels-get-configuration', put: 'tunnels-put-configuration' }],
    [CFD, { get: 'cloudflare-tunnel-configuration-get-configuration', put: 'cloudflare-tunnel-configuration-put-configuration' }],
  ] as const) {
    router.add(
      {
        method: 'GET',
        path: `${prefix}/:tunnel_id/configurations`,
        operationId: ids.get,
        summary: 'Get the configuration',
        auth: read,
        params: TUNNEL_PARAMS,
        tags,
      },
      async ({ c, params }) => getConfig(c, params.account_id, params.tunnel_id),
    );
    router.add(
      {
        method: 'PUT',
        path: `${prefix}/:tunnel_id/configurations`,
        operationId: ids.put,
        summary: 'Set the ingress configuration (new version, pushed to connectors)',
        auth: edit,
        params: TUNNEL_PARAMS,
        body: PutConfigBody,
        tags,
      },
      async ({ c, params, body }) =>
        putConfig(c, params.account_id, params.tunnel_id, (body.config ?? {}) as TunnelConfig),
    );
  }

  router.add(
    {
      method: 'GET',
      path: `${CFD}/:tunnel_id/token`,
      operationId: 'cloudflare-tunnel-get-a-cloudflare-tunnel-token',
      summary: 'The token a connector runs with',
      auth: read,
      params: TUNNEL_PARAMS,
      tags,
    },
    async ({ c, params }) => {
      await svc.requireAccount(params.account_id);
      const doc = await getTunnel(db, params.account_id, params.tunnel_id);
      return svc.token(doc.body, svc.endpointUrl(c));
    },
  );
  router.add(
    {
      method: 'GET',
      path: `${CFD}/:tunnel_id/connections`,
      operationId: 'cloudflare-tunnel-list-cloudflare-tunnel-connections',
      summary: 'Connectors and their connections',
      auth: read,
      params: TUNNEL_PARAMS,
      tags,
    },
    async ({ c, params }) => {
      await svc.requireAccount(params.account_id);
      svc.endpointUrl(c);
      await getTunnel(db, params.account_id, params.tunnel_id);
      return svc.registry.clients(params.tunnel_id);
    },
  );
  router.add(
    {
      method: 'DELETE',
      path: `${CFD}/:tunnel_id/connections`,
      operationId: 'cloudflare-tunnel-clean-up-cloudflare-tunnel-connections',
      summary: 'Close the connections (of one connector with client_id)',
      auth: edit,
      params: TUNNEL_PARAMS,
      query: CleanupQuery,
      tags,
    },
    async ({ c, params, query }) => {
      await svc.requireAccount(params.account_id);
      svc.endpointUrl(c);
      await getTunnel(db, params.account_id, params.tunnel_id);
      svc.registry.disconnect(params.tunnel_id, query.client_id);
      return null;
    },
  );
  router.add(
    {
      method: 'GET',
      path: `${CFD}/:tunnel_id/connectors/:connector_id`,
      operationId: 'cloudflare-tunnel-get-cloudflare-tunnel-connector',
      summary: 'One connector',
      auth: read,
      params: { ...TUNNEL_PARAMS, connector_id: 'uuid' },
      tags,
    },
    async ({ c, params }) => {
      await svc.requireAccount(params.account_id);
      svc.endpointUrl(c);
      await getTunnel(db, params.account_id, params.tunnel_id);
      const client = svc.registry
        .clients(params.tunnel_id)
        .find((x) => x.id === params.connector_id);
      if (!client)
        throw new ApiError(404, [
          {
            code: CODES.tunnel_not_found.code,
            message: `Connector ${params.connector_id} not found`,
          },
        ]);
      return client;
    },
  );

  // --- connector endpoints (HTTP/1.1 upgrades; these entries serve the first request only) ------

  for (const [path, what] of [
    [
      CONNECT_PATH,
      'connector connections (Upgrade: outpost-tunnel, Authorization: Bearer <tunnel token>)',
    ],
    [ACCESS_PATH, 'private network TCP (Upgrade: outpost-tcp, Authorization: Bearer <API token>)'],
  ] as const) {
    router.add(
      {
        method: 'GET',
        path,
        operationId: `outpost-tunnel-${path.split('/').pop()}`,
        summary: `Upgrade endpoint for ${what}`,
        auth: 'custom',
        tags,
      },
      // Upgrades never reach here (the upgrade registry takes them); plain requests get 426.
      async ({ c }) =>
        c.json(
          {
            result: null,
            success: false,
            errors: [{ code: 1001, message: `this endpoint only takes HTTP/1.1 upgrades: ${what}` }],
            messages: [],
          },
          426,
        ),
    );
  }
}

/** Records a tunnel's connections becoming active or inactive (`conns_active_at`, `conns_inactive_at`). */
export async function persistTransition(
  db: Executor,
  accountId: string,
  tunnelId: string,
  to: 'active' | 'inactive',
  at: Date,
): Promise<void> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const doc = await tunnels.get(db, accountId, tunnelId);
    if (!doc || doc.body.deleted_at) return;
    const ts = at.toISOString();
    const body: StoredTunnel =
      to === 'active'
        ? { ...doc.body, conns_active_at: ts, conns_inactive_at: null }
        : { ...doc.body, conns_inactive_at: ts };
    try {
      await tunnels.update(db, doc, body, at);
      return;
    } catch (err) {
      if (!(err instanceof VersionConflict)) throw err;
    }
  }
}
