/** Thin handlers for `/accounts/{account_id}/images/…`, the one-time upload URL and delivery. */
import { z } from 'zod';
import { unlink } from 'node:fs/promises';
import type { AreaContext } from '../../core/area.ts';
import { apiError, ApiError } from '../../core/errors.ts';
import { parseJsonBody } from '../../core/json.ts';
import { ok } from '../../core/envelope.ts';
import { parseMultipart } from '../../core/multipart.ts';
import { raw, type Req } from '../../core/router.ts';
import { qInt, qString } from '../../core/validate.ts';
import type { Delivery } from './delivery.ts';
import { cacheDirOf } from './delivery.ts';
import { MultipartError, readMultipartStream, type StreamedForm } from './multipart.ts';
import { OptionError, setOption, type TransformOptions } from './options.ts';
import {
  checkCustomId,
  encodeId,
  MAX_IMAGE_BYTES,
  parseBool,
  parseCreator,
  parseMeta,
  type ImageService,
  type UploadFields,
} from './service.ts';
import { accountHash, type StoredVariant } from './store.ts';
import { CONTENT_TYPES } from './transform.ts';

export const IMAGES_PERMISSION = 'images';
const read = { permission: IMAGES_PERMISSION, level: 'read' } as const;
const edit = { permission: IMAGES_PERMISSION, level: 'edit' } as const;
const tags = ['images'];
const ID_PARAM = { image_id: 'any' } as const;

const V1List = z.object({
  page: qInt(z.number().int().min(1)).default(1),
  per_page: qInt(z.number().int().min(10).max(10000)).default(1000),
  creator: qString().optional(),
});
const V2List = z.object({
  continuation_token: qString().optional(),
  per_page: qInt(z.number().int().min(10).max(10000)).default(1000),
  sort_order: qString(z.enum(['asc', 'desc'])).optional(),
  creator: qString().optional(),
});
const PatchBody = z
  .object({
    metadata: z.record(z.string(), z.unknown()).optional(),
    requireSignedURLs: z.boolean().optional(),
    creator: z.string().max(1024).nullable().optional(),
  })
  .strict();
const VariantOptionsBody = z
  .object({
    fit: z.enum(['scale-down', 'contain', 'cover', 'crop', 'pad']),
    width: z.number().int().min(1).max(12000),
    height: z.number().int().min(1).max(12000),
    metadata: z.enum(['keep', 'copyright', 'none']),
  })
  .strict();
const VariantBody = z.object({
  id: z.string().regex(/^[a-zA-Z0-9]{1,99}$/, 'variant ids are 1-99 letters and digits'),
  options: VariantOptionsBody,
  neverRequireSignedURLs: z.boolean().optional(),
});
const VariantPatch = z.object({ options: VariantOptionsBody, neverRequireSignedURLs: z.boolean().optional() });

const accountOf = (req: Req<unknown, unknown>) => req.params.account_id;

