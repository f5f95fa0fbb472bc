/**
 * Group commit: write functions submitted while a transaction is being committed are run together
 * in the next one. Each caller's promise settles when the transaction holding its writes has
 * committed, so an acknowledgement still means "durable" — but a hundred instances finishing a
 * step at once cost one commit (one fsync on PostgreSQL) instead of a hundred. When the engine is
 * idle the first write starts at once, so a lone write waits for nobody.
 *
 * If a shared transaction fails, its writes are retried one transaction each, so one bad write
 * fails alone.
 */
import type { WfDb, WfTx } from './store.ts';

type Write<T> = (tx: WfTx) => Promise<T>;

interface Pending {
  write: Write<unknown>;
  resolve(v: unknown): void;
  reject(err: unknown): void;
}

export class GroupCommit {
  private pending: Pending[] = [];
  private running = false;

  constructor(
    private readonly db: WfDb,
    private readonly maxBatch = 256,
  ) {}

  run<T>(write: Write<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ write, resolve: resolve as (v: unknown) => void, reject });
      if (!this.running) {
        this.running = true;
        // Writes issued in the same turn of the event loop join the first transaction.
        setImmediate(() => void this.drain());
      }
    });
  }

  private async drain(): Promise<void> {
    try {
      while (this.pending.length > 0) {
        const batch = this.pending.splice(0, this.maxBatch);
        await this.commit(batch);
      }
    } finally {
      this.running = false;
    }
  }

  private async commit(batch: Pending[]): Promise<void> {
    let results: unknown[];
    try {
      results = await this.db.transaction().execute(async (tx) => {
        const out: unknown[] = [];
        for (const p of batch) out.push(await p.write(tx));
        return out;
      });
    } catch (err) {
      if (batch.length === 1) {
        batch[0].reject(err);
        return;
      }
      for (const p of batch) await this.commit([p]);
      return;
    }
    batch.forEach((p, i) => p.resolve(results[i]));
  }
}
