/**
 * @module smart-routing — the per-zone smart routing switch (spec 000_c6f0ffba2ab6f7a4.txt,
 * "What the service does" item 7; "Smart routing setting"; endpoint "Smart routing").
 *
 * `GET` and `PATCH {value: on|off}` answer the envelope with `{id: 'smart_routing', value,
 * editable, modified_on}`. New zones start `off`, with `modified_on` the zone's creation time;
 * `modified_on` moves only when the value changes. `editable` is false when the account has no
 * billing profile, the credential lacks Zone Settings Write on the zone, or the zone's plan
 * forbids changes; a PATCH is then refused with 403 (codes 1651 billing, 1652 plan, 9109
 * permission). An invalid value is a 400.
 *
 * Operator endpoints (root credential only, envelope answers):
 * - `GET|PUT /_outpost/accounts/{account_id}/billing` `{configured: boolean}` — accounts have a
 *   billing profile until an operator sets `configured: false`;
 * - `GET|PUT /_outpost/zones/{zone_id}/plan` `{plan: free|pro|business|enterprise,
 *   smart_routing?: allowed|forbidden}` — default `free`, `allowed`.
 *
 * Permissions: Zone Settings Read (GET) and Zone Settings Write (PATCH) on the zone.
 *
 * Aliases: `/zones/{zone_id}/argo/smart_routing` (official client) and the spec's neutral
 * `/zones/{zone_id}/acceleration/smart_routing`, over the same record.
 *
 * LIMITATIONS: no traffic is routed differently — the switch is a record only. There is no real
 * billing: the profile is one operator-set flag. The operator's plan is kept by this area and is
 * not reflected in the zone object's `plan` field.
 */
import { defineArea } from '../../core/area.ts';
import { mountSmartRoutingRoutes, ZONE_SETTINGS } from './routes.ts';

export default defineArea({
  name: 'smart-routing',
  mount(ctx) {
    ctx.permissions.define({ key: ZONE_SETTINGS, name: 'Zone Settings', scope: 'zone' });
    mountSmartRoutingRoutes(ctx);
  },
});
