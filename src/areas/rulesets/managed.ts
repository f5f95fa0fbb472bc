/**
 * The managed rulesets Outpost ships: the HTTP (ddos_l7) and network-layer (ddos_l4) DDoS
 * rulesets under the platform's ids, so the spec's "list rulesets, pick kind managed and the
 * phase, execute its id" procedure works unchanged. They are read-only and the same for every
 * account. Rule ids other than the platform's documented example are Outpost's own (stable).
 * What each rule detects, and its thresholds per sensitivity, live with the DDoS area
 * (src/areas/ddos/signatures.ts), which runs these rules on live traffic.
 */
import { stableId } from '../../core/ids.ts';
import type { Rule, Ruleset } from './model.ts';

export const DDOS_L7_ID = '4d21379b4f9f4bb088e0729962c8b3cf';
export const DDOS_L4_ID = '3b64149bfa6e4220bbbc2bd6db589552';

const PUBLISHED = '2025-01-01T00:00:00.000000Z';

/** Override actions a ruleset accepts (ruleset-, category- and rule-level `action`). */
export const OVERRIDE_ACTIONS: Record<string, string[]> = {
  [DDOS_L7_ID]: ['block', 'managed_challenge', 'challenge', 'js_challenge', 'log', 'ddos_dynamic'],
  [DDOS_L4_ID]: ['block', 'log', 'ddos_dynamic'],
};

export const SENSITIVITY_LEVELS = ['default', 'medium', 'low', 'eoff'] as const;

function rule(set: string, n: number, action: string, category: string, description: string, id?: string): Rule {
  const ruleId = id ?? stableId(`managed-rule:${set}:${n}`);
  return {
    id: ruleId,
    version: '1',
    action,
    expression: 'true',
    description,
    last_updated: PUBLISHED,
    ref: ruleId,
    enabled: true,
    categories: [category],
  };
}

const L7: Ruleset = {
  id: DDOS_L7_ID,
  name: 'HTTP DDoS Attack Protection',
  description: 'Managed ruleset that detects and mitigates HTTP floods and anomalous HTTP request patterns.',
  kind: 'managed',
  phase: 'ddos_l7',
  version: '1',
  last_updated: PUBLISHED,
  rules: [
    rule('l7', 1, 'ddos_dynamic', 'http-flood', 'HTTP flood against one host from many sources (host request rate far above its learned baseline)'),
    rule('l7', 2, 'ddos_dynamic', 'http-flood', 'High request rate from a single client to a single host'),
    rule('l7', 3, 'block', 'http-anomaly', 'Flood of HTTP requests without a User-Agent header'),
    rule('l7', 4, 'block', 'http-anomaly', 'Flood of HTTP requests with malformed or contradictory protocol fields (Content-Length with Transfer-Encoding, a body on GET or HEAD)'),
  ],
};

const L4: Ruleset = {
  id: DDOS_L4_ID,
  name: 'L3/4 DDoS Managed Ruleset',
  description: 'Managed ruleset that detects and mitigates network-layer floods. Signatures are added as new attack vectors appear.',
  kind: 'managed',
  phase: 'ddos_l4',
  version: '1',
  last_updated: PUBLISHED,
  rules: [
    rule('l4', 1, 'ddos_dynamic', 'udp-flood', 'Generic high-volume UDP traffic flows', '599dab0942ff4898ac1b7797e954e98b'),
    rule('l4', 2, 'block', 'udp-flood', 'UDP reflection from well-known amplification ports (DNS, NTP, SSDP, Memcached)'),
    rule('l4', 3, 'ddos_dynamic', 'syn-flood', 'Generic high-volume SYN traffic flows (TCP connection rate per application and source)'),
  ],
};

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/** Frozen: callers share these objects. */
const ALL: readonly Ruleset[] = deepFreeze([L7, L4]);

/** Managed rulesets visible at a level: ddos_l4 is account-level only, as its entry point. */
export function managedRulesets(level: 'zone' | 'account'): Ruleset[] {
  return ALL.filter((r) => level === 'account' || r.phase !== 'ddos_l4');
}

/** The id of the n-th (from 1) rule of a managed ruleset, as listed. */
export function managedRuleId(set: 'l7' | 'l4', n: number): string {
  return set === 'l4' && n === 1 ? '599dab0942ff4898ac1b7797e954e98b' : stableId(`managed-rule:${set}:${n}`);
}

export function managedRuleset(id: string): Ruleset | undefined {
  return ALL.find((r) => r.id === id);
}
