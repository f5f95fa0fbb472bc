/** Shared helpers of the dispatch namespace tests: customer script uploads and asset uploads. */
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { TestServer } from '../../support/server.ts';
import { putModule } from '../workers/helpers.ts';

export const HELLO = (who: string) => `export default {
  async fetch(request, env) {
    return new Response('hello from ${who} ' + new URL(request.url).pathname, { headers: { 'x-customer': '${who}' } });
  },
};`;

/** PUT of a customer script in the spec's form (JSON metadata part, module part). */
export function putCustomer(t: TestServer, ns: string, name: string, source: string, metadata: Record<string, unknown> = {}) {
  return putModule(t, `/workers/dispatch/namespaces/${ns}/scripts/${name}`, source, metadata);
}

export async function createNamespace(t: TestServer, name: string): Promise<void> {
  const res = await t.call('POST', `/accounts/${t.accountId}/workers/dispatch/namespaces`, {
    name,
  });
  if (res.status !== 200) throw new Error(res.text);
}

/** The spec's hash: first 16 bytes of SHA-256 (hex), over `salt + content` to isolate a customer. */
export function hashOf(content: string, salt = ''): string {
  return createHash('sha256')
    .update(salt + content)
    .digest('hex')
    .slice(0, 32);
}

/** Runs the three-step asset upload; returns the completion token and what was asked for. */
export async function uploadAssets(
  t: TestServer,
  ns: string,
  script: string,
  files: Record<string, string>,
  salt = '',
): Promise<{ jwt: string; asked: string[] }> {
  const manifest: Record<string, { hash: string; size: number }> = {};
  const byHash = new Map<string, string>();
  for (const [p, c] of Object.entries(files)) {
    const hash = hashOf(c, salt);
    manifest[p] = { hash, size: Buffer.byteLength(c) };
    byHash.set(hash, c);
  }
  const session = await t.call(
    'POST',
    `/accounts/${t.accountId}/workers/dispatch/namespaces/${ns}/scripts/${script}/assets-upload-session`,
    { manifest },
  );
  if (session.status !== 200) throw new Error(session.text);
  let jwt: string = session.body.result.jwt;
  const asked: string[] = [];
  for (const bucket of session.body.result.buckets as string[][]) {
    const form = new FormData();
    for (const h of bucket) {
      asked.push(h);
      form.append(
        h,
        new Blob([Buffer.from(byHash.get(h)!).toString('base64')], { type: 'text/plain' }),
        h,
      );
    }
    const up = await fetch(`${t.api}/accounts/${t.accountId}/workers/assets/upload?base64=true`, {
      method: 'POST',
      headers: { authorization: `Bearer ${session.body.result.jwt}` },
      body: form,
    });
    const body = (await up.json()) as any;
    if (up.status !== 201 && up.status !== 202) throw new Error(JSON.stringify(body));
    if (body.result.jwt) jwt = body.result.jwt;
  }
  return { jwt, asked };
}

/**
 * One GET to the edge with a long timeout: a runaway customer is stopped after its CPU time, and
 * on a loaded machine that much CPU can take many seconds of wall time to be spent.
 */
export function slowEdgeGet(
  edge: URL,
  host: string,
  path: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: edge.hostname, port: edge.port, path, headers: { host }, timeout: 120_000 },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode!, body: text }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('edge request timed out')));
    req.on('error', reject);
    req.end();
  });
}

/** PUT of an assets-only customer script: a metadata part and no module. */
export async function putAssetsOnly(
  t: TestServer,
  ns: string,
  name: string,
  metadata: Record<string, unknown>,
): Promise<{ status: number; body: any }> {
  const form = new FormData();
  form.append('metadata', new Blob([JSON.stringify(metadata)], { type: 'application/json' }));
  const res = await fetch(
    `${t.api}/accounts/${t.accountId}/workers/dispatch/namespaces/${ns}/scripts/${name}`,
    { method: 'PUT', headers: { authorization: `Bearer ${t.token}` }, body: form },
  );
  return { status: res.status, body: (await res.json()) as any };
}
