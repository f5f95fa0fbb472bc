/**
 * Automatic sampling per account and dataset. Within each minute the first `ratePerMinute` writes
 * are kept as they are (`_sample_interval` 1); past that, one write in 2 is kept with interval 2,
 * past twice the rate one in 4 with interval 4, and so on, so each kept point stands for the writes
 * it replaces and `SUM(_sample_interval)` stays a correct count (off by less than one interval).
 */
export class Sampler {
  private readonly windows = new Map<string, { minute: number; seen: number; interval: number }>();

  constructor(private readonly ratePerMinute: number) {}

  /** The sample interval to record for this write, or 0 to drop it. */
  take(key: string, nowMs: number): number {
    const minute = Math.floor(nowMs / 60_000);
    let w = this.windows.get(key);
    if (!w || w.minute !== minute) {
      if (this.windows.size > 100_000) this.windows.clear();
      this.windows.set(key, (w = { minute, seen: 0, interval: 1 }));
    }
    w.seen += 1;
    while (w.seen > this.ratePerMinute * w.interval) w.interval *= 2;
    if (w.interval === 1) return 1;
    return w.seen % w.interval === 0 ? w.interval : 0;
  }
}
