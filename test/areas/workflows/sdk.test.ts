/**
 * The official `cloudflare` client against Outpost: `workers.scripts.update` (bracket-form
 * multipart, boundary sniffed), `workflows.update/get/list/delete`, `workflows.instances.create/
 * get/list/bulk`, `instances.status.edit`, `instances.events.create`, `workflows.versions.list`,
 * paging with `for await`, and typed errors.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cloudflare, sdk } from '../../support/sdk.ts';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { startCounter, until, type Counter } from './helpers.ts';

const SOURCE = `
import { WorkflowEntrypoint } from 'cloudflare:workers';
export class Approval extends WorkflowEntrypoint {
  async run(event, step) {
    const ticket = await step.do('open', async () => ({ ticket: event.payload.who + '-1' }));
    const ev = await step.waitForEvent('decision', { type: 'decision', timeout: '1 hour' });
    return ev.payload.approved ? 'approved ' + ticket.ticket : 'rejected';
  }
}
export default { async fetch() { return new Response('ok'); } };
`;

let t: TestServer;
let cf: Cloudflare;
let counter: Counter;

beforeAll(async () => {
  counter = await startCounter();
  t = await startTestServer({ workflowsPollMs: 20 });
  cf = sdk(t);
}, 60_000);

afterAll(async () => {
  await t?.stop();
  await counter?.close();
});

describe('official client', () => {
  it('uploads a script with a workflow binding (bracket form) and registers the workflow', async () => {
    const script = await cf.workers.scripts.update('sdk-wf', {
      account_id: t.accountId,
      metadata: {
        main_module: 'main.js',
        compatibility_date: '2025-01-01',
        bindings: [
          { type: 'workflow', name: 'APPROVAL', workflow_name: 'approval', class_name: 'Approval' },
        ],
      },
      files: [new File([SOURCE], 'main.js', { type: 'application/javascript+module' })],
    });
    expect(script.id).toBe('sdk-wf');
    // The binding with class_name registered the workflow already.
    const auto = await cf.workflows.get('approval', { account_id: t.accountId });
    expect(auto).toMatchObject({ name: 'approval', class_name: 'Approval', script_name: 'sdk-wf' });
    const wf = await cf.workflows.update('approval', {
      account_id: t.accountId,
      class_name: 'Approval',
      script_name: 'sdk-wf',
      limits: { steps: 100 },
    });
    expect(wf.version_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(wf.id).toBe(auto.id);
  });

  it('runs an instance to completion through instances.* and events.create', async () => {
    const made = await cf.workflows.instances.create('approval', {
      account_id: t.accountId,
      instance_id: 'ticket-1',
      params: JSON.stringify({ who: 'ada' }),
    });
    expect(made).toMatchObject({ id: 'ticket-1', trigger_source: 'api' });
    await until('waiting', async () =>
      (
        await cf.workflows.instances.get('ticket-1', {
          account_id: t.accountId,
          workflow_name: 'approval',
        })
      ).status === 'waiting'
        ? true
        : undefined,
    );
    const sent = await cf.workflows.instances.events.create('decision', {
      account_id: t.accountId,
      workflow_name: 'approval',
      instance_id: 'ticket-1',
      body: { approved: true },
    });
    expect(sent.instanceId).toBe('ticket-1');
    const done = await until('complete', async () => {
      const r = await cf.workflows.instances.get('ticket-1', {
        account_id: t.accountId,
        workflow_name: 'approval',
      });
      return r.status === 'complete' ? r : undefined;
    });
    expect(done.output).toBe('approved ada-1');
    expect(done.steps.map((s) => s.type)).toEqual(['step', 'waitForEvent']);
  });

  it('pauses, resumes and terminates with instances.status.edit', async () => {
    await cf.workflows.instances.create('approval', {
      account_id: t.accountId,
      instance_id: 'ticket-2',
      params: JSON.stringify({ who: 'bob' }),
    });
    await until('waiting', async () =>
      (
        await cf.workflows.instances.get('ticket-2', {
          account_id: t.accountId,
          workflow_name: 'approval',
        })
      ).status === 'waiting'
        ? true
        : undefined,
    );
    const p = { account_id: t.accountId, workflow_name: 'approval' };
    expect(
      (await cf.workflows.instances.status.edit('ticket-2', { ...p, status: 'pause' })).status,
    ).toBe('paused');
    expect(
      (await cf.workflows.instances.status.edit('ticket-2', { ...p, status: 'resume' })).status,
    ).toBe('waiting');
    expect(
      (await cf.workflows.instances.status.edit('ticket-2', { ...p, status: 'terminate' })).status,
    ).toBe('terminated');
    const err = await cf.workflows.instances.status
      .edit('ticket-2', { ...p, status: 'terminate' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Cloudflare.ConflictError);
    expect((err as InstanceType<typeof Cloudflare.APIError>).errors[0].message).toBe(
      '(instance.cannot_terminate) Cannot terminate instance since its on a finite state',
    );
  });

  it('creates in bulk, skipping existing ids, and pages the list with for await', async () => {
    const body = Array.from({ length: 7 }, (_, i) => ({
      instance_id: `bulk-${i}`,
      params: JSON.stringify({ who: `u${i}` }),
    }));
    const first = [];
    for await (const r of cf.workflows.instances.bulk('approval', {
      account_id: t.accountId,
      body,
    }))
      first.push(r.id);
    expect(first).toEqual(body.map((b) => b.instance_id));
    const again = [];
    for await (const r of cf.workflows.instances.bulk('approval', {
      account_id: t.accountId,
      body,
    }))
      again.push(r.id);
    expect(again).toEqual(first);
    const listed: string[] = [];
    for await (const r of cf.workflows.instances.list('approval', {
      account_id: t.accountId,
      per_page: 3,
    }))
      listed.push(r.id);
    expect(listed.filter((id) => id.startsWith('bulk-')).sort()).toEqual([...first].sort());
    expect(listed).toHaveLength(9);
  });

  it('lists workflows and versions, and deletes', async () => {
    const names = [];
    for await (const w of cf.workflows.list({ account_id: t.accountId })) names.push(w.name);
    expect(names).toEqual(['approval']);
    const versions = [];
    for await (const v of cf.workflows.versions.list('approval', { account_id: t.accountId }))
      versions.push(v);
    expect(versions.length).toBeGreaterThanOrEqual(2);
    expect(await cf.workflows.delete('approval', { account_id: t.accountId })).toEqual({
      status: 'ok',
      success: true,
    });
    const err = await cf.workflows
      .get('approval', { account_id: t.accountId })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Cloudflare.NotFoundError);
    expect((err as InstanceType<typeof Cloudflare.APIError>).errors[0]).toEqual({
      code: 10201,
      message: '(workflow.not_found) Workflow approval not found',
    });
  });
});
