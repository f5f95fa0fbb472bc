/**
 * HTTP DDoS detection on live edge traffic: floods from one loopback source (and from several)
 * against a zone's host are mitigated within seconds while another source stays served; overrides
 * through the official client change the outcome (eoff: none, log: events only, rule level over
 * category level, challenge with a solvable interstitial, an override scoped by its expression);
 * a flood without User-Agent meets the anomaly rule; attack events are recorded and queryable.
 * Rate floors are scaled to 10 % and windows to 250 ms so floods of a few hundred requests suffice.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { solveChallenge } from '../../../src/edge/challenge.ts';
import { DDOS_L7_ID, managedRuleId } from '../../../src/areas/rulesets/index.ts';
import type { TestServer } from '../../support/server.ts';
import { sdk, type Cloudflare } from '../../support/sdk.ts';
import { startFloodSite, type FloodSite } from './site.ts';
import { flood, request } from './load.ts';

const ORIGIN = '127.0.222.1';
const ATTACKER = '127.0.222.2';
const LEGIT = '127.0.222.9';
const HOST = 'www.flood.test';
const SOURCE_RULE = managedRuleId('l7', 2);
const HOST_RULE = managedRuleId('l7', 1);

let t: TestServer;
let cf: Cloudflare;
let edge: URL;
let zone: { id: string; name: string };

let site: FloodSite | undefined;
beforeAll(async () => {
  site = await startFloodSite(ORIGIN, 'flood.test', ['www']);
  ({ t, edge, zone } = site);
  cf = sdk(t);
});
afterAll(async () => {
  await site?.close();
});

async function overrides(o: Record<string, unknown> | undefined): Promise<void> {
  await cf.rulesets.phases.update('ddos_l7', {
    zone_id: zone.id,
    rules: [{ action: 'execute', expression: 'true', action_parameters: { id: DDOS_L7_ID, ...(o ? { overrides: o } : {}) } }],
  } as never);
}

/** Waits until the zone has no running attack. */
async function quiet(): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const s = await t.call('GET', `/zones/${zone.id}/ddos/status`);
    if (s.body.result.active_attacks.length === 0) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('attack did not end');
}

async function attacks(): Promise<any[]> {
  const res = await t.call('GET', `/zones/${zone.id}/ddos/attacks?per_page=100`);
  expect(res.status).toBe(200);
  return res.body.result;
}

/** A flood from ATTACKER while LEGIT keeps asking at ~4 req/s. */
async function floodWithLegit(durationMs = 1500, from = [ATTACKER], path = '/', concurrency = 4, host = HOST) {
  const legit = flood({ url: edge, host, from: LEGIT, durationMs, concurrency: 1, intervalMs: 250, path, headers: { 'user-agent': 'legit-browser/1.0' } });
  // Attackers send a User-Agent too, so only the flood rules (not the no-User-Agent one) see them.
  const floods = await Promise.all(from.map((f) => flood({ url: edge, host, from: f, durationMs, concurrency, path, headers: { 'user-agent': 'flood/1.0' } })));
  return { floods, legit: await legit };
}

describe('managed ruleset through the official client', () => {
  it('lists ddos_l7 with its rules, and refuses bad overrides with 400', async () => {
    const list = [];
    for await (const r of cf.rulesets.list({ zone_id: zone.id })) list.push(r);
    const l7 = list.find((r) => r.kind === 'managed' && r.phase === 'ddos_l7');
    expect(l7?.id).toBe(DDOS_L7_ID);
    const full = await cf.rulesets.get(DDOS_L7_ID, { zone_id: zone.id });
    expect(full.rules.map((r) => r.id)).toContain(SOURCE_RULE);
    expect(full.rules.find((r) => r.id === SOURCE_RULE)).toMatchObject({ categories: ['http-flood'], action: 'ddos_dynamic' });
    for (const bad of [{ rules: [{ id: 'f'.repeat(32), action: 'block' }] }, { sensitivity_level: 'extreme' }, { action: 'explode' }]) {
      const res = await t.call('PUT', `/zones/${zone.id}/rulesets/phases/ddos_l7/entrypoint`, {
        rules: [{ action: 'execute', expression: 'true', action_parameters: { id: DDOS_L7_ID, overrides: bad } }],
      });
      expect(res.status).toBe(400);
      expect(res.body.errors[0].source.pointer).toMatch(/^\/rules\/0\/action_parameters\/overrides/);
    }
  });
});

