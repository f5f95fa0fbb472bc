/**
 * The stream log: what an ingest acknowledges is in here first. `append` resolves only once the
 * record is on disk (written and `fdatasync`'d); appends that arrive while a sync runs wait for
 * the next one together (group commit), so one sync covers many requests and the throughput of a
 * stream is bounded by the disk's sequential write rate, not by its sync latency.
 *
 * Local log: one file per stream, `<data dir>/pipelines/log/<stream id>.log`, records
 * `[u32 length][u32 crc32][payload]`; offsets are byte positions. On open, a torn tail (a record a
 * crash cut short, never acknowledged) is cut off. Readers only see synced records.
 * The NATS JetStream log (`nats-log.ts`) implements the same interface with stream sequences as
 * offsets.
 */
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readSync, fstatSync, ftruncateSync, unlinkSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import type { Logger } from '../../core/log.ts';

export interface LogRecord {
  payload: Buffer;
  /** Offset just past this record: where a reader resumes. */
  next: number;
}

export interface StreamLog {
  readonly kind: 'local' | 'nats';
  /** Resolves once the payload is durable. */
  append(streamId: string, payload: Buffer): Promise<void>;
  /** Durable records from `offset`, up to about `maxBytes` (at least one record if any). */
  read(streamId: string, offset: number, maxBytes: number): Promise<LogRecord[]>;
  /** Calls `fn` after records become readable on the stream; returns an unsubscribe function. */
  watch(streamId: string, fn: () => void): () => void;
  /** The offset of the first record (where a new reader starts). */
  start(streamId: string): Promise<number>;
  /** Deletes the stream's records. */
  drop(streamId: string): Promise<void>;
  close(): Promise<void>;
}

const HEADER = 8;

interface Pending {
  header: Buffer;
  payload: Buffer;
  resolve: () => void;
  reject: (err: Error) => void;
}

class LogFile {
  private size: number;
  durable: number;
  private queue: Pending[] = [];
  private flushing = false;
  readonly watchers = new Set<() => void>();

  constructor(
    readonly path: string,
    private readonly fh: FileHandle,
    size: number,
  ) {
    this.size = size;
    this.durable = size;
  }

  append(payload: Buffer): Promise<void> {
    const header = Buffer.allocUnsafe(HEADER);
    header.writeUInt32LE(payload.length, 0);
    header.writeUInt32LE(crc32(payload), 4);
    return new Promise((resolve, reject) => {
      this.queue.push({ header, payload, resolve, reject });
      if (!this.flushing) void this.flush();
    });
  }

  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        try {
          let bufs = batch.flatMap((p) => [p.header, p.payload]);
          let position = this.size;
          const total = bufs.reduce((n, b) => n + b.length, 0);
          let left = total;
          while (left > 0) {
            const { bytesWritten } = await this.fh.writev(bufs, position);
            left -= bytesWritten;
            position += bytesWritten;
            if (left > 0) bufs = [Buffer.concat(bufs).subarray(total - left)];
          }
          await this.fh.datasync();
          this.size += total;
          this.durable = this.size;
          for (const p of batch) p.resolve();
        } catch (err) {
          // The file may hold part of the batch: cut it back so the next batch starts clean.
          await this.fh.truncate(this.size).catch(() => {});
          for (const p of batch) p.reject(err as Error);
        }
        for (const w of this.watchers) w();
      }
    } finally {
      this.flushing = false;
    }
  }

  async read(offset: number, maxBytes: number): Promise<LogRecord[]> {
    const out: LogRecord[] = [];
    let pos = offset;
    const end = this.durable;
    if (pos >= end) return out;
    const want = Math.min(end - pos, Math.max(maxBytes, HEADER));
    const chunk = Buffer.allocUnsafe(want);
    const { bytesRead } = await this.fh.read(chunk, 0, want, pos);
    let i = 0;
    while (i + HEADER <= bytesRead) {
      const len = chunk.readUInt32LE(i);
      if (i + HEADER + len > bytesRead) {
        if (out.length > 0) break;
        // One record larger than the read window: read it alone.
        const big = Buffer.allocUnsafe(len);
        await this.fh.read(big, 0, len, pos + HEADER);
        out.push({ payload: big, next: pos + HEADER + len });
        return out;
      }
      out.push({ payload: Buffer.from(chunk.subarray(i + HEADER, i + HEADER + len)), next: pos + HEADER + len });
      i += HEADER + len;
      pos += HEADER + len;
    }
    return out;
  }

  async close(): Promise<void> {
    while (this.flushing || this.queue.length > 0) await new Promise((r) => setTimeout(r, 2));
    await this.fh.close();
  }
}

