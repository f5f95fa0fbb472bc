/** The blob store: whole-or-nothing writes, size limits, keys that cannot leave the directory. */
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { BlobKeyError, BlobStore, BlobTooLarge } from '../../src/core/storage/blobs.ts';

const dir = mkdtempSync(join(tmpdir(), 'outpost-blobs-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('BlobStore', () => {
  const blobs = new BlobStore(dir);
  it('stores, reads, sizes and deletes', async () => {
    await blobs.put('a/b/c', Buffer.from('hello'));
    expect((await blobs.get('a/b/c'))?.toString()).toBe('hello');
    expect(await blobs.size('a/b/c')).toBe(5);
    await blobs.delete('a/b/c');
    expect(await blobs.get('a/b/c')).toBeUndefined();
  });
  it('refuses keys that would leave the directory', async () => {
    for (const key of ['../x', 'a/../../x', '/abs', 'a//b', 'a/./b', 'a\\b', '']) {
      await expect(blobs.put(key, Buffer.from('x')), key).rejects.toBeInstanceOf(BlobKeyError);
    }
  });
  it('streams within a limit and leaves nothing behind past it', async () => {
    const size = await blobs.putStream('s/ok', Readable.from([Buffer.alloc(10), Buffer.alloc(10)]), 20);
    expect(size).toBe(20);
    await expect(blobs.putStream('s/big', Readable.from([Buffer.alloc(15), Buffer.alloc(15)]), 20)).rejects.toBeInstanceOf(BlobTooLarge);
    expect(await blobs.get('s/big')).toBeUndefined();
    expect(readdirSync(join(dir, 's'))).toEqual(['ok']);
  });
});
