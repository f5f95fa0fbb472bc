/**
 * What the edge asks of rulesets at run time: the enabled rules of a phase for a request's zone,
 * account entry point first, then zone entry point. Answers are cached in memory per
 * (phase, zone, account) and the whole cache is dropped after every committed ruleset write in
 * this process (and when a zone is deleted), so a change applies to the next request.
 */
import type { EventBus } from '../../core/events.ts';
import type { Database } from '../../core/storage/db.ts';
import { managedRuleset } from './managed.ts';
import type { Ruleset } from './model.ts';
import type { Level, PhaseTable } from './phases.ts';
import { rulesets } from './store.ts';

/** One rule as the edge runs it. Arrays returned by `phaseRules` are shared and frozen. */
export interface RuleForEdge {
  id: string;
  rulesetId: string;
  /** Where the rule comes from: the account's entry point or the zone's. */
  scope: Level;
  action: string;
  expression: string;
  action_parameters?: Record<string, unknown>;
  logging?: { enabled: boolean };
  ref: string;
  version: string;
  description: string;
}

export interface PhaseRegistration {
  /** Actions the phase accepts (added to the phase's list; the first registration replaces the generic list). */
  actions: string[];
  /** Levels where its entry point may exist (default: zone and account). */
  levels?: Level[];
  /** False when expressions use fields outside the HTTP scheme and are not checked at save time. */
  httpExpressions?: boolean;
}

export interface RulesetService {
  /** Enabled rules of `phase` for a request: the account entry point's, then the zone entry point's. */
  phaseRules(phase: string, zoneId: string, accountId: string): Promise<readonly RuleForEdge[]>;
  /** A managed ruleset (ddos_l7, ddos_l4) with its rules and categories, for the areas that run them. */
  managedRuleset(id: string): Ruleset | undefined;
  /** Adds a phase, or actions to one, so another area's rules can be saved (snippets, API gateway…). */
  registerPhase(phase: string, registration: PhaseRegistration): void;
  /** Phase names rulesets may use. */
  phases(): string[];
}

export interface RulesetServiceInternal extends RulesetService {
  invalidate(): void;
}

export function createRulesetService(database: Database, phases: PhaseTable, events: EventBus): RulesetServiceInternal {
  const cache = new Map<string, Promise<readonly RuleForEdge[]>>();

  async function entrypointRules(ownerId: string, level: Level, phase: string): Promise<RuleForEdge[]> {
    const { items } = await rulesets.list(database.db, ownerId, {
      filters: [
        { field: 'phase', op: 'eq', value: phase },
        { field: 'kind', op: 'eq', value: level === 'zone' ? 'zone' : 'root' },
      ],
    });
    const ruleset = items[0]?.body;
    if (!ruleset) return [];
    return ruleset.rules
      .filter((r) => r.enabled)
      .map((r) => {
        const out: RuleForEdge = {
          id: r.id,
          rulesetId: ruleset.id,
          scope: level,
          action: r.action,
          expression: r.expression,
          ref: r.ref,
          version: r.version,
          description: r.description,
        };
        if (r.action_parameters) out.action_parameters = r.action_parameters;
        if (r.logging) out.logging = r.logging;
        return Object.freeze(out);
      });
  }

  const invalidate = () => cache.clear();
  events.subscribe('zone.deleted', invalidate);

  return {
    phaseRules(phase, zoneId, accountId) {
      const key = `${phase}\n${zoneId}\n${accountId}`;
      const hit = cache.get(key);
      if (hit) return hit;
      const load = Promise.all([entrypointRules(accountId, 'account', phase), zoneId ? entrypointRules(zoneId, 'zone', phase) : []]).then(
        ([account, zone]) => Object.freeze([...account, ...zone]),
      );
      cache.set(key, load);
      // A failed load is not remembered.
      load.catch(() => {
        if (cache.get(key) === load) cache.delete(key);
      });
      return load;
    },
    managedRuleset: (id) => managedRuleset(id),
    registerPhase: (phase, registration) => {
      phases.register(phase, registration);
    },
    phases: () => phases.names(),
    invalidate,
  };
}
