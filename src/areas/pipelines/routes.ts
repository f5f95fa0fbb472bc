/**
 * Thin handlers: management (`/accounts/{a}/pipelines/v1/{streams,sinks,pipelines,validate_sql}`),
 * HTTP ingestion (the stream's `endpoint`: `POST /` or `/v1` with `Host: <stream id>.<ingest
 * host>`, and the alias `POST /pipelines/ingest/{stream_id}` on any host), and the results query.
 */
import { z } from 'zod';
import type { Context } from 'hono';
import type { AreaContext } from '../../core/area.ts';
import { ApiError, apiError } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import { pageFrom, pageQuery } from '../../core/pagination.ts';
import { raw, readBody, type Req } from '../../core/router.ts';
import { validate } from '../../core/validate.ts';
import type { Doc } from '../../core/storage/collection.ts';
import { pipelinesError } from './errors.ts';
import { runQuery } from './query.ts';
import { Catalog, ICEBERG_OF_FIELD } from './iceberg.ts';
import { catalogRoot, DEFAULT_ROLLING, DEFAULT_TIME_PATTERN } from './runner.ts';
import { CatalogConfig, PipelineCreate, R2Config, SinkCreate, StreamCreate, StreamPatch, ValidateSql, type StoredPipeline, type StoredSink, type StoredStream } from './schemas.ts';
import { MAX_REQUEST_BYTES, type PipelinesService } from './service.ts';
import { pipelines, sinks, streams } from './store.ts';

export const PIPELINES_PERMISSION = 'pipelines';

/** Sink settings only the deprecated pipelines API sets (legacy.ts). */
export interface SinkInternals {
  jsonCompression?: 'gzip';
  maxRows?: number;
}
const read = { permission: PIPELINES_PERMISSION, level: 'read' } as const;
const edit = { permission: PIPELINES_PERMISSION, level: 'edit' } as const;
const tags = ['pipelines'];
const ListQuery = z.object({ ...pageQuery({ perPage: 20, min: 1, max: 1000 }) });
const base = '/accounts/:account_id/pipelines/v1';
const idParam = (name: string) => ({ [name]: 'hex32' as const });

/** The stream's ingest URL as seen from the address the caller used. */
function endpointOf(c: Context, suffix: string, id: string): string {
  const u = new URL(c.req.url);
  return `${u.protocol}//${id}.${suffix}${u.port ? `:${u.port}` : ''}`;
}

function streamView(c: Context, suffix: string, s: StoredStream) {
  return { ...s, endpoint: s.http.enabled ? endpointOf(c, suffix, s.id) : undefined };
}

function sinkView(s: StoredSink) {
  // Secrets are write-only: the S3 secret key and the catalog token are never shown.
  const { credentials, token: _token, ...config } = s.config;
  return { ...s, config: credentials ? { ...config, credentials: { access_key_id: credentials.access_key_id } } : config };
}

function checkTimePattern(p: string | undefined): void {
  if (p === undefined) return;
  const bad = /%[^YmdHMS%]/.exec(p);
  if (bad) throw pipelinesError('invalid', `config.partitioning.time_pattern: ${bad[0]} is not supported (use %Y %m %d %H %M %S)`);
  if (!/^[A-Za-z0-9_\-=/%.]*$/.test(p) || p.split('/').some((x) => x === '..' || x === '.'))
    throw pipelinesError('invalid', 'config.partitioning.time_pattern may hold letters, digits, _ - = . / and %Y %m %d %H %M %S');
}

/** What the deprecated API (legacy.ts) builds its pipelines from. */
export interface PipelinesOps {
  createStream(accountId: string, body: z.infer<typeof StreamCreate>): Promise<StoredStream>;
  createSink(accountId: string, body: z.infer<typeof SinkCreate>, internal?: SinkInternals): Promise<StoredSink>;
  createPipeline(accountId: string, body: z.infer<typeof PipelineCreate>): Promise<StoredPipeline>;
  deleteStream(accountId: string, id: string): Promise<unknown>;
  deleteSink(accountId: string, id: string): Promise<unknown>;
  deletePipeline(accountId: string, id: string): Promise<unknown>;
  run(accountId: string, p: StoredPipeline): Promise<void>;
  endpointOf(c: Context, streamId: string): string;
}

