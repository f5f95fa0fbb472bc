/**
 * `r2` sinks with `--pipelines-s3-endpoint`: finished files are uploaded (SigV4, the sink's own
 * credentials) to an S3-compatible server (s3rver) under the same keys as the local files; a sink
 * whose credentials the server rejects gets no object, its pipeline reports the failure and keeps
 * the file pending (not delivered) while it retries. The signer is checked against the published
 * S3 SigV4 "GET object" example and a PUT signed by an independent SigV4 implementation. Files
 * above the part size go up as a multipart upload (seen through a recording proxy in front of
 * s3rver), land whole, and a failed part aborts the upload; the retry lands the file whole.
 */
import type { EventEmitter } from 'node:events';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex, signV4 } from '../../../src/areas/pipelines/sigv4.ts';
import { uploadFile, UploadError } from '../../../src/areas/pipelines/s3.ts';
import { createServer } from 'node:net';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { until } from './support.ts';

describe('SigV4 signer', () => {
  it('matches the published GET object example', () => {
    const h = signV4({
      method: 'GET',
      url: new URL('https://examplebucket.s3.amazonaws.com/test.txt'),
      headers: { Range: 'bytes=0-9' },
      payloadHash: sha256Hex(''),
      accessKeyId: 'AKIAIOSFODNN7EXAMPLE',
      secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
      region: 'us-east-1',
      date: new Date('2013-05-24T00:00:00Z'),
    });
    expect(h.authorization).toBe(
      'AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41',
    );
  });

  it('signs a PUT with a payload, an encoded path and region auto like another implementation', () => {
    const body = Buffer.from('{"id":"a=1"}\n');
    const h = signV4({
      method: 'PUT',
      url: new URL('http://127.0.0.1:9000/good-bucket/events/year%3D2026/month%3D11/x%3Dy.json'),
      payloadHash: sha256Hex(body),
      accessKeyId: 'AK',
      secretAccessKey: 'SECRET/x',
      region: 'auto',
      date: new Date('2026-11-26T02:15:00Z'),
    });
    expect(h['x-amz-content-sha256']).toBe('8a864eea7f5464f8b3a203027b2a5b0090af53b3c5b40b13ec8995dcee75f57e');
    expect(h.authorization).toBe('AWS4-HMAC-SHA256 Credential=AK/20261126/auto/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=8ed4b99fdf208af5376f1369de8cb192971e288c273556e936995ccf981f2813');
  });
});

