/**
 * What the routes, delivery, the edge and the binding share: ingesting an upload (a temporary
 * file from the streaming form reader or a URL fetch) into the blob store and a record, the
 * record's API view, and custom id rules.
 */
import { mkdir, open, readFile, unlink, writeFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { lookup } from 'node:dns/promises';
import { join } from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import type { Clock } from '../../core/clock.ts';
import type { Config } from '../../core/config.ts';
import { apiError } from '../../core/errors.ts';
import { UUID } from '../../core/ids.ts';
import type { Logger } from '../../core/log.ts';
import { BlobTooLarge, type BlobStore } from '../../core/storage/blobs.ts';
import type { Doc } from '../../core/storage/collection.ts';
import { accountHash, blobKey, type ImageStore, type StoredImage } from './store.ts';
import { inspect, UPLOAD_FORMATS } from './transform.ts';
import { sanitizeSvg } from './svg.ts';

export const MAX_IMAGE_BYTES = 100 * 1024 * 1024;

export interface ImageView {
  id: string;
  filename: string;
  uploaded: string;
  requireSignedURLs: boolean;
  variants: string[];
  meta: Record<string, unknown>;
  creator: string | null;
  draft?: boolean;
}

export interface UploadFields {
  id?: string;
  metadata?: Record<string, unknown>;
  requireSignedURLs?: boolean;
  creator?: string | null;
}

const RESERVED_FIRST = new Set(['keys', 'variants', 'stats']);

/** Checks a custom id (≤ 1024 characters, may contain `/`, not a UUID, no traversal). */
export function checkCustomId(id: string): string {
  const bad = (why: string) => apiError('image_invalid', `id ${JSON.stringify(id.slice(0, 80))} is invalid: ${why}`);
  if (id.length === 0 || id.length > 1024) throw bad('use 1 to 1024 characters');
  if (UUID.test(id.toLowerCase())) throw bad('a custom id must not be a UUID');
  if (id.startsWith('/') || id.endsWith('/')) throw bad('it must not start or end with /');
  if (!/^[A-Za-z0-9._~!$&'()*+;=:@/-]+$/.test(id)) throw bad('use letters, digits, / and ._~!$&\'()*+;=:@- only');
  const segments = id.split('/');
  if (segments.some((s) => s === '' || s === '.' || s === '..')) throw bad('empty, . and .. path segments are not allowed');
  if (RESERVED_FIRST.has(segments[0]) || segments[segments.length - 1] === 'blob') throw bad('keys, variants and stats are reserved as the first segment and blob as the last');
  return id;
}

export function parseBool(name: string, v: unknown): boolean | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  if (v === true || v === 'true' || v === '1') return true;
  if (v === false || v === 'false' || v === '0') return false;
  throw apiError('image_invalid', `${name}: expected true or false, got ${JSON.stringify(v)}`);
}

export function parseMeta(v: unknown): Record<string, unknown> | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  let obj = v;
  if (typeof v === 'string') {
    try {
      obj = JSON.parse(v);
    } catch (err) {
      throw apiError('image_invalid', `metadata: not valid JSON (${(err as Error).message})`);
    }
  }
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) throw apiError('image_invalid', 'metadata: expected a JSON object');
  if (JSON.stringify(obj).length > 1024 * 1024) throw apiError('image_invalid', 'metadata: larger than 1 MB');
  return obj as Record<string, unknown>;
}

export function parseCreator(v: unknown): string | null | undefined {
  if (v === undefined) return undefined;
  if (v === null || v === '') return null;
  if (typeof v !== 'string' || v.length > 1024) throw apiError('image_invalid', 'creator: expected a string of at most 1024 characters');
  return v;
}

