/**
 * @module alerting — notification policies and their delivery (spec 001 "Alert policy (DDoS)",
 * "Alert policies"; docs/alerting.md).
 * API: `/accounts/{a}/alerting/v3/policies` create (→ `{id}`), list (unpaginated), get, update
 * (→ `{id}`), delete (envelope without `result`); `…/destinations/webhooks` with a test POST on
 * create and update (a destination whose endpoint does not answer 2xx is refused with 400 and the
 * reason); `…/history` (page, per_page, since, before) with each delivery's status;
 * `…/available_alerts` (the DDoS alert types, the ones Outpost raises), `…/destinations/eligible`,
 * `…/destinations/pagerduty` (always empty; connecting is refused with the reason);
 * `…/silences` (silences.ts): create and update take arrays, all-or-nothing; an alert raised while
 * a silence of its policy is in force is kept in the history as `silenced` and never sent.
 * Delivery (dispatch.ts, outbox.ts): DDoS attack starts and ends (`ddos.attack` events) raise
 * alerts for the matching policies, and so do GRE/IPsec tunnel health changes
 * (`magic.tunnel_health`, tunnels.ts: `magic_tunnel_health_check_event`, `magic_wan_tunnel_health`);
 * webhooks get the platform's body and `cf-webhook-auth`; email
 * goes through `--alerting-smtp`; retries with backoff from a durable outbox.
 * Aliases: the spec's `alert_type` names (`http_ddos_attack_alert`, …) beside the API values
 * (stored as the API value, answered in the spec's form); numeric filters beside string arrays;
 * filter names `hostnames`, `protocols`, `ip_addresses`, `ip_prefixes` beside `target_hostname`,
 * `protocol`, `target_ip` (answered in the API's names, as string arrays).
 * Permissions: "Notifications" (key `notifications`), account-scoped.
 * LIMITATIONS: only DDoS attacks and tunnel health changes raise alerts (other alert types are stored, never triggered);
 * PagerDuty targets are stored and reported `not_deliverable`; SMTP without AUTH or STARTTLS;
 * `alert_interval` is stored only (every attack start and end is sent).
 */
import { defineArea } from '../../core/area.ts';
import type { AttackEvent } from '../ddos/index.ts';
import { TUNNEL_HEALTH_TOPIC, type TunnelHealthEvent } from '../interconnects/index.ts';
import { dispatchAttack } from './dispatch.ts';
import { Outbox } from './outbox.ts';
import { mountAlertingRoutes, NOTIFICATIONS } from './routes.ts';
import { dispatchTunnelHealth } from './tunnels.ts';

export default defineArea({
  name: 'alerting',
  mount(ctx) {
    ctx.permissions.define({ key: NOTIFICATIONS, name: 'Notifications', scope: 'account' });
    const log = ctx.log.child({ area: 'alerting' });
    const outbox = new Outbox(ctx.database, ctx.clock, ctx.config, log);
    mountAlertingRoutes(ctx, () => outbox.kick());
    let unsubscribe: (() => void) | undefined;
    let unsubscribeTunnels: (() => void) | undefined;
    return {
      async start() {
        unsubscribe = ctx.events.subscribe('ddos.attack', (payload) => {
          dispatchAttack(ctx.database, ctx.clock, payload as AttackEvent)
            .then((n) => {
              if (n > 0) outbox.kick();
            })
            .catch((err) => log.error({ err }, 'alerts for an attack not written'));
        });
        unsubscribeTunnels = ctx.events.subscribe(TUNNEL_HEALTH_TOPIC, (payload) => {
          dispatchTunnelHealth(ctx.database, ctx.clock, payload as TunnelHealthEvent)
            .then((n) => {
              if (n > 0) outbox.kick();
            })
            .catch((err) => log.error({ err }, 'alerts for a tunnel health change not written'));
        });
        outbox.start();
      },
      async stop() {
        unsubscribe?.();
        unsubscribeTunnels?.();
        await outbox.stop();
      },
    };
  },
});
