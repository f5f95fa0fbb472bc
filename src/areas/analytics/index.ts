/**
 * @module analytics — the analytics store (spec 002_27fdb1f572b9493b.txt, "Analytics data point"
 * and "Analytics store"): scripts write data points with the `analytics_engine` binding's
 * `writeDataPoint({blobs, doubles, indexes})`, and `POST|GET /accounts/{a}/analytics_engine/sql`
 * queries them in the platform's ClickHouse-flavoured SQL, translated to DuckDB (`dialect.ts`).
 * The platform's own events are datasets too (`platform.ts`): `outpost_http_requests` (the edge),
 * `outpost_spectrum_events` (proxied TCP/UDP applications) and `outpost_ddos_attacks` (DDoS
 * attack starts and ends).
 *
 * Storage: DuckDB embedded, `<data dir>/analytics.duckdb`; points are appended in batches every
 * `--analytics-flush-ms` (default 1 s) and on a graceful stop; retention `--analytics-retention-days`
 * (default 90); sampling above `--analytics-sample-rate` writes per minute and dataset (default
 * 1,000,000); queries stop after `--analytics-query-timeout-ms` (default 30 s, answered 504).
 *
 * Permission: Account Analytics Read (account). The binding is offered to the workers area as the
 * `workers.binding.analytics_engine` service.
 *
 * LIMITATIONS: one node only (DuckDB is embedded; a ClickHouse backend is not implemented); no
 * JOIN, UNION, WITH or window functions; `topKWeighted` and the array and JSON function families
 * are not translated; a `kill -9` loses the points of the last flush interval.
 */
import { join } from 'node:path';
import { defineArea } from '../../core/area.ts';
import { ApiError, CODES } from '../../core/errors.ts';
import { bindingExtensionService, type BindingExtension } from '../workers/index.ts';
import { BINDING_TYPE, checkBinding, nodeBindings, shimSource } from './binding.ts';
import { initDialect } from './dialect.ts';
import { AnalyticsEngine } from './engine.ts';
import { attachPlatformDatasets } from './platform.ts';
import { ANALYTICS_PERMISSION, mountAnalyticsRoutes } from './routes.ts';
import { DuckStore } from './store.ts';

export const ANALYTICS_SERVICE = 'analytics';
export { AnalyticsEngine } from './engine.ts';
export { translate } from './dialect.ts';

export default defineArea({
  name: 'analytics',
  mount(ctx) {
    ctx.permissions.define({ key: ANALYTICS_PERMISSION, name: 'Account Analytics', scope: 'account' });
    const log = ctx.log.child({ area: 'analytics' });
    let engine: AnalyticsEngine | undefined;
    let detach: (() => void) | undefined;
    const require = (): AnalyticsEngine => {
      if (!engine) throw new ApiError(503, [{ code: CODES.worker_runtime_unavailable.code, message: 'The analytics store is not running; retry in a moment' }]);
      return engine;
    };
    mountAnalyticsRoutes(ctx, require);
    const extension: BindingExtension = {
      check: (b) => checkBinding(b),
      bindings: (accountId, b) => nodeBindings(require, accountId, b),
      shim: (b) => shimSource(b),
    };
    ctx.services.provide(bindingExtensionService(BINDING_TYPE), extension);
    ctx.services.provide(ANALYTICS_SERVICE, { engine: () => engine });
    return {
      async start() {
        const store = await DuckStore.open({
          path: join(ctx.config.dataDir, 'analytics.duckdb'),
          flushMs: ctx.config.analyticsFlushMs,
          retentionDays: ctx.config.analyticsRetentionDays,
          log,
          now: () => ctx.clock.now(),
        });
        const e = new AnalyticsEngine({
          store,
          log,
          now: () => ctx.clock.now(),
          sampleRatePerMinute: ctx.config.analyticsSampleRate,
          queryTimeoutMs: ctx.config.analyticsQueryTimeoutMs,
        });
        await e.load();
        await initDialect();
        detach = await attachPlatformDatasets(e, ctx, log);
        store.start();
        engine = e;
      },
      async stop() {
        detach?.();
        const e = engine;
        engine = undefined;
        await e?.store.close();
      },
    };
  },
});
