/**
 * The deprecated pipelines API (2025-04 beta: `/accounts/{a}/pipelines[/{name}]`), which the
 * official client still has (`pipelines.create/get/update/list/delete`). A legacy pipeline is
 * built from the parts it stands for in the current model, so ingestion, the binding, delivery,
 * durability and queries are the same code: a stream (its `source`: `http` → HTTP ingest with its
 * authentication and CORS, `binding` → the worker binding), a JSON sink (its `destination`) and
 * the pass-through SQL `INSERT INTO <sink> SELECT * FROM <stream>`. The sink and the pipeline are
 * named `legacy_<name>` (hyphens become underscores; the results query's table), the stream
 * `legacy_<name>_stream`; all three appear in the current API's lists too.
 *
 * Destination: `path.bucket`/`prefix` → the sink's bucket and path; `filepath` → the time folders
 * (`${date}` = YYYY-MM-DD, `${hr}` = HH, default `event_date=${date}/hr=${hr}`); `filename` must
 * hold `${slug}` (a ULID) and may end with `${extension}` (default `${slug}${extension}`);
 * `batch` → the rolling policy (`max_bytes`, `max_duration_s`, `max_rows`; defaults 100 MB, 300 s,
 * 10,000,000 rows; sizes are checked after each request's events, a request is never split); `compression.type` `gzip` (default; `.json.gz`) or `none`; `deflate` is
 * refused (the results query could not read it). `credentials` sign uploads only when the server
 * runs with `--pipelines-s3-endpoint` (their `endpoint` is not used); the secret is never returned.
 *
 * An update may change the sources (the stream's settings) and the destination; a new destination
 * replaces the sink and its pipeline, which starts reading the stream log from its oldest kept
 * event, so events still in the log may be written to the old and the new destination.
 */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { ApiError } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import { raw } from '../../core/router.ts';
import { pipelinesError } from './errors.ts';
import type { PipelinesOps } from './routes.ts';
import { PIPELINES_PERMISSION } from './routes.ts';
import type { StoredPipeline, StoredSink, StoredStream } from './schemas.ts';
import { legacyPipelines, pipelines, sinks, streams } from './store.ts';

const read = { permission: PIPELINES_PERMISSION, level: 'read' } as const;
const edit = { permission: PIPELINES_PERMISSION, level: 'edit' } as const;
const tags = ['pipelines (deprecated)'];

const LEGACY_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,109}$/;
const Source = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('http'), format: z.literal('json'), authentication: z.boolean().optional(), cors: z.strictObject({ origins: z.array(z.string()).optional() }).optional() }),
  z.strictObject({ type: z.literal('binding'), format: z.literal('json') }),
], { error: 'source[].type must be http or binding' });
const Destination = z.strictObject({
  type: z.literal('r2', { error: 'destination.type must be r2' }),
  format: z.literal('json', { error: 'destination.format must be json' }),
  batch: z.strictObject({ max_bytes: z.number().int().positive().optional(), max_duration_s: z.number().positive().optional(), max_rows: z.number().int().positive().optional() }),
  compression: z.strictObject({ type: z.enum(['none', 'gzip', 'deflate']).optional() }),
  credentials: z.strictObject({ access_key_id: z.string(), endpoint: z.string(), secret_access_key: z.string() }),
  path: z.strictObject({ bucket: z.string(), prefix: z.string().optional(), filepath: z.string().optional(), filename: z.string().optional() }),
});
const LegacyBody = z.strictObject({
  name: z.string({ error: 'name is required' }).regex(LEGACY_NAME, 'name must be 1-110 letters, digits, hyphens or underscores'),
  source: z.array(Source).min(1, 'source needs at least one of http and binding').max(2),
  destination: Destination,
});
type LegacyBody = z.infer<typeof LegacyBody>;

export interface StoredLegacyPipeline {
  id: string;
  name: string;
  source: LegacyBody['source'];
  destination: LegacyBody['destination'];
  stream_id: string;
  sink_id: string;
  pipeline_id: string;
  version: number;
  created_at: string;
  modified_at: string;
}

