/**
 * Bandwidth feedback for video publishers. Each subscriber's stream keeps a loss-based estimate
 * fed by the receiver reports the subscriber sends (the loss controller of Google congestion
 * control): below 2 % loss the estimate grows by 8 % per report, between 2 % and 10 % it holds,
 * above 10 % it drops to the rate actually forwarded times (1 − 0.5·loss). Estimates stay between
 * a floor and the ceiling. A publisher is told (REMB) the smallest estimate among its subscribers;
 * a simulcast publisher the largest, since its lower layers serve the slower subscribers. With no
 * subscriber reporting it is told the ceiling, which lets a browser turn on every layer at once.
 */

/** The most a video publisher is told it may send, bit/s. */
export const REMB_CEILING_BPS = 5_000_000;
/** The least a subscriber's estimate falls to, bit/s (enough for a low-resolution stream). */
export const REMB_FLOOR_BPS = 150_000;

const LOW_LOSS = 0.02;
const HIGH_LOSS = 0.1;
const INCREASE = 1.08;

export class LossEstimator {
  /** Current estimate, bit/s. */
  estimate: number;
  /** Receiver reports taken into account. */
  reports = 0;
  private bytes = 0;
  private since: number;

  constructor(
    now: number,
    private readonly ceiling = REMB_CEILING_BPS,
    private readonly floor = REMB_FLOOR_BPS,
  ) {
    this.estimate = ceiling;
    this.since = now;
  }

  /** Counts bytes forwarded to the subscriber (the rate a heavy loss cuts from). */
  sent(bytes: number): void {
    this.bytes += bytes;
  }

  /**
   * Takes one receiver report's `fraction lost` (0…255, the RTCP field: loss × 256) and returns
   * the new estimate.
   */
  report(fractionLost: number, now: number): number {
    const loss = Math.min(Math.max(fractionLost, 0), 255) / 256;
    const elapsed = now - this.since;
    const rate = elapsed > 0 && this.bytes > 0 ? (this.bytes * 8 * 1000) / elapsed : undefined;
    this.bytes = 0;
    this.since = now;
    this.reports++;
    if (loss < LOW_LOSS) this.estimate *= INCREASE;
    else if (loss > HIGH_LOSS) this.estimate = Math.min(this.estimate, rate ?? this.estimate) * (1 - 0.5 * loss);
    this.estimate = Math.round(Math.min(this.ceiling, Math.max(this.floor, this.estimate)));
    return this.estimate;
  }
}

/**
 * What a publisher is told from its subscribers' estimates: the smallest (one stream for all),
 * or the largest for a simulcast publisher; the ceiling when no subscriber has reported.
 */
export function publisherBudget(estimators: Iterable<LossEstimator>, simulcast: boolean, ceiling = REMB_CEILING_BPS): number {
  const values = [...estimators].filter((e) => e.reports > 0).map((e) => e.estimate);
  if (values.length === 0) return ceiling;
  return Math.min(ceiling, simulcast ? Math.max(...values) : Math.min(...values));
}
