/**
 * IP access rules in storage: one collection scoped by owner (a zone id or an account id, so
 * deleting a zone removes its rules), with mode, target, value and notes in indexed columns.
 * Writes lock the owner so "one rule per target and value" holds under concurrent writers.
 */
import { z } from 'zod';
import type { Clock } from '../../core/clock.ts';
import { apiError } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import { defineCollection, type Doc } from '../../core/storage/collection.ts';
import type { Database, Executor } from '../../core/storage/db.ts';
import { lockScope } from '../../core/storage/locks.ts';
import { canonicalValue, TARGETS, type Target } from './targets.ts';

export const MODES = ['block', 'challenge', 'whitelist', 'js_challenge', 'managed_challenge'] as const;
export type Mode = (typeof MODES)[number];

export interface AccessRule {
  id: string;
  paused: boolean;
  mode: Mode;
  allowed_modes: Mode[];
  configuration: { target: Target; value: string };
  notes: string;
  created_on: string;
  modified_on: string;
  scope: { id: string; type: 'zone' | 'account'; name?: string };
}

export const Configuration = z.object({ target: z.enum(TARGETS), value: z.string().min(1).max(256) });
export const CreateBody = z.object({
  mode: z.enum(MODES),
  configuration: Configuration,
  notes: z.string().max(1024).optional(),
});
export const EditBody = z.object({
  mode: z.enum(MODES).optional(),
  configuration: Configuration.optional(),
  notes: z.string().max(1024).optional(),
});

export type Field = 'mode' | 'target' | 'value' | 'notes';
export const accessRules = defineCollection<AccessRule, Field>({
  kind: 'access_rule',
  indexes: {
    mode: (r) => r.mode,
    target: (r) => r.configuration.target,
    value: (r) => r.configuration.value,
    notes: (r) => r.notes,
  },
});

export interface Owner {
  type: 'zone' | 'account';
  id: string;
  accountId: string;
  /** The zone's name, shown in `scope`. */
  name?: string;
}

/** Rules equal for duplicate purposes: a single IPv6 address is the same rule as `ip` or `ip6`. */
function sameKey(a: AccessRule['configuration'], b: AccessRule['configuration']): boolean {
  const key = (c: AccessRule['configuration']) => `${c.target === 'ip6' && !c.value.includes('/') ? 'ip' : c.target}:${c.value}`;
  return key(a) === key(b);
}

function canonicalConfiguration(c: z.infer<typeof Configuration>): AccessRule['configuration'] {
  const r = canonicalValue(c.target, c.value);
  if (!r.ok) throw apiError('access_rule_invalid', `configuration.value: ${r.message}`);
  return { target: c.target, value: r.value };
}

export class AccessRuleStore {
  constructor(
    private readonly database: Database,
    private readonly clock: Clock,
    private readonly changed: (owner: Owner) => void,
  ) {}

  /** The owner's rules, and for a zone also the rules of its account (which apply to it). */
  async visible(owner: Owner): Promise<AccessRule[]> {
    const db = this.database.db;
    const own = (await accessRules.all(db, owner.id)).map((d) => d.body);
    if (owner.type === 'account') return own;
    const inherited = (await accessRules.all(db, owner.accountId)).map((d) => d.body);
    return [...own, ...inherited];
  }

  /** A rule visible at the owner (a zone sees its account's rules too). */
  async get(owner: Owner, id: string): Promise<AccessRule> {
    const db = this.database.db;
    const doc = (await accessRules.get(db, owner.id, id)) ?? (owner.type === 'zone' ? await accessRules.get(db, owner.accountId, id) : undefined);
    if (!doc) throw apiError('access_rule_not_found', id);
    return doc.body;
  }

  async create(owner: Owner, body: z.infer<typeof CreateBody>): Promise<AccessRule> {
    const configuration = canonicalConfiguration(body.configuration);
    const rule = await this.write(owner, async (tx) => {
      await this.refuseDuplicate(tx, owner, configuration);
      const now = this.clock.now();
      const ts = now.toISOString();
      const rule: AccessRule = {
        id: hexId(),
        paused: false,
        mode: body.mode,
        allowed_modes: [...MODES],
        configuration,
        notes: body.notes ?? '',
        created_on: ts,
        modified_on: ts,
        scope: owner.type === 'zone' ? { id: owner.id, type: 'zone', name: owner.name } : { id: owner.id, type: 'account' },
      };
      await accessRules.insert(tx, owner.id, rule.id, rule, now);
      return rule;
    });
    return rule;
  }

  async edit(owner: Owner, id: string, body: z.infer<typeof EditBody>): Promise<AccessRule> {
    const configuration = body.configuration ? canonicalConfiguration(body.configuration) : undefined;
    return this.write(owner, async (tx) => {
      const doc = await this.own(tx, owner, id);
      if (configuration && !sameKey(configuration, doc.body.configuration)) await this.refuseDuplicate(tx, owner, configuration, id);
      const now = this.clock.now();
      const next: AccessRule = {
        ...doc.body,
        mode: body.mode ?? doc.body.mode,
        configuration: configuration ?? doc.body.configuration,
        notes: body.notes ?? doc.body.notes,
        modified_on: now.toISOString(),
      };
      return (await accessRules.update(tx, doc, next, now)).body;
    });
  }

  async delete(owner: Owner, id: string): Promise<void> {
    await this.write(owner, async (tx) => {
      await this.own(tx, owner, id);
      await accessRules.delete(tx, owner.id, id);
    });
  }

  /** The owner's own rule; an account rule seen from a zone cannot be changed there. */
  private async own(tx: Executor, owner: Owner, id: string): Promise<Doc<AccessRule>> {
    const doc = await accessRules.get(tx, owner.id, id);
    if (doc) return doc;
    if (owner.type === 'zone' && (await accessRules.get(tx, owner.accountId, id))) {
      throw apiError('access_rule_inherited', id, owner.accountId);
    }
    throw apiError('access_rule_not_found', id);
  }

  private async refuseDuplicate(tx: Executor, owner: Owner, configuration: AccessRule['configuration'], exceptId?: string): Promise<void> {
    const { items } = await accessRules.list(tx, owner.id, { filters: [{ field: 'value', op: 'eq', value: configuration.value }] });
    if (items.some((d) => d.id !== exceptId && sameKey(d.body.configuration, configuration))) throw apiError('access_rule_duplicate');
  }

  private async write<T>(owner: Owner, fn: (tx: Executor) => Promise<T>): Promise<T> {
    const { db, dialect } = this.database;
    const out = await db.transaction().execute(async (tx) => {
      await lockScope(tx, dialect, `access-rules:${owner.id}`);
      return fn(tx);
    });
    this.changed(owner);
    return out;
  }
}
