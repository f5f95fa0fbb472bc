/**
 * The store without a server: retention sweeps delete old points only; the sampler's intervals sum
 * to the number of writes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { manualClock } from '../../../src/core/clock.ts';
import { createLogger } from '../../../src/core/log.ts';
import { AnalyticsEngine } from '../../../src/areas/analytics/engine.ts';
import { Sampler } from '../../../src/areas/analytics/sampler.ts';
import { DuckStore } from '../../../src/areas/analytics/store.ts';

const ACCOUNT = '1'.repeat(32);
const clock = manualClock(new Date('2026-03-01T00:00:00Z'));
let store: DuckStore;
let engine: AnalyticsEngine;

beforeAll(async () => {
  const log = createLogger('silent');
  store = await DuckStore.open({ path: ':memory:', flushMs: 1000, retentionDays: 90, log, now: () => clock.now() });
  engine = new AnalyticsEngine({ store, log, now: () => clock.now(), sampleRatePerMinute: 1_000_000, queryTimeoutMs: 10_000 });
});
afterAll(() => store.close());

describe('retention', () => {
  it('the sweeper deletes points older than the retention and keeps the rest', async () => {
    engine.write(ACCOUNT, 'old', [{ blobs: ['a'] }, { blobs: ['b'] }, { blobs: ['c'] }]);
    clock.advance(60 * 86400_000);
    engine.write(ACCOUNT, 'old', [{ blobs: ['recent'] }]);
    await store.flush();
    clock.advance(31 * 86400_000);
    await store.sweep();
    const r = JSON.parse((await engine.sql(ACCOUNT, 'SELECT blob1 FROM old ORDER BY blob1')).body);
    expect(r.data).toEqual([{ blob1: 'recent' }]);
  });
});

describe('sampler', () => {
  it('keeps every write under the rate and sums to the writes above it', () => {
    const s = new Sampler(100);
    for (const n of [50, 100, 1000, 12_345]) {
      let sum = 0;
      let kept = 0;
      let max = 1;
      for (let i = 0; i < n; i++) {
        const interval = s.take(`k${n}`, 0);
        if (interval > 0) {
          sum += interval;
          kept++;
          max = Math.max(max, interval);
        }
      }
      if (n <= 100) expect(kept).toBe(n);
      else expect(kept).toBeLessThan(n / 2);
      expect(Math.abs(sum - n)).toBeLessThan(max);
    }
  });

  it('starts again at interval 1 in the next minute', () => {
    const s = new Sampler(10);
    for (let i = 0; i < 100; i++) s.take('k', 0);
    expect(s.take('k', 60_000)).toBe(1);
  });
});
