/**
 * The gateway's storage: operations, discovered operations, per-zone settings (session
 * identifiers, GraphQL limits, BOLA), token validation configurations and rules — one document
 * collection each, scoped by zone (deleting a zone removes them). Writes run in a transaction that
 * locks the zone, so "one operation per (method, host, endpoint)" holds under concurrent writers,
 * and every write tells the edge's cache (`changed`).
 */
import type { Clock } from '../../core/clock.ts';
import { apiError } from '../../core/errors.ts';
import { uuid } from '../../core/ids.ts';
import { defineCollection } from '../../core/storage/collection.ts';
import type { Database, Executor } from '../../core/storage/db.ts';
import { lockScope } from '../../core/storage/locks.ts';
import { MANAGED_LABELS, type Label, type LabelSource, type OperationLabels } from './labels.ts';
import { templateEndpoint, type HttpMethod, type OperationInput } from './endpoints.ts';

export interface Operation {
  operation_id: string;
  method: HttpMethod;
  host: string;
  endpoint: string;
  last_updated: string;
  features?: Record<string, unknown>;
  /**
   * The operation's own schema validation action (the deprecated per-operation settings):
   * `log`/`block` replace the zone default, `none` skips validation, absent/null defers to the zone.
   */
  mitigation_action?: Mitigation | null;
  /** Names of the labels attached to the operation. */
  labels?: OperationLabels;
}

export type DiscoveryState = 'review' | 'saved' | 'ignored';

export interface DiscoveredOperation {
  id: string;
  method: HttpMethod;
  host: string;
  endpoint: string;
  last_updated: string;
  origin: ('ML' | 'SessionIdentifier' | 'LabelDiscovery')[];
  state: DiscoveryState;
  features: {
    traffic_stats: { requests: number; period_seconds: number; last_updated: string };
    /** Outpost's: requests seen with and without a session identifier (authentication posture). */
    auth: { with_session: number; without_session: number };
  };
}

export interface AuthIdCharacteristic {
  type: 'header' | 'cookie' | 'jwt';
  name: string;
}

export type Mitigation = 'none' | 'log' | 'block';

export interface Settings {
  auth_id_characteristics: AuthIdCharacteristic[];
  graphql: { max_depth: number | null; max_size: number | null };
  /** `validation_override_mitigation_action: 'none'` skips schema validation on the whole zone. */
  schema_validation: { validation_default_mitigation_action: Mitigation; validation_override_mitigation_action?: 'none' | null };
}

export const DEFAULT_SETTINGS: Settings = {
  auth_id_characteristics: [],
  graphql: { max_depth: null, max_size: null },
  schema_validation: { validation_default_mitigation_action: 'none' },
};

export interface UserSchema {
  schema_id: string;
  name: string;
  kind: 'openapi_v3';
  source: string;
  validation_enabled: boolean;
  created_at: string;
  /** BOLA detection on this schema's operations; `min_sessions` is the platform's 10,000 unless set. */
  bola: { enabled: boolean; min_sessions: number };
}

export interface Jwk {
  kty: string;
  kid?: string;
  alg?: string;
  [k: string]: unknown;
}

export interface TokenConfig {
  id: string;
  title: string;
  description: string;
  token_type: 'JWT';
  token_sources: string[];
  credentials: { keys: Jwk[] };
  created_at: string;
  last_updated: string;
}

export interface TokenRule {
  id: string;
  title: string;
  description: string;
  action: 'log' | 'block';
  enabled: boolean;
  expression: string;
  selector: { include?: { host?: string[] }[] | null; exclude?: { operation_ids?: string[] }[] | null };
  created_at: string;
  last_updated: string;
}

const operations = defineCollection<Operation, 'key'>({ kind: 'api_gateway_operation', indexes: { key: (o) => opKey(o) } });
const discovered = defineCollection<DiscoveredOperation, 'key' | 'state'>({
  kind: 'api_gateway_discovered',
  indexes: { key: (o) => opKey(o), state: (o) => o.state },
});
const settingsDocs = defineCollection<Settings>({ kind: 'api_gateway_settings' });
const tokenConfigs = defineCollection<TokenConfig>({ kind: 'token_validation_config' });
const tokenRules = defineCollection<TokenRule>({ kind: 'token_validation_rule' });
const schemas = defineCollection<UserSchema>({ kind: 'api_gateway_user_schema' });
const userLabels = defineCollection<Label>({ kind: 'api_gateway_label' });
const SETTINGS_ID = 'settings';

