/**
 * The phases rulesets can belong to, what actions each accepts and at which level (zone or
 * account) its entry point may exist. The table is per server and open: another area adds a
 * phase or actions through `RulesetService.registerPhase` (snippets, API gateway…).
 */

export type Level = 'zone' | 'account';

export interface PhaseSpec {
  /** Actions a rule of this phase may use. */
  actions: Set<string>;
  /** Levels where rulesets of this phase may exist. */
  levels: Set<Level>;
  /**
   * False for phases whose expressions use fields outside the HTTP scheme (network-layer phases);
   * their expressions are stored as given.
   */
  httpExpressions: boolean;
}

/** Every phase the platform documents (the official client's `Phase` type) plus the spec's snippets phase. */
export const KNOWN_PHASES = [
  'ddos_l4',
  'ddos_l7',
  'http_config_settings',
  'http_custom_errors',
  'http_log_custom_fields',
  'http_ratelimit',
  'http_request_cache_settings',
  'http_request_dynamic_redirect',
  'http_request_firewall_custom',
  'http_request_firewall_managed',
  'http_request_late_transform',
  'http_request_origin',
  'http_request_redirect',
  'http_request_sanitize',
  'http_request_sbfm',
  'http_request_snippets',
  'http_request_transform',
  'http_response_cache_settings',
  'http_response_compression',
  'http_response_firewall_managed',
  'http_response_headers_transform',
  'magic_transit',
  'magic_transit_ids_managed',
  'magic_transit_managed',
  'magic_transit_ratelimit',
] as const;

/** Actions accepted in a phase that has no specific list (until an area registers one). */
export const GENERIC_ACTIONS = ['execute', 'skip', 'log'] as const;

/** Phases with a modelled action list. */
const SPECIFIC: Record<string, { actions: string[]; levels?: Level[]; httpExpressions?: boolean }> = {
  http_request_firewall_custom: { actions: ['block', 'challenge', 'js_challenge', 'managed_challenge', 'log', 'skip'] },
  http_request_origin: { actions: ['route'] },
  ddos_l7: { actions: ['execute'] },
  ddos_l4: { actions: ['execute'], levels: ['account'], httpExpressions: false },
};

export class PhaseTable {
  private readonly phases = new Map<string, PhaseSpec>();
  /** Phases an area has registered actions for. */
  private readonly registered = new Set<string>();

  constructor() {
    for (const name of KNOWN_PHASES) {
      const specific = SPECIFIC[name];
      const networkLayer = name.startsWith('magic_transit');
      this.phases.set(name, {
        actions: new Set(specific?.actions ?? GENERIC_ACTIONS),
        levels: new Set(specific?.levels ?? (networkLayer ? ['account'] : ['zone', 'account'])),
        httpExpressions: specific?.httpExpressions ?? !networkLayer,
      });
    }
  }

  get(phase: string): PhaseSpec | undefined {
    return this.phases.get(phase);
  }

  has(phase: string): boolean {
    return this.phases.has(phase);
  }

  names(): string[] {
    return [...this.phases.keys()];
  }

  /**
   * Adds a phase, or actions to an existing one. The first registration of a known phase that
   * only had the generic actions replaces them, so a phase owner states exactly what it accepts.
   */
  register(phase: string, spec: { actions: string[]; levels?: Level[]; httpExpressions?: boolean }): void {
    const existing = this.phases.get(phase);
    if (!existing || (!SPECIFIC[phase] && !this.registered.has(phase))) {
      this.phases.set(phase, {
        actions: new Set(spec.actions),
        levels: new Set(spec.levels ?? existing?.levels ?? ['zone', 'account']),
        httpExpressions: spec.httpExpressions ?? existing?.httpExpressions ?? true,
      });
    } else {
      for (const a of spec.actions) existing.actions.add(a);
      for (const l of spec.levels ?? []) existing.levels.add(l);
    }
    this.registered.add(phase);
  }
}
