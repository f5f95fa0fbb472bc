/**
 * Versions, deployments, secrets and settings of a script through the official client and raw
 * calls: every upload is a version, a stored version goes live only when deployed (and answers at
 * the edge), secrets outlive uploads and never come back in clear, and bad input is refused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { sdk } from '../../support/sdk.ts';
import { deployScript, edgeGet, edgeUrlOf } from './helpers.ts';

let t: TestServer;
const source = (tag: string) => `export default {
  async fetch(request, env) {
    return Response.json({ tag: ${JSON.stringify(tag)}, secret: env.TOKEN ?? null, name: env.NAME ?? null });
  },
};`;

async function uploadVersion(tag: string) {
  const form = new FormData();
  form.append(
    'metadata',
    new Blob(
      [
        JSON.stringify({
          main_module: 'index.js',
          compatibility_date: '2025-01-01',
          bindings: [{ type: 'plain_text', name: 'NAME', text: tag }],
          annotations: { 'workers/message': `version ${tag}` },
        }),
      ],
      { type: 'application/json' },
    ),
  );
  form.append(
    'index.js',
    new Blob([source(tag)], { type: 'application/javascript+module' }),
    'index.js',
  );
  const res = await fetch(`${t.api}/accounts/${t.accountId}/workers/scripts/ver/versions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${t.token}` },
    body: form,
  });
  return { status: res.status, body: (await res.json()) as any };
}

beforeAll(async () => {
  t = await startTestServer();
}, 60_000);
afterAll(async () => {
  await t?.stop();
});

describe('versions and deployments', () => {
  it('records every upload, deploys a stored version on request, keeps secrets across uploads', async () => {
    const cf = sdk(t);
    const zone = await createZone(t, 'ver.test');
    await t.call('POST', `/zones/${zone.id}/dns_records`, {
      type: 'AAAA',
      name: 'www',
      content: '100::',
      proxied: true,
      ttl: 1,
    });
    await deployScript(t, 'ver', source('one'));
    await t.call('POST', `/zones/${zone.id}/workers/routes`, {
      pattern: 'www.ver.test/*',
      script: 'ver',
    });
    const edge = edgeUrlOf(t);
    const hit = async () => JSON.parse((await edgeGet(edge, 'www.ver.test', '/')).body);
    expect(await hit()).toEqual({ tag: 'one', secret: null, name: null });

    await cf.workers.scripts.secrets.update('ver', {
      account_id: t.accountId,
      name: 'TOKEN',
      text: 'hunter2',
      type: 'secret_text',
    });
    expect(await hit()).toMatchObject({ tag: 'one', secret: 'hunter2' });
    const secrets = [];
    for await (const s of cf.workers.scripts.secrets.list('ver', { account_id: t.accountId }))
      secrets.push(s);
    expect(secrets).toEqual([{ name: 'TOKEN', type: 'secret_text' }]);
    expect(
      JSON.stringify(await cf.workers.scripts.settings.get('ver', { account_id: t.accountId })),
    ).not.toContain('hunter2');

    // A stored version does not serve until deployed.
    const v2 = await uploadVersion('two');
    expect(v2.status).toBe(200);
    expect(v2.body.result.number).toBe(3);
    expect(await hit()).toMatchObject({ tag: 'one' });
    const dep = await t.call('POST', `/accounts/${t.accountId}/workers/scripts/ver/deployments`, {
      strategy: 'percentage',
      versions: [{ version_id: v2.body.result.id, percentage: 100 }],
    });
    expect(dep.status, dep.text).toBe(200);
    expect(await hit()).toEqual({ tag: 'two', secret: 'hunter2', name: 'two' });

    const versions = await t.call('GET', `/accounts/${t.accountId}/workers/scripts/ver/versions`);
    expect(versions.body.result.items.map((v: { number: number }) => v.number)).toEqual([3, 2, 1]);
    const detail = await cf.workers.scripts.versions.get(v2.body.result.id, {
      account_id: t.accountId,
      script_name: 'ver',
    });
    expect(detail).toMatchObject({ id: v2.body.result.id, number: 3 });
    expect(JSON.stringify(detail)).not.toContain('hunter2');
    const deployments = await t.call(
      'GET',
      `/accounts/${t.accountId}/workers/scripts/ver/deployments`,
    );
    expect(deployments.body.result.deployments[0].versions).toEqual([
      { version_id: v2.body.result.id, percentage: 100 },
    ]);
    expect(deployments.body.result.deployments).toHaveLength(3);

    // Back to the first version: its bindings come with it (it had no secret yet), then forward.
    const first = versions.body.result.items.find((v: { number: number }) => v.number === 1);
    await t.call('POST', `/accounts/${t.accountId}/workers/scripts/ver/deployments`, {
      versions: [{ version_id: first.id, percentage: 100 }],
    });
    expect(await hit()).toEqual({ tag: 'one', secret: null, name: null });
    await t.call('POST', `/accounts/${t.accountId}/workers/scripts/ver/deployments`, {
      versions: [{ version_id: v2.body.result.id, percentage: 100 }],
    });
    expect(await hit()).toMatchObject({ tag: 'two', secret: 'hunter2' });

    await cf.workers.scripts.secrets.delete('TOKEN', {
      account_id: t.accountId,
      script_name: 'ver',
    });
    expect(await hit()).toMatchObject({ secret: null });

    // Settings that do not change the code; tags.
    await cf.workers.scripts.scriptAndVersionSettings.get('ver', { account_id: t.accountId });
    const patched = await t.call(
      'PATCH',
      `/accounts/${t.accountId}/workers/scripts/ver/script-settings`,
      { logpush: true, tags: ['a'] },
    );
    expect(patched.body.result).toMatchObject({ logpush: true, tags: ['a'] });
    const svc = await t.call('GET', `/accounts/${t.accountId}/workers/services/ver`);
    expect(svc.body.result.default_environment.script).toMatchObject({ id: 'ver', tags: ['a'] });
  });

  it('refuses bad deployments, secrets and unknown scripts', async () => {
    const base = `/accounts/${t.accountId}/workers/scripts/ver`;
    const split = await t.call('POST', `${base}/deployments`, {
      versions: [
        { version_id: '00000000-0000-4000-8000-000000000000', percentage: 50 },
        { version_id: '00000000-0000-4000-8000-000000000001', percentage: 50 },
      ],
    });
    expect(split.status).toBe(400);
    expect(split.body.errors[0].message).toContain('one version at a time');
    expect(
      (
        await t.call('POST', `${base}/deployments`, {
          versions: [{ version_id: '00000000-0000-4000-8000-000000000000', percentage: 100 }],
        })
      ).status,
    ).toBe(404);
    expect((await t.call('POST', `${base}/deployments`, { versions: [] })).status).toBe(400);
    expect((await t.call('PUT', `${base}/secrets`, { name: 'bad name', text: 'x' })).status).toBe(
      400,
    );
    expect((await t.call('PUT', `${base}/secrets`, { name: 'OK' })).status).toBe(400);
    expect((await t.call('DELETE', `${base}/secrets/NOPE`)).status).toBe(404);
    expect(
      (await t.call('GET', `/accounts/${t.accountId}/workers/scripts/nope/versions`)).status,
    ).toBe(404);
    const svc = await t.call('GET', `/accounts/${t.accountId}/workers/services/nope`);
    expect(svc.status).toBe(404);
    expect(svc.body.errors[0].code).toBe(10007);
    expect((await t.call('GET', `${base}/settings`, undefined, { authorization: '' })).status).toBe(
      401,
    );
  });
});

describe('PATCH settings of an account script', () => {
  const invoke = async () => {
    const res = await fetch(
      `${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/setme/invoke/`,
      { headers: { authorization: `Bearer ${t.token}` } },
    );
    return (await res.json()) as any;
  };
  const settingsPath = () => `/accounts/${t.accountId}/workers/scripts/setme/settings`;

  it("takes the official client's bracket form, the settings part and JSON over one store", async () => {
    await deployScript(
      t,
      'setme',
      `export default { fetch(request, env) { return Response.json({ greeting: env.GREETING ?? null }); } };`,
      { bindings: [{ type: 'plain_text', name: 'GREETING', text: 'hi' }] },
    );
    expect(await invoke()).toEqual({ greeting: 'hi' });
    const cf = sdk(t);
    // The client sends settings[logpush], settings[tags][0], settings[bindings][0][name], …
    const out = await cf.workers.scripts.scriptAndVersionSettings.edit('setme', {
      account_id: t.accountId,
      settings: {
        logpush: true,
        tags: ['blue'],
        bindings: [{ type: 'plain_text', name: 'GREETING', text: 'hello' }],
      },
    });
    expect(out).toMatchObject({ logpush: true, tags: ['blue'] });
    expect(out.bindings).toEqual([{ type: 'plain_text', name: 'GREETING', text: 'hello' }]);
    expect(await invoke()).toEqual({ greeting: 'hello' });
    // The same store answers the other forms.
    const form = new FormData();
    form.append(
      'settings',
      new Blob([JSON.stringify({ logpush: false })], { type: 'application/json' }),
      'blob',
    );
    const part = await fetch(`${t.api}${settingsPath()}`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${t.token}` },
      body: form,
    });
    expect(((await part.json()) as any).result).toMatchObject({ logpush: false, tags: ['blue'] });
    const json = await t.call('PATCH', settingsPath(), { settings: { tags: ['green'] } });
    expect(json.body.result).toMatchObject({ logpush: false, tags: ['green'] });
    const got = await cf.workers.scripts.scriptAndVersionSettings.get('setme', {
      account_id: t.accountId,
    });
    expect(got).toMatchObject({ logpush: false, tags: ['green'] });
    expect(await invoke()).toEqual({ greeting: 'hello' });
  });

  it('refuses a bad bracket field naming it', async () => {
    const form = new FormData();
    form.append('settings[logpush]', 'maybe');
    const res = await fetch(`${t.api}${settingsPath()}`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${t.token}` },
      body: form,
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).errors[0].message).toContain('settings.logpush');
  });
});
