/**
 * Pipelines end to end on one live server: management through raw HTTP and the official client,
 * SQL validation, HTTP ingestion with every status of the spec's table (Host-matched endpoint and
 * the path alias), a WHERE/CASE/CAST/CONCAT pipeline writing Parquet read back by DuckDB and by
 * hyparquet, JSON files rolled on size and on inactivity, the results query, and the binding from
 * a deployed script.
 */
import http from 'node:http';
import { readdirSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DuckDBInstance } from '@duckdb/node-api';
import { parquetReadObjects, parquetMetadata, parquetSchema } from 'hyparquet';
import { compressors } from 'hyparquet-compressors';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';
import { sdk, Cloudflare } from '../../support/sdk.ts';
import { uploadScript } from '../workflows/helpers.ts';
import { sinkFiles } from '../../../src/areas/pipelines/query.ts';
import { until } from './support.ts';

let t: TestServer;
const a = () => `/accounts/${t.accountId}/pipelines/v1`;

beforeAll(async () => {
  t = await startTestServer({ pipelinesTickMs: 40, pipelinesStreamRate: 3_000_000, pipelinesSegmentBytes: 1024 });
}, 60_000);
afterAll(async () => {
  await t?.stop();
});

/** POST with an explicit Host header (fetch cannot set one). */
function hostPost(host: string, path: string, body: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string; headers: http.IncomingHttpHeaders }> {
  const u = new URL(t.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path, method: 'POST', headers: { host, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers } }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, text, headers: res.headers }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function ingest(streamId: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${t.url}/pipelines/ingest/${streamId}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: res.status, headers: res.headers, body: (await res.json().catch(() => undefined)) as any };
}


const files = async (sinkName: string) => {
  const sink = (await t.call('GET', `${a()}/sinks`)).body.result.find((s: any) => s.name === sinkName);
  return sinkFiles(`${t.config.dataDir}/pipelines/buckets`, t.accountId, sink);
};

const TYPED_SCHEMA = {
  fields: [
    { name: 'user_id', type: 'int64', required: true },
    { name: 'amount', type: 'float64', required: true },
    { name: 'country', type: 'string' },
    { name: 'kind', type: 'string' },
    { name: 'ts', type: 'timestamp' },
  ],
};