export function mountImageRoutes(ctx: AreaContext, images: ImageService, delivery: Delivery): void {
  const { router, clock } = ctx;
  const store = images.store;
  const base = (req: Req<unknown, unknown>) => images.deliveryBase(req.c.req.url, req.c.req.header('host'));

  /** Reads the streamed upload form, mapping its failures to the image errors. */
  const readUpload = async (req: Req<unknown, unknown>): Promise<StreamedForm> => {
    const body = req.c.req.raw.body;
    if (!body) throw apiError('image_invalid', 'expected a multipart/form-data body with a file or url field');
    let form: StreamedForm;
    try {
      form = await readMultipartStream(req.c.req.header('content-type'), body as unknown as AsyncIterable<Uint8Array>, {
        tmpDir: images.tmpDir,
        maxFileBytes: MAX_IMAGE_BYTES,
      });
    } catch (err) {
      if (err instanceof MultipartError) throw apiError('image_invalid', err.message);
      throw err;
    }
    if (form.tooLarge) throw apiError('image_too_large', 'the file is over 100 MB (104857600 bytes)');
    return form;
  };
  const fieldsOf = (input: Record<string, unknown>): UploadFields => {
    const f = withBracketMetadata(input);
    return {
    id: f.id === undefined || f.id === '' ? undefined : checkCustomId(String(f.id)),
    metadata: parseMeta(f.metadata),
    requireSignedURLs: parseBool('requireSignedURLs', f.requireSignedURLs),
    creator: parseCreator(f.creator),
    };
  };

  // --- upload -------------------------------------------------------------------------------
  router.add(
    { method: 'POST', path: '/accounts/:account_id/images/v1', operationId: 'uploadImage', summary: 'Upload an image (multipart file or url)', auth: edit, tags },
    async (req) => {
      const form = await readUpload(req);
      const temp = form.file?.path;
      try {
        const fields = fieldsOf(form.fields);
        const url = form.fields.url;
        if (form.file && url) throw apiError('image_invalid', 'send either file or url, not both');
        if (!form.file && !url) throw apiError('image_invalid', 'a file or url field is required');
        let path: string;
        let filename: string;
        if (form.file) {
          path = form.file.path;
          filename = form.file.filename;
        } else {
          ({ path, filename } = await images.fetchToTemp(url));
        }
        const doc = await images.createRecord(accountOf(req), fields.id ?? images.newId(), filename, fields, path);
        return images.view(accountOf(req), doc, base(req));
      } finally {
        if (temp) await unlink(temp).catch(() => {});
      }
    },
  );

  // --- variants, keys, stats (before `/v1/:image_id`, which would match them) -------------------
  const variantView = (v: StoredVariant) => ({ id: v.id, options: v.options, neverRequireSignedURLs: v.neverRequireSignedURLs });
  router.add(
    { method: 'GET', path: '/accounts/:account_id/images/v1/variants', operationId: 'listImageVariants', summary: 'List variants', auth: read, tags },
    async (req) => ({ variants: Object.fromEntries((await store.variants(accountOf(req))).map((v) => [v.id, variantView(v)])) }),
  );
  router.add(
    { method: 'POST', path: '/accounts/:account_id/images/v1/variants', operationId: 'createImageVariant', summary: 'Create a variant', auth: edit, body: VariantBody, tags },
    async (req) => {
      const v = await store.putVariant(accountOf(req), { id: req.body.id, options: req.body.options, neverRequireSignedURLs: req.body.neverRequireSignedURLs ?? false }, 'create');
      return { variant: variantView(v) };
    },
  );
  router.add(
    { method: 'GET', path: '/accounts/:account_id/images/v1/variants/:variant_id', operationId: 'getImageVariant', summary: 'Get a variant', auth: read, params: { variant_id: 'any' }, tags },
    async (req) => {
      const v = await store.variant(accountOf(req), req.params.variant_id);
      if (!v) throw apiError('image_variant_not_found', req.params.variant_id);
      return { variant: variantView(v) };
    },
  );
  router.add(
    { method: 'PATCH', path: '/accounts/:account_id/images/v1/variants/:variant_id', operationId: 'updateImageVariant', summary: 'Update a variant', auth: edit, body: VariantPatch, params: { variant_id: 'any' }, tags },
    async (req) => {
      const prev = await store.variant(accountOf(req), req.params.variant_id);
      if (!prev) throw apiError('image_variant_not_found', req.params.variant_id);
      const v = await store.putVariant(
        accountOf(req),
        { id: prev.id, options: req.body.options, neverRequireSignedURLs: req.body.neverRequireSignedURLs ?? prev.neverRequireSignedURLs },
        'update',
      );
      return { variant: variantView(v) };
    },
  );
  router.add(
    { method: 'DELETE', path: '/accounts/:account_id/images/v1/variants/:variant_id', operationId: 'deleteImageVariant', summary: 'Delete a variant', auth: edit, params: { variant_id: 'any' }, tags },
    async (req) => {
      await store.deleteVariant(accountOf(req), req.params.variant_id);
      return {};
    },
  );
  router.add(
    { method: 'GET', path: '/accounts/:account_id/images/v1/keys', operationId: 'listImageKeys', summary: 'List signing keys', auth: read, tags },
    async (req) => ({ keys: await store.keys(accountOf(req)) }),
  );
  const keyName = (name: string) => {
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(name)) throw apiError('image_invalid', `key name ${JSON.stringify(name)} is invalid: use 1-64 letters, digits, _ and -`);
    return name;
  };
  router.add(
    { method: 'PUT', path: '/accounts/:account_id/images/v1/keys/:signing_key_name', operationId: 'putImageKey', summary: 'Create or rotate a signing key', auth: edit, params: { signing_key_name: 'any' }, tags },
    async (req) => ({ keys: await store.putKey(accountOf(req), keyName(req.params.signing_key_name)) }),
  );
  router.add(
    { method: 'DELETE', path: '/accounts/:account_id/images/v1/keys/:signing_key_name', operationId: 'deleteImageKey', summary: 'Delete a signing key', auth: edit, params: { signing_key_name: 'any' }, tags },
    async (req) => ({ keys: await store.deleteKey(accountOf(req), req.params.signing_key_name) }),
  );
  router.add(
    { method: 'GET', path: '/accounts/:account_id/images/v1/stats', operationId: 'getImageStats', summary: 'Image count and allowance', auth: read, tags },
    async (req) => ({ count: { allowed: 100000, current: await store.counts(accountOf(req)) } }),
  );

  // --- lists --------------------------------------------------------------------------------
  router.add(
    { method: 'GET', path: '/accounts/:account_id/images/v1', operationId: 'listImages', summary: 'List images (deprecated page form)', auth: read, query: V1List, tags },
    async (req) => {
      const a = accountOf(req);
      const { items } = await store.list(a, { offset: (req.query.page - 1) * req.query.per_page, limit: req.query.per_page, creator: req.query.creator });
      const b = base(req);
      const list = await Promise.all(items.map((d) => images.view(a, d, b)));
      // The spec's `images`; the official client pages over `items`.
      return { images: list, items: list };
    },
  );
  router.add(
    { method: 'GET', path: '/accounts/:account_id/images/v2', operationId: 'listImagesV2', summary: 'List images (cursor)', auth: read, query: V2List, tags },
    async (req) => {
      const a = accountOf(req);
      let offset = 0;
      if (req.query.continuation_token) {
        const m = /^o(\d{1,9})$/.exec(Buffer.from(req.query.continuation_token, 'base64url').toString('latin1'));
        if (!m) throw apiError('image_invalid', 'continuation_token is not one this server issued');
        offset = Number(m[1]);
      }
      const limit = req.query.per_page;
      const { items, total } = await store.list(a, { offset, limit, creator: req.query.creator, desc: req.query.sort_order === 'desc' });
      const b = base(req);
      const list = await Promise.all(items.map((d) => images.view(a, d, b)));
      const next = offset + items.length < total ? Buffer.from(`o${offset + items.length}`).toString('base64url') : null;
      return { images: list, continuation_token: next };
    },
  );

  // --- direct upload ------------------------------------------------------------------------
  router.add(
    { method: 'POST', path: '/accounts/:account_id/images/v2/direct_upload', operationId: 'createDirectUpload', summary: 'Create a one-time upload URL', auth: edit, bodyType: 'raw', tags },
    async (req) => {
      const buf = req.raw ?? Buffer.alloc(0);
      const type = req.c.req.header('content-type') ?? '';
      let f: Record<string, unknown> = {};
      if (buf.length > 0) {
        if (/multipart\//i.test(type) || buf.subarray(0, 2).toString() === '--') {
          const form = parseMultipart(type, buf);
          f = { ...form.fields, ...(Object.keys(form.metadata).length > 0 ? { metadata: form.metadata } : {}) };
        } else if (/urlencoded/i.test(type)) {
          f = Object.fromEntries(new URLSearchParams(buf.toString('utf8')));
        } else {
          f = parseJsonBody(buf) as Record<string, unknown>;
          if (typeof f !== 'object' || f === null || Array.isArray(f)) throw apiError('image_invalid', 'expected a JSON object');
        }
      }
      for (const k of Object.keys(f)) {
        if (!['requireSignedURLs', 'metadata', 'expiry', 'id', 'creator'].includes(k)) throw apiError('image_invalid', `${k}: unknown field (allowed: requireSignedURLs, metadata, expiry, id, creator)`);
      }
      const fields = fieldsOf(f);
      const now = clock.now().getTime();
      let expires = now + 30 * 60_000;
      if (f.expiry !== undefined && f.expiry !== '') {
        const t = Date.parse(String(f.expiry));
        if (!Number.isFinite(t)) throw apiError('image_invalid', `expiry: ${JSON.stringify(f.expiry)} is not a date`);
        if (t < now + 2 * 60_000 || t > now + 6 * 3600_000) throw apiError('image_invalid', 'expiry must be between 2 minutes and 6 hours from now');
        expires = t;
      }
      const a = accountOf(req);
      const id = fields.id ?? images.newId();
      await store.insert(a, {
        id,
        filename: '',
        uploaded: clock.now().toISOString(),
        requireSignedURLs: fields.requireSignedURLs ?? false,
        meta: fields.metadata ?? {},
        creator: fields.creator ?? null,
        draft: true,
        expires: new Date(expires).toISOString(),
      });
      return { id, uploadURL: `${images.uploadBase(req.c.req.url, req.c.req.header('host'))}/${accountHash(a)}/${encodeId(id)}` };
    },
  );

  // --- one image (ids may contain `/`) --------------------------------------------------------
  router.add(
    { method: 'GET', path: '/accounts/:account_id/images/v1/:image_id{.+}/blob', operationId: 'getImageBlob', summary: 'The original bytes', auth: read, params: ID_PARAM, tags },
    async (req) => {
      const doc = await store.require(accountOf(req), req.params.image_id);
      const data = await images.blobs.get(doc.body.blob!);
      if (!data) throw apiError('image_not_found', doc.body.id);
      return raw(new Response(bytes(data), { headers: { 'content-type': CONTENT_TYPES[doc.body.format ?? ''] ?? 'application/octet-stream', 'content-length': String(data.length) } }));
    },
  );
  router.add(
    { method: 'GET', path: '/accounts/:account_id/images/v1/:image_id{.+}', operationId: 'getImage', summary: 'Image details', auth: read, params: ID_PARAM, tags },
    async (req) => {
      const doc = await store.get(accountOf(req), req.params.image_id);
      if (!doc) throw apiError('image_not_found', req.params.image_id);
      return images.view(accountOf(req), doc, base(req));
    },
  );
  router.add(
    { method: 'PATCH', path: '/accounts/:account_id/images/v1/:image_id{.+}', operationId: 'updateImage', summary: 'Update metadata, signing or creator', auth: edit, params: ID_PARAM, body: PatchBody, tags },
    async (req) => {
      const doc = await store.require(accountOf(req), req.params.image_id);
      const next = { ...doc.body };
      if (req.body.metadata !== undefined) next.meta = req.body.metadata;
      if (req.body.requireSignedURLs !== undefined) next.requireSignedURLs = req.body.requireSignedURLs;
      if (req.body.creator !== undefined) next.creator = req.body.creator;
      return images.view(accountOf(req), await store.update(doc, next), base(req));
    },
  );
  router.add(
    { method: 'DELETE', path: '/accounts/:account_id/images/v1/:image_id{.+}', operationId: 'deleteImage', summary: 'Delete an image', auth: edit, params: ID_PARAM, tags },
    async (req) => {
      const a = accountOf(req);
      const doc = await store.get(a, req.params.image_id);
      if (!doc) throw apiError('image_not_found', req.params.image_id);
      await store.delete(a, doc.body.id);
      if (doc.body.blob) await images.blobs.delete(doc.body.blob).catch(() => {});
      await delivery.forget(a, doc.body.id);
      return {};
    },
  );

  // --- the one-time upload URL and delivery (no token) ----------------------------------------
  router.add(
    { method: 'POST', path: '/:account_hash{[A-Za-z0-9_-]{22}}/:image_id{.+}', operationId: 'directUpload', summary: 'One-time upload to a direct upload URL', auth: 'public', params: { account_hash: 'any', image_id: 'any' }, tags },
    async (req) => {
      const cors = { 'access-control-allow-origin': '*' };
      try {
        const a = await store.accountOfHash(req.params.account_hash);
        const id = req.params.image_id;
        const doc = a ? await store.get(a, id) : undefined;
        if (!a || !doc || !doc.body.draft) throw apiError('image_upload_url_invalid', 'was already used or does not exist');
        if (Date.parse(doc.body.expires ?? '') < clock.now().getTime()) throw apiError('image_upload_url_invalid', 'has expired');
        const form = await readUpload(req);
        try {
          if (!form.file) throw apiError('image_invalid', 'a file field is required');
          const facts = await images.ingest(a, id, form.file.path);
          let updated;
          try {
            updated = await store.update(doc, { ...doc.body, ...facts, filename: form.file.filename.slice(0, 255), uploaded: clock.now().toISOString(), draft: false, expires: undefined });
          } catch (err) {
            await images.blobs.delete(facts.blob!).catch(() => {});
            throw apiError('image_upload_url_invalid', `was used by a concurrent upload (${(err as Error).message})`);
          }
          return raw(Response.json(ok(await images.view(a, updated, base(req))), { headers: cors }));
        } finally {
          if (form.file) await unlink(form.file.path).catch(() => {});
        }
      } catch (err) {
        if (err instanceof ApiError) throw new ApiError(err.status, err.errors, { ...err.headers, ...cors });
        throw err;
      }
    },
  );
  const deliver = async (req: Req<unknown, unknown>, prefix: string) => {
    const url = new URL(req.c.req.url);
    const pathname = url.pathname;
    const at = pathname.indexOf(`/${req.params.account_hash}/`);
    const path = pathname.slice(at);
    const signedPaths = [...new Set([path, pathname, `${prefix}${path}`])];
    const r = await delivery.serve(path, url.search, req.c.req.raw.headers, clock.now().getTime(), signedPaths);
    return raw(new Response(r.status === 304 ? null : typeof r.body === 'string' ? r.body : bytes(r.body), { status: r.status, headers: r.headers }));
  };
  router.add(
    { method: 'GET', path: '/cdn-cgi/imagedelivery/:account_hash{[A-Za-z0-9_-]{22}}/:rest{.+}', operationId: 'deliverImageZonePath', summary: 'Image delivery (zone path form)', auth: 'public', params: { account_hash: 'any', rest: 'any' }, tags },
    async (req) => deliver(req, '/cdn-cgi/imagedelivery'),
  );
  router.add(
    { method: 'GET', path: '/:account_hash{[A-Za-z0-9_-]{22}}/:rest{.+}', operationId: 'deliverImage', summary: 'Image delivery: /<account_hash>/<image_id>/<variant or options>', auth: 'public', params: { account_hash: 'any', rest: 'any' }, tags },
    async (req) => deliver(req, ''),
  );
}

