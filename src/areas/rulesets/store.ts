/**
 * Rulesets in storage and the write operations on them. A ruleset lives in the `ruleset`
 * collection under its owner (a zone id or an account id, so deleting a zone removes its
 * rulesets); every version, the current one included, is also kept as a snapshot in
 * `ruleset_version` under the same owner. Writes run in one transaction with the owner locked,
 * so "one entry point per phase" holds under concurrent writers; `dryRun` runs every check and
 * returns the result without writing.
 */
import type { Clock } from '../../core/clock.ts';
import { apiError } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import { defineCollection, type Doc } from '../../core/storage/collection.ts';
import type { Database, Executor } from '../../core/storage/db.ts';
import { lockScope } from '../../core/storage/locks.ts';
import { managedRuleset, managedRulesets } from './managed.ts';
import { summary, type Rule, type Ruleset, type RulesetSummary } from './model.ts';
import type { Level, PhaseTable } from './phases.ts';
import {
  checkKindAndPhase,
  checkPhase,
  checkRule,
  invalid,
  type Position,
  type Problem,
  type RuleInput,
  type RulePatch,
  type RulesetInput,
} from './validate.ts';

export const rulesets = defineCollection<Ruleset, 'phase' | 'kind'>({
  kind: 'ruleset',
  indexes: { phase: (r) => r.phase, kind: (r) => r.kind },
});

export const rulesetVersions = defineCollection<Ruleset, 'ruleset'>({
  kind: 'ruleset_version',
  indexes: { ruleset: (r) => r.id },
});

/** Who owns the rulesets of a request: a zone (with its account) or an account. */
export interface Owner {
  level: Level;
  /** The zone id or the account id. */
  id: string;
  accountId: string;
}

export interface Change {
  owner: Owner;
  rulesetId: string;
  phase: string;
  kind: Ruleset['kind'];
}

const versionDocId = (rulesetId: string, version: string) => `${rulesetId}:${version}`;
const entrypointKind = (level: Level) => (level === 'zone' ? 'zone' : 'root');

export class RulesetStore {
  constructor(
    private readonly database: Database,
    private readonly clock: Clock,
    private readonly phases: PhaseTable,
    private readonly changed: (change: Change) => void,
  ) {}

  private get db() {
    return this.database.db;
  }

  // --- reads ----------------------------------------------------------------------------------