/** An operation with its labels resolved (as the label endpoints answer). */
export type LabelledOperation = Omit<Operation, 'labels' | 'mitigation_action'> & { labels: Label[] };

/** How label names given for operations combine with those already there. */
export type LabelMode = 'add' | 'replace' | 'remove_all';

export function opKey(o: { method: string; host: string; endpoint: string }): string {
  return `${o.method} ${o.host.toLowerCase()} ${o.endpoint}`;
}

const byCreation = (a: { createdOn: string; id: string }, b: { createdOn: string; id: string }) =>
  a.createdOn < b.createdOn ? -1 : a.createdOn > b.createdOn ? 1 : a.id < b.id ? -1 : 1;

export class GatewayStore {
  constructor(
    private readonly database: Database,
    private readonly clock: Clock,
    private readonly changed: (zoneId: string) => void,
  ) {}

  /** A locked write; `configuration: false` for traffic counts, which the edge's cache does not hold. */
  private async write<T>(zoneId: string, fn: (tx: Executor) => Promise<T>, configuration = true): Promise<T> {
    const { db, dialect } = this.database;
    const out = await db.transaction().execute(async (tx) => {
      await lockScope(tx, dialect, `api-gateway:${zoneId}`);
      return fn(tx);
    });
    if (configuration) this.changed(zoneId);
    return out;
  }

  // --- operations ---------------------------------------------------------------------------

  async listOperations(zoneId: string): Promise<Operation[]> {
    return (await operations.all(this.database.db, zoneId)).sort(byCreation).map((d) => d.body);
  }

  async getOperation(zoneId: string, id: string): Promise<Operation> {
    const doc = await operations.get(this.database.db, zoneId, id);
    if (!doc) throw apiError('api_gateway_operation_not_found', id);
    return doc.body;
  }

  /** Adds operations (templated, de-duplicated); an operation already present is returned as stored. */
  async addOperations(zoneId: string, inputs: OperationInput[]): Promise<Operation[]> {
    const prepared = inputs.map((i) => ({ method: i.method, host: i.host.toLowerCase(), endpoint: templateEndpoint(i.endpoint) }));
    return this.write(zoneId, async (tx) => {
      const now = this.clock.now();
      const out: Operation[] = [];
      const seen = new Map<string, Operation>();
      for (const p of prepared) {
        const key = opKey(p);
        const again = seen.get(key);
        if (again) {
          out.push(again);
          continue;
        }
        const existing = (await operations.list(tx, zoneId, { filters: [{ field: 'key', op: 'eq', value: key }] })).items[0];
        const op = existing?.body ?? { operation_id: uuid(), ...p, last_updated: now.toISOString() };
        if (!existing) await operations.insert(tx, zoneId, op.operation_id, op, now);
        seen.set(key, op);
        out.push(op);
      }
      return out;
    });
  }

  async deleteOperation(zoneId: string, id: string): Promise<void> {
    await this.write(zoneId, async (tx) => {
      if (!(await operations.delete(tx, zoneId, id))) throw apiError('api_gateway_operation_not_found', id);
    });
  }

  /** Deletes the named operations (all must exist), or every operation of the zone when none is named. */
  async deleteOperations(zoneId: string, ids: string[] | undefined): Promise<number> {
    return this.write(zoneId, async (tx) => {
      if (ids === undefined) return operations.deleteScope(tx, zoneId);
      for (const id of ids) if (!(await operations.get(tx, zoneId, id))) throw apiError('api_gateway_operation_not_found', id);
      for (const id of ids) await operations.delete(tx, zoneId, id);
      return ids.length;
    });
  }

  /** The operation's schema validation action (null: the zone's default applies). */
  async operationMitigation(zoneId: string, id: string): Promise<{ operation_id: string; mitigation_action: Mitigation | null }> {
    const op = await this.getOperation(zoneId, id);
    return { operation_id: op.operation_id, mitigation_action: op.mitigation_action ?? null };
  }

