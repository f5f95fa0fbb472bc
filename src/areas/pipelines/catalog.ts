/**
 * The Iceberg REST catalog of a bucket's `r2_data_catalog` tables, at
 * `/catalog/{account_id}/{bucket}` (the catalog URI; clients append `v1/...`). It implements the
 * catalog calls engines need to find and read tables: config, namespaces (list, create, load,
 * exists, drop when empty), tables (list, create empty, load, exists, drop). Writes to tables come
 * from pipeline sinks only: a table commit (`POST …/tables/{t}`) is refused with 406.
 *
 * Auth: an Outpost API token with Pipelines Read (Pipelines Edit to create or drop), as the
 * `Authorization: Bearer` header catalog clients send. Errors use the catalog error model
 * `{error: {message, type, code}}`.
 */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { ApiError } from '../../core/errors.ts';
import { raw } from '../../core/router.ts';
import { Catalog, type IcebergType } from './iceberg.ts';
import { PIPELINES_PERMISSION } from './routes.ts';
import { catalogRoot } from './runner.ts';
import { CATALOG_NAME_PATTERN } from './schemas.ts';
import type { PipelinesService } from './service.ts';
import { sinks } from './store.ts';

const read = { permission: PIPELINES_PERMISSION, level: 'read' } as const;
const edit = { permission: PIPELINES_PERMISSION, level: 'edit' } as const;
const tags = ['pipelines catalog'];
const base = '/catalog/:account_id/:bucket/v1';

function icebergError(status: number, type: string, message: string): Response {
  return Response.json({ error: { message, type, code: status } }, { status });
}

/** A catalog error as the handler's answer (thrown errors become the envelope instead). */
class CatalogError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
  ) {
    super(message);
  }
}

const PRIMITIVES: IcebergType[] = ['boolean', 'int', 'long', 'float', 'double', 'string', 'binary', 'date', 'timestamp', 'timestamptz'];
const CreateTable = z.object({
  name: z.string().regex(CATALOG_NAME_PATTERN, 'name must be 1-128 letters, digits or underscores, starting with a letter or underscore'),
  schema: z.object({
    type: z.literal('struct').optional(),
    fields: z
      .array(z.object({ id: z.number().int().optional(), name: z.string().min(1).max(128), type: z.enum(PRIMITIVES, { error: `field type must be a primitive type: ${PRIMITIVES.join(', ')}` }), required: z.boolean().optional() }))
      .max(1000)
      .refine((f) => new Set(f.map((x) => x.name)).size === f.length, 'field names must be unique'),
  }),
  'partition-spec': z.object({ fields: z.array(z.unknown()).max(0, 'partitioned tables are not supported: send an empty partition-spec') }).passthrough().optional(),
  properties: z.record(z.string(), z.string()).optional(),
});
const CreateNamespace = z.object({
  namespace: z.array(z.string()).length(1, 'namespace must have exactly one level, e.g. ["default"]'),
  properties: z.record(z.string(), z.string()).optional(),
});

