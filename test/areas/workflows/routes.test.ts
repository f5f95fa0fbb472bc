/**
 * The REST surface of scripts and workflows: uploads and their errors, definitions (list paging,
 * counts, versions, delete), instance views in both the spec's and the official forms, bodies
 * checked against the official response schemas, validation errors, and permissions.
 */
import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';
import { SCRIPT, WORKFLOWS } from './fixture.ts';
import {
  create,
  deployWorkflow,
  sleep,
  startCounter,
  uploadScript,
  waitStatus,
  type Counter,
} from './helpers.ts';

const CONTRACT = '/work/shared/contract/openapi-subset.json';
const doc = JSON.parse(readFileSync(CONTRACT, 'utf8'));

function prefixRefs(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(prefixRefs);
  if (!node || typeof node !== 'object') return node;
  return Object.fromEntries(
    Object.entries(node).map(([k, v]) => [
      k,
      k === '$ref' && typeof v === 'string' && v.startsWith('#/') ? `contract${v}` : prefixRefs(v),
    ]),
  );
}

function expectValid(operationId: string, body: unknown) {
  const ajv = new Ajv({ strict: false, allErrors: true });
  ajv.addFormat('date-time', (s: string) => !Number.isNaN(Date.parse(s)) && /T/.test(s));
  ajv.addFormat('uuid', /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  ajv.addSchema(doc, 'contract');
  for (const methods of Object.values<Record<string, any>>(doc.paths)) {
    for (const op of Object.values<any>(methods)) {
      if (op?.operationId !== operationId) continue;
      const validate = ajv.compile(
        prefixRefs(op.responses['200'].content['application/json'].schema) as object,
      );
      validate(body);
      expect(validate.errors ?? [], `${operationId}: ${JSON.stringify(validate.errors)}`).toEqual(
        [],
      );
      return;
    }
  }
  throw new Error(`${operationId} is not in the contract`);
}

const SCRIPT_NAME = 'routes-wf';
let t: TestServer;
let counter: Counter;
const wf = () => `/accounts/${t.accountId}/workflows`;

beforeAll(async () => {
  counter = await startCounter();
  t = await startTestServer({ workflowsPollMs: 20 });
  await deployWorkflow(t, SCRIPT_NAME, SCRIPT, WORKFLOWS);
}, 60_000);

afterAll(async () => {
  await t?.stop();
  await counter?.close();
});

describe('script uploads', () => {
  it('stores a module script, lists it, serves its source and deletes it', async () => {
    const source =
      "export default { async fetch() { return new Response('hello from a script'); } };\n";
    const up = await uploadScript(t, 'plain-script', source);
    expect(up.status).toBe(200);
    expect(up.body.result).toMatchObject({
      id: 'plain-script',
      handlers: ['fetch'],
      has_modules: true,
      compatibility_date: '2025-01-01',
    });
    expect(up.body.result.etag).toMatch(/^[0-9a-f]{64}$/);
    const list = await t.call('GET', `/accounts/${t.accountId}/workers/scripts`);
    expect(list.body.result.map((s: { id: string }) => s.id)).toEqual(
      expect.arrayContaining(['plain-script', SCRIPT_NAME]),
    );
    const src = await fetch(`${t.api}/accounts/${t.accountId}/workers/scripts/plain-script`, {
      headers: { authorization: `Bearer ${t.token}` },
    });
    expect(await src.text()).toBe(source);
    const run = await fetch(
      `${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/plain-script/invoke/anything?q=1`,
      { headers: { authorization: `Bearer ${t.token}` } },
    );
    expect(await run.text()).toBe('hello from a script');
    expect(
      (await t.call('DELETE', `/accounts/${t.accountId}/workers/scripts/plain-script`)).body.result,
    ).toEqual({ id: 'plain-script' });
    const gone = await t.call('GET', `/accounts/${t.accountId}/workers/scripts/plain-script`);
    expect(gone.status).toBe(404);
    expect(gone.body.errors[0].code).toBe(10007);
  });

  it('refuses scripts that do not load, with the runtime message', async () => {
    const syntax = await uploadScript(t, 'broken-script', 'export default { fetch( { }');
    expect(syntax.status).toBe(400);
    expect(syntax.body.errors[0].message).toMatch(/^Uncaught error while loading the script: /);
    expect(
      (await t.call('GET', `/accounts/${t.accountId}/workers/scripts/broken-script`)).status,
    ).toBe(404);
  });

  it('validates metadata, modules, names and bindings', async () => {
    const cases: [string, string, object, RegExp][] = [
      ['Bad_Name', 'index.js', {}, /Script name "Bad_Name" is invalid/],
      [
        'ok-name',
        'other.js',
        {},
        /main_module index\.js is not among the uploaded parts \(other\.js\)/,
      ],
      [
        'ok-name',
        'index.js',
        { bindings: [{ type: 'd1', name: 'DB', id: 'x' }] },
        /d1 bindings are not supported/,
      ],
      [
        'ok-name',
        'index.js',
        { bindings: [{ type: 'workflow', name: 'W' }] },
        /bindings\.0\.workflow_name is required/,
      ],
      [
        'ok-name',
        'index.js',
        { bindings: [{ type: 'plain_text', name: 'not valid', text: 'x' }] },
        /not a valid JavaScript identifier/,
      ],
      [
        'ok-name',
        'index.js',
        { body_part: 'script' },
        /Service-worker scripts \(body_part\) are not supported/,
      ],
    ];
    for (const [name, part, extra, message] of cases) {
      const form = new FormData();
      const meta = { main_module: 'index.js', ...extra } as Record<string, unknown>;
      if ('body_part' in extra) delete meta.main_module;
      form.append('metadata', new Blob([JSON.stringify(meta)], { type: 'application/json' }));
      form.append(
        part,
        new Blob(['export default {}'], { type: 'application/javascript+module' }),
        part,
      );
      const res = await fetch(`${t.api}/accounts/${t.accountId}/workers/scripts/${name}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${t.token}` },
        body: form,
      });
      const body = (await res.json()) as any;
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(body.errors[0].message).toMatch(message);
    }
  });

  it('replaces cron triggers of a script and validates them', async () => {
    const path = `/accounts/${t.accountId}/workers/scripts/${SCRIPT_NAME}/schedules`;
    const put = await t.call('PUT', path, [{ cron: '*/5 * * * *' }, { cron: '0 12 * * MON-FRI' }]);
    expect(put.status).toBe(200);
    expect(put.body.result.schedules.map((s: { cron: string }) => s.cron)).toEqual([
      '*/5 * * * *',
      '0 12 * * MON-FRI',
    ]);
    expect((await t.call('GET', path)).body.result.schedules).toHaveLength(2);
    const bad = await t.call('PUT', path, [{ cron: '61 * * * *' }]);
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0].message).toBe('0.cron: minute: 61 is outside 0-59');
    expect((await t.call('PUT', path, [])).body.result.schedules).toEqual([]);
  });
});