  /** Sets the schema validation action of several operations at once; every id must exist (all or none). */
  async setOperationMitigations(zoneId: string, actions: Record<string, Mitigation | null>): Promise<Record<string, { mitigation_action: Mitigation | null }>> {
    return this.write(zoneId, async (tx) => {
      const docs = [];
      for (const id of Object.keys(actions)) {
        const doc = await operations.get(tx, zoneId, id);
        if (!doc) throw apiError('api_gateway_operation_not_found', id);
        docs.push(doc);
      }
      const now = this.clock.now();
      const out: Record<string, { mitigation_action: Mitigation | null }> = {};
      for (const doc of docs) {
        const action = actions[doc.id];
        await operations.update(tx, doc, { ...doc.body, mitigation_action: action, last_updated: now.toISOString() }, now);
        out[doc.id] = { mitigation_action: action };
      }
      return out;
    });
  }

  // --- labels -------------------------------------------------------------------------------

  /** Managed then user labels; `mapped_resources.operations` counts the operations carrying each. */
  async listLabels(zoneId: string, withCounts = false): Promise<(Label & { mapped_resources?: { operations: number } })[]> {
    const users = (await userLabels.all(this.database.db, zoneId)).sort(byCreation).map((d) => d.body);
    const all = [...MANAGED_LABELS, ...users];
    if (!withCounts) return all;
    const ops = await this.listOperations(zoneId);
    return all.map((l) => ({ ...l, mapped_resources: { operations: ops.filter((o) => (o.labels?.[l.source] ?? []).includes(l.name)).length } }));
  }

  async getLabel(zoneId: string, source: LabelSource, name: string, withCounts = false): Promise<Label & { mapped_resources?: { operations: number } }> {
    const label = (await this.listLabels(zoneId, withCounts)).find((l) => l.source === source && l.name === name);
    if (!label) throw apiError('api_gateway_label_not_found', `${source}/${name}`);
    return label;
  }

  /** Creates user labels (all or none); a name already taken is a conflict. */
  async createUserLabels(zoneId: string, inputs: { name: string; description?: string; metadata?: unknown }[]): Promise<Label[]> {
    return this.write(zoneId, async (tx) => {
      const now = this.clock.now();
      const out: Label[] = [];
      for (const [i, input] of inputs.entries()) {
        if ((await userLabels.get(tx, zoneId, input.name)) || inputs.findIndex((o) => o.name === input.name) !== i) throw apiError('api_gateway_label_exists', input.name);
        // One millisecond apart, so the list (ordered by creation) keeps the request's order.
        const at = new Date(now.getTime() + i);
        const label: Label = { name: input.name, description: input.description ?? '', metadata: input.metadata ?? {}, source: 'user', created_at: at.toISOString(), last_updated: at.toISOString() };
        await userLabels.insert(tx, zoneId, label.name, label, at);
        out.push(label);
      }
      return out;
    });
  }

  /** Changes a user label's description and metadata (`replace`: fields left out are reset). */
  async editUserLabel(zoneId: string, name: string, patch: { description?: string; metadata?: unknown }, replace: boolean): Promise<Label> {
    return this.write(zoneId, async (tx) => {
      const doc = await userLabels.get(tx, zoneId, name);
      if (!doc) throw apiError('api_gateway_label_not_found', `user/${name}`);
      const now = this.clock.now();
      const base = replace ? { description: '', metadata: {} } : {};
      const next: Label = { ...doc.body, ...base, ...strip(patch), last_updated: now.toISOString() };
      return (await userLabels.update(tx, doc, next, now)).body;
    });
  }

