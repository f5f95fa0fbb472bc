/**
 * Streams with `format: {type: 'parquet'}`: the HTTP ingest takes a Parquet file (made here by
 * DuckDB) as the body, every row one event, values mapped to JSON (bigint beyond 2^53 as text,
 * timestamps as RFC 3339, binary as base64, lists and structs as arrays and objects, null as
 * null); a JSON array is still accepted; typed streams check each row like a JSON event; corrupt,
 * oversized or decompression-bomb bodies are refused with 400; the official client creates such
 * a stream.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { sdk } from '../../support/sdk.ts';
import { sinkFiles } from '../../../src/areas/pipelines/query.ts';
import { until } from './support.ts';

let t: TestServer;
let duck: DuckDBInstance;
let conn: DuckDBConnection;
const dir = mkdtempSync(join(tmpdir(), 'outpost-pq-'));
const a = () => `/accounts/${t.accountId}/pipelines/v1`;

beforeAll(async () => {
  t = await startTestServer({ pipelinesTickMs: 40 });
  duck = await DuckDBInstance.create(':memory:');
  conn = await duck.connect();
}, 60_000);
afterAll(async () => {
  conn?.closeSync();
  duck?.closeSync();
  await t?.stop();
  rmSync(dir, { recursive: true, force: true });
});

let n = 0;
/** A Parquet file of the query's rows, written by DuckDB. */
async function parquet(select: string, compression = 'zstd'): Promise<Buffer> {
  const file = join(dir, `f${n++}.parquet`);
  await conn.run(`COPY (${select}) TO '${file}' (FORMAT parquet, COMPRESSION ${compression})`);
  return readFileSync(file);
}

async function ingest(streamId: string, body: Buffer | string, contentType = 'application/vnd.apache.parquet') {
  const res = await fetch(`${t.url}/pipelines/ingest/${streamId}`, { method: 'POST', headers: { 'content-type': contentType }, body: typeof body === 'string' ? body : new Uint8Array(body) });
  return { status: res.status, body: (await res.json().catch(() => undefined)) as any };
}

const sinkRows = async (sinkName: string, count: number) => {
  const sink = (await t.call('GET', `${a()}/sinks`)).body.result.find((s: any) => s.name === sinkName);
  return until(`${count} rows in ${sinkName}`, async () => {
    const rows = (await sinkFiles(`${t.config.dataDir}/pipelines/buckets`, t.accountId, sink)).flatMap((p) => readFileSync(p, 'utf8').trim().split('\n').map((l) => JSON.parse(l)));
    return rows.length >= count ? rows : undefined;
  });
};

