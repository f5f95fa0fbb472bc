/**
 * Snippets stored before a restart run again afterwards: the runtime starts empty and the edge
 * loads a snippet from storage on its first matching request. Needs the same database across two
 * servers, which the test harness gives on SQLite (a PostgreSQL test server gets a fresh schema).
 */
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createZone,
  startTestServer,
  testDatabase,
  type TestServer,
} from '../../support/server.ts';
import { echoHandler, startOrigin, type Origin } from '../../support/origins.ts';

const ORIGIN = '127.0.70.3';
const onPostgres = testDatabase().url !== undefined;
const dataDir = mkdtempSync(join(tmpdir(), 'outpost-snippets-restart-'));
let t: TestServer | undefined;
let origin: Origin | undefined;

function get(
  edge: string,
  host: string,
  path: string,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const u = new URL(edge);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: u.hostname, port: u.port, path, headers: { host }, timeout: 15_000 },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
}

afterAll(async () => {
  await t?.stop();
  await origin?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('snippets across a restart', () => {
  it.skipIf(onPostgres)(
    'runs a stored snippet after a restart, loading it on the first request (SQLite only: a PostgreSQL test server gets a fresh schema)',
    async () => {
      origin = await startOrigin(ORIGIN, echoHandler);
      t = await startTestServer({}, { dataDir });
      const zone = await createZone(t, 'restart-snip.test');
      await t.call('POST', `/zones/${zone.id}/dns_records`, {
        type: 'A',
        name: 'www',
        content: ORIGIN,
        proxied: true,
        ttl: 1,
      });
      const form = new FormData();
      form.set('metadata', JSON.stringify({ main_module: 'main.js' }));
      form.set(
        'files',
        new Blob([
          `export default { async fetch(request) { const r = await fetch(request); const o = new Response(r.body, r); o.headers.set('x-survived', 'yes'); return o; } };`,
        ]),
        'main.js',
      );
      const up = await fetch(`${t.api}/zones/${zone.id}/snippets/keep`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${t.token}` },
        body: form,
      });
      expect(up.status).toBe(200);
      await t.call('PUT', `/zones/${zone.id}/snippets/snippet_rules`, {
        rules: [{ snippet_name: 'keep', expression: 'true', enabled: true }],
      });
      await t.stop();

      t = await startTestServer({}, { dataDir });
      const edge = t.server.listeners.find((l) => l.name.startsWith('edge'))!.address;
      const res = await get(edge, 'www.restart-snip.test', '/after');
      expect(res.status).toBe(200);
      expect(res.headers['x-survived']).toBe('yes');
      expect(JSON.parse(res.body).url).toBe('/after');
    },
  );
});
