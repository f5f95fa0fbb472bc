/**
 * Typed document collections over one SQL table. A collection is a resource kind (zone, DNS
 * record, token…): rows keyed by (kind, scope_id, id) holding the JSON body, timestamps and a
 * version for optimistic concurrency, plus up to four extracted, indexed filter columns.
 *
 * Bodies are validated by the area's zod schema before they are written; reads trust the table
 * (only this module writes it), which keeps list pages cheap.
 */
import { CompiledQuery, sql, type Compilable } from 'kysely';
import type { Executor } from './db.ts';

interface Row {
  id: string;
  scope_id: string;
  body: string;
  created_on: string;
  modified_on: string;
  version: number | string;
}

/**
 * The SQL text of a hot point read, compiled once per dialect: building a query with Kysely costs
 * more than running it on SQLite. Parameters are supplied in the order of the `where` calls.
 */
const POINT_QUERIES = new WeakMap<object, Map<string, string>>();
function pointQuery(db: Executor, name: string, build: (db: Executor) => Compilable): string {
  const adapter = db.getExecutor().adapter as object;
  let texts = POINT_QUERIES.get(adapter);
  if (!texts) POINT_QUERIES.set(adapter, (texts = new Map()));
  let text = texts.get(name);
  if (!text) texts.set(name, (text = build(db).compile().sql));
  return text;
}

export interface Doc<T> {
  id: string;
  scopeId: string;
  body: T;
  createdOn: string;
  modifiedOn: string;
  version: number;
}

type IndexColumn = 'k1' | 'k2' | 'k3' | 'k4';
const INDEX_COLUMNS: IndexColumn[] = ['k1', 'k2', 'k3', 'k4'];

export type FilterOp = 'eq' | 'ne' | 'contains' | 'startswith' | 'endswith' | 'in';

export interface Filter<I extends string> {
  field: I;
  op: FilterOp;
  value: string | string[];
}

export interface ListQuery<I extends string> {
  filters?: Filter<I>[];
  /** `all` (default) ANDs the filters, `any` ORs them. */
  match?: 'all' | 'any';
  order?: I | 'created_on' | 'modified_on' | 'id';
  direction?: 'asc' | 'desc';
  limit?: number;
  offset?: number;
  /** Skip the COUNT(*) when the caller does not need `total` (it is then the items' length). */
  withTotal?: boolean;
}

export interface CollectionOptions<T, I extends string> {
  kind: string;
  /** Extractors for the indexed filter columns, in column order (at most four). */
  indexes?: Record<I, (body: T) => string | null>;
}

export class VersionConflict extends Error {}

export interface Collection<T, I extends string> {
  readonly kind: string;
  insert(db: Executor, scopeId: string, id: string, body: T, at: Date): Promise<Doc<T>>;
  get(db: Executor, scopeId: string, id: string): Promise<Doc<T> | undefined>;
  /** Finds a document by id in any scope (ids are globally unique within a kind). */
  findById(db: Executor, id: string): Promise<Doc<T> | undefined>;
  /** Finds documents whose indexed column equals the value, in any scope. */
  findBy(db: Executor, field: I, value: string): Promise<Doc<T>[]>;
  /** Replaces the body if the stored version is still `doc.version`; else throws VersionConflict. */
  update(db: Executor, doc: Doc<T>, body: T, at: Date): Promise<Doc<T>>;
  delete(db: Executor, scopeId: string, id: string): Promise<boolean>;
  deleteScope(db: Executor, scopeId: string): Promise<number>;
  list(db: Executor, scopeId: string | null, q?: ListQuery<I>): Promise<{ items: Doc<T>[]; total: number }>;
  all(db: Executor, scopeId: string | null): Promise<Doc<T>[]>;
}

