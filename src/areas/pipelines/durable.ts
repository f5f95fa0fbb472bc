/**
 * Durable file writes shared by the sink runner and the Iceberg tables. fsync is asynchronous
 * here: a sync blocks for milliseconds, and ingestion shares this thread.
 */
import { open, rename } from 'node:fs/promises';
import { dirname } from 'node:path';

/** Flushes a file (or a directory's entries) to disk. */
export async function syncFile(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Writes `bytes` to `path` and syncs it before returning. */
export async function writeSynced(path: string, bytes: Buffer | string): Promise<void> {
  const fh = await open(path, 'w');
  try {
    await fh.writeFile(bytes);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Replaces a file so that a crash leaves the old or the new content, never a mix. */
export async function replaceDurably(path: string, bytes: Buffer | string): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  await writeSynced(tmp, bytes);
  await rename(tmp, path);
  await syncFile(dirname(path));
}
