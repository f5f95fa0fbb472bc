/**
 * The stream log: what an ingest acknowledges is in here first. `append` resolves only once the
 * record is on disk (written and `fdatasync`'d); appends that arrive while a sync runs wait for
 * the next one together (group commit), so one sync covers many requests and the throughput of a
 * stream is bounded by the disk's sequential write rate, not by its sync latency.
 *
 * Local log: a directory per stream, `<data dir>/pipelines/log/<stream id>/`, holding segments
 * `<first offset>.seg` of records `[u32 length][u32 crc32][payload]`; offsets are byte positions
 * across the segments (a segment's name is the offset of its first byte). A new segment starts
 * once the last one holds `segmentBytes`. `compact` deletes the segments that lie wholly before an
 * offset (every pipeline of the stream has them in finished files), so the disk a stream uses is
 * bounded by what its slowest pipeline has not finished yet. On open, a torn tail of the last
 * segment (a record a crash cut short, never acknowledged) is cut off. Readers only see synced
 * records. A stream file of the earlier one-file layout (`<stream id>.log`) becomes its first
 * segment.
 *
 * The NATS JetStream log (`nats-log.ts`) implements the same interface with stream sequences as
 * offsets.
 */
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readSync, fstatSync, ftruncateSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { open, unlink, type FileHandle } from 'node:fs/promises';
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
  /** The largest payload one append takes (bytes); a batch larger than this is refused before it. */
  readonly maxRecordBytes: number;
  /** Resolves once the payload is durable. */
  append(streamId: string, payload: Buffer): Promise<void>;
  /** Durable records from `offset`, up to about `maxBytes` (at least one record if any). */
  read(streamId: string, offset: number, maxBytes: number): Promise<LogRecord[]>;
  /** Calls `fn` after records become readable on the stream; returns an unsubscribe function. */
  watch(streamId: string, fn: () => void): () => void;
  /** The offset of the first record (where a new reader starts). */
  start(streamId: string): Promise<number>;
  /** Forgets records wholly before `offset` (every reader is past them); returns bytes freed. */
  compact(streamId: string, offset: number): Promise<number>;
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

export const DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024;

interface Segment {
  base: number;
  path: string;
  /** Bytes in the segment (durable ones; the writer's file may be ahead while a batch syncs). */
  size: number;
  reader?: Promise<FileHandle>;
}

const segmentName = (base: number) => `${String(base).padStart(16, '0')}.seg`;

function syncDirectory(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** One stream's segments: the last one is written, all are read. */
class StreamFiles {
  private queue: Pending[] = [];
  private flushing = false;
  private closed = false;
  readonly watchers = new Set<() => void>();

  constructor(
    readonly dir: string,
    private readonly segments: Segment[],
    private writer: FileHandle,
    private readonly segmentBytes: number,
  ) {}

  private get last(): Segment {
    return this.segments[this.segments.length - 1];
  }

  /** Offset just past the last durable record. */
  get durable(): number {
    return this.last.base + this.last.size;
  }

  get first(): number {
    return this.segments[0].base;
  }

  append(payload: Buffer): Promise<void> {
    const header = Buffer.allocUnsafe(HEADER);
    header.writeUInt32LE(payload.length, 0);
    header.writeUInt32LE(crc32(payload), 4);
    return new Promise((resolve, reject) => {
      if (this.closed) return reject(new Error('the stream log is closed'));
      this.queue.push({ header, payload, resolve, reject });
      if (!this.flushing) void this.flush();
    });
  }

  /** Starts a new segment after the last one (between batches, so records never straddle two). */
  private async roll(): Promise<void> {
    const base = this.durable;
    const path = join(this.dir, segmentName(base));
    const fh = await open(path, 'w+');
    // The new file's directory entry must survive a crash too.
    syncDirectory(this.dir);
    const old = this.writer;
    this.writer = fh;
    this.segments.push({ base, path, size: 0 });
    await old.close();
  }

  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        try {
          if (this.last.size >= this.segmentBytes) await this.roll();
          const seg = this.last;
          let bufs = batch.flatMap((p) => [p.header, p.payload]);
          let position = seg.size;
          const total = bufs.reduce((n, b) => n + b.length, 0);
          let left = total;
          while (left > 0) {
            const { bytesWritten } = await this.writer.writev(bufs, position);
            left -= bytesWritten;
            position += bytesWritten;
            if (left > 0) bufs = [Buffer.concat(bufs).subarray(total - left)];
          }
          await this.writer.datasync();
          seg.size += total;
          for (const p of batch) p.resolve();
        } catch (err) {
          // The file may hold part of the batch: cut it back so the next batch starts clean.
          await this.writer.truncate(this.last.size).catch(() => {});
          for (const p of batch) p.reject(err as Error);
        }
        for (const w of this.watchers) w();
      }
    } finally {
      this.flushing = false;
    }
  }

  private segmentAt(offset: number): Segment | undefined {
    // Few segments stay (compaction removes delivered ones): a scan from the end is enough.
    for (let i = this.segments.length - 1; i >= 0; i--) {
      const s = this.segments[i];
      if (offset >= s.base) return offset < s.base + s.size || i === this.segments.length - 1 ? s : this.segments[i + 1];
    }
    return this.segments[0];
  }

  async read(offset: number, maxBytes: number): Promise<LogRecord[]> {
    const out: LogRecord[] = [];
    const seg = this.segmentAt(offset);
    if (!seg) return out;
    // A reader behind the first segment (compacted away) continues at the first record kept.
    let pos = Math.max(offset, seg.base) - seg.base;
    const end = seg.size;
    if (pos >= end) return out;
    seg.reader ??= open(seg.path, 'r');
    const fh = await seg.reader;
    const want = Math.min(end - pos, Math.max(maxBytes, HEADER));
    const chunk = Buffer.allocUnsafe(want);
    const { bytesRead } = await fh.read(chunk, 0, want, pos);
    let i = 0;
    while (i + HEADER <= bytesRead) {
      const len = chunk.readUInt32LE(i);
      if (i + HEADER + len > bytesRead) {
        if (out.length > 0) break;
        // One record larger than the read window: read it alone.
        const big = Buffer.allocUnsafe(len);
        await fh.read(big, 0, len, pos + HEADER);
        out.push({ payload: big, next: seg.base + pos + HEADER + len });
        return out;
      }
      out.push({ payload: Buffer.from(chunk.subarray(i + HEADER, i + HEADER + len)), next: seg.base + pos + HEADER + len });
      i += HEADER + len;
      pos += HEADER + len;
    }
    return out;
  }

  /** Deletes the segments wholly before `offset`; the last segment always stays. */
  async compact(offset: number): Promise<number> {
    let freed = 0;
    while (this.segments.length > 1 && this.segments[0].base + this.segments[0].size <= offset && this.segments[1].base <= offset) {
      const s = this.segments.shift()!;
      const r = s.reader;
      s.reader = undefined;
      await (await r?.catch(() => undefined))?.close();
      await unlink(s.path).catch(() => {});
      freed += s.size;
    }
    return freed;
  }

  async close(): Promise<void> {
    while (this.flushing || this.queue.length > 0) await new Promise((r) => setTimeout(r, 2));
    this.closed = true;
    await this.writer.close();
    for (const s of this.segments) await (await s.reader?.catch(() => undefined))?.close();
  }
}

