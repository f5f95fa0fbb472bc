/**
 * The analytics engine: validates and samples data points, keeps them in the DuckDB store, knows
 * each account's datasets, and answers SQL in the ClickHouse output formats. The platform's own
 * datasets (`platform.ts`) are registered here too, so the SQL endpoint sees them beside the
 * accounts' datasets.
 */
import type { Logger } from '../../core/log.ts';
import { SqlError, translate, type OutputFormat, type Translated } from './dialect.ts';
import { Sampler } from './sampler.ts';
import { BLOBS, DOUBLES, DuckStore, pointTable, QueryTimeout, type QueryRows } from './store.ts';

export const MAX_BLOB_BYTES = 16 * 1024;
export const MAX_INDEX_BYTES = 96;
export const MAX_QUERY_CHARS = 100_000;
export const DATASET_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
/** Dataset names this server keeps for its own events. */
export const RESERVED_PREFIX = 'outpost_';

/** A data point as a script hands it over (untrusted). */
export interface RawPoint {
  blobs?: unknown;
  doubles?: unknown;
  indexes?: unknown;
}

/** A dataset the platform fills itself: its SQL relation for one account. */
export interface PlatformDataset {
  name: string;
  relation(accountId: string): string;
}

export interface EngineOptions {
  store: DuckStore;
  log: Logger;
  now: () => Date;
  sampleRatePerMinute: number;
  queryTimeoutMs: number;
}

export interface QueryAnswer {
  status: number;
  contentType: string;
  body: string;
}

export class AnalyticsEngine {
  readonly sampler: Sampler;
  private readonly datasets = new Map<string, Set<string>>();
  private readonly platform = new Map<string, PlatformDataset>();
  /** Points dropped for breaking a limit (for logs and tests). */
  dropped = 0;

  constructor(private readonly opts: EngineOptions) {
    this.sampler = new Sampler(opts.sampleRatePerMinute);
  }

  get store(): DuckStore {
    return this.opts.store;
  }

  /** Learns the datasets already stored. */
  async load(): Promise<void> {
    for (const table of this.opts.store.tables()) {
      const m = /^ae_([0-9a-f]{32})$/.exec(table);
      if (!m) continue;
      const res = await this.opts.store.query(`SELECT DISTINCT dataset FROM "${table}"`, 60_000);
      const set = new Set<string>();
      for (const r of res.rows) set.add(String(r.dataset));
      this.datasets.set(m[1], set);
    }
  }

  registerPlatform(ds: PlatformDataset): void {
    this.platform.set(ds.name, ds);
  }

  /**
   * Writes points of one dataset, timestamped now. Points over a limit are dropped and logged;
   * nothing here throws for bad input. Returns how many points were stored (after sampling).
   */
  write(accountId: string, dataset: string, points: RawPoint[]): number {
    const now = this.opts.now().getTime();
    const table = pointTable(accountId);
    const key = `${accountId}/${dataset}`;
    let kept = 0;
    for (const raw of points) {
      const row = this.row(dataset, raw, now, accountId);
      if (!row) continue;
      const interval = this.sampler.take(key, now);
      if (interval === 0) continue;
      row[2] = interval;
      this.opts.store.append(table, row);
      kept += 1;
    }
    if (kept > 0) {
      let set = this.datasets.get(accountId);
      if (!set) this.datasets.set(accountId, (set = new Set()));
      set.add(dataset);
    }
    return kept;
  }

