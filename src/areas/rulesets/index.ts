/**
 * @module rulesets — rulesets at zone and account level (spec 001 "Ruleset and
 * rule (DDoS)", "DDoS rulesets"; paths, fields and cursor paging from the official document):
 * list (cursor), create, get, update, delete, versions, rule-level add/edit/delete with
 * `position`, and the phase entry points `…/rulesets/phases/{phase}/entrypoint[/versions[/{v}]]`
 * (404, code 10003, until the first PUT, which creates kind `zone` or `root`). `?dry_run=true`
 * on every write checks and answers without storing. Managed rulesets `ddos_l7`
 * (4d21379b4f9f4bb088e0729962c8b3cf) and `ddos_l4` (3b64149bfa6e4220bbbc2bd6db589552, account
 * level only) are listed with `kind: managed` and are read-only (403).
 * Rules are checked per phase (allowed actions, parameters of block/skip/route/execute, the
 * expression through the rules language); failures carry `source.pointer` (`/rules/0/expression`).
 * Run time: provides service `rulesets` (RulesetService: `phaseRules` for the edge, cached and
 * dropped on every write) and publishes `rulesets.changed` after every committed change.
 * Permissions: "Zone WAF" (key `zone_waf`) for zone routes, "Account Rulesets" (key
 * `account_rulesets`) for account routes; the platform's per-phase DDoS groups are not separate.
 * Aliases: none — the spec's entry point paths are the official ones.
 * LIMITATIONS: `execute` targets managed rulesets only (no custom rulesets executed from an
 * account root entry point); phases other than http_request_firewall_custom, http_request_origin,
 * ddos_l7 and ddos_l4 accept only execute/skip/log until an area registers their actions; their
 * action parameters are stored as given. Error codes other than 10003 and 20217 are Outpost's.
 */
import { defineArea } from '../../core/area.ts';
import { PhaseTable } from './phases.ts';
import { mountRulesetRoutes } from './routes.ts';
import { createRulesetService } from './service.ts';
import { RulesetStore } from './store.ts';

export type { RuleForEdge, RulesetService, PhaseRegistration } from './service.ts';
export type { Rule, Ruleset, RulesetSummary, Kind } from './model.ts';
export { DDOS_L7_ID, DDOS_L4_ID, managedRuleId, OVERRIDE_ACTIONS, SENSITIVITY_LEVELS } from './managed.ts';

/** The event published after every committed ruleset change. */
export interface RulesetsChanged {
  level: 'zone' | 'account';
  /** Zone id or account id. */
  ownerId: string;
  accountId: string;
  rulesetId: string;
  phase: string;
  kind: string;
}

export default defineArea({
  name: 'rulesets',
  mount(ctx) {
    ctx.permissions.define({ key: 'zone_waf', name: 'Zone WAF', scope: 'zone' });
    ctx.permissions.define({ key: 'account_rulesets', name: 'Account Rulesets', scope: 'account' });
    const phases = new PhaseTable();
    const service = createRulesetService(ctx.database, phases, ctx.events);
    const store = new RulesetStore(ctx.database, ctx.clock, phases, (change) => {
      service.invalidate();
      const payload: RulesetsChanged = {
        level: change.owner.level,
        ownerId: change.owner.id,
        accountId: change.owner.accountId,
        rulesetId: change.rulesetId,
        phase: change.phase,
        kind: change.kind,
      };
      ctx.events.publish('rulesets.changed', payload);
    });
    const { invalidate: _invalidate, ...exposed } = service;
    ctx.services.provide('rulesets', exposed);
    mountRulesetRoutes(ctx, store);
  },
});