describe('r2 sink on an S3-compatible endpoint', () => {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-s3rver-'));
  let s3: S3rver;
  let endpoint: string;
  let t: TestServer;
  const a = () => `/accounts/${t.accountId}/pipelines/v1`;

  beforeAll(async () => {
    s3 = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: dir, configureBuckets: [{ name: 'good-bucket' }, { name: 'bad-bucket' }, { name: 'restart-bucket' }] });
    const addr = await s3.run();
    endpoint = `http://127.0.0.1:${addr.port}`;
    t = await startTestServer({ pipelinesTickMs: 40, pipelinesS3Endpoint: endpoint });
  }, 60_000);
  afterAll(async () => {
    await t?.stop();
    await s3?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const keys = async (bucket: string): Promise<string[]> => {
    const xml = await (await fetch(`${endpoint}/${bucket}`)).text();
    return [...xml.matchAll(/<Key>([^<]*)<\/Key>/g)].map((m) => m[1]);
  };
  async function setup(name: string, bucket: string, accessKeyId: string) {
    const stream = (await t.call('POST', `${a()}/streams`, { name: `${name}_stream` })).body.result;
    const sink = await t.call('POST', `${a()}/sinks`, {
      name: `${name}_sink`,
      type: 'r2',
      format: { type: 'json' },
      config: { bucket, path: 'events', rolling_policy: { inactivity_seconds: 0.2 }, credentials: { access_key_id: accessKeyId, secret_access_key: 'S3RVER' } },
    });
    expect(sink.status).toBe(200);
    const p = await t.call('POST', `${a()}/pipelines`, { name: `${name}_pipe`, sql: `INSERT INTO ${name}_sink SELECT id, n FROM ${name}_stream` });
    expect(p.status).toBe(200);
    const events = Array.from({ length: 5 }, (_, i) => ({ id: `${name}-${i}`, n: i }));
    const res = await fetch(`${t.url}/pipelines/ingest/${stream.id}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(events) });
    expect(res.status).toBe(200);
    return p.body.result.id as string;
  }

  it('uploads finished files under the local keys, signed with the sink credentials', async () => {
    await setup('good', 'good-bucket', 'S3RVER');
    const [key] = await until('an object', async () => {
      const k = await keys('good-bucket');
      return k.length > 0 ? k : undefined;
    });
    expect(key).toMatch(/^events\/year=\d{4}\/month=\d{2}\/day=\d{2}\/\d{10}-[0-9a-f]{8}\.json$/);
    const text = await (await fetch(`${endpoint}/good-bucket/${key}`)).text();
    const rows = text.trim().split('\n').map((l) => JSON.parse(l));
    expect(rows).toEqual(Array.from({ length: 5 }, (_, i) => ({ id: `good-${i}`, n: i })));
    // The local copy stays and results are read from it.
    const q = await t.call('POST', `${a()}/query`, { sql: 'SELECT count(*) AS n FROM good_sink' });
    expect(q.status).toBe(200);
    expect(Number(q.body.result.data[0].n)).toBe(5);
  });

  it('a finished file above 8 MiB goes up as a multipart upload and lands whole', async () => {
    const stream = (await t.call('POST', `${a()}/streams`, { name: 'large_stream' })).body.result;
    expect((await t.call('POST', `${a()}/sinks`, { name: 'large_sink', type: 'r2', format: { type: 'json' }, config: { bucket: 'good-bucket', path: 'large', rolling_policy: { file_size_bytes: 8_500_000, inactivity_seconds: 600 }, credentials: { access_key_id: 'S3RVER', secret_access_key: 'S3RVER' } } })).status).toBe(200);
    expect((await t.call('POST', `${a()}/pipelines`, { name: 'large_pipe', sql: 'INSERT INTO large_sink SELECT * FROM large_stream' })).status).toBe(200);
    const created: string[] = [];
    const onEvent = (e: { Records: { eventName: string; s3: { object: { key: string } } }[] }) => created.push(`${e.Records[0].eventName} ${e.Records[0].s3.object.key}`);
    // s3rver is an EventEmitter ('event' per created object) beyond what its typings declare.
    const events = s3 as unknown as EventEmitter;
    events.on('event', onEvent);
    try {
      // 9 requests of ~0.97 MB (the stream takes 5 MB/s: a 429 waits its retry-after); the file
      // closes on size after the ninth (8.5 MB; neither a 429's wait nor inactivity closes it).
      const pad = 'p'.repeat(1000);
      for (let b = 0; b < 9; ) {
        const events = Array.from({ length: 950 }, (_, i) => ({ n: b * 950 + i, pad }));
        const res = await fetch(`${t.url}/pipelines/ingest/${stream.id}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(events) });
        if (res.status === 429) {
          await new Promise((r) => setTimeout(r, Number(res.headers.get('retry-after')) * 1000));
          continue;
        }
        expect(res.status).toBe(200);
        b++;
      }
      const [key] = await until('the large object', async () => {
        const k = (await keys('good-bucket')).filter((x) => x.startsWith('large/'));
        return k.length > 0 ? k : undefined;
      }, 30_000);
      const local = readFileSync(join(t.config.dataDir, 'pipelines', 'buckets', t.accountId, 'good-bucket', key));
      expect(local.length).toBeGreaterThan(8 * 1024 * 1024);
      const remote = Buffer.from(await (await fetch(`${endpoint}/good-bucket/${key}`)).arrayBuffer());
      expect(remote.equals(local)).toBe(true);
      expect(remote.toString('utf8').trim().split('\n').length).toBe(9 * 950);
      // Completed by CompleteMultipartUpload (a POST), not by one PUT.
      expect(created).toContain(`ObjectCreated:Post ${key}`);
    } finally {
      events.off('event', onEvent);
    }
  }, 60_000);

  // s3rver checks that the access key exists but does not verify V4 signatures: the rejected
  // sink here has an unknown access key (the signature itself is checked by the vectors above).
  it('rejected credentials upload nothing and keep the file pending while it retries', async () => {
    const id = await setup('bad', 'bad-bucket', 'NOT-A-KEY');
    const view = await until('a failing pipeline', async () => {
      const v = (await t.call('GET', `${a()}/pipelines/${id}`)).body.result;
      return v.status === 'failing' ? v : undefined;
    });
    expect(view.failure_reason).toMatch(/403 InvalidAccessKeyId.*config\.credentials\.access_key_id/);
    expect(await keys('bad-bucket')).toEqual([]);
    // The checkpoint still says "pending" (the file is not delivered) and covers all 5 rows.
    const cp = JSON.parse(readFileSync(join(t.config.dataDir, 'pipelines', 'state', `${id}.json`), 'utf8'));
    expect(cp.pending).toMatchObject({ seq: 1, rows: 5 });
  });

  it('after a restart a pending file is uploaded once, under the same key', async () => {
    const closed = await new Promise<number>((resolve) => {
      const srv = createServer().listen(0, '127.0.0.1', () => {
        const port = (srv.address() as { port: number }).port;
        srv.close(() => resolve(port));
      });
    });
    const dataDir = mkdtempSync(join(tmpdir(), 'outpost-s3-restart-'));
    const account = 'c0de0000c0de0000c0de0000c0de0000';
    let r = await startTestServer({ pipelinesTickMs: 40, pipelinesS3Endpoint: `http://127.0.0.1:${closed}`, accountId: account }, { dataDir });
    try {
      const base = `/accounts/${account}/pipelines/v1`;
      const stream = (await r.call('POST', `${base}/streams`, { name: 'rs_stream' })).body.result;
      await r.call('POST', `${base}/sinks`, { name: 'rs_sink', type: 'r2', config: { bucket: 'restart-bucket', path: 'events', rolling_policy: { inactivity_seconds: 0.2 }, credentials: { access_key_id: 'S3RVER', secret_access_key: 'S3RVER' } } });
      const id = (await r.call('POST', `${base}/pipelines`, { name: 'rs_pipe', sql: 'INSERT INTO rs_sink SELECT id FROM rs_stream' })).body.result.id as string;
      const res = await fetch(`${r.url}/pipelines/ingest/${stream.id}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify([{ id: 1 }, { id: 2 }]) });
      expect(res.status).toBe(200);
      const failing = await until('an unreachable endpoint reported', async () => {
        const v = (await r.call('GET', `${base}/pipelines/${id}`)).body.result;
        return v.status === 'failing' ? v : undefined;
      });
      expect(failing.failure_reason).toMatch(/--pipelines-s3-endpoint is reachable/);
      const state = join(dataDir, 'pipelines', 'state', `${id}.json`);
      const pending = JSON.parse(readFileSync(state, 'utf8')).pending as { file: string };
      expect(pending).toBeTruthy();
      // Stop without dropping the PostgreSQL schema: the next process opens the same database.
      await r.server.stop();
      r = await startTestServer({ pipelinesTickMs: 40, pipelinesS3Endpoint: endpoint, accountId: account, databaseSchema: r.config.databaseSchema }, { dataDir });
      const k = await until('the object', async () => {
        const list = await keys('restart-bucket');
        return list.length > 0 ? list : undefined;
      });
      expect(k).toEqual([`events/${pending.file}`]);
      await until('the checkpoint done', () => (JSON.parse(readFileSync(state, 'utf8')).pending === null ? true : undefined));
      await new Promise((res2) => setTimeout(res2, 300));
      expect(await keys('restart-bucket')).toEqual(k);
      const rows = (await (await fetch(`${endpoint}/restart-bucket/${k[0]}`)).text()).trim().split('\n').map((l) => JSON.parse(l));
      expect(rows).toEqual([{ id: 1 }, { id: 2 }]);
    } finally {
      await r.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('multipart upload', () => {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-s3-multipart-'));
  let s3: S3rver;
  let proxy: http.Server;
  let endpoint: string;
  let direct: string;
  /** Requests seen by the proxy: method and the query's keys (`uploads`, `partNumber` …). */
  let seen: string[] = [];
  /** Answer this many UploadPart requests (after the first) with 500 instead of forwarding. */
  let failParts = 0;

  beforeAll(async () => {
    s3 = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: join(dir, 's3'), configureBuckets: [{ name: 'parts-bucket' }] });
    const addr = await s3.run();
    direct = `http://127.0.0.1:${addr.port}`;
    proxy = http.createServer((req, res) => {
      const u = new URL(req.url!, 'http://x');
      const q = [...u.searchParams.keys()].sort().join('&');
      seen.push(`${req.method}${q ? ` ?${q}` : ''}`);
      if (u.searchParams.has('partNumber') && u.searchParams.get('partNumber') !== '1' && failParts > 0) {
        failParts--;
        req.resume();
        res.writeHead(500, { 'content-type': 'application/xml' }).end('<?xml version="1.0"?><Error><Code>InternalError</Code></Error>');
        return;
      }
      const up = http.request({ host: '127.0.0.1', port: addr.port, path: req.url, method: req.method, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode!, r.headers);
        r.pipe(res);
      });
      up.on('error', () => res.destroy());
      req.pipe(up);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
    endpoint = `http://127.0.0.1:${(proxy.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    await new Promise((r) => proxy?.close(r));
    await s3?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const creds = { access_key_id: 'S3RVER', secret_access_key: 'S3RVER' };
  const target = () => ({ endpoint, region: 'auto', partBytes: 64 * 1024 });

  it('a file above the part size goes up in parts (Create, UploadPart × n, Complete) and lands whole', async () => {
    // 3.5 parts: the last one is short.
    const bytes = randomBytes(64 * 1024 * 3 + 32 * 1024 + 7);
    const file = join(dir, 'big.bin');
    writeFileSync(file, bytes);
    seen = [];
    await uploadFile(target(), 'parts-bucket', 'events/year=2026/big.bin', file, creds);
    expect(seen).toEqual(['POST ?uploads', 'PUT ?partNumber&uploadId', 'PUT ?partNumber&uploadId', 'PUT ?partNumber&uploadId', 'PUT ?partNumber&uploadId', 'POST ?uploadId']);
    const got = Buffer.from(await (await fetch(`${direct}/parts-bucket/events/year=2026/big.bin`)).arrayBuffer());
    expect(got.length).toBe(bytes.length);
    expect(got.equals(bytes)).toBe(true);

    // At or below the part size: one PUT.
    const small = join(dir, 'small.bin');
    writeFileSync(small, bytes.subarray(0, 64 * 1024));
    seen = [];
    await uploadFile(target(), 'parts-bucket', 'events/small.bin', small, creds);
    expect(seen).toEqual(['PUT']);
    expect(Buffer.from(await (await fetch(`${direct}/parts-bucket/events/small.bin`)).arrayBuffer()).equals(bytes.subarray(0, 64 * 1024))).toBe(true);
  });

  it('a failed part aborts the upload and throws; the retry uploads the whole file again', async () => {
    const bytes = randomBytes(64 * 1024 * 2 + 100);
    const file = join(dir, 'retry.bin');
    writeFileSync(file, bytes);
    seen = [];
    failParts = 1;
    const err = await uploadFile(target(), 'parts-bucket', 'events/retry.bin', file, creds).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UploadError);
    expect((err as UploadError).message).toMatch(/UploadPart 2 PUT .* answered 500 InternalError/);
    expect(seen).toEqual(['POST ?uploads', 'PUT ?partNumber&uploadId', 'PUT ?partNumber&uploadId', 'DELETE ?uploadId']);
    expect((await fetch(`${direct}/parts-bucket/events/retry.bin`)).status).toBe(404);
    // The caller's retry: a new upload of the whole file.
    seen = [];
    await uploadFile(target(), 'parts-bucket', 'events/retry.bin', file, creds);
    expect(seen.filter((x) => x.startsWith('PUT')).length).toBe(3);
    expect(Buffer.from(await (await fetch(`${direct}/parts-bucket/events/retry.bin`)).arrayBuffer()).equals(bytes)).toBe(true);
  });

  it('refused credentials fail at CreateMultipartUpload with the fix named', async () => {
    const file = join(dir, 'denied.bin');
    writeFileSync(file, randomBytes(64 * 1024 + 1));
    const err = await uploadFile(target(), 'parts-bucket', 'events/denied.bin', file, { access_key_id: 'NOT-A-KEY', secret_access_key: 'x' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UploadError);
    expect((err as UploadError).status).toBe(403);
    expect((err as UploadError).fix).toMatch(/access_key_id/);
  });
});
