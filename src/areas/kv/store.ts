/**
 * Key-value storage on the SQL database: namespaces are documents (per account), entries are rows
 * of `kv_values` (bytes, JSON metadata, expiration in epoch seconds). Expired entries are invisible
 * at once and deleted by a periodic purge. Listings are in byte order
 * of the key (`COLLATE "C"` on PostgreSQL, SQLite's default), paged by an opaque cursor.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import type { Clock } from '../../core/clock.ts';
import type { Database } from '../../core/storage/db.ts';
import { defineCollection } from '../../core/storage/collection.ts';

export interface StoredNamespace {
  id: string;
  title: string;
  supports_url_encoding: boolean;
}

export const namespaces = defineCollection<StoredNamespace, 'title'>({
  kind: 'kv_namespace',
  indexes: { title: (b) => b.title },
});

interface KvValuesTable {
  namespace_id: string;
  key: string;
  value: Buffer | Uint8Array;
  metadata: string | null;
  expiration: number | string | null;
}
interface KvSchema {
  kv_values: KvValuesTable;
}
type KvDb = Kysely<KvSchema>;
type KvExec = KvDb | Transaction<KvSchema>;

export const MAX_KEY_BYTES = 512;
export const MAX_VALUE_BYTES = 25 * 1024 * 1024;
export const MAX_METADATA_BYTES = 1024;
export const MIN_TTL_SECONDS = 60;

export interface Entry {
  value: Uint8Array;
  metadata: unknown;
  expiration: number | null;
}

export interface PutEntry {
  key: string;
  value: Uint8Array;
  metadata?: unknown;
  /** Epoch seconds. */
  expiration?: number | null;
}

export interface ListedKey {
  name: string;
  expiration?: number;
  metadata?: unknown;
}

export interface ListResult {
  keys: ListedKey[];
  list_complete: boolean;
  cursor?: string;
}

/** A problem with the caller's input (key, value size, metadata, expiration); a 400. */
export class KvInputError extends Error {}

export function checkKey(key: string): void {
  if (key.length === 0) throw new KvInputError('the key must not be empty');
  if (key === '.' || key === '..')
    throw new KvInputError(`the key ${JSON.stringify(key)} is not allowed`);
  if (Buffer.byteLength(key) > MAX_KEY_BYTES)
    throw new KvInputError(
      `the key is ${Buffer.byteLength(key)} bytes; keys are at most ${MAX_KEY_BYTES} bytes`,
    );
}

export function checkMetadata(metadata: unknown): string | null {
  if (metadata === undefined || metadata === null) return null;
  const text = JSON.stringify(metadata);
  if (Buffer.byteLength(text) > MAX_METADATA_BYTES)
    throw new KvInputError(
      `the metadata is ${Buffer.byteLength(text)} bytes serialized; the limit is ${MAX_METADATA_BYTES} bytes`,
    );
  return text;
}

/** Resolves `expiration` (epoch seconds) or `expiration_ttl` (seconds from now) to epoch seconds. */
export function expirationOf(
  nowSeconds: number,
  expiration?: unknown,
  ttl?: unknown,
): number | null {
  const num = (v: unknown, what: string): number | undefined => {
    if (v === undefined || v === null || v === '') return undefined;
    const n = typeof v === 'number' ? v : Number(v);
    if (!Number.isFinite(n) || !Number.isInteger(n))
      throw new KvInputError(`${what} must be an integer number of seconds`);
    return n;
  };
  const exp = num(expiration, 'expiration');
  const t = num(ttl, 'expiration_ttl');
  if (t !== undefined) {
    if (t < MIN_TTL_SECONDS)
      throw new KvInputError(
        `expiration_ttl must be at least ${MIN_TTL_SECONDS} seconds (got ${t})`,
      );
    return nowSeconds + t;
  }
  if (exp !== undefined) {
    if (exp < nowSeconds + MIN_TTL_SECONDS)
      throw new KvInputError(
        `expiration must be at least ${MIN_TTL_SECONDS} seconds in the future (got ${exp}, now is ${nowSeconds})`,
      );
    return exp;
  }
  return null;
}

