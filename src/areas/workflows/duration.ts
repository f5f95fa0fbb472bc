/**
 * Durations as the platform writes them (milliseconds, or text such as "10 seconds", "5 minutes",
 * "1 month"; a month is 30 days and a year 365) and the retry delays of `step.do`.
 */

export const DAY_MS = 86_400_000;
export const YEAR_MS = 365 * DAY_MS;

const UNITS: [RegExp, number][] = [
  [/^(ms|msecs?|milliseconds?)$/, 1],
  [/^(s|secs?|seconds?)$/, 1000],
  [/^(m|mins?|minutes?)$/, 60_000],
  [/^(h|hrs?|hours?)$/, 3_600_000],
  [/^(d|days?)$/, DAY_MS],
  [/^(w|weeks?)$/, 7 * DAY_MS],
  [/^(months?)$/, 30 * DAY_MS],
  [/^(y|yrs?|years?)$/, YEAR_MS],
];

/** Milliseconds for a number or duration text; undefined when it is not one. */
export function parseDuration(v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isFinite(v) && v >= 0 ? v : undefined;
  if (typeof v !== 'string') return undefined;
  if (/^\s*\d+\s*$/.test(v)) return Number(v);
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$/.exec(v);
  if (!m) return undefined;
  const unit = m[2].toLowerCase();
  for (const [re, f] of UNITS) if (re.test(unit)) return Math.round(Number(m[1]) * f);
  return undefined;
}

export type Backoff = 'constant' | 'linear' | 'exponential';

/**
 * Delay before the next attempt after `attempts` attempts have failed (1 after the first failure):
 * constant `d`, linear `d·n`, exponential `d·2^(n-1)`.
 */
export function retryDelay(delayMs: number, backoff: Backoff, attempts: number): number {
  const n = Math.max(1, attempts);
  if (backoff === 'constant') return delayMs;
  if (backoff === 'linear') return delayMs * n;
  return delayMs * 2 ** (n - 1);
}
