/**
 * REST handlers: workflow definitions (`/accounts/{account_id}/workflows[/{workflow_name}]`,
 * versions) and instances (`…/instances`), in the spec's and the official client's forms over the
 * same engine.
 */
import { sql } from 'kysely';
import type { AreaContext } from '../../core/area.ts';
import { accounts, GLOBAL_SCOPE } from '../../core/accounts.ts';
import { apiError } from '../../core/errors.ts';
import { assertJsonDepth } from '../../core/json.ts';
import { uuid } from '../../core/ids.ts';
import { pageFrom, pageOf } from '../../core/pagination.ts';
import {
  CronError,
  parseCron,
  workerScripts,
  WORKERS_PERMISSION,
  type RetentionInput,
} from '../workers/index.ts';
import { parseDuration } from './duration.ts';
import { fromPlain } from './encoding.ts';
import { type CreateItem, type WorkflowEngine } from './engine.ts';
import {
  BatchBody,
  CreateInstanceBody,
  EventPayloadBody,
  InstanceGetQuery,
  ListInstancesQuery,
  ListWorkflowsQuery,
  PutWorkflowBody,
  SpecEventBody,
  StatusBody,
  StepQuery,
  WORKFLOW_NAME,
  type CreateInstanceItem,
} from './schemas.ts';
import {
  stepsOf,
  workflowDefs,
  type Status,
  type StoredWorkflow,
  type WorkflowVersion,
} from './store.ts';
import {
  createdView,
  detailsView,
  listItemView,
  putWorkflowView,
  statusView,
  stepStatusView,
  versionView,
  workflowView,
} from './views.ts';

const read = { permission: WORKERS_PERMISSION, level: 'read' } as const;
const edit = { permission: WORKERS_PERMISSION, level: 'edit' } as const;
const tags = ['workflows'];
const WF = '/accounts/:account_id/workflows';
const INST = `${WF}/:workflow_name/instances`;
const params = {
  workflow_name: 'any',
  instance_id: 'any',
  event_type: 'any',
  version_id: 'any',
} as const;

/** The `params` of a REST create: a JSON value, or (official client) JSON text of one. */
function restParams(v: unknown): unknown {
  if (typeof v === 'string') {
    assertJsonDepth(v, 'params');
    try {
      return JSON.parse(v) as unknown;
    } catch {
      return v;
    }
  }
  return v === undefined ? {} : v;
}

function retentionOf(item: CreateInstanceItem): RetentionInput | undefined {
  if (item.instance_retention)
    return {
      success: item.instance_retention.success_retention,
      error: item.instance_retention.error_retention,
    };
  if (item.retention !== undefined) return { success: item.retention, error: item.retention };
  return undefined;
}

export function toCreateItem(item: CreateInstanceItem | undefined): CreateItem {
  const body = item ?? {};
  return {
    id: body.instance_id ?? body.id,
    params: fromPlain(restParams(body.params)),
    retention: retentionOf(body),
  };
}

function durationMs(v: number | string | undefined, what: string): number | undefined {
  if (v === undefined) return undefined;
  const ms = parseDuration(v);
  if (ms === undefined)
    throw apiError('workflow_invalid', `${what}: invalid duration ${JSON.stringify(v)}`);
  return ms;
}

