/**
 * The pipelines service: the stream log, ingestion (validation, per-stream throughput limit,
 * durable append), the running pipelines, and the catalog the SQL is checked against.
 */
import { join } from 'node:path';
import { readFileSync, rmSync } from 'node:fs';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import type { AreaContext } from '../../core/area.ts';
import { ApiError, CODES } from '../../core/errors.ts';
import { assertJsonDepth } from '../../core/json.ts';
import type { Logger } from '../../core/log.ts';
import { EventError, validateBatch } from './events.ts';
import type { StreamLog } from './log.ts';
import { needsKinds, PipelineRunner } from './runner.ts';
import { TransformThread } from './transform-thread.ts';
import { countEventArray } from './json-scan.ts';
import { decodeParquet, looksLikeParquet, ParquetBodyError } from './parquet-ingest.ts';
import type { StoredPipeline, StoredSink, StoredStream } from './schemas.ts';
import { compilePipeline, PipelineSqlError, type CompiledPipeline, type SqlCatalog } from './sql.ts';
import { pipelines, sinks, streams } from './store.ts';
import { pipelinesError } from './errors.ts';

export const MAX_REQUEST_BYTES = 1024 * 1024;
/** The decoded JSON of one Parquet body (it is logged as one record, like any batch). */
export const MAX_DECODED_JSON_BYTES = 8 * 1024 * 1024;
/** How long after a finished file the stream's log is compacted (one pass covers many files). */
const COMPACT_DELAY_MS = 200;

/** A token bucket of bytes per stream: `rate` bytes per second, one second of burst. */
class Throughput {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  constructor(
    private readonly rate: number,
    private readonly now: () => number,
  ) {}

  /** Takes `bytes`; returns 0, or the seconds to wait when the stream is over its rate. */
  take(streamId: string, bytes: number): number {
    const t = this.now();
    let b = this.buckets.get(streamId);
    if (!b) this.buckets.set(streamId, (b = { tokens: this.rate, at: t }));
    b.tokens = Math.min(this.rate, b.tokens + ((t - b.at) / 1000) * this.rate);
    b.at = t;
    if (b.tokens >= bytes || (b.tokens >= this.rate && bytes > this.rate)) {
      b.tokens -= bytes;
      return 0;
    }
    return Math.max(1, Math.ceil((bytes - b.tokens) / this.rate));
  }
}

export class PipelinesService {
  readonly runners = new Map<string, PipelineRunner>();
  private readonly throughput: Throughput;
  private duckInstance?: Promise<DuckDBInstance>;
  private readonly transforms: TransformThread;
  readonly stateDir: string;
  readonly bucketRoot: string;

  constructor(
    private readonly ctx: AreaContext,
    readonly log: StreamLog,
    private readonly logger: Logger,
  ) {
    this.transforms = new TransformThread(logger);
    this.throughput = new Throughput(ctx.config.pipelinesStreamRate, () => ctx.clock.now().getTime());
    this.stateDir = join(ctx.config.dataDir, 'pipelines', 'state');
    this.bucketRoot = join(ctx.config.dataDir, 'pipelines', 'buckets');
  }

  /** A DuckDB connection for writing Parquet (never sees user SQL). */
  async duck(): Promise<DuckDBConnection> {
    this.duckInstance ??= DuckDBInstance.create(':memory:', { autoinstall_known_extensions: 'false', autoload_known_extensions: 'false', threads: '2' });
    return (await this.duckInstance).connect();
  }