export function mountCatalogRoutes(ctx: AreaContext, service: () => PipelinesService): void {
  const catalogOf = (accountId: string, bucket: string) => {
    if (!/^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$/.test(bucket)) throw new CatalogError(400, 'BadRequestException', `${bucket} is not a bucket name (3-63 lowercase letters, digits or hyphens)`);
    return new Catalog(catalogRoot(service().bucketRoot, accountId, bucket));
  };
  const nsName = (c: Catalog, raw: string, mustExist = true): string => {
    // Multi-level namespaces arrive joined by 0x1F; this catalog has one level.
    if (!CATALOG_NAME_PATTERN.test(raw)) throw new CatalogError(400, 'BadRequestException', `${JSON.stringify(raw)} is not a namespace name (one level of letters, digits and underscores)`);
    if (mustExist && !c.hasNamespace(raw)) throw new CatalogError(404, 'NoSuchNamespaceException', `Namespace does not exist: ${raw}`);
    return raw;
  };
  const tableOf = (c: Catalog, ns: string, name: string) => {
    const t = CATALOG_NAME_PATTERN.test(name) ? c.table(ns, name) : undefined;
    if (!t?.exists()) throw new CatalogError(404, 'NoSuchTableException', `Table does not exist: ${ns}.${name}`);
    return t;
  };
  const loadResult = (t: ReturnType<Catalog['table']>) => {
    const { metadata, location } = t.metadata();
    return { 'metadata-location': location, metadata, config: {} };
  };
  /** Turns catalog errors and body validation errors into the catalog error model. */
  const answer = async (fn: () => Promise<unknown> | unknown, status = 200): Promise<Response> => {
    try {
      const out = await fn();
      if (out instanceof Response) return out;
      return out === undefined ? new Response(null, { status: 204 }) : Response.json(out, { status });
    } catch (err) {
      if (err instanceof CatalogError) return icebergError(err.status, err.type, err.message);
      if (err instanceof ApiError && err.status === 400) return icebergError(400, 'BadRequestException', err.errors.map((e) => e.message).join('; '));
      throw err;
    }
  };
  const parse = <T>(schema: z.ZodType<T>, buf: Buffer | undefined): T => {
    let value: unknown;
    try {
      value = JSON.parse(buf?.toString('utf8') ?? '');
    } catch {
      throw new CatalogError(400, 'BadRequestException', 'The body is not JSON: send a JSON object');
    }
    const r = schema.safeParse(value);
    if (!r.success) throw new CatalogError(400, 'BadRequestException', r.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; '));
    return r.data;
  };

  ctx.router.add({ method: 'GET', path: `${base}/config`, operationId: 'icebergConfig', summary: 'Iceberg REST catalog configuration', auth: read, tags }, async ({ params }) =>
    raw(await answer(() => (catalogOf(params.account_id, params.bucket), { defaults: {}, overrides: {} }))),
  );
  ctx.router.add({ method: 'GET', path: `${base}/namespaces`, operationId: 'icebergListNamespaces', summary: 'Lists namespaces', auth: read, tags }, async ({ params }) =>
    raw(await answer(() => ({ namespaces: catalogOf(params.account_id, params.bucket).namespaces().map((n) => [n]) }))),
  );
  ctx.router.add({ method: 'POST', path: `${base}/namespaces`, operationId: 'icebergCreateNamespace', summary: 'Creates a namespace', auth: edit, bodyType: 'raw', tags }, async ({ params, raw: body }) =>
    raw(
      await answer(() => {
        const c = catalogOf(params.account_id, params.bucket);
        const req = parse(CreateNamespace, body);
        const ns = nsName(c, req.namespace[0], false);
        if (!c.createNamespace(ns)) throw new CatalogError(409, 'AlreadyExistsException', `Namespace already exists: ${ns}`);
        return { namespace: [ns], properties: req.properties ?? {} };
      }),
    ),
  );
  ctx.router.add({ method: 'GET', path: `${base}/namespaces/:namespace`, operationId: 'icebergLoadNamespace', summary: 'Loads a namespace (HEAD: exists)', auth: read, tags }, async ({ params }) =>
    raw(await answer(() => ({ namespace: [nsName(catalogOf(params.account_id, params.bucket), params.namespace)], properties: {} }))),
  );
  ctx.router.add({ method: 'DELETE', path: `${base}/namespaces/:namespace`, operationId: 'icebergDropNamespace', summary: 'Drops an empty namespace', auth: edit, tags }, async ({ params }) =>
    raw(
      await answer(() => {
        const c = catalogOf(params.account_id, params.bucket);
        const ns = nsName(c, params.namespace);
        if (c.tables(ns).length > 0) throw new CatalogError(409, 'NamespaceNotEmptyException', `Namespace ${ns} still has tables: drop them first`);
        c.dropNamespace(ns);
        return undefined;
      }),
    ),
  );
  ctx.router.add({ method: 'GET', path: `${base}/namespaces/:namespace/tables`, operationId: 'icebergListTables', summary: 'Lists the tables of a namespace', auth: read, tags }, async ({ params }) =>
    raw(
      await answer(() => {
        const c = catalogOf(params.account_id, params.bucket);
        const ns = nsName(c, params.namespace);
        return { identifiers: c.tables(ns).map((name) => ({ namespace: [ns], name })) };
      }),
    ),
  );
  ctx.router.add({ method: 'POST', path: `${base}/namespaces/:namespace/tables`, operationId: 'icebergCreateTable', summary: 'Creates an empty, unpartitioned table', auth: edit, bodyType: 'raw', tags }, async ({ params, raw: body }) =>
    raw(
      await answer(async () => {
        const c = catalogOf(params.account_id, params.bucket);
        const ns = nsName(c, params.namespace);
        const req = parse(CreateTable, body);
        const t = c.table(ns, req.name);
        if (!(await t.create(req.schema.fields, req.properties))) throw new CatalogError(409, 'AlreadyExistsException', `Table already exists: ${ns}.${req.name}`);
        return loadResult(t);
      }),
    ),
  );
  ctx.router.add({ method: 'GET', path: `${base}/namespaces/:namespace/tables/:table`, operationId: 'icebergLoadTable', summary: 'Loads a table (HEAD: exists)', auth: read, tags }, async ({ params }) =>
    raw(
      await answer(() => {
        const c = catalogOf(params.account_id, params.bucket);
        return loadResult(tableOf(c, nsName(c, params.namespace), params.table));
      }),
    ),
  );
  ctx.router.add({ method: 'POST', path: `${base}/namespaces/:namespace/tables/:table`, operationId: 'icebergCommitTable', summary: 'Table commits (refused: tables are written by pipeline sinks)', auth: edit, tags }, async ({ params }) =>
    raw(
      await answer(() => {
        const c = catalogOf(params.account_id, params.bucket);
        tableOf(c, nsName(c, params.namespace), params.table);
        throw new CatalogError(406, 'UnsupportedOperationException', 'This catalog takes commits from pipeline sinks only: write to the table through an r2_data_catalog sink');
      }),
    ),
  );
  ctx.router.add(
    { method: 'DELETE', path: `${base}/namespaces/:namespace/tables/:table`, operationId: 'icebergDropTable', summary: 'Drops a table (purgeRequested=true deletes its files)', auth: edit, query: z.object({ purgeRequested: z.enum(['true', 'false']).optional() }), tags },
    async ({ params, query }) =>
      raw(
        await answer(async () => {
          const c = catalogOf(params.account_id, params.bucket);
          const ns = nsName(c, params.namespace);
          tableOf(c, ns, params.table);
          const writer = (await sinks.all(ctx.database.db, params.account_id)).find(
            (d) => d.body.type === 'r2_data_catalog' && d.body.config.bucket === params.bucket && (d.body.config.namespace ?? 'default') === ns && d.body.config.table_name === params.table,
          );
          if (writer) throw new CatalogError(409, 'CommitFailedException', `Sink ${writer.body.name} writes this table: delete the sink first`);
          c.dropTable(ns, params.table, query.purgeRequested === 'true');
          return undefined;
        }),
      ),
  );
}
