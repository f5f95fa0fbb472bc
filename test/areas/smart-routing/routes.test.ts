import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { manualClock } from '../../../src/core/clock.ts';
import { createToken, createZone, startTestServer, type TestServer } from '../../support/server.ts';

const clock = manualClock(new Date('2026-04-01T12:00:00.000Z'));
let t: TestServer;
let zone: { id: string; name: string; created_on?: string };

beforeAll(async () => {
  t = await startTestServer({}, { clock });
  zone = await createZone(t, 'smart-routing.test');
});
afterAll(() => t.stop());

const paths = (zoneId: string) => [
  `/zones/${zoneId}/argo/smart_routing`,
  `/zones/${zoneId}/acceleration/smart_routing`,
];
const as = (token: string) => ({ authorization: `Bearer ${token}` });

describe('get and patch', () => {
  it('a new zone is off, editable, modified since the zone was created (both paths, envelope)', async () => {
    for (const path of paths(zone.id)) {
      const res = await t.call('GET', path);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({
        success: true,
        errors: [],
        messages: [],
        result: { id: 'smart_routing', value: 'off', editable: true, modified_on: zone.created_on },
      });
    }
  });

  it('PATCH switches the value; modified_on moves only when the value changes; both paths share it', async () => {
    const z = await createZone(t, 'switch.test');
    const [argo, neutral] = paths(z.id);
    clock.advance(60_000);
    const on = await t.call('PATCH', argo, { value: 'on' });
    expect(on.status).toBe(200);
    expect(on.body.result).toEqual({
      id: 'smart_routing',
      value: 'on',
      editable: true,
      modified_on: clock.now().toISOString(),
    });
    const stamp = on.body.result.modified_on;
    clock.advance(60_000);
    const same = await t.call('PATCH', neutral, { value: 'on' });
    expect(same.body.result).toMatchObject({ value: 'on', modified_on: stamp });
    expect((await t.call('GET', neutral)).body.result).toMatchObject({
      value: 'on',
      modified_on: stamp,
    });
    clock.advance(60_000);
    const off = await t.call('PATCH', neutral, { value: 'off' });
    expect(off.body.result.value).toBe('off');
    expect(off.body.result.modified_on).toBe(clock.now().toISOString());
    expect((await t.call('GET', argo)).body.result.value).toBe('off');
  });

  const bad: [string, unknown][] = [
    ['an unknown value', { value: 'maybe' }],
    ['a boolean', { value: true }],
    ['upper case', { value: 'ON' }],
    ['no value', {}],
    ['no body', undefined],
    ['malformed JSON', '{"value":'],
  ];
  for (const [what, body] of bad) {
    it(`refuses ${what} with 400 and the failure envelope`, async () => {
      const res = await t.call('PATCH', paths(zone.id)[0], body);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, result: null });
      expect(res.body.errors[0]).toMatchObject({
        code: expect.any(Number),
        message: expect.any(String),
      });
    });
  }

  it('unknown zone is 404, malformed zone id 400, other methods 405', async () => {
    expect((await t.call('GET', `/zones/${'0'.repeat(32)}/argo/smart_routing`)).status).toBe(404);
    expect((await t.call('GET', '/zones/example.com/argo/smart_routing')).status).toBe(400);
    expect((await t.call('PUT', paths(zone.id)[0], { value: 'on' })).status).toBe(405);
  });
});

describe('editable', () => {
  it('is false without Zone Settings Write, and PATCH is then 403', async () => {
    const reader = await createToken(t, ['Zone Settings Read'], {
      [`com.cloudflare.api.account.zone.${zone.id}`]: '*',
    });
    for (const path of paths(zone.id)) {
      const res = await t.call('GET', path, undefined, as(reader));
      expect(res.status).toBe(200);
      expect(res.body.result.editable).toBe(false);
      const patch = await t.call('PATCH', path, { value: 'on' }, as(reader));
      expect(patch.status).toBe(403);
      expect(patch.body.success).toBe(false);
    }
    const writer = await createToken(t, ['Zone Settings Write'], {
      [`com.cloudflare.api.account.zone.${zone.id}`]: '*',
    });
    expect(
      (await t.call('GET', paths(zone.id)[0], undefined, as(writer))).body.result.editable,
    ).toBe(true);
    expect((await t.call('PATCH', paths(zone.id)[0], { value: 'on' }, as(writer))).status).toBe(
      200,
    );
    await t.call('PATCH', paths(zone.id)[0], { value: 'off' });
  });

  it('is false when the account has no billing profile, and PATCH is then 403', async () => {
    const z = await createZone(t, 'billing.test');
    const billing = `/_outpost/accounts/${t.accountId}/billing`;
    expect((await t.call('GET', billing)).body.result).toMatchObject({
      account_id: t.accountId,
      configured: true,
    });
    const off = await t.call('PUT', billing, { configured: false });
    expect(off.status).toBe(200);
    expect(off.body.result).toMatchObject({ configured: false });
    try {
      const got = await t.call('GET', paths(z.id)[0]);
      expect(got.body.result.editable).toBe(false);
      const patch = await t.call('PATCH', paths(z.id)[1], { value: 'on' });
      expect(patch.status).toBe(403);
      expect(patch.body.errors[0].code).toBe(1651);
      expect((await t.call('GET', paths(z.id)[0])).body.result.value).toBe('off');
    } finally {
      await t.call('PUT', billing, { configured: true });
    }
    expect((await t.call('GET', paths(z.id)[0])).body.result.editable).toBe(true);
  });

  it('is false when the zone plan forbids changes, and PATCH is then 403', async () => {
    const z = await createZone(t, 'plan.test');
    const plan = `/_outpost/zones/${z.id}/plan`;
    expect((await t.call('GET', plan)).body.result).toMatchObject({
      zone_id: z.id,
      plan: 'free',
      smart_routing: 'allowed',
    });
    const set = await t.call('PUT', plan, { plan: 'enterprise', smart_routing: 'forbidden' });
    expect(set.status).toBe(200);
    expect(set.body.result).toMatchObject({ plan: 'enterprise', smart_routing: 'forbidden' });
    expect((await t.call('GET', paths(z.id)[0])).body.result.editable).toBe(false);
    const patch = await t.call('PATCH', paths(z.id)[0], { value: 'on' });
    expect(patch.status).toBe(403);
    expect(patch.body.errors[0].code).toBe(1652);
    expect(patch.body.errors[0].message).toContain('enterprise');
    await t.call('PUT', plan, { plan: 'pro' });
    expect((await t.call('GET', paths(z.id)[0])).body.result.editable).toBe(true);
    expect((await t.call('PATCH', paths(z.id)[0], { value: 'on' })).status).toBe(200);
  });
});

