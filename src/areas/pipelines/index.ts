/**
 * @module pipelines — event pipelines (spec 002_27fdb1f572b9493b.txt, "Pipeline event", "Pipeline
 * SQL transformation", "Pipeline ingestion", errors and limits): streams take JSON events (and,
 * with format parquet, Parquet files) over HTTP or from the `pipelines` script binding, SQL
 * (`INSERT INTO <sink> SELECT … FROM <stream> [WHERE …]`) transforms them, sinks write
 * newline-delimited JSON or Parquet files into a bucket directory, and the files are queryable as
 * tables named after their sinks.
 *
 * Management (the official client's v1 API): `/accounts/{a}/pipelines/v1/streams`, `/sinks`,
 * `/pipelines`, `/validate_sql`; results: `POST|GET /accounts/{a}/pipelines/v1/query` (Outpost's
 * own endpoint; read-only, the caller's account only). Permission: Pipelines (read/edit); HTTP
 * ingestion on a stream with `http.authentication: true` needs Pipelines Write.
 *
 * Ingestion: the stream's `endpoint` (`http://<stream id>.<--pipelines-ingest-host>:<api port>`,
 * `POST /` or `/v1`), and the alias `POST /pipelines/ingest/{stream_id}` on the API port. A 200
 * means the batch is fsync'd into the stream log (group commit; `log.ts`). Limits: 1 MB per
 * request (413), `--pipelines-stream-rate` bytes/s per stream (default 5 MB/s; 429 with
 * retry-after), typed streams check each event (400 naming the event and field).
 *
 * Growing past one machine: `--pipelines-log nats://host:port` keeps the stream log in NATS
 * JetStream (`nats-log.ts`) instead of local files; the same ingestion and delivery rules apply.
 *
 * Delivery: at-least-once from the log, with a two-step checkpoint around each finished file so a
 * restart never writes an event twice into finished files (`runner.ts`).
 *
 * S3-compatible stores: with `--pipelines-s3-endpoint`, finished files are also uploaded
 * (`s3.ts`, path-style PUT, or a multipart upload above 8 MiB read part by part from disk; SigV4
 * with the sink's credentials, `sigv4.ts`); the checkpoint moves past a file only after the
 * upload completed, failures are retried with backoff. Queries read the local copies.
 *
 * Deprecated API: `/accounts/{a}/pipelines[/{name}]` (the 2025-04 beta the official client still
 * has) builds a stream, a JSON sink and a pass-through pipeline per legacy pipeline (`legacy.ts`).
 *
 * Aliases: binding keys `pipeline` and `stream` (a stream id or name, or a legacy pipeline's name); sink `config` may be omitted (bucket
 * `pipelines`, path = sink name).
 *
 * Ingest of an untyped stream checks the body's bytes (`json-scan.ts`) and logs them raw; each
 * pipeline's parse, SQL and serialisation run on one worker thread (`transform-thread.ts`). The
 * local log is segmented; segments every pipeline of the stream has in finished files are
 * deleted (`--pipelines-segment-bytes`; JetStream: purged).
 *
 * Iceberg: `r2_data_catalog` sinks (alias `basin_catalog`) commit each finished file to an Iceberg
 * table (`iceberg.ts`), listed by the bucket's REST catalog at `/catalog/{account_id}/{bucket}`
 * (`catalog.ts`).
 *
 * Parquet streams (`format.type: "parquet"`): the HTTP ingest also takes a whole Parquet file,
 * one event per row, decoded with hyparquet on the main thread (bounded: 1 MB body, 1,000,000
 * rows, 32 MiB of decompressed pages, 8 MiB of JSON) into the same JSON values a JSON event carries
 * (`parquet-ingest.ts`: unsafe int64 → text, timestamps → RFC 3339, binary → base64), validated
 * like JSON events and logged as JSON.
 *
 * LIMITATIONS: one S3 endpoint for all sinks (path-style); a failed multipart upload restarts
 * from its first part (no resume of uploaded parts); Iceberg tables are unpartitioned, local only
 * (file:// locations) and take commits from sinks only; the binding sends JSON only (Parquet
 * bodies come over HTTP); a stream's Parquet `compression`/`row_group_bytes` are stored but play
 * no part in reading; a stream without pipelines keeps its whole log; the Parquet size roll is
 * measured on the staged JSON rows, not on the Parquet output.
 */
import { join } from 'node:path';
import { defineArea } from '../../core/area.ts';
import { ApiError, CODES } from '../../core/errors.ts';
import { bindingExtensionService, type BindingExtension } from '../workers/index.ts';
import { BINDING_TYPE, checkBinding, nodeBindings, shimSource } from './binding.ts';
import { LocalLog } from './log.ts';
import { NatsLog } from './nats-log.ts';
import { mountCatalogRoutes } from './catalog.ts';
import { mountLegacyRoutes } from './legacy.ts';
import { mountPipelinesRoutes, PIPELINES_PERMISSION } from './routes.ts';
import { PipelinesService } from './service.ts';
import { initSql } from './sql.ts';

export const PIPELINES_SERVICE = 'pipelines';
export { PipelinesService } from './service.ts';

export default defineArea({
  name: 'pipelines',
  mount(ctx) {
    ctx.permissions.define({ key: PIPELINES_PERMISSION, name: 'Pipelines', scope: 'account' });
    const log = ctx.log.child({ area: 'pipelines' });
    let service: PipelinesService | undefined;
    const require = (): PipelinesService => {
      if (!service) throw new ApiError(503, [{ code: CODES.worker_runtime_unavailable.code, message: 'Pipelines are not running; retry in a moment' }]);
      return service;
    };
    mountLegacyRoutes(ctx, mountPipelinesRoutes(ctx, require));
    mountCatalogRoutes(ctx, require);
    const extension: BindingExtension = {
      check: (b) => checkBinding(b),
      bindings: (accountId, b) => nodeBindings(require, () => ctx.database.db, accountId, b),
      shim: (b) => shimSource(b),
    };
    ctx.services.provide(bindingExtensionService(BINDING_TYPE), extension);
    ctx.services.provide(PIPELINES_SERVICE, { service: () => service });
    return {
      async start() {
        await initSql();
        const where = ctx.config.pipelinesLog;
        const streamLog = where === 'local' ? new LocalLog(join(ctx.config.dataDir, 'pipelines', 'log'), log, ctx.config.pipelinesSegmentBytes) : await NatsLog.open(where, log);
        const s = new PipelinesService(ctx, streamLog, log);
        await s.startAll();
        service = s;
      },
      async stop() {
        const s = service;
        service = undefined;
        await s?.stop();
      },
    };
  },
});
