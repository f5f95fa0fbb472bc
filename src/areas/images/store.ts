/**
 * Image records, variants and signing keys in the database (documents scoped to the account);
 * the bytes in the blob store under `images/<account>/<sha256(id)>` (a custom id never becomes a
 * path). Direct uploads are draft records with an expiry, hidden from lists until their one-time
 * upload completes.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Clock } from '../../core/clock.ts';
import { apiError } from '../../core/errors.ts';
import { defineCollection, type Doc } from '../../core/storage/collection.ts';
import type { Database } from '../../core/storage/db.ts';
import { accounts } from '../../core/accounts.ts';
import { GLOBAL_SCOPE } from '../../core/accounts.ts';

export interface StoredImage {
  id: string;
  filename: string;
  uploaded: string;
  requireSignedURLs: boolean;
  meta: Record<string, unknown>;
  creator: string | null;
  draft: boolean;
  /** Drafts only: when the upload URL stops working (ISO). */
  expires?: string;
  blob?: string;
  format?: string;
  width?: number;
  height?: number;
  size?: number;
  animated?: boolean;
}

export interface VariantOptions {
  fit: 'scale-down' | 'contain' | 'cover' | 'crop' | 'pad';
  width: number;
  height: number;
  metadata: 'none' | 'copyright' | 'keep';
}

export interface StoredVariant {
  id: string;
  options: VariantOptions;
  neverRequireSignedURLs: boolean;
}

export interface SigningKey {
  name: string;
  value: string;
}

interface ImageSettings {
  keys: SigningKey[];
  variantsSeeded: boolean;
}

export const images = defineCollection<StoredImage, 'creator' | 'draft'>({
  kind: 'image',
  indexes: { creator: (b) => b.creator, draft: (b) => (b.draft ? '1' : '0') },
});
const variants = defineCollection<StoredVariant>({ kind: 'image_variant' });
const settings = defineCollection<ImageSettings>({ kind: 'image_settings' });
const SETTINGS_ID = 'settings';

export const DEFAULT_VARIANT: StoredVariant = {
  id: 'public',
  options: { fit: 'scale-down', width: 1366, height: 768, metadata: 'none' },
  neverRequireSignedURLs: false,
};

/** The account's delivery hash: 22 URL-safe characters derived from its id. */
export function accountHash(accountId: string): string {
  return createHash('sha256').update(`images:${accountId}`).digest('base64url').slice(0, 22);
}

export const ACCOUNT_HASH = /^[A-Za-z0-9_-]{22}$/;

export function blobKey(accountId: string, imageId: string): string {
  return `images/${accountId}/${createHash('sha256').update(imageId).digest('hex')}`;
}

export class ImageStore {
  private readonly hashes = new Map<string, string>();

  constructor(
    private readonly database: Database,
    private readonly clock: Clock,
  ) {}

  private get db() {
    return this.database.db;
  }

  /** The account of a delivery hash (undefined when none matches). */
  async accountOfHash(hash: string): Promise<string | undefined> {
    const hit = this.hashes.get(hash);
    if (hit) return hit;
    for (const a of await accounts.all(this.db, GLOBAL_SCOPE)) this.hashes.set(accountHash(a.id), a.id);
    return this.hashes.get(hash);
  }

  async get(accountId: string, id: string): Promise<Doc<StoredImage> | undefined> {
    return images.get(this.db, accountId, id);
  }

  /** A finished (non-draft) image or 404. */
  async require(accountId: string, id: string): Promise<Doc<StoredImage>> {
    const doc = await this.get(accountId, id);
    if (!doc || doc.body.draft) throw apiError('image_not_found', id);
    return doc;
  }

  async insert(accountId: string, body: StoredImage): Promise<Doc<StoredImage>> {
    if (await this.get(accountId, body.id)) throw apiError('image_exists', body.id);
    try {
      return await images.insert(this.db, accountId, body.id, body, this.clock.now());
    } catch (err) {
      // A concurrent insert of the same id loses on the primary key.
      if (await this.get(accountId, body.id)) throw apiError('image_exists', body.id);
      throw err;
    }
  }

  async update(doc: Doc<StoredImage>, body: StoredImage): Promise<Doc<StoredImage>> {
    return images.update(this.db, doc, body, this.clock.now());
  }

