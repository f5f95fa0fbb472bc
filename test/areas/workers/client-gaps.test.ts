/**
 * Account-script calls of the official client beyond upload: the main module's content
 * (`content.get`), code-only replacement (`content.update`, bindings and secrets kept, loaded
 * before it is stored, a new version), secrets in bulk (account and dispatch scripts, all or
 * nothing, seen by the running script), search, deleting an old deployment, and the account's
 * Workers settings; with the bad input, unknown scripts and missing permissions each refuses.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';
import { createNamespace, putCustomer } from '../workers-for-platforms/helpers.ts';
import { deployScript } from './helpers.ts';

let t: TestServer;
let cf: Cloudflare;
let account_id: string;

const source = (tag: string) => `export default {
  async fetch(request, env) {
    return Response.json({ tag: ${JSON.stringify(tag)}, name: env.NAME ?? null, a: env.A ?? null, b: env.B ?? null });
  },
};`;

async function invoke(name: string): Promise<any> {
  const res = await fetch(
    `${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/${name}/invoke/`,
    {
      headers: { authorization: `Bearer ${t.token}` },
    },
  );
  return res.json();
}

const scriptPath = (name: string, rest = '') =>
  `/accounts/${t.accountId}/workers/scripts/${name}${rest}`;

/** A multipart body as a user would send it by hand: a JSON metadata part plus one module. */
function codeForm(metadata: Record<string, unknown>, code: string, file = 'worker.js'): FormData {
  const form = new FormData();
  form.append('metadata', new Blob([JSON.stringify(metadata)], { type: 'application/json' }));
  form.append(file, new Blob([code], { type: 'application/javascript+module' }), file);
  return form;
}

async function send(method: string, path: string, body: FormData | undefined, token = t.token) {
  const res = await fetch(`${t.api}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}` },
    body,
  });
  return { status: res.status, body: (await res.json()) as any };
}

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
  account_id = t.accountId;
}, 60_000);
afterAll(async () => {
  await t?.stop();
});

describe('script content', () => {
  it('answers the main module raw with its type and entry point; replaces code keeping bindings and secrets', async () => {
    await deployScript(t, 'content', source('one'), {
      bindings: [{ type: 'plain_text', name: 'NAME', text: 'kept' }],
    });
    await cf.workers.scripts.secrets.update('content', {
      account_id,
      name: 'A',
      text: 'secret-a',
      type: 'secret_text',
    });
    const got = await cf.workers.scripts.content.get('content', { account_id });
    expect(got.headers.get('cf-entrypoint')).toBe('index.js');
    expect(got.headers.get('content-type')).toMatch(/^application\/javascript\+module/);
    expect(await got.text()).toBe(source('one'));

    const before = await t.call('GET', scriptPath('content', '/versions'));
    const updated = await cf.workers.scripts.content.update('content', {
      account_id,
      metadata: { main_module: 'worker.js' },
      files: [
        await Cloudflare.toFile(Buffer.from(source('two')), 'worker.js', {
          type: 'application/javascript+module',
        }),
      ],
    });
    expect(updated.id).toBe('content');
    expect(await invoke('content')).toEqual({ tag: 'two', name: 'kept', a: 'secret-a', b: null });
    const after = await t.call('GET', scriptPath('content', '/versions'));
    expect(after.body.result.items).toHaveLength(before.body.result.items.length + 1);
    const raw = await fetch(`${t.api}${scriptPath('content', '/content/v2')}`, {
      headers: { authorization: `Bearer ${t.token}` },
    });
    expect(raw.headers.get('cf-entrypoint')).toBe('worker.js');
    expect(await raw.text()).toBe(source('two'));
    const settings = await cf.workers.scripts.scriptAndVersionSettings.get('content', {
      account_id,
    });
    expect(settings.bindings).toEqual(
      expect.arrayContaining([
        { type: 'plain_text', name: 'NAME', text: 'kept' },
        { type: 'secret_text', name: 'A' },
      ]),
    );

    // The main module named by the client's header instead of the metadata.
    const viaHeader = await fetch(`${t.api}${scriptPath('content', '/content')}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${t.token}`, 'CF-WORKER-MAIN-MODULE-PART': 'worker.js' },
      body: codeForm({}, source('three')),
    });
    expect(viaHeader.status, await viaHeader.clone().text()).toBe(200);
    expect(await invoke('content')).toMatchObject({ tag: 'three', name: 'kept', a: 'secret-a' });
  });

  it('refuses code that does not load, a missing main module and unknown scripts; the live code stays', async () => {
    await deployScript(t, 'content-bad', source('live'));
    const broken = await send(
      'PUT',
      scriptPath('content-bad', '/content'),
      codeForm({ main_module: 'worker.js' }, 'export default { fetch( {'),
    );
    expect(broken.status).toBe(400);
    expect(broken.body.errors[0].message).toMatch(/worker\.js|Unexpected|SyntaxError/i);
    const noMain = await send(
      'PUT',
      scriptPath('content-bad', '/content'),
      codeForm({}, source('x')),
    );
    expect(noMain.status).toBe(400);
    expect(noMain.body.errors[0].message).toContain('main_module');
    const wrongPart = await send(
      'PUT',
      scriptPath('content-bad', '/content'),
      codeForm({ main_module: 'other.js' }, source('x')),
    );
    expect(wrongPart.status).toBe(400);
    expect(wrongPart.body.errors[0].message).toContain('other.js');
    const sw = await send(
      'PUT',
      scriptPath('content-bad', '/content'),
      codeForm({ body_part: 'worker.js' }, 'addEventListener("fetch", () => {})'),
    );
    expect(sw.status).toBe(400);
    expect(sw.body.errors[0].message).toContain('body_part');
    const notForm = await t.call('PUT', scriptPath('content-bad', '/content'), {
      main_module: 'worker.js',
    });
    expect(notForm.status).toBe(415);
    expect(await invoke('content-bad')).toMatchObject({ tag: 'live' });

    const missing = await send(
      'PUT',
      scriptPath('nope', '/content'),
      codeForm({ main_module: 'worker.js' }, source('x')),
    );
    expect(missing.status).toBe(404);
    expect(missing.body.errors[0].code).toBe(10007);
    const missingGet = await t.call('GET', scriptPath('nope', '/content/v2'));
    expect(missingGet.status).toBe(404);
    expect(missingGet.body.errors[0].code).toBe(10007);
  });
});