/** The sink a destination stands for, checked before anything is written. */
function sinkFor(partName: string, d: LegacyBody['destination']) {
  if (d.compression.type === 'deflate') throw pipelinesError('invalid', 'destination.compression.type deflate is not supported: use gzip or none');
  const filepath = d.path.filepath ?? 'event_date=${date}/hr=${hr}';
  const filename = d.path.filename ?? '${slug}${extension}';
  const slug = filename.indexOf('${slug}');
  if (slug < 0) throw pipelinesError('invalid', 'destination.path.filename must contain ${slug} (each file gets a unique name)');
  const fixed = (s: string) => s.replace('${extension}', '');
  return {
    body: {
      name: partName,
      type: 'r2' as const,
      format: { type: 'json' as const },
      config: {
        bucket: d.path.bucket,
        ...(d.path.prefix ? { path: d.path.prefix } : {}),
        credentials: { access_key_id: d.credentials.access_key_id, secret_access_key: d.credentials.secret_access_key },
        partitioning: { time_pattern: filepath.replaceAll('${date}', '%Y-%m-%d').replaceAll('${hr}', '%H') },
        file_naming: { strategy: 'ulid' as const, prefix: fixed(filename.slice(0, slug)), suffix: fixed(filename.slice(slug + '${slug}'.length)) },
        rolling_policy: { file_size_bytes: d.batch.max_bytes ?? 100 * 1024 * 1024, interval_seconds: d.batch.max_duration_s ?? 300 },
      },
    },
    internal: { maxRows: d.batch.max_rows ?? 10_000_000, ...(d.compression.type === 'none' ? {} : { jsonCompression: 'gzip' as const }) },
  };
}

function ignoreNotFound(err: unknown): void {
  if (!(err instanceof ApiError && err.status === 404)) throw err;
}

function streamSettings(source: LegacyBody['source']): Pick<StoredStream, 'http' | 'worker_binding'> {
  const http = source.find((s) => s.type === 'http');
  return {
    http: http ? { enabled: true, authentication: http.authentication ?? false, ...(http.cors ? { cors: http.cors } : {}) } : { enabled: false, authentication: false },
    worker_binding: { enabled: source.some((s) => s.type === 'binding') },
  };
}