function encodeCursor(key: string): string {
  return Buffer.from(key, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string): string {
  if (!/^[A-Za-z0-9_-]*$/.test(cursor))
    throw new KvInputError('cursor is not a cursor this server returned');
  return Buffer.from(cursor, 'base64url').toString('utf8');
}

export class KvStore {
  private readonly db: KvDb;
  private readonly pg: boolean;

  constructor(
    database: Database,
    private readonly clock: Clock,
  ) {
    this.db = database.db as unknown as KvDb;
    this.pg = database.dialect === 'postgres';
  }

  nowSeconds(): number {
    return Math.floor(this.clock.now().getTime() / 1000);
  }

  private live(now: number) {
    return sql<boolean>`(expiration is null or expiration > ${now})`;
  }

  async get(namespaceId: string, key: string): Promise<Entry | undefined> {
    const now = this.nowSeconds();
    const row = await this.db
      .selectFrom('kv_values')
      .select(['value', 'metadata', 'expiration'])
      .where('namespace_id', '=', namespaceId)
      .where('key', '=', key)
      .where(this.live(now))
      .executeTakeFirst();
    if (!row) return undefined;
    return {
      value: new Uint8Array(row.value),
      metadata: row.metadata === null ? null : (JSON.parse(row.metadata) as unknown),
      expiration: row.expiration === null ? null : Number(row.expiration),
    };
  }

  /** Writes every entry in one transaction. */
  async put(namespaceId: string, entries: PutEntry[]): Promise<void> {
    for (const e of entries) {
      checkKey(e.key);
      if (e.value.byteLength > MAX_VALUE_BYTES)
        throw new KvInputError(
          `the value of ${JSON.stringify(e.key)} is ${e.value.byteLength} bytes; values are at most ${MAX_VALUE_BYTES} bytes`,
        );
    }
    const rows = entries.map((e) => ({
      namespace_id: namespaceId,
      key: e.key,
      value: Buffer.from(e.value.buffer, e.value.byteOffset, e.value.byteLength),
      metadata: checkMetadata(e.metadata),
      expiration: e.expiration ?? null,
    }));
    if (rows.length === 0) return;
    const write = async (tx: KvExec) => {
      for (let i = 0; i < rows.length; i += 200) {
        await tx
          .insertInto('kv_values')
          .values(rows.slice(i, i + 200))
          .onConflict((oc) =>
            oc.columns(['namespace_id', 'key']).doUpdateSet((eb) => ({
              value: eb.ref('excluded.value'),
              metadata: eb.ref('excluded.metadata'),
              expiration: eb.ref('excluded.expiration'),
            })),
          )
          .execute();
      }
    };
    if (rows.length <= 200) await write(this.db);
    else await this.db.transaction().execute(write);
  }

  async delete(namespaceId: string, keys: string[]): Promise<void> {
    for (let i = 0; i < keys.length; i += 500) {
      await this.db
        .deleteFrom('kv_values')
        .where('namespace_id', '=', namespaceId)
        .where('key', 'in', keys.slice(i, i + 500))
        .execute();
    }
  }

  /** Deletes every expired entry (they are already invisible); run periodically. */
  async purgeExpired(): Promise<number> {
    const res = await this.db
      .deleteFrom('kv_values')
      .where('expiration', '<=', this.nowSeconds())
      .executeTakeFirst();
    return Number(res.numDeletedRows);
  }

  async deleteNamespace(namespaceId: string): Promise<void> {
    await this.db.deleteFrom('kv_values').where('namespace_id', '=', namespaceId).execute();
  }

  async list(
    namespaceId: string,
    opts: { prefix?: string; cursor?: string; limit: number },
  ): Promise<ListResult> {
    const now = this.nowSeconds();
    const keyCol = this.pg ? sql`key collate "C"` : sql`key`;
    let q = this.db
      .selectFrom('kv_values')
      .select(['key', 'metadata', 'expiration'])
      .where('namespace_id', '=', namespaceId)
      .where(this.live(now));
    if (opts.prefix) {
      q = q.where(sql<boolean>`substr(key, 1, ${opts.prefix.length}) = ${opts.prefix}`);
    }
    if (opts.cursor) q = q.where(sql<boolean>`${keyCol} > ${decodeCursor(opts.cursor)}`);
    const rows = await q
      .orderBy(keyCol)
      .limit(opts.limit + 1)
      .execute();
    const more = rows.length > opts.limit;
    const page = more ? rows.slice(0, opts.limit) : rows;
    const keys = page.map((r) => {
      const k: ListedKey = { name: r.key };
      if (r.expiration !== null) k.expiration = Number(r.expiration);
      if (r.metadata !== null) k.metadata = JSON.parse(r.metadata) as unknown;
      return k;
    });
    return more
      ? { keys, list_complete: false, cursor: encodeCursor(page[page.length - 1].key) }
      : { keys, list_complete: true };
  }
}
