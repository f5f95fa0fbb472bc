/**
 * `wrangler deploy --dispatch-namespace` (npm `wrangler@4`, a child process) against a live server
 * with only CLOUDFLARE_API_BASE_URL, CLOUDFLARE_API_TOKEN and CLOUDFLARE_ACCOUNT_ID set: the
 * customer script lands in the namespace with its vars and static assets, and a dispatcher
 * reaches both.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { deployScript } from '../workers/helpers.ts';
import { createNamespace } from './helpers.ts';
import { runWrangler, type WranglerRun } from '../../support/wrangler.ts';

let t: TestServer;
let work: string;

function wrangler(cwd: string, args: string[]): Promise<WranglerRun> {
  return runWrangler(t, join(work, 'home'), cwd, args);
}

beforeAll(async () => {
  t = await startTestServer();
  work = mkdtempSync(join(tmpdir(), 'outpost-wfp-wrangler-'));
  mkdirSync(join(work, 'home'));
  mkdirSync(join(work, 'customer', 'src'), { recursive: true });
  writeFileSync(
    join(work, 'customer', 'src', 'index.js'),
    `export default { async fetch(request, env) { return new Response('customer says ' + env.PLAN); } };\n`,
  );
  writeFileSync(
    join(work, 'customer', 'wrangler.toml'),
    `name = "wrangled"
main = "src/index.js"
compatibility_date = "2025-01-01"
[vars]
PLAN = "pro"
[assets]
directory = "./public"
binding = "ASSETS"
`,
  );
  mkdirSync(join(work, 'customer', 'public'), { recursive: true });
  writeFileSync(join(work, 'customer', 'public', 'index.html'), '<h1>wrangled home</h1>');
  writeFileSync(join(work, 'customer', 'public', 'app.js'), 'console.log(1);');
  // An assets-only project (no main) whose _redirects and _headers files ride in the metadata.
  mkdirSync(join(work, 'site', 'public'), { recursive: true });
  writeFileSync(
    join(work, 'site', 'wrangler.toml'),
    `name = "static-site"
compatibility_date = "2025-01-01"
[assets]
directory = "./public"
not_found_handling = "404-page"
`,
  );
  writeFileSync(join(work, 'site', 'public', 'index.html'), '<h1>static home</h1>');
  writeFileSync(join(work, 'site', 'public', '404.html'), '<h1>static 404</h1>');
  writeFileSync(join(work, 'site', 'public', '_redirects'), '/blog/* /posts/:splat 301\n');
  writeFileSync(join(work, 'site', 'public', '_headers'), '/*\n  X-Static: yes\n');
  await createNamespace(t, 'tenants');
  await deployScript(
    t,
    'front-site',
    `export default { fetch(request, env) { return env.NS.get('static-site').fetch(request); } };`,
    { bindings: [{ type: 'dispatch_namespace', name: 'NS', namespace: 'tenants' }] },
  );
  await deployScript(
    t,
    'front',
    `export default { fetch(request, env) { return env.NS.get('wrangled').fetch(request); } };`,
    { bindings: [{ type: 'dispatch_namespace', name: 'NS', namespace: 'tenants' }] },
  );
}, 60_000);

afterAll(async () => {
  await t?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('wrangler deploy --dispatch-namespace', () => {
  it('uploads the script and its assets into the namespace, where a dispatcher reaches them', async () => {
    const r = await wrangler(join(work, 'customer'), ['deploy', '--dispatch-namespace', 'tenants']);
    expect(r.code, r.out).toBe(0);
    expect(r.out).toContain('Dispatch Namespace: tenants');
    const got = await t.call(
      'GET',
      `/accounts/${t.accountId}/workers/dispatch/namespaces/tenants/scripts/wrangled`,
    );
    expect(got.status).toBe(200);
    expect(got.body.result.script.id).toBe('wrangled');
    const res = await fetch(
      `${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/front/invoke/hello`,
      { headers: { authorization: `Bearer ${t.token}` } },
    );
    expect(await res.text()).toBe('customer says pro');
    // The static assets went through the upload session and the bucket upload; the customer's
    // script runs only where no asset matches.
    const asset = await fetch(
      `${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/front/invoke/app.js`,
      {
        headers: { authorization: `Bearer ${t.token}` },
      },
    );
    expect(asset.headers.get('content-type')).toBe('application/javascript');
    const home = await fetch(
      `${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/front/invoke/`,
      {
        headers: { authorization: `Bearer ${t.token}` },
      },
    );
    expect(await home.text()).toBe('<h1>wrangled home</h1>');
    expect(await asset.text()).toBe('console.log(1);');
  });

  it('deploys an assets-only project with its _redirects and _headers files', async () => {
    const r = await wrangler(join(work, 'site'), ['deploy', '--dispatch-namespace', 'tenants']);
    expect(r.code, r.out).toBe(0);
    const got = await t.call(
      'GET',
      `/accounts/${t.accountId}/workers/dispatch/namespaces/tenants/scripts/static-site`,
    );
    expect(got.body.result.script).toMatchObject({ has_assets: true, has_modules: false });
    const base = `${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/front-site/invoke`;
    const auth = { authorization: `Bearer ${t.token}` };
    const home = await fetch(`${base}/`, { headers: auth });
    expect(await home.text()).toBe('<h1>static home</h1>');
    expect(home.headers.get('x-static')).toBe('yes');
    const moved = await fetch(`${base}/blog/hello`, { headers: auth, redirect: 'manual' });
    expect(moved.status).toBe(301);
    expect(moved.headers.get('location')).toBe('/posts/hello');
    const missing = await fetch(`${base}/nowhere`, { headers: auth });
    expect(missing.status).toBe(404);
    expect(await missing.text()).toBe('<h1>static 404</h1>');
    // The rule files are configuration, not assets.
    expect((await fetch(`${base}/_redirects`, { headers: auth })).status).toBe(404);
  });
});