describe('parquet streams', () => {
  it('a Parquet body becomes one event per row, with values mapped to JSON, delivered to a JSON sink', async () => {
    const created = await t.call('POST', `${a()}/streams`, { name: 'pq_events', format: { type: 'parquet', compression: 'zstd' } });
    expect(created.status).toBe(200);
    expect(created.body.result.format).toEqual({ type: 'parquet', compression: 'zstd' });
    const stream = created.body.result;
    expect((await t.call('GET', `${a()}/streams/${stream.id}`)).body.result.format).toEqual({ type: 'parquet', compression: 'zstd' });
    expect((await t.call('POST', `${a()}/sinks`, { name: 'pq_out', type: 'r2', format: { type: 'json' }, config: { bucket: 'pq-bucket', path: 'events', rolling_policy: { inactivity_seconds: 0.2 } } })).status).toBe(200);
    const p = await t.call('POST', `${a()}/pipelines`, { name: 'pq_pipe', sql: 'INSERT INTO pq_out SELECT * FROM pq_events' });
    expect(p.status, JSON.stringify(p.body)).toBe(200);

    const file = await parquet(`
      SELECT * FROM (VALUES
        (1, 42::BIGINT, 1.5::DOUBLE, true, 'a', TIMESTAMP '2025-03-01 10:00:00.123456', ['x', 'y'], NULL::VARCHAR, {'k': 1, 'v': 'one'}, '\\x00\\xFF'::BLOB),
        (2, 9007199254740993::BIGINT, -0.25::DOUBLE, false, 'bé', TIMESTAMP '1999-12-31 23:59:59', []::VARCHAR[], 'set', {'k': 2, 'v': NULL}, ''::BLOB),
        (3, NULL::BIGINT, NULL::DOUBLE, NULL::BOOLEAN, NULL, NULL::TIMESTAMP, NULL::VARCHAR[], NULL, NULL, NULL::BLOB)
      ) AS v(i, big, d, b, s, ts, tags, note, obj, raw)`);
    expect(file.subarray(0, 4).toString()).toBe('PAR1');
    const r = await ingest(stream.id, file);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.result.committed).toBe(3);
    // A JSON array is still accepted on a Parquet stream.
    expect((await ingest(stream.id, JSON.stringify([{ i: 4, s: 'json' }]), 'application/json')).body.result).toEqual({ committed: 1 });

    const rows = await sinkRows('pq_out', 4);
    expect(rows).toEqual([
      { i: 1, big: 42, d: 1.5, b: true, s: 'a', ts: '2025-03-01T10:00:00.123456Z', tags: ['x', 'y'], note: null, obj: { k: 1, v: 'one' }, raw: 'AP8=' },
      { i: 2, big: '9007199254740993', d: -0.25, b: false, s: 'bé', ts: '1999-12-31T23:59:59Z', tags: [], note: 'set', obj: { k: 2, v: null }, raw: '' },
      { i: 3, big: null, d: null, b: null, s: null, ts: null, tags: null, note: null, obj: null, raw: null },
      { i: 4, s: 'json' },
    ]);
  });

  it('a typed Parquet stream checks each row like a JSON event (400 naming row and field)', async () => {
    const stream = (
      await t.call('POST', `${a()}/streams`, {
        name: 'pq_typed',
        format: { type: 'parquet' },
        schema: { fields: [{ name: 'user_id', type: 'int64', required: true }, { name: 'amount', type: 'float64' }, { name: 'at', type: 'timestamp' }] },
      })
    ).body.result;
    const ok = await ingest(stream.id, await parquet(`SELECT 7::BIGINT AS user_id, 1.25 AS amount, TIMESTAMP '2025-01-02 03:04:05' AS at`));
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    const wrong = await ingest(stream.id, await parquet(`SELECT * FROM (VALUES ('1', 2.0), ('2', 3.0)) AS v(user_id, amount)`));
    expect(wrong.status).toBe(400);
    expect(wrong.body.errors[0].message).toMatch(/^row 0: field user_id must be an int64, got string "1"/);
    const missing = await ingest(stream.id, await parquet(`SELECT * FROM (VALUES (1::BIGINT), (NULL::BIGINT)) AS v(user_id)`));
    expect(missing.status).toBe(400);
    expect(missing.body.errors[0].message).toMatch(/^row 1: field user_id is required/);
  });

  it('refuses corrupt, truncated, oversized and decompression-bomb bodies with 400, and Parquet on a JSON stream', async () => {
    const stream = (await t.call('POST', `${a()}/streams`, { name: 'pq_bad', format: { type: 'parquet' } })).body.result;
    const good = await parquet(`SELECT range AS i, 'row ' || range AS s FROM range(100)`);
    const bodies: [string, Buffer][] = [
      ['garbage between the magics', Buffer.concat([Buffer.from('PAR1'), Buffer.alloc(200, 7), Buffer.from('PAR1')])],
      ['truncated', good.subarray(0, good.length - 20)],
      ['footer cut', Buffer.concat([good.subarray(0, 40), good.subarray(good.length - 8)])],
      ['not Parquet at all', Buffer.from('hello')],
    ];
    for (const [what, body] of bodies) {
      const r = await ingest(stream.id, body, 'application/octet-stream');
      expect(r.status, what).toBe(400);
      expect(r.body.errors[0].message, what).toMatch(/not a readable Parquet file/);
    }
    // A few bytes that expand to 40 MB: refused before the memory is spent.
    const bomb = await parquet(`SELECT repeat('a', 1000000) || range AS s FROM range(40)`);
    expect(bomb.length).toBeLessThan(1024 * 1024);
    const b = await ingest(stream.id, bomb);
    expect(b.status).toBe(400);
    expect(b.body.errors[0].message).toMatch(/expand to more than/);
    const many = await ingest(stream.id, await parquet(`SELECT 1 AS x FROM range(1000001)`));
    expect(many.status).toBe(400);
    expect(many.body.errors[0].message).toMatch(/1000001 rows; send at most 1000000/);
    // The body limit is on the request: a Parquet file above 1 MB is 413 like any body.
    const big = await parquet(`SELECT md5(range::VARCHAR) || md5((range * 7)::VARCHAR) AS s FROM range(40000)`, 'uncompressed');
    expect(big.length).toBeGreaterThan(1024 * 1024);
    expect((await ingest(stream.id, big)).status).toBe(413);

    const json = (await t.call('POST', `${a()}/streams`, { name: 'pq_json_only' })).body.result;
    const onJson = await ingest(json.id, good);
    expect(onJson.status).toBe(400);
    expect(onJson.body.errors[0].message).toMatch(/takes JSON events.*format\.type parquet/);
  });

  it('the official client creates a Parquet stream', async () => {
    const cf = sdk(t);
    const s = await cf.pipelines.streams.create({ account_id: t.accountId, name: 'pq_sdk', format: { type: 'parquet', compression: 'snappy', row_group_bytes: 1048576 } });
    expect(s.format).toEqual({ type: 'parquet', compression: 'snappy', row_group_bytes: 1048576 });
    const got = await cf.pipelines.streams.get(s.id, { account_id: t.accountId });
    expect(got.format).toEqual({ type: 'parquet', compression: 'snappy', row_group_bytes: 1048576 });
    const r = await ingest(s.id, await parquet(`SELECT 1 AS one`, 'snappy'));
    expect(r.body.result).toEqual({ committed: 1 });
  });
});