  /** Deletes the named user label, or every user label of the zone, and detaches them from operations. */
  async deleteUserLabels(zoneId: string, name?: string): Promise<Label[]> {
    return this.write(zoneId, async (tx) => {
      const docs = name === undefined ? await userLabels.all(tx, zoneId) : [await userLabels.get(tx, zoneId, name)];
      if (docs.some((d) => !d)) throw apiError('api_gateway_label_not_found', `user/${name}`);
      const names = new Set(docs.map((d) => d!.body.name));
      const now = this.clock.now();
      for (const op of await operations.all(tx, zoneId)) {
        const user = op.body.labels?.user ?? [];
        if (user.some((n) => names.has(n))) await operations.update(tx, op, { ...op.body, labels: { user: user.filter((n) => !names.has(n)), managed: op.body.labels?.managed ?? [] } }, now);
      }
      for (const d of docs) await userLabels.delete(tx, zoneId, d!.id);
      return docs.map((d) => d!.body);
    });
  }

  /**
   * Attaches (`add`), sets (`replace`) or removes all (`remove_all`) labels on operations, in one
   * transaction: every operation must exist (404) and every label must exist (400 naming it).
   * `ids` undefined means every operation of the zone.
   */
  async labelOperations(zoneId: string, ids: string[] | undefined, labels: Partial<OperationLabels>, mode: LabelMode): Promise<LabelledOperation[]> {
    return this.write(zoneId, async (tx) => {
      const known = await this.labelsIn(tx, zoneId);
      for (const source of ['user', 'managed'] as const) {
        for (const n of labels[source] ?? []) if (!known.has(`${source}/${n}`)) throw apiError('api_gateway_invalid', `${source}: label ${n} does not exist in this zone`);
      }
      const docs = ids === undefined ? (await operations.all(tx, zoneId)).sort(byCreation) : [];
      for (const id of ids ?? []) {
        const doc = await operations.get(tx, zoneId, id);
        if (!doc) throw apiError('api_gateway_operation_not_found', id);
        docs.push(doc);
      }
      const now = this.clock.now();
      const out: LabelledOperation[] = [];
      for (const doc of docs) {
        const cur = doc.body.labels ?? { user: [], managed: [] };
        const pick = (source: keyof OperationLabels) =>
          mode === 'remove_all' ? [] : mode === 'replace' ? unique(labels[source] ?? []) : unique([...cur[source], ...(labels[source] ?? [])]);
        const next: Operation = { ...doc.body, labels: { user: pick('user'), managed: pick('managed') }, last_updated: now.toISOString() };
        await operations.update(tx, doc, next, now);
        out.push(resolveLabels(next, known));
      }
      return out;
    });
  }

  /** Makes the label carried by exactly the given operations (all must exist). */
  async setLabelOperations(zoneId: string, source: LabelSource, name: string, ids: string[]): Promise<Label & { mapped_resources: { operations: number } }> {
    await this.write(zoneId, async (tx) => {
      if (!(await this.labelsIn(tx, zoneId)).has(`${source}/${name}`)) throw apiError('api_gateway_label_not_found', `${source}/${name}`);
      for (const id of ids) if (!(await operations.get(tx, zoneId, id))) throw apiError('api_gateway_operation_not_found', id);
      const wanted = new Set(ids);
      const now = this.clock.now();
      for (const doc of await operations.all(tx, zoneId)) {
        const cur = doc.body.labels ?? { user: [], managed: [] };
        const has = cur[source].includes(name);
        if (has === wanted.has(doc.id)) continue;
        const list = has ? cur[source].filter((n) => n !== name) : [...cur[source], name];
        await operations.update(tx, doc, { ...doc.body, labels: { ...cur, [source]: list }, last_updated: now.toISOString() }, now);
      }
    });
    return (await this.getLabel(zoneId, source, name, true)) as Label & { mapped_resources: { operations: number } };
  }

  private async labelsIn(tx: Executor, zoneId: string): Promise<Map<string, Label>> {
    const users = (await userLabels.all(tx, zoneId)).map((d) => d.body);
    return new Map([...MANAGED_LABELS, ...users].map((l) => [`${l.source}/${l.name}`, l]));
  }

  // --- discovery ----------------------------------------------------------------------------

  async listDiscovered(zoneId: string): Promise<DiscoveredOperation[]> {
    return (await discovered.all(this.database.db, zoneId)).sort(byCreation).map((d) => d.body);
  }

  async getDiscovered(zoneId: string, id: string): Promise<DiscoveredOperation> {
    const doc = await discovered.get(this.database.db, zoneId, id);
    if (!doc) throw apiError('api_gateway_discovery_not_found', id);
    return doc.body;
  }

