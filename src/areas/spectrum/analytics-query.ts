/**
 * The analytics reports over rows from analytics.ts: `summary` (one line per combination of the
 * requested dimensions) and `bytime` (the same, split into time intervals), in the platform's
 * shape `{data: [{dimensions, metrics}], data_lag, max, min, totals, rows, query,
 * time_intervals?}`; plus the per-application `aggregate/current` lines.
 *
 * Metrics: `count` (events), `bytesIngress` (bytes from clients), `bytesEgress` (bytes to
 * clients), `durationAvg|Median|90th|99th` (ms, over `disconnect` events) and the spec's `duration`
 * (total connection time in seconds). Filters: `field==value` with `==`, `!=`, `>`, `<`, `>=`,
 * `<=` on dimensions, combined with `;`/AND (binding tighter) and `,`/OR. Sort: `+field`/`-field`
 * on requested metrics and dimensions.
 */
import { ApiError, CODES } from '../../core/errors.ts';
import type { Row } from './analytics.ts';

export const METRICS = ['count', 'bytesIngress', 'bytesEgress', 'duration', 'durationAvg', 'durationMedian', 'duration90th', 'duration99th'] as const;
export const DIMENSIONS = ['event', 'appID', 'coloName', 'ipVersion'] as const;
export const TIME_DELTAS = ['year', 'quarter', 'month', 'week', 'day', 'hour', 'dekaminute', 'minute'] as const;
export type Metric = (typeof METRICS)[number];
export type Dimension = (typeof DIMENSIONS)[number];
export type TimeDelta = (typeof TIME_DELTAS)[number];

export const DEFAULT_METRICS: Metric[] = ['count', 'bytesIngress', 'bytesEgress'];
export const MAX_LIMIT = 10_000;
const MAX_INTERVALS = 10_000;

export interface ReportQuery {
  metrics: Metric[];
  dimensions: Dimension[];
  filters?: string;
  sort: string[];
  since: Date;
  until: Date;
  limit: number;
}

export interface Report {
  data: { dimensions: string[]; metrics: number[] | number[][] }[];
  data_lag: number;
  max: Record<string, number>;
  min: Record<string, number>;
  totals: Record<string, number>;
  rows: number;
  query: {
    dimensions: Dimension[];
    filters?: string;
    limit: number;
    metrics: Metric[];
    since: string;
    until: string;
    sort: string[];
  };
  time_intervals?: string[][];
}

function invalid(message: string): ApiError {
  return new ApiError(CODES.spectrum_analytics_invalid.status, [{ code: CODES.spectrum_analytics_invalid.code, message }]);
}

// --- filters -------------------------------------------------------------------------------------

type Op = '==' | '!=' | '>' | '<' | '>=' | '<=';
interface Comparison {
  field: Dimension;
  op: Op;
  value: string;
}

export type RowPredicate = (row: Row) => boolean;

