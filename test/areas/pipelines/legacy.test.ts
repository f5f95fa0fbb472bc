/**
 * The deprecated pipelines API through the official client (`pipelines.create/get/list/update/
 * delete`): a legacy pipeline takes events over HTTP and from a script binding named after it,
 * writes gzip'd JSON files rolled by `max_rows` into `event_date=…/hr=…` folders, is queryable,
 * can change its sources and destination, and is removed with its parts.
 */
import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { sdk, Cloudflare } from '../../support/sdk.ts';
import { uploadScript } from '../workflows/helpers.ts';
import { sinkFiles } from '../../../src/areas/pipelines/query.ts';
import { until } from './support.ts';

let t: TestServer;
const a = () => `/accounts/${t.accountId}/pipelines/v1`;

beforeAll(async () => {
  t = await startTestServer({ pipelinesTickMs: 40 });
}, 60_000);
afterAll(async () => {
  await t?.stop();
});

const destination = (batch: { max_rows?: number; max_duration_s?: number }, compression: 'gzip' | 'none' | 'deflate' = 'gzip', path: Record<string, string> = {}) => ({
  type: 'r2' as const,
  format: 'json' as const,
  batch,
  compression: { type: compression },
  credentials: { access_key_id: 'key', secret_access_key: 'secret-key', endpoint: 'https://example.invalid' },
  path: { bucket: 'legacy-bucket', prefix: 'events', ...path },
});

