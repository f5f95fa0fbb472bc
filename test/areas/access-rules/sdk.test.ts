import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';

let t: TestServer;
let cf: Cloudflare;
let zoneId: string;

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
  zoneId = (await createZone(t, 'sdk-access-rules.test')).id;
});
afterAll(() => t.stop());

describe('official client: firewall.accessRules', () => {
  it('create → get → edit → delete round trip at zone level', async () => {
    const created = await cf.firewall.accessRules.create({ zone_id: zoneId, mode: 'block', configuration: { target: 'ip', value: '198.51.100.4' }, notes: 'scanner' });
    expect(created).toMatchObject({ mode: 'block', configuration: { target: 'ip', value: '198.51.100.4' }, notes: 'scanner' });
    expect(created.scope).toMatchObject({ id: zoneId, type: 'zone' });
    const got = await cf.firewall.accessRules.get(created.id, { zone_id: zoneId });
    expect(got.id).toBe(created.id);
    const edited = await cf.firewall.accessRules.edit(created.id, { zone_id: zoneId, mode: 'managed_challenge', configuration: { target: 'ip', value: '198.51.100.4' }, notes: 'maybe a scanner' });
    expect(edited).toMatchObject({ mode: 'managed_challenge', notes: 'maybe a scanner' });
    const deleted = await cf.firewall.accessRules.delete(created.id, { zone_id: zoneId });
    expect(deleted?.id).toBe(created.id);
    await expect(cf.firewall.accessRules.get(created.id, { zone_id: zoneId })).rejects.toBeInstanceOf(Cloudflare.NotFoundError);
  });

  it('auto-paginates an account list and filters', async () => {
    const made = new Set<string>();
    for (let i = 0; i < 12; i++) {
      made.add((await cf.firewall.accessRules.create({ account_id: t.accountId, mode: i % 2 ? 'block' : 'challenge', configuration: { target: 'ip', value: `203.0.113.${i + 1}` } })).id);
    }
    const seen: string[] = [];
    for await (const r of cf.firewall.accessRules.list({ account_id: t.accountId, per_page: 5 })) seen.push(r.id);
    expect(seen).toHaveLength(12);
    expect(new Set(seen)).toEqual(made);
    const blocks = await cf.firewall.accessRules.list({ account_id: t.accountId, mode: 'block', per_page: 50 });
    expect(blocks.result).toHaveLength(6);
    const byValue = await cf.firewall.accessRules.list({ zone_id: zoneId, configuration: { target: 'ip', value: '203.0.113.3' } });
    expect(byValue.result).toHaveLength(1);
    expect(byValue.result[0].scope?.type).toBe('account');
  });

  it('errors arrive typed: duplicate → BadRequestError 10009, bad value → BadRequestError', async () => {
    await cf.firewall.accessRules.create({ zone_id: zoneId, mode: 'block', configuration: { target: 'country', value: 'CN' } });
    const dup = await cf.firewall.accessRules.create({ zone_id: zoneId, mode: 'block', configuration: { target: 'country', value: 'cn' } }).catch((e) => e);
    expect(dup).toBeInstanceOf(Cloudflare.BadRequestError);
    expect(dup.errors[0].code).toBe(10009);
    const bad = await cf.firewall.accessRules.create({ zone_id: zoneId, mode: 'block', configuration: { target: 'ip_range', value: '10.0.0.0/8' } }).catch((e) => e);
    expect(bad).toBeInstanceOf(Cloudflare.BadRequestError);
  });
});