/** Parses a filter expression; throws a 400 naming what is wrong. */
export function parseFilters(text: string | undefined): RowPredicate {
  if (text === undefined || text.trim() === '') return () => true;
  const ors = text.split(/\s*,\s*|\s+OR\s+/i).map((alt) =>
    alt.split(/\s*;\s*|\s+AND\s+/i).map((term): Comparison => {
      const m = /^\s*([A-Za-z]+)\s*(==|!=|>=|<=|>|<)\s*(.*?)\s*$/.exec(term);
      if (!m) throw invalid(`filters: "${term}" must look like <dimension><operator><value>, e.g. event==disconnect`);
      const field = m[1] as Dimension;
      if (!DIMENSIONS.includes(field)) throw invalid(`filters: ${m[1]} is not a dimension (${DIMENSIONS.join(', ')})`);
      const value = m[3].replace(/^(['"])(.*)\1$/, '$2');
      if (value === '') throw invalid(`filters: "${term}" has no value`);
      return { field, op: m[2] as Op, value };
    }),
  );
  return (row) => ors.some((ands) => ands.every((c) => compare(dimensionValue(row, c.field), c)));
}

function compare(actual: string, c: Comparison): boolean {
  const numeric = c.field === 'ipVersion';
  const a: string | number = numeric ? Number(actual) : actual;
  const b: string | number = numeric ? Number(c.value) : c.value;
  switch (c.op) {
    case '==':
      return a === b;
    case '!=':
      return a !== b;
    case '>':
      return a > b;
    case '<':
      return a < b;
    case '>=':
      return a >= b;
    default:
      return a <= b;
  }
}

function dimensionValue(row: Row, d: Dimension): string {
  return String(row[d]);
}

// --- sort ----------------------------------------------------------------------------------------

interface SortKey {
  field: string;
  desc: boolean;
  metricIndex: number;
  dimensionIndex: number;
}

export function parseSort(items: string[], metrics: Metric[], dimensions: Dimension[]): SortKey[] {
  return items.map((raw) => {
    const s = raw.trim();
    // A `+` sent unencoded in a query string arrives as a space, trimmed above.
    const desc = s.startsWith('-');
    const field = s.replace(/^[+-]/, '');
    const metricIndex = metrics.indexOf(field as Metric);
    const dimensionIndex = dimensions.indexOf(field as Dimension);
    if (metricIndex < 0 && dimensionIndex < 0) throw invalid(`sort: ${field} must be one of the requested metrics or dimensions`);
    return { field, desc, metricIndex, dimensionIndex };
  });
}

// --- metrics -------------------------------------------------------------------------------------

interface Acc {
  count: number;
  bytesIngress: number;
  bytesEgress: number;
  durSum: number;
  durCount: number;
  samples: number[];
}

const emptyAcc = (): Acc => ({ count: 0, bytesIngress: 0, bytesEgress: 0, durSum: 0, durCount: 0, samples: [] });

function add(acc: Acc, row: Row): void {
  acc.count += row.count;
  acc.bytesIngress += row.bytesIngress;
  acc.bytesEgress += row.bytesEgress;
  acc.durSum += row.durSum;
  acc.durCount += row.durCount;
  for (const s of row.durSamples) acc.samples.push(s);
}

const round3 = (n: number) => Math.round(n * 1000) / 1000;

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

function metricValue(acc: Acc, m: Metric, sorted: () => number[]): number {
  switch (m) {
    case 'count':
      return acc.count;
    case 'bytesIngress':
      return acc.bytesIngress;
    case 'bytesEgress':
      return acc.bytesEgress;
    case 'duration':
      return round3(acc.durSum / 1000);
    case 'durationAvg':
      return acc.durCount === 0 ? 0 : round3(acc.durSum / acc.durCount);
    case 'durationMedian':
      return round3(percentile(sorted(), 50));
    case 'duration90th':
      return round3(percentile(sorted(), 90));
    default:
      return round3(percentile(sorted(), 99));
  }
}

function values(acc: Acc, metrics: Metric[]): number[] {
  let cache: number[] | undefined;
  const sorted = () => (cache ??= [...acc.samples].sort((a, b) => a - b));
  return metrics.map((m) => metricValue(acc, m, sorted));
}

// --- reports -------------------------------------------------------------------------------------

interface Group {
  dims: string[];
  total: Acc;
  /** Per time interval (bytime only). */
  slots?: Acc[];
}

function echo(q: ReportQuery): Report['query'] {
  const out: Report['query'] = {
    dimensions: q.dimensions,
    limit: q.limit,
    metrics: q.metrics,
    since: q.since.toISOString(),
    until: q.until.toISOString(),
    sort: q.sort,
  };
  if (q.filters !== undefined) out.filters = q.filters;
  return out;
}

function groupRows(rows: Row[], q: ReportQuery, slotOf?: (row: Row) => number, slots = 0): Group[] {
  const keep = parseFilters(q.filters);
  const groups = new Map<string, Group>();
  if (q.dimensions.length === 0) groups.set('', { dims: [], total: emptyAcc(), slots: slotOf ? Array.from({ length: slots }, emptyAcc) : undefined });
  for (const row of rows) {
    if (!keep(row)) continue;
    const dims = q.dimensions.map((d) => dimensionValue(row, d));
    const k = dims.join('\u0000');
    let g = groups.get(k);
    if (!g) groups.set(k, (g = { dims, total: emptyAcc(), slots: slotOf ? Array.from({ length: slots }, emptyAcc) : undefined }));
    add(g.total, row);
    if (slotOf) {
      const i = slotOf(row);
      if (i >= 0 && i < slots) add(g.slots![i], row);
    }
  }
  return [...groups.values()];
}

function sortGroups(groups: { dims: string[]; sortValues: number[] }[], keys: SortKey[]): void {
  groups.sort((a, b) => {
    for (const k of keys) {
      let c: number;
      if (k.metricIndex >= 0) c = a.sortValues[k.metricIndex] - b.sortValues[k.metricIndex];
      else {
        const x = a.dims[k.dimensionIndex];
        const y = b.dims[k.dimensionIndex];
        c = x < y ? -1 : x > y ? 1 : 0;
      }
      if (c !== 0) return k.desc ? -c : c;
    }
    // Stable default: by dimension values.
    const x = a.dims.join('\u0000');
    const y = b.dims.join('\u0000');
    return x < y ? -1 : x > y ? 1 : 0;
  });
}

function stat(metrics: Metric[], pick: (i: number) => number[]): { min: Record<string, number>; max: Record<string, number> } {
  const min: Record<string, number> = {};
  const max: Record<string, number> = {};
  metrics.forEach((m, i) => {
    const vs = pick(i);
    min[m] = vs.length === 0 ? 0 : Math.min(...vs);
    max[m] = vs.length === 0 ? 0 : Math.max(...vs);
  });
  return { min, max };
}

function totalsOf(groups: Group[], metrics: Metric[]): Record<string, number> {
  const all = emptyAcc();
  for (const g of groups) {
    all.count += g.total.count;
    all.bytesIngress += g.total.bytesIngress;
    all.bytesEgress += g.total.bytesEgress;
    all.durSum += g.total.durSum;
    all.durCount += g.total.durCount;
    for (const s of g.total.samples) all.samples.push(s);
  }
  const v = values(all, metrics);
  return Object.fromEntries(metrics.map((m, i) => [m, v[i]]));
}

export function summary(rows: Row[], q: ReportQuery): Report {
  const groups = groupRows(rows, q);
  const keys = parseSort(q.sort, q.metrics, q.dimensions);
  const lines = groups.map((g) => ({ dims: g.dims, sortValues: values(g.total, q.metrics) }));
  sortGroups(lines, keys);
  const data = lines.slice(0, q.limit).map((l) => ({ dimensions: l.dims, metrics: l.sortValues }));
  const { min, max } = stat(q.metrics, (i) => data.map((d) => d.metrics[i]));
  return { data, data_lag: 0, max, min, totals: totalsOf(groups, q.metrics), rows: data.length, query: echo(q) };
}

export function bytime(rows: Row[], q: ReportQuery, delta: TimeDelta): Report {
  const intervals = timeIntervals(q.since, q.until, delta);
  const starts = intervals.map(([s]) => s.getTime());
  const slotOf = (row: Row) => {
    const t = row.t * 1000;
    let lo = 0;
    let hi = starts.length - 1;
    if (t < starts[0]) return 0;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (starts[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  const groups = groupRows(rows, q, slotOf, intervals.length);
  const keys = parseSort(q.sort, q.metrics, q.dimensions);
  const lines = groups.map((g) => ({
    dims: g.dims,
    sortValues: values(g.total, q.metrics),
    series: g.slots!.map((a) => values(a, q.metrics)),
  }));
  sortGroups(lines, keys);
  const data = lines.slice(0, q.limit).map((l) => ({
    dimensions: l.dims,
    metrics: q.metrics.map((_, i) => l.series.map((v) => v[i])),
  }));
  const { min, max } = stat(q.metrics, (i) => data.flatMap((d) => (d.metrics as number[][])[i]));
  return {
    data,
    data_lag: 0,
    max,
    min,
    totals: totalsOf(groups, q.metrics),
    rows: data.length,
    query: echo(q),
    time_intervals: intervals.map(([s, e]) => [s.toISOString(), e.toISOString()]),
  };
}

// --- time ----------------------------------------------------------------------------------------

/** Start of the interval of `delta` holding `d` (UTC; weeks start on Monday). */
export function floorTo(d: Date, delta: TimeDelta): Date {
  const y = d.getUTCFullYear();
  const mo = d.getUTCMonth();
  const day = d.getUTCDate();
  switch (delta) {
    case 'minute':
      return new Date(Math.floor(d.getTime() / 60_000) * 60_000);
    case 'dekaminute':
      return new Date(Math.floor(d.getTime() / 600_000) * 600_000);
    case 'hour':
      return new Date(Math.floor(d.getTime() / 3_600_000) * 3_600_000);
    case 'day':
      return new Date(Date.UTC(y, mo, day));
    case 'week': {
      const back = (d.getUTCDay() + 6) % 7;
      return new Date(Date.UTC(y, mo, day - back));
    }
    case 'month':
      return new Date(Date.UTC(y, mo, 1));
    case 'quarter':
      return new Date(Date.UTC(y, mo - (mo % 3), 1));
    default:
      return new Date(Date.UTC(y, 0, 1));
  }
}

function next(d: Date, delta: TimeDelta): Date {
  const y = d.getUTCFullYear();
  const mo = d.getUTCMonth();
  switch (delta) {
    case 'minute':
      return new Date(d.getTime() + 60_000);
    case 'dekaminute':
      return new Date(d.getTime() + 600_000);
    case 'hour':
      return new Date(d.getTime() + 3_600_000);
    case 'day':
      return new Date(d.getTime() + 86_400_000);
    case 'week':
      return new Date(d.getTime() + 7 * 86_400_000);
    case 'month':
      return new Date(Date.UTC(y, mo + 1, 1));
    case 'quarter':
      return new Date(Date.UTC(y, mo + 3, 1));
    default:
      return new Date(Date.UTC(y + 1, 0, 1));
  }
}

/** Intervals `[start, end)` covering [since, until]. */
export function timeIntervals(since: Date, until: Date, delta: TimeDelta): [Date, Date][] {
  const out: [Date, Date][] = [];
  let s = floorTo(since, delta);
  while (s.getTime() <= until.getTime()) {
    const e = next(s, delta);
    out.push([s, e]);
    if (out.length > MAX_INTERVALS) throw invalid(`time_delta: ${delta} gives more than ${MAX_INTERVALS} intervals between since and until; choose a larger one`);
    s = e;
  }
  return out;
}

/** The finest time_delta that gives at most 1,440 intervals (used when the request names none). */
export function defaultDelta(since: Date, until: Date): TimeDelta {
  for (const d of [...TIME_DELTAS].reverse()) {
    try {
      if (timeIntervals(since, until, d).length <= 1440) return d;
    } catch {
      // too many: try a coarser one
    }
  }
  return 'year';
}