describe('L7 floods', () => {
  it('blocks a single-source flood within seconds, keeps serving another source, and ends with the flood', async () => {
    // Normal traffic first, so the host has a baseline.
    await flood({ url: edge, host: HOST, from: LEGIT, durationMs: 600, concurrency: 1, intervalMs: 250 });
    const { floods, legit } = await floodWithLegit();
    const f = floods[0];
    expect(f.statuses[403] ?? 0).toBeGreaterThan(0);
    expect(f.firstMitigatedMs).toBeLessThan(1500);
    expect(legit.statuses[403] ?? 0).toBe(0);
    expect(legit.statuses[200]).toBeGreaterThan(2);
    await quiet();
    expect((await request(edge, HOST, ATTACKER)).status).toBe(200);
    const rec = (await attacks()).find((a) => a.rule_id === SOURCE_RULE);
    expect(rec).toMatchObject({ status: 'ended', layer: 'l7', target_hostname: HOST, zone_id: zone.id, action: 'block', detection: 'single_source', sources: [ATTACKER] });
    expect(rec.mitigated).toBeGreaterThan(0);
    expect(rec.peak_rate).toBeGreaterThan(50);
    expect(Date.parse(rec.end_time)).toBeGreaterThan(Date.parse(rec.start_time));
    const one = await t.call('GET', `/accounts/${t.accountId}/ddos/attacks/${rec.id}`);
    expect(one.body.result.id).toBe(rec.id);
    expect((await t.call('GET', `/accounts/${t.accountId}/ddos/attacks/${'e'.repeat(32)}`)).status).toBe(404);
    const badQuery = await t.call('GET', `/accounts/${t.accountId}/ddos/attacks?layer=l9`);
    expect(badQuery.status).toBe(400);
    expect(badQuery.body.errors[0].message).toContain('layer');
  });

  it('sensitivity eoff: the same flood is not mitigated', async () => {
    await overrides({ sensitivity_level: 'eoff' });
    const before = (await attacks()).length;
    const { floods } = await floodWithLegit(1000);
    expect(floods[0].statuses[403] ?? 0).toBe(0);
    expect((await attacks()).length).toBe(before);
  });

  it('action log: the attack is recorded but nothing is blocked', async () => {
    await overrides({ action: 'log' });
    const { floods } = await floodWithLegit(1000);
    expect(floods[0].statuses[403] ?? 0).toBe(0);
    await quiet();
    const rec = (await attacks()).find((a) => a.rule_id === SOURCE_RULE);
    expect(rec).toMatchObject({ action: 'log', mitigated: 0, status: 'ended' });
    expect(rec.logged).toBeGreaterThan(0);
  });

  it('a rule-level override beats the category and ruleset levels', async () => {
    await overrides({ sensitivity_level: 'eoff', categories: [{ category: 'http-flood', action: 'log', sensitivity_level: 'eoff' }], rules: [{ id: SOURCE_RULE, action: 'block', sensitivity_level: 'default' }] });
    const { floods, legit } = await floodWithLegit(1000);
    expect(floods[0].statuses[403] ?? 0).toBeGreaterThan(0);
    expect(legit.statuses[403] ?? 0).toBe(0);
    await quiet();
  });

  it('a many-source flood is caught by the host rule; each attacker is mitigated, the other source is not', async () => {
    await overrides({ rules: [{ id: SOURCE_RULE, enabled: false }] });
    // A host of its own: its baseline is only what this test sends.
    await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'many', content: ORIGIN, proxied: true, ttl: 1 });
    const { floods, legit } = await floodWithLegit(2000, ['127.0.222.3', '127.0.222.4'], '/', 6, 'many.flood.test');
    for (const f of floods) expect(f.statuses[403] ?? 0).toBeGreaterThan(0);
    expect(legit.statuses[403] ?? 0).toBe(0);
    await quiet();
    const rec = (await attacks()).find((a) => a.rule_id === HOST_RULE && a.target_hostname === 'many.flood.test');
    expect(rec).toMatchObject({ detection: 'many_sources', status: 'ended' });
    expect(rec.source_count).toBe(2);
    expect(rec.sources).not.toContain(LEGIT);
  });

  it('managed_challenge: the flood gets the interstitial, and a solved challenge passes', async () => {
    await overrides({ action: 'managed_challenge' });
    const f = flood({ url: edge, host: HOST, from: ATTACKER, durationMs: 1500, concurrency: 4 });
    // Ask during the flood until challenged, then solve it from the same source.
    let page: Awaited<ReturnType<typeof request>> | undefined;
    for (let i = 0; i < 60 && !page; i++) {
      const r = await request(edge, HOST, ATTACKER);
      if (r.status === 403) page = r;
      else await new Promise((res) => setTimeout(res, 25));
    }
    expect(page?.headers['cf-mitigated']).toBe('challenge');
    const token = /const token = "([^"]+)"/.exec(page!.body)![1];
    const verified = await request(edge, HOST, ATTACKER, '/cdn-cgi/challenge-platform/verify', { 'content-type': 'application/x-www-form-urlencoded' }, 'POST', `token=${encodeURIComponent(token)}&answer=${solveChallenge(token)}`);
    expect(verified.status).toBe(200);
    const cookie = String(verified.headers['set-cookie']).split(';')[0];
    expect((await request(edge, HOST, ATTACKER, '/', { cookie })).status).toBe(200);
    expect((await f).statuses[403] ?? 0).toBeGreaterThan(0);
    await quiet();
    await overrides(undefined);
  });

  it('an override scoped by its expression leaves other hosts on the defaults; a flood without User-Agent is caught by the anomaly rule', async () => {
    const scoped = async (host: string) =>
      cf.rulesets.phases.update('ddos_l7', {
        zone_id: zone.id,
        rules: [{ action: 'execute', expression: `http.host eq "${host}"`, action_parameters: { id: DDOS_L7_ID, overrides: { sensitivity_level: 'eoff' } } }],
      } as never);
    // eoff for another host only: this host keeps the default sensitivity and is protected.
    await scoped('other.flood.test');
    const other = await floodWithLegit(1000);
    expect(other.floods[0].statuses[403] ?? 0).toBeGreaterThan(0);
    await quiet();
    // The same override scoped to this host: nothing is mitigated.
    await scoped(HOST);
    const own = await floodWithLegit(1000);
    expect(own.floods[0].statuses[403] ?? 0).toBe(0);

    // Only the anomaly rules left on: requests without a User-Agent are the flood.
    const BARE = '127.0.222.5';
    await overrides({ categories: [{ category: 'http-flood', enabled: false }] });
    const bare = await flood({ url: edge, host: HOST, from: BARE, durationMs: 1000, concurrency: 4 });
    expect(bare.statuses[403] ?? 0).toBeGreaterThan(0);
    await quiet();
    const rec = (await attacks()).find((a) => a.rule_id === managedRuleId('l7', 3));
    expect(rec).toMatchObject({ category: 'http-anomaly', action: 'block', status: 'ended', sources: [BARE] });
    expect((await request(edge, HOST, LEGIT, '/', { 'user-agent': 'legit-browser/1.0' })).status).toBe(200);
    await overrides(undefined);
  });
});