describe('workflow definitions', () => {
  it('answers PUT, GET and list in the official shapes, pages the list and counts instances', async () => {
    const put = await t.call('PUT', `${wf()}/gated`, {
      class_name: 'Gated',
      script_name: SCRIPT_NAME,
    });
    expect(put.status).toBe(200);
    expectValid('wor-create-or-modify-workflow', put.body);
    const id = (await create(t, 'gated', { params: { counter: counter.url } })).id;
    await waitStatus(t, 'gated', id, 'complete');
    const got = await t.call('GET', `${wf()}/gated`);
    expectValid('wor-get-workflow-details', got.body);
    expect(got.body.result).toMatchObject({
      name: 'gated',
      class_name: 'Gated',
      script_name: SCRIPT_NAME,
    });
    expect(got.body.result.instances.complete).toBeGreaterThanOrEqual(1);
    expect(typeof got.body.result.triggered_on).toBe('string');

    const names: string[] = [];
    for (let page = 1; ; page++) {
      const res = await t.call('GET', `${wf()}?per_page=4&page=${page}`);
      expectValid('wor-list-workflows', res.body);
      if (res.body.result.length === 0) break;
      expect(res.body.result_info).toMatchObject({
        page,
        per_page: 4,
        total_count: Object.keys(WORKFLOWS).length,
      });
      names.push(...res.body.result.map((w: { name: string }) => w.name));
    }
    expect(names.sort()).toEqual(Object.keys(WORKFLOWS).sort());
    const search = await t.call('GET', `${wf()}?search=wait`);
    expect(search.body.result.map((w: { name: string }) => w.name)).toEqual(['waiter']);
  });

  it('keeps versions, one per change', async () => {
    await t.call('PUT', `${wf()}/versioned`, { class_name: 'Gated', script_name: SCRIPT_NAME });
    await t.call('PUT', `${wf()}/versioned`, { class_name: 'Gated', script_name: SCRIPT_NAME });
    const changed = await t.call('PUT', `${wf()}/versioned`, {
      class_name: 'Sleeper',
      script_name: SCRIPT_NAME,
      limits: { steps: 10 },
    });
    const versions = await t.call('GET', `${wf()}/versioned/versions`);
    expect(versions.body.result).toHaveLength(2);
    expect(versions.body.result[0]).toMatchObject({
      id: changed.body.result.version_id,
      class_name: 'Sleeper',
      limits: { steps: 10 },
    });
    const one = await t.call('GET', `${wf()}/versioned/versions/${changed.body.result.version_id}`);
    expect(one.body.result.class_name).toBe('Sleeper');
  });

  it('refuses bad definitions', async () => {
    const noScript = await t.call('PUT', `${wf()}/orphan`, {
      class_name: 'X',
      script_name: 'no-such-script',
    });
    expect(noScript.status).toBe(400);
    expect(noScript.body.errors[0].message).toBe(
      'Script no-such-script does not exist on this account; upload it first',
    );
    const badName = await t.call('PUT', `${wf()}/bad%20name`, {
      class_name: 'X',
      script_name: SCRIPT_NAME,
    });
    expect(badName.status).toBe(400);
    const noClass = await t.call('PUT', `${wf()}/fine`, { script_name: SCRIPT_NAME });
    expect(noClass.status).toBe(400);
    expect(noClass.body.errors[0].message).toMatch(/^class_name: /);
    const badCron = await t.call('PUT', `${wf()}/fine`, {
      class_name: 'X',
      script_name: SCRIPT_NAME,
      schedules: [{ cron: 'every minute' }],
    });
    expect(badCron.status).toBe(400);
    const missing = await t.call('GET', `${wf()}/nope`);
    expect(missing.status).toBe(404);
    expect(missing.body.errors[0].message).toBe('(workflow.not_found) Workflow nope not found');
  });

  it('a workflow class that the script does not export errors its instances', async () => {
    await t.call('PUT', `${wf()}/ghost`, { class_name: 'NoSuchClass', script_name: SCRIPT_NAME });
    const id = (await create(t, 'ghost')).id;
    const r = await waitStatus(t, 'ghost', id, 'errored');
    expect(r.error).toEqual({
      name: 'Error',
      message: 'The script does not export a class named NoSuchClass',
    });
  });

  it('deletes a workflow with its instances', async () => {
    await t.call('PUT', `${wf()}/doomed`, { class_name: 'Gated', script_name: SCRIPT_NAME });
    const id = (await create(t, 'doomed', { params: { counter: counter.url, sleep: '1 hour' } }))
      .id;
    await waitStatus(t, 'doomed', id, 'waiting');
    const del = await t.call('DELETE', `${wf()}/doomed`);
    expect(del.body.result).toEqual({ status: 'ok', success: true });
    expectValid('wor-delete-workflow', del.body);
    expect((await t.call('GET', `${wf()}/doomed/instances/${id}`)).status).toBe(404);
    await t.call('PUT', `${wf()}/doomed`, { class_name: 'Gated', script_name: SCRIPT_NAME });
    expect((await t.call('GET', `${wf()}/doomed/instances/${id}`)).status).toBe(404);
  });
});

