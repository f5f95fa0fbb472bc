/**
 * The `pipelines` script binding (`{type: 'pipelines', name, pipeline: <stream id or name>}`; a
 * `stream` key is accepted too). Inside the script, `await env[name].send(event | events)`
 * resolves once the events are in the stream's durable log and rejects with the validation
 * message when they do not fit the stream (or the stream is gone, its binding disabled, or the
 * stream is over its throughput). A `send` the script does not await is still completed before
 * the request's response leaves (the wrapper's settle step waits for it).
 */
import type { NodeBinding } from '../workers/index.ts';
import { ApiError } from '../../core/errors.ts';
import { assertJsonDepth } from '../../core/json.ts';
import type { Executor } from '../../core/storage/db.ts';
import type { PipelinesService } from './service.ts';
import { legacyPipelines, streams } from './store.ts';

export const BINDING_TYPE = 'pipelines';
const NODE_PREFIX = '__OUTPOST_PL_';

export interface UploadedBinding {
  type: string;
  name: string;
  [key: string]: unknown;
}

function target(b: UploadedBinding): unknown {
  return b.pipeline ?? b.stream;
}

export function checkBinding(b: UploadedBinding): string | undefined {
  const t = target(b);
  if (typeof t !== 'string' || t.length === 0 || t.length > 128) return 'a pipelines binding needs pipeline: the id or name of a stream';
  return undefined;
}

export function nodeBindings(service: () => PipelinesService, db: () => Executor, accountId: string, b: UploadedBinding): Record<string, NodeBinding> {
  const ref = String(target(b));
  return {
    [NODE_PREFIX + b.name]: {
      type: 'service',
      fetch: async (req) => {
        const fail = (status: number, message: string) => new Response(message, { status, headers: { 'content-type': 'text/plain; charset=utf-8' } });
        try {
          const byId = /^[0-9a-f]{32}$/.test(ref) ? await streams.get(db(), accountId, ref) : undefined;
          const byName = async (name: string) => (await streams.list(db(), accountId, { filters: [{ field: 'name', op: 'eq', value: name }], withTotal: false })).items[0];
          // A binding written for the deprecated API names its pipeline: that pipeline's stream.
          const legacy = async () => {
            const l = (await legacyPipelines.list(db(), accountId, { filters: [{ field: 'name', op: 'eq', value: ref }], withTotal: false })).items[0];
            return l ? streams.get(db(), accountId, l.body.stream_id) : undefined;
          };
          const doc = byId ?? (await byName(ref)) ?? (await legacy());
          if (!doc) return fail(404, `Stream ${ref} does not exist in this account`);
          if (!doc.body.worker_binding.enabled) return fail(403, `Stream ${doc.body.name} has worker_binding.enabled false`);
          const body = Buffer.from(await req.arrayBuffer());
          assertJsonDepth(body, 'the events sent');
          let parsed: unknown;
          try {
            parsed = JSON.parse(body.toString('utf8'));
          } catch {
            return fail(400, 'send() takes an object or an array of objects');
          }
          const n = await service().ingest(doc.body, Array.isArray(parsed) ? parsed : [parsed], { allowSingle: true });
          return Response.json({ committed: n });
        } catch (err) {
          if (err instanceof ApiError) return fail(err.status, err.errors.map((e) => e.message).join('; '));
          return fail(500, `send failed: ${(err as Error).message}`);
        }
      },
    },
  };
}

export function shimSource(b: UploadedBinding): string {
  return `((env, out, waitUntil) => {
  const target = env[${JSON.stringify(NODE_PREFIX + b.name)}];
  const inflight = new Set();
  out[${JSON.stringify(b.name)}] = {
    send(data) {
      const p = (async () => {
        if (data === null || typeof data !== 'object') throw new TypeError('send() takes an object or an array of objects');
        const body = JSON.stringify(data);
        const res = await target.fetch('http://pipelines.internal/send', { method: 'POST', body });
        const text = await res.text();
        if (!res.ok) throw new Error('Pipeline send failed (' + res.status + '): ' + text);
      })();
      inflight.add(p);
      const done = () => inflight.delete(p);
      p.then(done, done);
      try { waitUntil(p.catch(() => {})); } catch {}
      return p;
    },
  };
  return () => Promise.all([...inflight].map((p) => p.catch(() => {})));
})`;
}
