/**
 * Apache Iceberg tables for `r2_data_catalog` sinks (format version 2, unpartitioned, Parquet data
 * files). A table is a directory: `data/` holds the Parquet files the pipeline finishes,
 * `metadata/` holds `v<N>.metadata.json`, the manifest lists (`snap-*.avro`), the manifests
 * (`*-m0.avro`) and `version-hint.text` (the current N, for readers that open a table by path).
 *
 * Each finished file is one `append` snapshot: a new manifest with the file as ADDED, a manifest
 * list with every earlier manifest plus the new one, and the next metadata version. The metadata
 * file is created with an exclusive link, so two commits can never both become version N; commits
 * to one table are also queued in this process. A commit names its data file in the snapshot
 * summary (`outpost.data-file`), so committing a file twice (a restart between the file and the
 * checkpoint) is a no-op.
 *
 * Columns: the table's schema grows when a file brings a new column (a new schema id); a column
 * keeps the type it was first given (the writer casts later values to it). Data files carry no
 * Parquet field ids; the table's `schema.name-mapping.default` maps columns by name, as the
 * Iceberg spec provides for such files.
 *
 * Locations are `file://` URLs of this machine: engines that read local tables (DuckDB, PyIceberg,
 * Spark) open them as they are.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { link, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import avro from 'avsc';
import { replaceDurably, writeSynced } from './durable.ts';

export type IcebergType = 'boolean' | 'int' | 'long' | 'float' | 'double' | 'string' | 'binary' | 'date' | 'timestamp' | 'timestamptz';

export interface IcebergField {
  id: number;
  name: string;
  required: boolean;
  type: IcebergType;
}
export interface IcebergSchema {
  type: 'struct';
  'schema-id': number;
  fields: IcebergField[];
}
interface Snapshot {
  'snapshot-id': number;
  'parent-snapshot-id'?: number;
  'sequence-number': number;
  'timestamp-ms': number;
  'manifest-list': string;
  summary: Record<string, string>;
  'schema-id': number;
}
export interface TableMetadata {
  'format-version': 2;
  'table-uuid': string;
  location: string;
  'last-sequence-number': number;
  'last-updated-ms': number;
  'last-column-id': number;
  'current-schema-id': number;
  schemas: IcebergSchema[];
  'default-spec-id': 0;
  'partition-specs': [{ 'spec-id': 0; fields: [] }];
  'last-partition-id': 999;
  'default-sort-order-id': 0;
  'sort-orders': [{ 'order-id': 0; fields: [] }];
  properties: Record<string, string>;
  'current-snapshot-id': number;
  refs: Record<string, { 'snapshot-id': number; type: 'branch' }>;
  snapshots: Snapshot[];
  'snapshot-log': { 'timestamp-ms': number; 'snapshot-id': number }[];
  'metadata-log': { 'timestamp-ms': number; 'metadata-file': string }[];
}

/** DuckDB column types (as DESCRIBE prints them) to Iceberg types; anything else is kept as text. */
export function icebergTypeOfDuck(duck: string): IcebergType {
  const t = duck.toUpperCase();
  if (t === 'BOOLEAN') return 'boolean';
  if (t === 'TINYINT' || t === 'SMALLINT' || t === 'INTEGER' || t === 'UTINYINT' || t === 'USMALLINT') return 'int';
  if (t === 'BIGINT' || t === 'UINTEGER') return 'long';
  if (t === 'FLOAT') return 'float';
  if (t === 'DOUBLE') return 'double';
  if (t === 'BLOB') return 'binary';
  if (t === 'DATE') return 'date';
  if (t === 'TIMESTAMP' || t === 'TIMESTAMP_NS' || t === 'TIMESTAMP_MS' || t === 'TIMESTAMP_S') return 'timestamp';
  if (t === 'TIMESTAMP WITH TIME ZONE') return 'timestamptz';
  return 'string';
}

/** The DuckDB type a value must have to be written into a column of this Iceberg type. */
export const DUCK_OF_ICEBERG: Record<IcebergType, string> = {
  boolean: 'BOOLEAN',
  int: 'INTEGER',
  long: 'BIGINT',
  float: 'FLOAT',
  double: 'DOUBLE',
  string: 'VARCHAR',
  binary: 'BLOB',
  date: 'DATE',
  timestamp: 'TIMESTAMP',
  timestamptz: 'TIMESTAMP WITH TIME ZONE',
};