describe('management', () => {
  it('creates, lists, gets, patches and deletes streams, sinks and pipelines', async () => {
    const s = await t.call('POST', `${a()}/streams`, { name: 'mgmt_stream', http: { enabled: true, authentication: false }, schema: TYPED_SCHEMA });
    expect(s.status).toBe(200);
    expect(s.body.result).toMatchObject({ name: 'mgmt_stream', version: 1, http: { enabled: true, authentication: false }, worker_binding: { enabled: true }, format: { type: 'json' } });
    expect(s.body.result.id).toMatch(/^[0-9a-f]{32}$/);
    expect(s.body.result.endpoint).toBe(`http://${s.body.result.id}.pipelines.localhost:${t.server.apiPort}`);
    const dup = await t.call('POST', `${a()}/streams`, { name: 'mgmt_stream' });
    expect(dup.status).toBe(409);
    expect(dup.headers.get('x-should-retry')).toBe('false');

    const patched = await t.call('PATCH', `${a()}/streams/${s.body.result.id}`, { http: { enabled: true, authentication: true } });
    expect(patched.body.result).toMatchObject({ version: 2, http: { authentication: true } });
    expect((await t.call('PATCH', `${a()}/streams/${s.body.result.id}`, { schema: { fields: [] } })).status).toBe(400);

    const k = await t.call('POST', `${a()}/sinks`, { name: 'mgmt_sink', type: 'r2', format: { type: 'parquet', compression: 'zstd' }, config: { bucket: 'mgmt-bucket', path: 'events', rolling_policy: { file_size_bytes: 1000, inactivity_seconds: 1 }, credentials: { access_key_id: 'AK', secret_access_key: 'SECRET' } } });
    expect(k.status).toBe(200);
    expect(k.body.result.config.credentials).toEqual({ access_key_id: 'AK' });
    expect(k.body.result.config.rolling_policy).toMatchObject({ file_size_bytes: 1000, inactivity_seconds: 1 });
    const clash = await t.call('POST', `${a()}/sinks`, { name: 'mgmt_sink2', type: 'r2', config: { bucket: 'mgmt-bucket', path: 'events/' } });
    expect(clash.status).toBe(409);

    const p = await t.call('POST', `${a()}/pipelines`, { name: 'mgmt_pipe', sql: 'INSERT INTO mgmt_sink SELECT user_id, amount FROM mgmt_stream' });
    expect(p.status).toBe(200);
    expect(p.body.result).toMatchObject({ name: 'mgmt_pipe', status: 'running' });
    const got = await t.call('GET', `${a()}/pipelines/${p.body.result.id}`);
    expect(got.body.result.tables).toEqual([
      expect.objectContaining({ id: s.body.result.id, name: 'mgmt_stream', type: 'stream' }),
      expect.objectContaining({ id: k.body.result.id, name: 'mgmt_sink', type: 'sink' }),
    ]);
    // In use: neither the stream nor the sink goes while the pipeline exists.
    expect((await t.call('DELETE', `${a()}/streams/${s.body.result.id}`)).status).toBe(409);
    expect((await t.call('DELETE', `${a()}/sinks/${k.body.result.id}`)).status).toBe(409);
    expect((await t.call('DELETE', `${a()}/pipelines/${p.body.result.id}`)).body.result).toEqual({ id: p.body.result.id });
    expect((await t.call('GET', `${a()}/pipelines/${p.body.result.id}`)).status).toBe(404);
    expect((await t.call('DELETE', `${a()}/sinks/${k.body.result.id}`)).status).toBe(200);
    expect((await t.call('DELETE', `${a()}/streams/${s.body.result.id}`)).status).toBe(200);
    expect((await t.call('GET', `${a()}/streams/${s.body.result.id}`)).status).toBe(404);
  });

  it('refuses malformed bodies with a message naming the field', async () => {
    const cases: [string, unknown, RegExp][] = [
      ['/streams', { name: 'bad name!' }, /name/],
      ['/streams', { name: 'x', schema: { fields: [{ name: 'a', type: 'decimal' }] } }, /type/],
      ['/streams', { name: 'x', http: { enabled: 'yes', authentication: false } }, /http\.enabled/],
      ['/streams', { name: 'x', extra: 1 }, /extra/],
      ['/sinks', { name: 'x', type: 'r2', config: { bucket: 'B!' } }, /bucket/],
      ['/sinks', { name: 'x', type: 'r2', config: { bucket: 'okbucket', path: '../up' } }, /path/],
      ['/sinks', { name: 'x', type: 'r2', config: { bucket: 'okbucket', partitioning: { time_pattern: '%Q' } } }, /time_pattern/],
      ['/sinks', { name: 'x', type: 'r2', format: { type: 'parquet', compression: 'brotli' } }, /compression/],
      ['/pipelines', { name: 'x' }, /sql/],
    ];
    for (const [path, body, re] of cases) {
      const r = await t.call('POST', `${a()}${path}`, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.errors[0].message).toMatch(re);
    }
    const notJson = await t.call('POST', `${a()}/streams`, '{"name":');
    expect(notJson.status).toBe(400);
    expect((await t.call('GET', `${a()}/streams/${'0'.repeat(32)}`)).status).toBe(404);
    expect((await t.call('GET', `${a()}/streams/nothex`)).status).toBe(400);
  });

  it('validate_sql names unknown streams, sinks, columns, functions and types', async () => {
    await t.call('POST', `${a()}/streams`, { name: 'vs_stream', schema: TYPED_SCHEMA });
    await t.call('POST', `${a()}/sinks`, { name: 'vs_sink', type: 'r2', config: { bucket: 'vs-bucket' } });
    const good = await t.call('POST', `${a()}/validate_sql`, { sql: "INSERT INTO vs_sink SELECT UPPER(country) AS c, CAST(amount AS int32) AS amt FROM vs_stream WHERE kind IN ('a', 'b')" });
    expect(good.status).toBe(200);
    expect(good.body.result.tables.vs_stream).toMatchObject({ type: 'stream', name: 'vs_stream' });
    expect(good.body.result.tables.vs_sink).toMatchObject({ type: 'sink' });
    expect(good.body.result.columns).toEqual([{ name: 'c', type: 'string' }, { name: 'amt', type: 'int32' }]);
    const bad: [string, RegExp][] = [
      ['INSERT INTO nope SELECT * FROM vs_stream', /Unknown sink nope/],
      ['INSERT INTO vs_sink SELECT * FROM nope', /Unknown stream nope/],
      ['INSERT INTO vs_sink SELECT missing FROM vs_stream', /Unknown column missing/],
      ['INSERT INTO vs_sink SELECT user_id FROM vs_stream WHERE ghost > 1', /Unknown column ghost/],
      ['INSERT INTO vs_sink SELECT md5(country) AS h FROM vs_stream', /Function MD5 is not supported/],
      ['INSERT INTO vs_sink SELECT CAST(amount AS decimal) AS d FROM vs_stream', /CAST to/],
      ['INSERT INTO vs_sink SELECT country || 1 FROM', /does not parse/],
      ['SELECT * FROM vs_stream', /not pipelines/],
      ['INSERT INTO vs_sink SELECT user_id, user_id FROM vs_stream', /Duplicate output column/],
      ['INSERT INTO vs_sink SELECT country - 1 AS x FROM vs_stream', /needs numbers/],
    ];
    for (const [sql, re] of bad) {
      const r = await t.call('POST', `${a()}/validate_sql`, { sql });
      expect(r.status, sql).toBe(400);
      expect(r.body.errors[0].message, sql).toMatch(re);
      const c = await t.call('POST', `${a()}/pipelines`, { name: 'never', sql });
      expect(c.status, sql).toBe(400);
    }
  });

  it('works through the official client, paging lists past one page', async () => {
    const cf = sdk(t);
    const created = [];
    for (let i = 0; i < 3; i++) created.push(await cf.pipelines.streams.create({ account_id: t.accountId, name: `sdk_stream_${i}` }));
    expect(created[0].endpoint).toContain('.pipelines.localhost');
    const names: string[] = [];
    for await (const s of cf.pipelines.streams.list({ account_id: t.accountId, per_page: 2 })) names.push(s.name);
    for (let i = 0; i < 3; i++) expect(names).toContain(`sdk_stream_${i}`);
    const got = await cf.pipelines.streams.get(created[1].id, { account_id: t.accountId });
    expect(got.name).toBe('sdk_stream_1');
    const upd = await cf.pipelines.streams.update(created[1].id, { account_id: t.accountId, worker_binding: { enabled: false } });
    expect(upd.worker_binding.enabled).toBe(false);
    const sink = await cf.pipelines.sinks.create({ account_id: t.accountId, name: 'sdk_sink', type: 'r2', format: { type: 'json' }, config: { account_id: t.accountId, bucket: 'sdk-bucket', credentials: { access_key_id: 'a', secret_access_key: 'b' } } });
    expect((await cf.pipelines.sinks.get(sink.id, { account_id: t.accountId })).name).toBe('sdk_sink');
    const v = await cf.pipelines.validateSql({ account_id: t.accountId, sql: 'INSERT INTO sdk_sink SELECT * FROM sdk_stream_0' });
    expect(Object.keys(v.tables)).toEqual(['sdk_stream_0', 'sdk_sink']);
    const p = await cf.pipelines.createV1({ account_id: t.accountId, name: 'sdk_pipe', sql: 'INSERT INTO sdk_sink SELECT * FROM sdk_stream_0' });
    expect((await cf.pipelines.getV1(p.id, { account_id: t.accountId })).sql).toContain('sdk_sink');
    const listed: string[] = [];
    for await (const x of cf.pipelines.listV1({ account_id: t.accountId })) listed.push(x.name);
    expect(listed).toContain('sdk_pipe');
    await cf.pipelines.deleteV1(p.id, { account_id: t.accountId });
    await cf.pipelines.sinks.delete(sink.id, { account_id: t.accountId });
    await cf.pipelines.streams.delete(created[2].id, { account_id: t.accountId });
    const err = await cf.pipelines.streams.get(created[2].id, { account_id: t.accountId }).catch((e) => e);
    expect(err).toBeInstanceOf(Cloudflare.NotFoundError);
    const bad = await cf.pipelines.validateSql({ account_id: t.accountId, sql: 'INSERT INTO x SELECT * FROM y' }).catch((e) => e);
    expect(bad).toBeInstanceOf(Cloudflare.BadRequestError);
  });
});

