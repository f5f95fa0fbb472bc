/**
 * Overrides of the managed DDoS rulesets: the `execute` rules of a `ddos_l7` / `ddos_l4` entry
 * point. The first rule (account entry point first, then the zone's) whose expression matches the
 * traffic and that executes the managed ruleset decides; inside it, rule-level overrides beat
 * category-level ones, which beat the ruleset-level `action` / `sensitivity_level` / `enabled`.
 * A resolved profile is cached per execute rule, so a request pays one expression match at most.
 */
import type { RuleForEdge } from '../rulesets/index.ts';
import type { Sensitivity, Signature } from './signatures.ts';

export interface Effective {
  enabled: boolean;
  /** `block`, `managed_challenge`, `challenge`, `js_challenge` or `log` (ddos_dynamic resolves to block). */
  action: string;
  sensitivity: Sensitivity;
  /** The entry point rule that overrode this signature (for events: `ruleset_override_id`). */
  overrideRuleId?: string;
}

/** Effective settings of every signature of a layer, by signature index. */
export type Profile = Effective[];

interface OverrideFields {
  action?: string;
  enabled?: boolean;
  sensitivity_level?: Sensitivity;
}
interface Overrides extends OverrideFields {
  categories?: (OverrideFields & { category: string })[];
  rules?: (OverrideFields & { id: string })[];
}

function apply(to: Effective, o: OverrideFields | undefined): void {
  if (!o) return;
  if (o.action !== undefined) to.action = o.action;
  if (o.enabled !== undefined) to.enabled = o.enabled;
  if (o.sensitivity_level !== undefined) to.sensitivity = o.sensitivity_level;
}

function finish(e: Effective): Effective {
  if (e.action === 'ddos_dynamic') e.action = 'block';
  return Object.freeze(e);
}

export function defaultProfile(signatures: readonly Signature[]): Profile {
  return signatures.map((s) => finish({ enabled: true, action: s.defaultAction, sensitivity: 'default' }));
}

/** The profile an execute rule gives (undefined rule: the defaults). */
export function profileOf(signatures: readonly Signature[], rule: RuleForEdge | undefined): Profile {
  const overrides = rule?.action_parameters?.overrides as Overrides | undefined;
  return signatures.map((s) => {
    const e: Effective = { enabled: true, action: s.defaultAction, sensitivity: 'default' };
    if (rule) e.overrideRuleId = rule.id;
    apply(e, overrides);
    apply(
      e,
      overrides?.categories?.find((c) => c.category === s.category),
    );
    apply(
      e,
      overrides?.rules?.find((r) => r.id === s.ruleId),
    );
    return finish(e);
  });
}

/**
 * Picks the profile for traffic: the first execute rule of the managed ruleset whose expression
 * `matches`. Profiles are cached per rule object (rules arrays are frozen and replaced on change).
 */
export class ProfileCache {
  private readonly byRule = new WeakMap<RuleForEdge, Profile>();
  private readonly defaults: Profile;

  constructor(
    private readonly rulesetId: string,
    private readonly signatures: readonly Signature[],
  ) {
    this.defaults = defaultProfile(signatures);
  }

  pick(rules: readonly RuleForEdge[], matches: (expression: string) => boolean): Profile {
    for (const rule of rules) {
      if (rule.action !== 'execute' || rule.action_parameters?.id !== this.rulesetId) continue;
      if (rule.expression !== 'true' && !matches(rule.expression)) continue;
      let p = this.byRule.get(rule);
      if (!p) this.byRule.set(rule, (p = profileOf(this.signatures, rule)));
      return p;
    }
    return this.defaults;
  }
}
