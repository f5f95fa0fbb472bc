/**
 * The official client's `images.*` against a live server: upload (file, custom id, metadata),
 * get, edit, list pages, v2 list, blob, variants, keys, stats, direct upload, delete and a typed
 * 404.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { sdk, Cloudflare } from '../../support/sdk.ts';
import { solid } from './helpers.ts';

let t: TestServer;
let cf: Cloudflare;

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
});
afterAll(async () => {
  await t?.stop();
});

describe('official client images.*', () => {
  it('uploads, reads, edits, lists, fetches the blob and deletes', async () => {
    const png = await solid(20, 10, [1, 2, 3]);
    const account_id = t.accountId;
    const img = await cf.images.v1.create({ account_id, file: await Cloudflare.toFile(png, 'sdk.png', { type: 'image/png' }), id: 'sdk/one', metadata: { team: 'a' }, requireSignedURLs: false });
    expect(img.id).toBe('sdk/one');
    expect(img.filename).toBe('sdk.png');
    expect(img.meta).toEqual({ team: 'a' });
    for (let i = 0; i < 11; i++) await cf.images.v1.create({ account_id, file: await Cloudflare.toFile(png, `n${i}.png`, { type: 'image/png' }) });
    const got = await cf.images.v1.get('sdk/one', { account_id });
    expect(got.variants?.[0]).toMatch(/\/sdk\/one\/public$/);
    const edited = await cf.images.v1.edit('sdk/one', { account_id, metadata: { team: 'b' }, requireSignedURLs: true });
    expect(edited.meta).toEqual({ team: 'b' });
    expect(edited.requireSignedURLs).toBe(true);
    const ids: string[] = [];
    for await (const item of cf.images.v1.list({ account_id, per_page: 10 })) ids.push((item as { id: string }).id);
    expect(ids).toHaveLength(12);
    const v2 = await cf.images.v2.list({ account_id, per_page: 10 });
    expect(v2.images).toHaveLength(10);
    expect(v2.continuation_token).toBeTruthy();
    const blob = await cf.images.v1.blobs.get('sdk/one', { account_id });
    expect(Buffer.from(await blob.arrayBuffer()).equals(png)).toBe(true);
    const stats = await cf.images.v1.stats.get({ account_id });
    expect(stats.count?.current).toBe(12);
    await cf.images.v1.delete('sdk/one', { account_id });
    await expect(cf.images.v1.get('sdk/one', { account_id })).rejects.toBeInstanceOf(Cloudflare.NotFoundError);
  });

  it('manages variants and keys, and creates a direct upload', async () => {
    const account_id = t.accountId;
    const created = await cf.images.v1.variants.create({ account_id, id: 'hero', options: { fit: 'scale-down', height: 768, metadata: 'none', width: 1366 }, neverRequireSignedURLs: true });
    expect(created.variant?.id).toBe('hero');
    const list = await cf.images.v1.variants.list({ account_id });
    expect(Object.keys(list.variants ?? {}).sort()).toEqual(['hero', 'public']);
    const edited = await cf.images.v1.variants.edit('hero', { account_id, options: { fit: 'cover', height: 100, metadata: 'keep', width: 100 } });
    expect(edited.variant?.options.fit).toBe('cover');
    expect((await cf.images.v1.variants.get('hero', { account_id })).variant?.options.width).toBe(100);
    await cf.images.v1.variants.delete('hero', { account_id });
    const keys = await cf.images.v1.keys.update('backup', { account_id });
    expect(keys.keys?.map((k) => k.name)).toEqual(['default', 'backup']);
    expect((await cf.images.v1.keys.list({ account_id })).keys).toHaveLength(2);
    expect((await cf.images.v1.keys.delete('backup', { account_id })).keys).toHaveLength(1);
    const direct = await cf.images.v2.directUploads.create({ account_id, requireSignedURLs: false, metadata: { via: 'sdk' }, id: 'sdk/direct' });
    expect(direct.id).toBe('sdk/direct');
    expect(direct.uploadURL).toMatch(/\/sdk\/direct$/);
    const draft = await cf.images.v1.get('sdk/direct', { account_id });
    expect(draft.meta).toEqual({ via: 'sdk' });
  });
});