export function mountLegacyRoutes(ctx: AreaContext, ops: PipelinesOps): void {
  const db = () => ctx.database.db;
  const now = () => ctx.clock.now().toISOString();
  const base = '/accounts/:account_id/pipelines';

  const view = async (accountId: string, l: StoredLegacyPipeline, endpointOf: (id: string) => string) => {
    const { credentials: _secret, ...destination } = l.destination;
    const stream = await streams.get(db(), accountId, l.stream_id);
    return { id: l.id, name: l.name, source: l.source, destination, endpoint: stream?.body.http.enabled ? endpointOf(l.stream_id) : '', version: l.version };
  };
  const find = async (accountId: string, name: string) => {
    const d = (await legacyPipelines.list(db(), accountId, { filters: [{ field: 'name', op: 'eq', value: name }], withTotal: false })).items[0];
    if (!d) throw pipelinesError('pipeline_not_found', name);
    return d;
  };
  const partName = (name: string) => `legacy_${name.replace(/-/g, '_')}`;

  /** Sink and pipeline of a destination; on failure, what was made is removed again. */
  const makeDelivery = async (accountId: string, name: string, stream: StoredStream, d: LegacyBody['destination']): Promise<{ sink: StoredSink; pipeline: StoredPipeline }> => {
    const { body, internal } = sinkFor(name, d);
    const sink = await ops.createSink(accountId, body, internal);
    try {
      const pipeline = await ops.createPipeline(accountId, { name, sql: `INSERT INTO ${sink.name} SELECT * FROM ${stream.name}` });
      return { sink, pipeline };
    } catch (err) {
      await ops.deleteSink(accountId, sink.id).catch(() => undefined);
      throw err;
    }
  };

  ctx.router.add({ method: 'POST', path: base, operationId: 'legacyPipelinesCreate', summary: 'Creates a pipeline (deprecated API)', auth: edit, body: LegacyBody, tags }, async ({ params, body, c }) => {
    const accountId = params.account_id;
    if ((await legacyPipelines.list(db(), accountId, { filters: [{ field: 'name', op: 'eq', value: body.name }], withTotal: false })).items.length > 0) throw pipelinesError('name_exists', `A pipeline named ${body.name} already exists in this account`);
    const name = partName(body.name);
    sinkFor(name, body.destination);
    const stream = await ops.createStream(accountId, { name: `${name}_stream`, ...streamSettings(body.source) });
    let delivery;
    try {
      delivery = await makeDelivery(accountId, name, stream, body.destination);
    } catch (err) {
      await ops.deleteStream(accountId, stream.id).catch(() => undefined);
      throw err;
    }
    const at = now();
    const l: StoredLegacyPipeline = { id: hexId(), name: body.name, source: body.source, destination: body.destination, stream_id: stream.id, sink_id: delivery.sink.id, pipeline_id: delivery.pipeline.id, version: 1, created_at: at, modified_at: at };
    await legacyPipelines.insert(db(), accountId, l.id, l, ctx.clock.now());
    return view(accountId, l, (id) => ops.endpointOf(c, id));
  });

  ctx.router.add({ method: 'GET', path: `${base}/:pipeline_name`, params: { pipeline_name: 'any' }, operationId: 'legacyPipelinesGet', summary: 'Gets a pipeline (deprecated API)', auth: read, tags }, async ({ params, c }) =>
    view(params.account_id, (await find(params.account_id, params.pipeline_name)).body, (id) => ops.endpointOf(c, id)),
  );

  const ListQ = z.object({ page: z.coerce.number().int().min(1).default(1), per_page: z.coerce.number().int().min(1).max(100).default(25), search: z.string().max(200).optional() });
  ctx.router.add({ method: 'GET', path: base, operationId: 'legacyPipelinesList', summary: 'Lists pipelines (deprecated API)', auth: read, query: ListQ, tags }, async ({ params, query, c }) => {
    const { items, total } = await legacyPipelines.list(db(), params.account_id, {
      order: 'created_on',
      limit: query.per_page,
      offset: (query.page - 1) * query.per_page,
      ...(query.search ? { filters: [{ field: 'name', op: 'contains', value: query.search }] } : {}),
    });
    const results = await Promise.all(items.map((d) => view(params.account_id, d.body, (id) => ops.endpointOf(c, id))));
    // This API answers `results` beside `result_info`, not the usual envelope.
    return raw(Response.json({ success: true, result_info: { count: results.length, page: query.page, per_page: query.per_page, total_count: total }, results }));
  });

  ctx.router.add({ method: 'PUT', path: `${base}/:pipeline_name`, params: { pipeline_name: 'any' }, operationId: 'legacyPipelinesUpdate', summary: 'Changes a pipeline\'s sources and destination (deprecated API)', auth: edit, body: LegacyBody, tags }, async ({ params, body, c }) => {
    const accountId = params.account_id;
    const d = await find(accountId, params.pipeline_name);
    if (body.name !== d.body.name) throw pipelinesError('invalid', `name: ${body.name} differs from the pipeline in the path (${d.body.name}); a pipeline cannot be renamed`);
    const l = d.body;
    const streamDoc = await streams.get(db(), accountId, l.stream_id);
    if (!streamDoc) throw pipelinesError('stream_not_found', l.stream_id);
    const name = partName(l.name);
    let next: StoredLegacyPipeline = { ...l, source: body.source, destination: body.destination, version: l.version + 1, modified_at: now() };
    if (JSON.stringify(body.destination) !== JSON.stringify(l.destination)) {
      sinkFor(name, body.destination);
      const oldSink = await sinks.get(db(), accountId, l.sink_id);
      const oldPipeline = await pipelines.get(db(), accountId, l.pipeline_id);
      await ops.deletePipeline(accountId, l.pipeline_id);
      await ops.deleteSink(accountId, l.sink_id);
      try {
        const delivery = await makeDelivery(accountId, name, streamDoc.body, body.destination);
        next = { ...next, sink_id: delivery.sink.id, pipeline_id: delivery.pipeline.id };
      } catch (err) {
        // Put the old destination back as it was.
        if (oldSink) await sinks.insert(db(), accountId, oldSink.body.id, oldSink.body, ctx.clock.now());
        if (oldPipeline) {
          await pipelines.insert(db(), accountId, oldPipeline.body.id, oldPipeline.body, ctx.clock.now());
          await ops.run(accountId, oldPipeline.body);
        }
        throw err;
      }
    }
    await streams.update(db(), streamDoc, { ...streamDoc.body, ...streamSettings(body.source), version: streamDoc.body.version + 1, modified_at: now() }, ctx.clock.now());
    await legacyPipelines.update(db(), d, next, ctx.clock.now());
    return view(accountId, next, (id) => ops.endpointOf(c, id));
  });

  ctx.router.add({ method: 'DELETE', path: `${base}/:pipeline_name`, params: { pipeline_name: 'any' }, operationId: 'legacyPipelinesDelete', summary: 'Deletes a pipeline, its stream and sink (deprecated API; files stay)', auth: edit, tags }, async ({ params }) => {
    const accountId = params.account_id;
    const d = await find(accountId, params.pipeline_name);
    // Parts already gone (deleted through the current API) are skipped.
    await ops.deletePipeline(accountId, d.body.pipeline_id).catch(ignoreNotFound);
    await ops.deleteSink(accountId, d.body.sink_id).catch(ignoreNotFound);
    await ops.deleteStream(accountId, d.body.stream_id).catch(ignoreNotFound);
    await legacyPipelines.delete(db(), accountId, d.body.id);
    return null;
  });
}