describe('operator endpoints', () => {
  it('validate their bodies and need a root credential', async () => {
    const billing = `/_outpost/accounts/${t.accountId}/billing`;
    const plan = `/_outpost/zones/${zone.id}/plan`;
    expect((await t.call('PUT', billing, { configured: 'yes' })).status).toBe(400);
    expect((await t.call('PUT', plan, { plan: 'platinum' })).status).toBe(400);
    expect((await t.call('PUT', plan, { plan: 'pro', smart_routing: 'sometimes' })).status).toBe(
      400,
    );
    expect(
      (await t.call('PUT', `/_outpost/accounts/${'d'.repeat(32)}/billing`, { configured: true }))
        .status,
    ).toBe(404);
    expect(
      (await t.call('PUT', `/_outpost/zones/${'d'.repeat(32)}/plan`, { plan: 'pro' })).status,
    ).toBe(404);
    expect((await t.call('GET', billing, undefined, { authorization: '' })).status).toBe(401);
    expect((await t.call('PUT', plan, { plan: 'pro' }, { authorization: '' })).status).toBe(401);
    const writer = await createToken(t, ['Zone Settings Write', 'Account Settings Write'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    for (const [method, path, body] of [
      ['GET', billing],
      ['PUT', billing, { configured: false }],
      ['GET', plan],
      ['PUT', plan, { plan: 'free' }],
    ] as const) {
      const res = await t.call(method, path, body, as(writer));
      expect(res.status, `${method} ${path}`).toBe(403);
    }
    expect((await t.call('GET', billing)).body.result.configured).toBe(true);
  });
});

describe('auth', () => {
  it('401 without credentials, 403 without Zone Settings, 403 outside the token zone', async () => {
    for (const path of paths(zone.id)) {
      expect((await t.call('GET', path, undefined, { authorization: '' })).status).toBe(401);
      expect((await t.call('PATCH', path, { value: 'on' }, { authorization: '' })).status).toBe(
        401,
      );
    }
    const dns = await createToken(t, ['DNS Write'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    for (const path of paths(zone.id)) {
      expect((await t.call('GET', path, undefined, as(dns))).status).toBe(403);
      expect((await t.call('PATCH', path, { value: 'on' }, as(dns))).status).toBe(403);
    }
    const other = await createZone(t, 'elsewhere.test');
    const scoped = await createToken(t, ['Zone Settings Write'], {
      [`com.cloudflare.api.account.zone.${other.id}`]: '*',
    });
    expect((await t.call('GET', paths(zone.id)[0], undefined, as(scoped))).status).toBe(403);
    expect((await t.call('PATCH', paths(zone.id)[1], { value: 'on' }, as(scoped))).status).toBe(
      403,
    );
    expect((await t.call('GET', paths(other.id)[0], undefined, as(scoped))).status).toBe(200);
  });

  it('the global key sees an editable setting', async () => {
    const { LEGACY } = await import('../../support/server.ts');
    const res = await t.call('GET', paths(zone.id)[0], undefined, {
      authorization: '',
      'x-auth-email': LEGACY.email,
      'x-auth-key': LEGACY.key,
    });
    expect(res.status).toBe(200);
    expect(res.body.result.editable).toBe(true);
  });

  it('the setting goes away with its zone', async () => {
    const z = await createZone(t, 'short-lived.test');
    await t.call('PATCH', paths(z.id)[0], { value: 'on' });
    expect((await t.call('DELETE', `/zones/${z.id}`)).status).toBe(200);
    expect((await t.call('GET', paths(z.id)[0])).status).toBe(404);
  });
});
