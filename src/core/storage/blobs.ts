/**
 * The blob store: immutable byte objects under keys, in a local directory (by default
 * `<data dir>/blobs`). A blob is written to a temporary name in the same directory, fsync'd, then
 * renamed into place and the directory fsync'd, so a blob either exists whole or not at all and an
 * acknowledged write survives a crash. Keys are `/`-separated segments of `[A-Za-z0-9._-]`; no
 * segment may be `.` or `..`, so a key never leaves the store's directory.
 */
import { createReadStream, createWriteStream, type ReadStream } from 'node:fs';
import { mkdir, open, rename, rm, stat, unlink, readFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';

const SEGMENT = /^[A-Za-z0-9._-]{1,200}$/;

export class BlobKeyError extends Error {}

/** Thrown by `putStream` when the stream exceeds `maxBytes`; nothing is stored. */
export class BlobTooLarge extends Error {
  constructor(readonly maxBytes: number) {
    super(`blob exceeds ${maxBytes} bytes`);
  }
}

export class BlobStore {
  constructor(readonly root: string) {}

  /** The file holding `key` (for readers that take a path, such as image decoders). */
  path(key: string): string {
    const parts = key.split('/');
    for (const p of parts) {
      if (!SEGMENT.test(p) || p === '.' || p === '..') throw new BlobKeyError(`invalid blob key ${JSON.stringify(key)}`);
    }
    return join(this.root, ...parts);
  }

  /** Writes a blob whole; `sync: false` skips the fsyncs (caches that can be rebuilt). */
  async put(key: string, data: Uint8Array, opts: { sync?: boolean } = {}): Promise<void> {
    const sync = opts.sync ?? true;
    const final = this.path(key);
    await mkdir(dirname(final), { recursive: true });
    const tmp = `${final}.tmp-${randomBytes(6).toString('hex')}`;
    const fh = await open(tmp, 'wx');
    try {
      await fh.writeFile(data);
      if (sync) await fh.sync();
    } finally {
      await fh.close();
    }
    if (sync) await this.commit(tmp, final);
    else await rename(tmp, final);
  }

  /**
   * Streams into a temporary file; when the stream ends within `maxBytes` the file is fsync'd and
   * renamed into place. Returns the stored size. On overflow or error nothing is left behind.
   */
  async putStream(key: string, source: Readable | AsyncIterable<Uint8Array>, maxBytes = Infinity): Promise<number> {
    const final = this.path(key);
    await mkdir(dirname(final), { recursive: true });
    const tmp = `${final}.tmp-${randomBytes(6).toString('hex')}`;
    let size = 0;
    try {
      const fh = await open(tmp, 'wx');
      try {
        for await (const chunk of source as AsyncIterable<Uint8Array>) {
          size += chunk.byteLength;
          if (size > maxBytes) throw new BlobTooLarge(maxBytes);
          await fh.write(chunk);
        }
        await fh.sync();
      } finally {
        await fh.close();
      }
      await this.commit(tmp, final);
      return size;
    } catch (err) {
      await unlink(tmp).catch(() => {});
      throw err;
    }
  }

  /** A writable temporary file in the store (same file system, so `adopt` is a rename). */
  async tempFile(): Promise<{ path: string; stream: NodeJS.WritableStream }> {
    const dir = join(this.root, '.tmp');
    await mkdir(dir, { recursive: true });
    const path = join(dir, randomBytes(12).toString('hex'));
    return { path, stream: createWriteStream(path, { flags: 'wx' }) };
  }

  /** Moves a finished temporary file (see `tempFile`) under `key`, durably. */
  async adopt(tmpPath: string, key: string): Promise<void> {
    const final = this.path(key);
    await mkdir(dirname(final), { recursive: true });
    const fh = await open(tmpPath, 'r+');
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
    await this.commit(tmpPath, final);
  }

  async get(key: string): Promise<Buffer | undefined> {
    try {
      return await readFile(this.path(key));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  }

  async size(key: string): Promise<number | undefined> {
    try {
      return (await stat(this.path(key))).size;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  }

  stream(key: string): ReadStream {
    return createReadStream(this.path(key));
  }

  async delete(key: string): Promise<void> {
    await rm(this.path(key), { force: true });
  }

  /** Removes every blob under a key prefix (a directory). */
  async deletePrefix(prefix: string): Promise<void> {
    await rm(this.path(prefix), { recursive: true, force: true });
  }

  private async commit(tmp: string, final: string): Promise<void> {
    await rename(tmp, final);
    const dir = await open(dirname(final), 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
  }
}
