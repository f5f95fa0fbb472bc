/**
 * @module workers — account scripts (the platform's Workers): uploads, versions, and traffic (spec
 * 002_27fdb1f572b9493b.txt describes the deploy metadata under "Script record"). See docs/workers.md.
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
 * Traffic (`edge.ts`, `triggers.ts`, `trigger-routes.ts`): zone routes
 * (`/zones/{zone_id}/workers/routes`, phase `workers_routes` after every request phase; the
 * script's `fetch()` to its own host reaches the zone's origin), custom domains
 * (`/accounts/{account_id}/workers/domains`) and `<script>.<subdomain>.<--workers-dev-suffix>`
 * (`/accounts/{account_id}/workers/subdomain`, `…/scripts/{name}/subdomain`); a throwing script
 * answers the 1101 page. `kv_namespace` bindings reach the `kv` area's store.
 *
 * Versions (`versions.ts`, `version-routes.ts`): every upload is a version; `…/versions`,
 * `…/deployments` (one version at 100%; `DELETE …/deployments/{id}` for any but the latest),
 * `…/secrets`, `…/secrets-bulk` (several at once, all or nothing; `secrets.ts`), `…/settings`,
 * `…/script-settings`, `…/routes` (a script's routes across zones) and
 * `/workers/services/{name}`, as `wrangler` reads them.
 *
 * Client calls beyond those: `GET …/content/v2` (the main module, raw, with `cf-entrypoint`; served
 * with the download), and in `account-routes.ts` `PUT …/content` (new code with the live bindings, secrets and settings, loaded
 * first and deployed as a new version), `GET /workers/scripts-search` (`name` substring, `id`,
 * `order_by`, paging) and `GET|PUT /workers/account-settings` (`default_usage_model`,
 * `green_compute`: stored and answered; they do not change how scripts run here).
 *
 * Permissions: Workers Scripts Read / Write (account); Workers Routes Read / Write (zone).
 *
 * Dispatch namespaces (`dispatch/`, docs/workers-for-platforms.md): customer scripts, their
 * static assets, and the `dispatch_namespace` binding.
 *
 * LIMITATIONS: no service-worker (`body_part`) scripts, tails, observability API, the beta
 * `/workers/workers` API, assets (account scripts: the upload-session route is dispatch-only,
 * because assets would have to be versioned with the code and served on every way in),
 * `secret_key` bindings, Durable Objects or gradual deployments (one version serves at a time); binding types other than `plain_text`,
 * `secret_text`, `json`, `workflow` and `kv_namespace` are refused at upload; handler detection
 * in the upload answer is by a look at the main module's source; without a script runtime on the
 * server, uploads are stored unvalidated and cannot run. WebSocket upgrades to a script answer
 * 501; a script's `fetch()` reaches address origins, not tunnels.
 */
import { defineArea } from '../../core/area.ts';
import { EDGE, OriginFetcher, type EdgeService } from '../../edge/index.ts';
import { ZONE_INDEX, type ZoneIndex } from '../dns/index.ts';
import { ORIGIN_NAME, ROUTES_PHASE, ROUTES_PHASE_ORDER, WorkersEdge } from './edge.ts';
import { ScriptRegistry, WORKERS_SERVICE } from './registry.ts';
import { mountWorkersRoutes, WORKERS_PERMISSION } from './routes.ts';
import { mountAccountRoutes } from './account-routes.ts';
import { mountVersionRoutes } from './version-routes.ts';
import { Deployer } from './versions.ts';
import { mountDispatch } from './dispatch/index.ts';
import { scripts } from './store.ts';
import { mountTriggerRoutes, ROUTES_PERMISSION } from './trigger-routes.ts';
import { TRIGGERS_CHANGED, TriggerViews, workerRoutes, type TriggersChange } from './triggers.ts';

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
    ctx.permissions.define({ key: ROUTES_PERMISSION, name: 'Workers Routes', scope: 'zone' });
    const log = ctx.log.child({ area: 'workers' });
    const registry = new ScriptRegistry(ctx);
    ctx.services.provide(WORKERS_SERVICE, registry);
    const views = new TriggerViews(ctx.database.db);
    const index = ctx.services.require<ZoneIndex>(ZONE_INDEX);
    const origin = new OriginFetcher({
      connectTimeoutMs: ctx.config.originConnectTimeoutMs,
      responseTimeoutMs: ctx.config.originResponseTimeoutMs,
    });
    const workersEdge = new WorkersEdge(
      registry,
      views,
      origin,
      ctx.config.workersDevSuffix.toLowerCase(),
      log,
    );
    registry.outbound = (req, info) => workersEdge.outbound(req, info);
    registry.triggersChanged = async (change) => {
      await reload(change);
      ctx.events.publish(TRIGGERS_CHANGED, change);
    };
    const edge = ctx.services.optional<EdgeService>(EDGE);
    if (edge) {
      edge.addHostRouter((host) => workersEdge.routeHost(host));
      edge.addOriginHandler({
        matches: (target) => target === ORIGIN_NAME,
        handle: (er) => workersEdge.serveClaimed(er),
      });
      edge.addPhase({
        name: ROUTES_PHASE,
        order: ROUTES_PHASE_ORDER,
        run: (er) => workersEdge.routePhase(er),
      });
    }
    const reload = (change: TriggersChange) =>
      views
        .changed(change)
        .catch((err: unknown) => log.error({ err }, 'could not reload the workers routing views'));
    const unsubscribe = [
      ctx.events.subscribe(TRIGGERS_CHANGED, (payload) => void reload(payload as TriggersChange)),
      ctx.events.subscribe('zone.deleted', (payload) => {
        const zoneId = (payload as { id: string }).id;
        void workerRoutes
          .deleteScope(ctx.database.db, zoneId)
          .then(() => reload({ kind: 'routes', zoneId }))
          .catch((err: unknown) =>
            log.warn({ err, zone: zoneId }, 'could not delete the routes of a deleted zone'),
          );
      }),
    ];
    const deployer = new Deployer(ctx, registry);
    const parser = mountWorkersRoutes(ctx, registry, deployer);
    mountVersionRoutes(ctx, deployer, parser);
    mountAccountRoutes(ctx, deployer, parser);
    // Dispatch namespaces share the upload parser and the registry's load options.
    mountDispatch(ctx, registry, parser);
    mountTriggerRoutes(ctx, index, views);
    return {
      async start() {
        await views.load();
        for (const doc of await scripts.all(ctx.database.db, null)) {
          if (doc.body.schedules.length > 0) registry.armSchedules(doc.scopeId, doc.body);
        }
        registry.cron.start();
      },
      async stop() {
        registry.cron.stop();
        for (const u of unsubscribe) u();
        origin.close();
      },
    };
  },
});