  /** Validates and durably appends a batch; throws ApiError (400/429) for the caller. */
  async ingest(stream: StoredStream, body: Buffer | unknown[], opts: { allowSingle: boolean; contentType?: string }): Promise<number> {
    if (Buffer.isBuffer(body) && looksLikeParquet(body, opts.contentType)) {
      if (stream.format.type === 'parquet') return this.ingestParquet(stream, body);
      if (body.subarray(0, 4).toString('latin1') === 'PAR1')
        throw pipelinesError('ingest_invalid', `The body is a Parquet file, and stream ${stream.name} takes JSON events (its format.type is json); send a JSON array of objects, or create a stream with format.type parquet`);
    }
    if (Buffer.isBuffer(body) && !(stream.schema?.fields && stream.schema.fields.length > 0)) {
      // An untyped stream only needs to know the body is an array of objects: check the bytes
      // without building them (the pipeline parses them once, on its own thread). Anything else
      // takes the ordinary path below, which says what is wrong.
      const n = countEventArray(body);
      if (n === 0) return 0;
      if (n > 0) {
        await this.admit(stream, body);
        return n;
      }
    }
    let parsed: unknown;
    let bytes: number;
    if (Buffer.isBuffer(body)) {
      bytes = body.length;
      // Events nested past the limit could not be written to a sink; refuse them now rather
      // than acknowledge them and drop them later.
      assertJsonDepth(body, 'the event batch');
      try {
        parsed = JSON.parse(body.toString('utf8'));
      } catch (err) {
        throw pipelinesError('ingest_invalid', `The body is not valid JSON: ${(err as Error).message}`);
      }
    } else {
      parsed = body;
      bytes = -1;
    }
    let events: unknown[];
    try {
      events = validateBatch(stream, parsed, opts);
    } catch (err) {
      if (err instanceof EventError) throw pipelinesError('ingest_invalid', err.message);
      throw err;
    }
    if (events.length === 0) return 0;
    const payload = Buffer.isBuffer(body) && Array.isArray(parsed) ? body : Buffer.from(JSON.stringify(events));
    await this.admit(stream, payload, bytes < 0 ? payload.length : bytes);
    return events.length;
  }

  /**
   * A Parquet file (stream format parquet): every row one event, validated like JSON events
   * (`row N: field …`), logged as a JSON array so delivery and SQL are the same as for JSON.
   */
  private async ingestParquet(stream: StoredStream, body: Buffer): Promise<number> {
    let rows: Record<string, unknown>[];
    try {
      rows = await decodeParquet(body);
    } catch (err) {
      if (err instanceof ParquetBodyError) throw pipelinesError('ingest_invalid', err.message);
      throw err;
    }
    try {
      validateBatch(stream, rows, { allowSingle: false, what: 'row' });
    } catch (err) {
      if (err instanceof EventError) throw pipelinesError('ingest_invalid', err.message);
      throw err;
    }
    if (rows.length === 0) return 0;
    const payload = Buffer.from(JSON.stringify(rows));
    const limit = Math.min(MAX_DECODED_JSON_BYTES, this.log.maxRecordBytes);
    if (payload.length > limit)
      throw new ApiError(413, [{ code: CODES.pipelines_ingest_too_large.code, message: `The Parquet file's ${rows.length} rows are ${payload.length} bytes as JSON, more than the ${limit} one request may add to the stream; send fewer rows per file` }]);
    // Nested values must be writable by every sink, as for JSON events.
    assertJsonDepth(payload, 'the Parquet rows');
    await this.admit(stream, payload, body.length, limit);
    return rows.length;
  }

  /** Size and throughput checks, then the durable append. */
  private async admit(stream: StoredStream, payload: Buffer, bytes = payload.length, maxBytes = MAX_REQUEST_BYTES): Promise<void> {
    if (payload.length > maxBytes) throw pipelinesError('ingest_too_large', String(payload.length));
    const wait = this.throughput.take(stream.id, bytes);
    if (wait > 0) {
      const e = pipelinesError('ingest_rate_limited', String(this.ctx.config.pipelinesStreamRate));
      throw new ApiError(e.status, e.errors, { 'retry-after': String(wait) });
    }
    await this.log.append(stream.id, payload);
  }

  /** The catalog one account's SQL is checked against. */
  async catalog(accountId: string): Promise<SqlCatalog> {
    const db = this.ctx.database.db;
    const [st, sk] = await Promise.all([streams.all(db, accountId), sinks.all(db, accountId)]);
    const byName = <T extends { name: string }>(docs: { body: T }[]) => new Map(docs.map((d) => [d.body.name, d.body]));
    const sm = byName(st);
    const km = byName(sk);
    return {
      stream: (name) => {
        const s = sm.get(name);
        if (!s) return undefined;
        const fields = s.schema?.fields && s.schema.fields.length > 0 && !(s.format.type === 'json' && s.format.unstructured) ? s.schema.fields : undefined;
        return { id: s.id, name: s.name, version: s.version, fields };
      },
      sink: (name) => {
        const k = km.get(name);
        if (!k) return undefined;
        return { id: k.id, name: k.name, fields: k.schema?.fields && k.schema.fields.length > 0 ? k.schema.fields : undefined };
      },
    };
  }

  async compile(accountId: string, sql: string): Promise<CompiledPipeline> {
    try {
      return await compilePipeline(sql, await this.catalog(accountId));
    } catch (err) {
      if (err instanceof PipelineSqlError) throw pipelinesError('sql_invalid', err.message);
      throw err;
    }
  }