/** Scans a log file and returns the length of its intact prefix. */
function intactLength(path: string): number {
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    const header = Buffer.allocUnsafe(HEADER);
    let pos = 0;
    let body = Buffer.allocUnsafe(1 << 20);
    while (pos + HEADER <= size) {
      readSync(fd, header, 0, HEADER, pos);
      const len = header.readUInt32LE(0);
      if (pos + HEADER + len > size) break;
      if (body.length < len) body = Buffer.allocUnsafe(len);
      readSync(fd, body, 0, len, pos + HEADER);
      if (crc32(body.subarray(0, len)) !== header.readUInt32LE(4)) break;
      pos += HEADER + len;
    }
    return pos;
  } finally {
    closeSync(fd);
  }
}

export class LocalLog implements StreamLog {
  readonly kind = 'local' as const;
  private readonly files = new Map<string, Promise<LogFile>>();

  constructor(
    private readonly dir: string,
    private readonly log: Logger,
  ) {
    mkdirSync(dir, { recursive: true });
  }

  private file(streamId: string): Promise<LogFile> {
    let f = this.files.get(streamId);
    if (!f) {
      f = this.openFile(streamId);
      this.files.set(streamId, f);
      f.catch(() => this.files.delete(streamId));
    }
    return f;
  }

  private async openFile(streamId: string): Promise<LogFile> {
    if (!/^[0-9a-f]{32}$/.test(streamId)) throw new Error(`not a stream id: ${streamId}`);
    const path = join(this.dir, `${streamId}.log`);
    const existed = existsSync(path);
    let size = 0;
    if (existed) {
      size = intactLength(path);
      const fd = openSync(path, 'r+');
      const actual = fstatSync(fd).size;
      if (actual !== size) {
        this.log.warn({ streamId, cut: actual - size }, 'stream log had a torn tail (never acknowledged); cut it off');
        ftruncateSync(fd, size);
        fsyncSync(fd);
      }
      closeSync(fd);
    }
    const fh = await open(path, existed ? 'r+' : 'w+');
    if (!existed) {
      // The new file's directory entry must survive a crash too.
      const dfd = openSync(this.dir, 'r');
      fsyncSync(dfd);
      closeSync(dfd);
    }
    return new LogFile(path, fh, size);
  }

  async append(streamId: string, payload: Buffer): Promise<void> {
    const f = await this.file(streamId);
    await f.append(payload);
  }

  async read(streamId: string, offset: number, maxBytes: number): Promise<LogRecord[]> {
    const f = await this.file(streamId);
    return f.read(offset, maxBytes);
  }

  async start(): Promise<number> {
    return 0;
  }

  watch(streamId: string, fn: () => void): () => void {
    let closed = false;
    let file: LogFile | undefined;
    void this.file(streamId).then((f) => {
      if (closed) return;
      file = f;
      f.watchers.add(fn);
      fn();
    });
    return () => {
      closed = true;
      file?.watchers.delete(fn);
    };
  }

  async drop(streamId: string): Promise<void> {
    const f = this.files.get(streamId);
    this.files.delete(streamId);
    if (f) await (await f).close().catch(() => {});
    const path = join(this.dir, `${streamId}.log`);
    if (existsSync(path)) unlinkSync(path);
  }

  async close(): Promise<void> {
    for (const f of this.files.values()) await (await f.catch(() => undefined))?.close();
    this.files.clear();
  }
}