describe('secrets in bulk', () => {
  it('sets, replaces and deletes several secrets at once; the running script sees them', async () => {
    await deployScript(t, 'bulk', source('bulk'));
    await cf.workers.scripts.secrets.update('bulk', {
      account_id,
      name: 'A',
      text: 'a1',
      type: 'secret_text',
    });
    const out = await cf.workers.scripts.secrets.bulkUpdate('bulk', {
      account_id,
      secrets: {
        A: { name: 'A', text: 'a2', type: 'secret_text' },
        B: { name: 'B', text: 'b1', type: 'secret_text' },
      },
      version_tags: { 'workers/message': 'rotate' },
    });
    expect(out).toEqual({
      A: { name: 'A', type: 'secret_text' },
      B: { name: 'B', type: 'secret_text' },
    });
    expect(JSON.stringify(out)).not.toContain('a2');
    expect(await invoke('bulk')).toMatchObject({ a: 'a2', b: 'b1' });
    const versions = await t.call('GET', scriptPath('bulk', '/versions'));
    expect(versions.body.result.items[0].annotations['workers/message']).toBe('rotate');

    // null deletes; deleting one the script does not have is no error (a retry answers the same).
    const del = await t.call('PATCH', scriptPath('bulk', '/secrets-bulk'), {
      secrets: { A: null, NEVER: null },
    });
    expect(del.status, del.text).toBe(200);
    expect(del.body.result).toEqual({ B: { name: 'B', type: 'secret_text' } });
    expect(await invoke('bulk')).toMatchObject({ a: null, b: 'b1' });
  });

  it('refuses the whole call when one entry is bad; nothing changes', async () => {
    await deployScript(t, 'bulk-bad', source('x'), {
      bindings: [{ type: 'plain_text', name: 'NAME', text: 'plain' }],
    });
    await t.call('PATCH', scriptPath('bulk-bad', '/secrets-bulk'), {
      secrets: { A: { name: 'A', text: 'keep', type: 'secret_text' } },
    });
    const cases: [unknown, string][] = [
      [
        {
          A: { name: 'A', text: 'new', type: 'secret_text' },
          B: { name: 'B', type: 'secret_text' },
        },
        'secrets.B.text',
      ],
      [
        { A: { name: 'A', text: 'new', type: 'secret_text' }, 'bad-name': { text: 'x' } },
        'secrets.bad-name',
      ],
      [
        { A: { name: 'A', text: 'new', type: 'secret_text' }, NAME: { name: 'NAME', text: 'x' } },
        'plain_text',
      ],
      [{ A: { name: 'Z', text: 'new', type: 'secret_text' } }, 'secrets.A.name'],
      [
        { K: { name: 'K', type: 'secret_key', format: 'raw', algorithm: {}, usages: [] } },
        'secret_key',
      ],
      [{ A: { name: 'A', text: 'x'.repeat(5 * 1024 + 1), type: 'secret_text' } }, '5 KiB'],
      [{ A: 'plain string' }, 'secrets.A'],
      ['not an object', 'secrets'],
    ];
    for (const [secrets, want] of cases) {
      const res = await t.call('PATCH', scriptPath('bulk-bad', '/secrets-bulk'), { secrets });
      expect(res.status, JSON.stringify(secrets).slice(0, 80)).toBe(400);
      expect(res.body.errors[0].message).toContain(want);
    }
    const malformed = await fetch(`${t.api}${scriptPath('bulk-bad', '/secrets-bulk')}`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${t.token}`, 'content-type': 'application/json' },
      body: '{"secrets": {"A": ',
    });
    expect(malformed.status).toBe(400);
    expect(await invoke('bulk-bad')).toMatchObject({ a: 'keep', b: null, name: 'plain' });
    const missing = await t.call('PATCH', scriptPath('nope', '/secrets-bulk'), { secrets: {} });
    expect(missing.status).toBe(404);
    expect(missing.body.errors[0].code).toBe(10007);
  });

  it('changes a dispatch script the same way', async () => {
    await createNamespace(t, 'bulk-ns');
    const up = await putCustomer(t, 'bulk-ns', 'cust', source('cust'));
    expect(up.status).toBe(200);
    await deployScript(
      t,
      'bulk-front',
      `export default { fetch(request, env) { return env.NS.get('cust').fetch(request); } };`,
      { bindings: [{ type: 'dispatch_namespace', name: 'NS', namespace: 'bulk-ns' }] },
    );
    const out = await cf.workersForPlatforms.dispatch.namespaces.scripts.secrets.bulkUpdate(
      'cust',
      {
        account_id,
        dispatch_namespace: 'bulk-ns',
        secrets: {
          A: { name: 'A', text: 'da', type: 'secret_text' },
          B: { name: 'B', text: 'db', type: 'secret_text' },
        },
      },
    );
    expect(out).toEqual({
      A: { name: 'A', type: 'secret_text' },
      B: { name: 'B', type: 'secret_text' },
    });
    expect(await invoke('bulk-front')).toMatchObject({ tag: 'cust', a: 'da', b: 'db' });
    const path = `/accounts/${account_id}/workers/dispatch/namespaces/bulk-ns/scripts/cust/secrets-bulk`;
    const bad = await t.call('PATCH', path, {
      secrets: { A: null, B: { name: 'B', type: 'secret_text' } },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0].message).toContain('secrets.B.text');
    expect(await invoke('bulk-front')).toMatchObject({ a: 'da', b: 'db' });
    const del = await t.call('PATCH', path, { secrets: { A: null } });
    expect(del.body.result).toEqual({ B: { name: 'B', type: 'secret_text' } });
    expect(await invoke('bulk-front')).toMatchObject({ a: null, b: 'db' });
    const missing = await t.call(
      'PATCH',
      `/accounts/${account_id}/workers/dispatch/namespaces/bulk-ns/scripts/nope/secrets-bulk`,
      { secrets: {} },
    );
    expect(missing.status).toBe(404);
  });
});

describe('search', () => {
  it('finds scripts by name substring and by id, ordered and paged', async () => {
    for (const n of ['search-beta', 'search-alpha', 'search-gamma'])
      await deployScript(t, n, source(n));
    const found = await cf.workers.scripts.search({
      account_id,
      name: 'search-',
      order_by: 'name',
    });
    expect(found.map((s) => s.script_name)).toEqual([
      'search-alpha',
      'search-beta',
      'search-gamma',
    ]);
    expect(found[0]).toMatchObject({
      script_name: 'search-alpha',
      id: expect.stringMatching(/^[0-9a-f]{32}$/),
    });
    expect(found[0].created_on).toBeTruthy();
    const byCreation = await cf.workers.scripts.search({
      account_id,
      name: 'search-',
      order_by: 'created_on',
    });
    expect(byCreation.map((s) => s.script_name)).toEqual([
      'search-beta',
      'search-alpha',
      'search-gamma',
    ]);

    const byId = await cf.workers.scripts.search({ account_id, id: found[1].id });
    expect(byId.map((s) => s.script_name)).toEqual(['search-beta']);
    // The id is the script's, not the upload's: a new upload keeps it.
    await deployScript(t, 'search-beta', source('again'));
    expect(
      (await cf.workers.scripts.search({ account_id, id: found[1].id })).map((s) => s.script_name),
    ).toEqual(['search-beta']);

    const page2 = await t.call(
      'GET',
      `/accounts/${account_id}/workers/scripts-search?name=search-&per_page=2&page=2`,
    );
    expect(page2.body.result.map((s: { script_name: string }) => s.script_name)).toEqual([
      'search-gamma',
    ]);
    expect(page2.body.result_info).toMatchObject({ page: 2, per_page: 2, total_count: 3 });
    expect((await cf.workers.scripts.search({ account_id, name: 'no-such' })).length).toBe(0);

    for (const q of ['order_by=size', 'id=xyz', 'per_page=0', 'page=0']) {
      const res = await t.call('GET', `/accounts/${account_id}/workers/scripts-search?${q}`);
      expect(res.status, q).toBe(400);
      expect(res.body.errors[0].message).toContain(q.split('=')[0]);
    }
  });
});

describe('deleting deployments', () => {
  it('deletes an older deployment and refuses the latest one', async () => {
    await deployScript(t, 'deps', source('one'));
    await deployScript(t, 'deps', source('two'));
    const list = await t.call('GET', scriptPath('deps', '/deployments'));
    const [latest, older] = list.body.result.deployments as { id: string }[];
    const refused = await t.call('DELETE', scriptPath('deps', `/deployments/${latest.id}`));
    expect(refused.status).toBe(400);
    expect(refused.body.errors[0].message).toContain('latest deployment');
    const deleted = await cf.workers.scripts.deployments.delete(older.id, {
      account_id,
      script_name: 'deps',
    });
    expect(deleted.success).toBe(true);
    const after = await t.call('GET', scriptPath('deps', '/deployments'));
    expect(after.body.result.deployments.map((d: { id: string }) => d.id)).toEqual([latest.id]);
    expect(await invoke('deps')).toMatchObject({ tag: 'two' });
    const again = await t.call('DELETE', scriptPath('deps', `/deployments/${older.id}`));
    expect(again.status).toBe(404);
    const noScript = await t.call('DELETE', scriptPath('nope', `/deployments/${older.id}`));
    expect(noScript.status).toBe(404);
    expect(noScript.body.errors[0].code).toBe(10007);
  });
});

describe('account settings', () => {
  it('keeps default_usage_model and green_compute per account and validates them', async () => {
    expect(await cf.workers.accountSettings.get({ account_id })).toEqual({
      default_usage_model: 'standard',
      green_compute: false,
    });
    expect(await cf.workers.accountSettings.update({ account_id, green_compute: true })).toEqual({
      default_usage_model: 'standard',
      green_compute: true,
    });
    await cf.workers.accountSettings.update({ account_id, default_usage_model: 'unbound' });
    expect(await cf.workers.accountSettings.get({ account_id })).toEqual({
      default_usage_model: 'unbound',
      green_compute: true,
    });
    const path = `/accounts/${account_id}/workers/account-settings`;
    for (const [body, field] of [
      [{ default_usage_model: 'fast' }, 'default_usage_model'],
      [{ green_compute: 'yes' }, 'green_compute'],
      [{ colour: 'blue' }, 'colour'],
    ] as const) {
      const res = await t.call('PUT', path, body);
      expect(res.status).toBe(400);
      expect(JSON.stringify(res.body.errors)).toContain(field);
    }
    expect((await t.call('GET', path)).body.result).toEqual({
      default_usage_model: 'unbound',
      green_compute: true,
    });
  });
});

describe('permissions', () => {
  it('needs Workers Scripts Read to look and Write to change', async () => {
    await deployScript(t, 'perm', source('perm'));
    const reader = await createToken(t, ['Workers Scripts Read'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    const other = await createToken(t, ['Workers Routes Read'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    const as = (token: string) => ({ authorization: `Bearer ${token}` });
    expect(
      (await t.call('GET', scriptPath('perm', '/content/v2'), undefined, as(reader))).status,
    ).toBe(200);
    expect(
      (await t.call('GET', `/accounts/${account_id}/workers/scripts-search`, undefined, as(reader)))
        .status,
    ).toBe(200);
    expect(
      (
        await t.call(
          'GET',
          `/accounts/${account_id}/workers/account-settings`,
          undefined,
          as(reader),
        )
      ).status,
    ).toBe(200);
    for (const [method, path, body] of [
      ['PATCH', scriptPath('perm', '/secrets-bulk'), { secrets: {} }],
      ['PUT', `/accounts/${account_id}/workers/account-settings`, { green_compute: true }],
      [
        'DELETE',
        scriptPath('perm', `/deployments/${'0'.repeat(8)}-0000-4000-8000-${'0'.repeat(12)}`),
        undefined,
      ],
    ] as const)
      expect((await t.call(method, path, body, as(reader))).status, `${method} ${path}`).toBe(403);
    const put = await send(
      'PUT',
      scriptPath('perm', '/content'),
      codeForm({ main_module: 'worker.js' }, source('x')),
      reader,
    );
    expect(put.status).toBe(403);
    expect(
      (await t.call('GET', scriptPath('perm', '/content/v2'), undefined, as(other))).status,
    ).toBe(403);
    expect(
      (await t.call('GET', `/accounts/${account_id}/workers/scripts-search`, undefined, as(other)))
        .status,
    ).toBe(403);
    expect(await invoke('perm')).toMatchObject({ tag: 'perm' });
  });
});
