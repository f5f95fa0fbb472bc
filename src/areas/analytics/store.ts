/**
 * The analytics store on DuckDB (embedded, one database file `analytics.duckdb` in the data
 * directory). Data points live in one table per account (`ae_<account id>`, with a `dataset`
 * column); the platform's own events live in one table per kind with an `account_id` column.
 * Writes are buffered in memory and appended in batches every flush interval (and on stop), so a
 * `kill -9` loses at most the points of the last interval; a retention sweeper deletes rows older
 * than the retention. Queries run on their own connection each, interrupted at the timeout.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { DuckDBInstance, timestampValue, type DuckDBAppender, type DuckDBConnection } from '@duckdb/node-api';
import type { Logger } from '../../core/log.ts';

export const BLOBS = 20;
export const DOUBLES = 20;

/** Column kinds a buffered table has, in order. */
type ColumnKind = 'varchar' | 'double' | 'timestamp' | 'uinteger' | 'integer';
export interface TableSpec {
  name: string;
  columns: [string, ColumnKind][];
}

const SQL_TYPE: Record<ColumnKind, string> = {
  varchar: 'VARCHAR',
  double: 'DOUBLE',
  timestamp: 'TIMESTAMP',
  uinteger: 'UINTEGER',
  integer: 'INTEGER',
};

/** The columns of a dataset as the SQL API shows them. */
export const POINT_COLUMNS: [string, ColumnKind][] = [
  ['dataset', 'varchar'],
  ['timestamp', 'timestamp'],
  ['_sample_interval', 'uinteger'],
  ['index1', 'varchar'],
  ...Array.from({ length: BLOBS }, (_, i): [string, ColumnKind] => [`blob${i + 1}`, 'varchar']),
  ...Array.from({ length: DOUBLES }, (_, i): [string, ColumnKind] => [`double${i + 1}`, 'double']),
];

export function pointTable(accountId: string): TableSpec {
  if (!/^[0-9a-f]{32}$/.test(accountId)) throw new Error(`not an account id: ${accountId}`);
  return { name: `ae_${accountId}`, columns: POINT_COLUMNS };
}

export interface StoreOptions {
  /** Database file; `:memory:` for none. */
  path: string;
  flushMs: number;
  retentionDays: number;
  log: Logger;
  now: () => Date;
}

/** A result as read back from DuckDB: column names, DuckDB type names and rows as JSON values. */
export interface QueryRows {
  columns: string[];
  types: string[];
  rows: Record<string, unknown>[];
}

export class QueryTimeout extends Error {}

type Row = unknown[];

export class DuckStore {
  private readonly buffers = new Map<string, { spec: TableSpec; rows: Row[] }>();
  private readonly created = new Set<string>();
  private timer?: NodeJS.Timeout;
  private sweepTimer?: NodeJS.Timeout;
  private flushing: Promise<void> = Promise.resolve();
  private closed = false;

  private constructor(
    private readonly instance: DuckDBInstance,
    private readonly writer: DuckDBConnection,
    private readonly opts: StoreOptions,
  ) {}

  static async open(opts: StoreOptions): Promise<DuckStore> {
    if (opts.path !== ':memory:') mkdirSync(join(opts.path, '..'), { recursive: true });
    const instance = await DuckDBInstance.create(opts.path, {
      // No extension may be installed or loaded, and nothing outside the database is readable.
      autoinstall_known_extensions: 'false',
      autoload_known_extensions: 'false',
      enable_external_access: 'false',
    });
    const writer = await instance.connect();
    const store = new DuckStore(instance, writer, opts);
    const tables = await writer.runAndReadAll(`SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'`);
    for (const [name] of tables.getRows()) store.created.add(String(name));
    return store;
  }

  /** Starts the flush and retention timers. */
  start(): void {
    this.timer = setInterval(() => void this.flush(), this.opts.flushMs);
    this.timer.unref();
    this.sweepTimer = setInterval(() => void this.sweep(), 3600_000);
    this.sweepTimer.unref();
    void this.sweep();
  }

  tables(): Set<string> {
    return this.created;
  }

  /** Buffers one row for a table; appended at the next flush. */
  append(spec: TableSpec, row: Row): void {
    let buf = this.buffers.get(spec.name);
    if (!buf) this.buffers.set(spec.name, (buf = { spec, rows: [] }));
    buf.rows.push(row);
  }

