/**
 * Private network (IP) routes: the official `/accounts/{account_id}/teamnet/routes…` (create, list
 * with filters, get, edit, delete, lookup by IP, and the CIDR-path forms) and the spec's
 * `/accounts/{account_id}/tunnels/{tunnel_id}/routes` (`ip_network`), over one collection.
 * Networks are stored normalised (host bits cleared; a bare address is a /32 or /128). Two routes
 * of one virtual network may not overlap (409).
 */
import type { Principal } from '../../core/auth.ts';
import { apiError } from '../../core/errors.ts';
import { uuid } from '../../core/ids.ts';
import { pageOf } from '../../core/pagination.ts';
import type { Executor } from '../../core/storage/db.ts';
import { containsIp, ipToBig, overlaps, parseCidr, within, type Cidr } from './cidr.ts';
import {
  CreateRouteBody,
  EditRouteBody,
  IpLookupQuery,
  ListRoutesQuery,
  NetworkDeleteQuery,
  NetworkRouteBody,
  SpecRouteBody,
  TUNNEL_PARAMS,
} from './schemas.ts';
import type { TunnelsService } from './service.ts';
import { getTunnel, ipRoutes, tunnels, type StoredRoute } from './store.ts';

const read = { permission: 'cloudflare_tunnel', level: 'read' } as const;
const edit = { permission: 'cloudflare_tunnel', level: 'edit' } as const;
const tags = ['tunnel routes'];
const ROUTE_PARAMS = { route_id: 'uuid' } as const;

function cidrOf(network: string, field: string): Cidr {
  const c = parseCidr(network);
  if (!c)
    throw apiError(
      'tunnel_route_invalid',
      `${field}: ${JSON.stringify(network)} is not an IPv4 or IPv6 network in CIDR notation`,
    );
  return c;
}

/**
 * The CIDR of the `/network/{ip_network_encoded}` forms. Callers encode it themselves and the
 * official client encodes the path again, so one more decoding may be due.
 */
function pathNetwork(param: string): string {
  if (!param.includes('%')) return param;
  try {
    return decodeURIComponent(param);
  } catch {
    return param;
  }
}

/** The route as the official list answers it (tunnel name and type included). */
async function routeView(
  db: Executor,
  accountId: string,
  r: StoredRoute,
  names?: Map<string, string>,
) {
  let name = names?.get(r.tunnel_id);
  if (name === undefined) name = (await tunnels.get(db, accountId, r.tunnel_id))?.body.name ?? '';
  return {
    id: r.id,
    network: r.network,
    tunnel_id: r.tunnel_id,
    tunnel_name: name,
    tun_type: 'cfd_tunnel' as const,
    comment: r.comment,
    created_at: r.created_at,
    deleted_at: r.deleted_at,
    virtual_network_id: r.virtual_network_id,
  };
}

/** Spec form: the official fields plus `ip_network`. */
async function specView(db: Executor, accountId: string, r: StoredRoute) {
  return { ...(await routeView(db, accountId, r)), ip_network: r.network };
}

/** The most specific route covering an address (optionally within one virtual network). */
export function bestRoute(
  routes: StoredRoute[],
  ip: string,
  virtualNetworkId?: string,
): StoredRoute | undefined {
  const addr = ipToBig(ip);
  if (!addr) return undefined;
  let best: { r: StoredRoute; prefix: number } | undefined;
  for (const r of routes) {
    if (virtualNetworkId !== undefined && r.virtual_network_id !== virtualNetworkId) continue;
    const c = parseCidr(r.network);
    if (!c || !containsIp(c, addr)) continue;
    // Without a virtual network, routes of the default one win ties.
    const rank = c.prefix * 2 + (r.virtual_network_id === null ? 1 : 0);
    if (!best || rank > best.prefix) best = { r, prefix: rank };
  }
  return best?.r;
}

