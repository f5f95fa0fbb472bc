/**
 * The real `wrangler` CLI (npm `wrangler@4`, run as a child process) against a live server with
 * only CLOUDFLARE_API_BASE_URL, CLOUDFLARE_API_TOKEN and CLOUDFLARE_ACCOUNT_ID set: kv namespace
 * create, deploy of a module Worker with a route, a KV binding, vars and a secret (first deploy
 * and a redeploy through versions), secret put/list, kv key put/get, deployments list, whoami, and
 * a Worker with a Workflow class on the workers.dev-style subdomain with workflows
 * list/trigger/instances list/describe. The deployed code answers through the edge and reaches a
 * real origin. Independent commands run side by side to keep the file short.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { echoHandler, startOrigin, type Origin } from '../../support/origins.ts';
import { edgeGet, edgeUrlOf } from './helpers.ts';
import { runWrangler, type WranglerRun } from '../../support/wrangler.ts';

const ORIGIN = '127.0.72.1';
let t: TestServer;
let origin: Origin;
let work: string;
let edge: URL;

function wrangler(cwd: string, args: string[], input?: string): Promise<WranglerRun> {
  return runWrangler(t, join(work, 'home'), cwd, args, input);
}

async function ok(cwd: string, args: string[], input?: string): Promise<string> {
  const r = await wrangler(cwd, args, input);
  if (r.code !== 0) throw new Error(`wrangler ${args.join(' ')} exited ${r.code}:\n${r.out}`);
  return r.out;
}

const APP = `export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname === '/app/origin') {
      const res = await fetch(request);
      const seen = await res.json();
      return Response.json({ via: 'worker', originSaw: seen.url });
    }
    return Response.json({
      name: env.APP_NAME,
      secret: env.API_KEY ?? null,
      greeting: await env.CACHE.get('greeting'),
    });
  },
};
`;

const WORKFLOW = `import { WorkflowEntrypoint } from 'cloudflare:workers';
export class Greeter extends WorkflowEntrypoint {
  async run(event, step) {
    const text = await step.do('greet', async () => 'hello ' + (event.payload?.who ?? 'nobody'));
    return { text };
  }
}
export default {
  async fetch(request, env) {
    const instance = await env.GREETER.create({ params: { who: 'edge' } });
    return Response.json({ id: instance.id });
  },
};
`;

beforeAll(async () => {
  t = await startTestServer({ workersDevSuffix: 'wr.workers.test' });
  edge = edgeUrlOf(t);
  origin = await startOrigin(ORIGIN, echoHandler);
  const zone = await createZone(t, 'wr.test');
  const rec = await t.call('POST', `/zones/${zone.id}/dns_records`, {
    type: 'A',
    name: 'www',
    content: ORIGIN,
    proxied: true,
    ttl: 1,
  });
  if (rec.status !== 200) throw new Error(rec.text);
  work = mkdtempSync(join(tmpdir(), 'outpost-wrangler-'));
  mkdirSync(join(work, 'home'));
  for (const [dir, source] of [
    ['app', APP],
    ['wf', WORKFLOW],
  ] as const) {
    mkdirSync(join(work, dir, 'src'), { recursive: true });
    writeFileSync(join(work, dir, 'src', 'index.js'), source);
  }
}, 60_000);

afterAll(async () => {
  await origin?.close();
  await t?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('wrangler against Outpost', () => {
  it('deploys a module Worker with a route, KV, vars and a secret that answers through the edge', async () => {
    const app = join(work, 'app');
    const created = await ok(app, ['kv', 'namespace', 'create', 'cache']);
    const id = /id = "([0-9a-f]{32})"|"id": "([0-9a-f]{32})"/.exec(created);
    expect(id, created).not.toBeNull();
    const nsId = id![1] ?? id![2];
    writeFileSync(
      join(app, 'wrangler.toml'),
      `name = "edge-app"
main = "src/index.js"
compatibility_date = "2025-01-01"
routes = [ { pattern = "www.wr.test/app/*", zone_name = "wr.test" } ]
[vars]
APP_NAME = "from-vars"
[[kv_namespaces]]
binding = "CACHE"
id = "${nsId}"
`,
    );
    const first = await ok(app, ['deploy']);
    expect(first).toContain('www.wr.test/app/*');
    // Secret and a key side by side.
    const [secret, put] = await Promise.all([
      ok(app, ['secret', 'put', 'API_KEY'], 's3cr3t\n'),
      ok(app, [
        'kv',
        'key',
        'put',
        '--namespace-id',
        nsId,
        'greeting',
        'hello from wrangler',
        '--remote',
      ]),
    ]);
    expect(secret).toContain('Success');
    expect(put).toContain('greeting');
    // A redeploy goes through versions and deployments; the secret stays.
    const second = await ok(app, ['deploy']);
    expect(second).toMatch(/Current Version ID: [0-9a-f-]{36}/);

    const res = await edgeGet(edge, 'www.wr.test', '/app/info');
    expect(res.status, res.body).toBe(200);
    expect(JSON.parse(res.body)).toEqual({
      name: 'from-vars',
      secret: 's3cr3t',
      greeting: 'hello from wrangler',
    });
    const viaOrigin = await edgeGet(edge, 'www.wr.test', '/app/origin?q=1');
    expect(JSON.parse(viaOrigin.body)).toEqual({ via: 'worker', originSaw: '/app/origin?q=1' });
    // Outside the route the origin answers alone.
    expect((await edgeGet(edge, 'www.wr.test', '/other')).headers['x-origin']).toBe('echo');

    const [secrets, got, deployments, whoami] = await Promise.all([
      ok(app, ['secret', 'list', '--format', 'json']),
      ok(app, ['kv', 'key', 'get', '--namespace-id', nsId, 'greeting', '--remote']),
      ok(app, ['deployments', 'list']),
      ok(app, ['whoami']),
    ]);
    expect(secrets).toContain('"name": "API_KEY"');
    expect(secrets).not.toContain('s3cr3t');
    expect(got).toContain('hello from wrangler');
    expect(deployments.match(/\(100%\) [0-9a-f-]{36}/g)?.length).toBeGreaterThanOrEqual(2);
    expect(whoami).toContain(t.accountId);
  }, 420_000);

  it('deploys a Worker with a Workflow class on the subdomain and drives it with workflows commands', async () => {
    const wf = join(work, 'wf');
    const sub = await t.call('PUT', `/accounts/${t.accountId}/workers/subdomain`, {
      subdomain: 'team',
    });
    expect(sub.status).toBe(200);
    writeFileSync(
      join(wf, 'wrangler.toml'),
      `name = "greeter-app"
main = "src/index.js"
compatibility_date = "2025-01-01"
workers_dev = true
[[workflows]]
name = "greeter"
binding = "GREETER"
class_name = "Greeter"
`,
    );
    const deployed = await ok(wf, ['deploy']);
    expect(deployed).toContain('greeter-app.team');
    const res = await edgeGet(edge, 'greeter-app.team.wr.workers.test', '/');
    expect(res.status, res.body).toBe(200);
    expect(JSON.parse(res.body).id).toMatch(/[0-9a-f-]{36}/);

    const [list, trigger] = await Promise.all([
      ok(wf, ['workflows', 'list']),
      ok(wf, ['workflows', 'trigger', 'greeter', '{"who":"cli"}']),
    ]);
    expect(list).toContain('greeter');
    expect(list).toContain('Greeter');
    const triggered = /instance "([0-9a-f-]{36})"/.exec(trigger);
    expect(triggered, trigger).not.toBeNull();
    // Wait for the instance through the API, then let wrangler describe it.
    for (let i = 0; i < 40; i++) {
      const st = await t.call(
        'GET',
        `/accounts/${t.accountId}/workflows/greeter/instances/${triggered![1]}`,
      );
      if (st.body?.result?.status === 'complete') break;
      await new Promise((r) => setTimeout(r, 250));
    }
    const [described, instances] = await Promise.all([
      ok(wf, ['workflows', 'instances', 'describe', 'greeter', 'latest']),
      ok(wf, ['workflows', 'instances', 'list', 'greeter']),
    ]);
    expect(instances).toContain(triggered![1]);
    expect(described).toContain(triggered![1]);
    expect(described).toContain('Completed');
    expect(described).toContain('hello cli');
  }, 420_000);
});
