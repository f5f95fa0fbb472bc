/** Zones over HTTP: create, list with filters and paging, get, edit, delete, activation, token scopes. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accounts, GLOBAL_SCOPE } from '../../../src/core/accounts.ts';
import {
  createToken,
  createZone,
  startTestServer,
  type CallResult,
  type TestServer,
} from '../../support/server.ts';

const HEX32 = /^[0-9a-f]{32}$/;
const SECOND_ACCOUNT = '0123456789abcdef0123456789abcdef';
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

function expectError(res: CallResult, status: number, code?: number): void {
  expect(res.status, res.text).toBe(status);
  expect(res.body.success).toBe(false);
  expect(res.body.result).toBeNull();
  expect(res.body.errors.length).toBeGreaterThan(0);
  if (code !== undefined) expect(res.body.errors[0].code).toBe(code);
}

/** Accounts cannot be created through the API; a second one is written straight to storage. */
async function addAccount(t: TestServer, id: string, name: string): Promise<void> {
  const now = new Date();
  await accounts.insert(
    t.server.database.db,
    GLOBAL_SCOPE,
    id,
    {
      id,
      name,
      type: 'standard',
      created_on: now.toISOString(),
      settings: { enforce_twofactor: false, abuse_contact_email: null },
    },
    now,
  );
}

const names = (res: CallResult) => res.body.result.map((z: { name: string }) => z.name);

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
  await addAccount(t, SECOND_ACCOUNT, 'Second account');
});
afterAll(async () => {
  await t?.stop();
});

