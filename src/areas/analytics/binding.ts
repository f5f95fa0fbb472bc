/**
 * The `analytics_engine` script binding (`{type: 'analytics_engine', name, dataset}`; `dataset`
 * defaults to the binding's name). Inside the script, `env[name].writeDataPoint(point)` copies the
 * point into a per-request queue and returns at once; it never throws. The queue is sent to Node
 * in one call as soon as the code that wrote it yields, through a Node service binding named
 * `__OUTPOST_AE_<name>` (kept alive with `waitUntil`); the script never waits for it, but the
 * request's response leaves only once its points are sent (the wrapper's settle step), because the
 * runtime refuses binding calls of a request that has ended.
 * Node validates each point (limits are checked there, a point over a limit is dropped and
 * logged), samples, timestamps and buffers it for the store.
 */
import type { NodeBinding } from '../workers/index.ts';
import { DATASET_NAME, RESERVED_PREFIX, type AnalyticsEngine, type RawPoint } from './engine.ts';

export const BINDING_TYPE = 'analytics_engine';
const NODE_PREFIX = '__OUTPOST_AE_';
/** Points in one call from a script; more are dropped (the platform allows 250 per invocation). */
export const MAX_POINTS_PER_CALL = 250;

export interface UploadedBinding {
  type: string;
  name: string;
  [key: string]: unknown;
}

/** Checks an uploaded binding; returns the problem, or undefined. */
export function checkBinding(b: UploadedBinding): string | undefined {
  const ds = b.dataset ?? b.name;
  if (typeof ds !== 'string' || !DATASET_NAME.test(ds))
    return 'dataset must be 1-64 letters, digits or underscores, starting with a letter or underscore';
  if (ds.startsWith(RESERVED_PREFIX)) return `dataset names starting with ${RESERVED_PREFIX} are reserved for the platform's own datasets`;
  return undefined;
}

/** Node side: the service bindings one script's analytics bindings need. */
export function nodeBindings(engine: () => AnalyticsEngine, accountId: string, b: UploadedBinding): Record<string, NodeBinding> {
  const dataset = String(b.dataset ?? b.name);
  return {
    [NODE_PREFIX + b.name]: {
      type: 'service',
      fetch: async (req) => {
        let points: unknown;
        try {
          points = await req.json();
        } catch {
          points = undefined;
        }
        if (Array.isArray(points)) engine().write(accountId, dataset, points.slice(0, MAX_POINTS_PER_CALL) as RawPoint[]);
        return new Response(null, { status: 204 });
      },
    },
  };
}

/**
 * Script side: a function `(env, out, waitUntil)` that puts the binding objects into the env the
 * user's code sees.
 */
export function shimSource(b: UploadedBinding): string {
  return `((env, out, waitUntil) => {
  const target = env[${JSON.stringify(NODE_PREFIX + b.name)}];
  let queue = [];
  let sending = Promise.resolve();
  const send = () => {
    if (queue.length === 0) return sending;
    const batch = queue;
    queue = [];
    const call = target.fetch('http://analytics.internal/write', { method: 'POST', body: JSON.stringify(batch) })
      .then((r) => r.arrayBuffer(), () => {})
      .catch(() => {});
    sending = Promise.all([sending, call]);
    return sending;
  };
  const text = (v) => {
    if (v === null || v === undefined) return null;
    if (typeof v === 'string') return v;
    if (v instanceof ArrayBuffer) return new TextDecoder().decode(v);
    if (ArrayBuffer.isView(v)) return new TextDecoder().decode(v);
    return String(v);
  };
  out[${JSON.stringify(b.name)}] = {
    writeDataPoint(point) {
      try {
        const p = point || {};
        queue.push({
          blobs: Array.isArray(p.blobs) ? p.blobs.map(text) : p.blobs === undefined ? undefined : 'invalid',
          doubles: Array.isArray(p.doubles) ? p.doubles.map((d) => (typeof d === 'number' ? (Number.isFinite(d) ? d : 'invalid') : d === null || d === undefined ? null : 'invalid')) : p.doubles === undefined ? undefined : 'invalid',
          indexes: Array.isArray(p.indexes) ? p.indexes.map(text) : p.indexes === undefined ? undefined : 'invalid',
        });
        if (queue.length === 1) {
          const later = Promise.resolve().then(send);
          try { waitUntil(later); } catch {}
        }
      } catch (e) {
        try { console.warn('writeDataPoint: point dropped: ' + (e && e.message)); } catch {}
      }
    },
  };
  return send;
})`;
}
