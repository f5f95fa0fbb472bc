/**
 * The worker thread of `transform-thread.ts`: compiles each pipeline's SQL once (from the plain
 * spec the main thread sends) and transforms the log records it is given. Messages in:
 * `{id, key, spec, payloads}`; out: `{id, out}` or `{id, error}`.
 */
import { parentPort } from 'node:worker_threads';
import { inlineTransform, type TransformFn, type TransformSpec } from './transform.ts';

interface Job {
  id: number;
  key: string;
  spec: TransformSpec;
  payloads: Uint8Array[];
}

const compiled = new Map<string, Promise<TransformFn>>();
const port = parentPort!;

port.on('message', (m: Job | { forget: string }) => {
  if ('forget' in m) {
    compiled.delete(m.forget);
    return;
  }
  let fn = compiled.get(m.key);
  if (!fn) {
    fn = inlineTransform(m.spec);
    compiled.set(m.key, fn);
    fn.catch(() => compiled.delete(m.key));
  }
  fn.then(
    (f) => {
      const out = f(m.payloads);
      // The text is a fresh buffer of its own: hand it over instead of copying it.
      port.postMessage({ id: m.id, out }, [out.text.buffer as ArrayBuffer]);
    },
  ).catch((err: unknown) => port.postMessage({ id: m.id, error: String((err as Error)?.message ?? err) }));
});
port.postMessage({ ready: true });