describe('ingestion statuses', () => {
  let open: any;
  let authed: any;
  beforeAll(async () => {
    open = (await t.call('POST', `${a()}/streams`, { name: 'st_open', schema: TYPED_SCHEMA })).body.result;
    authed = (await t.call('POST', `${a()}/streams`, { name: 'st_auth', http: { enabled: true, authentication: true, cors: { origins: ['https://app.example'] } } })).body.result;
  });

  it('200 on the Host-matched endpoint (/ and /v1) and on the path alias', async () => {
    const host = new URL(open.endpoint).host;
    const ev = JSON.stringify([{ user_id: 1, amount: 2.5 }]);
    expect((await hostPost(host, '/', ev)).status).toBe(200);
    expect((await hostPost(host, '/v1', ev)).status).toBe(200);
    const r = await ingest(open.id, [{ user_id: 2, amount: 1 }, { user_id: 3, amount: 0, extra: 'kept' }]);
    expect(r.status).toBe(200);
    expect(r.body.result.committed).toBe(2);
    // Another Host on the same path is not an ingest endpoint.
    expect((await hostPost('elsewhere.localhost', '/', ev)).status).toBe(404);
  });

  it('400 for a single object, non-JSON, non-objects and schema mismatches naming the field', async () => {
    const single = await ingest(open.id, { user_id: 1, amount: 1 });
    expect(single.status).toBe(400);
    expect(single.body.errors[0].message).toMatch(/single object/);
    expect((await ingest(open.id, '[{"user_id": 1,')).status).toBe(400);
    expect((await ingest(open.id, [1, 2])).status).toBe(400);
    const wrong = await ingest(open.id, [{ user_id: 1, amount: 1 }, { user_id: 'seven', amount: 1 }]);
    expect(wrong.status).toBe(400);
    expect(wrong.body.errors[0].message).toMatch(/event 1: field user_id must be an int64/);
    const missing = await ingest(open.id, [{ user_id: 1 }]);
    expect(missing.body.errors[0].message).toMatch(/field amount is required/);
    const ts = await ingest(open.id, [{ user_id: 1, amount: 1, ts: 'yesterday' }]);
    expect(ts.body.errors[0].message).toMatch(/field ts must be a timestamp/);
  });

  it('400 naming the limit for events nested past it (acknowledged events must be writable to a sink)', async () => {
    const plain = (await t.call('POST', `${a()}/streams`, { name: 'st_deep', http: { enabled: true, authentication: false } })).body.result;
    // The array around the events and the event object are two levels; 128 in all is the limit.
    const nested = (k: number) => `[{"user_id": 1, "amount": 1, "x": ${'['.repeat(k)}${']'.repeat(k)}}]`;
    for (const stream of [plain, open]) {
      expect((await ingest(stream.id, nested(126))).status).toBe(200);
      const deep = await ingest(stream.id, nested(127));
      expect(deep.status).toBe(400);
      expect(deep.body.errors[0].message).toMatch(/nested deeper than 128 levels/);
      expect((await ingest(stream.id, nested(200_000))).status).toBe(400);
    }
  });

  it('401 without a token on an authenticated stream, 403 with a token lacking Pipelines Write, 200 with one', async () => {
    expect((await ingest(authed.id, [{ a: 1 }])).status).toBe(401);
    expect((await ingest(authed.id, [{ a: 1 }], { authorization: 'Bearer wrong' })).status).toBe(401);
    const readOnly = await createToken(t, ['Pipelines Read'], { [`com.cloudflare.api.account.${t.accountId}`]: '*' });
    expect((await ingest(authed.id, [{ a: 1 }], { authorization: `Bearer ${readOnly}` })).status).toBe(403);
    const writer = await createToken(t, ['Pipelines Write'], { [`com.cloudflare.api.account.${t.accountId}`]: '*' });
    const ok = await ingest(authed.id, [{ a: 1 }], { authorization: `Bearer ${writer}`, origin: 'https://app.example' });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('access-control-allow-origin')).toBe('https://app.example');
    const pre = await fetch(`${t.url}/pipelines/ingest/${authed.id}`, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } });
    expect(pre.status).toBe(204);
    expect(pre.headers.get('access-control-allow-methods')).toContain('POST');
  });

  it('413 above 1 MB, 429 with retry-after above the stream rate, 404 for unknown or disabled streams', async () => {
    const big = JSON.stringify([{ user_id: 1, amount: 1, country: 'x'.repeat(1024 * 1024) }]);
    expect((await ingest(open.id, big)).status).toBe(413);
    const rl = (await t.call('POST', `${a()}/streams`, { name: 'st_rate' })).body.result;
    const chunk = JSON.stringify([{ pad: 'y'.repeat(900_000) }]);
    const statuses: number[] = [];
    let retry: string | null = null;
    // 8 requests of 0.9 MB at once against 3 MB/s; a slow machine gets up to 5 rounds.
    for (let round = 0; round < 5 && !statuses.includes(429); round++) {
      const rs = await Promise.all(Array.from({ length: 8 }, () => ingest(rl.id, chunk)));
      for (const r of rs) {
        statuses.push(r.status);
        if (r.status === 429) retry = r.headers.get('retry-after');
      }
    }
    expect(statuses).toContain(200);
    expect(statuses).toContain(429);
    expect(statuses.every((x) => x === 200 || x === 429)).toBe(true);
    expect(Number(retry)).toBeGreaterThanOrEqual(1);
    expect((await ingest('0'.repeat(32), [{ a: 1 }])).status).toBe(404);
    const off = (await t.call('POST', `${a()}/streams`, { name: 'st_off', http: { enabled: false, authentication: false } })).body.result;
    expect((await ingest(off.id, [{ a: 1 }])).status).toBe(404);
  });
});