/** Stream/sink schema field types to Iceberg types (JSON, structs and lists are kept as JSON text). */
export const ICEBERG_OF_FIELD: Record<string, IcebergType> = {
  int32: 'int',
  int64: 'long',
  float32: 'float',
  float64: 'double',
  bool: 'boolean',
  string: 'string',
  binary: 'string',
  timestamp: 'timestamp',
  json: 'string',
  struct: 'string',
  list: 'string',
};

// Avro schemas of manifests and manifest lists (Iceberg spec, format v2), with the spec's field ids.
const opt = (name: string, type: unknown, id: number) => ({ name, type: ['null', type], default: null, 'field-id': id });
const req = (name: string, type: unknown, id: number) => ({ name, type, 'field-id': id });
const MANIFEST_ENTRY = {
  type: 'record',
  name: 'manifest_entry',
  fields: [
    req('status', 'int', 0),
    opt('snapshot_id', 'long', 1),
    opt('sequence_number', 'long', 3),
    opt('file_sequence_number', 'long', 4),
    req(
      'data_file',
      {
        type: 'record',
        name: 'r2',
        fields: [
          req('content', 'int', 134),
          req('file_path', 'string', 100),
          req('file_format', 'string', 101),
          req('partition', { type: 'record', name: 'r102', fields: [] }, 102),
          req('record_count', 'long', 103),
          req('file_size_in_bytes', 'long', 104),
          opt('split_offsets', { type: 'array', items: 'long', 'element-id': 133 }, 132),
          opt('sort_order_id', 'int', 140),
        ],
      },
      2,
    ),
  ],
};
const MANIFEST_FILE = {
  type: 'record',
  name: 'manifest_file',
  fields: [
    req('manifest_path', 'string', 500),
    req('manifest_length', 'long', 501),
    req('partition_spec_id', 'int', 502),
    req('content', 'int', 517),
    req('sequence_number', 'long', 515),
    req('min_sequence_number', 'long', 516),
    req('added_snapshot_id', 'long', 503),
    req('added_files_count', 'int', 504),
    req('existing_files_count', 'int', 505),
    req('deleted_files_count', 'int', 506),
    req('added_rows_count', 'long', 512),
    req('existing_rows_count', 'long', 513),
    req('deleted_rows_count', 'long', 514),
    opt('partitions', { type: 'array', items: { type: 'record', name: 'r508', fields: [req('contains_null', 'boolean', 509), opt('contains_nan', 'boolean', 518), opt('lower_bound', 'bytes', 510), opt('upper_bound', 'bytes', 511)] }, 'element-id': 508 }, 507),
  ],
};
interface ManifestFileEntry {
  manifest_path: string;
  manifest_length: number;
  partition_spec_id: number;
  content: number;
  sequence_number: number;
  min_sequence_number: number;
  added_snapshot_id: number;
  added_files_count: number;
  existing_files_count: number;
  deleted_files_count: number;
  added_rows_count: number;
  existing_rows_count: number;
  deleted_rows_count: number;
  partitions: null;
}

/** Writes an Avro object container file durably (temporary name, sync, rename). */
async function writeAvro(path: string, schema: object, records: object[], metadata: Record<string, string>): Promise<number> {
  const meta: Record<string, Buffer> = {};
  for (const [k, v] of Object.entries(metadata)) meta[k] = Buffer.from(v);
  // `metadata` is a BlockEncoder option its type declarations leave out.
  const options = { metadata: meta, codec: 'deflate' } as unknown as ConstructorParameters<typeof avro.streams.BlockEncoder>[1];
  const encoder = new avro.streams.BlockEncoder(schema as avro.Schema, options);
  const chunks: Buffer[] = [];
  encoder.on('data', (b: Buffer) => chunks.push(b));
  const done = new Promise<void>((resolve, reject) => {
    encoder.on('end', resolve);
    encoder.on('error', reject);
  });
  for (const r of records) encoder.write(r);
  encoder.end();
  await done;
  const bytes = Buffer.concat(chunks);
  await replaceDurably(path, bytes);
  return bytes.length;
}

