/**
 * `PATCH …/dispatch/namespaces/{ns}/scripts/{s}/settings`: through the official client (its
 * `settings[...]` bracket form), with the platform tools' multipart `settings` JSON part, and as
 * JSON; binding and compatibility changes reach the running script, the code stays, secrets stay,
 * and bad input is refused without touching what runs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';
import { deployScript } from '../workers/helpers.ts';
import { createNamespace, putCustomer } from './helpers.ts';

let t: TestServer;
let cf: Cloudflare;
const NS = 'settings-ns';
const CUSTOMER = `export default {
  fetch(request, env) {
    return new Response(JSON.stringify({ greeting: env.GREETING ?? null, key: env.API_KEY ?? null }));
  },
};`;

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
  await createNamespace(t, NS);
  const up = await putCustomer(t, NS, 'cust', CUSTOMER, {
    bindings: [{ type: 'plain_text', name: 'GREETING', text: 'hi' }],
    tags: ['a'],
  });
  if (up.status !== 200) throw new Error(JSON.stringify(up.body));
  const secret = await t.call(
    'PUT',
    `/accounts/${t.accountId}/workers/dispatch/namespaces/${NS}/scripts/cust/secrets`,
    { name: 'API_KEY', text: 'k1' },
  );
  if (secret.status !== 200) throw new Error(secret.text);
  await deployScript(
    t,
    'settings-front',
    `export default { fetch(request, env) { return env.NS.get('cust').fetch(request); } };`,
    { bindings: [{ type: 'dispatch_namespace', name: 'NS', namespace: NS }] },
  );
}, 60_000);

afterAll(async () => {
  await t?.stop();
});

const path = (s = 'cust') =>
  `${t.api}/accounts/${t.accountId}/workers/dispatch/namespaces/${NS}/scripts/${s}/settings`;

async function invoke(): Promise<{ greeting: string | null; key: string | null }> {
  const res = await fetch(
    `${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/settings-front/invoke/`,
    { headers: { authorization: `Bearer ${t.token}` } },
  );
  return (await res.json()) as any;
}

async function patchForm(settings: string, name = 'cust') {
  const form = new FormData();
  form.append('settings', new Blob([settings], { type: 'application/json' }), 'blob');
  const res = await fetch(path(name), {
    method: 'PATCH',
    headers: { authorization: `Bearer ${t.token}` },
    body: form,
  });
  return { status: res.status, body: (await res.json()) as any };
}

describe('PATCH settings of a customer script', () => {
  it('changes settings and bindings through the official client; the code and secrets stay', async () => {
    const scope = { account_id: t.accountId, dispatch_namespace: NS };
    expect(await invoke()).toEqual({ greeting: 'hi', key: 'k1' });
    const out = await cf.workersForPlatforms.dispatch.namespaces.scripts.settings.edit('cust', {
      ...scope,
      settings: {
        logpush: true,
        tags: ['b', 'c'],
        bindings: [{ type: 'plain_text', name: 'GREETING', text: 'hello' }],
      },
    });
    expect(out.logpush).toBe(true);
    expect(out.tags).toEqual(['b', 'c']);
    expect(out.bindings).toEqual([
      { type: 'plain_text', name: 'GREETING', text: 'hello' },
      { type: 'secret_text', name: 'API_KEY' },
    ]);
    expect(await invoke()).toEqual({ greeting: 'hello', key: 'k1' });
    const got = await cf.workersForPlatforms.dispatch.namespaces.scripts.settings.get(
      'cust',
      scope,
    );
    expect(got).toMatchObject({
      logpush: true,
      tags: ['b', 'c'],
      compatibility_date: '2025-01-01',
    });
    // Tags set through settings are the script's tags: the tag filter sees them.
    const listed = await t.call(
      'GET',
      `/accounts/${t.accountId}/workers/dispatch/namespaces/${NS}/scripts?tags=c:yes`,
    );
    expect(listed.body.result.map((s: { id: string }) => s.id)).toEqual(['cust']);
  });

  it('takes the multipart settings part and JSON; settings without bindings keep the bindings', async () => {
    const form = await patchForm(
      JSON.stringify({ observability: { enabled: true }, compatibility_date: '2025-02-01' }),
    );
    expect(form.status).toBe(200);
    expect(form.body.result).toMatchObject({
      observability: { enabled: true },
      compatibility_date: '2025-02-01',
      logpush: true,
    });
    expect(await invoke()).toEqual({ greeting: 'hello', key: 'k1' });
    const json = await t.call('PATCH', path().slice(t.api.length), {
      settings: { logpush: false, tags: null },
    });
    expect(json.status).toBe(200);
    expect(json.body.result).toMatchObject({ logpush: false, tags: [] });
    // A read-modify-write round trip is accepted.
    const got = await t.call('GET', path().slice(t.api.length));
    const { bindings: _b, ...rest } = got.body.result;
    const back = await t.call('PATCH', path().slice(t.api.length), rest);
    expect(back.status).toBe(200);
    expect(await invoke()).toEqual({ greeting: 'hello', key: 'k1' });
  });

  it('refuses bad input with 400 naming the field, unknown scripts with 404, and keeps what runs', async () => {
    const cases: [string, RegExp][] = [
      ['{"logpush": "yes"}', /settings\.logpush/],
      ['{"compatibility_date": "soon"}', /settings\.compatibility_date: expected YYYY-MM-DD/],
      ['{"tags": ["has space"]}', /tags\.0/],
      ['{"bindings": [{"type": "plain_text"}]}', /settings\.bindings\.0\.name/],
      ['{"bindings": [{"type": "nonsense", "name": "X"}]}', /bindings\.0/],
      ['{"bindings": [{"type": "assets", "name": "ASSETS"}]}', /assets binding needs assets/],
      ['{"colour": "blue"}', /colour/],
      ['[1]', /settings: must be a JSON object/],
      ['{not json', /settings: not valid JSON/],
    ];
    for (const [body, message] of cases) {
      const res = await patchForm(body);
      expect(res.status, body).toBe(400);
      expect(res.body.success).toBe(false);
      expect(res.body.errors[0].message, body).toMatch(message);
    }
    const broken = await fetch(path(), {
      method: 'PATCH',
      headers: { authorization: `Bearer ${t.token}`, 'content-type': 'application/json' },
      body: '{oops',
    });
    expect(broken.status).toBe(400);
    expect(((await broken.json()) as any).success).toBe(false);
    const missing = await patchForm('{"logpush": true}', 'nobody');
    expect(missing.status).toBe(404);
    expect(await invoke()).toEqual({ greeting: 'hello', key: 'k1' });
  });
});
