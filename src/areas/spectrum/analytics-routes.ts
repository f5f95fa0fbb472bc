/**
 * `/zones/{zone_id}/spectrum/analytics/…`: `aggregate/current` (per application, the last
 * minute), `events/summary` and `events/bytime`. Query forms: the spec's comma-separated
 * `metrics`/`dimensions` and the official client's repeated keys; `aggregate/current` takes the
 * real `appID` (comma list) and `colo_name` and also accepts the spec's `metrics`/`dimensions`
 * (validated; its lines always carry every field). `bytime` without `time_delta` (the spec form)
 * picks the finest interval that gives at most 1,440 intervals.
 */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { ApiError, CODES } from '../../core/errors.ts';
import { HEX32 } from '../../core/ids.ts';
import { qInt, qList, qString } from '../../core/validate.ts';
import type { Zone } from '../zones/index.ts';
import type { Row, SpectrumAnalytics } from './analytics.ts';
import { DEFAULT_METRICS, DIMENSIONS, MAX_LIMIT, METRICS, TIME_DELTAS, bytime, defaultDelta, summary, type ReportQuery } from './analytics-query.ts';
import { apps } from './store.ts';

export const ANALYTICS = 'analytics';
const DEFAULT_SPAN_MS = 6 * 3600_000;
const CURRENT_WINDOW_MS = 60_000;

const Timestamp = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})$/i, 'expected an RFC 3339 timestamp, e.g. 2026-01-01T00:00:00Z')
  .transform((s, ctx) => {
    const d = new Date(s);
    if (Number.isNaN(d.getTime())) {
      ctx.addIssue({ code: 'custom', message: 'not a valid date' });
      return z.NEVER;
    }
    return d;
  });

const reportFields = {
  metrics: qList(z.enum(METRICS)).optional(),
  dimensions: qList(z.enum(DIMENSIONS)).optional(),
  filters: qString(z.string().max(1000)).optional(),
  sort: qList(z.string().max(64)).optional(),
  since: qString(Timestamp).optional(),
  until: qString(Timestamp).optional(),
  limit: qInt(z.number().int().min(1).max(MAX_LIMIT)).optional(),
};
const SummaryQuery = z.object(reportFields);
const BytimeQuery = z.object({ ...reportFields, time_delta: qString(z.enum(TIME_DELTAS)).optional() });
const CurrentQuery = z.object({
  appID: qString(z.string().max(3300)).optional(),
  app_id: qString(z.string().max(3300)).optional(),
  colo_name: qString(z.string().max(3)).optional(),
  metrics: qList(z.enum(METRICS)).optional(),
  dimensions: qList(z.enum(DIMENSIONS)).optional(),
});

function invalid(message: string): ApiError {
  return new ApiError(CODES.spectrum_analytics_invalid.status, [{ code: CODES.spectrum_analytics_invalid.code, message }]);
}

export function mountAnalyticsRoutes(ctx: AreaContext, analytics: SpectrumAnalytics): void {
  const { router, clock } = ctx;
  const auth = { permission: ANALYTICS, level: 'read' } as const;
  const tags = ['spectrum'];

  const reportQuery = (q: z.output<typeof SummaryQuery>): ReportQuery => {
    const until = q.until ?? clock.now();
    const since = q.since ?? new Date(until.getTime() - DEFAULT_SPAN_MS);
    if (since.getTime() > until.getTime()) throw invalid('since: must not be later than until');
    const metrics = q.metrics && q.metrics.length > 0 ? [...new Set(q.metrics)] : DEFAULT_METRICS;
    const dimensions = [...new Set(q.dimensions ?? [])];
    const out: ReportQuery = { metrics, dimensions, sort: q.sort ?? [], since, until, limit: q.limit ?? MAX_LIMIT };
    if (q.filters !== undefined && q.filters !== '') out.filters = q.filters;
    return out;
  };

  router.add(
    { method: 'GET', path: '/zones/:zone_id/spectrum/analytics/events/summary', operationId: 'spectrum-analytics-(-summary)-get-analytics-summary', summary: 'Proxied-application analytics summed over a time range', auth, query: SummaryQuery, tags },
    async ({ resolved, query }) => {
      const q = reportQuery(query);
      return summary(analytics.rows((resolved.zone_id as Zone).id, q.since.getTime(), q.until.getTime()), q);
    },
  );

  router.add(
    { method: 'GET', path: '/zones/:zone_id/spectrum/analytics/events/bytime', operationId: 'spectrum-analytics-(-by-time)-get-analytics-by-time', summary: 'Proxied-application analytics per time interval', auth, query: BytimeQuery, tags },
    async ({ resolved, query }) => {
      const q = reportQuery(query);
      const delta = query.time_delta ?? defaultDelta(q.since, q.until);
      return bytime(analytics.rows((resolved.zone_id as Zone).id, q.since.getTime(), q.until.getTime()), q, delta);
    },
  );

  router.add(
    { method: 'GET', path: '/zones/:zone_id/spectrum/analytics/aggregate/current', operationId: 'spectrum-aggregate-analytics-get-current-aggregated-analytics', summary: 'Per-application totals of the last minute', auth, query: CurrentQuery, tags },
    async ({ resolved, query }) => {
      const zone = resolved.zone_id as Zone;
      const wanted = [query.appID, query.app_id].filter((s): s is string => !!s).flatMap((s) => s.split(',').map((x) => x.trim()).filter(Boolean));
      for (const id of wanted) if (!HEX32.test(id)) throw invalid(`appID: ${id} is not an application id (32 hex characters)`);
      const colo = query.colo_name?.toUpperCase();
      const now = clock.now().getTime();
      const rows = analytics.rows(zone.id, now - CURRENT_WINDOW_MS, now).filter((r) => !colo || r.coloName.toUpperCase() === colo);
      const ids = new Set((await apps.all(ctx.database.db, zone.id)).map((d) => d.id));
      for (const r of rows) ids.add(r.appID);
      const lines = [...ids].filter((id) => wanted.length === 0 || wanted.includes(id)).sort();
      return lines.map((appID) => currentLine(appID, rows.filter((r) => r.appID === appID)));
    },
  );
}

function currentLine(appID: string, rows: Row[]) {
  let bytesIngress = 0;
  let bytesEgress = 0;
  let connections = 0;
  let durSum = 0;
  let durCount = 0;
  for (const r of rows) {
    bytesIngress += r.bytesIngress;
    bytesEgress += r.bytesEgress;
    if (r.event === 'connect') connections += r.count;
    durSum += r.durSum;
    durCount += r.durCount;
  }
  return { appID, bytesIngress, bytesEgress, connections, durationAvg: durCount === 0 ? 0 : Math.round((durSum / durCount) * 1000) / 1000 };
}
