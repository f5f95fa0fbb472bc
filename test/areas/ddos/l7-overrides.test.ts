/**
 * More of the L7 rules and overrides on live edge traffic: the malformed-request rule (GET
 * requests framed with Transfer-Encoding), the plain `challenge` action (interstitial, solvable),
 * and an account-level `ddos_l7` override: it applies to the account's zones, comes before the
 * zone's own override, and leaves the zone's override in force where its expression does not
 * match. Each test floods a host of its own, so baselines do not mix.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { solveChallenge } from '../../../src/edge/challenge.ts';
import { DDOS_L7_ID, managedRuleId } from '../../../src/areas/rulesets/index.ts';
import type { TestServer } from '../../support/server.ts';
import { sdk, type Cloudflare } from '../../support/sdk.ts';
import { startFloodSite, type FloodSite } from './site.ts';
import { flood, request } from './load.ts';

const ORIGIN = '127.0.226.1';
const ATTACKER = '127.0.226.2';
const LEGIT = '127.0.226.9';
const SOURCE_RULE = managedRuleId('l7', 2);
const MALFORMED_RULE = managedRuleId('l7', 4);

let t: TestServer;
let cf: Cloudflare;
let edge: URL;
let zone: { id: string; name: string };

let site: FloodSite | undefined;
beforeAll(async () => {
  site = await startFloodSite(ORIGIN, 'overrides.test', ['bad', 'chal', 'acct', 'other']);
  ({ t, edge, zone } = site);
  cf = sdk(t);
});
afterAll(async () => {
  await site?.close();
});

async function zoneOverrides(o: Record<string, unknown> | undefined): Promise<string> {
  const r = await cf.rulesets.phases.update('ddos_l7', {
    zone_id: zone.id,
    rules: [{ action: 'execute', expression: 'true', action_parameters: { id: DDOS_L7_ID, ...(o ? { overrides: o } : {}) } }],
  } as never);
  return (r as { rules: { id?: string }[] }).rules[0].id!;
}

async function accountOverrides(expression: string | undefined, o: Record<string, unknown> = {}): Promise<string | undefined> {
  const r = await cf.rulesets.phases.update('ddos_l7', {
    account_id: t.accountId,
    rules: expression === undefined ? [] : [{ action: 'execute', expression, action_parameters: { id: DDOS_L7_ID, overrides: o } }],
  } as never);
  return (r as { rules: { id?: string }[] }).rules[0]?.id;
}

async function quiet(): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const s = await t.call('GET', `/zones/${zone.id}/ddos/status`);
    if (s.body.result.active_attacks.length === 0) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('attack did not end');
}

async function attacksOf(host: string): Promise<any[]> {
  const res = await t.call('GET', `/zones/${zone.id}/ddos/attacks?per_page=100`);
  expect(res.status).toBe(200);
  return (res.body.result as any[]).filter((a) => a.target_hostname === host);
}

/** A flood from ATTACKER (with a User-Agent) while LEGIT asks ~4 times a second. */
async function floodWithLegit(host: string, durationMs = 1000, headers: Record<string, string> = {}) {
  const legit = flood({ url: edge, host, from: LEGIT, durationMs, concurrency: 1, intervalMs: 250, headers: { 'user-agent': 'legit-browser/1.0' } });
  const attack = await flood({ url: edge, host, from: ATTACKER, durationMs, concurrency: 4, headers: { 'user-agent': 'flood/1.0', ...headers } });
  return { attack, legit: await legit };
}