export class ImageService {
  constructor(
    readonly store: ImageStore,
    readonly blobs: BlobStore,
    private readonly config: Config,
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {}

  get tmpDir(): string {
    return join(this.blobs.root, '.tmp');
  }

  /** The base of delivery URLs: configured, else the address the request came to. */
  deliveryBase(requestUrl: string, host?: string): string {
    if (this.config.imagesDeliveryUrl) return this.config.imagesDeliveryUrl.replace(/\/+$/, '');
    const u = new URL(requestUrl);
    return `${u.protocol}//${host ?? u.host}`;
  }

  /** The base of one-time upload URLs (the delivery base: both are served on the API port). */
  uploadBase(requestUrl: string, host?: string): string {
    return this.deliveryBase(requestUrl, host);
  }

  async view(accountId: string, doc: Doc<StoredImage>, base: string): Promise<ImageView> {
    const b = doc.body;
    const variants = (await this.store.variants(accountId)).map((v) => `${base}/${accountHash(accountId)}/${encodeId(b.id)}/${v.id}`);
    const out: ImageView = {
      id: b.id,
      filename: b.filename,
      uploaded: b.uploaded,
      requireSignedURLs: b.requireSignedURLs,
      variants,
      meta: b.meta,
      creator: b.creator,
    };
    if (b.draft) out.draft = true;
    return out;
  }

  /**
   * Validates a finished temporary file and moves it into the blob store. Returns the facts for
   * the record. Removes the temporary file in every case.
   */
  async ingest(accountId: string, imageId: string, tmpPath: string): Promise<Pick<StoredImage, 'blob' | 'format' | 'width' | 'height' | 'size' | 'animated'>> {
    try {
      let info = await inspect(tmpPath);
      if (!info || !UPLOAD_FORMATS.has(info.format)) {
        throw apiError('image_invalid_format', `${info ? info.format.toUpperCase() : 'the file is not an image'}; upload JPEG, PNG, GIF, WebP or SVG`);
      }
      if (info.format === 'svg') {
        const text = await readFile(tmpPath, 'utf8');
        const clean = sanitizeSvg(text);
        await writeFile(tmpPath, clean);
        info = await inspect(tmpPath);
        if (!info) throw apiError('image_invalid_format', 'the SVG does not parse after removing scripts and event handlers');
      }
      const key = `${blobKey(accountId, imageId)}/${randomBytes(8).toString('hex')}`;
      await this.blobs.adopt(tmpPath, key);
      const size = (await this.blobs.size(key)) ?? 0;
      return { blob: key, format: info.format, width: info.width, height: info.height, size, animated: info.animated };
    } finally {
      await unlink(tmpPath).catch(() => {});
    }
  }

  /** Creates a finished record from an ingested file; on failure the blob is removed. */
  async createRecord(accountId: string, id: string, filename: string, fields: UploadFields, tmpPath: string): Promise<Doc<StoredImage>> {
    if (await this.store.get(accountId, id)) {
      await unlink(tmpPath).catch(() => {});
      throw apiError('image_exists', id);
    }
    const facts = await this.ingest(accountId, id, tmpPath);
    try {
      return await this.store.insert(accountId, {
        id,
        filename: filename.slice(0, 255),
        uploaded: this.clock.now().toISOString(),
        requireSignedURLs: fields.requireSignedURLs ?? false,
        meta: fields.metadata ?? {},
        creator: fields.creator ?? null,
        draft: false,
        ...facts,
      });
    } catch (err) {
      await this.blobs.delete(facts.blob!).catch(() => {});
      throw err;
    }
  }

  newId(): string {
    return randomUUID();
  }

  /** Fetches `url` into a temporary file (≤ 100 MB; loopback/private only when allowed). */
  async fetchToTemp(url: string): Promise<{ path: string; filename: string }> {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw apiError('image_source_failed', `${JSON.stringify(url)} is not a URL`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw apiError('image_source_failed', `${u.protocol} URLs are not fetched; use http or https`);
    if (!this.config.imagesFetchAllowPrivate) {
      const host = u.hostname.replace(/^\[|\]$/g, '');
      const addrs = isIP(host) ? [host] : (await lookup(host, { all: true }).catch(() => [])).map((a) => a.address);
      if (addrs.length === 0) throw apiError('image_source_failed', `${host} does not resolve`);
      if (addrs.some(isPrivate)) throw apiError('image_source_failed', `${host} is a loopback or private address; such sources are refused`);
    }
    let res: Response;
    try {
      res = await fetch(u, { redirect: 'error', signal: AbortSignal.timeout(30_000) });
    } catch (err) {
      throw apiError('image_source_failed', `${u.href}: ${(err as Error).message}`);
    }
    if (!res.ok || !res.body) {
      await res.body?.cancel().catch(() => {});
      throw apiError('image_source_failed', `${u.href} answered ${res.status}`);
    }
    const path = join(this.tmpDir, randomBytes(12).toString('hex'));
    await mkdir(this.tmpDir, { recursive: true });
    const fh = await open(path, 'wx');
    let size = 0;
    try {
      for await (const chunk of Readable.fromWeb(res.body as unknown as NodeReadableStream<Uint8Array>)) {
        size += (chunk as Buffer).length;
        if (size > MAX_IMAGE_BYTES) throw new BlobTooLarge(MAX_IMAGE_BYTES);
        await fh.write(chunk as Buffer);
      }
    } catch (err) {
      await fh.close().catch(() => {});
      await unlink(path).catch(() => {});
      if (err instanceof BlobTooLarge) throw apiError('image_too_large', 'the source is over 100 MB');
      throw apiError('image_source_failed', `${u.href}: ${(err as Error).message}`);
    }
    await fh.close();
    const filename = decodeURIComponent(u.pathname.split('/').pop() || 'image');
    return { path, filename };
  }
}

/** Encodes an id for a URL path, keeping `/` between segments. */
export function encodeId(id: string): string {
  return id.split('/').map(encodeURIComponent).join('/');
}

function isPrivate(addr: string): boolean {
  if (addr === '::1' || addr === '::' || /^f[cd]/i.test(addr) || /^fe80/i.test(addr)) return true;
  const m = /^(?:::ffff:)?(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(addr);
  if (!m) return false;
  const [a, b] = [Number(m[1]), Number(m[2])];
  return a === 10 || a === 127 || a === 0 || (a === 169 && b === 254) || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168) || (a === 100 && b >= 64 && b <= 127);
}