export function defineCollection<T, I extends string = never>(
  opts: CollectionOptions<T, I>,
): Collection<T, I> {
  const { kind } = opts;
  const extractors = Object.entries(opts.indexes ?? {}) as [I, (b: T) => string | null][];
  if (extractors.length > INDEX_COLUMNS.length) {
    throw new Error(`collection ${kind}: at most ${INDEX_COLUMNS.length} indexed fields`);
  }
  const columnOf = new Map<string, IndexColumn>(extractors.map(([name], i) => [name, INDEX_COLUMNS[i]]));
  const column = (field: string): string => {
    const col = columnOf.get(field);
    if (col) return col;
    if (field === 'created_on' || field === 'modified_on' || field === 'id') return field;
    throw new Error(`collection ${kind}: ${field} is not an indexed field`);
  };
  const indexValues = (body: T) => {
    const out: Partial<Record<IndexColumn, string | null>> = {};
    extractors.forEach(([, fn], i) => {
      out[INDEX_COLUMNS[i]] = fn(body);
    });
    return out;
  };
  const toDoc = (row: {
    id: string;
    scope_id: string;
    body: string;
    created_on: string;
    modified_on: string;
    version: number | string;
  }): Doc<T> => ({
    id: row.id,
    scopeId: row.scope_id,
    body: JSON.parse(row.body) as T,
    createdOn: row.created_on,
    modifiedOn: row.modified_on,
    version: Number(row.version),
  });
  const columns = ['id', 'scope_id', 'body', 'created_on', 'modified_on', 'version'] as const;

  return {
    kind,
    async insert(db, scopeId, id, body, at) {
      const ts = at.toISOString();
      await db
        .insertInto('documents')
        .values({
          kind,
          scope_id: scopeId,
          id,
          body: JSON.stringify(body),
          created_on: ts,
          modified_on: ts,
          version: 1,
          ...indexValues(body),
        })
        .execute();
      return { id, scopeId, body, createdOn: ts, modifiedOn: ts, version: 1 };
    },
    async get(db, scopeId, id) {
      const text = pointQuery(db, 'get', (d) =>
        d.selectFrom('documents').select(columns).where('kind', '=', '').where('scope_id', '=', '').where('id', '=', ''),
      );
      const { rows } = await db.executeQuery<Row>(CompiledQuery.raw(text, [kind, scopeId, id]));
      return rows[0] ? toDoc(rows[0]) : undefined;
    },
    async findById(db, id) {
      const text = pointQuery(db, 'findById', (d) =>
        d.selectFrom('documents').select(columns).where('kind', '=', '').where('id', '=', ''),
      );
      const { rows } = await db.executeQuery<Row>(CompiledQuery.raw(text, [kind, id]));
      return rows[0] ? toDoc(rows[0]) : undefined;
    },
    async findBy(db, field, value) {
      const rows = await db
        .selectFrom('documents')
        .select(columns)
        .where('kind', '=', kind)
        .where(sql.ref(column(field)), '=', value)
        .execute();
      return rows.map(toDoc);
    },
    async update(db, doc, body, at) {
      const ts = at.toISOString();
      const res = await db
        .updateTable('documents')
        .set({ body: JSON.stringify(body), modified_on: ts, version: doc.version + 1, ...indexValues(body) })
        .where('kind', '=', kind)
        .where('scope_id', '=', doc.scopeId)
        .where('id', '=', doc.id)
        .where('version', '=', doc.version)
        .executeTakeFirst();
      if (Number(res.numUpdatedRows) !== 1) {
        throw new VersionConflict(`${kind} ${doc.id} was changed concurrently`);
      }
      return { ...doc, body, modifiedOn: ts, version: doc.version + 1 };
    },
    async delete(db, scopeId, id) {
      const res = await db
        .deleteFrom('documents')
        .where('kind', '=', kind)
        .where('scope_id', '=', scopeId)
        .where('id', '=', id)
        .executeTakeFirst();
      return Number(res.numDeletedRows) > 0;
    },
    async deleteScope(db, scopeId) {
      const res = await db
        .deleteFrom('documents')
        .where('kind', '=', kind)
        .where('scope_id', '=', scopeId)
        .executeTakeFirst();
      return Number(res.numDeletedRows);
    },
    async list(db, scopeId, q = {}) {
      let base = db.selectFrom('documents').where('kind', '=', kind);
      if (scopeId !== null) base = base.where('scope_id', '=', scopeId);
      const filters = q.filters ?? [];
      if (filters.length > 0) {
        base = base.where((eb) => {
          const conds = filters.map((f) => {
            const ref = sql.ref(column(f.field));
            const v = f.value;
            switch (f.op) {
              case 'eq':
                return eb(ref, '=', v as string);
              case 'ne':
                return eb.or([eb(ref, '!=', v as string), eb(ref, 'is', null)]);
              case 'in':
                return eb(ref, 'in', v as string[]);
              default: {
                // lower() on both sides: SQLite's LIKE ignores ASCII case, PostgreSQL's does not.
                const pattern = likePattern(f.op, v as string);
                return eb(sql`lower(${ref})`, 'like', sql`${pattern} escape '\\'`);
              }
            }
          });
          return q.match === 'any' ? eb.or(conds) : eb.and(conds);
        });
      }
      let total = -1;
      if (q.withTotal !== false) {
        const countRow = await base.select((eb) => eb.fn.countAll().as('n')).executeTakeFirst();
        total = Number(countRow?.n ?? 0);
      }
      const orderCol = sql.ref(column(q.order ?? 'created_on'));
      const dir = q.direction === 'desc' ? 'desc' : 'asc';
      let sel = base.select(columns).orderBy(orderCol, dir).orderBy('id', dir);
      if (q.limit !== undefined) sel = sel.limit(q.limit).offset(q.offset ?? 0);
      const rows = await sel.execute();
      return { items: rows.map(toDoc), total: total < 0 ? rows.length : total };
    },
    async all(db, scopeId) {
      let sel = db.selectFrom('documents').select(columns).where('kind', '=', kind);
      if (scopeId !== null) sel = sel.where('scope_id', '=', scopeId);
      return (await sel.orderBy('created_on').orderBy('id').execute()).map(toDoc);
    },
  };
}

function likePattern(op: FilterOp, value: string): string {
  const escaped = value.toLowerCase().replace(/[\\%_]/g, (ch) => `\\${ch}`);
  if (op === 'contains') return `%${escaped}%`;
  if (op === 'startswith') return `${escaped}%`;
  return `%${escaped}`;
}
