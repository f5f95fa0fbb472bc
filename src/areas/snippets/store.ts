/**
 * Snippets in storage: one document per snippet (scope: the zone, id: the snippet name) holding
 * its files, and one document per zone holding the ordered rule list. Writes lock the zone so the
 * rules ↔ snippets references and the per-zone count hold under concurrent writers. Zone deletion
 * removes both (the zones area deletes every document scoped to the zone).
 */
import type { Clock } from '../../core/clock.ts';
import { apiError } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import { defineCollection } from '../../core/storage/collection.ts';
import type { Database, Executor } from '../../core/storage/db.ts';
import { lockScope } from '../../core/storage/locks.ts';

export interface SnippetFile {
  name: string;
  type: string;
  /** base64 */
  content: string;
}

export interface StoredSnippet {
  snippet_name: string;
  main_module: string;
  files: SnippetFile[];
  created_on: string;
  modified_on: string;
}

/** The API's view of a snippet. */
export interface Snippet {
  snippet_name: string;
  created_on: string;
  modified_on: string;
}

export interface SnippetRule {
  id: string;
  description: string;
  enabled: boolean;
  expression: string;
  snippet_name: string;
  last_updated: string;
}

interface RuleList {
  rules: SnippetRule[];
}

const snippets = defineCollection<StoredSnippet>({ kind: 'snippet' });
const ruleLists = defineCollection<RuleList>({ kind: 'snippet_rules' });
const RULES_ID = 'rules';

export const view = (s: StoredSnippet): Snippet => ({
  snippet_name: s.snippet_name,
  created_on: s.created_on,
  modified_on: s.modified_on,
});

export class SnippetStore {
  constructor(
    private readonly database: Database,
    private readonly clock: Clock,
  ) {}

  async list(zoneId: string): Promise<StoredSnippet[]> {
    return (await snippets.all(this.database.db, zoneId)).map((d) => d.body);
  }

  async count(zoneId: string): Promise<number> {
    return (await snippets.list(this.database.db, zoneId, { limit: 0 })).total;
  }

  async get(zoneId: string, name: string): Promise<StoredSnippet | undefined> {
    return (await snippets.get(this.database.db, zoneId, name))?.body;
  }

  /** Creates or replaces a snippet, refusing a new one beyond `maxPerZone`. */
  async put(
    zoneId: string,
    name: string,
    data: { main_module: string; files: SnippetFile[] },
    maxPerZone: number,
  ): Promise<StoredSnippet> {
    return this.write(zoneId, async (tx) => {
      const existing = await snippets.get(tx, zoneId, name);
      const now = this.clock.now();
      const ts = now.toISOString();
      if (!existing) {
        const { total } = await snippets.list(tx, zoneId, { limit: 0 });
        if (total >= maxPerZone) throw apiError('snippet_limit', maxPerZone);
      }
      if (existing) {
        const next: StoredSnippet = { ...existing.body, ...data, modified_on: ts };
        return (await snippets.update(tx, existing, next, now)).body;
      }
      const body: StoredSnippet = { snippet_name: name, ...data, created_on: ts, modified_on: ts };
      return (await snippets.insert(tx, zoneId, name, body, now)).body;
    });
  }

  async delete(zoneId: string, name: string): Promise<void> {
    await this.write(zoneId, async (tx) => {
      if (!(await snippets.get(tx, zoneId, name))) throw apiError('snippet_not_found', name);
      const rules = (await ruleLists.get(tx, zoneId, RULES_ID))?.body.rules ?? [];
      if (rules.some((r) => r.snippet_name === name)) throw apiError('snippet_in_use', name);
      await snippets.delete(tx, zoneId, name);
    });
  }

  async rules(zoneId: string): Promise<SnippetRule[]> {
    return (await ruleLists.get(this.database.db, zoneId, RULES_ID))?.body.rules ?? [];
  }

  /** Replaces the rule list; every rule must name an existing snippet. */
  async putRules(
    zoneId: string,
    input: { description?: string; enabled?: boolean; expression: string; snippet_name: string }[],
  ): Promise<SnippetRule[]> {
    return this.write(zoneId, async (tx) => {
      const names = new Set((await snippets.all(tx, zoneId)).map((d) => d.id));
      const missing = input.findIndex((r) => !names.has(r.snippet_name));
      if (missing >= 0) {
        throw apiError(
          'snippet_rules_invalid',
          `rules[${missing}].snippet_name: snippet ${input[missing].snippet_name} does not exist in this zone`,
        );
      }
      const now = this.clock.now();
      const ts = now.toISOString();
      const existing = await ruleLists.get(tx, zoneId, RULES_ID);
      const previous = new Map((existing?.body.rules ?? []).map((r) => [r.snippet_name, r]));
      const rules = input.map((r): SnippetRule => {
        const prev = previous.get(r.snippet_name);
        const rule = {
          description: r.description ?? '',
          enabled: r.enabled ?? false,
          expression: r.expression,
          snippet_name: r.snippet_name,
        };
        const same =
          prev &&
          prev.description === rule.description &&
          prev.enabled === rule.enabled &&
          prev.expression === rule.expression;
        return { id: prev?.id ?? hexId(), ...rule, last_updated: same ? prev.last_updated : ts };
      });
      if (existing) await ruleLists.update(tx, existing, { rules }, now);
      else await ruleLists.insert(tx, zoneId, RULES_ID, { rules }, now);
      return rules;
    });
  }

  async deleteRules(zoneId: string): Promise<void> {
    await this.write(zoneId, (tx) => ruleLists.delete(tx, zoneId, RULES_ID));
  }

  private async write<T>(zoneId: string, fn: (tx: Executor) => Promise<T>): Promise<T> {
    const { db, dialect } = this.database;
    return db.transaction().execute(async (tx) => {
      await lockScope(tx, dialect, `snippets:${zoneId}`);
      return fn(tx);
    });
  }
}