/** For private network access: the route covering `ip` in the accounts the principal may read. */
export async function findRouteFor(
  db: Executor,
  principal: Principal,
  ip: string,
  opts: { accountId?: string; virtualNetworkId?: string },
): Promise<{ accountId: string; route: StoredRoute } | undefined> {
  const docs = await ipRoutes.all(db, opts.accountId ?? null);
  const allowed = docs.filter((d) =>
    principal.allows('cloudflare_tunnel', 'read', { accountId: d.scopeId }),
  );
  const route = bestRoute(
    allowed.map((d) => d.body),
    ip,
    opts.virtualNetworkId,
  );
  if (!route) return undefined;
  return { accountId: allowed.find((d) => d.id === route.id)!.scopeId, route };
}

export function mountIpRoutes(svc: TunnelsService): void {
  const { router, clock } = svc.ctx;
  const db = svc.db;

  async function create(
    accountId: string,
    input: { network: string; tunnel_id: string; comment?: string; virtual_network_id?: string },
    field: string,
  ): Promise<StoredRoute> {
    await svc.requireAccount(accountId);
    const cidr = cidrOf(input.network, field);
    const now = clock.now();
    return svc.write(accountId, async (tx) => {
      await getTunnel(tx, accountId, input.tunnel_id);
      const vnet = input.virtual_network_id ?? null;
      for (const d of await ipRoutes.all(tx, accountId)) {
        if (d.body.virtual_network_id !== vnet) continue;
        const other = parseCidr(d.body.network);
        if (other && overlaps(cidr, other))
          throw apiError('tunnel_route_overlap', cidr.text, d.body.network, d.body.tunnel_id);
      }
      const route: StoredRoute = {
        id: uuid(),
        network: cidr.text,
        tunnel_id: input.tunnel_id,
        comment: input.comment ?? '',
        virtual_network_id: vnet,
        created_at: now.toISOString(),
        deleted_at: null,
      };
      await ipRoutes.insert(tx, accountId, route.id, route, now);
      return route;
    });
  }

  async function editRoute(
    accountId: string,
    routeId: string,
    patch: {
      network?: string;
      tunnel_id?: string;
      comment?: string;
      virtual_network_id?: string | null;
    },
  ): Promise<StoredRoute> {
    await svc.requireAccount(accountId);
    const cidr = patch.network === undefined ? undefined : cidrOf(patch.network, 'network');
    const now = clock.now();
    return svc.write(accountId, async (tx) => {
      const doc = await ipRoutes.get(tx, accountId, routeId);
      if (!doc) throw apiError('tunnel_route_not_found', routeId);
      if (patch.tunnel_id !== undefined) await getTunnel(tx, accountId, patch.tunnel_id);
      const next: StoredRoute = {
        ...doc.body,
        network: cidr?.text ?? doc.body.network,
        tunnel_id: patch.tunnel_id ?? doc.body.tunnel_id,
        comment: patch.comment ?? doc.body.comment,
        virtual_network_id:
          patch.virtual_network_id === undefined
            ? doc.body.virtual_network_id
            : patch.virtual_network_id,
      };
      const mine = parseCidr(next.network)!;
      for (const d of await ipRoutes.all(tx, accountId)) {
        if (d.id === routeId || d.body.virtual_network_id !== next.virtual_network_id) continue;
        const other = parseCidr(d.body.network);
        if (other && overlaps(mine, other))
          throw apiError('tunnel_route_overlap', mine.text, d.body.network, d.body.tunnel_id);
      }
      await ipRoutes.update(tx, doc, next, now);
      return next;
    });
  }

  async function removeRoute(accountId: string, routeId: string): Promise<StoredRoute> {
    await svc.requireAccount(accountId);
    return svc.write(accountId, async (tx) => {
      const doc = await ipRoutes.get(tx, accountId, routeId);
      if (!doc) throw apiError('tunnel_route_not_found', routeId);
      await ipRoutes.delete(tx, accountId, routeId);
      return { ...doc.body, deleted_at: clock.now().toISOString() };
    });
  }

  async function byNetwork(
    accountId: string,
    encoded: string,
    q: { tunnel_id?: string; virtual_network_id?: string },
  ): Promise<StoredRoute> {
    const cidr = cidrOf(pathNetwork(encoded), 'ip_network_encoded');
    const all = (await ipRoutes.all(db, accountId)).map((d) => d.body);
    const found = all.find(
      (r) =>
        r.network === cidr.text &&
        (q.tunnel_id === undefined || r.tunnel_id === q.tunnel_id) &&
        (q.virtual_network_id === undefined ? true : r.virtual_network_id === q.virtual_network_id),
    );
    if (!found) throw apiError('tunnel_route_not_found', cidr.text);
    return found;
  }

  const BASE = '/accounts/:account_id/teamnet/routes';
  router.add(
    {
      method: 'POST',
      path: BASE,
      operationId: 'tunnel-route-create-a-tunnel-route',
      summary: 'Route a private network through a tunnel',
      auth: edit,
      body: CreateRouteBody,
      tags,
    },
    async ({ params, body }) =>
      routeView(db, params.account_id, await create(params.account_id, body, 'network')),
  );
  router.add(
    {
      method: 'GET',
      path: BASE,
      operationId: 'tunnel-route-list-tunnel-routes',
      summary: 'List private network routes',
      auth: read,
      query: ListRoutesQuery,
      tags,
    },
    async ({ params, query: q }) => {
      const accountId = params.account_id;
      await svc.requireAccount(accountId);
      if (q.is_deleted === true) return pageOf([], q);
      if (q.tun_types && q.tun_types.length > 0 && !q.tun_types.includes('cfd_tunnel'))
        return pageOf([], q);
      const subset =
        q.network_subset === undefined ? undefined : cidrOf(q.network_subset, 'network_subset');
      const superset =
        q.network_superset === undefined
          ? undefined
          : cidrOf(q.network_superset, 'network_superset');
      const existedAt = q.existed_at === undefined ? undefined : Date.parse(q.existed_at);
      const names = new Map((await tunnels.all(db, accountId)).map((d) => [d.id, d.body.name]));
      const routes = (await ipRoutes.all(db, accountId))
        .map((d) => d.body)
        .filter((r) => q.tunnel_id === undefined || r.tunnel_id === q.tunnel_id)
        .filter((r) => q.route_id === undefined || r.id === q.route_id)
        .filter((r) => q.comment === undefined || r.comment === q.comment)
        .filter(
          (r) =>
            q.virtual_network_id === undefined || r.virtual_network_id === q.virtual_network_id,
        )
        .filter((r) => existedAt === undefined || Date.parse(r.created_at) <= existedAt)
        // network_subset: routes that are subsets of (inside) the given network; superset: that contain it.
        .filter((r) => !subset || within(parseCidr(r.network)!, subset))
        .filter((r) => !superset || within(superset, parseCidr(r.network)!));
      const views = await Promise.all(routes.map((r) => routeView(db, accountId, r, names)));
      return pageOf(views, q);
    },
  );
  router.add(
    {
      method: 'GET',
      path: `${BASE}/ip/:ip`,
      operationId: 'tunnel-route-get-tunnel-route-by-ip',
      summary: 'The route that covers an address',
      auth: read,
      query: IpLookupQuery,
      tags,
    },
    async ({ params, query }) => {
      const accountId = params.account_id;
      await svc.requireAccount(accountId);
      if (!ipToBig(params.ip))
        throw apiError(
          'tunnel_route_invalid',
          `ip: ${JSON.stringify(params.ip)} is not an IP address`,
        );
      const routes = (await ipRoutes.all(db, accountId)).map((d) => d.body);
      let route = bestRoute(routes, params.ip, query.virtual_network_id);
      if (
        !route &&
        query.virtual_network_id !== undefined &&
        query.default_virtual_network_fallback
      )
        route = bestRoute(routes, params.ip);
      if (!route) throw apiError('tunnel_no_route_for_ip', params.ip);
      return routeView(db, accountId, route);
    },
  );
  router.add(
    {
      method: 'GET',
      path: `${BASE}/:route_id`,
      operationId: 'tunnel-route-get-tunnel-route',
      summary: 'Get a route',
      auth: read,
      params: ROUTE_PARAMS,
      tags,
    },
    async ({ params }) => {
      await svc.requireAccount(params.account_id);
      const doc = await ipRoutes.get(db, params.account_id, params.route_id);
      if (!doc) throw apiError('tunnel_route_not_found', params.route_id);
      return routeView(db, params.account_id, doc.body);
    },
  );
  router.add(
    {
      method: 'PATCH',
      path: `${BASE}/:route_id`,
      operationId: 'tunnel-route-update-a-tunnel-route',
      summary: 'Edit a route',
      auth: edit,
      params: ROUTE_PARAMS,
      body: EditRouteBody,
      tags,
    },
    async ({ params, body }) =>
      routeView(db, params.account_id, await editRoute(params.account_id, params.route_id, body)),
  );
  router.add(
    {
      method: 'DELETE',
      path: `${BASE}/:route_id`,
      operationId: 'tunnel-route-delete-a-tunnel-route',
      summary: 'Delete a route',
      auth: edit,
      params: ROUTE_PARAMS,
      tags,
    },
    async ({ params }) =>
      routeView(db, params.account_id, await removeRoute(params.account_id, params.route_id)),
  );

  const NET = `${BASE}/network/:ip_network_encoded`;
  router.add(
    {
      method: 'POST',
      path: NET,
      operationId: 'tunnel-route-create-a-tunnel-route-with-cidr',
      summary: 'Route a network given in the path (URL-encoded CIDR)',
      auth: edit,
      body: NetworkRouteBody,
      tags,
    },
    async ({ params, body }) =>
      routeView(
        db,
        params.account_id,
        await create(
          params.account_id,
          { ...body, network: pathNetwork(params.ip_network_encoded) },
          'ip_network_encoded',
        ),
      ),
  );
  router.add(
    {
      method: 'DELETE',
      path: NET,
      operationId: 'tunnel-route-delete-a-tunnel-route-with-cidr',
      summary: 'Delete the route of a network given in the path',
      auth: edit,
      query: NetworkDeleteQuery,
      tags,
    },
    async ({ params, query }) => {
      await svc.requireAccount(params.account_id);
      const found = await byNetwork(params.account_id, params.ip_network_encoded, query);
      return routeView(db, params.account_id, await removeRoute(params.account_id, found.id));
    },
  );
  router.add(
    {
      method: 'PATCH',
      path: NET,
      operationId: 'tunnel-route-update-a-tunnel-route-with-cidr',
      summary: 'Edit the route of a network given in the path',
      auth: edit,
      body: EditRouteBody.omit({ network: true }).optional(),
      tags,
    },
    async ({ params, body }) => {
      await svc.requireAccount(params.account_id);
      const found = await byNetwork(params.account_id, params.ip_network_encoded, {});
      return routeView(
        db,
        params.account_id,
        await editRoute(params.account_id, found.id, body ?? {}),
      );
    },
  );

  // --- the spec's form: /accounts/{account_id}/tunnels/{tunnel_id}/routes ----------------------

  const SPEC = '/accounts/:account_id/tunnels/:tunnel_id/routes';
  router.add(
    {
      method: 'POST',
      path: SPEC,
      operationId: 'tunnels-create-ip-route',
      summary: 'Route a private network (ip_network) through the tunnel',
      auth: edit,
      params: TUNNEL_PARAMS,
      body: SpecRouteBody,
      tags,
    },
    async ({ params, body }) =>
      specView(
        db,
        params.account_id,
        await create(
          params.account_id,
          {
            network: body.ip_network,
            tunnel_id: params.tunnel_id,
            comment: body.comment,
            virtual_network_id: body.virtual_network_id,
          },
          'ip_network',
        ),
      ),
  );
  router.add(
    {
      method: 'GET',
      path: SPEC,
      operationId: 'tunnels-list-ip-routes',
      summary: "The tunnel's private network routes",
      auth: read,
      params: TUNNEL_PARAMS,
      tags,
    },
    async ({ params }) => {
      await svc.requireAccount(params.account_id);
      await getTunnel(db, params.account_id, params.tunnel_id);
      const docs = (await ipRoutes.findBy(db, 'tunnel_id', params.tunnel_id)).filter(
        (d) => d.scopeId === params.account_id,
      );
      docs.sort(
        (a, b) => a.body.created_at.localeCompare(b.body.created_at) || a.id.localeCompare(b.id),
      );
      return Promise.all(docs.map((d) => specView(db, params.account_id, d.body)));
    },
  );
}