  /** Starts a runner for a stored pipeline (on create and on server start). */
  async run(accountId: string, p: StoredPipeline): Promise<void> {
    if (this.runners.has(p.id)) return;
    const sink = await sinks.get(this.ctx.database.db, accountId, p.sink_id);
    if (!sink) return;
    let compiled: CompiledPipeline;
    let catalog: SqlCatalog;
    try {
      catalog = await this.catalog(accountId);
      compiled = await compilePipeline(p.sql, catalog);
    } catch (err) {
      this.logger.warn({ err, pipeline: p.id }, 'pipeline SQL no longer compiles; not started');
      return;
    }
    const runner = new PipelineRunner({
      accountId,
      pipelineId: p.id,
      compiled,
      sink: sink.body as StoredSink,
      log: this.log,
      duck: () => this.duck(),
      stateDir: this.stateDir,
      bucketRoot: this.bucketRoot,
      now: () => this.ctx.clock.now(),
      logger: this.logger,
      tickMs: this.ctx.config.pipelinesTickMs,
      onCheckpoint: () => this.scheduleCompaction(p.stream_id),
      s3: this.ctx.config.pipelinesS3Endpoint ? { endpoint: this.ctx.config.pipelinesS3Endpoint, region: this.ctx.config.pipelinesS3Region } : undefined,
      transform: this.transforms.transformer(p.id, {
        sql: p.sql,
        stream: catalog.stream(compiled.streamName)!,
        sink: catalog.sink(compiled.sinkName)!,
        inferTypes: needsKinds(sink.body as StoredSink, compiled),
        unixMillis: sink.body.format.type === 'json' && sink.body.format.timestamp_format === 'unix_millis',
      }),
    });
    this.runners.set(p.id, runner);
    await runner.start();
  }

  private readonly compactions = new Map<string, NodeJS.Timeout>();

  /** Compacts a stream's log soon (at most once per interval per stream). */
  scheduleCompaction(streamId: string): void {
    if (this.compactions.has(streamId) || this.stopping) return;
    const t = setTimeout(() => {
      void this.compact(streamId)
        .catch((err) => this.logger.warn({ err, streamId }, 'stream log compaction failed; it is tried again after the next finished file'))
        .finally(() => this.compactions.delete(streamId));
    }, COMPACT_DELAY_MS);
    t.unref();
    this.compactions.set(streamId, t);
  }

  /**
   * Deletes the part of a stream's log that every pipeline reading it has in finished files: the
   * smallest checkpoint among them. A pipeline that is stored but not running holds its last
   * checkpoint; a stream nobody reads keeps everything.
   */
  async compact(streamId: string): Promise<number> {
    const readers = await pipelines.findBy(this.ctx.database.db, 'stream', streamId);
    if (readers.length === 0) return 0;
    let upTo = Infinity;
    for (const d of readers) {
      const r = this.runners.get(d.body.id);
      let offset: number | undefined = r?.checkpoint().offset;
      if (offset === undefined) {
        try {
          offset = (JSON.parse(readFileSync(join(this.stateDir, `${d.body.id}.json`), 'utf8')) as { offset: number }).offset;
        } catch {
          // Never started: it begins at the log's first record whenever it does.
          continue;
        }
      }
      upTo = Math.min(upTo, offset);
    }
    if (!Number.isFinite(upTo) || this.stopping) return 0;
    const freed = await this.log.compact(streamId, upTo);
    if (freed > 0) this.logger.debug({ streamId, upTo, freed }, 'stream log compacted');
    return freed;
  }

  async remove(pipelineId: string): Promise<void> {
    const r = this.runners.get(pipelineId);
    this.runners.delete(pipelineId);
    this.transforms.forget(pipelineId);
    if (r) {
      await r.stop();
      r.removeState();
    } else {
      rmSync(join(this.stateDir, `${pipelineId}.json`), { force: true });
    }
  }

  async startAll(): Promise<void> {
    const all = await pipelines.all(this.ctx.database.db, null);
    for (const d of all) await this.run(d.scopeId, d.body);
  }

  private stopping = false;

  async stop(): Promise<void> {
    this.stopping = true;
    for (const t of this.compactions.values()) clearTimeout(t);
    this.compactions.clear();
    for (const r of this.runners.values()) await r.stop();
    this.runners.clear();
    await this.transforms.close();
    await this.log.close();
    const inst = await this.duckInstance?.catch(() => undefined);
    inst?.closeSync();
  }
}
