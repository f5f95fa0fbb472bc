/**
 * A 200 from ingestion means the events are durable: a real `outpost serve` process is killed
 * with SIGKILL while 12 writers ingest (and its pipeline rolls files under them); on the local log,
 * after a restart every acknowledged event is in the sink's finished files and none is in them twice,
 * and the same holds for the Iceberg table a second pipeline commits to (read back by icebird);
 * on NATS JetStream every acknowledged event is in the JetStream stream.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../../src/core/storage/db.ts';
import { sqlitePassOnly, testDatabase } from '../../support/server.ts';
import { spawnServe, waitExit, type ServeProcess } from '../../support/process.ts';
import { connect } from 'nats';
import { icebergRead } from 'icebird';
import { sinkFiles } from '../../../src/areas/pipelines/query.ts';
import { IcebergTable } from '../../../src/areas/pipelines/iceberg.ts';
import { until, withFileFetch } from './support.ts';

const TOKEN = 'pipelines-crash-token-0123456789abcdef';
const ACCOUNT = 'feed0000feed0000feed0000feed0000';
const dataDir = mkdtempSync(join(tmpdir(), 'outpost-pipelines-crash-'));
const pg = testDatabase();
const argsFor = (log: string, dir: string) => ['--api-port', '0', '--edge-port', '0', '--turn-port', '0', '--dns-port', '0', '--data-dir', dir, '--pipelines-tick-ms', '30', '--pipelines-log', log, ...(pg.url ? ['--database', pg.url, '--database-schema', `${pg.schema!}_${log === 'local' ? 'l' : 'n'}`] : [])];
const NATS = 'nats://127.0.0.1:4222';
const env = { OUTPOST_API_TOKEN: TOKEN, OUTPOST_ACCOUNT_ID: ACCOUNT };
let proc: ServeProcess | undefined;

afterAll(async () => {
  proc?.child.kill('SIGKILL');
  if (pg.url && pg.schema) for (const x of ['l', 'n']) await dropSchema(pg.url, `${pg.schema}_${x}`);
  rmSync(dataDir, { recursive: true, force: true });
});

async function api(base: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${base}/client/v4/accounts/${ACCOUNT}/pipelines/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as any };
}

// The NATS variant's subject is the log, not the control-plane database: SQLite pass only.
const LOGS = ['local', ...(sqlitePassOnly('the JetStream crash variant exercises the stream log, not the database') ? [] : [NATS])];

describe.each(LOGS)('pipelines durability (log %s)', (log) => {
  it('keeps every acknowledged event across kill -9, once in finished files', async () => {
    const dir = join(dataDir, log === 'local' ? 'local' : 'nats');
    const args = argsFor(log, dir);
    proc = await spawnServe(args, env);
    const stream = (await api(proc.apiUrl, 'POST', '/streams', { name: 'crash_stream' })).body.result;
    const sinkBody = { name: 'crash_sink', type: 'r2', format: { type: 'json' }, config: { bucket: 'crash', rolling_policy: { file_size_bytes: 20_000, inactivity_seconds: 0.3 } } };
    const sink = (await api(proc.apiUrl, 'POST', '/sinks', sinkBody)).body.result;
    expect((await api(proc.apiUrl, 'POST', '/pipelines', { name: 'crash_pipe', sql: 'INSERT INTO crash_sink SELECT id, w FROM crash_stream' })).status).toBe(200);
    if (log === 'local') {
      const tableSink = { name: 'crash_table', type: 'r2_data_catalog', config: { bucket: 'crash', table_name: 'events', token: 't', rolling_policy: { file_size_bytes: 20_000, inactivity_seconds: 0.3 } } };
      expect((await api(proc.apiUrl, 'POST', '/sinks', tableSink)).status).toBe(200);
      expect((await api(proc.apiUrl, 'POST', '/pipelines', { name: 'crash_table_pipe', sql: 'INSERT INTO crash_table SELECT id FROM crash_stream' })).status).toBe(200);
    }

    const acknowledged: string[] = [];
    let stop = false;
    const base = proc.apiUrl;
    const writers = Array.from({ length: 12 }, async (_, w) => {
      for (let i = 0; i < 5000 && !stop; i++) {
        const batch = Array.from({ length: 10 }, (_, k) => ({ id: `w${w}-${i}-${k}`, w, pad: 'p'.repeat(40) }));
        try {
          const res = await fetch(`${base}/pipelines/ingest/${stream.id}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(batch) });
          if (res.status === 200) acknowledged.push(...batch.map((e) => e.id));
          else await res.arrayBuffer();
        } catch {
          return; // connection reset by the kill
        }
      }
    });
    while (acknowledged.length < 2000) await new Promise((r) => setTimeout(r, 10));
    proc.child.kill('SIGKILL');
    stop = true;
    await Promise.all(writers);
    await waitExit(proc.child);
    const acked = new Set(acknowledged);

    if (log !== 'local') {
      // JetStream holds the log: every acknowledged event is there, whatever became of Outpost.
      const nc = await connect({ servers: '127.0.0.1:4222' });
      const jsm = await nc.jetstreamManager();
      const name = `OUTPOST_PL_${stream.id}`;
      const info = await jsm.streams.info(name);
      const stored = new Set<string>();
      for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
        const m = await jsm.streams.getMessage(name, { seq });
        for (const e of JSON.parse(Buffer.from(m.data).toString()) as { id: string }[]) stored.add(e.id);
      }
      await jsm.streams.delete(name);
      await nc.close();
      const lost = [...acked].filter((id) => !stored.has(id));
      expect(lost.length, `acknowledged events not in JetStream, e.g. ${lost.slice(0, 3).join(', ')}`).toBe(0);
      expect(acked.size).toBeGreaterThanOrEqual(2000);
      proc = undefined;
      return;
    }

    proc = await spawnServe(args, env);
    const count = () => {
      const seen = new Map<string, number>();
      for (const f of sinkFiles(join(dir, 'pipelines', 'buckets'), ACCOUNT, sink)) {
        for (const line of readFileSync(f, 'utf8').split('\n')) {
          if (!line) continue;
          const id = JSON.parse(line).id as string;
          seen.set(id, (seen.get(id) ?? 0) + 1);
        }
      }
      return seen;
    };
    let seen = count();
    const deadline = Date.now() + 20_000;
    while ([...acked].some((id) => !seen.has(id)) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      seen = count();
    }
    const missing = [...acked].filter((id) => !seen.has(id));
    expect(missing.length, `missing acknowledged events, e.g. ${missing.slice(0, 3).join(', ')}`).toBe(0);
    const twice = [...seen].filter(([, n]) => n > 1);
    expect(twice.length, `events in finished files twice, e.g. ${twice.slice(0, 3).map(([id]) => id).join(', ')}`).toBe(0);
    expect(acked.size).toBeGreaterThanOrEqual(2000);
    // The results query sees the same count.
    const q = await fetch(`${proc.apiUrl}/client/v4/accounts/${ACCOUNT}/pipelines/v1/query`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'text/plain' }, body: 'SELECT COUNT(*) AS n FROM crash_sink' });
    const n = Number(((await q.json()) as any).result.data[0].n);
    expect(n).toBe(seen.size);

    // The Iceberg table: every acknowledged event once in the current snapshot.
    const table = new IcebergTable(join(dir, 'pipelines', 'buckets', ACCOUNT, 'crash', '__r2_data_catalog', 'default', 'events'));
    const total = () => Number(table.metadata().metadata.snapshots.at(-1)?.summary['total-records'] ?? 0);
    let rows: { id: string }[] = [];
    const inTable = new Map<string, number>();
    // Events logged but never acknowledged (the kill cut their answer) count too, so poll the rows.
    await until(
      'every acknowledged event in the table',
      async () => {
        if (total() < acked.size) return undefined;
        rows = (await withFileFetch(() => icebergRead({ tableUrl: table.location, metadataFileName: basename(fileURLToPath(table.metadata().location)) }))) as { id: string }[];
        inTable.clear();
        for (const r of rows) inTable.set(r.id, (inTable.get(r.id) ?? 0) + 1);
        return [...acked].every((id) => inTable.has(id)) || undefined;
      },
      20_000,
    ).catch(() => undefined);
    const missingInTable = [...acked].filter((id) => !inTable.has(id));
    expect(missingInTable.length, `acknowledged events missing from the table, e.g. ${missingInTable.slice(0, 3).join(', ')}`).toBe(0);
    const twiceInTable = [...inTable].filter(([, c]) => c > 1);
    expect(twiceInTable.length, `events in the table twice, e.g. ${twiceInTable.slice(0, 3).map(([id]) => id).join(', ')}`).toBe(0);
    expect(rows.length).toBe(total());
    // Clean up (on NATS this deletes the JetStream stream too).
    const pipes = (await api(proc.apiUrl, 'GET', '/pipelines')).body.result;
    for (const p of pipes) await api(proc.apiUrl, 'DELETE', `/pipelines/${p.id}`);
    expect((await api(proc.apiUrl, 'DELETE', `/streams/${stream.id}`)).status).toBe(200);
    proc.child.kill('SIGKILL');
    await waitExit(proc.child);
    proc = undefined;
  }, 90_000);
});
