/**
 * The same pipeline semantics on the NATS JetStream log (`--pipelines-log nats://127.0.0.1:4222`):
 * validation before the log, a typed pipeline into JSON files, and a restart of the server on the
 * same data directory that continues from its checkpoint without writing any event twice; a
 * Parquet body is bounded by the JetStream server's max_payload.
 * Its subject is the stream log, not the control-plane database: SQLite pass only.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'nats';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, describe, expect, it } from 'vitest';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
import { sinkFiles } from '../../../src/areas/pipelines/query.ts';

const NATS = 'nats://127.0.0.1:4222';
const ACCOUNT = 'ba5eba11ba5eba11ba5eba11ba5eba11';
const dataDir = mkdtempSync(join(tmpdir(), 'outpost-pipelines-nats-'));
let t: TestServer | undefined;
let streamId: string | undefined;
let parquetStreamId: string | undefined;

afterAll(async () => {
  await t?.stop();
  for (const id of [streamId, parquetStreamId]) {
    if (!id) continue;
    const nc = await connect({ servers: '127.0.0.1:4222' });
    await (await nc.jetstreamManager()).streams.delete(`OUTPOST_PL_${id}`).catch(() => {});
    await nc.close();
  }
  rmSync(dataDir, { recursive: true, force: true });
});

const start = () => startTestServer({ pipelinesLog: NATS, pipelinesTickMs: 40, accountId: ACCOUNT }, { dataDir });

async function until<T>(what: string, fn: () => T | undefined, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 30));
  }
}

describe.skipIf(sqlitePassOnly('the NATS variant exercises the stream log, not the database'))('pipelines on NATS JetStream', () => {
  it('ingests, transforms into files and continues after a restart without duplicates', async () => {
    t = await start();
    const a = `/accounts/${ACCOUNT}/pipelines/v1`;
    const stream = (await t.call('POST', `${a}/streams`, { name: 'js_events', schema: { fields: [{ name: 'n', type: 'int64', required: true }, { name: 'tag', type: 'string' }] } })).body.result;
    streamId = stream.id;
    const sink = (await t.call('POST', `${a}/sinks`, { name: 'js_out', type: 'r2', config: { bucket: 'js-bucket', rolling_policy: { inactivity_seconds: 0.2, file_size_bytes: 200 } } })).body.result;
    expect((await t.call('POST', `${a}/pipelines`, { name: 'js_pipe', sql: "INSERT INTO js_out SELECT n, UPPER(tag) AS tag FROM js_events WHERE n % 2 = 0" })).status).toBe(200);
    const send = async (body: unknown) => {
      const res = await fetch(`${t!.url}/pipelines/ingest/${stream.id}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      return res.status;
    };
    expect(await send([{ n: 'x' }])).toBe(400);
    for (let b = 0; b < 5; b++) expect(await send(Array.from({ length: 10 }, (_, i) => ({ n: b * 10 + i, tag: `t${b}` })))).toBe(200);
    const rows = () => sinkFiles(join(dataDir, 'pipelines', 'buckets'), ACCOUNT, sink).flatMap((f) => readFileSync(f, 'utf8').trim().split('\n').map((l) => JSON.parse(l)));
    await until('25 rows', () => (rows().length >= 25 ? true : undefined));
    await t.stop();
    t = await start();
    for (let b = 5; b < 8; b++) expect(await send(Array.from({ length: 10 }, (_, i) => ({ n: b * 10 + i, tag: `t${b}` })))).toBe(200);
    await until('40 rows', () => (rows().length >= 40 ? true : undefined));
    await new Promise((r) => setTimeout(r, 300));
    const ns = rows().map((r) => r.n as number).sort((x, y) => x - y);
    expect(ns).toEqual(Array.from({ length: 40 }, (_, i) => i * 2));
    expect(rows().find((r) => r.n === 42)).toEqual({ n: 42, tag: 'T4' });
  }, 60_000);

  it('a Parquet body is logged as one JetStream message, and one above the server\'s max_payload is refused', async () => {
    t ??= await start();
    const a = `/accounts/${ACCOUNT}/pipelines/v1`;
    const stream = (await t.call('POST', `${a}/streams`, { name: 'js_parquet', format: { type: 'parquet' } })).body.result;
    parquetStreamId = stream.id;
    const duck = await DuckDBInstance.create(':memory:');
    const conn = await duck.connect();
    const file = async (rows: number) => {
      const path = join(dataDir, `rows-${rows}.parquet`);
      await conn.run(`COPY (SELECT range AS n, 'tag' AS tag FROM range(${rows})) TO '${path}' (FORMAT parquet)`);
      return readFileSync(path);
    };
    try {
      const send = async (body: Buffer) => {
        const res = await fetch(`${t!.url}/pipelines/ingest/${stream.id}`, { method: 'POST', headers: { 'content-type': 'application/vnd.apache.parquet' }, body: new Uint8Array(body) });
        return { status: res.status, body: (await res.json()) as { result?: { committed: number }; errors: { message: string }[] } };
      };
      expect((await send(await file(1000))).body.result).toEqual({ committed: 1000 });
      // 100,000 rows are ~2.5 MB as JSON: past the default max_payload of 1 MB.
      const big = await send(await file(100_000));
      expect(big.status).toBe(413);
      expect(big.body.errors[0].message).toMatch(/100000 rows are \d+ bytes as JSON, more than the \d+ one request may add/);
    } finally {
      conn.closeSync();
      duck.closeSync();
    }
  }, 60_000);
});