  /**
   * Records traffic counted since the last flush: a new (method, host, endpoint) becomes a
   * discovered operation in `review`; a known one gets its counters added.
   */
  async recordTraffic(
    zoneId: string,
    seen: { method: HttpMethod; host: string; endpoint: string; requests: number; withSession: number; withoutSession: number; sessionIdentified: boolean }[],
    periodSeconds: number,
  ): Promise<void> {
    await this.write(zoneId, async (tx) => {
      const now = this.clock.now();
      const ts = now.toISOString();
      for (const s of seen) {
        const key = opKey(s);
        const doc = (await discovered.list(tx, zoneId, { filters: [{ field: 'key', op: 'eq', value: key }] })).items[0];
        if (doc) {
          const b = doc.body;
          const next: DiscoveredOperation = {
            ...b,
            last_updated: ts,
            origin: s.sessionIdentified && !b.origin.includes('SessionIdentifier') ? [...b.origin, 'SessionIdentifier'] : b.origin,
            features: {
              traffic_stats: { requests: b.features.traffic_stats.requests + s.requests, period_seconds: b.features.traffic_stats.period_seconds + periodSeconds, last_updated: ts },
              auth: { with_session: b.features.auth.with_session + s.withSession, without_session: b.features.auth.without_session + s.withoutSession },
            },
          };
          await discovered.update(tx, doc, next, now);
        } else {
          const op: DiscoveredOperation = {
            id: uuid(),
            method: s.method,
            host: s.host,
            endpoint: s.endpoint,
            last_updated: ts,
            origin: s.sessionIdentified ? ['ML', 'SessionIdentifier'] : ['ML'],
            state: 'review',
            features: {
              traffic_stats: { requests: s.requests, period_seconds: periodSeconds, last_updated: ts },
              auth: { with_session: s.withSession, without_session: s.withoutSession },
            },
          };
          await discovered.insert(tx, zoneId, op.id, op, now);
        }
      }
    }, false);
  }

  /** Sets states; `saved` also adds the operation to the zone's operations. All ids must exist. */
  async setDiscoveryStates(zoneId: string, states: Record<string, DiscoveryState | undefined>): Promise<Record<string, { state: DiscoveryState }>> {
    const toSave: OperationInput[] = [];
    const out = await this.write(zoneId, async (tx) => {
      const now = this.clock.now();
      const result: Record<string, { state: DiscoveryState }> = {};
      const docs = [];
      for (const id of Object.keys(states)) {
        const doc = await discovered.get(tx, zoneId, id);
        if (!doc) throw apiError('api_gateway_discovery_not_found', id);
        docs.push(doc);
      }
      for (const doc of docs) {
        const state = states[doc.id] ?? doc.body.state;
        await discovered.update(tx, doc, { ...doc.body, state, last_updated: now.toISOString() }, now);
        if (state === 'saved') toSave.push({ method: doc.body.method, host: doc.body.host, endpoint: doc.body.endpoint });
        result[doc.id] = { state };
      }
      return result;
    });
    if (toSave.length > 0) await this.addOperations(zoneId, toSave);
    return out;
  }

  // --- settings -----------------------------------------------------------------------------

  async settings(zoneId: string): Promise<Settings> {
    const doc = await settingsDocs.get(this.database.db, zoneId, SETTINGS_ID);
    return { ...DEFAULT_SETTINGS, ...doc?.body };
  }

  async updateSettings(zoneId: string, patch: (s: Settings) => Settings): Promise<Settings> {
    return this.write(zoneId, async (tx) => {
      const now = this.clock.now();
      const doc = await settingsDocs.get(tx, zoneId, SETTINGS_ID);
      const next = patch({ ...DEFAULT_SETTINGS, ...doc?.body });
      if (doc) await settingsDocs.update(tx, doc, next, now);
      else await settingsDocs.insert(tx, zoneId, SETTINGS_ID, next, now);
      return next;
    });
  }

  // --- user schemas -------------------------------------------------------------------------

