/**
 * `r2_data_catalog` sinks: a pipeline's finished files become Iceberg snapshots, read back by two
 * independent readers — icebird (metadata, Avro manifests, Parquet) and the iceberg-js REST
 * catalog client against Outpost's catalog endpoint — plus the schema growing with a new column,
 * a repeated commit being a no-op, and the refusals (existing table, bad config, table writes).
 */
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IcebergRestCatalog } from 'iceberg-js';
import { icebergRead } from 'icebird';
import { DuckDBInstance } from '@duckdb/node-api';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { sdk, Cloudflare } from '../../support/sdk.ts';
import { IcebergTable, type TableMetadata } from '../../../src/areas/pipelines/iceberg.ts';
import { until, withFileFetch } from './support.ts';

let t: TestServer;
const a = () => `/accounts/${t.accountId}/pipelines/v1`;
const catalogUri = () => `${t.url}/catalog/${t.accountId}/lake/`;

beforeAll(async () => {
  t = await startTestServer({ pipelinesTickMs: 40 });
}, 60_000);
afterAll(async () => {
  await t?.stop();
});

async function ingest(streamId: string, events: unknown[]): Promise<void> {
  const res = await fetch(`${t.url}/pipelines/ingest/${streamId}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(events) });
  expect(res.status).toBe(200);
}

describe('r2_data_catalog sinks', () => {
  it('commits each finished file as an Iceberg snapshot that icebird and the REST catalog read back', async () => {
    const cf = sdk(t);
    const stream = await cf.pipelines.streams.create({
      account_id: t.accountId,
      name: 'orders',
      schema: { fields: [{ name: 'user_id', type: 'int64', required: true }, { name: 'amount', type: 'float64', required: true }, { name: 'country', type: 'string' }] },
    });
    const sink = await cf.pipelines.sinks.create({
      account_id: t.accountId,
      name: 'orders_table',
      type: 'r2_data_catalog',
      config: { account_id: t.accountId, bucket: 'lake', namespace: 'shop', table_name: 'orders', token: 'catalog-token', rolling_policy: { inactivity_seconds: 0.2 } },
    });
    expect(sink.type).toBe('r2_data_catalog');
    expect(JSON.stringify(sink)).not.toContain('catalog-token');
    await cf.pipelines.createV1({ account_id: t.accountId, name: 'orders_pipe', sql: "INSERT INTO orders_table SELECT user_id, amount, UPPER(country) AS country FROM orders WHERE amount > 10" });

    const catalog = new IcebergRestCatalog({ baseUrl: catalogUri(), auth: { type: 'bearer', token: t.token } });
    expect(await catalog.listNamespaces()).toEqual([{ namespace: ['shop'] }]);
    expect(await catalog.listTables({ namespace: ['shop'] })).toEqual([{ namespace: ['shop'], name: 'orders' }]);
    const empty = await catalog.loadTable({ namespace: ['shop'], name: 'orders' });
    expect(empty['format-version']).toBe(2);
    expect(empty.snapshots ?? []).toEqual([]);

    await ingest(stream.id, [
      { user_id: 1, amount: 150.5, country: 'de' },
      { user_id: 2, amount: 5, country: 'de' },
    ]);
    const load = () => catalog.loadTable({ namespace: ['shop'], name: 'orders' }) as Promise<unknown> as Promise<TableMetadata>;
    await until('the first snapshot', async () => ((await load()).snapshots.length === 1 ? true : undefined));
    // A second file after the first closed on inactivity: a second snapshot on top of the first.
    await ingest(stream.id, [{ user_id: 3, amount: 20, country: 'fr' }]);
    const md = await until('the second snapshot', async () => {
      const m = await load();
      return m.snapshots.length === 2 ? m : undefined;
    });
    expect(md.snapshots[1]['parent-snapshot-id']).toBe(md.snapshots[0]['snapshot-id']);
    expect(md['current-snapshot-id']).toBe(md.snapshots[1]['snapshot-id']);
    expect(md.snapshots[1].summary).toMatchObject({ operation: 'append', 'added-records': '1', 'total-records': '2', 'total-data-files': '2' });
    const schema = md.schemas.find((s) => s['schema-id'] === md['current-schema-id'])!;
    expect(schema.fields.map((f) => [f.name, f.type])).toEqual([
      ['user_id', 'long'],
      ['amount', 'double'],
      ['country', 'string'],
    ]);

    // As a catalog client reads: the catalog names the current metadata file, icebird opens it.
    const loaded = (await (await fetch(`${catalogUri()}v1/namespaces/shop/tables/orders`, { headers: { authorization: `Bearer ${t.token}` } })).json()) as { 'metadata-location': string };
    const metadataFileName = basename(fileURLToPath(loaded['metadata-location']));
    const rows = await withFileFetch(() => icebergRead({ tableUrl: md.location, metadataFileName }));
    expect(rows.map((r: any) => [Number(r.user_id), r.amount, r.country])).toEqual([
      [1, 150.5, 'DE'],
      [3, 20, 'FR'],
    ]);

    // The data files carry the table's field ids, as Iceberg readers expect.
    const duck = await DuckDBInstance.create(':memory:');
    const conn = await duck.connect();
    const ids = await conn.runAndReadAll(`SELECT DISTINCT name, field_id FROM parquet_schema('${t.config.dataDir}/pipelines/buckets/${t.accountId}/lake/__r2_data_catalog/shop/orders/data/*.parquet') WHERE field_id IS NOT NULL ORDER BY field_id`);
    expect(ids.getRowObjectsJson()).toEqual([
      { name: 'user_id', field_id: '1' },
      { name: 'amount', field_id: '2' },
      { name: 'country', field_id: '3' },
    ]);
    conn.closeSync();
    duck.closeSync();

    // The sink's files stay queryable by sink name.
    const q = await t.call('POST', `${a()}/query`, 'SELECT COUNT(*) AS n, SUM(amount) AS total FROM orders_table', { 'content-type': 'text/plain' });
    expect(q.body.result.data).toEqual([{ n: '2', total: 170.5 }]);
  });

  it('grows the schema for a new column; older files read it as null', async () => {
    const stream = (await t.call('POST', `${a()}/streams`, { name: 'clicks' })).body.result;
    const created = await t.call('POST', `${a()}/sinks`, { name: 'clicks_table', type: 'r2_data_catalog', config: { bucket: 'lake', table_name: 'clicks', token: 'x', rolling_policy: { inactivity_seconds: 0.2 } } });
    expect(created.status).toBe(200);
    expect(created.body.result.config.namespace).toBe('default');
    await t.call('POST', `${a()}/pipelines`, { name: 'clicks_pipe', sql: 'INSERT INTO clicks_table SELECT * FROM clicks' });
    const table = new IcebergTable(`${t.config.dataDir}/pipelines/buckets/${t.accountId}/lake/__r2_data_catalog/default/clicks`);
    await ingest(stream.id, [{ page: '/a', n: 1 }]);
    await until('the first snapshot', () => (table.metadata().metadata.snapshots.length === 1 ? true : undefined));
    await ingest(stream.id, [{ page: '/b', n: 2, referrer: 'search' }]);
    const md = await until('the second snapshot', () => {
      const m = table.metadata().metadata;
      return m.snapshots.length === 2 ? m : undefined;
    });
    expect(md.schemas.length).toBeGreaterThan(1);
    const fields = md.schemas.find((s) => s['schema-id'] === md['current-schema-id'])!.fields;
    expect(fields.map((f) => [f.id, f.name, f.type])).toEqual([
      [1, 'page', 'string'],
      [2, 'n', 'long'],
      [3, 'referrer', 'string'],
    ]);
    const rows = await withFileFetch(() => icebergRead({ tableUrl: md.location, metadataFileName: basename(fileURLToPath(table.metadata().location)) }));
    expect(rows.map((r: any) => [r.page, Number(r.n), r.referrer ?? null])).toEqual([
      ['/a', 1, null],
      ['/b', 2, 'search'],
    ]);

    // Committing a file that is already in the table (a restart between file and checkpoint) is a no-op.
    const file = fileURLToPath(md.snapshots[1].summary['outpost.data-file']);
    const again = await table.append({ path: file, records: 1, columns: [] });
    expect(again).toEqual({ snapshotId: md.snapshots[1]['snapshot-id'], committed: false });
    expect(table.metadata().metadata.snapshots.length).toBe(2);
  });

  it('refuses an existing table, bad catalog config and table writes, with catalog errors', async () => {
    const existing = await t.call('POST', `${a()}/sinks`, { name: 'again', type: 'r2_data_catalog', config: { bucket: 'lake', namespace: 'shop', table_name: 'orders', token: 'x' } });
    expect(existing.status).toBe(409);
    expect(existing.body.errors[0].message).toContain('already');
    const noToken = await t.call('POST', `${a()}/sinks`, { name: 'no_token', type: 'r2_data_catalog', config: { bucket: 'lake', table_name: 't1' } });
    expect(noToken.status).toBe(400);
    expect(JSON.stringify(noToken.body.errors)).toContain('token');
    const badName = await t.call('POST', `${a()}/sinks`, { name: 'bad_name', type: 'r2_data_catalog', config: { bucket: 'lake', table_name: '../x', token: 'x' } });
    expect(badName.status).toBe(400);
    const json = await t.call('POST', `${a()}/sinks`, { name: 'json_cat', type: 'r2_data_catalog', format: { type: 'json' }, config: { bucket: 'lake', table_name: 't2', token: 'x' } });
    expect(json.status).toBe(400);
    const intoCatalog = await t.call('POST', `${a()}/sinks`, { name: 'files_in_catalog', type: 'r2', config: { bucket: 'lake', path: '__r2_data_catalog/shop' } });
    expect(intoCatalog.status).toBe(400);
    expect(JSON.stringify(intoCatalog.body.errors)).toContain('__r2_data_catalog');
    const sdkErr = await sdk(t)
      .pipelines.sinks.create({ account_id: t.accountId, name: 'dup', type: 'r2_data_catalog', config: { account_id: t.accountId, bucket: 'lake', namespace: 'shop', table_name: 'orders', token: 'x' } })
      .catch((e) => e);
    expect(sdkErr).toBeInstanceOf(Cloudflare.ConflictError);

    const catalog = new IcebergRestCatalog({ baseUrl: catalogUri(), auth: { type: 'bearer', token: t.token } });
    const missing = await catalog.loadTable({ namespace: ['shop'], name: 'nope' }).catch((e) => e);
    expect(missing.status).toBe(404);
    expect(missing.icebergType).toBe('NoSuchTableException');
    expect(await catalog.tableExists({ namespace: ['shop'], name: 'orders' })).toBe(true);
    expect(await catalog.namespaceExists({ namespace: ['nowhere'] })).toBe(false);
    const drop = await catalog.dropTable({ namespace: ['shop'], name: 'orders' }).catch((e) => e);
    expect(drop.status).toBe(409);
    expect(drop.message).toContain('orders_table');
    const commit = await catalog.updateTable({ namespace: ['shop'], name: 'orders' }, { requirements: [], updates: [] } as never).catch((e) => e);
    expect(commit.status).toBe(406);
    const notEmpty = await catalog.dropNamespace({ namespace: ['shop'] }).catch((e) => e);
    expect(notEmpty.status).toBe(409);

    // An empty table made through the catalog, then dropped; a namespace created and dropped.
    await catalog.createNamespace({ namespace: ['scratch'] });
    const dup = await catalog.createNamespace({ namespace: ['scratch'] }).catch((e) => e);
    expect(dup.status).toBe(409);
    const made = await catalog.createTable({ namespace: ['scratch'] }, { name: 'notes', schema: { type: 'struct', fields: [{ id: 1, name: 'text', type: 'string', required: false }] } } as never);
    expect(made.schemas[0].fields[0].name).toBe('text');
    await catalog.dropTable({ namespace: ['scratch'], name: 'notes' }, { purge: true });
    await catalog.dropNamespace({ namespace: ['scratch'] });
    expect(await catalog.listNamespaces()).toEqual([{ namespace: ['default'] }, { namespace: ['shop'] }]);

    const anonymous = await fetch(`${catalogUri()}v1/namespaces`);
    expect(anonymous.status).toBe(401);
  });
});
