/**
 * Results as tables: `POST /accounts/{a}/pipelines/v1/query` runs one read-only SELECT over the
 * account's sinks, each a table named after the sink, made of its finished files (Parquet or
 * newline-delimited JSON). Every query gets its own in-memory DuckDB whose file access is locked
 * to the account's bucket directory before the caller's SQL runs; the SQL itself is parsed first
 * and must be one SELECT naming only the account's sinks (no table functions, no file paths).
 */
import { existsSync, readdirSync } from 'node:fs';
import { join, sep } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { parse } from '@guanmingchiu/sqlparser-ts';
import { pipelinesError } from './errors.ts';
import { CATALOG_DIR, sinkDir, sinkExtension } from './runner.ts';
import type { StoredSink } from './schemas.ts';
import { initSql } from './sql.ts';

type Node = any;

export interface QueryOptions {
  accountId: string;
  sinks: StoredSink[];
  bucketRoot: string;
  timeoutMs: number;
}

export interface QueryResult {
  meta: { name: string; type: string }[];
  data: Record<string, unknown>[];
  rows: number;
}

const FORBIDDEN_FN = /^(read_|glob$|parquet_|sniff_|query|iceberg|delta|sqlite_|postgres_|mysql_|httpfs|load_|install_)/i;

/** Finished files of a sink, sorted. */
export function sinkFiles(root: string, accountId: string, sink: StoredSink): string[] {
  const dir = sinkDir(root, accountId, sink);
  if (!existsSync(dir)) return [];
  const ext = sinkExtension(sink);
  // A bucket's Iceberg catalog is not part of a file sink at the bucket's root.
  const inCatalog = sink.type === 'r2' ? (p: string) => p.includes(`${sep}${CATALOG_DIR}${sep}`) : () => false;
  return (readdirSync(dir, { recursive: true, withFileTypes: true }) as import('node:fs').Dirent[])
    .filter((e) => e.isFile() && e.name.endsWith(ext))
    .map((e) => join(e.parentPath ?? (e as unknown as { path: string }).path, e.name))
    .filter((p) => !inCatalog(p))
    .sort();
}

function walk(node: Node, visit: (key: string, value: Node) => void): void {
  if (Array.isArray(node)) {
    for (const n of node) walk(n, visit);
    return;
  }
  if (node === null || typeof node !== 'object') return;
  for (const [k, v] of Object.entries(node)) {
    visit(k, v);
    walk(v, visit);
  }
}

const names = (parts: Node[]): string[] => parts.map((p) => p.Identifier?.value ?? p.value).filter((s) => typeof s === 'string');
const sqlString = (s: string) => `'${s.replace(/'/g, "''")}'`;

export async function runQuery(text: string, o: QueryOptions): Promise<QueryResult> {
  if (text.trim() === '') throw pipelinesError('query_invalid', 'Empty query: send one SELECT as the body (text, or JSON {"sql": …}) or as ?query=');
  await initSql();
  let statements: Node[];
  try {
    statements = parse(text, 'duckdb') as Node[];
  } catch (err) {
    throw pipelinesError('query_invalid', `SQL does not parse: ${String((err as Error).message ?? err).replace(/^sql parser error: /, '')}`);
  }
  if (statements.length !== 1 || !statements[0].Query) throw pipelinesError('query_invalid', 'Send exactly one SELECT: results are read-only');
  const ctes = new Set<string>();
  const tables = new Set<string>();
  walk(statements[0], (k, v) => {
    if (k === 'cte_tables' && Array.isArray(v)) for (const c of v) if (c?.alias?.name?.value) ctes.add(c.alias.name.value);
  });
  walk(statements[0], (k, v) => {
    if (k === 'Table' && v && typeof v === 'object' && Array.isArray(v.name)) {
      if (v.args) throw pipelinesError('query_invalid', `Table functions are not allowed: ${names(v.name).join('.')}(…)`);
      const n = names(v.name);
      if (n.length !== 1) throw pipelinesError('query_invalid', `Name tables by sink name only, not ${n.join('.')}`);
      if (!ctes.has(n[0])) tables.add(n[0]);
    }
    if ((k === 'TableFunction' || k === 'Function') && v && typeof v === 'object' && k === 'TableFunction') throw pipelinesError('query_invalid', 'Table functions are not allowed');
    if (k === 'Function' && v && Array.isArray(v.name)) {
      const fn = names(v.name).join('.');
      if (FORBIDDEN_FN.test(fn)) throw pipelinesError('query_invalid', `Function ${fn} is not allowed: query the sinks by name`);
    }
  });
  const byName = new Map(o.sinks.map((s) => [s.name, s]));
  const views: string[] = [];
  for (const t of tables) {
    const sink = byName.get(t);
    if (!sink) throw pipelinesError('query_invalid', `Unknown table ${t}: tables are the account's sinks (${[...byName.keys()].join(', ') || 'none yet'})`);
    const files = sinkFiles(o.bucketRoot, o.accountId, sink);
    if (files.length === 0) throw pipelinesError('query_invalid', `Sink ${t} has no finished files yet; files appear when its rolling policy closes one`);
    const list = `[${files.map(sqlString).join(', ')}]`;
    const reader = sink.format.type === 'parquet' ? `read_parquet(${list}, union_by_name = true, hive_partitioning = false)` : `read_json(${list}, format = 'newline_delimited', union_by_name = true, hive_partitioning = false)`;
    views.push(`CREATE VIEW "${t.replace(/"/g, '""')}" AS SELECT * FROM ${reader}`);
  }
  const instance = await DuckDBInstance.create(':memory:', { autoinstall_known_extensions: 'false', autoload_known_extensions: 'false', threads: '2' });
  const conn = await instance.connect();
  try {
    const root = join(o.bucketRoot, o.accountId) + '/';
    await conn.run(`SET allowed_directories = [${sqlString(root)}]`);
    await conn.run('SET enable_external_access = false');
    await conn.run('SET lock_configuration = true');
    for (const v of views) await conn.run(v);
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        conn.interrupt();
        reject(pipelinesError('query_invalid', `Query exceeded the time limit of ${o.timeoutMs / 1000} s`));
      }, o.timeoutMs);
    });
    try {
      const reader = await Promise.race([conn.runAndReadAll(text), expired]);
      const columns = reader.columnNames();
      const types = reader.columnTypes().map((t) => t.toString());
      const data = reader.getRowObjectsJson() as Record<string, unknown>[];
      return { meta: columns.map((name, i) => ({ name, type: types[i] })), data, rows: data.length };
    } catch (err) {
      if (err && typeof err === 'object' && 'status' in err) throw err;
      throw pipelinesError('query_invalid', `Query could not be run: ${String((err as Error).message ?? err).split('\n')[0]}`);
    } finally {
      clearTimeout(timer);
    }
  } finally {
    conn.closeSync();
    instance.closeSync();
  }
}