  private row(dataset: string, p: RawPoint, now: number, accountId: string): unknown[] | undefined {
    const drop = (reason: string) => {
      this.dropped += 1;
      this.opts.log.warn({ accountId, dataset, reason }, 'analytics data point dropped');
      return undefined;
    };
    if (p === null || typeof p !== 'object') return drop('a data point must be an object');
    const blobs = p.blobs ?? [];
    const doubles = p.doubles ?? [];
    const indexes = p.indexes ?? [];
    if (!Array.isArray(blobs)) return drop('blobs must be an array');
    if (!Array.isArray(doubles)) return drop('doubles must be an array');
    if (!Array.isArray(indexes)) return drop('indexes must be an array');
    if (blobs.length > BLOBS) return drop(`${blobs.length} blobs; at most ${BLOBS} are allowed`);
    if (doubles.length > DOUBLES) return drop(`${doubles.length} doubles; at most ${DOUBLES} are allowed`);
    if (indexes.length > 1) return drop(`${indexes.length} indexes; at most one is allowed`);
    const row: unknown[] = new Array(4 + BLOBS + DOUBLES).fill(null);
    row[0] = dataset;
    row[1] = now;
    row[2] = 1;
    if (indexes.length === 1 && indexes[0] !== null && indexes[0] !== undefined) {
      const index = String(indexes[0]);
      if (Buffer.byteLength(index) > MAX_INDEX_BYTES) return drop(`the index is over ${MAX_INDEX_BYTES} bytes`);
      row[3] = index;
    }
    for (let i = 0; i < blobs.length; i++) {
      const b = blobs[i];
      if (b === null || b === undefined) continue;
      const s = typeof b === 'string' ? b : typeof b === 'number' || typeof b === 'boolean' ? String(b) : undefined;
      if (s === undefined) return drop(`blob${i + 1} must be a string`);
      if (Buffer.byteLength(s) > MAX_BLOB_BYTES) return drop(`blob${i + 1} is over ${MAX_BLOB_BYTES} bytes`);
      row[4 + i] = s;
    }
    for (let i = 0; i < doubles.length; i++) {
      const d = doubles[i];
      if (d === null || d === undefined) continue;
      if (typeof d !== 'number' || !Number.isFinite(d)) return drop(`double${i + 1} must be a finite number`);
      row[4 + BLOBS + i] = d;
    }
    return row;
  }

  /** The account's datasets that hold data, by name. */
  datasetsOf(accountId: string): string[] {
    return [...(this.datasets.get(accountId) ?? [])].sort();
  }

