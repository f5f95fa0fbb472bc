/**
 * Media forwarding apps (`/accounts/{account_id}/calls/apps`) through the official client's
 * `calls.sfu.*` and raw routes: the secret is returned once, rename, delete, permissions, bad ids.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';

let t: TestServer;
let cf: Cloudflare;
let account_id: string;

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
  account_id = t.accountId;
});
afterAll(() => t?.stop());

describe('official client: calls.sfu', () => {
  it('create → list → get → update → delete; the secret only on create', async () => {
    const created = await cf.calls.sfu.create({ account_id, name: 'room app' });
    expect(created.uid).toMatch(/^[0-9a-f]{32}$/);
    expect(created.secret).toHaveLength(64);
    expect(created.name).toBe('room app');
    expect(created.modified).toBe(created.created);

    const listed = [];
    for await (const a of cf.calls.sfu.list({ account_id })) listed.push(a);
    expect(listed.find((a) => a.uid === created.uid)).toEqual({ uid: created.uid, name: 'room app', created: created.created, modified: created.modified });
    expect(listed.every((a) => !('secret' in a))).toBe(true);

    const got = await cf.calls.sfu.get(created.uid, { account_id });
    expect(got).toEqual({ uid: created.uid, name: 'room app', created: created.created, modified: created.modified });

    const updated = await cf.calls.sfu.update(created.uid, { account_id, name: 'renamed' });
    expect(updated).toMatchObject({ uid: created.uid, name: 'renamed', created: created.created });
    expect(updated).not.toHaveProperty('secret');
    expect((await cf.calls.sfu.get(created.uid, { account_id })).name).toBe('renamed');

    const deleted = await cf.calls.sfu.delete(created.uid, { account_id });
    expect(deleted).toMatchObject({ uid: created.uid, name: 'renamed' });
    await expect(cf.calls.sfu.get(created.uid, { account_id })).rejects.toBeInstanceOf(Cloudflare.NotFoundError);
    await expect(cf.calls.sfu.delete(created.uid, { account_id })).rejects.toBeInstanceOf(Cloudflare.NotFoundError);
  });

  it('create without a body gets an empty name', async () => {
    const res = await t.call('POST', `/accounts/${account_id}/calls/apps`);
    expect(res.status).toBe(201);
    expect(res.body.result.name).toBe('');
    expect(res.body.result.secret).toHaveLength(64);
  });
});

describe('apps routes: bad input and permissions', () => {
  it('rejects a wrong-typed name, malformed JSON and a malformed app id', async () => {
    const wrong = await t.call('POST', `/accounts/${account_id}/calls/apps`, { name: 5 });
    expect(wrong.status).toBe(400);
    expect(wrong.body.success).toBe(false);
    expect(JSON.stringify(wrong.body.errors)).toContain('name');
    const bad = await t.call('POST', `/accounts/${account_id}/calls/apps`, '{"name":');
    expect(bad.status).toBe(400);
    const badId = await t.call('GET', `/accounts/${account_id}/calls/apps/not-an-id`);
    expect(badId.status).toBe(400);
    const missing = await t.call('GET', `/accounts/${account_id}/calls/apps/${'0'.repeat(32)}`);
    expect(missing.status).toBe(404);
    expect(missing.body.errors[0].message).toContain('not found');
  });

  it('401 without a token; read-only token lists but cannot create', async () => {
    const anon = await t.call('GET', `/accounts/${account_id}/calls/apps`, undefined, { authorization: '' });
    expect(anon.status).toBe(401);
    const reader = await createToken(t, ['Calls Read'], { [`com.cloudflare.api.account.${account_id}`]: '*' });
    const list = await t.call('GET', `/accounts/${account_id}/calls/apps`, undefined, { authorization: `Bearer ${reader}` });
    expect(list.status).toBe(200);
    const create = await t.call('POST', `/accounts/${account_id}/calls/apps`, { name: 'x' }, { authorization: `Bearer ${reader}` });
    expect(create.status).toBe(403);
  });
});
