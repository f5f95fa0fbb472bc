/**
 * One worker thread that runs the pipelines' per-event work (`transform.ts`) for every pipeline of
 * this process, so parsing, SQL and serialisation do not compete with ingestion on the main
 * thread. The thread is started on first use and again after it dies (jobs in flight fail; their
 * pipelines retry on the next tick). When a thread cannot be started at all (three failures in a
 * row before it was ready), the work runs on the main thread instead, with a warning.
 */
import { Worker } from 'node:worker_threads';
import type { Logger } from '../../core/log.ts';
import { inlineTransform, type TransformFn, type TransformOutput, type TransformSpec } from './transform.ts';

export type Transformer = (payloads: Uint8Array[]) => Promise<TransformOutput>;

interface Pending {
  resolve: (out: TransformOutput) => void;
  reject: (err: Error) => void;
}

const MAX_START_FAILURES = 3;

export class TransformThread {
  private worker?: Worker;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private startFailures = 0;
  private inline = false;
  private closed = false;
  private readonly inlineFns = new Map<string, Promise<TransformFn>>();

  constructor(private readonly logger: Logger) {}

  /** A transformer for one pipeline (`key`, its id). */
  transformer(key: string, spec: TransformSpec): Transformer {
    return async (payloads) => {
      if (this.closed) throw new Error('pipelines are stopping');
      if (this.inline) {
        let fn = this.inlineFns.get(key);
        if (!fn) this.inlineFns.set(key, (fn = inlineTransform(spec)));
        return (await fn)(payloads);
      }
      const w = this.thread();
      const id = this.nextId++;
      return new Promise<TransformOutput>((resolve, reject) => {
        this.pending.set(id, { resolve, reject });
        w.postMessage({ id, key, spec, payloads });
      });
    };
  }

  /** Whether batches go to the worker thread (false once it fell back to the main thread). */
  get onThread(): boolean {
    return !this.inline;
  }

  /** Drops a pipeline's compiled SQL from the thread. */
  forget(key: string): void {
    this.inlineFns.delete(key);
    this.worker?.postMessage({ forget: key });
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    // The boot module registers the TypeScript loader in the thread, then loads the worker.
    const w = new Worker(new URL('./transform-boot.mjs', import.meta.url), { name: 'pipelines-transform' });
    let ready = false;
    w.unref();
    w.on('message', (m: { ready?: boolean; id?: number; out?: TransformOutput; error?: string }) => {
      if (m.ready) {
        ready = true;
        this.startFailures = 0;
        return;
      }
      const p = this.pending.get(m.id!);
      if (!p) return;
      this.pending.delete(m.id!);
      if (m.error !== undefined) p.reject(new Error(m.error));
      else p.resolve(m.out!);
    });
    const gone = (err: Error) => {
      if (this.worker !== w) return;
      this.worker = undefined;
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
      if (!ready && ++this.startFailures >= MAX_START_FAILURES && !this.closed) {
        this.inline = true;
        this.logger.warn({ err }, 'the pipelines transform thread does not start; transforming on the main thread');
      } else if (!this.closed) this.logger.error({ err }, 'the pipelines transform thread stopped; it is started again on the next batch');
    };
    w.on('error', gone);
    w.on('exit', (code) => gone(new Error(`the transform thread exited (${code})`)));
    this.worker = w;
    return w;
  }

  async close(): Promise<void> {
    this.closed = true;
    const w = this.worker;
    this.worker = undefined;
    for (const p of this.pending.values()) p.reject(new Error('pipelines are stopping'));
    this.pending.clear();
    await w?.terminate();
  }
}
