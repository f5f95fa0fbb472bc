import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, createZone, LEGACY, startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';

let t: TestServer;
let cf: Cloudflare;
let zoneId: string;

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
  zoneId = (await createZone(t, 'sdk-dns.test')).id;
});
afterAll(() => t.stop());

describe('official client: dns.records', () => {
  it('create → get → update → edit → delete round trip', async () => {
    const created = await cf.dns.records.create({ zone_id: zoneId, type: 'A', name: 'app', content: '192.0.2.50', ttl: 1, proxied: true });
    expect(created).toMatchObject({ name: 'app.sdk-dns.test', content: '192.0.2.50', proxied: true });
    const got = await cf.dns.records.get(created.id, { zone_id: zoneId });
    expect(got.id).toBe(created.id);
    const updated = await cf.dns.records.update(created.id, { zone_id: zoneId, type: 'A', name: 'app', content: '192.0.2.51', ttl: 300 });
    expect(updated).toMatchObject({ content: '192.0.2.51', ttl: 300 });
    const edited = await cf.dns.records.edit(created.id, { zone_id: zoneId, type: 'A', name: 'app', content: '192.0.2.52' } as never);
    expect(edited.content).toBe('192.0.2.52');
    const deleted = await cf.dns.records.delete(created.id, { zone_id: zoneId });
    expect(deleted?.id).toBe(created.id);
    await expect(cf.dns.records.get(created.id, { zone_id: zoneId })).rejects.toBeInstanceOf(Cloudflare.NotFoundError);
  });

  it('auto-pagination over more than three pages returns every record once', async () => {
    const z = (await createZone(t, 'sdk-paging.test')).id;
    const want = new Set<string>();
    for (let i = 0; i < 23; i++) {
      want.add((await cf.dns.records.create({ zone_id: z, type: 'A', name: `h${i}`, content: `203.0.113.${i}`, ttl: 1 })).id);
    }
    const seen: string[] = [];
    for await (const r of cf.dns.records.list({ zone_id: z, per_page: 5 })) seen.push(r.id);
    expect(seen).toHaveLength(23);
    expect(new Set(seen)).toEqual(want);
    const filtered = await cf.dns.records.list({ zone_id: z, type: 'A', name: { startswith: 'h1' }, per_page: 50 });
    expect(filtered.result.map((r) => r.name).sort()).toEqual(['h1.sdk-paging.test', ...Array.from({ length: 10 }, (_, i) => `h1${i}.sdk-paging.test`)].sort());
  });

  it('errors arrive as typed APIError subclasses carrying our errors array', async () => {
    await cf.dns.records.create({ zone_id: zoneId, type: 'A', name: 'twice', content: '192.0.2.9', ttl: 1 });
    const dup = await cf.dns.records.create({ zone_id: zoneId, type: 'A', name: 'twice', content: '192.0.2.9', ttl: 1 }).catch((e) => e);
    expect(dup).toBeInstanceOf(Cloudflare.BadRequestError);
    expect(dup.errors[0].code).toBe(81058);
    const missing = await cf.dns.records.get('0'.repeat(32), { zone_id: zoneId }).catch((e) => e);
    expect(missing).toBeInstanceOf(Cloudflare.NotFoundError);
    expect(missing.errors[0].code).toBe(81044);
    const bad = new Cloudflare({ baseURL: t.api, apiToken: 'not-a-token', maxRetries: 0 });
    await expect(bad.dns.records.list({ zone_id: zoneId })).rejects.toBeInstanceOf(Cloudflare.AuthenticationError);
  });

  it('legacy email + key auth works; a scoped token gets 403 outside its zone', async () => {
    const legacy = sdk(t, { apiEmail: LEGACY.email, apiKey: LEGACY.key });
    const page = await legacy.dns.records.list({ zone_id: zoneId });
    expect(page.result.length).toBeGreaterThan(0);
    const otherZone = (await createZone(t, 'sdk-other.test')).id;
    const token = await createToken(t, ['DNS Write'], { [`com.cloudflare.api.account.zone.${zoneId}`]: '*' });
    const scoped = sdk(t, { apiToken: token });
    expect((await scoped.dns.records.create({ zone_id: zoneId, type: 'TXT', name: 'scoped', content: 'ok', ttl: 1 })).name).toBe('scoped.sdk-dns.test');
    const denied = await scoped.dns.records.list({ zone_id: otherZone }).catch((e) => e);
    expect(denied).toBeInstanceOf(Cloudflare.PermissionDeniedError);
  });

  it('export, import and batch through the client', async () => {
    const z = (await createZone(t, 'sdk-files.test')).id;
    await cf.dns.records.create({ zone_id: z, type: 'A', name: 'www', content: '192.0.2.80', ttl: 1, proxied: true });
    const text = await cf.dns.records.export({ zone_id: z });
    expect(text).toMatch(/www\.sdk-files\.test\.\s+1\s+IN\s+A\s+192\.0\.2\.80/);

    const z2 = (await createZone(t, 'sdk-files2.test')).id;
    // The client's type says `file: string` (the zone file text); it sends it as a multipart field.
    const imported = await cf.dns.records.import({ zone_id: z2, file: text.replaceAll('sdk-files.test', 'sdk-files2.test') });
    expect(imported).toMatchObject({ recs_added: 1, total_records_parsed: 1 });

    const batch = await cf.dns.records.batch({ zone_id: z2, posts: [{ type: 'A', name: 'b1', content: '192.0.2.81', ttl: 1 }] });
    expect(batch?.posts?.[0]?.name).toBe('b1.sdk-files2.test');
  });
});