describe('instances', () => {
  it('creates in both body forms and answers the official shapes', async () => {
    const spec = await t.call('POST', `${wf()}/sleeper/instances`, {
      id: 'spec-form',
      params: { counter: counter.url, duration: 0 },
      retention: '1 day',
    });
    expect(spec.status).toBe(200);
    expectValid('wor-create-new-workflow-instance', spec.body);
    expect(spec.body.result).toMatchObject({ id: 'spec-form', trigger_source: 'api' });
    const real = await t.call('POST', `${wf()}/sleeper/instances`, {
      instance_id: 'real-form',
      params: JSON.stringify({ counter: counter.url, duration: 0 }),
    });
    expect(real.body.result.id).toBe('real-form');
    const generated = await t.call('POST', `${wf()}/sleeper/instances`, {
      params: { counter: counter.url, duration: 0 },
    });
    expect(generated.body.result.id).toMatch(/^[0-9a-f-]{36}$/);
    const empty = await t.call('POST', `${wf()}/gated/instances`);
    expect(empty.status).toBe(200);
    for (const id of ['spec-form', 'real-form']) await waitStatus(t, 'sleeper', id, 'complete');

    const details = await t.call('GET', `${wf()}/sleeper/instances/real-form`);
    expectValid('wor-describe-workflow-instance', details.body);
    expect(details.body.result).toMatchObject({
      status: 'complete',
      success: true,
      output: 'rested',
      params: { counter: counter.url, duration: 0 },
      trigger: { source: 'api' },
      step_count: 2,
    });
    expect(
      details.body.result.steps.map((s: { type: string; name: string }) => `${s.type}:${s.name}`),
    ).toEqual(['step:before', 'sleep:nap', 'step:after']);
    expect(details.body.result.steps[0].output).toBe('1');
    const desc = await t.call('GET', `${wf()}/sleeper/instances/real-form?order=desc`);
    expect(desc.body.result.steps[0].name).toBe('after');
    const simple = await t.call('GET', `${wf()}/sleeper/instances/real-form?simple=true`);
    expect(simple.body.result).toMatchObject({ steps: [], step_count: 2 });

    const status = await t.call('GET', `${wf()}/sleeper/instances/real-form/status`);
    expect(status.body.result).toEqual({ status: 'complete', output: 'rested' });
    const step = await t.call(
      'GET',
      `${wf()}/sleeper/instances/real-form/step?name=before&type=step`,
    );
    expect(step.body.result).toEqual({ status: 'complete', error: null, output: 1 });
  });

  it('lists with a status filter and pages until an empty page', async () => {
    await t.call('PUT', `${wf()}/listing`, { class_name: 'Gated', script_name: SCRIPT_NAME });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++)
      ids.push(
        (
          await create(t, 'listing', {
            id: `list-${i}`,
            params: { counter: counter.url, sleep: i < 2 ? '1 hour' : undefined },
          })
        ).id,
      );
    for (const [i, id] of ids.entries())
      await waitStatus(t, 'listing', id, i < 2 ? 'waiting' : 'complete');
    const seen: string[] = [];
    for (let page = 1; ; page++) {
      const res = await t.call('GET', `${wf()}/listing/instances?per_page=2&page=${page}`);
      expectValid('wor-list-workflow-instances', res.body);
      if (res.body.result.length === 0) break;
      expect(res.body.result_info).toMatchObject({
        page,
        per_page: 2,
        total_count: 5,
        total_pages: 3,
      });
      seen.push(...res.body.result.map((r: { id: string }) => r.id));
    }
    expect(seen).toEqual([...ids].reverse());
    const waiting = await t.call('GET', `${wf()}/listing/instances?status=waiting`);
    expect(waiting.body.result.map((r: { id: string }) => r.id).sort()).toEqual([
      'list-0',
      'list-1',
    ]);
    const asc = await t.call('GET', `${wf()}/listing/instances?direction=asc&per_page=1`);
    expect(asc.body.result[0].id).toBe('list-0');
    const badStatus = await t.call('GET', `${wf()}/listing/instances?status=sleeping`);
    expect(badStatus.status).toBe(400);
  });

  it('answers PATCH /status in the official shape and validates it', async () => {
    const id = (await create(t, 'gated', { params: { counter: counter.url, sleep: '1 hour' } })).id;
    await waitStatus(t, 'gated', id, 'waiting');
    const res = await t.call('PATCH', `${wf()}/gated/instances/${id}/status`, { status: 'pause' });
    expectValid('wor-change-status-workflow-instance', res.body);
    const bad = await t.call('PATCH', `${wf()}/gated/instances/${id}/status`, { status: 'stop' });
    expect(bad.status).toBe(400);
    const event = await t.call('POST', `${wf()}/gated/instances/${id}/events/ping`, { x: 1 });
    expectValid('wor-send-event-workflow-instance', event.body);
    const del = await t.call('DELETE', `${wf()}/gated/instances/${id}`);
    expectValid('wor-delete-workflow-instance', del.body);
    expect(del.body.result.instanceId).toBe(id);
    const after = await t.call('GET', `${wf()}/gated/instances/${id}`);
    expect(after.status).toBe(404);
    expect(after.body.errors[0].message).toBe('(instance.not_found) Instance not found');
    for (const [method, path] of [
      ['PATCH', '/status'],
      ['POST', '/events/x'],
      ['GET', '/status'],
    ] as const) {
      const r = await t.call(
        method,
        `${wf()}/gated/instances/${id}${path}`,
        method === 'GET' ? undefined : { status: 'pause' },
      );
      expect(r.status).toBe(404);
    }
  });

  it('checks event payload size and type', async () => {
    const id = (await create(t, 'waiter', {})).id;
    await waitStatus(t, 'waiter', id, 'waiting');
    const big = await t.call('POST', `${wf()}/waiter/instances/${id}/events/approved`, {
      blob: 'x'.repeat(1_100_000),
    });
    expect(big.status).toBe(413);
    const noType = await t.call('POST', `${wf()}/waiter/instances/${id}/events`, { payload: 1 });
    expect(noType.status).toBe(400);
    await t.call('PATCH', `${wf()}/waiter/instances/${id}/status`, { status: 'terminate' });
  });
});

describe('permissions', () => {
  it('needs Workers Scripts Read to look and Write to change', async () => {
    const reader = await createToken(t, ['Workers Scripts Read'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    const h = { authorization: `Bearer ${reader}` };
    expect((await t.call('GET', `${wf()}`, undefined, h)).status).toBe(200);
    const denied = await t.call('POST', `${wf()}/gated/instances`, {}, h);
    expect(denied.status).toBe(403);
    expect(
      (await t.call('PUT', `${wf()}/gated`, { class_name: 'Gated', script_name: SCRIPT_NAME }, h))
        .status,
    ).toBe(403);
    const none = await t.call('GET', `${wf()}`, undefined, { authorization: '' });
    expect(none.status).toBe(401);
    await sleep(10);
  });
});
