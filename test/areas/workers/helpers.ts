/** Shared helpers of the workers tests: script upload and plain HTTP requests to the edge. */
import http from 'node:http';
import type { TestServer } from '../../support/server.ts';

export interface EdgeResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

export function edgeUrlOf(t: TestServer): URL {
  return new URL(t.server.listeners.find((l) => l.name.startsWith('edge'))!.address);
}

/** One request to the edge with the given Host header. */
export function edgeGet(
  edge: URL,
  host: string,
  path = '/',
  opts: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<EdgeResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: edge.hostname,
        port: edge.port,
        path,
        method: opts.method ?? 'GET',
        headers: { host, ...opts.headers },
        timeout: 20_000,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('edge request timed out')));
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** Uploads a module script in the JSON-metadata form; returns status and envelope. */
export function putScript(t: TestServer, name: string, source: string, metadata: Record<string, unknown> = {}) {
  return putModule(t, `/workers/scripts/${name}`, source, metadata);
}

/** PUT of a module script in the spec's form (JSON metadata part, module part) to an account path. */
export async function putModule(
  t: TestServer,
  accountPath: string,
  source: string,
  metadata: Record<string, unknown> = {},
) {
  const form = new FormData();
  const meta = { main_module: 'index.js', compatibility_date: '2025-01-01', ...metadata };
  form.append('metadata', new Blob([JSON.stringify(meta)], { type: 'application/json' }));
  form.append('index.js', new Blob([source], { type: 'application/javascript+module' }), 'index.js');
  const res = await fetch(`${t.api}/accounts/${t.accountId}${accountPath}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${t.token}` },
    body: form,
  });
  return { status: res.status, body: (await res.json()) as any };
}

export async function deployScript(
  t: TestServer,
  name: string,
  source: string,
  metadata: Record<string, unknown> = {},
): Promise<void> {
  const res = await putScript(t, name, source, metadata);
  if (res.status !== 200) throw new Error(`upload ${name}: ${JSON.stringify(res.body)}`);
}
