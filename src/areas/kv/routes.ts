/** Thin handlers for `/accounts/{account_id}/storage/kv/namespaces…`. */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { apiError, ApiError, CODES } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import { pageFrom, pageQuery } from '../../core/pagination.ts';
import { raw, type Req } from '../../core/router.ts';
import {
  checkKey,
  expirationOf,
  KvInputError,
  namespaces,
  type KvStore,
  type PutEntry,
  type StoredNamespace,
} from './store.ts';

export const KV_PERMISSION = 'workers_kv_storage';
const read = { permission: KV_PERMISSION, level: 'read' } as const;
const edit = { permission: KV_PERMISSION, level: 'edit' } as const;
const tags = ['kv'];
const nsParams = { namespace_id: 'hex32' } as const;
const keyParams = { namespace_id: 'hex32', key_name: 'any' } as const;

const ListQuery = z.object({
  ...pageQuery({ perPage: 20, min: 5, max: 1000 }),
  order: z.enum(['id', 'title']).optional(),
  direction: z.enum(['asc', 'desc']).optional(),
});
const TitleBody = z.object({
  title: z.string({ error: 'title is required' }).min(1, 'title must not be empty').max(512),
});
const KeysQuery = z.object({
  prefix: z.string().optional(),
  cursor: z.string().optional(),
  limit: z.coerce
    .number()
    .int()
    .min(10, 'limit must be at least 10')
    .max(1000, 'limit must be at most 1000')
    .optional(),
});
const WriteQuery = z.object({
  expiration: z.string().optional(),
  expiration_ttl: z.string().optional(),
});
const BulkWrite = z
  .array(
    z.object({
      key: z.string({ error: 'key is required' }),
      value: z.string({ error: 'value must be a string' }),
      base64: z.boolean().optional(),
      expiration: z.number().optional(),
      expiration_ttl: z.number().optional(),
      metadata: z.unknown().optional(),
    }),
  )
  .max(10_000, 'at most 10,000 pairs per request');
const BulkDelete = z.array(z.string()).max(10_000, 'at most 10,000 keys per request');
const BulkGet = z.object({
  keys: z.array(z.string()).min(1).max(100, 'at most 100 keys per request'),
  type: z.enum(['text', 'json']).optional(),
  withMetadata: z.boolean().optional(),
});

export const namespaceView = (n: StoredNamespace) => ({
  id: n.id,
  title: n.title,
  supports_url_encoding: n.supports_url_encoding,
});

function bad(err: unknown): never {
  if (err instanceof KvInputError) throw apiError('kv_invalid', err.message);
  throw err;
}

