/**
 * @module tunnels — tunnels, their configuration, DNS and private network routes, and the data
 * plane that carries traffic through connectors (spec 000_c6f0ffba2ab6f7a4.txt "Tunnels";
 * docs/tunnels.md).
 *
 * One store, two API families:
 * - spec: `/accounts/{account_id}/tunnels` create (`name`, `tunnel_secret`; remotely managed by
 *   default, so the answer carries `token`), list, get, delete, `PUT|GET /{id}/configurations`,
 *   `POST /{id}/connections {hostname}` / `DELETE /{id}/connections/{route_id}` (DNS routes),
 *   `POST|GET /{id}/routes {ip_network}` (IP routes);
 * - official: `/accounts/{account_id}/cfd_tunnel` (create with `config_src` default `local`, list
 *   with filters, get, PATCH, delete, `/token`, `/configurations` GET/PUT, `/connections` GET and
 *   DELETE (cleanup, `?client_id=`), `/connectors/{id}`), `/accounts/{account_id}/teamnet/routes`
 *   (create, list, get, PATCH, delete, `/ip/{ip}`, `/network/{cidr}` forms) and
 *   `PUT /zones/{zone_id}/tunnels/{tunnel_id}/routes` (DNS route as the platform connector makes it).
 * Aliases: `/accounts/{a}/tunnels` GET is the official "list all tunnels" too; spec IP routes
 * answer the teamnet fields plus `ip_network`; `token` is on tunnels whose configuration is stored
 * by the service (`config_src: cloudflare`) as in the spec, and at `GET …/token` for any tunnel.
 *
 * Data plane: connectors dial `GET /_outpost/tunnel/connect` on the API port (HTTP/1.1 upgrade,
 * then HTTP/2 with the connector as server — see src/connector/protocol.ts); the edge hands
 * requests for CNAMEs to `<id>.cfargotunnel.com` to this area's origin handler (1033 without a
 * live connection); `outpost tunnel access --socks5` reaches private addresses through
 * `GET /_outpost/tunnel/access`. Status follows the connections in real time.
 *
 * LIMITATIONS: connection state is per process (several Outpost processes on one database do not
 * share connectors); `DELETE` of a tunnel with live connections is refused (clean up first) and
 * removes its IP routes but leaves its DNS records; virtual networks are ids only (no
 * `/teamnet/virtual_networks`); list without `is_deleted` leaves deleted tunnels out;
 * `tcp://`/`ssh://`/`rdp://`, `socks5` and `bastion` services validate but answer 502; no Access
 * (`originRequest.access`) enforcement; `/cfd_tunnel/{id}/management` is not served; until this
 * area has answered one request on a server, the connector endpoints answer 503 "retry now".
 */
import { defineArea } from '../../core/area.ts';
import { EDGE, type EdgeService } from '../../edge/index.ts';
import { ACCESS_PATH, CONNECT_PATH } from '../../connector/protocol.ts';
import { tunnelOriginHandler } from './edge-handler.ts';
import { TunnelEndpoint } from './endpoint.ts';
import { findRouteFor, mountIpRoutes } from './ip-routes.ts';
import { mountDnsRoutes } from './dns-routes.ts';
import { ConnectionRegistry } from './registry.ts';
import { mountTunnelRoutes, persistTransition } from './routes.ts';
import { TunnelsService } from './service.ts';
import { tunnelConfigs } from './store.ts';

/** How long a lost connection stays listed with `is_pending_reconnect`. */
const PENDING_RECONNECT_MS = 5 * 60_000;

export default defineArea({
  name: 'tunnels',
  mount(ctx) {
    ctx.permissions.define({
      key: 'cloudflare_tunnel',
      name: 'Cloudflare Tunnel',
      scope: 'account',
    });
    const log = ctx.log.child({ area: 'tunnels' });
    const db = ctx.database.db;
    // Writes of conns_active_at / conns_inactive_at, one chain per tunnel so they land in order.
    const chains = new Map<string, Promise<void>>();
    const registry = new ConnectionRegistry({
      pendingMs: PENDING_RECONNECT_MS,
      now: () => ctx.clock.now().getTime(),
      transition(tunnelId, accountId, to) {
        const at = ctx.clock.now();
        const next = (chains.get(tunnelId) ?? Promise.resolve())
          .then(() => persistTransition(db, accountId, tunnelId, to, at))
          .catch((err: unknown) =>
            log.debug({ err, tunnel: tunnelId }, 'could not record the connection state'),
          );
        chains.set(tunnelId, next);
        void next.then(() => {
          if (chains.get(tunnelId) === next) chains.delete(tunnelId);
        });
        ctx.events.publish('tunnel.status', { tunnelId, accountId, connections: to });
      },
    });
    const endpoint = new TunnelEndpoint({
      db,
      auth: ctx.auth,
      registry,
      log,
      now: () => ctx.clock.now(),
      coloName: ctx.config.tunnelColo,
      currentConfig: async (accountId, tunnelId) =>
        (await tunnelConfigs.get(db, accountId, tunnelId))?.body,
      findRoute: (principal, ip, opts) => findRouteFor(db, principal, ip, opts),
    });
    for (const path of [CONNECT_PATH, ACCESS_PATH]) {
      ctx.upgrades.on(path, (req, socket, head) => endpoint.handleUpgrade(req, socket, head));
    }
    const svc = new TunnelsService(ctx, registry, endpoint);
    mountTunnelRoutes(svc);
    mountIpRoutes(svc);
    mountDnsRoutes(svc);
    ctx.services
      .require<EdgeService>(EDGE)
      .addOriginHandler(
        tunnelOriginHandler(registry, { responseTimeoutMs: ctx.config.originResponseTimeoutMs }),
      );
    return {
      async stop() {
        endpoint.closeAll();
        await Promise.allSettled([...chains.values()]);
      },
    };
  },
});