/** Parses the binding's / edge's option objects; OptionError → 5403. */
export function optionsFromObject(obj: Record<string, unknown>): TransformOptions {
  const out: TransformOptions = {};
  try {
    for (const [k, v] of Object.entries(obj)) if (v !== undefined) setOption(out, k, v);
  } catch (err) {
    if (err instanceof OptionError) throw apiError('image_invalid_transform', err.message);
    throw err;
  }
  return out;
}

export { cacheDirOf };

function bytes(b: Buffer): Uint8Array<ArrayBuffer> {
  return new Uint8Array(b.buffer as ArrayBuffer, b.byteOffset, b.byteLength);
}

/** Folds the official client's `metadata[a][b]=v` fields into one `metadata` object. */
function withBracketMetadata(f: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  let meta: Record<string, unknown> | undefined;
  for (const [k, v] of Object.entries(f)) {
    const m = /^metadata((?:\[[^\]]*\])+)$/.exec(k);
    if (!m) {
      out[k] = v;
      continue;
    }
    meta ??= {};
    const path = [...m[1].matchAll(/\[([^\]]*)\]/g)].map((x) => x[1]);
    let node = meta;
    for (let i = 0; i < path.length; i++) {
      const key = path[i];
      if (key === '' || key === '__proto__' || key === 'constructor' || key === 'prototype') break;
      if (i === path.length - 1) node[key] = v;
      else node = (typeof node[key] === 'object' && node[key] !== null ? node[key] : (node[key] = {})) as Record<string, unknown>;
    }
  }
  if (meta && out.metadata === undefined) out.metadata = meta;
  return out;
}
