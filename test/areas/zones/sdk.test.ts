/** Zones through the official `cloudflare` client against a live server. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, LEGACY, startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';

let t: TestServer;
let client: Cloudflare;
beforeAll(async () => {
  t = await startTestServer();
  client = sdk(t);
});
afterAll(async () => {
  await t?.stop();
});

/** Runs `fn` and returns what it threw. */
async function thrown(fn: () => Promise<unknown>): Promise<any> {
  try {
    await fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected the call to throw');
}

describe('zones.* round trip', () => {
  it('create → get → edit → list → delete', async () => {
    const zone = await client.zones.create({
      name: 'SDK-Round-Trip.example',
      account: { id: t.accountId },
      type: 'full',
    });
    expect(zone.id).toMatch(/^[0-9a-f]{32}$/);
    expect(zone.name).toBe('sdk-round-trip.example');
    expect(zone.status).toBe('active');
    expect(zone.account.id).toBe(t.accountId);
    expect(zone.name_servers.length).toBeGreaterThan(0);

    const got = await client.zones.get({ zone_id: zone.id });
    expect(got).toEqual(zone);

    const edited = await client.zones.edit({ zone_id: zone.id, paused: true });
    expect(edited.paused).toBe(true);
    const retyped = await client.zones.edit({ zone_id: zone.id, type: 'partial' });
    expect(retyped.type).toBe('partial');
    expect(retyped.paused).toBe(true);

    const page = await client.zones.list({ name: 'sdk-round-trip.example' });
    expect(page.result.map((z) => z.id)).toEqual([zone.id]);
    expect(page.result_info).toMatchObject({ page: 1, count: 1, total_count: 1 });

    const filtered = await client.zones.list({
      account: { id: t.accountId },
      status: 'active',
      name: 'contains:round-trip',
    });
    expect(filtered.result.map((z) => z.id)).toEqual([zone.id]);

    const deleted = await client.zones.delete({ zone_id: zone.id });
    expect(deleted).toEqual({ id: zone.id });
    const gone = await thrown(() => client.zones.get({ zone_id: zone.id }));
    expect(gone).toBeInstanceOf(Cloudflare.NotFoundError);
  });
});

describe('auto-pagination', () => {
  let p: TestServer;
  const created: string[] = [];
  beforeAll(async () => {
    p = await startTestServer();
    const c = sdk(p);
    for (let i = 0; i < 17; i++) {
      const z = await c.zones.create({
        name: `page-${String(i).padStart(2, '0')}.example`,
        account: { id: p.accountId },
      });
      created.push(z.id);
    }
  });
  afterAll(async () => {
    await p?.stop();
  });

  it('for await over 17 zones with per_page 5 returns every zone exactly once', async () => {
    const c = sdk(p);
    const seen: string[] = [];
    for await (const z of c.zones.list({ per_page: 5 })) seen.push(z.id);
    expect(seen).toHaveLength(17);
    expect(new Set(seen).size).toBe(17);
    expect([...seen].sort()).toEqual([...created].sort());
  });

  it('walks more than three pages, each with a consistent result_info', async () => {
    const c = sdk(p);
    const sizes: number[] = [];
    const infos: unknown[] = [];
    for await (const page of (await c.zones.list({ per_page: 5 })).iterPages()) {
      sizes.push(page.result.length);
      infos.push(page.result_info);
    }
    expect(sizes.slice(0, 4)).toEqual([5, 5, 5, 2]);
    expect(sizes.filter((n) => n > 0).length).toBeGreaterThan(3);
    expect(infos[0]).toMatchObject({ page: 1, per_page: 5, total_count: 17, total_pages: 4 });
    expect(infos[3]).toMatchObject({
      page: 4,
      per_page: 5,
      count: 2,
      total_count: 17,
      total_pages: 4,
    });
  });

  it('pages in the requested order', async () => {
    const c = sdk(p);
    const names: string[] = [];
    for await (const z of c.zones.list({ per_page: 5, order: 'name', direction: 'desc' }))
      names.push(z.name);
    expect(names).toEqual([...names].sort().reverse());
    expect(names).toHaveLength(17);
  });
});

describe('errors arrive as the right APIError subclass with our errors array', () => {
  it('404 → NotFoundError', async () => {
    const err = await thrown(() => client.zones.get({ zone_id: 'a'.repeat(32) }));
    expect(err).toBeInstanceOf(Cloudflare.NotFoundError);
    expect(err.status).toBe(404);
    expect(err.errors[0].code).toBeGreaterThanOrEqual(1000);
    expect(typeof err.errors[0].message).toBe('string');
  });

  it('409 → ConflictError, not retried', async () => {
    await client.zones.create({ name: 'sdk-dupe.example', account: { id: t.accountId } });
    const statuses: number[] = [];
    const counting = new Cloudflare({
      baseURL: t.api,
      apiToken: t.token,
      maxRetries: 2,
      fetch: async (input, init) => {
        const r = await fetch(input, init);
        statuses.push(r.status);
        return r;
      },
    });
    const err = await thrown(() =>
      counting.zones.create({ name: 'sdk-dupe.example', account: { id: t.accountId } }),
    );
    expect(err).toBeInstanceOf(Cloudflare.ConflictError);
    expect(err.errors[0].code).toBe(1061);
    expect(statuses).toEqual([409]);
  });

  it('400 → BadRequestError', async () => {
    const err = await thrown(() =>
      client.zones.create({ name: 'not a domain', account: { id: t.accountId } }),
    );
    expect(err).toBeInstanceOf(Cloudflare.BadRequestError);
    expect(err.errors[0].message).toMatch(/name/i);
    const perPage = await thrown(() => client.zones.list({ per_page: 2 }));
    expect(perPage).toBeInstanceOf(Cloudflare.BadRequestError);
    expect(perPage.errors[0].message).toMatch(/^per_page/);
  });

  it('401 → AuthenticationError', async () => {
    const err = await thrown(() => sdk(t, { apiToken: 'no-such-token' }).zones.list());
    expect(err).toBeInstanceOf(Cloudflare.AuthenticationError);
    expect(err.errors[0].code).toBe(10000);
  });

  it('403 → PermissionDeniedError for a token scoped to another zone', async () => {
    const mine = await client.zones.create({
      name: 'sdk-scope-a.example',
      account: { id: t.accountId },
    });
    const theirs = await client.zones.create({
      name: 'sdk-scope-b.example',
      account: { id: t.accountId },
    });
    const token = await createToken(t, ['Zone Read'], {
      [`com.cloudflare.api.account.zone.${mine.id}`]: '*',
    });
    const scoped = sdk(t, { apiToken: token });
    expect((await scoped.zones.get({ zone_id: mine.id })).id).toBe(mine.id);
    const err = await thrown(() => scoped.zones.get({ zone_id: theirs.id }));
    expect(err).toBeInstanceOf(Cloudflare.PermissionDeniedError);
    expect(err.errors[0].code).toBeGreaterThanOrEqual(1000);
    const seen: string[] = [];
    for await (const z of scoped.zones.list()) seen.push(z.id);
    expect(seen).toEqual([mine.id]);
    const edit = await thrown(() => scoped.zones.edit({ zone_id: mine.id, paused: true }));
    expect(edit).toBeInstanceOf(Cloudflare.PermissionDeniedError);
  });
});

describe('legacy email/key through the client', () => {
  it('works, and a wrong key is an AuthenticationError', async () => {
    const legacy = sdk(t, { apiEmail: LEGACY.email, apiKey: LEGACY.key });
    const zone = await legacy.zones.create({
      name: 'sdk-legacy.example',
      account: { id: t.accountId },
    });
    expect((await legacy.zones.get({ zone_id: zone.id })).name).toBe('sdk-legacy.example');
    const wrong = await thrown(() =>
      sdk(t, { apiEmail: LEGACY.email, apiKey: 'wrong' }).zones.get({ zone_id: zone.id }),
    );
    expect(wrong).toBeInstanceOf(Cloudflare.AuthenticationError);
  });
});

describe('zones.activationCheck.trigger', () => {
  let m: TestServer;
  beforeAll(async () => {
    m = await startTestServer({ zoneActivation: 'manual' });
  });
  afterAll(async () => {
    await m?.stop();
  });

  it('activates a pending zone', async () => {
    const c = sdk(m);
    const zone = await c.zones.create({
      name: 'sdk-pending.example',
      account: { id: m.accountId },
    });
    expect(zone.status).toBe('pending');
    expect(zone.activated_on).toBeNull();
    const res = await c.zones.activationCheck.trigger({ zone_id: zone.id });
    expect(res).toEqual({ id: zone.id });
    const after = await c.zones.get({ zone_id: zone.id });
    expect(after.status).toBe('active');
    expect(after.activated_on).not.toBeNull();
  });
});