const streamIdOf = (endpoint: string) => new URL(endpoint).hostname.split('.')[0];
async function ingest(streamId: string, events: unknown[]): Promise<number> {
  const res = await fetch(`${t.url}/pipelines/ingest/${streamId}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(events) });
  await res.arrayBuffer();
  return res.status;
}

describe('deprecated pipelines API', () => {
  it('creates a pipeline fed over HTTP and by a binding, writing gzip JSON files rolled by max_rows', async () => {
    const cf = sdk(t);
    const created = await cf.pipelines.create({
      account_id: t.accountId,
      name: 'web-events',
      source: [{ type: 'http', format: 'json' }, { type: 'binding', format: 'json' }],
      destination: destination({ max_rows: 3, max_duration_s: 1 }),
    });
    expect(created).toMatchObject({ name: 'web-events', version: 1, source: [{ type: 'http' }, { type: 'binding' }] });
    expect(JSON.stringify(created)).not.toContain('secret-key');
    const streamId = streamIdOf(created.endpoint);
    expect((await cf.pipelines.get('web-events', { account_id: t.accountId })).endpoint).toBe(created.endpoint);

    // One event per request: max_rows is checked after each request's events.
    for (let n = 0; n < 5; n++) expect(await ingest(streamId, [{ n, via: 'http' }])).toBe(200);
    // A script binding written for this API names the pipeline.
    const script = `export default { async fetch(req, env) { await env.EVENTS.send([{ n: 5, via: 'binding' }, { n: 6, via: 'binding' }]); return new Response('ok'); } };`;
    expect((await uploadScript(t, 'legacy_sender', script, { bindings: [{ type: 'pipelines', name: 'EVENTS', pipeline: 'web-events' }] })).status).toBe(200);
    const sent = await fetch(`${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/legacy_sender/invoke`, { headers: { authorization: `Bearer ${t.token}` } });
    expect(await sent.text()).toBe('ok');

    const sink = (await t.call('GET', `${a()}/sinks`)).body.result.find((s: any) => s.name === 'legacy_web_events');
    const rowsIn = (p: string) => gunzipSync(readFileSync(p)).toString('utf8').trim().split('\n').map((l) => JSON.parse(l) as { n: number; via: string });
    const files = await until('all 7 events in gzip files', () => {
      const f = sinkFiles(`${t.config.dataDir}/pipelines/buckets`, t.accountId, sink);
      return f.reduce((n, p) => n + rowsIn(p).length, 0) === 7 ? f : undefined;
    });
    for (const f of files) expect(f).toMatch(/\/legacy-bucket\/events\/event_date=\d{4}-\d{2}-\d{2}\/hr=\d{2}\/[0-9A-Z]{26}\.json\.gz$/);
    expect(files.length).toBeGreaterThan(1);
    expect(rowsIn(files[0]).map((r) => r.n)).toEqual([0, 1, 2]);
    expect(files.flatMap(rowsIn).map((r) => r.n).sort()).toEqual([0, 1, 2, 3, 4, 5, 6]);
    const q = await t.call('POST', `${a()}/query`, 'SELECT via, COUNT(*) AS n FROM legacy_web_events GROUP BY via ORDER BY via', { 'content-type': 'text/plain' });
    expect(q.body.result.data).toEqual([
      { via: 'binding', n: '2' },
      { via: 'http', n: '5' },
    ]);

    // List (its own answer shape) with a search.
    const listed = await cf.pipelines.list({ account_id: t.accountId, search: 'web' });
    expect(listed.results.map((r) => r.name)).toEqual(['web-events']);
    expect(listed.result_info).toMatchObject({ count: 1, page: 1, total_count: 1 });
    expect((await cf.pipelines.list({ account_id: t.accountId, search: 'nothing' })).results).toEqual([]);

    // Update: HTTP off, uncompressed files under another prefix.
    const updated = await cf.pipelines.update('web-events', { account_id: t.accountId, name: 'web-events', source: [{ type: 'binding', format: 'json' }], destination: destination({ max_rows: 100, max_duration_s: 1 }, 'none', { prefix: 'plain' }) });
    expect(updated.version).toBe(2);
    expect(updated.endpoint).toBe('');
    expect(await ingest(streamId, [{ n: 7 }])).toBe(404);
    const sent2 = await fetch(`${t.api}/_outpost/accounts/${t.accountId}/workers/scripts/legacy_sender/invoke`, { headers: { authorization: `Bearer ${t.token}` } });
    expect(await sent2.text()).toBe('ok');
    const plain = (await t.call('GET', `${a()}/sinks`)).body.result.find((s: any) => s.name === 'legacy_web_events');
    expect(plain.config.path).toBe('plain');
    const plainFiles = await until('a plain JSON file with the binding events', () => {
      const f = sinkFiles(`${t.config.dataDir}/pipelines/buckets`, t.accountId, plain);
      return f.some((p) => readFileSync(p, 'utf8').includes('"via":"binding"')) ? f : undefined;
    });
    expect(plainFiles.every((f) => f.endsWith('.json'))).toBe(true);

    await cf.pipelines.delete('web-events', { account_id: t.accountId });
    expect(await cf.pipelines.get('web-events', { account_id: t.accountId }).catch((e) => e)).toBeInstanceOf(Cloudflare.NotFoundError);
    expect((await t.call('GET', `${a()}/streams/${streamId}`)).status).toBe(404);
    expect((await t.call('GET', `${a()}/pipelines`)).body.result.map((p: any) => p.name)).not.toContain('legacy_web_events');
  }, 60_000);

  it('refuses bad destinations, duplicate names and renames, leaving nothing behind', async () => {
    const cf = sdk(t);
    const account_id = t.accountId;
    const source = [{ type: 'http', format: 'json' }] as const;
    const bad = async (p: Promise<unknown>) => (await p.then(() => undefined, (e) => e)) as InstanceType<typeof Cloudflare.APIError>;
    const deflate = await bad(cf.pipelines.create({ account_id, name: 'p1', source: [...source], destination: destination({}, 'deflate') }));
    expect(deflate).toBeInstanceOf(Cloudflare.BadRequestError);
    expect(JSON.stringify(deflate.errors)).toContain('deflate');
    const noSlug = await bad(cf.pipelines.create({ account_id, name: 'p1', source: [...source], destination: destination({}, 'gzip', { filename: 'fixed.json' }) }));
    expect(JSON.stringify(noSlug.errors)).toContain('${slug}');
    const badBucket = await bad(cf.pipelines.create({ account_id, name: 'p1', source: [...source], destination: destination({}, 'gzip', { bucket: 'Not A Bucket' }) }));
    expect(badBucket).toBeInstanceOf(Cloudflare.BadRequestError);
    const missing = await t.call('POST', `/accounts/${t.accountId}/pipelines`, { name: 'p1', source: [...source] });
    expect(missing.status).toBe(400);
    // None of the refusals left a stream, sink or pipeline.
    for (const kind of ['streams', 'sinks', 'pipelines']) expect((await t.call('GET', `${a()}/${kind}`)).body.result.map((x: any) => x.name)).not.toContain('legacy_p1');

    await cf.pipelines.create({ account_id, name: 'p1', source: [...source], destination: destination({}) });
    expect(await bad(cf.pipelines.create({ account_id, name: 'p1', source: [...source], destination: destination({}, 'gzip', { prefix: 'other' }) }))).toBeInstanceOf(Cloudflare.ConflictError);
    const rename = await bad(cf.pipelines.update('p1', { account_id, name: 'p2', source: [...source], destination: destination({}) }));
    expect(rename).toBeInstanceOf(Cloudflare.BadRequestError);
    expect(await bad(cf.pipelines.get('nope', { account_id }))).toBeInstanceOf(Cloudflare.NotFoundError);
    await cf.pipelines.delete('p1', { account_id });
  });
});
