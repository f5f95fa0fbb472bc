/**
 * @module interconnects — private network interconnects, CNI objects (BGP peering), connection
 * slots, area settings and letters of authorization (spec 000_c6f0ffba2ab6f7a4.txt, "What the
 * service does" items 1–4; "Interconnect", "CNI object", "Slot", "Interconnect settings";
 * endpoints under `/accounts/{account_id}/cni`); and the network-transit GRE and IPsec tunnels
 * with their health checks (spec 000 "Tunnel health check"; `/accounts/{account_id}/magic/
 * gre_tunnels` and `/ipsec_tunnels`, magic.ts; docs/interconnects.md "GRE and IPsec tunnels").
 *
 * Bodies are bare JSON, not the v4 envelope; lists are `{items, next}` with `cursor`/`limit`, and
 * accept `page`/`per_page` too; the interconnect list also carries the spec's `result` array (with
 * `result_info`). DELETE answers 200 with no body. Errors use the failure envelope.
 *
 * Slots come from a facilities catalog (built-in: eight real colocation facilities, six ports
 * each; `--cni-facilities <file.json>` replaces it, format in facilities.ts). A slot is occupied
 * while an interconnect uses it, for every account. Interconnects are `pending` for
 * `--cni-provisioning-seconds` (default 60) after create, then `active`; the status endpoint says
 * `healthy` then. `PUT /_outpost/accounts/{account_id}/cni/interconnects/{icon}/link`
 * `{state: up|down|unhealthy, reason?}` (root credential only) simulates a link fault; `up` also
 * ends provisioning at once. `GET` on the same path shows the link state.
 *
 * Permissions: Magic WAN Read/Write or Magic Transit Read/Write on the account (either group).
 *
 * Aliases (official client forms over the same records):
 * - `{icon}` is the interconnect name (official) or its id (spec's `id` field);
 * - list paging `cursor`/`limit` → `{items, next}` beside the spec's `page`/`per_page` → `result`;
 * - create `?validate_only=true` (spec) runs every check and answers the record without writing;
 * - status answers `{status: pending|healthy|down|unhealthy}` (spec) and `{state: Pending|Healthy|
 *   Down|Unhealthy, reason?}` (official) in one body; the interconnect record's own `status` is
 *   `pending|active|down|unhealthy`;
 * - CNI `edge_ip` ↔ `p2p_ip`, `bgp_asn` ↔ `bgp.customer_asn`, `bgp_password` ↔ `bgp.md5_key`;
 *   `interconnect`, `magic`, `bgp.extra_prefixes` and `bgp_mode` are stored as sent;
 * - slot filters `facility` (code or name, spec) beside `site` and `address_contains` (official).
 *
 * Tunnels (magic.ts) answer in the v4 envelope with the official client's shapes; PUT merges;
 * names are unique across GRE and IPsec; `psk_generate` answers a stored key once. Health checks
 * (prober.ts): while `health_check.enabled`, the process pings the effective target (saved target,
 * else the customer endpoint) with the system `ping` — high 1 s, mid 10 s, low 60 s, or
 * `--magic-probe-interval-ms` — and answers `health_status` (unknown|healthy|degraded|down|
 * disabled) and `health_checked_at` on each tunnel; changes are published as `magic.tunnel_health`.
 * Aliases: `rate: medium` (spec) is stored as `mid`; `target` string or `{saved}`, answered as the
 * object `{saved, effective}` under `x-magic-new-hc-target: true`.
 *
 * LIMITATIONS: no packets move — links, BGP sessions and VLANs are records only. Only `direct`
 * (physical) interconnects: the cloud-partner variant (`bandwidth`, `pairing_key`) is refused with
 * 400. The interconnect's `facility` is the facility code (spec: a string), not the official
 * client's `{name, address}` object; slot records carry that object. BGP passwords are stored in
 * clear in the database (a TCP MD5 key must be) and answered as `********`; sending the mask back
 * keeps the stored password. The `tunnel_id` CNI filter matches nothing (no CNI is attached to a
 * tunnel). BGP session state, bandwidth, traffic statistics, uptime history, light levels and
 * maintenance scheduling are not exposed (spec: the platform does not expose them either).
 * Tunnels are records too: nothing is encapsulated and no IKE runs; the prober pings the target
 * directly from this host, ignoring `type` and `direction`; health states live in process memory
 * (`unknown` again after a restart); `bgp_status` and `pskSet` are not served.
 */
import { defineArea } from '../../core/area.ts';
import { mountCniRoutes } from './cnis.ts';
import { loadCatalog } from './facilities.ts';
import { MAGIC_TRANSIT, MAGIC_WAN } from './http.ts';
import { loadProbeSpecs, mountMagicTunnelRoutes } from './magic.ts';
import { TunnelProber, type Transition } from './prober.ts';
import { mountInterconnectRoutes } from './routes.ts';

/** Published on every tunnel health change (`magic.tunnel_health`); see magic.ts. */
export type TunnelHealthEvent = Transition;
export const TUNNEL_HEALTH_TOPIC = 'magic.tunnel_health';

export default defineArea({
  name: 'interconnects',
  mount(ctx) {
    ctx.permissions.define({ key: MAGIC_WAN, name: 'Magic WAN', scope: 'account' });
    ctx.permissions.define({ key: MAGIC_TRANSIT, name: 'Magic Transit', scope: 'account' });
    const catalog = loadCatalog(ctx.config.cniFacilities);
    mountInterconnectRoutes(ctx, catalog);
    mountCniRoutes(ctx);

    const log = ctx.log.child({ area: 'interconnects' });
    const override = ctx.config.magicProbeIntervalMs;
    const intervalMs = override === undefined ? undefined : Math.max(50, override);
    const prober = new TunnelProber({
      // The timer only picks due tunnels; a tick shorter than the shortest interval keeps them on time.
      tickMs: Math.min(1000, intervalMs ?? 1000),
      now: () => ctx.clock.now(),
      onTransition: (t) => {
        log.info({ tunnel: t.id, kind: t.kind, from: t.previous, to: t.status }, 'tunnel health changed');
        ctx.events.publish(TUNNEL_HEALTH_TOPIC, t);
      },
      onError: (err) => log.error({ err }, 'tunnel health probe failed'),
    });
    mountMagicTunnelRoutes(ctx, prober, intervalMs);
    return {
      async start() {
        for (const spec of await loadProbeSpecs(ctx.database.db, intervalMs)) prober.set(spec.kind, spec.id, spec);
        prober.start();
      },
      async stop() {
        await prober.stop();
      },
    };
  },
});
