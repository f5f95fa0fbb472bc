/**
 * Every create the server acknowledged survives `kill -9` in the middle of a burst.
 * Runs on SQLite, or on PostgreSQL when OUTPOST_TEST_DATABASE is set.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../src/core/storage/db.ts';
import { testDatabase } from '../support/server.ts';
import { spawnServe, waitExit, type ServeProcess } from '../support/process.ts';

const TOKEN = 'crash-test-root-token-0123456789abcdef';
const ACCOUNT = 'c0ffee00c0ffee00c0ffee00c0ffee00';
const dataDir = mkdtempSync(join(tmpdir(), 'outpost-crash-'));
const pg = testDatabase();
const args = ['--api-port', '0', '--edge-port', '0', '--turn-port', '0', '--dns-port', '0', '--data-dir', dataDir, ...(pg.url ? ['--database', pg.url, '--database-schema', pg.schema!] : [])];
const env = { OUTPOST_API_TOKEN: TOKEN, OUTPOST_ACCOUNT_ID: ACCOUNT };
let proc: ServeProcess | undefined;

afterAll(async () => {
  proc?.child.kill('SIGKILL');
  if (pg.url && pg.schema) await dropSchema(pg.url, pg.schema);
  rmSync(dataDir, { recursive: true, force: true });
});

async function api(base: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${base}/client/v4${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as any };
}

describe('durability', () => {
  it('keeps every acknowledged DNS record across kill -9', async () => {
    proc = await spawnServe(args, env);
    const zone = (await api(proc.apiUrl, 'POST', '/zones', { name: 'crash.test', account: { id: ACCOUNT } })).body.result;
    const acknowledged: string[] = [];
    let stop = false;
    const base = proc.apiUrl;
    // 16 writers create records until the process dies under them (bounded to 5,000 attempts).
    const writers = Array.from({ length: 16 }, async (_, w) => {
      for (let i = 0; i < 5000 && !stop; i++) {
        try {
          const res = await api(base, 'POST', `/zones/${zone.id}/dns_records`, { type: 'TXT', name: `w${w}-${i}`, content: `writer ${w} item ${i}` });
          if (res.status === 200) acknowledged.push(res.body.result.id);
        } catch {
          return; // connection reset by the kill
        }
      }
    });
    while (acknowledged.length < 300) await new Promise((r) => setTimeout(r, 10));
    proc.child.kill('SIGKILL');
    stop = true;
    await Promise.all(writers);
    await waitExit(proc.child);

    proc = await spawnServe(args, env);
    const listed = new Set<string>();
    for (let page = 1; ; page++) {
      const res = await api(proc.apiUrl, 'GET', `/zones/${zone.id}/dns_records?per_page=1000&page=${page}`);
      expect(res.status).toBe(200);
      if (res.body.result.length === 0) break;
      for (const r of res.body.result) listed.add(r.id);
    }
    const lost = acknowledged.filter((id) => !listed.has(id));
    expect(acknowledged.length).toBeGreaterThanOrEqual(300);
    expect(lost).toEqual([]);
    proc.child.kill('SIGTERM');
    expect((await waitExit(proc.child)).code).toBe(0);
  }, 60_000);
});
