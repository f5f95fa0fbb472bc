/**
 * The SQL database behind the control plane: Kysely over SQLite (better-sqlite3, WAL; the default,
 * a file in the data directory) or PostgreSQL (`pg`, when the database setting is a postgres:// URL).
 * Both dialects run the same migrations and the same queries.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import {
  Kysely,
  PostgresDialect,
  SqliteDialect,
  sql,
  type Transaction,
} from 'kysely';
import { migrate } from './migrations.ts';

export interface DocumentsTable {
  kind: string;
  scope_id: string;
  id: string;
  body: string;
  created_on: string;
  modified_on: string;
  version: number;
  k1: string | null;
  k2: string | null;
  k3: string | null;
  k4: string | null;
}

export interface SettingsTable {
  key: string;
  value: string;
}

export interface Schema {
  documents: DocumentsTable;
  settings: SettingsTable;
}

export type Db = Kysely<Schema>;
export type Tx = Transaction<Schema>;
export type Executor = Db | Tx;

export interface Database {
  db: Db;
  dialect: 'sqlite' | 'postgres';
  /** Where the data lives, for the listener table (file path or URL without password). */
  location: string;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  /** `postgres://…` selects PostgreSQL; anything else is a SQLite file path (or ':memory:'). */
  url: string;
  /** PostgreSQL only: a schema to create and use (tests isolate themselves this way). */
  schema?: string;
}

export async function openDatabase(opts: DatabaseOptions): Promise<Database> {
  const isPostgres = /^postgres(ql)?:\/\//.test(opts.url);
  let db: Db;
  if (isPostgres) {
    if (opts.schema) await createSchema(opts.url, opts.schema);
    const pool = new pg.Pool({
      connectionString: opts.url,
      max: 10,
      ...(opts.schema ? { options: `-c search_path=${quoteIdent(opts.schema)}` } : {}),
    });
    db = new Kysely<Schema>({ dialect: new PostgresDialect({ pool }) });
  } else {
    if (opts.url !== ':memory:') mkdirSync(dirname(opts.url), { recursive: true });
    const sqlite = new BetterSqlite3(opts.url);
    sqlite.pragma('journal_mode = WAL');
    // NORMAL in WAL mode keeps every committed transaction across a process crash (kill -9);
    // only an operating-system crash could lose the last commits.
    sqlite.pragma('synchronous = NORMAL');
    sqlite.pragma('busy_timeout = 5000');
    sqlite.pragma('foreign_keys = ON');
    db = new Kysely<Schema>({ dialect: new SqliteDialect({ database: withStatementCache(sqlite) }) });
  }
  const schema = isPostgres
    ? (opts.schema ?? (await sql<{ s: string | null }>`select current_schema() as s`.execute(db)).rows[0]?.s ?? undefined)
    : undefined;
  await migrate(db, isPostgres ? 'postgres' : 'sqlite', schema);
  return {
    db,
    dialect: isPostgres ? 'postgres' : 'sqlite',
    location: isPostgres ? redactUrl(opts.url) + (opts.schema ? ` (schema ${opts.schema})` : '') : opts.url,
    close: () => db.destroy(),
  };
}

/**
 * Kysely's SQLite driver prepares every query anew; preparing is a large share of a point read.
 * Statements are cached by SQL text (queries are parameterised, so the set of texts is small).
 */
function withStatementCache(sqlite: BetterSqlite3.Database): BetterSqlite3.Database {
  const cache = new Map<string, BetterSqlite3.Statement>();
  const prepare = sqlite.prepare.bind(sqlite);
  return new Proxy(sqlite, {
    get(target, prop, receiver) {
      if (prop !== 'prepare') return Reflect.get(target, prop, receiver);
      return (text: string) => {
        let stmt = cache.get(text);
        if (!stmt) {
          if (cache.size >= 500) cache.clear();
          stmt = prepare(text);
          cache.set(text, stmt);
        }
        return stmt;
      };
    },
  });
}

async function createSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(schema)}`);
  } finally {
    await client.end();
  }
}

/** Drops a PostgreSQL schema created for a test run. */
export async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
  } finally {
    await client.end();
  }
}

function quoteIdent(name: string): string {
  if (!/^[a-z_][a-z0-9_]*$/i.test(name)) throw new Error(`invalid schema name ${name}`);
  return `"${name}"`;
}

function redactUrl(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
}

export async function getSetting(db: Executor, key: string): Promise<string | undefined> {
  const row = await db.selectFrom('settings').select('value').where('key', '=', key).executeTakeFirst();
  return row?.value;
}

export async function putSetting(db: Executor, key: string, value: string): Promise<void> {
  await db
    .insertInto('settings')
    .values({ key, value })
    .onConflict((oc) => oc.column('key').doUpdateSet({ value }))
    .execute();
}

export { sql };