/** Scans a segment and returns the length of its intact prefix. */
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
  // Records carry a u32 length; this bound keeps one record's read buffer small.
  readonly maxRecordBytes = 64 * 1024 * 1024;
  private readonly files = new Map<string, Promise<StreamFiles>>();

  constructor(
    private readonly dir: string,
    private readonly log: Logger,
    private readonly segmentBytes = DEFAULT_SEGMENT_BYTES,
  ) {
    mkdirSync(dir, { recursive: true });
  }

  private closed = false;

  private file(streamId: string): Promise<StreamFiles> {
    if (this.closed) return Promise.reject(new Error('the stream log is closed'));
    let f = this.files.get(streamId);
    if (!f) {
      f = this.openFiles(streamId);
      this.files.set(streamId, f);
      f.catch(() => this.files.delete(streamId));
    }
    return f;
  }

  private async openFiles(streamId: string): Promise<StreamFiles> {
    if (!/^[0-9a-f]{32}$/.test(streamId)) throw new Error(`not a stream id: ${streamId}`);
    const dir = join(this.dir, streamId);
    if (!existsSync(dir)) {
      mkdirSync(dir);
      const legacy = join(this.dir, `${streamId}.log`);
      if (existsSync(legacy)) renameSync(legacy, join(dir, segmentName(0)));
      syncDirectory(this.dir);
    }
    const segments: Segment[] = readdirSync(dir)
      .filter((n) => /^\d{16}\.seg$/.test(n))
      .map((n) => ({ base: Number(n.slice(0, 16)), path: join(dir, n), size: statSync(join(dir, n)).size }))
      .sort((a, b) => a.base - b.base);
    if (segments.length === 0) {
      const path = join(dir, segmentName(0));
      closeSync(openSync(path, 'w'));
      syncDirectory(dir);
      segments.push({ base: 0, path, size: 0 });
    }
    // Only the last segment can end in a record a crash cut short.
    const last = segments[segments.length - 1];
    const intact = intactLength(last.path);
    if (intact !== last.size) {
      this.log.warn({ streamId, cut: last.size - intact }, 'stream log had a torn tail (never acknowledged); cut it off');
      const fd = openSync(last.path, 'r+');
      ftruncateSync(fd, intact);
      fsyncSync(fd);
      closeSync(fd);
      last.size = intact;
    }
    const writer = await open(last.path, 'r+');
    return new StreamFiles(dir, segments, writer, this.segmentBytes);
  }

  async append(streamId: string, payload: Buffer): Promise<void> {
    const f = await this.file(streamId);
    await f.append(payload);
  }

  async read(streamId: string, offset: number, maxBytes: number): Promise<LogRecord[]> {
    const f = await this.file(streamId);
    return f.read(offset, maxBytes);
  }

  async start(streamId: string): Promise<number> {
    return (await this.file(streamId)).first;
  }

  async compact(streamId: string, offset: number): Promise<number> {
    return (await this.file(streamId)).compact(offset);
  }

  watch(streamId: string, fn: () => void): () => void {
    let closed = false;
    let file: StreamFiles | undefined;
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
    rmSync(join(this.dir, streamId), { recursive: true, force: true });
    rmSync(join(this.dir, `${streamId}.log`), { force: true });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const f of this.files.values()) await (await f.catch(() => undefined))?.close();
    this.files.clear();
  }
}