  async listSchemas(zoneId: string): Promise<UserSchema[]> {
    return (await schemas.all(this.database.db, zoneId)).sort(byCreation).map((d) => d.body);
  }

  async getSchema(zoneId: string, id: string): Promise<UserSchema> {
    const doc = await schemas.get(this.database.db, zoneId, id);
    if (!doc) throw apiError('user_schema_not_found', id);
    return doc.body;
  }

  async createSchema(zoneId: string, body: Omit<UserSchema, 'schema_id' | 'created_at'>): Promise<UserSchema> {
    return this.write(zoneId, async (tx) => {
      const now = this.clock.now();
      const schema: UserSchema = { schema_id: uuid(), ...body, created_at: now.toISOString() };
      await schemas.insert(tx, zoneId, schema.schema_id, schema, now);
      return schema;
    });
  }

  async editSchema(zoneId: string, id: string, patch: (s: UserSchema) => UserSchema): Promise<UserSchema> {
    return this.write(zoneId, async (tx) => {
      const doc = await schemas.get(tx, zoneId, id);
      if (!doc) throw apiError('user_schema_not_found', id);
      return (await schemas.update(tx, doc, patch(doc.body), this.clock.now())).body;
    });
  }

  async deleteSchema(zoneId: string, id: string): Promise<void> {
    await this.write(zoneId, async (tx) => {
      if (!(await schemas.delete(tx, zoneId, id))) throw apiError('user_schema_not_found', id);
    });
  }

  // --- token validation ---------------------------------------------------------------------

  async listTokenConfigs(zoneId: string): Promise<TokenConfig[]> {
    return (await tokenConfigs.all(this.database.db, zoneId)).sort(byCreation).map((d) => d.body);
  }

  async getTokenConfig(zoneId: string, id: string): Promise<TokenConfig> {
    const doc = await tokenConfigs.get(this.database.db, zoneId, id);
    if (!doc) throw apiError('token_config_not_found', id);
    return doc.body;
  }

  async createTokenConfig(zoneId: string, body: Omit<TokenConfig, 'id' | 'created_at' | 'last_updated'>): Promise<TokenConfig> {
    return this.write(zoneId, async (tx) => {
      const now = this.clock.now();
      const cfg: TokenConfig = { id: uuid(), ...body, created_at: now.toISOString(), last_updated: now.toISOString() };
      await tokenConfigs.insert(tx, zoneId, cfg.id, cfg, now);
      return cfg;
    });
  }

  async editTokenConfig(zoneId: string, id: string, patch: Partial<Pick<TokenConfig, 'title' | 'description' | 'token_sources' | 'credentials'>>): Promise<TokenConfig> {
    return this.write(zoneId, async (tx) => {
      const doc = await tokenConfigs.get(tx, zoneId, id);
      if (!doc) throw apiError('token_config_not_found', id);
      const now = this.clock.now();
      const next: TokenConfig = { ...doc.body, ...strip(patch), last_updated: now.toISOString() };
      return (await tokenConfigs.update(tx, doc, next, now)).body;
    });
  }

  async deleteTokenConfig(zoneId: string, id: string): Promise<void> {
    await this.write(zoneId, async (tx) => {
      if (!(await tokenConfigs.get(tx, zoneId, id))) throw apiError('token_config_not_found', id);
      const users = (await tokenRules.all(tx, zoneId)).filter((r) => r.body.expression.includes(id));
      if (users.length > 0) throw apiError('api_gateway_invalid', `token validation configuration ${id} is used by rule ${users[0].id}; change or delete the rule first`);
      await tokenConfigs.delete(tx, zoneId, id);
    });
  }

  async listTokenRules(zoneId: string): Promise<TokenRule[]> {
    return (await tokenRules.all(this.database.db, zoneId)).sort(byCreation).map((d) => d.body);
  }

  async getTokenRule(zoneId: string, id: string): Promise<TokenRule> {
    const doc = await tokenRules.get(this.database.db, zoneId, id);
    if (!doc) throw apiError('token_rule_not_found', id);
    return doc.body;
  }

