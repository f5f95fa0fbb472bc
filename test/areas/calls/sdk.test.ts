/** The official client's `calls.turn.*` (relay keys) against a real server. */
import { createHmac } from 'node:crypto';
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

describe('official client: calls.turn', () => {
  it('create → list → get → update → delete, unwrapped results', async () => {
    const created = await cf.calls.turn.create({ account_id, name: 'sdk key' });
    expect(created.uid).toMatch(/^[0-9a-f]{32}$/);
    expect(created.key).toHaveLength(64);
    expect(created.name).toBe('sdk key');
    expect(Date.parse(created.created)).not.toBeNaN();
    expect(created.modified).toBe(created.created);

    const listed = [];
    for await (const k of cf.calls.turn.list({ account_id })) listed.push(k);
    const mine = listed.find((k) => k.uid === created.uid);
    expect(mine).toEqual({
      uid: created.uid,
      name: 'sdk key',
      created: created.created,
      modified: created.modified,
    });
    expect(listed.every((k) => !('key' in k))).toBe(true);

    const page = await cf.calls.turn.list({ account_id });
    expect(page.getPaginatedItems().some((k) => k.uid === created.uid)).toBe(true);

    const got = await cf.calls.turn.get(created.uid, { account_id });
    expect(got).toEqual({
      uid: created.uid,
      name: 'sdk key',
      created: created.created,
      modified: created.modified,
    });

    const updated = await cf.calls.turn.update(created.uid, { account_id, name: 'renamed' });
    expect(updated).toMatchObject({ uid: created.uid, name: 'renamed', created: created.created });
    expect(updated).not.toHaveProperty('key');
    expect((await cf.calls.turn.get(created.uid, { account_id })).name).toBe('renamed');

    const deleted = await cf.calls.turn.delete(created.uid, { account_id });
    expect(deleted).toMatchObject({ uid: created.uid, name: 'renamed' });
    await expect(cf.calls.turn.get(created.uid, { account_id })).rejects.toBeInstanceOf(
      Cloudflare.NotFoundError,
    );
  });

  it('create without a name; the key mints credentials coturn-style on the credential host', async () => {
    const created = await cf.calls.turn.create({ account_id });
    expect(created.name).toBe('');
    const res = await fetch(
      `${t.url}/v1/turn/keys/${created.uid}/credentials/generate-ice-servers`,
      {
        method: 'POST',
        headers: { authorization: `Bearer ${created.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ ttl: 120 }),
      },
    );
    expect(res.status).toBe(201);
    const { iceServers } = (await res.json()) as {
      iceServers: Array<{ urls: string[]; username?: string; credential?: string }>;
    };
    const turn = iceServers.find((s) => s.username)!;
    expect(turn.credential).toBe(
      createHmac('sha1', created.key).update(turn.username!).digest('base64'),
    );
    await cf.calls.turn.delete(created.uid, { account_id });
  });

  it('typed errors: unknown key 404, malformed id 400, read-only token 403, bad token 401', async () => {
    await expect(cf.calls.turn.get('f'.repeat(32), { account_id })).rejects.toBeInstanceOf(
      Cloudflare.NotFoundError,
    );
    await expect(
      cf.calls.turn.update('f'.repeat(32), { account_id, name: 'x' }),
    ).rejects.toBeInstanceOf(Cloudflare.NotFoundError);
    await expect(cf.calls.turn.delete('f'.repeat(32), { account_id })).rejects.toBeInstanceOf(
      Cloudflare.NotFoundError,
    );
    await expect(cf.calls.turn.get('not-an-id', { account_id })).rejects.toBeInstanceOf(
      Cloudflare.BadRequestError,
    );

    const reader = await createToken(t, ['Calls Read'], {
      [`com.cloudflare.api.account.${account_id}`]: '*',
    });
    const ro = sdk(t, { apiToken: reader });
    const k = await cf.calls.turn.create({ account_id, name: 'guarded' });
    expect((await ro.calls.turn.get(k.uid, { account_id })).name).toBe('guarded');
    await expect(ro.calls.turn.create({ account_id, name: 'x' })).rejects.toBeInstanceOf(
      Cloudflare.PermissionDeniedError,
    );
    await expect(ro.calls.turn.update(k.uid, { account_id, name: 'x' })).rejects.toBeInstanceOf(
      Cloudflare.PermissionDeniedError,
    );
    await expect(ro.calls.turn.delete(k.uid, { account_id })).rejects.toBeInstanceOf(
      Cloudflare.PermissionDeniedError,
    );

    const bad = sdk(t, { apiToken: 'not-a-token' });
    await expect(bad.calls.turn.create({ account_id })).rejects.toBeInstanceOf(
      Cloudflare.AuthenticationError,
    );
  });
});
