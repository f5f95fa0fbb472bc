/**
 * Delivery: `/<account_hash>/<image_id>/<variant | options>` (on the API port, whatever the
 * Host; also under `/cdn-cgi/imagedelivery/`). Named variants apply their stored options; an
 * options segment (`w=400,fit=cover`) is a flexible variant, refused for images that require
 * signed URLs. Signed URLs carry `exp` (unix seconds) and `sig` = hex HMAC-SHA256 with one of the
 * account's signing keys over `<pathname>?<query without sig>`.
 *
 * Results are cached on disk under (image, its stored blob, options, output format): a new upload
 * under the same id has another blob, and the record is looked up before the cache, so a deleted
 * image is never served from it; deleting an image also removes its cache directory.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { BlobStore } from '../../core/storage/blobs.ts';
import type { Logger } from '../../core/log.ts';
import { OptionError, canonical, parseOptionString, type TransformOptions } from './options.ts';
import type { ImageService } from './service.ts';
import type { StoredImage } from './store.ts';
import { CONTENT_TYPES, chooseFormat, transformImage } from './transform.ts';

export interface DeliveryResult {
  status: number;
  headers: Record<string, string>;
  body: Buffer | string;
}

const fail = (status: number, code: number, message: string): DeliveryResult => ({
  status,
  headers: { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store', 'cf-images-error': String(code) },
  body: `ERROR ${code}: ${message}\n`,
});

export function cacheDirOf(accountId: string, imageId: string): string {
  return `cache/${accountId}/${createHash('sha256').update(imageId).digest('hex')}`;
}

export class Delivery {
  private readonly inflight = new Map<string, Promise<{ data: Buffer; contentType: string }>>();

  constructor(
    private readonly images: ImageService,
    private readonly cache: BlobStore,
    private readonly log: Logger,
  ) {}

  /**
   * Serves one delivery request. `path` is from the hash on (`/<hash>/<id>/<variant>`), `search`
   * the raw query string; `signedPaths` the pathnames a signature may cover.
   */
  async serve(path: string, search: string, headers: Headers, nowMs: number, signedPaths: string[]): Promise<DeliveryResult> {
    const parts = path.split('/').slice(1);
    if (parts.length < 3) return fail(404, 5404, 'expected /<account_hash>/<image_id>/<variant or options>');
    const [hash] = parts;
    let id: string;
    let last: string;
    try {
      id = parts.slice(1, -1).map(decodeURIComponent).join('/');
      last = decodeURIComponent(parts[parts.length - 1]);
    } catch {
      return fail(400, 5403, 'the path is not valid percent-encoding');
    }
    const store = this.images.store;
    const accountId = await store.accountOfHash(hash);
    if (!accountId) return fail(404, 5404, 'Image not found');
    const doc = await store.get(accountId, id);
    if (!doc || doc.body.draft || !doc.body.blob) return fail(404, 5404, 'Image not found');
    const image = doc.body;

    let options: TransformOptions;
    let neverSigned = false;
    if (last.includes('=')) {
      if (image.requireSignedURLs) return fail(403, 5403, 'flexible variants are not allowed for images that require signed URLs; use a named variant');
      try {
        options = parseOptionString(last);
      } catch (err) {
        if (err instanceof OptionError) return fail(400, 5403, `invalid transform option ${err.message}`);
        throw err;
      }
    } else {
      const variant = await store.variant(accountId, last);
      if (!variant) return fail(404, 5404, `Variant ${last} not found`);
      neverSigned = variant.neverRequireSignedURLs;
      options = { ...variant.options };
    }

    const signed = image.requireSignedURLs && !neverSigned;
    let expires: number | undefined;
    if (signed) {
      const check = await this.verify(accountId, search, signedPaths, nowMs);
      if (typeof check === 'string') return fail(403, 5403, check);
      expires = check;
    }

    const format = chooseFormat(options, image.format ?? 'png', headers.get('accept') ?? undefined);
    const untouched = Object.keys(options).length === 0 && image.format === 'svg';
    const key = createHash('sha256').update(`${image.blob}\n${canonical(options)}\n${format}`).digest('hex').slice(0, 40);
    const etag = `"${key}"`;
    const cacheControl = signed
      ? `private, max-age=${Math.max(0, Math.min(86400, Math.floor((expires! * 1000 - nowMs) / 1000)))}`
      : 'public, max-age=86400';
    const common: Record<string, string> = { etag, 'cache-control': cacheControl, vary: 'Accept' };
    if (headers.get('if-none-match')?.split(',').some((t) => t.trim().replace(/^W\//, '') === etag)) {
      return { status: 304, headers: common, body: '' };
    }
    if (untouched) {
      const data = await this.images.blobs.get(image.blob!);
      if (!data) return fail(404, 5404, 'Image not found');
      return { status: 200, headers: { ...common, 'content-type': CONTENT_TYPES.svg }, body: data };
    }
    try {
      const out = await this.render(accountId, image, options, format, key);
      return { status: 200, headers: { ...common, 'content-type': out.contentType }, body: out.data };
    } catch (err) {
      this.log.warn({ err, image: id }, 'image transform failed');
      return fail(415, 5400, `the stored image could not be transformed: ${(err as Error).message}`);
    }
  }

  /** Drops every cached result of an image (after it is deleted). */
  async forget(accountId: string, imageId: string): Promise<void> {
    await this.cache.deletePrefix(cacheDirOf(accountId, imageId)).catch((err: unknown) => this.log.warn({ err }, 'image cache removal failed'));
  }

  /** Transformed bytes from the disk cache, or rendered once (concurrent requests share it). */
  private async render(accountId: string, image: StoredImage, options: TransformOptions, format: ReturnType<typeof chooseFormat>, key: string) {
    const cacheKey = `${cacheDirOf(accountId, image.id)}/${key}.${format}`;
    const hit = await this.cache.get(cacheKey);
    if (hit && hit.length > 0) return { data: hit, contentType: CONTENT_TYPES[format] };
    let p = this.inflight.get(cacheKey);
    if (!p) {
      p = (async () => {
        const out = await transformImage(this.images.blobs.path(image.blob!), options, { format });
        await this.cache.put(cacheKey, out.data, { sync: false }).catch((err: unknown) => this.log.warn({ err }, 'image cache write failed'));
        return { data: out.data, contentType: out.contentType };
      })();
      this.inflight.set(cacheKey, p);
      p.finally(() => this.inflight.delete(cacheKey)).catch(() => {});
    }
    return p;
  }

  /** Unix expiry of a valid signature, or why it is not valid. */
  private async verify(accountId: string, search: string, paths: string[], nowMs: number): Promise<number | string> {
    const params = new URLSearchParams(search);
    const sig = params.get('sig');
    const exp = params.get('exp');
    if (!sig) return 'this image requires a signed URL (exp and sig query parameters)';
    if (exp !== null) {
      if (!/^\d+$/.test(exp)) return 'exp must be a unix time in seconds';
      if (Number(exp) * 1000 < nowMs) return 'the signed URL has expired';
    }
    params.delete('sig');
    const query = params.toString();
    const keys = await this.images.store.keys(accountId);
    let given: Buffer;
    try {
      given = Buffer.from(sig, 'hex');
    } catch {
      return 'sig is not hex';
    }
    for (const k of keys) {
      for (const p of paths) {
        const want = createHmac('sha256', k.value).update(`${p}?${query}`).digest();
        if (given.length === want.length && timingSafeEqual(given, want)) return exp === null ? Math.floor(nowMs / 1000) + 86400 : Number(exp);
      }
    }
    return 'the signature does not match';
  }
}

/** Signs a delivery path the way clients do (tests and docs use this). */
export function signPath(key: string, pathname: string, expSeconds: number): string {
  const query = new URLSearchParams({ exp: String(expSeconds) }).toString();
  const sig = createHmac('sha256', key).update(`${pathname}?${query}`).digest('hex');
  return `${pathname}?${query}&sig=${sig}`;
}