  async delete(accountId: string, id: string): Promise<boolean> {
    return images.delete(this.db, accountId, id);
  }

  /** Finished images in upload order; `creator` filters when given ('' = none set). */
  async list(accountId: string, opts: { offset: number; limit: number; creator?: string | null; desc?: boolean }) {
    const filters: { field: 'creator' | 'draft'; op: 'eq'; value: string }[] = [{ field: 'draft', op: 'eq', value: '0' }];
    if (opts.creator) filters.push({ field: 'creator', op: 'eq', value: opts.creator });
    const res = await images.list(this.db, accountId, {
      filters,
      limit: opts.limit,
      offset: opts.offset,
      direction: opts.desc ? 'desc' : 'asc',
    });
    return res;
  }

  async counts(accountId: string): Promise<number> {
    return (await images.list(this.db, accountId, { filters: [{ field: 'draft', op: 'eq', value: '0' }], limit: 0 })).total;
  }

  // --- variants -------------------------------------------------------------------------------

  private async settings(accountId: string): Promise<Doc<ImageSettings>> {
    const doc = await settings.get(this.db, accountId, SETTINGS_ID);
    if (doc) return doc;
    const body: ImageSettings = { keys: [{ name: 'default', value: randomBytes(32).toString('base64url') }], variantsSeeded: true };
    try {
      await this.db.transaction().execute(async (tx) => {
        await settings.insert(tx, accountId, SETTINGS_ID, body, this.clock.now());
        await variants.insert(tx, accountId, DEFAULT_VARIANT.id, DEFAULT_VARIANT, this.clock.now());
      });
    } catch (err) {
      const again = await settings.get(this.db, accountId, SETTINGS_ID);
      if (again) return again;
      throw err;
    }
    return (await settings.get(this.db, accountId, SETTINGS_ID))!;
  }

  async variants(accountId: string): Promise<StoredVariant[]> {
    await this.settings(accountId);
    return (await variants.all(this.db, accountId)).map((d) => d.body);
  }

  async variant(accountId: string, id: string): Promise<StoredVariant | undefined> {
    await this.settings(accountId);
    return (await variants.get(this.db, accountId, id))?.body;
  }

  async putVariant(accountId: string, v: StoredVariant, mode: 'create' | 'update'): Promise<StoredVariant> {
    await this.settings(accountId);
    const existing = await variants.get(this.db, accountId, v.id);
    if (mode === 'create') {
      if (existing) throw apiError('image_invalid', `variant ${v.id} already exists; change it with PATCH /accounts/{account_id}/images/v1/variants/${v.id}`);
      await variants.insert(this.db, accountId, v.id, v, this.clock.now());
    } else {
      if (!existing) throw apiError('image_variant_not_found', v.id);
      await variants.update(this.db, existing, v, this.clock.now());
    }
    return v;
  }

  async deleteVariant(accountId: string, id: string): Promise<void> {
    await this.settings(accountId);
    if (!(await variants.delete(this.db, accountId, id))) throw apiError('image_variant_not_found', id);
  }

  // --- signing keys ---------------------------------------------------------------------------

  async keys(accountId: string): Promise<SigningKey[]> {
    return (await this.settings(accountId)).body.keys;
  }

  /** Creates or replaces (rotates) the named key; at most two keys. */
  async putKey(accountId: string, name: string): Promise<SigningKey[]> {
    const doc = await this.settings(accountId);
    const keys = doc.body.keys.filter((k) => k.name !== name);
    if (keys.length >= 2) throw apiError('image_invalid', `an account has at most 2 signing keys; delete one of ${keys.map((k) => k.name).join(', ')} first`);
    keys.push({ name, value: randomBytes(32).toString('base64url') });
    await settings.update(this.db, doc, { ...doc.body, keys }, this.clock.now());
    return keys;
  }

  async deleteKey(accountId: string, name: string): Promise<SigningKey[]> {
    const doc = await this.settings(accountId);
    if (!doc.body.keys.some((k) => k.name === name)) throw apiError('image_key_not_found', name);
    const keys = doc.body.keys.filter((k) => k.name !== name);
    await settings.update(this.db, doc, { ...doc.body, keys }, this.clock.now());
    return keys;
  }
}
