/** Accounts and API tokens over HTTP: happy paths, bad input, 401 and 403. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createToken,
  createZone,
  LEGACY,
  startTestServer,
  type CallResult,
  type TestServer,
} from '../../support/server.ts';

const HEX32 = /^[0-9a-f]{32}$/;
const OTHER_ACCOUNT = 'f'.repeat(32);

let t: TestServer;
let groups: { id: string; name: string; scopes: string[] }[];
const groupId = (name: string) => {
  const g = groups.find((x) => x.name === name);
  if (!g) throw new Error(`no group ${name}`);
  return g.id;
};
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const accountKey = () => `com.cloudflare.api.account.${t.accountId}`;

function expectError(res: CallResult, status: number, code?: number): void {
  expect(res.status, res.text).toBe(status);
  expect(res.body.success).toBe(false);
  expect(res.body.result).toBeNull();
  expect(res.body.errors.length).toBeGreaterThan(0);
  if (code !== undefined) expect(res.body.errors[0].code).toBe(code);
}

beforeAll(async () => {
  t = await startTestServer();
  const res = await t.call('GET', '/user/tokens/permission_groups');
  groups = res.body.result;
});
afterAll(async () => {
  await t?.stop();
});

describe('accounts', () => {
  it('GET /accounts lists the seeded account with paging info', async () => {
    const res = await t.call('GET', '/accounts');
    expect(res.status).toBe(200);
    expect(res.body.result).toHaveLength(1);
    expect(res.body.result[0]).toMatchObject({
      id: t.accountId,
      type: 'standard',
      settings: { enforce_twofactor: false },
    });
    expect(typeof res.body.result[0].name).toBe('string');
    expect(res.body.result[0].created_on).toMatch(/^\d{4}-\d{2}-\d{2}T.*Z$/);
    expect(res.body.result_info).toEqual({
      page: 1,
      per_page: 20,
      count: 1,
      total_count: 1,
      total_pages: 1,
    });
  });

  it('filters accounts by name', async () => {
    const name = (await t.call('GET', '/accounts')).body.result[0].name as string;
    expect(
      (await t.call('GET', `/accounts?name=${encodeURIComponent(name.slice(0, 4).toUpperCase())}`))
        .body.result,
    ).toHaveLength(1);
    expect((await t.call('GET', '/accounts?name=no-such-account-name')).body.result).toEqual([]);
  });

  it('rejects per_page outside 5..50', async () => {
    expectError(await t.call('GET', '/accounts?per_page=1'), 400);
    expectError(await t.call('GET', '/accounts?per_page=51'), 400);
  });

  it('GET /accounts/{id} returns the account', async () => {
    const res = await t.call('GET', `/accounts/${t.accountId}`);
    expect(res.status).toBe(200);
    expect(res.body.result.id).toBe(t.accountId);
  });

  it('an unknown account id is a 404, a malformed one a 400', async () => {
    expectError(await t.call('GET', `/accounts/${OTHER_ACCOUNT}`), 404);
    expectError(await t.call('GET', '/accounts/not-an-id'), 400, 7003);
    expectError(await t.call('GET', `/accounts/${t.accountId.toUpperCase()}`), 400, 7003);
  });

  it('needs credentials', async () => {
    expectError(await t.call('GET', '/accounts', undefined, { authorization: '' }), 401, 10000);
    expectError(
      await t.call('GET', `/accounts/${t.accountId}`, undefined, { authorization: '' }),
      401,
      10000,
    );
  });

  it('a scoped token sees only the accounts its policies reach', async () => {
    const mine = await createToken(t, ['Zone Read'], { [accountKey()]: '*' });
    const list = await t.call('GET', '/accounts', undefined, bearer(mine));
    expect(list.body.result.map((a: { id: string }) => a.id)).toEqual([t.accountId]);
    expect((await t.call('GET', `/accounts/${t.accountId}`, undefined, bearer(mine))).status).toBe(
      200,
    );

    const elsewhere = await createToken(t, ['Zone Read'], {
      [`com.cloudflare.api.account.${OTHER_ACCOUNT}`]: '*',
    });
    expect((await t.call('GET', '/accounts', undefined, bearer(elsewhere))).body.result).toEqual(
      [],
    );
    expectError(await t.call('GET', `/accounts/${t.accountId}`, undefined, bearer(elsewhere)), 403);
  });
});

describe('permission groups', () => {
  it('lists Read and Write groups with stable 32-hex ids and scopes', async () => {
    const names = groups.map((g) => g.name);
    expect(names).toEqual(
      expect.arrayContaining(['Zone Read', 'Zone Write', 'API Tokens Read', 'API Tokens Write']),
    );
    for (const g of groups) {
      expect(g.id).toMatch(HEX32);
      expect(g.scopes.length).toBeGreaterThan(0);
    }
    expect(groups.find((g) => g.name === 'Zone Read')!.scopes).toEqual([
      'com.cloudflare.api.account.zone',
    ]);
    // Ids are derived from names: a second server has the same ids.
    const other = await startTestServer();
    try {
      const again = (await other.call('GET', '/user/tokens/permission_groups')).body.result;
      expect(again.find((g: { name: string }) => g.name === 'Zone Read').id).toBe(
        groupId('Zone Read'),
      );
    } finally {
      await other.stop();
    }
  });
});

describe('API tokens', () => {
  const policy = (names: string[], resources: Record<string, unknown>, effect = 'allow') => ({
    effect,
    permission_groups: names.map((n) => ({ id: groupId(n) })),
    resources,
  });

  it('create → get → list → update → delete; the secret appears only in the create answer', async () => {
    const created = await t.call('POST', '/user/tokens', {
      name: 'lifecycle',
      policies: [policy(['Zone Read'], { [accountKey()]: '*' })],
    });
    expect(created.status, created.text).toBe(200);
    const tok = created.body.result;
    expect(tok.id).toMatch(HEX32);
    expect(typeof tok.value).toBe('string');
    expect(tok.value.length).toBeGreaterThanOrEqual(32);
    expect(tok).toMatchObject({ name: 'lifecycle', status: 'active' });
    expect(tok.policies[0]).toMatchObject({ effect: 'allow', resources: { [accountKey()]: '*' } });
    expect(tok.policies[0].id).toBeTruthy();
    expect(tok.policies[0].permission_groups).toEqual([
      { id: groupId('Zone Read'), name: 'Zone Read' },
    ]);
    expect(tok.issued_on).toMatch(/Z$/);
    expect(tok).not.toHaveProperty('secret_hash');

    const got = await t.call('GET', `/user/tokens/${tok.id}`);
    expect(got.status).toBe(200);
    expect(got.body.result).not.toHaveProperty('value');
    expect(got.body.result).not.toHaveProperty('secret_hash');
    expect(got.text).not.toContain(tok.value);
    const { value: _value, ...withoutSecret } = tok;
    expect(got.body.result).toEqual(withoutSecret);

    const list = await t.call('GET', '/user/tokens?per_page=50');
    expect(list.status).toBe(200);
    expect(list.text).not.toContain(tok.value);
    expect(list.text).not.toContain('secret_hash');
    const listed = list.body.result.find((x: { id: string }) => x.id === tok.id);
    expect(listed).toEqual(withoutSecret);
    expect(list.body.result_info.total_count).toBe(list.body.result.length);

    const updated = await t.call('PUT', `/user/tokens/${tok.id}`, {
      name: 'lifecycle renamed',
      policies: [policy(['Zone Write'], { [accountKey()]: '*' })],
    });
    expect(updated.status, updated.text).toBe(200);
    expect(updated.body.result).toMatchObject({
      id: tok.id,
      name: 'lifecycle renamed',
      status: 'active',
    });
    expect(updated.body.result.policies[0].permission_groups[0].name).toBe('Zone Write');
    expect(updated.body.result).not.toHaveProperty('value');
    expect((await t.call('GET', `/user/tokens/${tok.id}`)).body.result.name).toBe(
      'lifecycle renamed',
    );
    // The secret still works after an update, with the new policies.
    expect((await t.call('GET', '/user/tokens/verify', undefined, bearer(tok.value))).status).toBe(
      200,
    );

    const deleted = await t.call('DELETE', `/user/tokens/${tok.id}`);
    expect(deleted.status).toBe(200);
    expect(deleted.body.result).toEqual({ id: tok.id });
    expectError(await t.call('GET', `/user/tokens/${tok.id}`), 404);
    expectError(await t.call('DELETE', `/user/tokens/${tok.id}`), 404);
    expect(
      (await t.call('GET', '/user/tokens?per_page=50')).body.result.map(
        (x: { id: string }) => x.id,
      ),
    ).not.toContain(tok.id);
  });

  it('accepts permission groups given by name', async () => {
    const res = await t.call('POST', '/user/tokens', {
      name: 'by name',
      policies: [
        {
          effect: 'allow',
          permission_groups: [{ id: 'unknown', name: 'Zone Read' }],
          resources: { [accountKey()]: '*' },
        },
      ],
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.result.policies[0].permission_groups[0].id).toBe(groupId('Zone Read'));
  });

  it('GET /user/tokens/verify answers for the calling token', async () => {
    const expires = new Date(Date.now() + 3600_000).toISOString();
    const created = await t.call('POST', '/user/tokens', {
      name: 'verify me',
      expires_on: expires,
      policies: [policy(['Zone Read'], { [accountKey()]: '*' })],
    });
    const res = await t.call(
      'GET',
      '/user/tokens/verify',
      undefined,
      bearer(created.body.result.value),
    );
    expect(res.status).toBe(200);
    expect(res.body.result).toMatchObject({ id: created.body.result.id, status: 'active' });
    expect(Date.parse(res.body.result.expires_on)).toBe(Date.parse(expires));
    expectError(await t.call('GET', '/user/tokens/verify', undefined, bearer('nope')), 401);
    expectError(
      await t.call('GET', '/user/tokens/verify', undefined, { authorization: '' }),
      401,
      10000,
    );
  });

  it('condition.request_ip: the token works only from the addresses it allows', async () => {
    const make = async (request_ip: unknown) => {
      const res = await t.call('POST', '/user/tokens', {
        name: `ip ${JSON.stringify(request_ip)}`,
        policies: [policy(['Zone Read'], { [accountKey()]: '*' })],
        condition: { request_ip },
      });
      expect(res.status, res.text).toBe(200);
      return res.body.result.value as string;
    };
    // The test server is reached over loopback (127.0.0.1).
    const cases: [unknown, number][] = [
      [{ in: ['127.0.0.0/8'] }, 200],
      [{ in: ['192.0.2.0/24', '127.0.0.1'] }, 200],
      [{ in: ['192.0.2.0/24', '2001:db8::/32'] }, 403],
      [{ not_in: ['127.0.0.1/32'] }, 403],
      [{ in: ['0.0.0.0/0'], not_in: ['127.0.0.0/24'] }, 403],
      [{ not_in: ['198.51.100.0/24'] }, 200],
      [{}, 200],
    ];
    for (const [cond, status] of cases) {
      const secret = await make(cond);
      for (const path of ['/zones', '/user/tokens/verify']) {
        const res = await t.call('GET', path, undefined, bearer(secret));
        expect(res.status, `${JSON.stringify(cond)} ${path}`).toBe(status);
        if (status === 403) {
          expect(res.body.errors[0]).toMatchObject({ code: 9109, message: 'Cannot use the access token from location: 127.0.0.1' });
        }
      }
    }
    for (const bad of [['10.0.0.0/33'], ['not-an-ip'], ['10.0.0.0/8/1'], ['::1/129']]) {
      const res = await t.call('POST', '/user/tokens', {
        name: 'bad ip',
        policies: [policy(['Zone Read'], { [accountKey()]: '*' })],
        condition: { request_ip: { in: bad } },
      });
      expect(res.status, JSON.stringify(bad)).toBe(400);
      expect(res.body.errors[0].message).toMatch(/^condition\.request_ip\.in\.0: /);
    }
  });

  it('unknown and malformed token ids', async () => {
    expectError(await t.call('GET', `/user/tokens/${'0'.repeat(32)}`), 404);
    expectError(
      await t.call('PUT', `/user/tokens/${'0'.repeat(32)}`, {
        name: 'x',
        policies: [policy(['Zone Read'], { [accountKey()]: '*' })],
      }),
      404,
    );
    expectError(await t.call('GET', '/user/tokens/xyz'), 400, 7003);
  });

  describe('invalid bodies → 400 naming the field', () => {
    const cases: [string, () => unknown, RegExp][] = [
      [
        'missing name',
        () => ({ policies: [policy(['Zone Read'], { [accountKey()]: '*' })] }),
        /^name: /,
      ],
      ['no policies', () => ({ name: 'x', policies: [] }), /^policies: /],
      [
        'bad effect',
        () => ({
          name: 'x',
          policies: [{ ...policy(['Zone Read'], { [accountKey()]: '*' }), effect: 'maybe' }],
        }),
        /^policies\.0\.effect: /,
      ],
      [
        'no groups',
        () => ({
          name: 'x',
          policies: [
            { effect: 'allow', permission_groups: [], resources: { [accountKey()]: '*' } },
          ],
        }),
        /^policies\.0\.permission_groups: /,
      ],
      [
        'no resources',
        () => ({
          name: 'x',
          policies: [
            { effect: 'allow', permission_groups: [{ id: groupId('Zone Read') }], resources: {} },
          ],
        }),
        /^policies\.0\.resources: /,
      ],
      [
        'unknown permission group',
        () => ({
          name: 'x',
          policies: [
            {
              effect: 'allow',
              permission_groups: [{ id: 'f'.repeat(32) }],
              resources: { [accountKey()]: '*' },
            },
          ],
        }),
        /^policies\.0\.permission_groups\.0\.id: /,
      ],
      [
        'unknown resource key',
        () => ({ name: 'x', policies: [policy(['Zone Read'], { 'com.example.whatever': '*' })] }),
        /^policies\.0\.resources: .*com\.example\.whatever/,
      ],
      [
        'malformed resource id',
        () => ({
          name: 'x',
          policies: [policy(['Zone Read'], { 'com.cloudflare.api.account.zone.xyz': '*' })],
        }),
        /^policies\.0\.resources: /,
      ],
      [
        'bad expires_on',
        () => ({
          name: 'x',
          expires_on: 'tomorrow',
          policies: [policy(['Zone Read'], { [accountKey()]: '*' })],
        }),
        /^expires_on: /,
      ],
    ];
    it.each(cases)('%s', async (_label, body, pattern) => {
      const res = await t.call('POST', '/user/tokens', body());
      expectError(res, 400);
      expect(res.body.errors.map((e: { message: string }) => e.message).join('\n')).toMatch(
        pattern,
      );
    });

    it('an invalid update leaves the token unchanged', async () => {
      const created = await t.call('POST', '/user/tokens', {
        name: 'keep',
        policies: [policy(['Zone Read'], { [accountKey()]: '*' })],
      });
      const id = created.body.result.id;
      const res = await t.call('PUT', `/user/tokens/${id}`, {
        name: 'changed',
        policies: [policy(['Zone Read'], { bogus: '*' })],
      });
      expectError(res, 400);
      expect((await t.call('GET', `/user/tokens/${id}`)).body.result.name).toBe('keep');
    });
  });

  describe('authorisation of the token routes', () => {
    it('a token without API Tokens permission gets 403 on /user/tokens', async () => {
      const zoneOnly = await createToken(t, ['Zone Write'], { [accountKey()]: '*' });
      const h = bearer(zoneOnly);
      expectError(await t.call('GET', '/user/tokens', undefined, h), 403);
      expectError(
        await t.call(
          'POST',
          '/user/tokens',
          { name: 'x', policies: [policy(['Zone Read'], { [accountKey()]: '*' })] },
          h,
        ),
        403,
      );
      expectError(await t.call('GET', '/user/tokens/permission_groups', undefined, h), 403);
      // Verifying itself needs no permission.
      expect((await t.call('GET', '/user/tokens/verify', undefined, h)).status).toBe(200);
    });

    it('API Tokens Read may list but not create; API Tokens Write may create', async () => {
      const reader = await createToken(t, ['API Tokens Read'], {
        'com.cloudflare.api.user.*': '*',
      });
      expect((await t.call('GET', '/user/tokens', undefined, bearer(reader))).status).toBe(200);
      expectError(
        await t.call(
          'POST',
          '/user/tokens',
          { name: 'x', policies: [policy(['Zone Read'], { [accountKey()]: '*' })] },
          bearer(reader),
        ),
        403,
      );
      const writer = await createToken(t, ['API Tokens Write'], {
        'com.cloudflare.api.user.*': '*',
      });
      const res = await t.call(
        'POST',
        '/user/tokens',
        { name: 'made by a token', policies: [policy(['Zone Read'], { [accountKey()]: '*' })] },
        bearer(writer),
      );
      expect(res.status, res.text).toBe(200);
    });
  });

  describe('token lifetime', () => {
    it('an expired token (expires_on in the past) → 401', async () => {
      const res = await t.call('POST', '/user/tokens', {
        name: 'expired',
        expires_on: '2020-01-01T00:00:00Z',
        policies: [policy(['Zone Read'], { [accountKey()]: '*' })],
      });
      expect(res.status, res.text).toBe(200);
      const r = await t.call('GET', '/zones', undefined, bearer(res.body.result.value));
      expectError(r, 401, 10000);
      expect(r.body.errors[0].message).toMatch(/expired/);
    });

    it('a token before not_before → 401', async () => {
      const res = await t.call('POST', '/user/tokens', {
        name: 'not yet',
        not_before: new Date(Date.now() + 86400_000).toISOString(),
        policies: [policy(['Zone Read'], { [accountKey()]: '*' })],
      });
      expectError(
        await t.call('GET', '/zones', undefined, bearer(res.body.result.value)),
        401,
        10000,
      );
    });

    it('a deleted token → 401 immediately after the delete', async () => {
      const res = await t.call('POST', '/user/tokens', {
        name: 'short-lived',
        policies: [policy(['Zone Read'], { [accountKey()]: '*' })],
      });
      const secret = res.body.result.value;
      expect((await t.call('GET', '/zones', undefined, bearer(secret))).status).toBe(200);
      expect((await t.call('DELETE', `/user/tokens/${res.body.result.id}`)).status).toBe(200);
      expectError(await t.call('GET', '/zones', undefined, bearer(secret)), 401, 10000);
      expectError(await t.call('GET', '/user/tokens/verify', undefined, bearer(secret)), 401);
    });

    it('a disabled token → 401; re-enabled → works again', async () => {
      const body = { name: 'toggle', policies: [policy(['Zone Read'], { [accountKey()]: '*' })] };
      const res = await t.call('POST', '/user/tokens', body);
      const { id, value } = res.body.result;
      expect(
        (await t.call('PUT', `/user/tokens/${id}`, { ...body, status: 'disabled' })).body.result
          .status,
      ).toBe('disabled');
      expectError(await t.call('GET', '/zones', undefined, bearer(value)), 401);
      await t.call('PUT', `/user/tokens/${id}`, { ...body, status: 'active' });
      expect((await t.call('GET', '/zones', undefined, bearer(value))).status).toBe(200);
    });

    it('policy changes apply to the next request', async () => {
      const zone = await createZone(t, 'policy-change.example');
      const body = { name: 'grow', policies: [policy(['Zone Read'], { [accountKey()]: '*' })] };
      const res = await t.call('POST', '/user/tokens', body);
      const { id, value } = res.body.result;
      expectError(await t.call('PATCH', `/zones/${zone.id}`, { paused: true }, bearer(value)), 403);
      await t.call('PUT', `/user/tokens/${id}`, {
        ...body,
        policies: [policy(['Zone Write'], { [accountKey()]: '*' })],
      });
      expect(
        (await t.call('PATCH', `/zones/${zone.id}`, { paused: true }, bearer(value))).status,
      ).toBe(200);
    });
  });
});

describe('legacy X-Auth-Email + X-Auth-Key', () => {
  const legacy = (email: string | undefined, key: string | undefined) => {
    const h: Record<string, string> = { authorization: '' };
    if (email !== undefined) h['x-auth-email'] = email;
    if (key !== undefined) h['x-auth-key'] = key;
    return h;
  };

  it('works with full access', async () => {
    expect(
      (await t.call('GET', '/accounts', undefined, legacy(LEGACY.email, LEGACY.key))).status,
    ).toBe(200);
    expect(
      (await t.call('GET', '/user/tokens', undefined, legacy(LEGACY.email, LEGACY.key))).status,
    ).toBe(200);
    const res = await t.call(
      'POST',
      '/zones',
      { name: 'legacy-made.example', account: { id: t.accountId } },
      legacy(LEGACY.email, LEGACY.key),
    );
    expect(res.status, res.text).toBe(200);
  });

  it('matches the email case-insensitively', async () => {
    expect(
      (await t.call('GET', '/zones', undefined, legacy(LEGACY.email.toUpperCase(), LEGACY.key)))
        .status,
    ).toBe(200);
  });

  it('a wrong key or a wrong email → 401', async () => {
    expectError(await t.call('GET', '/zones', undefined, legacy(LEGACY.email, 'wrong-key')), 401);
    expectError(
      await t.call('GET', '/zones', undefined, legacy('someone@else.example', LEGACY.key)),
      401,
    );
  });

  it('only one of the two headers → 401', async () => {
    expectError(
      await t.call('GET', '/zones', undefined, legacy(LEGACY.email, undefined)),
      401,
      10000,
    );
    expectError(
      await t.call('GET', '/zones', undefined, legacy(undefined, LEGACY.key)),
      401,
      10000,
    );
  });

  it('cannot verify itself as a token', async () => {
    expectError(
      await t.call('GET', '/user/tokens/verify', undefined, legacy(LEGACY.email, LEGACY.key)),
      400,
    );
  });
});
