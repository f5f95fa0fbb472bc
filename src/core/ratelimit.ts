/**
 * Per-credential rate limiting (fixed window). Off unless configured; when a caller is over its
 * budget the router answers 429 with `retry-after` set to the seconds left in the window, which
 * the official client honours.
 */
import type { RateLimitConfig } from './config.ts';

export class RateLimiter {
  private windows = new Map<string, { start: number; count: number }>();

  constructor(
    private readonly cfg: RateLimitConfig,
    private readonly now: () => number,
  ) {}

  /** Returns 0 when allowed, else the seconds to wait. */
  take(key: string): number {
    const t = this.now();
    const windowMs = this.cfg.windowSeconds * 1000;
    let w = this.windows.get(key);
    if (!w || t - w.start >= windowMs) {
      if (this.windows.size > 100_000) this.windows.clear();
      w = { start: t, count: 0 };
      this.windows.set(key, w);
    }
    w.count++;
    if (w.count <= this.cfg.requests) return 0;
    return Math.max(1, Math.ceil((w.start + windowMs - t) / 1000));
  }
}
