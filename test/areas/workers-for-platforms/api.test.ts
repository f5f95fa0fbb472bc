/**
 * Dispatch namespaces through the official client (`workersForPlatforms.*`) and raw HTTP: namespace
 * and script CRUD in both upload forms, paging, tags and delete by tag, upload validation (the
 * runtime's message with the line), name patterns, and the static asset upload protocol's bad
 * input (hash length, expired or foreign tokens, a completion token for another manifest).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';
import { deployScript } from '../workers/helpers.ts';
import { createNamespace, HELLO, putCustomer, uploadAssets } from './helpers.ts';

let t: TestServer;
let cf: Cloudflare;
let account_id: string;

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
  account_id = t.accountId;
}, 60_000);

afterAll(async () => {
  await t?.stop();
});

describe('namespaces and scripts through the official client', () => {
  it('creates, lists, gets and deletes namespaces; uploads, reads and deletes scripts', async () => {
    const ns = await cf.workersForPlatforms.dispatch.namespaces.create({
      account_id,
      name: 'sdk-ns',
    });
    expect(ns.namespace_name).toBe('sdk-ns');
    expect(ns.namespace_id).toMatch(/^[0-9a-f]{32}$/);
    expect(ns.script_count).toBe(0);

    const script = await cf.workersForPlatforms.dispatch.namespaces.scripts.update('alpha', {
      account_id,
      dispatch_namespace: 'sdk-ns',
      metadata: {
        main_module: 'main.js',
        compatibility_date: '2025-01-01',
        tags: ['plan-free'],
        bindings: [{ type: 'plain_text', name: 'GREETING', text: 'hi' }],
      },
      files: [
        await Cloudflare.toFile(Buffer.from(HELLO('alpha')), 'main.js', {
          type: 'application/javascript+module',
        }),
      ],
    });
    expect(script.id).toBe('alpha');
    expect(script.handlers).toContain('fetch');

    const got = await cf.workersForPlatforms.dispatch.namespaces.scripts.get('alpha', {
      account_id,
      dispatch_namespace: 'sdk-ns',
    });
    expect(got.dispatch_namespace).toBe('sdk-ns');
    expect(got.script?.id).toBe('alpha');
    expect(got.script?.tags).toEqual(['plan-free']);

    const content = await cf.workersForPlatforms.dispatch.namespaces.scripts.content.get('alpha', {
      account_id,
      dispatch_namespace: 'sdk-ns',
    });
    expect(await content.text()).toContain('hello from alpha');

    const settings = await cf.workersForPlatforms.dispatch.namespaces.scripts.settings.get(
      'alpha',
      {
        account_id,
        dispatch_namespace: 'sdk-ns',
      },
    );
    expect(settings.compatibility_date).toBe('2025-01-01');
    expect(settings.bindings).toEqual([{ type: 'plain_text', name: 'GREETING', text: 'hi' }]);

    const bindings = [];
    for await (const b of cf.workersForPlatforms.dispatch.namespaces.scripts.bindings.get('alpha', {
      account_id,
      dispatch_namespace: 'sdk-ns',
    }))
      bindings.push(b);
    expect(bindings).toHaveLength(1);

    const tagList = [];
    for await (const tag of cf.workersForPlatforms.dispatch.namespaces.scripts.tags.update(
      'alpha',
      {
        account_id,
        dispatch_namespace: 'sdk-ns',
        body: ['plan-pro', 'eu'],
      },
    ))
      tagList.push(tag);
    expect(tagList).toEqual(['plan-pro', 'eu']);
    await cf.workersForPlatforms.dispatch.namespaces.scripts.tags.delete('eu', {
      account_id,
      dispatch_namespace: 'sdk-ns',
      script_name: 'alpha',
    });
    const after = [];
    for await (const tag of cf.workersForPlatforms.dispatch.namespaces.scripts.tags.list('alpha', {
      account_id,
      dispatch_namespace: 'sdk-ns',
    }))
      after.push(tag);
    expect(after).toEqual(['plan-pro']);

    const names = [];
    for await (const n of cf.workersForPlatforms.dispatch.namespaces.list({ account_id }))
      names.push(n.namespace_name);
    expect(names).toContain('sdk-ns');
    expect(
      (await cf.workersForPlatforms.dispatch.namespaces.get('sdk-ns', { account_id })).script_count,
    ).toBe(1);

    await cf.workersForPlatforms.dispatch.namespaces.scripts.delete('alpha', {
      account_id,
      dispatch_namespace: 'sdk-ns',
    });
    await expect(
      cf.workersForPlatforms.dispatch.namespaces.scripts.get('alpha', {
        account_id,
        dispatch_namespace: 'sdk-ns',
      }),
    ).rejects.toMatchObject({ status: 404 });
    await cf.workersForPlatforms.dispatch.namespaces.delete('sdk-ns', { account_id });
    await expect(
      cf.workersForPlatforms.dispatch.namespaces.get('sdk-ns', { account_id }),
    ).rejects.toMatchObject({ status: 404 });
  });
});

describe('scripts over raw HTTP', () => {
  beforeAll(async () => {
    await createNamespace(t, 'raw-ns');
  });

  it('pages the script list and deletes exactly the tagged scripts', async () => {
    for (let i = 0; i < 5; i++) {
      const r = await putCustomer(t, 'raw-ns', `c${i}`, HELLO(`c${i}`), {
        tags: i % 2 === 0 ? ['even', `c${i}`] : ['odd'],
      });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    }
    const base = `/accounts/${t.accountId}/workers/dispatch/namespaces/raw-ns/scripts`;
    const p1 = await t.call('GET', `${base}?per_page=2&page=1`);
    expect(p1.body.result.map((s: any) => s.id)).toEqual(['c0', 'c1']);
    expect(p1.body.result_info).toMatchObject({
      page: 1,
      per_page: 2,
      total_count: 5,
      total_pages: 3,
    });
    const p3 = await t.call('GET', `${base}?per_page=2&page=3`);
    expect(p3.body.result.map((s: any) => s.id)).toEqual(['c4']);
    expect((await t.call('GET', `${base}?per_page=101`)).status).toBe(400);

    const del = await t.call('DELETE', `${base}?tags=even%3Ayes`);
    expect(del.status).toBe(200);
    expect(del.body.result.deleted.map((d: any) => d.id).sort()).toEqual(['c0', 'c2', 'c4']);
    expect(del.body.result.deleted_count).toBe(3);
    const left = await t.call('GET', base);
    expect(left.body.result.map((s: any) => s.id)).toEqual(['c1', 'c3']);
    expect((await t.call('DELETE', `${base}?tags=odd`)).status).toBe(400);
    expect((await t.call('DELETE', base)).status).toBe(400);
  });

  it('refuses a script that does not parse, naming the line, and one without a handler', async () => {
    const broken = await putCustomer(
      t,
      'raw-ns',
      'broken',
      'export default {\n  fetch() {\n    return (;\n  },\n};',
    );
    expect(broken.status).toBe(400);
    expect(broken.body.errors[0].message).toMatch(/SyntaxError/);
    expect(broken.body.errors[0].message).toMatch(/index\.js:3/);

    const idle = await putCustomer(t, 'raw-ns', 'idle', 'export const x = 1;');
    expect(idle.status).toBe(400);
    expect(idle.body.errors[0].message).toMatch(/No event handlers were registered/);
    const list = await t.call(
      'GET',
      `/accounts/${t.accountId}/workers/dispatch/namespaces/raw-ns/scripts`,
    );
    expect(list.body.result.map((s: any) => s.id)).not.toContain('broken');
  });

  it('refuses names that break the pattern, unknown namespaces and bad tags', async () => {
    const nsBad = await t.call('POST', `/accounts/${t.accountId}/workers/dispatch/namespaces`, {
      name: 'Bad Name!',
    });
    expect(nsBad.status).toBe(400);
    expect(nsBad.body.errors[0].message).toMatch(/Namespace name/);
    const dup = await t.call('POST', `/accounts/${t.accountId}/workers/dispatch/namespaces`, {
      name: 'raw-ns',
    });
    expect(dup.status).toBe(409);
    const scriptBad = await putCustomer(t, 'raw-ns', 'UPPER', HELLO('x'));
    expect(scriptBad.status).toBe(400);
    expect(scriptBad.body.errors[0].message).toMatch(/Script name "UPPER" is invalid/);
    const noNs = await putCustomer(t, 'nope', 'fine', HELLO('x'));
    expect(noNs.status).toBe(404);
    const tagBad = await putCustomer(t, 'raw-ns', 'tagged', HELLO('x'), { tags: ['a,b'] });
    expect(tagBad.status).toBe(400);
  });
});

describe('secrets of a customer script', () => {
  it('sets, lists and deletes a secret through the official client; the script sees it', async () => {
    await createNamespace(t, 'secret-ns');
    const up = await putCustomer(
      t,
      'secret-ns',
      'secretive',
      `export default { fetch(request, env) { return new Response(String(env.API_KEY)); } };`,
    );
    expect(up.status).toBe(200);
    await deployScript(
      t,
      'secret-front',
      `export default { fetch(request, env) { return env.NS.get('secretive').fetch(request); } };`,
      { bindings: [{ type: 'dispatch_namespace', name: 'NS', namespace: 'secret-ns' }] },
    );
    const invoke = async () =>
      (
        await fetch(
          `${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/secret-front/invoke/`,
          {
            headers: { authorization: `Bearer ${t.token}` },
          },
        )
      ).text();
    expect(await invoke()).toBe('undefined');
    const scope = { account_id, dispatch_namespace: 'secret-ns' };
    const set = await cf.workersForPlatforms.dispatch.namespaces.scripts.secrets.update(
      'secretive',
      {
        ...scope,
        name: 'API_KEY',
        text: 's3cr3t',
        type: 'secret_text',
      },
    );
    expect(set).toMatchObject({ name: 'API_KEY', type: 'secret_text' });
    expect(await invoke()).toBe('s3cr3t');
    const names = [];
    for await (const s of cf.workersForPlatforms.dispatch.namespaces.scripts.secrets.list(
      'secretive',
      scope,
    ))
      names.push(s);
    expect(names).toEqual([{ name: 'API_KEY', type: 'secret_text' }]);
    await cf.workersForPlatforms.dispatch.namespaces.scripts.secrets.delete('API_KEY', {
      ...scope,
      script_name: 'secretive',
    });
    expect(await invoke()).toBe('undefined');
    await expect(
      cf.workersForPlatforms.dispatch.namespaces.scripts.secrets.get('API_KEY', {
        ...scope,
        script_name: 'secretive',
      }),
    ).rejects.toMatchObject({ status: 404 });
  });
});

describe('static asset upload protocol', () => {
  beforeAll(async () => {
    await createNamespace(t, 'assets-ns');
  });
  const session = (script: string, manifest: unknown) =>
    t.call(
      'POST',
      `/accounts/${t.accountId}/workers/dispatch/namespaces/assets-ns/scripts/${script}/assets-upload-session`,
      { manifest },
    );

  it('asks only for missing hashes and answers a completion token at once when nothing is missing', async () => {
    const first = await uploadAssets(t, 'assets-ns', 'site', { '/a.txt': 'A', '/b.txt': 'B' });
    expect(first.asked).toHaveLength(2);
    const second = await uploadAssets(t, 'assets-ns', 'site', { '/a.txt': 'A', '/c.txt': 'C' });
    expect(second.asked).toHaveLength(1);
    const none = await session('site', { '/a.txt': { hash: first.asked[0], size: 1 } });
    expect(none.body.result.buckets).toEqual([]);
    const deployed = await putCustomer(t, 'assets-ns', 'site', HELLO('site'), {
      assets: { jwt: none.body.result.jwt },
    });
    expect(deployed.status, JSON.stringify(deployed.body)).toBe(200);
    expect(deployed.body.result.has_assets).toBe(true);
  });

  it("takes an assets-only script with _redirects and _headers through the official client's bracket form", async () => {
    const up = await uploadAssets(t, 'assets-ns', 'static', { '/index.html': '<p>static</p>' });
    const script = await cf.workersForPlatforms.dispatch.namespaces.scripts.update('static', {
      account_id: t.accountId,
      dispatch_namespace: 'assets-ns',
      metadata: {
        assets: {
          jwt: up.jwt,
          config: {
            html_handling: 'auto-trailing-slash',
            not_found_handling: 'single-page-application',
            _redirects: '/old / 301\n',
            _headers: '/*\n  X-Static: 1\n',
          },
        },
      },
    });
    expect(script).toMatchObject({ id: 'static', has_assets: true, has_modules: false });
    const settings = await cf.workersForPlatforms.dispatch.namespaces.scripts.settings.get(
      'static',
      { account_id: t.accountId, dispatch_namespace: 'assets-ns' },
    );
    expect((settings as any).assets.config).toMatchObject({
      not_found_handling: 'single-page-application',
      _redirects: '/old / 301\n',
      _headers: '/*\n  X-Static: 1\n',
    });
    // The JSON form refuses what it cannot be: no metadata, code without its module, not JSON.
    const put = (body: string, type = 'application/javascript') =>
      fetch(
        `${t.api}/accounts/${t.accountId}/workers/dispatch/namespaces/assets-ns/scripts/static`,
        {
          method: 'PUT',
          headers: { authorization: `Bearer ${t.token}`, 'content-type': type },
          body,
        },
      );
    const noMeta = await put('{"assets": {}}');
    expect(noMeta.status).toBe(400);
    expect(((await noMeta.json()) as any).errors[0].message).toContain('{"metadata"');
    const noModule = await put('{"metadata": {"main_module": "main.js"}}');
    expect(noModule.status).toBe(400);
    expect(((await noModule.json()) as any).errors[0].message).toContain('main_module main.js');
    expect((await put('{"metadata": ')).status).toBe(400);
    expect((await put('export default {}')).status).toBe(415);
  });

  it('refuses bad manifests, foreign or expired tokens and a completion token for another script', async () => {
    const short = await session('site', { '/a.txt': { hash: 'abc123', size: 1 } });
    expect(short.status).toBe(400);
    expect(short.body.errors[0].message).toMatch(/32 lowercase hex/);
    expect((await session('site', { 'a.txt': { hash: 'a'.repeat(32), size: 1 } })).status).toBe(
      400,
    );
    expect((await session('site', {})).status).toBe(400);

    const s = await session('other', { '/x.txt': { hash: 'f'.repeat(32), size: 1 } });
    expect(s.status).toBe(200);
    const jwt: string = s.body.result.jwt;
    const up = (token: string, account = t.accountId) => {
      const form = new FormData();
      form.append('f'.repeat(32), new Blob([Buffer.from('X').toString('base64')]), 'f'.repeat(32));
      return fetch(`${t.api}/accounts/${account}/workers/assets/upload?base64=true`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}` },
        body: form,
      });
    };
    const [h, b, sig] = jwt.split('.');
    const forged = `${h}.${b}.${Buffer.from('not the signature').toString('base64url')}`;
    expect((await up(forged)).status).toBe(401);
    const claims = JSON.parse(Buffer.from(b, 'base64url').toString());
    const expired = `${h}.${Buffer.from(JSON.stringify({ ...claims, exp: 1 })).toString('base64url')}.${sig}`;
    expect((await up(expired)).status).toBe(401);
    expect((await up(jwt, 'e'.repeat(32))).status).toBe(401);
    expect((await up('')).status).toBe(401);
    // Content whose size is not the manifest's is refused.
    const wrongSize = new FormData();
    wrongSize.append(
      'f'.repeat(32),
      new Blob([Buffer.from('XY').toString('base64')]),
      'f'.repeat(32),
    );
    const sized = await fetch(
      `${t.api}/accounts/${t.accountId}/workers/assets/upload?base64=true`,
      {
        method: 'POST',
        headers: { authorization: `Bearer ${jwt}` },
        body: wrongSize,
      },
    );
    expect(sized.status).toBe(400);

    // A session token before its buckets are uploaded is not a completion token.
    const early = await putCustomer(t, 'assets-ns', 'other', HELLO('other'), { assets: { jwt } });
    expect(early.status).toBe(400);
    const done = await up(jwt);
    expect(done.status).toBe(201);
    const completion = ((await done.json()) as any).result.jwt;
    // The completion token of `other` does not match the manifest of `site`.
    const mismatch = await putCustomer(t, 'assets-ns', 'site', HELLO('site'), {
      assets: { jwt: completion },
    });
    expect(mismatch.status).toBe(400);
    expect(mismatch.body.errors[0].message).toMatch(/does not match/);
    const ok = await putCustomer(t, 'assets-ns', 'other', HELLO('other'), {
      assets: { jwt: completion },
    });
    expect(ok.status).toBe(200);
  });
});