describe('L7 rules and overrides', () => {
  it('a flood of malformed requests (GET with Transfer-Encoding) meets the malformed-request rule; well-formed requests pass', async () => {
    const host = `bad.${zone.name}`;
    // The flood rules off: only the anomaly rules look at this traffic.
    await zoneOverrides({ categories: [{ category: 'http-flood', enabled: false }] });
    const { attack, legit } = await floodWithLegit(host, 1000, { 'transfer-encoding': 'chunked' });
    expect(attack.statuses[403] ?? 0).toBeGreaterThan(0);
    expect(legit.statuses[403] ?? 0).toBe(0);
    expect(legit.statuses[200]).toBeGreaterThan(1);
    await quiet();
    const recs = await attacksOf(host);
    expect(recs.map((a) => a.rule_id)).toEqual([MALFORMED_RULE]);
    expect(recs[0]).toMatchObject({ category: 'http-anomaly', action: 'block', status: 'ended', sources: [ATTACKER] });
    expect(recs[0].mitigated).toBeGreaterThan(0);
  });

  it('action challenge: the flood gets the interstitial, a solved challenge passes, the attack says challenge', async () => {
    const host = `chal.${zone.name}`;
    await zoneOverrides({ action: 'challenge' });
    const f = flood({ url: edge, host, from: ATTACKER, durationMs: 1500, concurrency: 4 });
    let page: Awaited<ReturnType<typeof request>> | undefined;
    for (let i = 0; i < 60 && !page; i++) {
      const r = await request(edge, host, ATTACKER);
      if (r.status === 403) page = r;
      else await new Promise((res) => setTimeout(res, 25));
    }
    expect(page?.headers['cf-mitigated']).toBe('challenge');
    const token = /const token = "([^"]+)"/.exec(page!.body)![1];
    const verified = await request(edge, host, ATTACKER, '/cdn-cgi/challenge-platform/verify', { 'content-type': 'application/x-www-form-urlencoded' }, 'POST', `token=${encodeURIComponent(token)}&answer=${solveChallenge(token)}`);
    expect(verified.status).toBe(200);
    const cookie = String(verified.headers['set-cookie']).split(';')[0];
    expect((await request(edge, host, ATTACKER, '/', { cookie })).status).toBe(200);
    expect((await f).statuses[403] ?? 0).toBeGreaterThan(0);
    await quiet();
    const rec = (await attacksOf(host)).find((a) => a.rule_id === SOURCE_RULE);
    expect(rec).toMatchObject({ action: 'challenge', status: 'ended' });
    expect(rec.mitigated).toBeGreaterThan(0);
  });

  it("an account-level override applies to the account's zones before the zone's own; where its expression does not match, the zone's applies", async () => {
    const host = `acct.${zone.name}`;
    // The zone asks for log; the account turns detection essentially off for every host: the
    // account's entry point comes first.
    const zoneRule = await zoneOverrides({ action: 'log' });
    await accountOverrides('true', { sensitivity_level: 'eoff' });
    const off = await floodWithLegit(host);
    expect(off.attack.statuses[403] ?? 0).toBe(0);
    await new Promise((r) => setTimeout(r, 600));
    expect(await attacksOf(host)).toEqual([]);

    // Scoped to another host, the account's override no longer matches: the zone's log applies.
    await accountOverrides(`http.host eq "other.${zone.name}"`, { sensitivity_level: 'eoff' });
    const logged = await floodWithLegit(host);
    expect(logged.attack.statuses[403] ?? 0).toBe(0);
    await quiet();
    const rec = (await attacksOf(host)).find((a) => a.rule_id === SOURCE_RULE);
    expect(rec).toMatchObject({ action: 'log', ruleset_override_id: zoneRule, mitigated: 0 });
    expect(rec.logged).toBeGreaterThan(0);

    // An account-level rule override beats the account's category level, and blocks.
    const acctRule = await accountOverrides('true', { categories: [{ category: 'http-flood', action: 'log' }], rules: [{ id: SOURCE_RULE, action: 'block' }] });
    const blocked = await floodWithLegit(host);
    expect(blocked.attack.statuses[403] ?? 0).toBeGreaterThan(0);
    expect(blocked.legit.statuses[403] ?? 0).toBe(0);
    await quiet();
    const latest = (await attacksOf(host)).filter((a) => a.rule_id === SOURCE_RULE && a.id !== rec.id);
    expect(latest[0]).toMatchObject({ action: 'block', ruleset_override_id: acctRule });
    await accountOverrides(undefined);
  });
});