describe('transform and sinks', () => {
  it('WHERE, CASE, CAST and CONCAT into Parquet, read back by DuckDB and hyparquet, and queryable', async () => {
    const stream = (await t.call('POST', `${a()}/streams`, { name: 'orders', schema: TYPED_SCHEMA })).body.result;
    await t.call('POST', `${a()}/sinks`, { name: 'big_orders', type: 'r2', format: { type: 'parquet', compression: 'zstd' }, config: { bucket: 'shop', path: 'orders', rolling_policy: { inactivity_seconds: 0.2 } } });
    const sql = `INSERT INTO big_orders SELECT user_id, CAST(amount AS int32) AS whole, CASE WHEN amount >= 100 THEN 'large' ELSE 'medium' END AS size, CONCAT(UPPER(country), '-', CAST(user_id AS string)) AS label, CAST(ts AS timestamp) AS at, amount * 2 AS doubled FROM orders WHERE amount > 10 AND country IN ('de', 'fr')`;
    expect((await t.call('POST', `${a()}/pipelines`, { name: 'orders_pipe', sql })).status).toBe(200);
    const events = [
      { user_id: 1, amount: 150.7, country: 'de', ts: '2025-03-01T10:00:00Z' },
      { user_id: 2, amount: 5, country: 'de', ts: '2025-03-01T10:00:01Z' },
      { user_id: 3, amount: 20.2, country: 'fr', ts: 1740823202000 },
      { user_id: 4, amount: 500, country: 'us', ts: '2025-03-01T10:00:03Z' },
    ];
    expect((await ingest(stream.id, events)).status).toBe(200);
    const paths = await until('a parquet file', async () => {
      const f = await files('big_orders');
      return f.length > 0 ? f : undefined;
    });
    expect(paths[0]).toMatch(/\/shop\/orders\/year=\d{4}\/month=\d{2}\/day=\d{2}\/\d{10}-[0-9a-f]{8}\.parquet$/);

    const duck = await DuckDBInstance.create(':memory:');
    const conn = await duck.connect();
    const reader = await conn.runAndReadAll(`SELECT * FROM read_parquet('${paths[0]}', hive_partitioning = false) ORDER BY user_id`);
    expect(reader.columnNames()).toEqual(['user_id', 'whole', 'size', 'label', 'at', 'doubled']);
    expect(reader.columnTypes().map(String)).toEqual(['BIGINT', 'INTEGER', 'VARCHAR', 'VARCHAR', 'TIMESTAMP', 'DOUBLE']);
    expect(reader.getRowObjectsJson()).toEqual([
      { user_id: '1', whole: 150, size: 'large', label: 'DE-1', at: '2025-03-01 10:00:00', doubled: 301.4 },
      { user_id: '3', whole: 20, size: 'medium', label: 'FR-3', at: '2025-03-01 10:00:02', doubled: 40.4 },
    ]);
    const meta = await conn.runAndReadAll(`SELECT DISTINCT compression FROM parquet_metadata('${paths[0]}')`);
    expect(meta.getRows().map((r) => String(r[0]).toUpperCase())).toEqual(['ZSTD']);
    conn.closeSync();
    duck.closeSync();

    const buf = readFileSync(paths[0]);
    const file = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
    const schema = parquetSchema(parquetMetadata(file));
    expect(schema.children.map((c: any) => [c.element.name, c.element.type])).toEqual([
      ['user_id', 'INT64'],
      ['whole', 'INT32'],
      ['size', 'BYTE_ARRAY'],
      ['label', 'BYTE_ARRAY'],
      ['at', 'INT64'],
      ['doubled', 'DOUBLE'],
    ]);
    const rows = await parquetReadObjects({ file, compressors });
    expect(rows.map((r: any) => [Number(r.user_id), r.whole, r.size, r.label, new Date(r.at).toISOString(), r.doubled])).toEqual([
      [1, 150, 'large', 'DE-1', '2025-03-01T10:00:00.000Z', 301.4],
      [3, 20, 'medium', 'FR-3', '2025-03-01T10:00:02.000Z', 40.4],
    ]);

    const q = await t.call('POST', `${a()}/query`, 'SELECT size, COUNT(*) AS n, SUM(whole) AS total FROM big_orders GROUP BY size ORDER BY size', { 'content-type': 'text/plain' });
    expect(q.status).toBe(200);
    expect(q.body.result.data).toEqual([
      { size: 'large', n: '1', total: '150' },
      { size: 'medium', n: '1', total: '20' },
    ]);
    expect(q.body.result.meta.map((m: any) => m.name)).toEqual(['size', 'n', 'total']);
    // Four events read, two rows (the WHERE kept two) in one file, nothing dropped.
    const pipe = (await t.call('GET', `${a()}/pipelines`)).body.result.find((p: any) => p.name === 'orders_pipe');
    expect((await t.call('GET', `${a()}/pipelines/${pipe.id}`)).body.result.metrics).toEqual({ events_read: 4, rows_written: 2, files_written: 1, events_dropped: 0 });
  });

  it('rolls JSON files on size and on inactivity, each event once', async () => {
    const stream = (await t.call('POST', `${a()}/streams`, { name: 'clicks' })).body.result;
    await t.call('POST', `${a()}/sinks`, { name: 'clicks_out', type: 'r2', format: { type: 'json' }, config: { bucket: 'web', path: 'clicks', file_naming: { prefix: 'c-', suffix: '-x' }, rolling_policy: { file_size_bytes: 300, inactivity_seconds: 0.3, interval_seconds: 3600 } } });
    await t.call('POST', `${a()}/pipelines`, { name: 'clicks_pipe', sql: 'INSERT INTO clicks_out SELECT * FROM clicks' });
    // 20 batches of 5 events, ~40 bytes each: files close at 300 bytes, the tail on inactivity.
    for (let b = 0; b < 20; b++) {
      const batch = Array.from({ length: 5 }, (_, i) => ({ n: b * 5 + i, page: `/p/${b}` }));
      expect((await ingest(stream.id, batch)).status).toBe(200);
    }
    const paths = await until('all 100 clicks in files', async () => {
      const f = await files('clicks_out');
      const n = f.reduce((sum, p) => sum + readFileSync(p, 'utf8').trim().split('\n').length, 0);
      return n >= 100 ? f : undefined;
    });
    expect(paths.length).toBeGreaterThan(3);
    for (const p of paths) expect(p).toMatch(/\/c-\d{10}-[0-9a-f]{8}-x\.json$/);
    const seen = paths.flatMap((p) => readFileSync(p, 'utf8').trim().split('\n').map((l) => JSON.parse(l).n as number));
    expect(seen.sort((x, y) => x - y)).toEqual(Array.from({ length: 100 }, (_, i) => i));
    // Every file but the last closed on size.
    const sizes = paths.map((p) => readFileSync(p).length);
    expect(sizes.slice(0, -1).every((s) => s >= 300)).toBe(true);
    // The stream log (1 KB segments here) keeps only what is not in finished files yet: once every
    // event is in a file, the delivered segments are gone and the last one stays.
    const logDir = `${t.config.dataDir}/pipelines/log/${stream.id}`;
    await until('delivered log segments deleted', () => readdirSync(logDir).length === 1);
    expect(readdirSync(logDir)[0]).not.toBe('0000000000000000.seg');

    const q = await t.call('GET', `${a()}/query?query=${encodeURIComponent('SELECT COUNT(*) AS n, COUNT(DISTINCT page) AS pages FROM clicks_out')}`);
    expect(q.body.result.data).toEqual([{ n: '100', pages: '20' }]);
  });

  it('rolls on the interval under steady ingest (inactivity never reached), each event once', async () => {
    const stream = (await t.call('POST', `${a()}/streams`, { name: 'ticks' })).body.result;
    const sink = await t.call('POST', `${a()}/sinks`, { name: 'ticks_out', type: 'r2', format: { type: 'json' }, config: { bucket: 'ticks', rolling_policy: { interval_seconds: 1, inactivity_seconds: 3600, file_size_bytes: 100_000_000 } } });
    expect(sink.status).toBe(200);
    await t.call('POST', `${a()}/pipelines`, { name: 'ticks_pipe', sql: 'INSERT INTO ticks_out SELECT * FROM ticks' });
    // One event every ~100 ms until two files have been finished by the interval while events
    // keep arriving (neither size nor inactivity can close them), then five more; bounded.
    let sent = 0;
    let finishedWhileSending = 0;
    while (sent < 400 && finishedWhileSending < 2) {
      expect((await ingest(stream.id, [{ n: sent }])).status).toBe(200);
      sent++;
      await new Promise((r) => setTimeout(r, 100));
      finishedWhileSending = (await files('ticks_out')).length;
    }
    expect(finishedWhileSending).toBeGreaterThanOrEqual(2);
    for (let i = 0; i < 5; i++) {
      expect((await ingest(stream.id, [{ n: sent }])).status).toBe(200);
      sent++;
      await new Promise((r) => setTimeout(r, 100));
    }
    // The last file closes on the interval too (inactivity is an hour).
    const read = (p: string) => readFileSync(p, 'utf8').trim().split('\n').map((l) => JSON.parse(l).n as number);
    const paths = await until('every tick in a finished file', async () => {
      const f = await files('ticks_out');
      return f.reduce((sum, p) => sum + read(p).length, 0) >= sent ? f : undefined;
    });
    expect(paths.length).toBeGreaterThanOrEqual(3);
    const perFile = paths.map(read);
    for (const ns of perFile) expect(ns.length).toBeGreaterThan(0);
    expect(perFile.flat().sort((x, y) => x - y)).toEqual(Array.from({ length: sent }, (_, i) => i));
    // Files follow the log: each one continues where the one before ended.
    const ordered = [...perFile].sort((x, y) => x[0] - y[0]);
    expect(ordered.flat()).toEqual(Array.from({ length: sent }, (_, i) => i));
  }, 60_000);

  it('the results query is read-only and limited to the account\'s sinks', async () => {
    const cases: [string, RegExp][] = [
      ["SELECT * FROM read_csv('/etc/passwd')", /not allowed/],
      ["COPY (SELECT 1) TO '/tmp/x.csv'", /one SELECT/],
      ['SELECT * FROM clicks_out; SELECT 1', /one SELECT/],
      ['SELECT * FROM unknown_sink', /Unknown table unknown_sink/],
      ['SELECT * FROM vs_sink', /no finished files/],
      ['SELECT nope FROM clicks_out', /could not be run/],
    ];
    for (const [sql, re] of cases) {
      const r = await t.call('POST', `${a()}/query`, sql, { 'content-type': 'text/plain' });
      expect(r.status, sql).toBe(400);
      expect(r.body.errors[0].message, sql).toMatch(re);
    }
    const viaJson = await t.call('POST', `${a()}/query`, { sql: 'SELECT 1 AS one' });
    expect(viaJson.body.result.data).toEqual([{ one: 1 }]);
    // Another account's token cannot reach this account's query endpoint.
    const other = await createToken(t, ['Pipelines Read'], { 'com.cloudflare.api.account.ffffffffffffffffffffffffffffffff': '*' });
    const denied = await t.call('POST', `${a()}/query`, 'SELECT 1', { authorization: `Bearer ${other}`, 'content-type': 'text/plain' });
    expect(denied.status).toBe(403);
  });
});