  /** Every ruleset visible at the owner, managed ones first, as summaries sorted by id. */
  async list(owner: Owner): Promise<RulesetSummary[]> {
    const own = (await rulesets.all(this.db, owner.id)).map((d) => summary(d.body));
    return [...managedRulesets(owner.level).map(summary), ...own].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  async get(owner: Owner, id: string): Promise<Ruleset> {
    const managed = this.visibleManaged(owner, id);
    if (managed) return managed;
    const doc = await rulesets.get(this.db, owner.id, id);
    if (!doc) throw apiError('ruleset_not_found', id);
    return doc.body;
  }

  /** The entry point of a phase, or a 404 (10003) until the first PUT. */
  async entrypoint(owner: Owner, phase: string, db: Executor = this.db): Promise<Doc<Ruleset> | undefined> {
    const { items } = await rulesets.list(db, owner.id, {
      filters: [
        { field: 'phase', op: 'eq', value: phase },
        { field: 'kind', op: 'eq', value: entrypointKind(owner.level) },
      ],
    });
    return items[0];
  }

  async versions(owner: Owner, id: string): Promise<RulesetSummary[]> {
    const managed = this.visibleManaged(owner, id);
    if (managed) return [summary(managed)];
    await this.get(owner, id);
    const docs = await rulesetVersions.findBy(this.db, 'ruleset', id);
    return docs
      .filter((d) => d.scopeId === owner.id)
      .map((d) => summary(d.body))
      .sort((a, b) => Number(a.version) - Number(b.version));
  }

  async version(owner: Owner, id: string, version: string): Promise<Ruleset> {
    const managed = this.visibleManaged(owner, id);
    if (managed) {
      if (version !== managed.version) throw apiError('ruleset_version_not_found', version, id);
      return managed;
    }
    const doc = await rulesetVersions.get(this.db, owner.id, versionDocId(id, version));
    if (!doc) {
      await this.get(owner, id);
      throw apiError('ruleset_version_not_found', version, id);
    }
    return doc.body;
  }

  // --- writes ---------------------------------------------------------------------------------

  async create(owner: Owner, input: RulesetInput, dryRun: boolean): Promise<Ruleset> {
    const problems = checkKindAndPhase(input.kind, input.phase, owner.level, this.phases);
    if (!input.name) problems.unshift(['/name', 'name is required']);
    if (problems.length > 0) throw invalid(problems);
    const phase = input.phase!;
    const kind = input.kind!;
    const now = this.now();
    const rules = this.buildRules(input.rules ?? [], [], { phase, level: owner.level }, now);
    const ruleset: Ruleset = {
      id: hexId(),
      name: input.name!,
      description: input.description ?? '',
      kind,
      phase,
      version: '1',
      last_updated: now,
      rules,
    };
    return this.write(owner, dryRun, async (tx) => {
      if (kind === entrypointKind(owner.level) && (await this.entrypoint(owner, phase, tx))) {
        throw apiError('ruleset_entrypoint_exists', kind, phase);
      }
      if (!dryRun) await this.insert(tx, owner, ruleset);
      return ruleset;
    }, { phase, kind, id: ruleset.id });
  }

  async update(owner: Owner, id: string, input: RulesetInput, dryRun: boolean): Promise<Ruleset> {
    this.refuseManaged(owner, id);
    return this.write(owner, dryRun, async (tx) => {
      const doc = await rulesets.get(tx, owner.id, id);
      if (!doc) throw apiError('ruleset_not_found', id);
      const current = doc.body;
      const problems: Problem[] = [];
      if (input.kind !== undefined && input.kind !== current.kind) problems.push(['/kind', `the kind of a ruleset cannot change (it is ${current.kind})`]);
      if (input.phase !== undefined && input.phase !== current.phase) problems.push(['/phase', `the phase of a ruleset cannot change (it is ${current.phase})`]);
      if (problems.length > 0) throw invalid(problems);
      const now = this.now();
      const next: Ruleset = {
        ...current,
        name: input.name ?? current.name,
        description: input.description ?? current.description,
        // Without `rules` the rules stay as they are (a PUT of name or description only).
        rules: input.rules === undefined ? current.rules : this.buildRules(input.rules, current.rules, { phase: current.phase, level: owner.level }, now),
      };
      return this.replace(tx, owner, doc, next, now, dryRun);
    }, { phase: undefined, kind: undefined, id });
  }

  /** PUT of a phase entry point: replaces its rules, creating it (kind zone/root) if absent. */
  async putEntrypoint(owner: Owner, phase: string, input: RulesetInput, dryRun: boolean): Promise<Ruleset> {
    const phaseProblems = checkPhase(phase, owner.level, this.phases, '/phase');
    if (phaseProblems.length > 0) throw invalid(phaseProblems);
    const kind = entrypointKind(owner.level);
    if (input.kind !== undefined && input.kind !== kind) throw invalid([['/kind', `the entry point of a ${owner.level} is of kind ${kind}`]]);
    if (input.phase !== undefined && input.phase !== phase) throw invalid([['/phase', `the body's phase ${input.phase} differs from the path's ${phase}`]]);
    return this.write(owner, dryRun, async (tx) => {
      const doc = await this.entrypoint(owner, phase, tx);
      const now = this.now();
      const ctx = { phase, level: owner.level };
      if (!doc) {
        const ruleset: Ruleset = {
          id: hexId(),
          name: input.name ?? 'default',
          description: input.description ?? '',
          kind,
          phase,
          version: '1',
          last_updated: now,
          rules: this.buildRules(input.rules ?? [], [], ctx, now),
        };
        if (!dryRun) await this.insert(tx, owner, ruleset);
        return ruleset;
      }
      const next: Ruleset = {
        ...doc.body,
        name: input.name ?? doc.body.name,
        description: input.description ?? doc.body.description,
        rules: input.rules === undefined ? doc.body.rules : this.buildRules(input.rules, doc.body.rules, ctx, now),
      };
      return this.replace(tx, owner, doc, next, now, dryRun);
    }, { phase, kind, id: undefined });
  }

  async delete(owner: Owner, id: string): Promise<void> {
    this.refuseManaged(owner, id);
    await this.write(owner, false, async (tx) => {
      const doc = await rulesets.get(tx, owner.id, id);
      if (!doc) throw apiError('ruleset_not_found', id);
      await rulesets.delete(tx, owner.id, id);
      for (const v of await rulesetVersions.findBy(tx, 'ruleset', id)) {
        if (v.scopeId === owner.id) await rulesetVersions.delete(tx, owner.id, v.id);
      }
      return doc.body;
    }, { phase: undefined, kind: undefined, id });
  }

  async deleteVersion(owner: Owner, id: string, version: string): Promise<void> {
    this.refuseManaged(owner, id);
    await this.write(owner, false, async (tx) => {
      const doc = await rulesets.get(tx, owner.id, id);
      if (!doc) throw apiError('ruleset_not_found', id);
      if (doc.body.version === version) throw apiError('ruleset_latest_version', version, id);
      if (!(await rulesetVersions.delete(tx, owner.id, versionDocId(id, version)))) {
        throw apiError('ruleset_version_not_found', version, id);
      }
      return doc.body;
    }, { phase: undefined, kind: undefined, id }, false);
  }

  async addRule(owner: Owner, id: string, input: RuleInput, position: Position | undefined, dryRun: boolean): Promise<Ruleset> {
    this.refuseManaged(owner, id);
    return this.write(owner, dryRun, async (tx) => {
      const doc = await rulesets.get(tx, owner.id, id);
      if (!doc) throw apiError('ruleset_not_found', id);
      const now = this.now();
      const ctx = { phase: doc.body.phase, level: owner.level };
      const problems = checkRule(input, { phases: this.phases, ...ctx }, '');
      if (input.id !== undefined) problems.push(['/id', 'a new rule cannot carry an id; it is assigned']);
      if (input.ref !== undefined && doc.body.rules.some((r) => r.ref === input.ref)) problems.push(['/ref', `a rule with ref ${input.ref} already exists in this ruleset`]);
      if (problems.length > 0) throw invalid(problems);
      const rule = makeRule(input, undefined, now);
      const rules = place(doc.body.rules, rule, position);
      return this.replace(tx, owner, doc, { ...doc.body, rules }, now, dryRun);
    }, { phase: undefined, kind: undefined, id });
  }

  async patchRule(owner: Owner, id: string, ruleId: string, patch: RulePatch, position: Position | undefined, dryRun: boolean): Promise<Ruleset> {
    this.refuseManaged(owner, id);
    return this.write(owner, dryRun, async (tx) => {
      const doc = await rulesets.get(tx, owner.id, id);
      if (!doc) throw apiError('ruleset_not_found', id);
      const prev = doc.body.rules.find((r) => r.id === ruleId);
      if (!prev) throw apiError('ruleset_rule_not_found', ruleId, id);
      if (patch.id !== undefined && patch.id !== ruleId) throw invalid([['/id', 'the id of a rule cannot change']]);
      const actionChanged = patch.action !== undefined && patch.action !== prev.action;
      const merged: RuleInput = {
        action: patch.action ?? prev.action,
        expression: patch.expression ?? prev.expression,
        description: patch.description ?? prev.description,
        enabled: patch.enabled ?? prev.enabled,
        ref: patch.ref ?? prev.ref,
        // A new action drops the old action's parameters unless new ones are given.
        action_parameters: patch.action_parameters ?? (actionChanged ? undefined : prev.action_parameters),
        logging: patch.logging ?? prev.logging,
        ratelimit: patch.ratelimit ?? prev.ratelimit,
      };
      const problems = checkRule(merged, { phases: this.phases, phase: doc.body.phase, level: owner.level }, '');
      if (patch.ref !== undefined && doc.body.rules.some((r) => r.id !== ruleId && r.ref === patch.ref)) problems.push(['/ref', `a rule with ref ${patch.ref} already exists in this ruleset`]);
      if (problems.length > 0) throw invalid(problems);
      const now = this.now();
      const rule = makeRule(merged, prev, now);
      const others = doc.body.rules.filter((r) => r.id !== ruleId);
      const rules = position ? place(others, rule, position) : doc.body.rules.map((r) => (r.id === ruleId ? rule : r));
      return this.replace(tx, owner, doc, { ...doc.body, rules }, now, dryRun);
    }, { phase: undefined, kind: undefined, id });
  }

  async deleteRule(owner: Owner, id: string, ruleId: string, dryRun: boolean): Promise<Ruleset> {
    this.refuseManaged(owner, id);
    return this.write(owner, dryRun, async (tx) => {
      const doc = await rulesets.get(tx, owner.id, id);
      if (!doc) throw apiError('ruleset_not_found', id);
      if (!doc.body.rules.some((r) => r.id === ruleId)) throw apiError('ruleset_rule_not_found', ruleId, id);
      const rules = doc.body.rules.filter((r) => r.id !== ruleId);
      return this.replace(tx, owner, doc, { ...doc.body, rules }, this.now(), dryRun);
    }, { phase: undefined, kind: undefined, id });
  }

  // --- helpers --------------------------------------------------------------------------------

  private now(): string {
    return this.clock.now().toISOString();
  }

  private visibleManaged(owner: Owner, id: string): Ruleset | undefined {
    return managedRulesets(owner.level).find((r) => r.id === id);
  }

  private refuseManaged(owner: Owner, id: string): void {
    const managed = managedRuleset(id);
    if (!managed) return;
    if (!this.visibleManaged(owner, id)) throw apiError('ruleset_not_found', id);
    throw apiError('ruleset_managed_read_only', id, managed.phase);
  }

  /**
   * Checks every rule of a body against the phase and turns the inputs into stored rules: a rule
   * that names an existing rule's id keeps that id (and its version when unchanged); others get
   * new ids.
   */
  private buildRules(inputs: RuleInput[], previous: Rule[], ctx: { phase: string; level: Level }, now: string): Rule[] {
    const problems: Problem[] = [];
    const byId = new Map(previous.map((r) => [r.id, r]));
    const ids = new Set<string>();
    const refs = new Set<string>();
    inputs.forEach((input, i) => {
      problems.push(...checkRule(input, { phases: this.phases, ...ctx }, `/rules/${i}`));
      if (input.id !== undefined) {
        if (!byId.has(input.id)) problems.push([`/rules/${i}/id`, `could not find rule ${input.id} in this ruleset; leave id out for a new rule`]);
        if (ids.has(input.id)) problems.push([`/rules/${i}/id`, `rule id ${input.id} appears twice`]);
        ids.add(input.id);
      }
      if (input.ref !== undefined) {
        if (refs.has(input.ref)) problems.push([`/rules/${i}/ref`, `rule ref ${input.ref} appears twice`]);
        refs.add(input.ref);
      }
    });
    if (problems.length > 0) throw invalid(problems);
    return inputs.map((input) => makeRule(input, input.id !== undefined ? byId.get(input.id) : undefined, now));
  }

  private async insert(tx: Executor, owner: Owner, ruleset: Ruleset): Promise<void> {
    const at = this.clock.now();
    await rulesets.insert(tx, owner.id, ruleset.id, ruleset, at);
    await rulesetVersions.insert(tx, owner.id, versionDocId(ruleset.id, ruleset.version), ruleset, at);
  }

  /** Stores `next` as the ruleset's new version (every write makes one), unless it is a dry run. */
  private async replace(tx: Executor, owner: Owner, doc: Doc<Ruleset>, next: Ruleset, now: string, dryRun: boolean): Promise<Ruleset> {
    const versioned: Ruleset = { ...next, version: String(Number(doc.body.version) + 1), last_updated: now };
    if (dryRun) return versioned;
    const at = this.clock.now();
    await rulesets.update(tx, doc, versioned, at);
    await rulesetVersions.insert(tx, owner.id, versionDocId(versioned.id, versioned.version), versioned, at);
    return versioned;
  }

  /** Runs `fn` in a transaction with the owner's rulesets locked, then reports the change. */
  private async write(
    owner: Owner,
    dryRun: boolean,
    fn: (tx: Executor) => Promise<Ruleset>,
    hint: { phase: string | undefined; kind: Ruleset['kind'] | undefined; id: string | undefined },
    affectsRules = true,
  ): Promise<Ruleset> {
    const { db, dialect } = this.database;
    const result = await db.transaction().execute(async (tx) => {
      await lockScope(tx, dialect, `rulesets:${owner.id}`);
      return fn(tx);
    });
    if (!dryRun && affectsRules) {
      this.changed({ owner, rulesetId: hint.id ?? result.id, phase: hint.phase ?? result.phase, kind: hint.kind ?? result.kind });
    }
    return result;
  }
}

/** A stored rule from an input; keeps `prev`'s id, and its version when the content is the same. */
function makeRule(input: RuleInput, prev: Rule | undefined, now: string): Rule {
  const id = prev?.id ?? hexId();
  const rule: Rule = {
    id,
    version: '1',
    action: input.action,
    expression: input.expression,
    description: input.description ?? '',
    last_updated: now,
    ref: input.ref ?? prev?.ref ?? id,
    enabled: input.enabled ?? true,
  };
  if (input.action_parameters !== undefined) rule.action_parameters = input.action_parameters;
  if (input.logging !== undefined) rule.logging = input.logging;
  if (input.ratelimit !== undefined) rule.ratelimit = input.ratelimit;
  if (!prev) return rule;
  const content = (r: Rule) =>
    JSON.stringify([r.action, r.expression, r.description, r.ref, r.enabled, r.action_parameters ?? null, r.logging ?? null, r.ratelimit ?? null]);
  if (content(rule) === content(prev)) return prev;
  return { ...rule, version: String(Number(prev.version) + 1) };
}

/** Inserts a rule at a position: before/after a rule id (empty: top/bottom) or a 1-based index. */
function place(rules: Rule[], rule: Rule, position: Position | undefined): Rule[] {
  const out = [...rules];
  if (!position) {
    out.push(rule);
    return out;
  }
  if ('index' in position) {
    if (position.index > out.length + 1) throw invalid([['/position/index', `index must be between 1 and ${out.length + 1}`]]);
    out.splice(position.index - 1, 0, rule);
    return out;
  }
  const [key, target] = 'before' in position ? (['before', position.before] as const) : (['after', position.after] as const);
  if (target === '') {
    if (key === 'before') out.unshift(rule);
    else out.push(rule);
    return out;
  }
  const at = out.findIndex((r) => r.id === target);
  if (at < 0) throw invalid([[`/position/${key}`, `could not find rule ${target} in this ruleset`]]);
  out.splice(key === 'before' ? at : at + 1, 0, rule);
  return out;
}
