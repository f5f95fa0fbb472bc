/**
 * @module workflows — durable multi-step executions (spec 002_27fdb1f572b9493b.txt "Workflows";
 * docs/workflows.md).
 *
 * A workflow is a class exported by an uploaded script (see the `workers` area), registered with
 * `PUT /accounts/{account_id}/workflows/{workflow_name}` `{class_name, script_name}` — or
 * automatically when a script declares a `workflow` binding with `class_name` for itself. Instances
 * start from the REST API, from a script's binding (`env.MY_WORKFLOW.create(…)`, also from a
 * `scheduled` handler or another workflow), or from the workflow's own cron `schedules`.
 *
 * Engine (`engine.ts`): replay from the top with step results memoised by (type, name, n-th
 * occurrence) in SQL; `step.do` retries with the platform's defaults (5 retries, 10 s,
 * exponential; 10-minute timeout per attempt) and back-off formulas (constant d, linear d·n,
 * exponential d·2^(n-1)) on durable timers; `NonRetryableError`; a final error is memoised and
 * thrown again on replay; `sleep`/`sleepUntil` (≤ 365 days) and `waitForEvent` (default 24 h,
 * ≤ 365 days, `WorkflowTimeoutError` on timeout) on timers; step outputs, params and payloads
 * ≤ 1 MiB and serialisable; 1024 steps per instance unless `limits.steps`; per-workflow
 * concurrency (`concurrency.limit`, else 10,000 paid / 100 free) with `queued`, where sleeping and
 * waiting instances hold no slot. Retention: per instance (`retention` text, or
 * `instance_retention {success_retention, error_retention}`), else the workflow's
 * `default_retention`, else 30 days (paid) / 3 days (free); expired instances are deleted by the
 * scheduler.
 *
 * Instance control (binding and REST): pause (running/waiting/queued → paused, through
 * `waitingForPause` while a step is in flight; already paused: no-op; final: 409
 * `instance.cannot_pause`), resume (paused → waiting with timers shifted by the pause, or queued;
 * waitingForPause → running; running/waiting/queued: no-op; final: 409 `instance.cannot_resume`),
 * terminate (final: 409 `(instance.cannot_terminate) Cannot terminate instance since its on a
 * finite state`), restart (any status; optional `from: {name, count?, type?}` keeps the steps
 * before it), sendEvent (buffered until a matching `waitForEvent`; a finished instance: 409).
 *
 * Routes (`/accounts/{account_id}/workflows`): `GET /`, `GET|PUT|DELETE /{name}`,
 * `GET /{name}/versions[/{version_id}]`; instances under `/{name}/instances`: `POST` (spec
 * `{id?, params, retention?}` and official `{instance_id?, params (value or JSON text),
 * instance_retention?}`), `POST /batch` (≤ 100, existing ids skipped), `GET` (status filter,
 * `page`/`per_page` ≤ 100, `direction`, `date_start`/`date_end`), `GET /{id}` (details with the
 * step history; `order`, `simple`), `GET /{id}/status` (spec: `{status, error?, output?}`),
 * `GET /{id}/step?name=&type=`, `PATCH /{id}/status {status: pause|resume|terminate|restart}`,
 * `POST /{id}/events/{event_type}` (body = payload) and the spec's `POST /{id}/events {type,
 * payload}`, `DELETE /{id}`. Permissions: Workers Scripts Read / Write.
 *
 * Aliases: `id` ↔ `instance_id`; `retention` ↔ `instance_retention`; spec `GET …/status` beside
 * `GET …/{id}`; spec events body beside the type-in-path form.
 *
 * LIMITATIONS: one engine per database (instances are not shared between several Outpost
 * processes on one PostgreSQL); no saga rollback (`rollingBack`, `terminate {rollback}` is
 * accepted and ignored); `retries.delay` as a function is refused; no creation-rate or
 * queued-instance limits; `waitForEvent` resolves with the event `{type, payload, timestamp}` as
 * the platform's runtime does; a step longer than the runtime's wall budget for one attempt
 * (16 minutes) fails; REST `cursor` paging is not offered (pages only); `version_id` changes only
 * with a `PUT` (not with a script upload).
 */
import { defineArea } from '../../core/area.ts';
import {
  WORKERS_PERMISSION,
  WORKERS_SERVICE,
  WORKFLOWS_BRIDGE_SERVICE,
  type ScriptRegistry,
} from '../workers/index.ts';
import { createBridge } from './bridge.ts';
import { WorkflowEngine } from './engine.ts';
import { mountWorkflowRoutes, saveWorkflow } from './routes.ts';
import { workflowDefs } from './store.ts';

export const WORKFLOWS_SERVICE = 'workflows';
export type { WorkflowEngine } from './engine.ts';

export default defineArea({
  name: 'workflows',
  mount(ctx) {
    ctx.permissions.define({ key: WORKERS_PERMISSION, name: 'Workers Scripts', scope: 'account' });
    const log = ctx.log.child({ area: 'workflows' });
    const registry = ctx.services.require<ScriptRegistry>(WORKERS_SERVICE);
    const engine = new WorkflowEngine(ctx, registry);
    ctx.services.provide(WORKFLOWS_SERVICE, engine);
    ctx.services.provide(WORKFLOWS_BRIDGE_SERVICE, createBridge(engine, log));
    // A script that binds a workflow with `class_name` (and no other `script_name`) defines it.
    registry.deployHooks.push(async (accountId, script) => {
      for (const b of script.bindings) {
        if (b.type !== 'workflow' || typeof b.class_name !== 'string') continue;
        if (b.script_name !== undefined && b.script_name !== script.id) continue;
        const name = String(b.workflow_name);
        const existing = (await workflowDefs.get(ctx.database.db, accountId, name))?.body;
        if (existing && existing.class_name === b.class_name && existing.script_name === script.id)
          continue;
        await saveWorkflow(ctx, engine, accountId, name, {
          class_name: b.class_name,
          script_name: script.id,
        });
      }
    });
    mountWorkflowRoutes(ctx, engine);
    return {
      start: () => engine.start(),
      stop: () => engine.stop(),
    };
  },
});