describe('binding', () => {
  it('env.STREAM.send(obj | obj[]) from a deployed script resolves when accepted and throws on a mismatch', async () => {
    const stream = (await t.call('POST', `${a()}/streams`, { name: 'from_script', schema: { fields: [{ name: 'msg', type: 'string', required: true }, { name: 'n', type: 'int32' }] } })).body.result;
    await t.call('POST', `${a()}/sinks`, { name: 'script_out', type: 'r2', config: { bucket: 'scripts', rolling_policy: { inactivity_seconds: 0.2 } } });
    await t.call('POST', `${a()}/pipelines`, { name: 'script_pipe', sql: 'INSERT INTO script_out SELECT msg, n FROM from_script' });
    const script = `export default {
      async fetch(req, env) {
        const mode = new URL(req.url).searchParams.get('mode');
        try {
          if (mode === 'bad') await env.STREAM.send([{ msg: 'ok' }, { msg: 42 }]);
          else {
            const r = await env.STREAM.send({ msg: 'one', n: 1 });
            await env.STREAM.send([{ msg: 'two', n: 2 }, { msg: 'three', n: 3 }]);
            return new Response('sent ' + String(r));
          }
          return new Response('no throw');
        } catch (e) {
          return new Response('threw: ' + e.message, { status: 500 });
        }
      },
    };`;
    const up = await uploadScript(t, 'sender', script, { bindings: [{ type: 'pipelines', name: 'STREAM', pipeline: stream.name }] });
    expect(up.status).toBe(200);
    const call = async (q: string) => {
      const res = await fetch(`${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/sender/invoke?${q}`, { headers: { authorization: `Bearer ${t.token}` } });
      return { status: res.status, text: await res.text() };
    };
    const ok = await call('mode=ok');
    expect(ok).toEqual({ status: 200, text: 'sent undefined' });
    const bad = await call('mode=bad');
    expect(bad.status).toBe(500);
    expect(bad.text).toMatch(/threw: .*event 1: field msg must be a string/);
    const paths = await until('script rows in a file', async () => {
      const f = await files('script_out');
      return f.length > 0 ? f : undefined;
    });
    const rows = paths.flatMap((p) => readFileSync(p, 'utf8').trim().split('\n').map((l) => JSON.parse(l)));
    expect(rows).toEqual([{ msg: 'one', n: 1 }, { msg: 'two', n: 2 }, { msg: 'three', n: 3 }]);
    const refused = await uploadScript(t, 'sender2', script, { bindings: [{ type: 'pipelines', name: 'STREAM' }] });
    expect(refused.status).toBe(400);
  }, 60_000);
});
