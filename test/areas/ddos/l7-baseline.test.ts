/**
 * Baseline learning on live edge traffic: a host that has been serving a steady rate learns it
 * (`/ddos/status` shows it) and its host threshold rises to ten times that rate, so a burst from
 * many sources that is an attack on a host without history is served on the busy host. Floors are
 * scaled to 10 % and windows to 250 ms: the host rule fires at 100 requests/s (25 per window), the
 * single-source rule at 50/s per client (12.5 per window).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { managedRuleId } from '../../../src/areas/rulesets/index.ts';
import type { TestServer } from '../../support/server.ts';
import { startFloodSite, type FloodSite } from './site.ts';
import { flood, request, type FloodResult } from './load.ts';

const ORIGIN = '127.0.232.1';
const STEADY = ['127.0.232.2', '127.0.232.3'];
const BURST = Array.from({ length: 10 }, (_, i) => `127.0.232.${20 + i}`);
const UA = { 'user-agent': 'baseline-test/1.0' };
const HOST_RULE = managedRuleId('l7', 1);

let t: TestServer;
let edge: URL;
let zone: { id: string; name: string };

let site: FloodSite | undefined;
beforeAll(async () => {
  site = await startFloodSite(ORIGIN, 'baseline.test', ['busy', 'fresh']);
  ({ t, edge, zone } = site);
});
afterAll(async () => {
  await site?.close();
});

async function baselineOf(hostname: string): Promise<number> {
  const s = await t.call('GET', `/zones/${zone.id}/ddos/status`);
  expect(s.status).toBe(200);
  return s.body.result.hosts.find((h: { hostname: string }) => h.hostname === hostname)?.baseline_requests_per_second ?? 0;
}

/** Five requests from each of the ten burst addresses at once: 50, no client over 5. */
async function burst(host: string): Promise<Record<number, number>> {
  const statuses: Record<number, number> = {};
  await Promise.all(
    BURST.flatMap((from) =>
      Array.from({ length: 5 }, async () => {
        const r = await request(edge, host, from, '/', UA);
        statuses[r.status] = (statuses[r.status] ?? 0) + 1;
      }),
    ),
  );
  return statuses;
}

async function hostAttacks(): Promise<any[]> {
  const list = await t.call('GET', `/zones/${zone.id}/ddos/attacks?per_page=100`);
  expect(list.status).toBe(200);
  return (list.body.result as any[]).filter((a) => a.rule_id === HOST_RULE);
}

describe('baseline learning', () => {
  it('a host learns its steady rate and serves a burst that is an attack on a host without history', async () => {
    // About 36 requests/s from two clients (two workers each, 100 ms apart): under half of the
    // host rule's 100/s, so it is learned — and over half of the single-source rule's 50/s, which
    // therefore learns nothing; the status shows the host's rate all the same.
    let stop = false;
    const steady = Promise.all(
      STEADY.map((from) => flood({ url: edge, host: 'busy.baseline.test', from, durationMs: 20_000, concurrency: 2, intervalMs: 100, headers: UA, stop: () => stop })),
    );
    let onBusy: Record<number, number>;
    let steadyResults: FloodResult[];
    try {
      // 28/s learned makes the host threshold 280/s (70 per window): the burst of 50 and the
      // steady clients' ~10 per window stay under it.
      let learned = 0;
      for (let i = 0; i < 100 && learned < 28; i++) {
        await new Promise((r) => setTimeout(r, 100));
        learned = await baselineOf('busy.baseline.test');
      }
      expect(learned).toBeGreaterThanOrEqual(28);
      expect(await baselineOf('fresh.baseline.test')).toBe(0);
      onBusy = await burst('busy.baseline.test');
    } finally {
      stop = true;
      steadyResults = await steady;
    }
    expect(onBusy).toEqual({ 200: 50 });
    for (const r of steadyResults) expect(Object.keys(r.statuses)).toEqual(['200']);

    // The same burst on a host that learned nothing: over its 25 requests per window, and every
    // burst client over its fair share (a tenth of the threshold) is blocked.
    const onFresh = await burst('fresh.baseline.test');
    expect(onFresh[403] ?? 0).toBeGreaterThan(0);
    let recs: any[] = [];
    for (let i = 0; i < 50 && recs.length === 0; i++) {
      recs = await hostAttacks();
      if (recs.length === 0) await new Promise((r) => setTimeout(r, 100));
    }
    expect(recs.map((a) => a.target_hostname)).toEqual(['fresh.baseline.test']);
    expect(recs[0]).toMatchObject({ detection: 'many_sources', action: 'block' });
  });
});
