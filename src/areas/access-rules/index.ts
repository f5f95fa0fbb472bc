/**
 * @module access-rules — IP access rules (paths and fields from the official
 * document): `/zones/{zone_id}/firewall/access_rules/rules` and the account form — list (page,
 * filters `mode`, `configuration.target`, `configuration.value`, `notes`, `match`, `order`,
 * `direction`), create, get, edit (PATCH), delete (`{id}`). Targets `ip`, `ip6`, `ip_range`
 * (IPv4 /16 /24, IPv6 /32 /48 /64 /128), `asn` (`AS13335`), `country` (ISO code, `T1`, `XX`);
 * values are stored in canonical form; a second rule for the same target and value in the same
 * zone or account is refused (400, code 10009).
 * Account rules apply to every zone of the account: a zone's list includes them with
 * `scope.type: account`; they are changed only through the account routes.
 * Run time: provides service `access-rules` (AccessRuleService.decide for the edge and proxied
 * applications; cached, dropped on every write) and publishes `access-rules.changed`.
 * Permissions: "Firewall Services" (key `firewall_services`) for zone routes, "Account Firewall
 * Access Rules" (key `account_firewall_access_rules`) for account routes.
 * Aliases: none.
 * LIMITATIONS: user-level rules (`/user/firewall/access_rules`) and the zone DELETE `cascade`
 * option are not served; lists are filtered and paged in memory; `scope.type` says `account`
 * where the platform's older responses say `organization`. Error codes other than 10009 are Outpost's.
 */
import { defineArea } from '../../core/area.ts';
import { mountAccessRuleRoutes } from './routes.ts';
import { createAccessRuleService } from './service.ts';
import { AccessRuleStore } from './store.ts';

export type { AccessRuleService, AccessDecision, AccessClient } from './service.ts';
export type { AccessRule, Mode as AccessRuleMode } from './store.ts';
export type { Target as AccessRuleTarget } from './targets.ts';

/** The event published after every committed access rule change. */
export interface AccessRulesChanged {
  scope: 'zone' | 'account';
  /** Zone id or account id. */
  id: string;
  accountId: string;
}

export default defineArea({
  name: 'access-rules',
  mount(ctx) {
    ctx.permissions.define({ key: 'firewall_services', name: 'Firewall Services', scope: 'zone' });
    ctx.permissions.define({ key: 'account_firewall_access_rules', name: 'Account Firewall Access Rules', scope: 'account' });
    const service = createAccessRuleService(ctx.database, ctx.events);
    const store = new AccessRuleStore(ctx.database, ctx.clock, (owner) => {
      service.invalidate(owner.id);
      const payload: AccessRulesChanged = { scope: owner.type, id: owner.id, accountId: owner.accountId };
      ctx.events.publish('access-rules.changed', payload);
    });
    ctx.services.provide('access-rules', { decide: service.decide });
    mountAccessRuleRoutes(ctx, store);
  },
});