/** Creates `path` with `bytes` only if it does not exist yet (false when it does). */
async function createExclusively(path: string, bytes: string): Promise<boolean> {
  const tmp = `${path}.${process.pid}.${randomUUID()}.tmp`;
  await writeSynced(tmp, bytes);
  try {
    await link(tmp, path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  } finally {
    await unlink(tmp).catch(() => undefined);
  }
}

/** Random positive ids that survive JSON and Avro longs in JavaScript (below 2^53). */
function snapshotId(): number {
  return Math.floor(Math.random() * (Number.MAX_SAFE_INTEGER - 1)) + 1;
}

const queues = new Map<string, Promise<unknown>>();
/** Runs `fn` after every earlier commit to the same table in this process. */
function queued<T>(dir: string, fn: () => Promise<T>): Promise<T> {
  const prev = queues.get(dir) ?? Promise.resolve();
  const next = prev.then(fn, fn);
  const settled = next.catch(() => undefined);
  queues.set(dir, settled);
  void settled.then(() => {
    if (queues.get(dir) === settled) queues.delete(dir);
  });
  return next;
}

export interface DataFile {
  /** Absolute path of the finished Parquet file (inside the table's `data/`). */
  path: string;
  records: number;
  /** Column names and DuckDB types of the file. */
  columns: { name: string; duckType: string }[];
}

export class IcebergTable {
  readonly metadataDir: string;
  readonly dataDir: string;

  constructor(readonly dir: string) {
    this.metadataDir = join(dir, 'metadata');
    this.dataDir = join(dir, 'data');
  }

  get location(): string {
    return pathToFileURL(this.dir).href;
  }

  exists(): boolean {
    return this.currentVersion() > 0;
  }

  /** The current metadata version (0 when the table does not exist). */
  currentVersion(): number {
    let v = 0;
    try {
      v = Number(readFileSync(join(this.metadataDir, 'version-hint.text'), 'utf8').trim()) || 0;
    } catch {
      // No hint yet: a crash right after the first version was written.
    }
    // A crash after a version was linked but before the hint moved leaves a newer file: use it.
    while (existsSync(this.metadataPath(v + 1))) v++;
    return v;
  }

  metadataPath(version: number): string {
    return join(this.metadataDir, `v${version}.metadata.json`);
  }

  metadata(): { version: number; metadata: TableMetadata; location: string } {
    const version = this.currentVersion();
    if (version === 0) throw new Error(`no Iceberg table at ${this.dir}`);
    const path = this.metadataPath(version);
    return { version, metadata: JSON.parse(readFileSync(path, 'utf8')) as TableMetadata, location: pathToFileURL(path).href };
  }

  /** Creates the table (version 1) with these columns (all optional). False when it exists. */
  async create(columns: { name: string; type: IcebergType }[], properties: Record<string, string> = {}): Promise<boolean> {
    return queued(this.dir, async () => {
      if (this.currentVersion() > 0) return false;
      mkdirSync(this.metadataDir, { recursive: true });
      mkdirSync(this.dataDir, { recursive: true });
      const now = Date.now();
      const fields = columns.map((c, i) => ({ id: i + 1, name: c.name, required: false, type: c.type }));
      const md: TableMetadata = {
        'format-version': 2,
        'table-uuid': randomUUID(),
        location: this.location,
        'last-sequence-number': 0,
        'last-updated-ms': now,
        'last-column-id': fields.length,
        'current-schema-id': 0,
        schemas: [{ type: 'struct', 'schema-id': 0, fields }],
        'default-spec-id': 0,
        'partition-specs': [{ 'spec-id': 0, fields: [] }],
        'last-partition-id': 999,
        'default-sort-order-id': 0,
        'sort-orders': [{ 'order-id': 0, fields: [] }],
        properties: { 'write.format.default': 'parquet', ...properties, 'schema.name-mapping.default': nameMapping(fields) },
        'current-snapshot-id': -1,
        refs: {},
        snapshots: [],
        'snapshot-log': [],
        'metadata-log': [],
      };
      if (!(await createExclusively(this.metadataPath(1), JSON.stringify(md, null, 2)))) return false;
      await replaceDurably(join(this.metadataDir, 'version-hint.text'), '1');
      return true;
    });
  }

  /**
   * The current schema, first grown by the columns it lacks (a schema-only metadata version), so
   * a data file can be written with the table's field ids before it is committed.
   */
  async ensureColumns(columns: { name: string; type: IcebergType }[]): Promise<IcebergSchema> {
    return queued(this.dir, async () => {
      for (;;) {
        const { version, metadata: md, location } = this.metadata();
        const next: TableMetadata = structuredClone(md);
        if (!evolve(next, columns)) return currentSchema(md);
        next['last-updated-ms'] = Date.now();
        next['metadata-log'].push({ 'timestamp-ms': md['last-updated-ms'], 'metadata-file': location });
        if (await createExclusively(this.metadataPath(version + 1), JSON.stringify(next, null, 2))) {
          await replaceDurably(join(this.metadataDir, 'version-hint.text'), String(version + 1));
          return currentSchema(next);
        }
      }
    });
  }

  /** Commits one finished data file as an append snapshot; a file already committed is skipped. */
  async append(file: DataFile): Promise<{ snapshotId: number; committed: boolean }> {
    return queued(this.dir, async () => {
      for (;;) {
        const { version, metadata: md, location: mdLocation } = this.metadata();
        const fileUrl = pathToFileURL(file.path).href;
        const already = md.snapshots.find((s) => s.summary['outpost.data-file'] === fileUrl);
        if (already) return { snapshotId: already['snapshot-id'], committed: false };

        const now = Date.now();
        const next: TableMetadata = structuredClone(md);
        evolve(
          next,
          file.columns.map((c) => ({ name: c.name, type: icebergTypeOfDuck(c.duckType) })),
        );

        const id = snapshotId();
        const seq = md['last-sequence-number'] + 1;
        const parent = md['current-snapshot-id'] > 0 ? md['current-snapshot-id'] : undefined;
        const size = (await stat(file.path)).size;
        const tag = randomUUID();
        const manifestPath = join(this.metadataDir, `${tag}-m0.avro`);
        const schemaNow = currentSchema(next);
        const manifestLength = await writeAvro(
          manifestPath,
          MANIFEST_ENTRY,
          [{ status: 1, snapshot_id: id, sequence_number: seq, file_sequence_number: seq, data_file: { content: 0, file_path: fileUrl, file_format: 'PARQUET', partition: {}, record_count: file.records, file_size_in_bytes: size, split_offsets: null, sort_order_id: null } }],
          { schema: JSON.stringify(schemaNow), 'schema-id': String(schemaNow['schema-id']), 'partition-spec': '[]', 'partition-spec-id': '0', 'format-version': '2', content: 'data' },
        );
        const manifests: ManifestFileEntry[] = parent ? await this.manifestsOf(md, parent) : [];
        manifests.push({
          manifest_path: pathToFileURL(manifestPath).href,
          manifest_length: manifestLength,
          partition_spec_id: 0,
          content: 0,
          sequence_number: seq,
          min_sequence_number: seq,
          added_snapshot_id: id,
          added_files_count: 1,
          existing_files_count: 0,
          deleted_files_count: 0,
          added_rows_count: file.records,
          existing_rows_count: 0,
          deleted_rows_count: 0,
          partitions: null,
        });
        const listPath = join(this.metadataDir, `snap-${id}-1-${tag}.avro`);
        await writeAvro(listPath, MANIFEST_FILE, manifests, { 'snapshot-id': String(id), 'parent-snapshot-id': parent ? String(parent) : 'null', 'sequence-number': String(seq), 'format-version': '2' });

        const prevSummary = parent ? md.snapshots.find((s) => s['snapshot-id'] === parent)?.summary : undefined;
        const total = (k: string, add: number) => String(Number(prevSummary?.[k] ?? 0) + add);
        next.snapshots.push({
          'snapshot-id': id,
          ...(parent ? { 'parent-snapshot-id': parent } : {}),
          'sequence-number': seq,
          'timestamp-ms': now,
          'manifest-list': pathToFileURL(listPath).href,
          summary: {
            operation: 'append',
            'added-data-files': '1',
            'added-records': String(file.records),
            'added-files-size': String(size),
            'total-data-files': total('total-data-files', 1),
            'total-records': total('total-records', file.records),
            'total-files-size': total('total-files-size', size),
            'total-delete-files': '0',
            'total-position-deletes': '0',
            'total-equality-deletes': '0',
            'outpost.data-file': fileUrl,
          },
          'schema-id': next['current-schema-id'],
        });
        next['current-snapshot-id'] = id;
        next.refs = { ...next.refs, main: { 'snapshot-id': id, type: 'branch' } };
        next['last-sequence-number'] = seq;
        next['last-updated-ms'] = now;
        next['snapshot-log'].push({ 'timestamp-ms': now, 'snapshot-id': id });
        next['metadata-log'].push({ 'timestamp-ms': md['last-updated-ms'], 'metadata-file': mdLocation });

        if (await createExclusively(this.metadataPath(version + 1), JSON.stringify(next, null, 2))) {
          await replaceDurably(join(this.metadataDir, 'version-hint.text'), String(version + 1));
          return { snapshotId: id, committed: true };
        }
        // Another writer took this version: drop our files and try on top of its commit.
        rmSync(manifestPath, { force: true });
        rmSync(listPath, { force: true });
      }
    });
  }

  /** The manifest list of a snapshot, decoded. */
  private async manifestsOf(md: TableMetadata, id: number): Promise<ManifestFileEntry[]> {
    const snap = md.snapshots.find((s) => s['snapshot-id'] === id);
    if (!snap) return [];
    const out: ManifestFileEntry[] = [];
    await new Promise<void>((resolve, reject) => {
      avro
        .createFileDecoder(fileURLToPath(snap['manifest-list']))
        .on('data', (r: ManifestFileEntry) => out.push({ ...r, partitions: null }))
        .on('end', () => resolve())
        .on('error', reject);
    });
    return out;
  }
}

function currentSchema(md: TableMetadata): IcebergSchema {
  return md.schemas.find((s) => s['schema-id'] === md['current-schema-id']) ?? md.schemas[0];
}

/** Adds the columns the current schema lacks as a new schema (a column keeps its first type). */
function evolve(md: TableMetadata, columns: { name: string; type: IcebergType }[]): boolean {
  const current = currentSchema(md);
  const known = new Set(current.fields.map((f) => f.name));
  const added = columns.filter((c, i) => !known.has(c.name) && columns.findIndex((o) => o.name === c.name) === i);
  if (added.length === 0) return false;
  const fields = [...current.fields, ...added.map((c, i) => ({ id: md['last-column-id'] + i + 1, name: c.name, required: false, type: c.type }))];
  const schemaId = Math.max(...md.schemas.map((s) => s['schema-id'])) + 1;
  md.schemas.push({ type: 'struct', 'schema-id': schemaId, fields });
  md['current-schema-id'] = schemaId;
  md['last-column-id'] += added.length;
  md.properties['schema.name-mapping.default'] = nameMapping(fields);
  return true;
}

function nameMapping(fields: IcebergField[]): string {
  return JSON.stringify(fields.map((f) => ({ 'field-id': f.id, names: [f.name] })));
}

/** Namespaces and tables of a bucket's catalog, from its directory tree. */
export class Catalog {
  constructor(readonly root: string) {}

  namespaces(): string[] {
    if (!existsSync(this.root)) return [];
    return readdirSync(this.root, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => d.name)
      .sort();
  }

  namespaceDir(ns: string): string {
    return join(this.root, ns);
  }

  hasNamespace(ns: string): boolean {
    return existsSync(this.namespaceDir(ns));
  }

  createNamespace(ns: string): boolean {
    if (this.hasNamespace(ns)) return false;
    mkdirSync(this.namespaceDir(ns), { recursive: true });
    return true;
  }

  tables(ns: string): string[] {
    if (!this.hasNamespace(ns)) return [];
    return readdirSync(this.namespaceDir(ns), { withFileTypes: true })
      .filter((d) => d.isDirectory() && !d.name.includes('.dropped-') && this.table(ns, d.name).exists())
      .map((d) => d.name)
      .sort();
  }

  table(ns: string, name: string): IcebergTable {
    return new IcebergTable(join(this.root, ns, name));
  }

  dropNamespace(ns: string): void {
    rmSync(this.namespaceDir(ns), { recursive: true, force: true });
  }

  dropTable(ns: string, name: string, purge: boolean): void {
    const t = this.table(ns, name);
    // Without purge the files stay on disk under another name, as catalogs keep data; the name is free.
    if (purge) rmSync(t.dir, { recursive: true, force: true });
    else renameSync(t.dir, `${t.dir}.dropped-${Date.now()}`);
  }
}
