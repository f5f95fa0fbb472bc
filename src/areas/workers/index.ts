/**
 * @module workers — the minimal script API that workflows need (the platform's Workers scripts;
 * spec 002_27fdb1f572b9493b.txt describes the deploy metadata under "Script record").
 *
 * Routes (`/accounts/{account_id}/workers/scripts`):
 * - `PUT /{script_name}` multipart: `metadata` (JSON part, or the official client's bracket
 *   fields `metadata[main_module]`, `metadata[bindings][][type]` …) plus module parts named by file
 *   (`files[]` from the client; the boundary is sniffed when the client says
 *   `application/javascript`). Module types by part content type: `application/javascript+module`
 *   (ES module), `application/javascript` (ES module, `.cjs` → CommonJS), `application/wasm`,
 *   `text/plain`, `application/octet-stream`; source maps are ignored. Bindings: `workflow`
 *   (`name`, `workflow_name`, optional `class_name`, `script_name`), `plain_text`, `secret_text`,
 *   `json`. The script is loaded into the runtime before it is stored, so a script that does not
 *   load (syntax error, missing import) is refused with 400 and the message.
 * - `GET` (list), `GET /{script_name}` (the main module's source), `DELETE /{script_name}`,
 *   `GET|PUT /{script_name}/schedules` (cron triggers `[{cron}]`; the `scheduled` handler gets
 *   `{cron, scheduledTime}` on the injectable clock).
 * - `/_outpost/accounts/{account_id}/workers/scripts/{script_name}/invoke/<path>` (any method):
 *   the script's fetch handler through the API port, a workers.dev-style address for local use; it
 *   needs a token with Workers Scripts Read, which is not passed on to the script.
 *
 * Every script runs behind a generated main module (`wrapper.ts`) that serves the workflow engine's
 * internal calls and turns `workflow` bindings into objects with `create`, `createBatch` and `get`.
 * The `workers` service (`ScriptRegistry`) is what the workflows area uses to reach scripts.
 *
 * Permissions: Workers Scripts Read / Write (account).
 *
 * LIMITATIONS: no service-worker (`body_part`) scripts, versions, deployments, routes, tails,
 * secrets API, assets or settings endpoints; other binding types are refused at upload; handler
 * detection in the upload answer is by a look at the main module's source; without a script
 * runtime on the server, uploads are stored unvalidated and cannot run.
 */
import { defineArea } from '../../core/area.ts';
import { ScriptRegistry, WORKERS_SERVICE } from './registry.ts';
import { mountWorkersRoutes, WORKERS_PERMISSION } from './routes.ts';
import { scripts } from './store.ts';

export {
  ATTEMPT_WALL_MS,
  ATTEMPT_YIELD_MS,
  ScriptRegistry,
  RuntimeUnavailable,
  scriptIdOf,
  WORKERS_SERVICE,
  WORKFLOWS_BRIDGE_SERVICE,
} from './registry.ts';
export type { BindingExtension, DeployHook, WorkflowsBridge } from './registry.ts';
export { bindingExtensionService } from './registry.ts';
export type { NodeBinding } from './host.ts';
export { ATTEMPT_PATH, ENGINE_BINDING, SCHEDULED_PATH } from './wrapper.ts';
export { CronError, nextFiring, parseCron } from './cron.ts';
export type { StoredScript, StoredBinding } from './store.ts';
export { scripts as workerScripts } from './store.ts';
export type * from './protocol.ts';
export { WORKERS_PERMISSION } from './routes.ts';

export default defineArea({
  name: 'workers',
  mount(ctx) {
    ctx.permissions.define({ key: WORKERS_PERMISSION, name: 'Workers Scripts', scope: 'account' });
    const registry = new ScriptRegistry(ctx);
    ctx.services.provide(WORKERS_SERVICE, registry);
    mountWorkersRoutes(ctx, registry);
    return {
      async start() {
        for (const doc of await scripts.all(ctx.database.db, null)) {
          if (doc.body.schedules.length > 0) registry.armSchedules(doc.scopeId, doc.body);
        }
        registry.cron.start();
      },
      async stop() {
        registry.cron.stop();
      },
    };
  },
});
