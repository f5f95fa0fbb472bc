/**
 * One running pipeline: it reads its stream's log from its checkpoint in micro-batches, applies
 * the compiled SQL to each event, stages the rows of the sink's open file, and finishes the file
 * when the rolling policy says so (size, interval since the file opened, inactivity).
 *
 * Delivery is at-least-once into the log and exactly-once into finished files. Each finished file
 * has a sequence number and covers a range of the log ending at a record boundary; the
 * checkpoint (`<data dir>/pipelines/state/<pipeline id>.json`) is written in two steps around the
 * file: first "pending: file N covers the log up to offset X", then the file (written under a
 * temporary name, synced, renamed), then "done: next file N+1 starts at X". After a crash, a
 * pending file that exists is taken as done; one that does not is written again from the same
 * offset. The staged rows of the open file are not kept: they are read again from the log.
 *
 * Files: `<data dir>/pipelines/buckets/<account>/<bucket>/<path>/<time partition>/<name>` with
 * `.json` (newline-delimited JSON) or `.parquet` (written by DuckDB from the staged rows with the
 * columns' types and the sink's compression).
 *
 * With `--pipelines-s3-endpoint`, a finished file is also uploaded (`s3.ts`) to
 * `{endpoint}/{bucket}/{path}/{time partition}/{name}` before the checkpoint says done: the
 * checkpoint stays pending and the upload is retried with backoff (the runner reads no further)
 * until the endpoint answers 2xx. After a restart a pending file that exists locally is uploaded
 * again under the same key (an overwrite). The local file stays; queries read it.
 */