  /** The DuckDB relation a dataset name stands for in one account's queries. */
  private resolver(accountId: string) {
    return (name: string): string | undefined => {
      const platform = this.platform.get(name);
      if (platform) return platform.relation(accountId);
      if (!this.datasets.get(accountId)?.has(name)) return undefined;
      const escaped = name.replace(/'/g, "''");
      return `SELECT * FROM "${pointTable(accountId).name}" WHERE dataset = '${escaped}'`;
    };
  }

  /** The DuckDB SQL a SELECT becomes for one account (benchmarks run it on raw DuckDB). */
  async translateFor(accountId: string, text: string): Promise<string> {
    const t = await translate(text, { resolve: this.resolver(accountId), now: this.opts.now() });
    if (t.kind !== 'select') throw new Error('not a SELECT');
    return t.sql;
  }

  /** Translates and runs one query; every failure is an answer (text/plain), never a throw. */
  async sql(accountId: string, text: string): Promise<QueryAnswer> {
    const plain = (status: number, body: string): QueryAnswer => ({ status, contentType: 'text/plain; charset=utf-8', body });
    if (text.trim() === '') return plain(400, 'Empty query: send the SQL as the request body or as ?query=');
    if (text.length > MAX_QUERY_CHARS) return plain(400, `Query too long: ${text.length} characters; the limit is ${MAX_QUERY_CHARS}`);
    let t: Translated;
    try {
      t = await translate(text, { resolve: this.resolver(accountId), now: this.opts.now() });
    } catch (err) {
      if (err instanceof SqlError) {
        const at = err.line !== undefined ? ` (line ${err.line}, column ${err.column})` : '';
        return plain(400, `${err.message}${at}`);
      }
      throw err;
    }
    let result: QueryRows;
    let total: number | undefined;
    if (t.kind === 'show_tables') {
      const names = [...this.datasetsOf(accountId), ...[...this.platform.keys()].sort()];
      result = { columns: ['dataset'], types: ['VARCHAR'], rows: names.map((dataset) => ({ dataset })) };
    } else if (t.kind === 'show_timezone') {
      result = { columns: ['timezone'], types: ['VARCHAR'], rows: [{ timezone: 'Etc/UTC' }] };
    } else if (t.kind === 'show_timezones') {
      result = await this.opts.store.query('SELECT name FROM pg_timezone_names() ORDER BY name', this.opts.queryTimeoutMs);
    } else {
      const sel = t as Extract<Translated, { kind: 'select' }>;
      await this.opts.store.flush();
      try {
        result = await this.opts.store.query(sel.sql, this.opts.queryTimeoutMs);
      } catch (err) {
        if (err instanceof QueryTimeout)
          return plain(504, `${(err as Error).message}; narrow the time range or aggregate more`);
        const message = String((err as Error).message ?? err).replace(/\n+LINE \d+:[\s\S]*$/, '');
        return plain(422, `Query could not be run: ${message}`);
      }
      const totalColumn = sel.totalColumn;
      if (totalColumn) {
        const i = result.columns.indexOf(totalColumn);
        total = result.rows.length > 0 ? Number(result.rows[0][totalColumn]) : 0;
        result.columns.splice(i, 1);
        result.types.splice(i, 1);
        for (const r of result.rows) delete r[totalColumn];
      }
    }
    return render(result, t.format, total);
  }
}

/** ClickHouse type names for DuckDB's. */
function chType(duck: string): string {
  const base = duck.replace(/\(.*\)$/, '');
  const map: Record<string, string> = {
    VARCHAR: 'String',
    DOUBLE: 'Float64',
    FLOAT: 'Float32',
    TINYINT: 'Int8',
    SMALLINT: 'Int16',
    INTEGER: 'Int32',
    BIGINT: 'Int64',
    HUGEINT: 'Int128',
    UTINYINT: 'UInt8',
    USMALLINT: 'UInt16',
    UINTEGER: 'UInt32',
    UBIGINT: 'UInt64',
    UHUGEINT: 'UInt128',
    BOOLEAN: 'Bool',
    TIMESTAMP: 'DateTime',
    DATE: 'Date',
    INTERVAL: 'IntervalSecond',
  };
  if (base.endsWith('[]')) return `Array(${chType(base.slice(0, -2))})`;
  if (base.startsWith('DECIMAL')) return 'Float64';
  return map[base] ?? base;
}

/** Values as ClickHouse prints them: DateTime to the second, 64-bit integers as strings. */
function shape(value: unknown, duck: string): unknown {
  if (value === null || value === undefined) return null;
  if (duck === 'TIMESTAMP' && typeof value === 'string') return value.slice(0, 19);
  if (duck.startsWith('DECIMAL')) return Number(value);
  if (duck === 'HUGEINT' || duck === 'UHUGEINT' || duck === 'BIGINT' || duck === 'UBIGINT') return String(value);
  return value;
}

function render(result: QueryRows, format: OutputFormat, total?: number): QueryAnswer {
  const rows = result.rows.map((r) => {
    const out: Record<string, unknown> = {};
    result.columns.forEach((c, i) => (out[c] = shape(r[c], result.types[i])));
    return out;
  });
  if (format === 'JSONEachRow') {
    return {
      status: 200,
      contentType: 'application/x-ndjson',
      body: rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : ''),
    };
  }
  if (format === 'TabSeparated') {
    const cell = (v: unknown) =>
      v === null ? '\\N' : (typeof v === 'object' ? JSON.stringify(v) : String(v)).replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n');
    return {
      status: 200,
      contentType: 'text/tab-separated-values; charset=utf-8',
      body: rows.map((r) => result.columns.map((c) => cell(r[c])).join('\t')).join('\n') + (rows.length ? '\n' : ''),
    };
  }
  const body = {
    meta: result.columns.map((name, i) => ({ name, type: chType(result.types[i]) })),
    data: rows,
    rows: rows.length,
    rows_before_limit_at_least: total ?? rows.length,
  };
  return { status: 200, contentType: 'application/json; charset=utf-8', body: JSON.stringify(body) };
}