export function mountPipelinesRoutes(ctx: AreaContext, service: () => PipelinesService): PipelinesOps {
  const db = () => ctx.database.db;
  const now = () => ctx.clock.now().toISOString();
  const suffix = ctx.config.pipelinesIngestHost;

  const nameTaken = async (coll: typeof streams | typeof sinks | typeof pipelines, accountId: string, name: string, what: string) => {
    const { items } = await coll.list(db(), accountId, { filters: [{ field: 'name', op: 'eq', value: name }], withTotal: false });
    if (items.length > 0) throw pipelinesError('name_exists', `A ${what} named ${name} already exists in this account`);
  };
  const getStream = async (accountId: string, id: string) => {
    const d = await streams.get(db(), accountId, id);
    if (!d) throw pipelinesError('stream_not_found', id);
    return d;
  };
  const getSink = async (accountId: string, id: string) => {
    const d = await sinks.get(db(), accountId, id);
    if (!d) throw pipelinesError('sink_not_found', id);
    return d;
  };
  const getPipeline = async (accountId: string, id: string) => {
    const d = await pipelines.get(db(), accountId, id);
    if (!d) throw pipelinesError('pipeline_not_found', id);
    return d;
  };

  // ---- streams ----------------------------------------------------------------------------
  ctx.router.add(
    { method: 'POST', path: `${base}/streams`, operationId: 'postV4AccountsByAccount_idPipelinesV1Streams', summary: 'Creates a stream', auth: edit, body: StreamCreate, tags },
    async ({ params, body, c }) => streamView(c, suffix, await createStream(params.account_id, body)),
  );
  async function createStream(accountId: string, body: z.infer<typeof StreamCreate>): Promise<StoredStream> {
    await nameTaken(streams, accountId, body.name, 'stream');
    const at = now();
    const s: StoredStream = {
      id: hexId(),
      name: body.name,
      format: body.format ?? { type: 'json', unstructured: !body.schema?.fields?.length },
      ...(body.schema ? { schema: body.schema } : {}),
      http: body.http ?? { enabled: true, authentication: false },
      worker_binding: body.worker_binding ?? { enabled: true },
      version: 1,
      created_at: at,
      modified_at: at,
    };
    await streams.insert(db(), accountId, s.id, s, ctx.clock.now());
    return s;
  }
  ctx.router.add(
    { method: 'GET', path: `${base}/streams`, operationId: 'getV4AccountsByAccount_idPipelinesV1Streams', summary: 'Lists streams', auth: read, query: ListQuery, tags },
    async ({ params, query, c }) => {
      const { items, total } = await streams.list(db(), params.account_id, { order: 'created_on', limit: query.per_page, offset: (query.page - 1) * query.per_page });
      return pageFrom(items.map((d) => streamView(c, suffix, d.body)), total, query);
    },
  );
  ctx.router.add(
    { method: 'GET', path: `${base}/streams/:stream_id`, operationId: 'getV4AccountsByAccount_idPipelinesV1StreamsByStream_id', summary: 'Gets a stream', auth: read, params: idParam('stream_id'), tags },
    async ({ params, c }) => streamView(c, suffix, (await getStream(params.account_id, params.stream_id)).body),
  );
  ctx.router.add(
    { method: 'PATCH', path: `${base}/streams/:stream_id`, operationId: 'patchV4AccountsByAccount_idPipelinesV1StreamsByStream_id', summary: 'Changes a stream\'s HTTP and binding settings', auth: edit, params: idParam('stream_id'), body: StreamPatch, tags },
    async ({ params, body, c }) => {
      const d = await getStream(params.account_id, params.stream_id);
      const s: StoredStream = { ...d.body, http: body.http ?? d.body.http, worker_binding: body.worker_binding ?? d.body.worker_binding, version: d.body.version + 1, modified_at: now() };
      await streams.update(db(), d, s, ctx.clock.now());
      return streamView(c, suffix, s);
    },
  );
  ctx.router.add(
    { method: 'DELETE', path: `${base}/streams/:stream_id`, operationId: 'deleteV4AccountsByAccount_idPipelinesV1StreamsByStream_id', summary: 'Deletes a stream', auth: edit, params: idParam('stream_id'), tags },
    async ({ params }) => deleteStream(params.account_id, params.stream_id),
  );
  async function deleteStream(accountId: string, id: string): Promise<{ id: string }> {
    await getStream(accountId, id);
    const users = await pipelines.findBy(db(), 'stream', id);
    if (users.length > 0) throw pipelinesError('in_use', `Stream ${id} feeds pipeline ${users[0].body.name}; delete the pipeline first`);
    await streams.delete(db(), accountId, id);
    await service().log.drop(id);
    return { id };
  }

  // ---- sinks ------------------------------------------------------------------------------
  ctx.router.add(
    { method: 'POST', path: `${base}/sinks`, operationId: 'postV4AccountsByAccount_idPipelinesV1Sinks', summary: 'Creates a sink', auth: edit, body: SinkCreate, tags },
    async ({ params, body }) => sinkView(await createSink(params.account_id, body)),
  );
  /** Creates a sink; `internal` holds settings only the deprecated API sets (legacy.ts). */
  async function createSink(accountId: string, body: z.infer<typeof SinkCreate>, internal: SinkInternals = {}): Promise<StoredSink> {
    await nameTaken(sinks, accountId, body.name, 'sink');
    if (body.type !== 'r2') return createCatalogSink(accountId, body);
    const config = validate(R2Config, body.config ?? { bucket: 'pipelines', path: body.name }, 'body');
    checkTimePattern(config.partitioning?.time_pattern);
    const key = (c: { bucket: string; path?: string }) => `${c.bucket}/${(c.path ?? '').split('/').filter(Boolean).join('/')}`;
    const others = await sinks.all(db(), accountId);
    const clash = others.find((o) => key(o.body.config) === key(config));
    if (clash) throw pipelinesError('name_exists', `Sink ${clash.body.name} already writes to ${key(config)}; give this sink another bucket or path`);
    const at = now();
    const s: StoredSink = {
      id: hexId(),
      name: body.name,
      type: 'r2',
      format: body.format ?? { type: 'json' },
      ...(internal.jsonCompression ? { json_compression: internal.jsonCompression } : {}),
      ...(body.schema ? { schema: body.schema } : {}),
      config: {
        ...config,
        partitioning: { time_pattern: config.partitioning?.time_pattern ?? DEFAULT_TIME_PATTERN },
        file_naming: { strategy: 'serial', ...config.file_naming },
        rolling_policy: { ...DEFAULT_ROLLING, ...config.rolling_policy, ...(internal.maxRows ? { max_rows: internal.maxRows } : {}) },
      },
      created_at: at,
      modified_at: at,
    };
    await sinks.insert(db(), accountId, s.id, s, ctx.clock.now());
    return s;
  }
  /** A catalog sink creates its Iceberg table now; an existing table is refused, as the platform does. */
  const createCatalogSink = async (accountId: string, body: z.infer<typeof SinkCreate>): Promise<StoredSink> => {
    if (!body.config) throw pipelinesError('invalid', 'config is required for an r2_data_catalog sink: {token, bucket, namespace, table_name}');
    const config = validate(CatalogConfig, body.config, 'body');
    if (body.format && body.format.type !== 'parquet') throw pipelinesError('invalid', 'format: an r2_data_catalog sink writes Parquet (format.type parquet, or leave format out)');
    const namespace = config.namespace ?? 'default';
    const table = new Catalog(catalogRoot(service().bucketRoot, accountId, config.bucket)).table(namespace, config.table_name);
    const others = await sinks.all(db(), accountId);
    const clash = others.find((o) => o.body.type === 'r2_data_catalog' && o.body.config.bucket === config.bucket && (o.body.config.namespace ?? 'default') === namespace && o.body.config.table_name === config.table_name);
    if (clash) throw pipelinesError('name_exists', `Sink ${clash.body.name} already writes table ${namespace}.${config.table_name} in bucket ${config.bucket}`);
    if (table.exists()) throw pipelinesError('name_exists', `Table ${namespace}.${config.table_name} already exists in bucket ${config.bucket}'s catalog; a catalog sink creates its own table: choose another table_name, or drop the table`);
    const columns = (body.schema?.fields ?? []).map((f) => ({ name: f.sql_name ?? f.name, type: ICEBERG_OF_FIELD[f.type] }));
    if (!(await table.create(columns))) throw pipelinesError('name_exists', `Table ${namespace}.${config.table_name} already exists in bucket ${config.bucket}'s catalog`);
    const at = now();
    const s: StoredSink = {
      id: hexId(),
      name: body.name,
      type: 'r2_data_catalog',
      format: body.format ?? { type: 'parquet', compression: 'zstd' },
      ...(body.schema ? { schema: body.schema } : {}),
      config: { ...config, namespace, rolling_policy: { ...DEFAULT_ROLLING, ...config.rolling_policy } },
      created_at: at,
      modified_at: at,
    };
    await sinks.insert(db(), accountId, s.id, s, ctx.clock.now());
    return s;
  };
  ctx.router.add(
    { method: 'GET', path: `${base}/sinks`, operationId: 'getV4AccountsByAccount_idPipelinesV1Sinks', summary: 'Lists sinks', auth: read, query: ListQuery, tags },
    async ({ params, query }) => {
      const { items, total } = await sinks.list(db(), params.account_id, { order: 'created_on', limit: query.per_page, offset: (query.page - 1) * query.per_page });
      return pageFrom(items.map((d) => sinkView(d.body)), total, query);
    },
  );
  ctx.router.add(
    { method: 'GET', path: `${base}/sinks/:sink_id`, operationId: 'getV4AccountsByAccount_idPipelinesV1SinksBySink_id', summary: 'Gets a sink', auth: read, params: idParam('sink_id'), tags },
    async ({ params }) => sinkView((await getSink(params.account_id, params.sink_id)).body),
  );
  ctx.router.add(
    { method: 'DELETE', path: `${base}/sinks/:sink_id`, operationId: 'deleteV4AccountsByAccount_idPipelinesV1SinksBySink_id', summary: 'Deletes a sink (its files stay)', auth: edit, params: idParam('sink_id'), tags },
    async ({ params }) => deleteSink(params.account_id, params.sink_id),
  );
  async function deleteSink(accountId: string, id: string): Promise<{ id: string }> {
    await getSink(accountId, id);
    const users = await pipelines.findBy(db(), 'sink', id);
    if (users.length > 0) throw pipelinesError('in_use', `Sink ${id} is written by pipeline ${users[0].body.name}; delete the pipeline first`);
    await sinks.delete(db(), accountId, id);
    return { id };
  }

  // ---- pipelines --------------------------------------------------------------------------
  const pipelineView = (d: Doc<StoredPipeline> | StoredPipeline, withTables = true) => {
    const p = 'body' in d ? d.body : d;
    const runner = service().runners.get(p.id);
    const failure = runner?.stats.lastError;
    const view: Record<string, unknown> = { id: p.id, name: p.name, sql: p.sql, status: failure ? 'failing' : runner ? 'running' : p.status, created_at: p.created_at, modified_at: p.modified_at };
    if (failure) view.failure_reason = failure;
    if (withTables) view.tables = tablesOf(p);
    // Outpost's own: what this server's runner did since it started. Events the stream refused
    // never reach a pipeline; `events_dropped` counts log records that could not be read.
    if (withTables && runner) view.metrics = { events_read: runner.stats.events, rows_written: runner.stats.rows, files_written: runner.stats.files, events_dropped: runner.stats.dropped };
    return view;
  };
  const tablesOf = (p: StoredPipeline) => [
    { id: p.stream_id, name: p.sql_tables?.stream ?? '', type: 'stream', version: p.sql_tables?.stream_version ?? 1, latest: p.sql_tables?.stream_version ?? 1 },
    { id: p.sink_id, name: p.sql_tables?.sink ?? '', type: 'sink', version: 1, latest: 1 },
  ];
  ctx.router.add(
    { method: 'POST', path: `${base}/pipelines`, operationId: 'postV4AccountsByAccount_idPipelinesV1Pipelines', summary: 'Creates a pipeline from SQL', auth: edit, body: PipelineCreate, tags },
    async ({ params, body }) => pipelineView(await createPipeline(params.account_id, body), false),
  );
  async function createPipeline(accountId: string, body: z.infer<typeof PipelineCreate>): Promise<StoredPipeline> {
    await nameTaken(pipelines, accountId, body.name, 'pipeline');
    const compiled = await service().compile(accountId, body.sql);
    const at = now();
    const p: StoredPipeline = {
      id: hexId(),
      name: body.name,
      sql: body.sql,
      stream_id: compiled.streamId,
      sink_id: compiled.sinkId,
      sql_tables: { stream: compiled.streamName, sink: compiled.sinkName, stream_version: compiled.streamVersion },
      status: 'running',
      created_at: at,
      modified_at: at,
    };
    await pipelines.insert(db(), accountId, p.id, p, ctx.clock.now());
    await service().run(accountId, p);
    return p;
  }
  ctx.router.add(
    { method: 'GET', path: `${base}/pipelines`, operationId: 'getV4AccountsByAccount_idPipelinesV1Pipelines', summary: 'Lists pipelines', auth: read, query: ListQuery, tags },
    async ({ params, query }) => {
      const { items, total } = await pipelines.list(db(), params.account_id, { order: 'created_on', limit: query.per_page, offset: (query.page - 1) * query.per_page });
      return pageFrom(items.map((d) => pipelineView(d, false)), total, query);
    },
  );
  ctx.router.add(
    { method: 'GET', path: `${base}/pipelines/:pipeline_id`, operationId: 'getV4AccountsByAccount_idPipelinesV1PipelinesByPipeline_id', summary: 'Gets a pipeline', auth: read, params: idParam('pipeline_id'), tags },
    async ({ params }) => pipelineView(await getPipeline(params.account_id, params.pipeline_id)),
  );
  ctx.router.add(
    { method: 'DELETE', path: `${base}/pipelines/:pipeline_id`, operationId: 'deleteV4AccountsByAccount_idPipelinesV1PipelinesByPipeline_id', summary: 'Deletes a pipeline (finished files stay)', auth: edit, params: idParam('pipeline_id'), tags },
    async ({ params }) => deletePipeline(params.account_id, params.pipeline_id),
  );
  async function deletePipeline(accountId: string, id: string): Promise<{ id: string }> {
    await getPipeline(accountId, id);
    await service().remove(id);
    await pipelines.delete(db(), accountId, id);
    return { id };
  }
  ctx.router.add(
    { method: 'POST', path: `${base}/validate_sql`, operationId: 'postV4AccountsByAccount_idPipelinesV1Validate_sql', summary: 'Checks pipeline SQL against the account\'s streams and sinks', auth: read, body: ValidateSql, tags },
    async ({ params, body }) => {
      const c = await service().compile(params.account_id, body.sql);
      return {
        tables: {
          [c.streamName]: { id: c.streamId, name: c.streamName, type: 'stream', version: c.streamVersion },
          [c.sinkName]: { id: c.sinkId, name: c.sinkName, type: 'sink', version: 1 },
        },
        graph: {
          nodes: [
            { id: c.streamId, name: c.streamName, type: 'stream' },
            { id: c.sinkId, name: c.sinkName, type: 'sink' },
          ],
          edges: [{ from: c.streamId, to: c.sinkId }],
        },
        columns: c.passthrough ? '*' : c.columns.map((col) => ({ name: col.name, type: col.type ?? null })),
      };
    },
  );

  // ---- results ------------------------------------------------------------------------------
  const QueryQ = z.object({ query: z.string().optional() });
  for (const method of ['POST', 'GET'] as const) {
    ctx.router.add(
      { method, path: `${base}/query`, operationId: `pipelinesQuery${method}`, summary: 'Runs a read-only SQL query over the account\'s sink files (tables named after sinks)', auth: read, query: QueryQ, bodyType: 'raw', tags },
      async ({ params, raw: body, query, c }) => {
        let text = body && body.length > 0 ? body.toString('utf8') : (query.query ?? '');
        const ct = c.req.header('content-type') ?? '';
        if (ct.includes('json')) {
          try {
            const parsed: unknown = JSON.parse(text);
            if (typeof parsed === 'string') text = parsed;
            else if (parsed && typeof parsed === 'object' && typeof (parsed as { sql?: unknown }).sql === 'string') text = (parsed as { sql: string }).sql;
            else throw pipelinesError('query_invalid', 'A JSON body must be {"sql": "<query>"} or a JSON string');
          } catch (err) {
            if (err instanceof ApiError) throw err;
            throw apiError('invalid_json', (err as Error).message);
          }
        }
        const all = await sinks.all(db(), params.account_id);
        return runQuery(text, {
          accountId: params.account_id,
          sinks: all.map((d) => d.body),
          bucketRoot: service().bucketRoot,
          timeoutMs: 30_000,
        });
      },
    );
  }

  // ---- ingestion ----------------------------------------------------------------------------
  const hostPattern = new RegExp(`^([0-9a-f]{32})\\.${suffix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?::\\d+)?$`, 'i');
  const streamFromHost = (c: Context): string => {
    const m = hostPattern.exec(c.req.header('host') ?? '');
    if (!m) throw apiError('no_route');
    return m[1].toLowerCase();
  };
  const cors = (c: Context, s: StoredStream, res: Response): Response => {
    const origin = c.req.header('origin');
    const allowed = s.http.cors?.origins ?? [];
    if (origin && (allowed.includes('*') || allowed.includes(origin))) {
      res.headers.set('access-control-allow-origin', allowed.includes('*') ? '*' : origin);
      res.headers.set('vary', 'origin');
    }
    return res;
  };
  const lookup = async (id: string): Promise<{ accountId: string; stream: StoredStream }> => {
    const d = await streams.findById(db(), id);
    if (!d) throw pipelinesError('stream_not_found', id);
    if (!d.body.http.enabled) throw pipelinesError('ingest_disabled', `HTTP ingestion is disabled for stream ${id}; PATCH its http.enabled to true`);
    return { accountId: d.scopeId, stream: d.body };
  };
  const ingest = async (c: Context, id: string): Promise<Response> => {
    const { accountId, stream } = await lookup(id);
    if (stream.http.authentication) {
      const principal = await ctx.auth.authenticate(c.req.raw.headers, undefined);
      principal.require(PIPELINES_PERMISSION, 'edit', { accountId });
    }
    let body: Buffer;
    try {
      body = await readBody(c, MAX_REQUEST_BYTES);
    } catch (err) {
      if (err instanceof ApiError && err.status === 413) throw pipelinesError('ingest_too_large', `more than ${MAX_REQUEST_BYTES}`);
      throw err;
    }
    const n = await service().ingest(stream, body, { allowSingle: false, contentType: c.req.header('content-type') });
    return cors(c, stream, Response.json({ success: true, result: { committed: n }, errors: [], messages: [] }));
  };
  const preflight = async (c: Context, id: string): Promise<Response> => {
    const { stream } = await lookup(id);
    const res = cors(c, stream, new Response(null, { status: 204 }));
    if (res.headers.has('access-control-allow-origin')) {
      res.headers.set('access-control-allow-methods', 'POST, OPTIONS');
      res.headers.set('access-control-allow-headers', 'authorization, content-type');
      res.headers.set('access-control-max-age', '86400');
    }
    return res;
  };
  // Public to the router: each stream decides (http.authentication) and the handler checks it.
  const ingestSpec = { auth: 'public' as const, tags: ['pipelines ingest'] };
  for (const path of ['/', '/v1']) {
    ctx.router.add({ ...ingestSpec, method: 'POST', path, operationId: `pipelinesIngestHost${path.replace('/', '_')}`, summary: 'Ingests events (Host: <stream id>.<ingest host>)' }, async ({ c }: Req<unknown, unknown>) => raw(await ingest(c, streamFromHost(c))));
    ctx.router.add({ ...ingestSpec, method: 'OPTIONS', path, operationId: `pipelinesIngestHostPreflight${path.replace('/', '_')}`, summary: 'CORS preflight of the ingest endpoint' }, async ({ c }: Req<unknown, unknown>) => raw(await preflight(c, streamFromHost(c))));
  }
  ctx.router.add(
    { ...ingestSpec, method: 'POST', path: '/pipelines/ingest/:stream_id', params: idParam('stream_id'), operationId: 'pipelinesIngest', summary: 'Ingests events into a stream (path alias of its endpoint)' },
    async ({ c, params }: Req<unknown, unknown>) => raw(await ingest(c, params.stream_id)),
  );
  ctx.router.add(
    { ...ingestSpec, method: 'OPTIONS', path: '/pipelines/ingest/:stream_id', params: idParam('stream_id'), operationId: 'pipelinesIngestPreflight', summary: 'CORS preflight of the ingest alias' },
    async ({ c, params }: Req<unknown, unknown>) => raw(await preflight(c, params.stream_id)),
  );
  return {
    createStream,
    createSink,
    createPipeline,
    deleteStream,
    deleteSink,
    deletePipeline,
    run: (accountId, p) => service().run(accountId, p),
    endpointOf: (c, streamId) => endpointOf(c, suffix, streamId),
  };
}
