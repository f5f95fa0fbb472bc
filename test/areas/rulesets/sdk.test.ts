import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';

const PHASE = 'http_request_firewall_custom';

/** The client types these answers as `unknown` (a union with an open variant). */
interface RS {
  id: string;
  name: string;
  kind: string;
  phase: string;
  version: string;
  description: string;
  rules: { id: string; ref: string; action: string; description: string; enabled: boolean }[];
}
const rs_ = (v: unknown) => v as RS;

let t: TestServer;
let cf: Cloudflare;
let zoneId: string;

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
  zoneId = (await createZone(t, 'sdk-rulesets.test')).id;
});
afterAll(() => t.stop());

describe('official client: rulesets', () => {
  it('phases.get is NotFound until phases.update; versions of the entry point', async () => {
    const missing = await cf.rulesets.phases.get(PHASE, { zone_id: zoneId }).catch((e) => e);
    expect(missing).toBeInstanceOf(Cloudflare.NotFoundError);
    expect(missing.errors[0].code).toBe(10003);

    const created = rs_(await cf.rulesets.phases.update(PHASE, {
      zone_id: zoneId,
      rules: [{ action: 'block', expression: 'ip.src eq 198.51.100.7', description: 'one bad client', action_parameters: { response: { status_code: 403, content: 'go away', content_type: 'text/plain' } } }],
    }));
    expect(created).toMatchObject({ kind: 'zone', phase: PHASE, version: '1' });
    const got = await cf.rulesets.phases.get(PHASE, { zone_id: zoneId });
    expect(got.id).toBe(created.id);
    expect(got.rules[0]).toMatchObject({ action: 'block', description: 'one bad client' });

    await cf.rulesets.phases.update(PHASE, { zone_id: zoneId, rules: [] });
    const versions = [];
    for await (const v of cf.rulesets.phases.versions.list(PHASE, { zone_id: zoneId })) versions.push(v.version);
    expect(versions).toEqual(['1', '2']);
    const v1 = await cf.rulesets.phases.versions.get('1', { zone_id: zoneId, ruleset_phase: PHASE });
    expect(v1.rules).toHaveLength(1);
  });

  it('create → get → rules.create/edit/delete → update → versions → delete', async () => {
    const rs = rs_(await cf.rulesets.create({ account_id: t.accountId, name: 'client made', kind: 'custom', phase: PHASE, rules: [{ action: 'log', expression: 'true', ref: 'log-all' }] }));
    expect(rs).toMatchObject({ name: 'client made', kind: 'custom', version: '1' });
    const got = await cf.rulesets.get(rs.id, { account_id: t.accountId });
    expect(got.rules.map((r) => r.ref)).toEqual(['log-all']);

    const added = await cf.rulesets.rules.create(rs.id, {
      account_id: t.accountId,
      action: 'managed_challenge',
      expression: 'ip.src.country eq "T1"',
      ref: 'tor',
      position: { before: '' },
    });
    const addedRules = (added as { rules: { id: string; ref: string }[] }).rules;
    expect(addedRules.map((r) => r.ref)).toEqual(['tor', 'log-all']);

    const tor = addedRules[0].id;
    const edited = await cf.rulesets.rules.edit(tor, { ruleset_id: rs.id, account_id: t.accountId, action: 'managed_challenge', enabled: false } as never);
    expect((edited as { rules: { id: string; enabled: boolean }[] }).rules.find((r) => r.id === tor)?.enabled).toBe(false);

    const afterDelete = await cf.rulesets.rules.delete(tor, { ruleset_id: rs.id, account_id: t.accountId });
    expect((afterDelete as { rules: unknown[] }).rules).toHaveLength(1);

    const updated = await cf.rulesets.update(rs.id, { account_id: t.accountId, description: 'now described', rules: [{ action: 'log', expression: 'true' }] });
    expect(updated).toMatchObject({ description: 'now described', version: '5' });

    const versions = [];
    for await (const v of cf.rulesets.versions.list(rs.id, { account_id: t.accountId })) versions.push(v.version);
    expect(versions).toEqual(['1', '2', '3', '4', '5']);
    expect((await cf.rulesets.versions.get('2', { ruleset_id: rs.id, account_id: t.accountId })).rules).toHaveLength(2);
    await cf.rulesets.versions.delete('2', { ruleset_id: rs.id, account_id: t.accountId });
    await expect(cf.rulesets.versions.get('2', { ruleset_id: rs.id, account_id: t.accountId })).rejects.toBeInstanceOf(Cloudflare.NotFoundError);

    await cf.rulesets.delete(rs.id, { account_id: t.accountId });
    await expect(cf.rulesets.get(rs.id, { account_id: t.accountId })).rejects.toBeInstanceOf(Cloudflare.NotFoundError);
  });

  it('list auto-paginates with the cursor and finds the managed DDoS ruleset', async () => {
    const made = new Set<string>();
    for (let i = 0; i < 7; i++) {
      made.add(rs_(await cf.rulesets.create({ account_id: t.accountId, name: `paged ${i}`, kind: 'custom', phase: PHASE, rules: [] })).id);
    }
    const seen: string[] = [];
    for await (const r of cf.rulesets.list({ account_id: t.accountId, per_page: 3 })) seen.push(r.id);
    expect(new Set(seen).size).toBe(seen.length);
    for (const id of made) expect(seen).toContain(id);
    const first = await cf.rulesets.list({ account_id: t.accountId, per_page: 3 });
    expect(first.result).toHaveLength(3);
    expect(first.hasNextPage()).toBe(true);

    const managed = [];
    for await (const r of cf.rulesets.list({ zone_id: zoneId })) if (r.kind === 'managed' && r.phase === 'ddos_l7') managed.push(r);
    expect(managed).toHaveLength(1);
    const entry = rs_(await cf.rulesets.phases.update('ddos_l7', {
      zone_id: zoneId,
      rules: [{ action: 'execute', expression: 'true', action_parameters: { id: managed[0].id, overrides: { sensitivity_level: 'low' } } }],
    }));
    expect(entry.rules[0].action).toBe('execute');
  });

  it('a bad expression comes back as BadRequestError with source.pointer', async () => {
    const err: any = await cf.rulesets.phases
      .update(PHASE, { zone_id: zoneId, rules: [{ action: 'block', expression: 'http.host eq @@' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Cloudflare.BadRequestError);
    expect(err.errors[0]).toMatchObject({ code: 20021, source: { pointer: '/rules/0/expression' } });
    const readOnly = await cf.rulesets.update('4d21379b4f9f4bb088e0729962c8b3cf', { zone_id: zoneId, rules: [] }).catch((e) => e);
    expect(readOnly).toBeInstanceOf(Cloudflare.PermissionDeniedError);
  });
});