  /** Creates a rule after checking that every configuration its expression names exists. */
  async createTokenRule(zoneId: string, body: Omit<TokenRule, 'id' | 'created_at' | 'last_updated'>): Promise<TokenRule> {
    return this.write(zoneId, async (tx) => {
      await this.checkConfigsExist(tx, zoneId, body.expression);
      const now = this.clock.now();
      const rule: TokenRule = { id: uuid(), ...body, created_at: now.toISOString(), last_updated: now.toISOString() };
      await tokenRules.insert(tx, zoneId, rule.id, rule, now);
      return rule;
    });
  }

  async editTokenRule(zoneId: string, id: string, patch: Partial<Omit<TokenRule, 'id' | 'created_at' | 'last_updated'>>): Promise<TokenRule> {
    return this.write(zoneId, async (tx) => {
      const doc = await tokenRules.get(tx, zoneId, id);
      if (!doc) throw apiError('token_rule_not_found', id);
      if (patch.expression) await this.checkConfigsExist(tx, zoneId, patch.expression);
      const now = this.clock.now();
      const next: TokenRule = { ...doc.body, ...strip(patch), last_updated: now.toISOString() };
      return (await tokenRules.update(tx, doc, next, now)).body;
    });
  }

  /** Several rules in one transaction: all are created, or none. */
  async createTokenRules(zoneId: string, bodies: Omit<TokenRule, 'id' | 'created_at' | 'last_updated'>[]): Promise<TokenRule[]> {
    return this.write(zoneId, async (tx) => {
      const out: TokenRule[] = [];
      const start = this.clock.now().getTime();
      for (const [i, body] of bodies.entries()) {
        await this.checkConfigsExist(tx, zoneId, body.expression);
        // One millisecond apart, so the list (ordered by creation) keeps the request's order.
        const now = new Date(start + i);
        const rule: TokenRule = { id: uuid(), ...body, created_at: now.toISOString(), last_updated: now.toISOString() };
        await tokenRules.insert(tx, zoneId, rule.id, rule, now);
        out.push(rule);
      }
      return out;
    });
  }

  /** Several edits in one transaction: all apply, or none (an unknown id is a 404). */
  async editTokenRules(zoneId: string, patches: { id: string; patch: Partial<Omit<TokenRule, 'id' | 'created_at' | 'last_updated'>> }[]): Promise<TokenRule[]> {
    return this.write(zoneId, async (tx) => {
      const out: TokenRule[] = [];
      for (const { id, patch } of patches) {
        const doc = await tokenRules.get(tx, zoneId, id);
        if (!doc) throw apiError('token_rule_not_found', id);
        if (patch.expression) await this.checkConfigsExist(tx, zoneId, patch.expression);
        const now = this.clock.now();
        const next: TokenRule = { ...doc.body, ...strip(patch), last_updated: now.toISOString() };
        out.push((await tokenRules.update(tx, doc, next, now)).body);
      }
      return out;
    });
  }

  async deleteTokenRule(zoneId: string, id: string): Promise<void> {
    await this.write(zoneId, async (tx) => {
      if (!(await tokenRules.delete(tx, zoneId, id))) throw apiError('token_rule_not_found', id);
    });
  }

  private async checkConfigsExist(tx: Executor, zoneId: string, expression: string): Promise<void> {
    for (const m of expression.matchAll(/http\.request\.jwt\.(?:payload|claims)\["([^"]*)"\]|is_jwt_valid\(\s*"([^"]*)"\s*\)/g)) {
      const id = m[1] ?? m[2];
      if (!(await tokenConfigs.get(tx, zoneId, id))) throw apiError('api_gateway_invalid', `expression names token validation configuration ${id}, which does not exist in this zone`);
    }
  }
}

function unique(names: string[]): string[] {
  return [...new Set(names)];
}

/** The operation as the label endpoints show it: its labels in full, managed first. */
export function resolveLabels(op: Operation, known: Map<string, Label>): LabelledOperation {
  const { labels, mitigation_action: _m, ...rest } = op;
  const names = [...(labels?.managed ?? []).map((n) => `managed/${n}`), ...(labels?.user ?? []).map((n) => `user/${n}`)];
  return { ...rest, labels: names.flatMap((k) => (known.has(k) ? [known.get(k)!] : [])) };
}

function strip<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
