/** The stored and returned shapes of rulesets and rules. */

export type Kind = 'managed' | 'custom' | 'root' | 'zone';

export interface Rule {
  id: string;
  /** Incremented when the rule changes; a string, as the platform writes it. */
  version: string;
  action: string;
  expression: string;
  description: string;
  last_updated: string;
  /** The rule's reference; its id unless given. */
  ref: string;
  enabled: boolean;
  action_parameters?: Record<string, unknown>;
  logging?: { enabled: boolean };
  categories?: string[];
  /** Rate-limit settings (http_ratelimit phase), stored as given. */
  ratelimit?: Record<string, unknown>;
}

export interface Ruleset {
  id: string;
  name: string;
  description: string;
  kind: Kind;
  phase: string;
  /** Incremented on every change; a string, as the platform writes it. */
  version: string;
  last_updated: string;
  rules: Rule[];
}

/** A list or versions entry: the ruleset without its rules. */
export type RulesetSummary = Omit<Ruleset, 'rules'>;

export function summary(r: Ruleset): RulesetSummary {
  return {
    id: r.id,
    name: r.name,
    description: r.description,
    kind: r.kind,
    version: r.version,
    last_updated: r.last_updated,
    phase: r.phase,
  };
}