export function mountWorkflowRoutes(ctx: AreaContext, engine: WorkflowEngine): void {
  const { router, clock } = ctx;
  const db = ctx.database.db;
  const wdb = engine.db;

  async function requireAccount(accountId: string) {
    if (!(await accounts.get(db, GLOBAL_SCOPE, accountId)))
      throw apiError('account_not_found', accountId);
  }

  async function countsOf(accountId: string, workflow?: string) {
    let q = wdb
      .selectFrom('wf_instances')
      .select([
        'workflow',
        'status',
        (eb) => eb.fn.countAll<number>().as('n'),
        (eb) => eb.fn.max('created_on').as('last'),
      ])
      .where('account_id', '=', accountId);
    if (workflow !== undefined) q = q.where('workflow', '=', workflow);
    const rows = await q.groupBy(['workflow', 'status']).execute();
    const out = new Map<string, { counts: Partial<Record<Status, number>>; last: string | null }>();
    for (const r of rows) {
      const e = out.get(r.workflow) ?? { counts: {}, last: null };
      e.counts[r.status] = Number(r.n);
      const last = r.last as string | null;
      if (last && (!e.last || last > e.last)) e.last = last;
      out.set(r.workflow, e);
    }
    return out;
  }

  async function view(accountId: string, def: StoredWorkflow) {
    const c = (await countsOf(accountId, def.name)).get(def.name);
    return workflowView(
      def,
      c?.counts ?? {},
      c?.last ?? null,
      engine.nextInstanceTimes(accountId, def.name),
    );
  }

  // ==== definitions ============================================================================

  router.add(
    {
      method: 'GET',
      path: WF,
      operationId: 'wor-list-workflows',
      summary: 'List workflows',
      auth: read,
      query: ListWorkflowsQuery,
      tags,
    },
    async (req) => {
      const accountId = req.params.account_id;
      await requireAccount(accountId);
      let defs = (await workflowDefs.all(db, accountId)).map((d) => d.body);
      if (req.query.search)
        defs = defs.filter((d) => d.name.toLowerCase().includes(req.query.search!.toLowerCase()));
      const page = pageOf(defs, req.query);
      const counts = await countsOf(accountId);
      return pageFrom(
        page.items.map((d) => {
          const c = counts.get(d.name);
          return workflowView(
            d,
            c?.counts ?? {},
            c?.last ?? null,
            engine.nextInstanceTimes(accountId, d.name),
          );
        }),
        page.info.total_count,
        req.query,
      );
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${WF}/:workflow_name`,
      operationId: 'wor-get-workflow-details',
      summary: 'Get a workflow',
      auth: read,
      params,
      tags,
    },
    async (req) =>
      view(
        req.params.account_id,
        await engine.requireDefinition(req.params.account_id, req.params.workflow_name),
      ),
  );

  router.add(
    {
      method: 'PUT',
      path: `${WF}/:workflow_name`,
      operationId: 'wor-create-or-modify-workflow',
      summary: 'Create or modify a workflow',
      auth: edit,
      body: PutWorkflowBody,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, workflow_name: name } = req.params;
      await requireAccount(accountId);
      const def = await saveWorkflow(ctx, engine, accountId, name, req.body);
      const c = (await countsOf(accountId, name)).get(name);
      return putWorkflowView(def, c?.last ?? null);
    },
  );

  router.add(
    {
      method: 'DELETE',
      path: `${WF}/:workflow_name`,
      operationId: 'wor-delete-workflow',
      summary: 'Delete a workflow and its instances',
      auth: edit,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, workflow_name: name } = req.params;
      await engine.requireDefinition(accountId, name);
      await engine.deleteWorkflow(accountId, name);
      await workflowDefs.delete(db, accountId, name);
      engine.forget(accountId, name);
      return { status: 'ok', success: true };
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${WF}/:workflow_name/versions`,
      operationId: 'wor-list-workflow-versions',
      summary: "List a workflow's versions",
      auth: read,
      query: ListWorkflowsQuery,
      params,
      tags,
    },
    async (req) => {
      const def = await engine.requireDefinition(req.params.account_id, req.params.workflow_name);
      return pageOf(
        [...def.versions].reverse().map((v) => versionView(def, v)),
        req.query,
      );
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${WF}/:workflow_name/versions/:version_id`,
      operationId: 'wor-describe-workflow-versions',
      summary: 'Get a workflow version',
      auth: read,
      params,
      tags,
    },
    async (req) => {
      const def = await engine.requireDefinition(req.params.account_id, req.params.workflow_name);
      const v = def.versions.find((x) => x.id === req.params.version_id);
      if (!v) throw apiError('workflow_invalid', `version ${req.params.version_id} not found`);
      return versionView(def, v);
    },
  );

  // ==== instances =============================================================================

  router.add(
    {
      method: 'POST',
      path: INST,
      operationId: 'wor-create-new-workflow-instance',
      summary:
        'Create an instance ({id?, params, retention?} or {instance_id?, params, instance_retention?})',
      auth: edit,
      body: CreateInstanceBody,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, workflow_name: name } = req.params;
      const [created] = await engine.create(accountId, name, [toCreateItem(req.body)], 'api', {
        skipExisting: false,
      });
      return createdView(created.instance);
    },
  );

  router.add(
    {
      method: 'POST',
      path: `${INST}/batch`,
      operationId: 'wor-batch-create-workflow-instance',
      summary: 'Create up to 100 instances; existing ids are skipped',
      auth: edit,
      body: BatchBody,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, workflow_name: name } = req.params;
      if (req.body.length > 100) throw apiError('workflow_batch_too_large', req.body.length);
      const created = await engine.create(accountId, name, req.body.map(toCreateItem), 'api', {
        skipExisting: true,
      });
      return created.map((c) => createdView(c.instance));
    },
  );

  router.add(
    {
      method: 'GET',
      path: INST,
      operationId: 'wor-list-workflow-instances',
      summary: 'List instances',
      auth: read,
      query: ListInstancesQuery,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, workflow_name: name } = req.params;
      await engine.requireDefinition(accountId, name);
      const q = req.query;
      let base = wdb
        .selectFrom('wf_instances')
        .where('account_id', '=', accountId)
        .where('workflow', '=', name);
      if (q.status) base = base.where('status', '=', q.status as Status);
      if (q.date_start) base = base.where('created_on', '>=', new Date(q.date_start).toISOString());
      if (q.date_end) base = base.where('created_on', '<=', new Date(q.date_end).toISOString());
      const total = Number(
        (await base.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirst())?.n ?? 0,
      );
      const dir = q.direction ?? 'desc';
      const rows = await base
        .selectAll()
        .orderBy('created_on', dir)
        .orderBy(sql.ref('id'), dir)
        .limit(q.per_page)
        .offset((q.page - 1) * q.per_page)
        .execute();
      return pageFrom(
        rows.map((r) => listItemView(r)),
        total,
        q,
      );
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${INST}/:instance_id`,
      operationId: 'wor-describe-workflow-instance',
      summary: 'An instance with its step history',
      auth: read,
      query: InstanceGetQuery,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, workflow_name: name, instance_id: id } = req.params;
      const inst = await engine.requireInstance(accountId, name, id);
      const simple = req.query.simple === 'true';
      const steps = await stepsOf(wdb, inst.iid, inst.generation);
      return detailsView(inst, steps, { order: req.query.order ?? 'asc', simple });
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${INST}/:instance_id/status`,
      operationId: 'wor-instance-status',
      summary: 'Status: {status, error?, output?}',
      auth: read,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, workflow_name: name, instance_id: id } = req.params;
      return statusView(await engine.requireInstance(accountId, name, id), false);
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${INST}/:instance_id/step`,
      operationId: 'wor-instance-step',
      summary: "One step's full output",
      auth: read,
      query: StepQuery,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, workflow_name: name, instance_id: id } = req.params;
      const inst = await engine.requireInstance(accountId, name, id);
      const steps = await stepsOf(wdb, inst.iid, inst.generation);
      const type = req.query.type === 'waitForEvent' ? 'waitForEvent' : 'do';
      const step = steps.find(
        (s) =>
          s.type === type &&
          (s.name === req.query.name || `${s.name}-${s.count}` === req.query.name),
      );
      if (!step)
        throw apiError(
          'workflow_invalid',
          `no ${type === 'do' ? 'step' : type} named ${req.query.name} in this instance`,
        );
      return stepStatusView(step);
    },
  );

  router.add(
    {
      method: 'PATCH',
      path: `${INST}/:instance_id/status`,
      operationId: 'wor-change-status-workflow-instance',
      summary: 'pause | resume | terminate | restart',
      auth: edit,
      body: StatusBody,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, workflow_name: name, instance_id: id } = req.params;
      const b = req.body;
      const inst =
        b.status === 'pause'
          ? await engine.pause(accountId, name, id)
          : b.status === 'resume'
            ? await engine.resume(accountId, name, id)
            : b.status === 'terminate'
              ? await engine.terminate(accountId, name, id, 'api')
              : await engine.restart(accountId, name, id, b.from);
      return { status: inst.status, timestamp: clock.now().toISOString() };
    },
  );

  router.add(
    {
      method: 'POST',
      path: `${INST}/:instance_id/events`,
      operationId: 'wor-send-event-spec',
      summary: 'Send {type, payload} to an instance',
      auth: edit,
      body: SpecEventBody,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, workflow_name: name, instance_id: id } = req.params;
      await engine.sendEvent(
        accountId,
        name,
        id,
        req.body.type,
        fromPlain(req.body.payload ?? null),
      );
      return { instanceId: id, timestamp: clock.now().toISOString() };
    },
  );

  router.add(
    {
      method: 'POST',
      path: `${INST}/:instance_id/events/:event_type`,
      operationId: 'wor-send-event-workflow-instance',
      summary: 'Send an event of a type (the body is its payload)',
      auth: edit,
      body: EventPayloadBody,
      params,
      tags,
    },
    async (req) => {
      const {
        account_id: accountId,
        workflow_name: name,
        instance_id: id,
        event_type: type,
      } = req.params;
      await engine.sendEvent(accountId, name, id, type, fromPlain(req.body ?? null));
      return { instanceId: id, timestamp: clock.now().toISOString() };
    },
  );

  router.add(
    {
      method: 'DELETE',
      path: `${INST}/:instance_id`,
      operationId: 'wor-delete-workflow-instance',
      summary: 'Delete an instance',
      auth: edit,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, workflow_name: name, instance_id: id } = req.params;
      await engine.deleteInstance(accountId, name, id);
      return { instanceId: id, timestamp: clock.now().toISOString() };
    },
  );
}

