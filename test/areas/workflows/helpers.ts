/** Shared helpers for the workflows tests: script upload, waiting for a status, a side-effect counter. */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TestServer } from '../../support/server.ts';

export interface UploadOptions {
  bindings?: unknown[];
  mainModule?: string;
  compatibilityDate?: string;
}

/** Uploads a module script with the spec's multipart form (JSON `metadata` part + module part). */
export async function uploadScript(
  t: TestServer,
  name: string,
  source: string,
  opts: UploadOptions = {},
) {
  const form = new FormData();
  const main = opts.mainModule ?? 'index.js';
  form.append(
    'metadata',
    new Blob(
      [
        JSON.stringify({
          main_module: main,
          bindings: opts.bindings ?? [],
          compatibility_date: opts.compatibilityDate ?? '2025-01-01',
        }),
      ],
      {
        type: 'application/json',
      },
    ),
  );
  form.append(main, new Blob([source], { type: 'application/javascript+module' }), main);
  const res = await fetch(`${t.api}/accounts/${t.accountId}/workers/scripts/${name}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${t.token}` },
    body: form,
  });
  const body = (await res.json()) as any;
  return { status: res.status, body };
}

/** Uploads a script holding workflow classes and registers each as a workflow. */
export async function deployWorkflow(
  t: TestServer,
  script: string,
  source: string,
  workflows: Record<string, string>,
  extra: { concurrency?: number; steps?: number; retention?: unknown } = {},
) {
  const bindings = Object.entries(workflows).map(([wf, cls]) => ({
    type: 'workflow',
    name: `WF_${wf.replace(/[^A-Za-z0-9]/g, '_').toUpperCase()}`,
    workflow_name: wf,
    class_name: cls,
  }));
  const up = await uploadScript(t, script, source, { bindings });
  if (up.status !== 200) throw new Error(`upload failed: ${JSON.stringify(up.body)}`);
  for (const [wf, cls] of Object.entries(workflows)) {
    const body: Record<string, unknown> = { class_name: cls, script_name: script };
    if (extra.concurrency) body.concurrency = { limit: extra.concurrency };
    if (extra.steps) body.limits = { steps: extra.steps };
    if (extra.retention) body.default_retention = extra.retention;
    const res = await t.call('PUT', `/accounts/${t.accountId}/workflows/${wf}`, body);
    if (res.status !== 200) throw new Error(`workflow PUT failed: ${res.text}`);
  }
}

export function sleep(ms: number) {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls until `check` returns a value (not undefined), or fails after `timeoutMs`. */
export async function until<T>(
  what: string,
  check: () => Promise<T | undefined>,
  timeoutMs = 15_000,
  everyMs = 25,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await sleep(everyMs);
  }
}

export async function instance(t: TestServer, wf: string, id: string) {
  const res = await t.call('GET', `/accounts/${t.accountId}/workflows/${wf}/instances/${id}`);
  if (res.status !== 200) throw new Error(`GET instance ${id}: ${res.text}`);
  return res.body.result;
}

/** An instance's output as a value (details show objects as JSON text). */
export function outputOf(r: { output: unknown }): any {
  return typeof r.output === 'string' && /^[[{]/.test(r.output) ? JSON.parse(r.output) : r.output;
}

export async function waitStatus(
  t: TestServer,
  wf: string,
  id: string,
  status: string | string[],
  timeoutMs = 15_000,
) {
  const want = Array.isArray(status) ? status : [status];
  return until(
    `${wf}/${id} to be ${want.join('|')}`,
    async () => {
      const r = await instance(t, wf, id);
      return want.includes(r.status) ? r : undefined;
    },
    timeoutMs,
  );
}

export async function create(t: TestServer, wf: string, body: unknown = {}) {
  const res = await t.call('POST', `/accounts/${t.accountId}/workflows/${wf}/instances`, body);
  if (res.status !== 200) throw new Error(`create: ${res.text}`);
  return res.body.result as { id: string; status: string };
}

/**
 * An HTTP server counting hits per key (`POST /hit/<key>` answers `{key, n}`), for the side effects
 * of steps. `hold(key)` keeps answers for that key pending until `release(key)`.
 */
export interface Counter {
  url: string;
  counts: Map<string, number>;
  count(key: string): number;
  hold(key: string): void;
  release(key: string): void;
  waiting(key: string): number;
  close(): Promise<void>;
}

export async function startCounter(onHit?: (key: string, n: number) => void): Promise<Counter> {
  const counts = new Map<string, number>();
  const held = new Map<string, (() => void)[]>();
  const server = createServer((req, res) => {
    const key = decodeURIComponent((req.url ?? '/').replace(/^\/hit\//, ''));
    const n = (counts.get(key) ?? 0) + 1;
    counts.set(key, n);
    onHit?.(key, n);
    req.resume();
    const answer = () => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ key, n }));
    };
    const queue = held.get(key);
    if (queue) queue.push(answer);
    else answer();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    counts,
    count: (key) => counts.get(key) ?? 0,
    hold: (key) => {
      if (!held.has(key)) held.set(key, []);
    },
    release: (key) => {
      const queue = held.get(key) ?? [];
      held.delete(key);
      for (const answer of queue) answer();
    },
    waiting: (key) => held.get(key)?.length ?? 0,
    close: () =>
      new Promise((r) => {
        for (const k of [...held.keys()]) {
          const queue = held.get(k) ?? [];
          held.delete(k);
          for (const answer of queue) answer();
        }
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** Sends a request to a script's fetch handler through the API port. */
export async function callScript(t: TestServer, script: string, path: string, body?: unknown) {
  const res = await fetch(
    `${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/${script}/invoke${path}`,
    {
      method: body === undefined ? 'GET' : 'POST',
      headers: { authorization: `Bearer ${t.token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    },
  );
  const text = await res.text();
  let parsed: any;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, body: parsed, text };
}

export const BINDING = (wf: string) => `WF_${wf.replace(/[^A-Za-z0-9]/g, '_').toUpperCase()}`;