describe('create', () => {
  it('creates an active full zone with the assigned name servers', async () => {
    const res = await t.call('POST', '/zones', {
      name: 'create-basic.example',
      account: { id: t.accountId },
    });
    expect(res.status, res.text).toBe(200);
    const z = res.body.result;
    expect(z.id).toMatch(HEX32);
    expect(z).toMatchObject({
      name: 'create-basic.example',
      status: 'active',
      paused: false,
      type: 'full',
      development_mode: 0,
      name_servers: t.config.nameServers,
      vanity_name_servers: [],
      original_name_servers: null,
      account: { id: t.accountId },
    });
    expect(typeof z.account.name).toBe('string');
    expect(z.created_on).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d+Z$/);
    expect(z.activated_on).toBe(z.created_on);
    expect(z.plan).toMatchObject({ legacy_id: 'free' });
    const got = await t.call('GET', `/zones/${z.id}`);
    expect(got.body.result).toEqual(z);
  });

  it('normalises the name to lowercase without the trailing dot', async () => {
    const res = await t.call('POST', '/zones', {
      name: '  MiXeD-Case.Example.  ',
      account: { id: t.accountId },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.result.name).toBe('mixed-case.example');
  });

  it('creates a partial zone with a verification key', async () => {
    const res = await t.call('POST', '/zones', {
      name: 'partial.example',
      account: { id: t.accountId },
      type: 'partial',
    });
    expect(res.status).toBe(200);
    expect(res.body.result.type).toBe('partial');
    expect(typeof res.body.result.verification_key).toBe('string');
  });

  it.each([
    ['empty', ''],
    ['single label', 'localhost'],
    ['leading hyphen', '-bad.example'],
    ['trailing hyphen', 'bad-.example'],
    ['space', 'ex ample.com'],
    ['numeric TLD', 'example.123'],
    ['empty label', 'a..example'],
    ['label over 63', `${'a'.repeat(64)}.example`],
    ['wildcard', '*.example.com'],
    ['slash', 'example.com/path'],
    ['underscore', 'under_score.example'],
    ['just a dot', '.'],
  ])('rejects an invalid name (%s) with 400', async (_label, name) => {
    const res = await t.call('POST', '/zones', { name, account: { id: t.accountId } });
    expectError(res, 400);
    expect(res.body.errors[0].message).toMatch(/name/i);
  });

  it('rejects a name over 253 characters', async () => {
    const name = Array.from({ length: 5 }, () => 'a'.repeat(60)).join('.') + '.example';
    expectError(await t.call('POST', '/zones', { name, account: { id: t.accountId } }), 400);
  });

  it('a duplicate name in the same account → 409 with x-should-retry: false', async () => {
    await createZone(t, 'dupe.example');
    for (const name of ['dupe.example', 'DUPE.example.']) {
      const res = await t.call('POST', '/zones', { name, account: { id: t.accountId } });
      expectError(res, 409, 1061);
      expect(res.headers.get('x-should-retry')).toBe('false');
      expect(res.body.errors[0].message).toContain('dupe.example');
    }
  });

  it('the same name may exist in another account', async () => {
    const res = await t.call('POST', '/zones', {
      name: 'dupe.example',
      account: { id: SECOND_ACCOUNT },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.result.account).toEqual({ id: SECOND_ACCOUNT, name: 'Second account' });
  });

  it('an unknown account → 404', async () => {
    expectError(
      await t.call('POST', '/zones', { name: 'orphan.example', account: { id: 'e'.repeat(32) } }),
      404,
    );
  });

  it('a missing account → 400 naming account; a malformed account id → 400 naming account.id', async () => {
    const missing = await t.call('POST', '/zones', { name: 'orphan.example' });
    expectError(missing, 400);
    expect(missing.body.errors[0].message).toMatch(/^account: /);
    const malformed = await t.call('POST', '/zones', {
      name: 'orphan.example',
      account: { id: 'nope' },
    });
    expectError(malformed, 400);
    expect(malformed.body.errors[0].message).toMatch(/^account\.id: /);
  });

  it('rejects an unknown type and a missing name', async () => {
    const badType = await t.call('POST', '/zones', {
      name: 'typed.example',
      account: { id: t.accountId },
      type: 'huge',
    });
    expectError(badType, 400);
    expect(badType.body.errors[0].message).toMatch(/^type: /);
    const noName = await t.call('POST', '/zones', { account: { id: t.accountId } });
    expectError(noName, 400);
    expect(noName.body.errors[0].message).toMatch(/^name: /);
  });

  it('needs credentials', async () => {
    expectError(
      await t.call(
        'POST',
        '/zones',
        { name: 'anon.example', account: { id: t.accountId } },
        { authorization: '' },
      ),
      401,
      10000,
    );
  });
});

describe('list', () => {
  let s: TestServer;
  const mine = [
    'alpha.example',
    'beta.example',
    'gamma.example',
    'delta.test',
    'epsilon.test',
    'zeta.example',
    'eta.example',
  ];
  const theirs = ['theta.example', 'iota.test'];

  beforeAll(async () => {
    s = await startTestServer();
    await addAccount(s, SECOND_ACCOUNT, 'Other Org');
    for (const name of mine) await createZone(s, name);
    for (const name of theirs) {
      const res = await s.call('POST', '/zones', { name, account: { id: SECOND_ACCOUNT } });
      expect(res.status).toBe(200);
    }
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('lists every zone ordered by name by default with result_info', async () => {
    const res = await s.call('GET', '/zones');
    expect(res.status).toBe(200);
    expect(names(res)).toEqual([...mine, ...theirs].sort());
    expect(res.body.result_info).toEqual({
      page: 1,
      per_page: 20,
      count: 9,
      total_count: 9,
      total_pages: 1,
    });
  });

  it('filters by exact name, case-insensitively', async () => {
    expect(names(await s.call('GET', '/zones?name=beta.example'))).toEqual(['beta.example']);
    expect(names(await s.call('GET', '/zones?name=BETA.example'))).toEqual(['beta.example']);
    expect(names(await s.call('GET', '/zones?name=beta'))).toEqual([]);
  });

  it('filters by name operators', async () => {
    expect(names(await s.call('GET', '/zones?name=contains:et'))).toEqual([
      'beta.example',
      'eta.example',
      'theta.example',
      'zeta.example',
    ]);
    expect(names(await s.call('GET', '/zones?name=starts_with:e'))).toEqual([
      'epsilon.test',
      'eta.example',
    ]);
    expect(names(await s.call('GET', '/zones?name=ends_with:.test'))).toEqual([
      'delta.test',
      'epsilon.test',
      'iota.test',
    ]);
    expect(names(await s.call('GET', '/zones?name=equal:gamma.example'))).toEqual([
      'gamma.example',
    ]);
    expect(names(await s.call('GET', '/zones?name=not_equal:gamma.example'))).not.toContain(
      'gamma.example',
    );
    expect((await s.call('GET', '/zones?name=not_equal:gamma.example')).body.result).toHaveLength(
      8,
    );
  });

  it('treats LIKE wildcards in a contains filter literally', async () => {
    expect(names(await s.call('GET', '/zones?name=contains:%25'))).toEqual([]);
    expect(names(await s.call('GET', '/zones?name=contains:_'))).toEqual([]);
  });

  it('filters by status', async () => {
    expect((await s.call('GET', '/zones?status=active')).body.result).toHaveLength(9);
    expect((await s.call('GET', '/zones?status=pending')).body.result).toEqual([]);
    expectError(await s.call('GET', '/zones?status=sleeping'), 400);
  });

  it('filters by account.id and account.name', async () => {
    expect(names(await s.call('GET', `/zones?account.id=${SECOND_ACCOUNT}`))).toEqual(
      [...theirs].sort(),
    );
    expect(names(await s.call('GET', `/zones?account.id=${s.accountId}`))).toEqual(
      [...mine].sort(),
    );
    expect(names(await s.call('GET', `/zones?account.id=${'d'.repeat(32)}`))).toEqual([]);
    expect(names(await s.call('GET', '/zones?account.name=Other%20Org'))).toEqual(
      [...theirs].sort(),
    );
    expect(
      names(await s.call('GET', `/zones?account.id=${SECOND_ACCOUNT}&name=contains:iota`)),
    ).toEqual(['iota.test']);
  });

  it('orders by name or account and direction', async () => {
    expect(names(await s.call('GET', '/zones?order=name&direction=desc'))).toEqual(
      [...mine, ...theirs].sort().reverse(),
    );
    const byAccount = names(await s.call('GET', '/zones?order=account.name&direction=asc'));
    // "Other Org" sorts before "Outpost account".
    expect(byAccount.slice(0, 2).sort()).toEqual([...theirs].sort());
    expectError(await s.call('GET', '/zones?order=color'), 400);
    expectError(await s.call('GET', '/zones?direction=sideways'), 400);
  });

  it('match=all ANDs the filters, match=any ORs them', async () => {
    expect(
      names(await s.call('GET', '/zones?name=starts_with:a&account.name=Other%20Org')),
    ).toEqual([]);
    expect(
      names(await s.call('GET', '/zones?name=starts_with:a&account.name=Other%20Org&match=all')),
    ).toEqual([]);
    expect(
      names(await s.call('GET', '/zones?name=starts_with:a&account.name=Other%20Org&match=any')),
    ).toEqual(['alpha.example', ...theirs].sort());
    expectError(await s.call('GET', '/zones?match=some'), 400);
  });

  it('pages with per_page and page', async () => {
    const all = [...mine, ...theirs].sort();
    const p1 = await s.call('GET', '/zones?per_page=5');
    expect(names(p1)).toEqual(all.slice(0, 5));
    expect(p1.body.result_info).toEqual({
      page: 1,
      per_page: 5,
      count: 5,
      total_count: 9,
      total_pages: 2,
    });
    const p2 = await s.call('GET', '/zones?per_page=5&page=2');
    expect(names(p2)).toEqual(all.slice(5));
    expect(p2.body.result_info).toEqual({
      page: 2,
      per_page: 5,
      count: 4,
      total_count: 9,
      total_pages: 2,
    });
  });

  it('a page past the end → 200 with result [] and the full result_info', async () => {
    const res = await s.call('GET', '/zones?per_page=5&page=3');
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expect(res.body.result).toEqual([]);
    expect(res.body.result_info).toEqual({
      page: 3,
      per_page: 5,
      count: 0,
      total_count: 9,
      total_pages: 2,
    });
  });

  it.each(['per_page=4', 'per_page=51', 'per_page=0', 'page=0', 'page=abc'])(
    'rejects %s with 400 naming the field',
    async (q) => {
      const res = await s.call('GET', `/zones?${q}`);
      expectError(res, 400);
      expect(res.body.errors[0].message.startsWith(`${q.split('=')[0]}: `)).toBe(true);
    },
  );

  it('accepts per_page at both bounds', async () => {
    expect((await s.call('GET', '/zones?per_page=5')).status).toBe(200);
    expect((await s.call('GET', '/zones?per_page=50')).body.result).toHaveLength(9);
  });
});

describe('list: type filter, internal zones, operators', () => {
  let s: TestServer;
  const ids: Record<string, string> = {};
  beforeAll(async () => {
    s = await startTestServer();
    await addAccount(s, SECOND_ACCOUNT, 'Other Org');
    for (const [name, type, account] of [
      ['full-one.example', 'full', s.accountId],
      ['partial-one.example', 'partial', s.accountId],
      ['secondary-one.example', 'secondary', s.accountId],
      ['internal-one.example', 'internal', s.accountId],
      ['other-full.example', 'full', SECOND_ACCOUNT],
    ] as const) {
      const res = await s.call('POST', '/zones', { name, type, account: { id: account } });
      expect(res.status, res.text).toBe(200);
      ids[name] = res.body.result.id;
    }
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('leaves internal zones out unless a type filter asks for them', async () => {
    const all = await s.call('GET', '/zones');
    expect(names(all)).toEqual([
      'full-one.example',
      'other-full.example',
      'partial-one.example',
      'secondary-one.example',
    ]);
    expect(all.body.result_info.total_count).toBe(4);
    expect(names(await s.call('GET', '/zones?type=internal'))).toEqual(['internal-one.example']);
    // Still reachable by id.
    expect((await s.call('GET', `/zones/${ids['internal-one.example']}`)).status).toBe(200);
  });

  it('filters by type, repeated or comma-separated', async () => {
    expect(names(await s.call('GET', '/zones?type=partial'))).toEqual(['partial-one.example']);
    expect(names(await s.call('GET', '/zones?type=partial,secondary'))).toEqual([
      'partial-one.example',
      'secondary-one.example',
    ]);
    expect(names(await s.call('GET', '/zones?type=full&type=internal'))).toEqual([
      'full-one.example',
      'internal-one.example',
      'other-full.example',
    ]);
    expectError(await s.call('GET', '/zones?type=huge'), 400);
  });

  it('keeps internal zones out with match=any and for scoped tokens', async () => {
    const any = await s.call('GET', '/zones?name=contains:one&status=active&match=any');
    expect(names(any)).toEqual([
      'full-one.example',
      'other-full.example',
      'partial-one.example',
      'secondary-one.example',
    ]);
    expect(any.body.result_info).toMatchObject({ count: 4, total_count: 4 });
    const token = await createToken(s, ['Zone Read'], {
      [`com.cloudflare.api.account.${s.accountId}`]: '*',
    });
    expect(names(await s.call('GET', '/zones', undefined, bearer(token)))).toEqual([
      'full-one.example',
      'partial-one.example',
      'secondary-one.example',
    ]);
    expect(names(await s.call('GET', '/zones?type=internal', undefined, bearer(token)))).toEqual([
      'internal-one.example',
    ]);
  });

  it('accepts order=plan.id', async () => {
    const res = await s.call('GET', '/zones?order=plan.id');
    expect(res.status).toBe(200);
    expect(res.body.result).toHaveLength(4);
  });

  it('supports the case-sensitive name operators', async () => {
    expect(names(await s.call('GET', '/zones?name=contains_case_sensitive:one'))).toEqual([
      'full-one.example',
      'partial-one.example',
      'secondary-one.example',
    ]);
    expect(names(await s.call('GET', '/zones?name=contains_case_sensitive:ONE'))).toEqual([]);
    expect(names(await s.call('GET', '/zones?name=contains:ONE'))).toEqual([
      'full-one.example',
      'partial-one.example',
      'secondary-one.example',
    ]);
    expect(names(await s.call('GET', '/zones?name=starts_with_case_sensitive:partial'))).toEqual([
      'partial-one.example',
    ]);
    expect(names(await s.call('GET', '/zones?name=ends_with_case_sensitive:.EXAMPLE'))).toEqual([]);
  });

  it('supports operators on account.name', async () => {
    expect(names(await s.call('GET', '/zones?account.name=contains:other'))).toEqual([
      'other-full.example',
    ]);
    expect(names(await s.call('GET', '/zones?account.name=starts_with:Other'))).toEqual([
      'other-full.example',
    ]);
    expect(names(await s.call('GET', '/zones?account.name=not_equal:Other%20Org'))).toEqual([
      'full-one.example',
      'partial-one.example',
      'secondary-one.example',
    ]);
    expect(names(await s.call('GET', '/zones?account.name=equal:Other%20Org'))).toEqual([
      'other-full.example',
    ]);
  });
});

describe('get, edit, delete', () => {
  it('GET an unknown zone → 404, a malformed id → 400', async () => {
    expectError(await t.call('GET', `/zones/${'c'.repeat(32)}`), 404);
    expectError(await t.call('GET', '/zones/example.com'), 400, 7003);
  });

  it('PATCH paused', async () => {
    const zone = await createZone(t, 'patch-paused.example');
    const before = (await t.call('GET', `/zones/${zone.id}`)).body.result;
    await new Promise((r) => setTimeout(r, 5));
    const res = await t.call('PATCH', `/zones/${zone.id}`, { paused: true });
    expect(res.status, res.text).toBe(200);
    expect(res.body.result).toMatchObject({
      id: zone.id,
      paused: true,
      type: 'full',
      name: 'patch-paused.example',
    });
    expect(Date.parse(res.body.result.modified_on)).toBeGreaterThan(Date.parse(before.modified_on));
    expect(res.body.result.created_on).toBe(before.created_on);
    expect((await t.call('GET', `/zones/${zone.id}`)).body.result.paused).toBe(true);
    expect((await t.call('PATCH', `/zones/${zone.id}`, { paused: false })).body.result.paused).toBe(
      false,
    );
  });

  it('PATCH type', async () => {
    const zone = await createZone(t, 'patch-type.example');
    const res = await t.call('PATCH', `/zones/${zone.id}`, { type: 'partial' });
    expect(res.status).toBe(200);
    expect(res.body.result.type).toBe('partial');
    expect((await t.call('GET', `/zones/${zone.id}`)).body.result.type).toBe('partial');
    expectError(await t.call('PATCH', `/zones/${zone.id}`, { type: 'enormous' }), 400);
  });

  it('PATCH vanity_name_servers (lowercased)', async () => {
    const zone = await createZone(t, 'patch-vanity.example');
    const res = await t.call('PATCH', `/zones/${zone.id}`, {
      vanity_name_servers: ['NS1.Patch-Vanity.example', 'ns2.patch-vanity.example'],
    });
    expect(res.status).toBe(200);
    expect(res.body.result.vanity_name_servers).toEqual([
      'ns1.patch-vanity.example',
      'ns2.patch-vanity.example',
    ]);
  });

  it('PATCH with two fields, or none → 400, and nothing changes', async () => {
    const zone = await createZone(t, 'patch-two.example');
    expectError(await t.call('PATCH', `/zones/${zone.id}`, { paused: true, type: 'partial' }), 400);
    expectError(await t.call('PATCH', `/zones/${zone.id}`, {}), 400);
    const now = (await t.call('GET', `/zones/${zone.id}`)).body.result;
    expect(now).toMatchObject({ paused: false, type: 'full' });
  });

  it('PATCH with a wrongly typed field → 400 naming it; PATCH an unknown zone → 404', async () => {
    const zone = await createZone(t, 'patch-bad.example');
    const res = await t.call('PATCH', `/zones/${zone.id}`, { paused: 'yes' });
    expectError(res, 400);
    expect(res.body.errors[0].message).toMatch(/^paused: /);
    expectError(await t.call('PATCH', `/zones/${'c'.repeat(32)}`, { paused: true }), 404);
  });

  it('DELETE answers {id}; the zone is then 404 and its name free again', async () => {
    const zone = await createZone(t, 'delete-me.example');
    const res = await t.call('DELETE', `/zones/${zone.id}`);
    expect(res.status).toBe(200);
    expect(res.body.result).toEqual({ id: zone.id });
    expectError(await t.call('GET', `/zones/${zone.id}`), 404);
    expectError(await t.call('DELETE', `/zones/${zone.id}`), 404);
    expectError(await t.call('PATCH', `/zones/${zone.id}`, { paused: true }), 404);
    expect(names(await t.call('GET', '/zones?name=delete-me.example'))).toEqual([]);
    const again = await t.call('POST', '/zones', {
      name: 'delete-me.example',
      account: { id: t.accountId },
    });
    expect(again.status).toBe(200);
    expect(again.body.result.id).not.toBe(zone.id);
  });

  it('PUT activation_check on an active zone keeps it active', async () => {
    const zone = await createZone(t, 'already-active.example');
    const res = await t.call('PUT', `/zones/${zone.id}/activation_check`);
    expect(res.status).toBe(200);
    expect(res.body.result).toEqual({ id: zone.id });
    expect((await t.call('GET', `/zones/${zone.id}`)).body.result.status).toBe('active');
    expectError(await t.call('PUT', `/zones/${'c'.repeat(32)}/activation_check`), 404);
  });
});

describe('manual activation', () => {
  let m: TestServer;
  beforeAll(async () => {
    m = await startTestServer({ zoneActivation: 'manual' });
  });
  afterAll(async () => {
    await m?.stop();
  });

  it('a new zone is pending until PUT /zones/{id}/activation_check', async () => {
    const created = await m.call('POST', '/zones', {
      name: 'manual.example',
      account: { id: m.accountId },
    });
    expect(created.status).toBe(200);
    expect(created.body.result).toMatchObject({ status: 'pending', activated_on: null });
    expect(names(await m.call('GET', '/zones?status=pending'))).toEqual(['manual.example']);
    expect(names(await m.call('GET', '/zones?status=active'))).toEqual([]);

    const check = await m.call('PUT', `/zones/${created.body.result.id}/activation_check`);
    expect(check.status).toBe(200);
    expect(check.body.result).toEqual({ id: created.body.result.id });
    const after = (await m.call('GET', `/zones/${created.body.result.id}`)).body.result;
    expect(after.status).toBe('active');
    expect(Date.parse(after.activated_on)).not.toBeNaN();
    expect(names(await m.call('GET', '/zones?status=active'))).toEqual(['manual.example']);
  });

  it('activation_check needs Zone Write', async () => {
    const zone = (
      await m.call('POST', '/zones', { name: 'manual-ro.example', account: { id: m.accountId } })
    ).body.result;
    const reader = await createToken(m, ['Zone Read'], {
      [`com.cloudflare.api.account.${m.accountId}`]: '*',
    });
    expectError(
      await m.call('PUT', `/zones/${zone.id}/activation_check`, undefined, bearer(reader)),
      403,
    );
    expect((await m.call('GET', `/zones/${zone.id}`)).body.result.status).toBe('pending');
  });
});

describe('scoped tokens', () => {
  let a: { id: string; name: string };
  let b: { id: string; name: string };
  let otherAccountZone: { id: string };
  beforeAll(async () => {
    a = await createZone(t, 'scope-a.example');
    b = await createZone(t, 'scope-b.example');
    otherAccountZone = (
      await t.call('POST', '/zones', { name: 'scope-c.example', account: { id: SECOND_ACCOUNT } })
    ).body.result;
  });

  it('Zone Read on zone A: 200 on A, 403 on B, lists only A, 403 on writes', async () => {
    const token = await createToken(t, ['Zone Read'], {
      [`com.cloudflare.api.account.zone.${a.id}`]: '*',
    });
    const h = bearer(token);
    expect((await t.call('GET', `/zones/${a.id}`, undefined, h)).status).toBe(200);
    expectError(await t.call('GET', `/zones/${b.id}`, undefined, h), 403);
    expectError(await t.call('GET', `/zones/${otherAccountZone.id}`, undefined, h), 403);
    const list = await t.call('GET', '/zones', undefined, h);
    expect(list.status).toBe(200);
    expect(list.body.result.map((z: { id: string }) => z.id)).toEqual([a.id]);
    expect(list.body.result_info).toMatchObject({ count: 1, total_count: 1, total_pages: 1 });
    expectError(await t.call('PATCH', `/zones/${a.id}`, { paused: true }, h), 403);
    expectError(await t.call('DELETE', `/zones/${a.id}`, undefined, h), 403);
    expectError(
      await t.call(
        'POST',
        '/zones',
        { name: 'not-allowed.example', account: { id: t.accountId } },
        h,
      ),
      403,
    );
    expect((await t.call('GET', `/zones/${a.id}`)).body.result.paused).toBe(false);
  });

  it('Zone Write on zone A edits A but not B', async () => {
    const token = await createToken(t, ['Zone Write'], {
      [`com.cloudflare.api.account.zone.${a.id}`]: '*',
    });
    const h = bearer(token);
    expect((await t.call('PATCH', `/zones/${a.id}`, { paused: true }, h)).status).toBe(200);
    expectError(await t.call('PATCH', `/zones/${b.id}`, { paused: true }, h), 403);
    // Write implies read.
    expect((await t.call('GET', `/zones/${a.id}`, undefined, h)).status).toBe(200);
    await t.call('PATCH', `/zones/${a.id}`, { paused: false });
  });

  it('Zone Write on the account creates zones there, not in another account', async () => {
    const token = await createToken(t, ['Zone Write'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    const h = bearer(token);
    const res = await t.call(
      'POST',
      '/zones',
      { name: 'token-made.example', account: { id: t.accountId } },
      h,
    );
    expect(res.status, res.text).toBe(200);
    expect((await t.call('GET', `/zones/${res.body.result.id}`, undefined, h)).status).toBe(200);
    expectError(
      await t.call(
        'POST',
        '/zones',
        { name: 'token-made.example', account: { id: SECOND_ACCOUNT } },
        h,
      ),
      403,
    );
    expectError(await t.call('GET', `/zones/${otherAccountZone.id}`, undefined, h), 403);
    const listed = (await t.call('GET', '/zones?per_page=50', undefined, h)).body.result.map(
      (z: { account: { id: string } }) => z.account.id,
    );
    expect(new Set(listed)).toEqual(new Set([t.accountId]));
  });

  it('the nested account form limits a token to the zones it names', async () => {
    const token = await createToken(t, ['Zone Read'], {
      [`com.cloudflare.api.account.${t.accountId}`]: {
        [`com.cloudflare.api.account.zone.${b.id}`]: '*',
      },
    });
    const h = bearer(token);
    expect((await t.call('GET', `/zones/${b.id}`, undefined, h)).status).toBe(200);
    expectError(await t.call('GET', `/zones/${a.id}`, undefined, h), 403);
    expect(
      (await t.call('GET', '/zones', undefined, h)).body.result.map((z: { id: string }) => z.id),
    ).toEqual([b.id]);
  });

  it('a deny policy takes precedence over an allow', async () => {
    const groups = (await t.call('GET', '/user/tokens/permission_groups')).body.result;
    const read = groups.find((g: { name: string }) => g.name === 'Zone Read').id;
    const res = await t.call('POST', '/user/tokens', {
      name: 'allow all but B',
      policies: [
        {
          effect: 'allow',
          permission_groups: [{ id: read }],
          resources: { [`com.cloudflare.api.account.${t.accountId}`]: '*' },
        },
        {
          effect: 'deny',
          permission_groups: [{ id: read }],
          resources: { [`com.cloudflare.api.account.zone.${b.id}`]: '*' },
        },
      ],
    });
    const h = bearer(res.body.result.value);
    expect((await t.call('GET', `/zones/${a.id}`, undefined, h)).status).toBe(200);
    expectError(await t.call('GET', `/zones/${b.id}`, undefined, h), 403);
    const listed = (await t.call('GET', '/zones?per_page=50', undefined, h)).body.result.map(
      (z: { id: string }) => z.id,
    );
    expect(listed).toContain(a.id);
    expect(listed).not.toContain(b.id);

    const everywhere = await t.call('POST', '/user/tokens', {
      name: 'allow then deny everything',
      policies: [
        {
          effect: 'allow',
          permission_groups: [{ id: read }],
          resources: { [`com.cloudflare.api.account.${t.accountId}`]: '*' },
        },
        {
          effect: 'deny',
          permission_groups: [{ id: read }],
          resources: { 'com.cloudflare.api.account.*': '*' },
        },
      ],
    });
    const h2 = bearer(everywhere.body.result.value);
    expectError(await t.call('GET', '/zones', undefined, h2), 403);
    expectError(await t.call('GET', `/zones/${a.id}`, undefined, h2), 403);
  });

  it('a token without any zone permission gets 403, without learning whether a zone exists', async () => {
    const token = await createToken(t, ['API Tokens Read'], { 'com.cloudflare.api.user.*': '*' });
    const h = bearer(token);
    expectError(await t.call('GET', '/zones', undefined, h), 403);
    expectError(await t.call('GET', `/zones/${a.id}`, undefined, h), 403);
    expectError(await t.call('GET', `/zones/${'c'.repeat(32)}`, undefined, h), 403);
  });

  it('scoped lists page over the visible zones only', async () => {
    const token = await createToken(t, ['Zone Read'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    const h = bearer(token);
    const all = await t.call('GET', `/zones?per_page=50&account.id=${t.accountId}`);
    const total = all.body.result_info.total_count as number;
    expect(total).toBeGreaterThan(5);
    const p1 = await t.call('GET', '/zones?per_page=5', undefined, h);
    expect(p1.body.result).toHaveLength(5);
    expect(p1.body.result_info).toEqual({
      page: 1,
      per_page: 5,
      count: 5,
      total_count: total,
      total_pages: Math.ceil(total / 5),
    });
    const past = await t.call(
      'GET',
      `/zones?per_page=5&page=${Math.ceil(total / 5) + 1}`,
      undefined,
      h,
    );
    expect(past.status).toBe(200);
    expect(past.body.result).toEqual([]);
  });
});