  pending(): number {
    let n = 0;
    for (const b of this.buffers.values()) n += b.rows.length;
    return n;
  }

  /** Appends every buffered row; flushes run one at a time. */
  flush(): Promise<void> {
    const run = this.flushing.then(() => this.flushNow());
    this.flushing = run.catch((err) => this.opts.log.error({ err }, 'analytics flush failed; the points stay buffered'));
    return this.flushing;
  }

  private async flushNow(): Promise<void> {
    for (const [name, buf] of this.buffers) {
      if (buf.rows.length === 0) continue;
      const rows = buf.rows;
      buf.rows = [];
      try {
        await this.ensureTable(buf.spec);
        const appender = await this.writer.createAppender(name);
        try {
          for (const row of rows) appendRow(appender, buf.spec, row);
          appender.flushSync();
        } finally {
          appender.closeSync();
        }
      } catch (err) {
        buf.rows = rows.concat(buf.rows);
        this.buffers.set(name, buf);
        throw err;
      }
    }
  }

  async ensureTable(spec: TableSpec): Promise<void> {
    if (this.created.has(spec.name)) return;
    const cols = spec.columns.map(([n, k]) => `"${n}" ${SQL_TYPE[k]}`).join(', ');
    await this.writer.run(`CREATE TABLE IF NOT EXISTS "${spec.name}" (${cols})`);
    this.created.add(spec.name);
  }

  /** Deletes rows older than the retention from every table. */
  async sweep(): Promise<void> {
    const cutoff = new Date(this.opts.now().getTime() - this.opts.retentionDays * 86400_000);
    const literal = `TIMESTAMP '${cutoff.toISOString().replace('T', ' ').replace('Z', '')}'`;
    try {
      for (const name of this.created) await this.writer.run(`DELETE FROM "${name}" WHERE "timestamp" < ${literal}`);
    } catch (err) {
      this.opts.log.warn({ err }, 'analytics retention sweep failed; it runs again within the hour');
    }
  }

  /**
   * Runs a statement the dialect produced. At `timeoutMs` the query is interrupted and the caller
   * gets `QueryTimeout` at once, even if DuckDB is inside a step it cannot interrupt (a long
   * lambda over one list); the connection is closed when the query finally stops.
   */
  async query(sql: string, timeoutMs: number): Promise<QueryRows> {
    const conn = await this.instance.connect();
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        conn.interrupt();
        reject(new QueryTimeout(`Query exceeded the time limit of ${timeoutMs / 1000} s`));
      }, timeoutMs);
    });
    const run = conn.runAndReadAll(sql).then((reader) => ({
      columns: reader.columnNames(),
      types: reader.columnTypes().map((t) => t.toString()),
      rows: reader.getRowObjectsJson() as Record<string, unknown>[],
    }));
    const done = run.finally(() => {
      clearTimeout(timer);
      conn.closeSync();
    });
    done.catch(() => {});
    return Promise.race([run, expired]);
  }

  /** Direct access for benchmarks and dataset generation. */
  async run(sql: string): Promise<void> {
    await this.writer.run(sql);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    clearInterval(this.sweepTimer);
    await this.flush();
    await this.flushing;
    try {
      await this.writer.run('CHECKPOINT');
    } catch (err) {
      this.opts.log.warn({ err }, 'analytics checkpoint on stop failed; the write-ahead log keeps the data');
    }
    this.writer.closeSync();
    this.instance.closeSync();
  }
}

function appendRow(a: DuckDBAppender, spec: TableSpec, row: Row): void {
  for (let i = 0; i < spec.columns.length; i++) {
    const v = row[i];
    if (v === null || v === undefined) {
      a.appendNull();
      continue;
    }
    switch (spec.columns[i][1]) {
      case 'varchar':
        a.appendVarchar(v as string);
        break;
      case 'double':
        a.appendDouble(v as number);
        break;
      case 'timestamp':
        a.appendTimestamp(timestampValue(BigInt(v as number) * 1000n));
        break;
      case 'uinteger':
        a.appendUInteger(v as number);
        break;
      case 'integer':
        a.appendInteger(v as number);
        break;
    }
  }
  a.endRow();
}