export function mountKvRoutes(ctx: AreaContext, store: KvStore): void {
  const { router, clock } = ctx;
  const db = ctx.database.db;
  const base = '/accounts/:account_id/storage/kv/namespaces';

  async function requireNs(req: Req<unknown, unknown>) {
    const doc = await namespaces.get(db, req.params.account_id, req.params.namespace_id);
    if (!doc) throw apiError('kv_namespace_not_found', req.params.namespace_id);
    return doc;
  }
  async function checkTitle(accountId: string, title: string, exceptId?: string) {
    const same = (await namespaces.findBy(db, 'title', title)).find(
      (d) => d.scopeId === accountId && d.id !== exceptId,
    );
    if (same) throw apiError('kv_namespace_exists', title);
  }
  const keyOf = (req: Req<unknown, unknown>) => {
    const key = req.params.key_name;
    try {
      checkKey(key);
    } catch (err) {
      bad(err);
    }
    return key;
  };

  router.add(
    {
      method: 'GET',
      path: base,
      operationId: 'workers-kv-namespace-list-namespaces',
      summary: 'List namespaces',
      auth: read,
      query: ListQuery,
      tags,
    },
    async (req) => {
      const q = req.query;
      const all = (await namespaces.all(db, req.params.account_id)).map((d) => d.body);
      const key = q.order ?? 'id';
      all.sort((a, b) => (a[key] < b[key] ? -1 : a[key] > b[key] ? 1 : 0));
      if (q.direction === 'desc') all.reverse();
      const start = (q.page - 1) * q.per_page;
      return pageFrom(all.slice(start, start + q.per_page).map(namespaceView), all.length, q);
    },
  );
  router.add(
    {
      method: 'POST',
      path: base,
      operationId: 'workers-kv-namespace-create-a-namespace',
      summary: 'Create a namespace',
      auth: edit,
      body: TitleBody,
      tags,
    },
    async (req) => {
      await checkTitle(req.params.account_id, req.body.title);
      const ns: StoredNamespace = {
        id: hexId(),
        title: req.body.title,
        supports_url_encoding: true,
      };
      await namespaces.insert(db, req.params.account_id, ns.id, ns, clock.now());
      return namespaceView(ns);
    },
  );
  router.add(
    {
      method: 'GET',
      path: `${base}/:namespace_id`,
      operationId: 'workers-kv-namespace-get-a-namespace',
      summary: 'Get a namespace',
      auth: read,
      params: nsParams,
      tags,
    },
    async (req) => namespaceView((await requireNs(req)).body),
  );
  router.add(
    {
      method: 'PUT',
      path: `${base}/:namespace_id`,
      operationId: 'workers-kv-namespace-rename-a-namespace',
      summary: 'Rename a namespace',
      auth: edit,
      body: TitleBody,
      params: nsParams,
      tags,
    },
    async (req) => {
      const doc = await requireNs(req);
      await checkTitle(req.params.account_id, req.body.title, doc.id);
      const next = { ...doc.body, title: req.body.title };
      await namespaces.update(db, doc, next, clock.now());
      return namespaceView(next);
    },
  );
  router.add(
    {
      method: 'DELETE',
      path: `${base}/:namespace_id`,
      operationId: 'workers-kv-namespace-remove-a-namespace',
      summary: 'Delete a namespace and its keys',
      auth: edit,
      params: nsParams,
      tags,
    },
    async (req) => {
      const doc = await requireNs(req);
      await namespaces.delete(db, req.params.account_id, doc.id);
      await store.deleteNamespace(doc.id);
      return {};
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${base}/:namespace_id/keys`,
      operationId: 'workers-kv-namespace-list-a-namespace-s-keys',
      summary: "List a namespace's keys",
      auth: read,
      query: KeysQuery,
      params: nsParams,
      tags,
    },
    async (req) => {
      const doc = await requireNs(req);
      const out = await store
        .list(doc.id, {
          prefix: req.query.prefix,
          cursor: req.query.cursor || undefined,
          limit: req.query.limit ?? 1000,
        })
        .catch(bad);
      return raw(
        Response.json({
          success: true,
          errors: [],
          messages: [],
          result: out.keys,
          result_info: { count: out.keys.length, cursor: out.cursor ?? '' },
        }),
      );
    },
  );

  const valuePath = `${base}/:namespace_id/values/:key_name`;
  router.add(
    {
      method: 'GET',
      path: valuePath,
      operationId: 'workers-kv-namespace-read-key-value-pair',
      summary: 'Read a value',
      auth: read,
      params: keyParams,
      tags,
    },
    async (req) => {
      const doc = await requireNs(req);
      const entry = await store.get(doc.id, keyOf(req));
      if (!entry) throw apiError('kv_key_not_found');
      const headers: Record<string, string> = { 'content-type': 'application/octet-stream' };
      if (entry.expiration !== null) headers.expiration = String(entry.expiration);
      return raw(new Response(entry.value as Uint8Array<ArrayBuffer>, { headers }));
    },
  );
  router.add(
    {
      method: 'PUT',
      path: valuePath,
      operationId: 'workers-kv-namespace-write-key-value-pair-with-metadata',
      summary: 'Write a value (raw body, or multipart value + metadata)',
      auth: edit,
      query: WriteQuery,
      bodyType: 'raw',
      params: keyParams,
      tags,
    },
    async (req) => {
      const doc = await requireNs(req);
      const key = keyOf(req);
      const body = req.raw ?? Buffer.alloc(0);
      const type = req.c.req.header('content-type') ?? '';
      let value: Uint8Array = body;
      let metadata: unknown;
      if (/^multipart\/form-data/i.test(type)) {
        const { parseMultipart } = await import('../../core/multipart.ts');
        const form = parseMultipart(type, body);
        const file = form.files.find((f) => f.field === 'value');
        const field = form.fields.value;
        if (file) value = file.data;
        else if (typeof field === 'string') value = Buffer.from(field, 'utf8');
        else throw apiError('kv_invalid', 'the multipart body needs a "value" part');
        const metaField = form.fields.metadata;
        if (typeof metaField === 'string') {
          try {
            metadata = JSON.parse(metaField) as unknown;
          } catch {
            throw apiError('kv_invalid', 'the "metadata" part is not valid JSON');
          }
        } else if (Object.keys(form.metadata).length > 0) metadata = form.metadata;
      }
      let expiration: number | null;
      try {
        expiration = expirationOf(
          store.nowSeconds(),
          req.query.expiration,
          req.query.expiration_ttl,
        );
        await store.put(doc.id, [{ key, value, metadata, expiration }]);
      } catch (err) {
        bad(err);
      }
      return {};
    },
  );
  router.add(
    {
      method: 'DELETE',
      path: valuePath,
      operationId: 'workers-kv-namespace-delete-key-value-pair',
      summary: 'Delete a value',
      auth: edit,
      params: keyParams,
      tags,
    },
    async (req) => {
      const doc = await requireNs(req);
      await store.delete(doc.id, [keyOf(req)]);
      return {};
    },
  );
  router.add(
    {
      method: 'GET',
      path: `${base}/:namespace_id/metadata/:key_name`,
      operationId: 'workers-kv-namespace-read-the-metadata-for-a-key',
      summary: "A key's metadata",
      auth: read,
      params: keyParams,
      tags,
    },
    async (req) => {
      const doc = await requireNs(req);
      const entry = await store.get(doc.id, keyOf(req));
      if (!entry) throw apiError('kv_key_not_found');
      return entry.metadata;
    },
  );

  const bulkWrite = async (req: Req<z.infer<typeof BulkWrite>, unknown>) => {
    const doc = await requireNs(req);
    const now = store.nowSeconds();
    const entries: PutEntry[] = [];
    try {
      for (const [i, e] of req.body.entries()) {
        if (e.base64 && !/^[A-Za-z0-9+/]*={0,2}$/.test(e.value))
          throw new KvInputError(`${i}.value is not valid base64`);
        entries.push({
          key: e.key,
          value: e.base64 ? Buffer.from(e.value, 'base64') : Buffer.from(e.value, 'utf8'),
          metadata: e.metadata,
          expiration: expirationOf(now, e.expiration, e.expiration_ttl),
        });
      }
      await store.put(doc.id, entries);
    } catch (err) {
      bad(err);
    }
    return { successful_key_count: entries.length, unsuccessful_keys: [] };
  };
  router.add(
    {
      method: 'PUT',
      path: `${base}/:namespace_id/bulk`,
      operationId: 'workers-kv-namespace-write-multiple-key-value-pairs',
      summary: 'Write many pairs',
      auth: edit,
      body: BulkWrite,
      params: nsParams,
      tags,
    },
    bulkWrite,
  );
  const bulkDelete = async (req: Req<z.infer<typeof BulkDelete>, unknown>) => {
    const doc = await requireNs(req);
    await store.delete(doc.id, req.body);
    return { successful_key_count: req.body.length, unsuccessful_keys: [] };
  };
  router.add(
    {
      method: 'POST',
      path: `${base}/:namespace_id/bulk/delete`,
      operationId: 'workers-kv-namespace-delete-multiple-key-value-pairs',
      summary: 'Delete many keys',
      auth: edit,
      body: BulkDelete,
      params: nsParams,
      tags,
    },
    bulkDelete,
  );
  router.add(
    {
      method: 'DELETE',
      path: `${base}/:namespace_id/bulk`,
      operationId: 'workers-kv-namespace-delete-multiple-key-value-pairs-deprecated',
      summary: 'Delete many keys (older form)',
      auth: edit,
      body: BulkDelete,
      params: nsParams,
      tags,
    },
    bulkDelete,
  );
  router.add(
    {
      method: 'POST',
      path: `${base}/:namespace_id/bulk/get`,
      operationId: 'workers-kv-namespace-get-multiple-key-value-pairs',
      summary: 'Read many values',
      auth: read,
      body: BulkGet,
      params: nsParams,
      tags,
    },
    async (req) => {
      const doc = await requireNs(req);
      const values: Record<string, unknown> = {};
      for (const key of req.body.keys) {
        const entry = await store.get(doc.id, key);
        let value: unknown = null;
        if (entry) {
          const text = Buffer.from(entry.value).toString('utf8');
          if (req.body.type === 'json') {
            try {
              value = JSON.parse(text) as unknown;
            } catch {
              throw new ApiError(400, [
                {
                  code: CODES.kv_invalid.code,
                  message: `the value of ${JSON.stringify(key)} is not JSON`,
                },
              ]);
            }
          } else value = text;
        }
        values[key] = req.body.withMetadata ? { value, metadata: entry?.metadata ?? null } : value;
      }
      return { values };
    },
  );
}
