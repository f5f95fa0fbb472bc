/**
 * The stream log on NATS JetStream (`--pipelines-log nats://host:port`), for several Outpost
 * nodes sharing streams: one JetStream stream per pipeline stream (`OUTPOST_PL_<id>`, subject
 * `outpost.pipelines.<id>`, file storage), offsets are JetStream sequence numbers. `append`
 * resolves when JetStream acknowledges the publish (the message is stored, and replicated when
 * the JetStream stream has replicas); how often a single JetStream server fsyncs is its own
 * `sync_interval` setting. Readers fetch stored messages by sequence and learn about new ones
 * from a core subscription on the subject. `compact` purges the messages every pipeline has
 * delivered.
 */
import { connect, StorageType, type JetStreamClient, type JetStreamManager, type NatsConnection } from 'nats';
import type { Logger } from '../../core/log.ts';
import type { LogRecord, StreamLog } from './log.ts';

const PARALLEL_GETS = 128;

export class NatsLog implements StreamLog {
  readonly kind = 'nats' as const;
  private readonly ensured = new Map<string, Promise<void>>();

  private constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly log: Logger,
  ) {}

  /** The server's max_payload, less room for the message's headers. */
  get maxRecordBytes(): number {
    return (this.nc.info?.max_payload ?? 1024 * 1024) - 4096;
  }

  static async open(url: string, log: Logger): Promise<NatsLog> {
    const u = new URL(url);
    if (u.protocol !== 'nats:') throw new Error(`--pipelines-log ${url}: expected nats://host:port`);
    const nc = await connect({ servers: `${u.hostname}:${u.port || 4222}`, ...(u.username ? { user: decodeURIComponent(u.username), pass: decodeURIComponent(u.password) } : {}), name: 'outpost-pipelines' });
    const jsm = await nc.jetstreamManager();
    return new NatsLog(nc, nc.jetstream(), jsm, log);
  }

  private name(streamId: string): string {
    if (!/^[0-9a-f]{32}$/.test(streamId)) throw new Error(`not a stream id: ${streamId}`);
    return `OUTPOST_PL_${streamId}`;
  }

  private subject(streamId: string): string {
    return `outpost.pipelines.${streamId}`;
  }

  private ensure(streamId: string): Promise<void> {
    let p = this.ensured.get(streamId);
    if (!p) {
      const name = this.name(streamId);
      p = this.jsm.streams
        .info(name)
        .then(() => undefined)
        .catch(async () => {
          await this.jsm.streams.add({ name, subjects: [this.subject(streamId)], storage: StorageType.File });
        });
      this.ensured.set(streamId, p);
      p.catch(() => this.ensured.delete(streamId));
    }
    return p;
  }

  async append(streamId: string, payload: Buffer): Promise<void> {
    await this.ensure(streamId);
    await this.js.publish(this.subject(streamId), payload, { expect: { streamName: this.name(streamId) } });
  }

  async start(streamId: string): Promise<number> {
    await this.ensure(streamId);
    const info = await this.jsm.streams.info(this.name(streamId));
    return Math.max(1, info.state.first_seq);
  }

  async read(streamId: string, offset: number, maxBytes: number): Promise<LogRecord[]> {
    await this.ensure(streamId);
    const name = this.name(streamId);
    const info = await this.jsm.streams.info(name);
    let seq = Math.max(offset, info.state.first_seq);
    const last = info.state.last_seq;
    const out: LogRecord[] = [];
    let bytes = 0;
    while (seq <= last && bytes < maxBytes) {
      const seqs: number[] = [];
      for (let s = seq; s <= last && seqs.length < PARALLEL_GETS; s++) seqs.push(s);
      const got = await Promise.all(seqs.map((s) => this.jsm.streams.getMessage(name, { seq: s }).catch(() => undefined)));
      for (let i = 0; i < seqs.length; i++) {
        const m = got[i];
        if (m) {
          const payload = Buffer.from(m.data);
          out.push({ payload, next: seqs[i] + 1 });
          bytes += payload.length;
        } else {
          // A gap (a deleted message): an empty batch that moves the reader past it.
          out.push({ payload: Buffer.from('[]'), next: seqs[i] + 1 });
        }
      }
      seq = seqs[seqs.length - 1] + 1;
    }
    return out;
  }

  watch(streamId: string, fn: () => void): () => void {
    const sub = this.nc.subscribe(this.subject(streamId), { callback: () => fn() });
    queueMicrotask(fn);
    return () => sub.unsubscribe();
  }

  async compact(streamId: string, offset: number): Promise<number> {
    await this.ensure(streamId);
    // Purges the messages with sequences below `offset`; JetStream frees their storage.
    const r = await this.jsm.streams.purge(this.name(streamId), { seq: offset });
    return r.purged;
  }

  async drop(streamId: string): Promise<void> {
    this.ensured.delete(streamId);
    await this.jsm.streams.delete(this.name(streamId)).catch((err) => this.log.warn({ err, streamId }, 'could not delete the JetStream stream'));
  }

  async close(): Promise<void> {
    await this.nc.drain().catch(() => this.nc.close());
  }
}