/** Creates or updates a definition (REST PUT and script deploys); a change makes a new version. */
export async function saveWorkflow(
  ctx: AreaContext,
  engine: WorkflowEngine,
  accountId: string,
  name: string,
  body: Pick<
    PutWorkflowBody,
    'class_name' | 'script_name' | 'limits' | 'concurrency' | 'default_retention' | 'schedules'
  >,
): Promise<StoredWorkflow> {
  const db = ctx.database.db;
  if (name.length > 64 || !WORKFLOW_NAME.test(name)) {
    throw apiError(
      'workflow_invalid',
      `workflow name ${JSON.stringify(name)} is invalid: up to 64 characters matching ${WORKFLOW_NAME.source}`,
    );
  }
  if (!(await workerScripts.get(db, accountId, body.script_name)))
    throw apiError('workflow_script_missing', body.script_name);
  for (const [i, s] of (body.schedules ?? []).entries()) {
    try {
      parseCron(s.cron);
    } catch (err) {
      if (err instanceof CronError)
        throw apiError('workflow_invalid', `schedules.${i}.cron: ${err.message}`);
      throw err;
    }
  }
  const retention = {
    success_retention: durationMs(
      body.default_retention?.success_retention,
      'default_retention.success_retention',
    ),
    error_retention: durationMs(
      body.default_retention?.error_retention,
      'default_retention.error_retention',
    ),
  };
  const now = ctx.clock.now();
  const ts = now.toISOString();
  const prev = await workflowDefs.get(db, accountId, name);
  const old = prev?.body;
  const settings = {
    class_name: body.class_name,
    script_name: body.script_name,
    limits: body.limits ?? old?.limits ?? {},
    concurrency: body.concurrency ?? old?.concurrency ?? {},
    default_retention: body.default_retention
      ? JSON.parse(JSON.stringify(retention))
      : (old?.default_retention ?? {}),
  };
  const changed =
    !old ||
    JSON.stringify(settings) !==
      JSON.stringify({
        class_name: old.class_name,
        script_name: old.script_name,
        limits: old.limits,
        concurrency: old.concurrency,
        default_retention: old.default_retention,
      });
  let versions = old?.versions ?? [];
  let versionId = old?.version_id ?? uuid();
  if (changed) {
    versionId = uuid();
    const v: WorkflowVersion = { id: versionId, created_on: ts, modified_on: ts, ...settings };
    versions = [...versions, v].slice(-50);
  }
  const def: StoredWorkflow = {
    id: old?.id ?? uuid(),
    name,
    ...settings,
    version_id: versionId,
    created_on: old?.created_on ?? ts,
    modified_on: changed || body.schedules ? ts : (old?.modified_on ?? ts),
    schedules: body.schedules
      ? body.schedules.map((s) => ({ cron: s.cron.trim() }))
      : (old?.schedules ?? []),
    versions,
  };
  if (prev) await workflowDefs.update(db, prev, def, now);
  else await workflowDefs.insert(db, accountId, name, def, now);
  engine.definitionChanged(accountId, def);
  return def;
}