import { closeSync, createReadStream, createWriteStream, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { copyFile, rename } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import { dirname, join } from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import type { DuckDBConnection } from '@duckdb/node-api';
import type { Logger } from '../../core/log.ts';
import { replaceDurably, syncFile } from './durable.ts';
import { Catalog, DUCK_OF_ICEBERG, icebergTypeOfDuck, type IcebergTable } from './iceberg.ts';
import { objectKey, uploadFile, UploadError, type S3Target } from './s3.ts';
import type { StreamLog } from './log.ts';
import type { StoredSink } from './schemas.ts';
import type { CompiledPipeline, ValueType } from './sql.ts';
import { KIND } from './transform.ts';
import type { Transformer } from './transform-thread.ts';

export const DEFAULT_ROLLING = { file_size_bytes: 100 * 1024 * 1024, interval_seconds: 300, inactivity_seconds: 60 };
export const DEFAULT_TIME_PATTERN = 'year=%Y/month=%m/day=%d';
const READ_BYTES = 4 * 1024 * 1024;

interface Checkpoint {
  /** Log offset the next file starts at. */
  offset: number;
  seq: number;
  pending?: { seq: number; file: string; to: number; rows: number } | null;
}

export interface RunnerOptions {
  accountId: string;
  pipelineId: string;
  compiled: CompiledPipeline;
  sink: StoredSink;
  log: StreamLog;
  duck: () => Promise<DuckDBConnection>;
  stateDir: string;
  bucketRoot: string;
  now: () => Date;
  logger: Logger;
  tickMs: number;
  /** Parses, applies the SQL and serialises records (on the transform thread). */
  transform: Transformer;
  /** Called after the checkpoint moved forward (the log before it may be compacted). */
  onCheckpoint?: () => void;
  /** Upload finished files to this S3-compatible endpoint too. */
  s3?: S3Target;
  /** First retry delay of a failed upload, ms (doubles up to 30 s). */
  uploadRetryMs?: number;
}

/** The folder of a bucket's Iceberg catalog, under the bucket's directory. */
export const CATALOG_DIR = '__r2_data_catalog';

/** The directory of a bucket's Iceberg catalog: one folder per namespace, one per table. */
export function catalogRoot(bucketRoot: string, accountId: string, bucket: string): string {
  return join(bucketRoot, accountId, bucket, CATALOG_DIR);
}

/** The Iceberg table a catalog sink writes (undefined for an r2 sink). */
export function sinkTable(bucketRoot: string, accountId: string, sink: StoredSink): IcebergTable | undefined {
  if (sink.type !== 'r2_data_catalog') return undefined;
  return new Catalog(catalogRoot(bucketRoot, accountId, sink.config.bucket)).table(sink.config.namespace ?? 'default', sink.config.table_name ?? sink.name);
}

/** The directory a sink's files live under (bucket + path, or its table's data folder), for queries. */
export function sinkDir(bucketRoot: string, accountId: string, sink: StoredSink): string {
  const table = sinkTable(bucketRoot, accountId, sink);
  if (table) return table.dataDir;
  return join(bucketRoot, accountId, sink.config.bucket, ...(sink.config.path ?? '').split('/').filter(Boolean));
}

/** Parquet files need a type for columns the SQL leaves untyped: learned from their values. */
export function needsKinds(sink: StoredSink, compiled: CompiledPipeline): boolean {
  return sink.format.type === 'parquet' && (compiled.passthrough || compiled.columns.some((c) => c.type === undefined));
}

export function sinkExtension(sink: StoredSink): string {
  if (sink.format.type === 'parquet') return '.parquet';
  return sink.json_compression === 'gzip' ? '.json.gz' : '.json';
}

export function timePartition(pattern: string, at: Date): string {
  const p2 = (n: number) => String(n).padStart(2, '0');
  return pattern.replace(/%([YmdHMS%])/g, (_, k: string) => {
    switch (k) {
      case 'Y': return String(at.getUTCFullYear());
      case 'm': return p2(at.getUTCMonth() + 1);
      case 'd': return p2(at.getUTCDate());
      case 'H': return p2(at.getUTCHours());
      case 'M': return p2(at.getUTCMinutes());
      case 'S': return p2(at.getUTCSeconds());
      default: return '%';
    }
  });
}

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
function ulid(ms: number): string {
  let t = '';
  let n = ms;
  for (let i = 0; i < 10; i++) {
    t = CROCKFORD[n % 32] + t;
    n = Math.floor(n / 32);
  }
  const r = randomBytes(16);
  let rand = '';
  for (let i = 0; i < 16; i++) rand += CROCKFORD[r[i] % 32];
  return t + rand;
}
function uuidV7(ms: number): string {
  const b = randomBytes(16);
  const hex = ms.toString(16).padStart(12, '0');
  for (let i = 0; i < 6; i++) b[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  b[6] = (b[6] & 0x0f) | 0x70;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const DUCK_TYPE: Record<string, string> = {
  string: 'VARCHAR',
  int32: 'INTEGER',
  int64: 'BIGINT',
  float32: 'FLOAT',
  float64: 'DOUBLE',
  bool: 'BOOLEAN',
  timestamp: 'TIMESTAMP',
  json: 'JSON',
  binary: 'VARCHAR',
  struct: 'JSON',
  list: 'JSON',
};

const sqlString = (s: string) => `'${s.replace(/'/g, "''")}'`;
const sqlIdent = (s: string) => `"${s.replace(/"/g, '""')}"`;


export class PipelineRunner {
  private cp: Checkpoint = { offset: 0, seq: 1 };
  private readOffset = 0;
  private staging?: { fd: number; bytes: number; rows: number; openedAt: number; lastAt: number; end: number; kinds: Map<string, number> };
  private running = false;
  private again = false;
  private stopped = false;
  private timer?: NodeJS.Timeout;
  private unwatch?: () => void;
  private current: Promise<void> = Promise.resolve();
  /** Events read, rows written to finished files, events dropped (unparseable). */
  readonly stats = { events: 0, rows: 0, files: 0, dropped: 0, lastError: undefined as string | undefined };
  private readonly statePath: string;
  private readonly stagingPath: string;
  private readonly rolling: typeof DEFAULT_ROLLING & { max_rows?: number };
  /** Parquet files need a type for columns the SQL leaves untyped: learned from their values. */
  private readonly inferTypes: boolean;
  /** The Iceberg table of a catalog sink: each finished file is committed to it. */
  private readonly table?: IcebergTable;

  constructor(private readonly o: RunnerOptions) {
    this.statePath = join(o.stateDir, `${o.pipelineId}.json`);
    this.stagingPath = join(o.stateDir, `${o.pipelineId}.staging.ndjson`);
    this.rolling = { ...DEFAULT_ROLLING, ...(o.sink.config.rolling_policy ?? {}) };
    this.inferTypes = needsKinds(o.sink, o.compiled);
    this.table = sinkTable(o.bucketRoot, o.accountId, o.sink);
  }

  async start(): Promise<void> {
    mkdirSync(this.o.stateDir, { recursive: true });
    if (existsSync(this.statePath)) {
      this.cp = JSON.parse(readFileSync(this.statePath, 'utf8')) as Checkpoint;
    } else {
      this.cp = { offset: await this.o.log.start(this.o.compiled.streamId), seq: 1 };
      await replaceDurably(this.statePath, JSON.stringify(this.cp));
    }
    if (this.cp.pending) {
      const p = this.cp.pending;
      if (existsSync(join(sinkDir(this.o.bucketRoot, this.o.accountId, this.o.sink), p.file))) {
        // The file may not have been uploaded or committed to its table: the first step completes it.
      } else {
        this.cp = { offset: this.cp.offset, seq: p.seq, pending: null };
      }
      await replaceDurably(this.statePath, JSON.stringify(this.cp));
    }
    this.readOffset = this.cp.pending ? this.cp.pending.to : this.cp.offset;
    this.unwatch = this.o.log.watch(this.o.compiled.streamId, () => this.kick());
    this.timer = setInterval(() => this.kick(), this.o.tickMs);
    this.timer.unref();
    this.kick();
  }

  /** Runs a step now, or once more after the running one. */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    this.current = (async () => {
      try {
        do {
          this.again = false;
          await this.step();
        } while (this.again && !this.stopped);
        this.stats.lastError = undefined;
      } catch (err) {
        this.stats.lastError = String((err as Error).message ?? err);
        this.o.logger.error({ err, pipeline: this.o.pipelineId }, 'pipeline step failed; it retries on the next tick');
      } finally {
        this.running = false;
      }
    })();
  }

  /** Waits for the step in progress (tests and shutdown). */
  idle(): Promise<void> {
    return this.current;
  }

  private async step(): Promise<void> {
    if (this.cp.pending && !(await this.deliver())) return;
    for (;;) {
      if (this.stopped) return;
      const records = await this.o.log.read(this.o.compiled.streamId, this.readOffset, READ_BYTES);
      if (records.length === 0) break;
      // Parsing, SQL and serialisation happen off this thread (ingestion shares it).
      const out = await this.o.transform(records.map((r) => r.payload));
      if (this.stopped) return;
      const text = Buffer.from(out.text.buffer, out.text.byteOffset, out.text.byteLength);
      let start = 0;
      for (let k = 0; k < records.length; k++) {
        const r = out.records[k];
        this.stats.events += r.events;
        this.stats.dropped += r.dropped;
        this.readOffset = records[k].next;
        if (r.rows > 0) this.stage(text.subarray(start, r.end), r.rows, records[k].next, r.kinds);
        else if (this.staging) this.staging.end = records[k].next;
        start = r.end;
        if (this.staging && (this.staging.bytes >= this.rolling.file_size_bytes || this.staging.rows >= (this.rolling.max_rows ?? Infinity))) await this.roll();
      }
      // Under steady load the interval still closes files.
      if (this.staging && this.o.now().getTime() - this.staging.openedAt >= this.rolling.interval_seconds * 1000) await this.roll();
    }
    const now = this.o.now().getTime();
    const s = this.staging;
    if (s && (now - s.openedAt >= this.rolling.interval_seconds * 1000 || now - s.lastAt >= this.rolling.inactivity_seconds * 1000)) await this.roll();
    else if (!s && this.readOffset > this.cp.offset) {
      // Everything read was filtered out: move the checkpoint so a restart does not read it again.
      this.cp = { offset: this.readOffset, seq: this.cp.seq, pending: null };
      await replaceDurably(this.statePath, JSON.stringify(this.cp));
      this.o.onCheckpoint?.();
    }
  }

  private stage(text: Buffer, rows: number, end: number, kinds: Record<string, number> | undefined): void {
    const now = this.o.now().getTime();
    if (!this.staging) this.staging = { fd: openSync(this.stagingPath, 'w'), bytes: 0, rows: 0, openedAt: now, lastAt: now, end, kinds: new Map() };
    const s = this.staging;
    let off = 0;
    while (off < text.length) off += writeSync(s.fd, text, off);
    s.bytes += text.length;
    s.rows += rows;
    s.lastAt = now;
    s.end = end;
    if (kinds && this.inferTypes) for (const k in kinds) s.kinds.set(k, (s.kinds.get(k) ?? 0) | kinds[k]);
  }

  private fileName(seq: number, at: Date): string {
    const naming = this.o.sink.config.file_naming ?? {};
    const prefix = naming.prefix ?? '';
    const suffix = naming.suffix ?? '';
    let core: string;
    switch (naming.strategy ?? 'serial') {
      case 'uuid':
        core = randomUUID();
        break;
      case 'uuid_v7':
        core = uuidV7(at.getTime());
        break;
      case 'ulid':
        core = ulid(at.getTime());
        break;
      default:
        core = `${String(seq).padStart(10, '0')}-${this.o.pipelineId.slice(0, 8)}`;
    }
    return `${prefix}${core}${suffix}${sinkExtension(this.o.sink)}`;
  }

  /** Finishes the open file: checkpoint pending, file written and synced, checkpoint done. */
  private async roll(): Promise<void> {
    const s = this.staging;
    if (!s) return;
    // The staged rows need no sync: after a crash they are read again from the log.
    closeSync(s.fd);
    this.staging = undefined;
    const seq = this.cp.seq;
    const opened = new Date(s.openedAt);
    // A table's data files need no folders by time: the table's metadata lists them.
    const rel = this.table ? this.fileName(seq, opened) : join(timePartition(this.o.sink.config.partitioning?.time_pattern ?? DEFAULT_TIME_PATTERN, opened), this.fileName(seq, opened));
    const root = sinkDir(this.o.bucketRoot, this.o.accountId, this.o.sink);
    const target = join(root, rel);
    this.cp = { offset: this.cp.offset, seq, pending: { seq, file: rel, to: s.end, rows: s.rows } };
    await replaceDurably(this.statePath, JSON.stringify(this.cp));
    mkdirSync(dirname(target), { recursive: true });
    const tmp = `${target}.tmp`;
    if (this.o.sink.format.type === 'parquet') await this.writeParquet(tmp, s.kinds);
    else if (this.o.sink.json_compression === 'gzip') await pipeline(createReadStream(this.stagingPath), createGzip(), createWriteStream(tmp));
    else await copyFile(this.stagingPath, tmp);
    await syncFile(tmp);
    await rename(tmp, target);
    await syncFile(dirname(target));
    rmSync(this.stagingPath, { force: true });
    await this.deliver();
  }

  private sleeping?: { timer: NodeJS.Timeout; done: () => void };
  /** Aborts an upload in flight when the runner stops. */
  private readonly stopUploads = new AbortController();

  /**
   * Completes the pending file: uploads it when an endpoint is configured (retrying with backoff
   * until it answers 2xx or the runner stops), then writes the checkpoint "done". False when
   * stopped before that.
   */
  private async deliver(): Promise<boolean> {
    const p = this.cp.pending;
    if (!p) return true;
    if (this.table) await this.commitToTable(join(this.table.dataDir, p.file), p.rows);
    else if (this.o.s3) {
      const file = join(sinkDir(this.o.bucketRoot, this.o.accountId, this.o.sink), p.file);
      const key = objectKey(this.o.sink.config.path, p.file);
      let delay = this.o.uploadRetryMs ?? 500;
      for (let attempt = 1; ; attempt++) {
        if (this.stopped) return false;
        try {
          await uploadFile(this.o.s3, this.o.sink.config.bucket, key, file, this.o.sink.config.credentials, this.stopUploads.signal);
          break;
        } catch (err) {
          if (this.stopped) return false;
          const e = err instanceof UploadError ? err : new UploadError(String((err as Error).message ?? err), undefined, undefined, 'see the error');
          this.stats.lastError = `${e.message}; ${e.fix}`;
          this.o.logger.warn(
            { pipeline: this.o.pipelineId, sink: this.o.sink.id, bucket: this.o.sink.config.bucket, key, attempt, status: e.status, code: e.code, fix: e.fix, retryInMs: delay },
            `pipeline file upload failed (${e.message}); ${e.fix}; retrying`,
          );
          await new Promise<void>((done) => {
            this.sleeping = { timer: setTimeout(done, delay), done };
          });
          this.sleeping = undefined;
          delay = Math.min(delay * 2, 30_000);
        }
      }
      this.stats.lastError = undefined;
    }
    this.cp = { offset: p.to, seq: p.seq + 1, pending: null };
    await replaceDurably(this.statePath, JSON.stringify(this.cp));
    this.o.onCheckpoint?.();
    this.stats.rows += p.rows;
    this.stats.files += 1;
    this.o.logger.debug({ pipeline: this.o.pipelineId, file: p.file, rows: p.rows }, 'pipeline file finished');
    return true;
  }

  /** Adds a finished file to the sink's Iceberg table (a no-op when it is there already). */
  private async commitToTable(path: string, rows: number): Promise<void> {
    const conn = await this.o.duck();
    let columns: { name: string; duckType: string }[];
    try {
      const r = await conn.runAndReadAll(`DESCRIBE SELECT * FROM read_parquet(${sqlString(path)}, hive_partitioning = false)`);
      columns = r.getRowObjectsJS().map((c) => ({ name: String(c.column_name), duckType: String(c.column_type) }));
    } finally {
      conn.closeSync();
    }
    const { snapshotId, committed } = await this.table!.append({ path, records: rows, columns });
    this.o.logger.debug({ pipeline: this.o.pipelineId, table: this.table!.dir, snapshotId, committed }, 'pipeline file committed to its Iceberg table');
  }

  private async writeParquet(out: string, kinds: Map<string, number>): Promise<void> {
    const fmt = this.o.sink.format.type === 'parquet' ? this.o.sink.format : undefined;
    const compression = fmt?.compression ?? 'zstd';
    const duckCompression = compression === 'lz4' ? 'lz4_raw' : compression;
    const inferred = (name: string): string => {
      const k = kinds.get(name) ?? 0;
      if (k === KIND.int) return 'BIGINT';
      if (k !== 0 && (k & ~(KIND.int | KIND.float)) === 0) return 'DOUBLE';
      if (k === KIND.boolean) return 'BOOLEAN';
      if (k === KIND.object) return 'JSON';
      return 'VARCHAR';
    };
    let source: string;
    if (this.o.compiled.passthrough) {
      const cols = [...kinds.keys()].map((k) => `${sqlString(k)}: ${sqlString(inferred(k))}`).join(', ');
      source = `read_json(${sqlString(this.stagingPath)}, format = 'newline_delimited'${cols ? `, columns = {${cols}}` : ''})`;
    } else {
      const cols = this.o.compiled.columns.map((c) => `${sqlString(c.name)}: ${sqlString(c.type ? DUCK_TYPE[c.type as string] : inferred(c.name))}`).join(', ');
      source = `read_json(${sqlString(this.stagingPath)}, format = 'newline_delimited', columns = {${cols}})`;
    }
    let order = this.o.compiled.passthrough ? '*' : this.o.compiled.columns.map((c) => sqlIdent(c.name)).join(', ');
    let icebergOptions = '';
    if (this.table) {
      // The file is written in the table's current schema (grown first by new columns), with its
      // field ids: a column keeps its first type, later values are cast to it (NULL where they do
      // not fit), and columns this batch lacks are NULL.
      const typeOf = this.o.compiled.passthrough
        ? (n: string) => inferred(n)
        : (n: string) => {
            const c = this.o.compiled.columns.find((x) => x.name === n);
            return c?.type ? DUCK_TYPE[c.type as string] : inferred(n);
          };
      const names = this.o.compiled.passthrough ? [...kinds.keys()] : this.o.compiled.columns.map((c) => c.name);
      const schema = await this.table.ensureColumns(names.map((n) => ({ name: n, type: icebergTypeOfDuck(typeOf(n)) })));
      if (schema.fields.length > 0) {
        order = schema.fields.map((f) => `${names.includes(f.name) ? 'TRY_CAST' : 'CAST'}(${names.includes(f.name) ? sqlIdent(f.name) : 'NULL'} AS ${DUCK_OF_ICEBERG[f.type]}) AS ${sqlIdent(f.name)}`).join(', ');
        icebergOptions = `, FIELD_IDS {${schema.fields.map((f) => `${sqlIdent(f.name)}: ${f.id}`).join(', ')}}, KV_METADATA {'iceberg.schema': ${sqlString(JSON.stringify(schema))}}`;
      }
    }
    const rowGroup = fmt?.row_group_bytes ? `, ROW_GROUP_SIZE_BYTES ${Math.max(1024, fmt.row_group_bytes)}` : '';
    const conn = await this.o.duck();
    try {
      await conn.run(`COPY (SELECT ${order} FROM ${source}) TO ${sqlString(out)} (FORMAT parquet, COMPRESSION ${sqlString(duckCompression)}${rowGroup}${icebergOptions})`);
    } finally {
      conn.closeSync();
    }
  }

  /** Stops reading; the open file's rows stay in the log and are read again on the next start. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.stopUploads.abort();
    if (this.sleeping) {
      clearTimeout(this.sleeping.timer);
      this.sleeping.done();
    }
    this.unwatch?.();
    await this.current;
    if (this.staging) {
      closeSync(this.staging.fd);
      this.staging = undefined;
    }
  }

  /** Flushes the open file now (graceful stop, tests). */
  async flush(): Promise<void> {
    await this.current;
    if (!this.stopped) {
      this.running = true;
      try {
        await this.step();
        await this.roll();
      } finally {
        this.running = false;
      }
    }
  }

  /** Forgets the pipeline's checkpoint (pipeline deleted). */
  removeState(): void {
    rmSync(this.statePath, { force: true });
    rmSync(this.stagingPath, { force: true });
  }

  checkpoint(): Readonly<Checkpoint> {
    return this.cp;
  }

  static columnsType(t: ValueType): string {
    return t ? DUCK_TYPE[t] : 'VARCHAR';
  }
}

