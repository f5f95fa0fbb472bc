import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lastServer } from './probe.ts';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import type { RulesetService } from '../../../src/areas/rulesets/index.ts';

const PHASE = 'http_request_firewall_custom';

let t: TestServer;
let service: RulesetService;
let zoneA: { id: string };
let zoneB: { id: string };
const events: unknown[] = [];

beforeAll(async () => {
  t = await startTestServer();
  const { services, events: bus } = lastServer();
  service = services.require<RulesetService>('rulesets');
  bus.subscribe('rulesets.changed', (e) => events.push(e));
  zoneA = await createZone(t, 'phase-rules-a.test');
  zoneB = await createZone(t, 'phase-rules-b.test');
});
afterAll(() => t.stop());

const putEntry = async (owner: string, rules: unknown[], phase = PHASE) => {
  const res = await t.call('PUT', `${owner}/rulesets/phases/${phase}/entrypoint`, { rules });
  if (res.status !== 200) throw new Error(res.text);
  return res.body.result;
};

describe('RulesetService.phaseRules', () => {
  it('is empty without entry points', async () => {
    expect(await service.phaseRules(PHASE, zoneA.id, t.accountId)).toEqual([]);
  });

  it('answers the account entry point rules, then the zone ones, enabled only, with their ruleset ids', async () => {
    const account = await putEntry(`/accounts/${t.accountId}`, [
      { action: 'block', expression: 'ip.src eq 192.0.2.1', ref: 'acct-1' },
      { action: 'log', expression: 'true', ref: 'acct-off', enabled: false },
      { action: 'managed_challenge', expression: 'ip.src.country eq "T1"', ref: 'acct-2' },
    ]);
    const zone = await putEntry(`/zones/${zoneA.id}`, [
      { action: 'skip', expression: 'http.request.uri.path eq "/health"', ref: 'zone-1', action_parameters: { ruleset: 'current' }, logging: { enabled: false } },
      { action: 'block', expression: 'true', ref: 'zone-2', action_parameters: { response: { status_code: 403, content: 'no', content_type: 'text/plain' } } },
    ]);
    const rules = await service.phaseRules(PHASE, zoneA.id, t.accountId);
    expect(rules.map((r) => r.ref)).toEqual(['acct-1', 'acct-2', 'zone-1', 'zone-2']);
    expect(rules.map((r) => r.scope)).toEqual(['account', 'account', 'zone', 'zone']);
    expect(rules[0]).toMatchObject({ rulesetId: account.id, action: 'block', expression: 'ip.src eq 192.0.2.1' });
    expect(rules[2]).toMatchObject({ rulesetId: zone.id, action: 'skip', action_parameters: { ruleset: 'current' }, logging: { enabled: false } });
    expect(rules[3].action_parameters).toEqual({ response: { status_code: 403, content: 'no', content_type: 'text/plain' } });
    expect(rules[0].id).toBe(account.rules[0].id);

    // Another zone of the account sees only the account rules.
    expect((await service.phaseRules(PHASE, zoneB.id, t.accountId)).map((r) => r.ref)).toEqual(['acct-1', 'acct-2']);
    // Other phases are separate.
    expect(await service.phaseRules('http_request_origin', zoneA.id, t.accountId)).toEqual([]);
  });

  it('serves from the cache and reflects every write at once (rulesets.changed is published)', async () => {
    const first = await service.phaseRules(PHASE, zoneA.id, t.accountId);
    expect(await service.phaseRules(PHASE, zoneA.id, t.accountId)).toBe(first);

    const zone = (await t.call('GET', `/zones/${zoneA.id}/rulesets/phases/${PHASE}/entrypoint`)).body.result;
    const off = zone.rules[1].id;
    await t.call('PATCH', `/zones/${zoneA.id}/rulesets/${zone.id}/rules/${off}`, { enabled: false });
    expect((await service.phaseRules(PHASE, zoneA.id, t.accountId)).map((r) => r.ref)).toEqual(['acct-1', 'acct-2', 'zone-1']);

    await t.call('POST', `/zones/${zoneA.id}/rulesets/${zone.id}/rules`, { action: 'log', expression: 'true', ref: 'zone-top', position: { index: 1 } });
    expect((await service.phaseRules(PHASE, zoneA.id, t.accountId)).map((r) => r.ref)).toEqual(['acct-1', 'acct-2', 'zone-top', 'zone-1']);

    const account = (await t.call('GET', `/accounts/${t.accountId}/rulesets/phases/${PHASE}/entrypoint`)).body.result;
    await t.call('DELETE', `/accounts/${t.accountId}/rulesets/${account.id}`);
    expect((await service.phaseRules(PHASE, zoneA.id, t.accountId)).map((r) => r.ref)).toEqual(['zone-top', 'zone-1']);

    expect(events.at(-1)).toEqual({ level: 'account', ownerId: t.accountId, accountId: t.accountId, rulesetId: account.id, phase: PHASE, kind: 'root' });

    // A dry run changes nothing and publishes nothing.
    const published = events.length;
    await t.call('PUT', `/zones/${zoneA.id}/rulesets/phases/${PHASE}/entrypoint?dry_run=true`, { rules: [] });
    expect((await service.phaseRules(PHASE, zoneA.id, t.accountId)).length).toBe(2);
    expect(events.length).toBe(published);
  });

  it('exposes the managed rulesets and an open phase table', async () => {
    const l7 = service.managedRuleset('4d21379b4f9f4bb088e0729962c8b3cf');
    expect(l7?.phase).toBe('ddos_l7');
    expect(new Set(l7?.rules.flatMap((r) => r.categories ?? []))).toEqual(new Set(['http-flood', 'http-anomaly']));
    expect(service.phases()).toContain('http_request_snippets');

    // Until registered, the snippets phase takes only the generic actions.
    const before = await t.call('PUT', `/zones/${zoneA.id}/rulesets/phases/http_request_snippets/entrypoint`, {
      rules: [{ action: 'snippet', expression: 'true', action_parameters: { snippet_name: 'hello' } }],
    });
    expect(before.status).toBe(400);
    service.registerPhase('http_request_snippets', { actions: ['snippet'], levels: ['zone'] });
    const after = await t.call('PUT', `/zones/${zoneA.id}/rulesets/phases/http_request_snippets/entrypoint`, {
      rules: [{ action: 'snippet', expression: 'true', action_parameters: { snippet_name: 'hello' } }],
    });
    expect(after.status).toBe(200);
    expect(await service.phaseRules('http_request_snippets', zoneA.id, t.accountId)).toEqual([
      expect.objectContaining({ action: 'snippet', action_parameters: { snippet_name: 'hello' } }),
    ]);
    expect((await t.call('PUT', `/accounts/${t.accountId}/rulesets/phases/http_request_snippets/entrypoint`, { rules: [] })).status).toBe(400);
  });

  it('drops a deleted zone from its answers', async () => {
    const z = await createZone(t, 'phase-rules-gone.test');
    await putEntry(`/zones/${z.id}`, [{ action: 'log', expression: 'true' }]);
    expect(await service.phaseRules(PHASE, z.id, t.accountId)).toHaveLength(1);
    await t.call('DELETE', `/zones/${z.id}`);
    expect(await service.phaseRules(PHASE, z.id, t.accountId)).toEqual([]);
  });
});
