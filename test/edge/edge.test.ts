import http from 'node:http';
import net from 'node:net';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../support/server.ts';
import { decodeFrame, echoHandler, encodeFrame, startOrigin, wsAccept, wsEchoUpgrade, type Origin } from '../support/origins.ts';
import type { RequestEvent } from '../../src/edge/index.ts';

// Loopback addresses this file owns for its port-80 origins.
const ECHO = '127.0.10.1';
const SECOND = '127.0.10.2';
const REFUSED = '127.0.10.3';
const SILENT = '127.0.10.4';
const RESET = '127.0.10.5';
const BLACKHOLE = '127.0.10.6';

let t: TestServer;
let edgeUrl: URL;
const origins: Origin[] = [];
let blackhole: ChildProcess | undefined;
const events: RequestEvent[] = [];

async function record(zoneId: string, body: Record<string, unknown>) {
  const res = await t.call('POST', `/zones/${zoneId}/dns_records`, { ttl: 1, ...body });
  if (res.status !== 200) throw new Error(res.text);
}

interface Got {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

function get(host: string, path = '/', opts: { method?: string; body?: Buffer; headers?: Record<string, string> } = {}): Promise<Got> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: edgeUrl.hostname, port: edgeUrl.port, path, method: opts.method ?? 'GET', headers: { host, ...opts.headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

beforeAll(async () => {
  t = await startTestServer({ originConnectTimeoutMs: 1000, originResponseTimeoutMs: 800 });
  edgeUrl = new URL(t.server.listeners.find((l) => l.name.startsWith('edge'))!.address);
  t.server.events.subscribe('edge.request', (e) => events.push(e as RequestEvent));

  origins.push(await startOrigin(ECHO, echoHandler, wsEchoUpgrade));
  origins.push(await startOrigin(SECOND, (req, res) => {
    if (req.url === '/big') {
      // 8 MiB in 64 KiB chunks, written with backpressure.
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      let sent = 0;
      const chunk = Buffer.alloc(65536, 7);
      const pump = () => {
        while (sent < 128) {
          sent++;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.end();
      };
      pump();
      return;
    }
    res.end('second origin');
  }));
  origins.push(await startOrigin(SILENT, () => {
    /* accepts and never answers */
  }));
  origins.push(await startOrigin(RESET, (req) => req.socket.destroy()));
  // An origin whose accept queue is full: new connections are never accepted (SYNs dropped).
  blackhole = spawn('/usr/bin/python3', ['-c', `import socket,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('${BLACKHOLE}',80)); s.listen(0)
print('ready', flush=True); time.sleep(60)`], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve) => blackhole!.stdout!.once('data', () => resolve()));
  // Fill the accept queue from here so the next connection attempt hangs.
  for (let i = 0; i < 3; i++) {
    await new Promise<void>((resolve) => {
      const s = net.connect(80, BLACKHOLE);
      s.once('connect', () => resolve());
      s.once('error', () => resolve());
      setTimeout(resolve, 300);
    });
  }

  const z = await createZone(t, 'edge-routing.test');
  await record(z.id, { type: 'A', name: 'www', content: ECHO, proxied: true });
  await record(z.id, { type: 'A', name: 'dnsonly', content: ECHO, proxied: false });
  await record(z.id, { type: 'A', name: 'two', content: SECOND, proxied: true });
  await record(z.id, { type: 'A', name: '*.wild', content: SECOND, proxied: true });
  await record(z.id, { type: 'CNAME', name: 'alias', content: 'chain1.edge-routing.test', proxied: true });
  await record(z.id, { type: 'CNAME', name: 'chain1', content: 'two.edge-routing.test', proxied: false });
  await record(z.id, { type: 'CNAME', name: 'dangling', content: 'missing.edge-routing.test', proxied: true });
  await record(z.id, { type: 'A', name: 'refused', content: REFUSED, proxied: true });
  await record(z.id, { type: 'A', name: 'silent', content: SILENT, proxied: true });
  await record(z.id, { type: 'A', name: 'reset', content: RESET, proxied: true });
  await record(z.id, { type: 'A', name: 'blackhole', content: BLACKHOLE, proxied: true });
  const deeper = await createZone(t, 'sub.edge-routing.test');
  await record(deeper.id, { type: 'A', name: 'www', content: SECOND, proxied: true });
});

afterAll(async () => {
  blackhole?.kill('SIGKILL');
  for (const o of origins) await o.close();
  await t.stop();
});

describe('routing', () => {
  it('routes by host to the proxied record and forwards the platform headers', async () => {
    const res = await get('www.edge-routing.test', '/path?q=1', { headers: { 'x-forwarded-for': '198.51.100.7', connection: 'keep-alive, x-drop-me', 'x-drop-me': '1', 'x-keep': 'yes' } });
    expect(res.status).toBe(200);
    expect(res.headers['cf-ray']).toMatch(/^[0-9a-f]{16}-OUT$/);
    const seen = JSON.parse(res.body.toString());
    expect(seen.url).toBe('/path?q=1');
    expect(seen.headers.host).toBe('www.edge-routing.test');
    expect(seen.headers['cf-connecting-ip']).toBe('127.0.0.1');
    expect(seen.headers['x-forwarded-for']).toBe('198.51.100.7, 127.0.0.1');
    expect(seen.headers['x-forwarded-proto']).toBe('http');
    expect(seen.headers['cf-visitor']).toBe('{"scheme":"http"}');
    expect(seen.headers['cf-ipcountry']).toBe('XX');
    expect(seen.headers['cf-ray']).toBe(res.headers['cf-ray']);
    expect(seen.headers['x-keep']).toBe('yes');
    expect(seen.headers['x-drop-me']).toBeUndefined();
  });

  it('uses the longest matching zone, wildcards and CNAME chains inside our zones', async () => {
    expect((await get('www.sub.edge-routing.test')).body.toString()).toBe('second origin');
    expect((await get('anything.wild.edge-routing.test')).body.toString()).toBe('second origin');
    expect((await get('alias.edge-routing.test')).body.toString()).toBe('second origin');
  });

  it('answers 1001 for unknown hosts and records that are not proxied', async () => {
    for (const host of ['nowhere.example', 'dnsonly.edge-routing.test', 'nothing.edge-routing.test']) {
      const res = await get(host);
      expect(res.status).toBe(530);
      expect(res.headers['content-type']).toMatch(/text\/html/);
      expect(res.body.toString()).toContain('Error 1001');
      expect(res.body.toString()).toContain(res.headers['cf-ray']!.toString().slice(0, 16));
    }
  });

  it('follows changes at once', async () => {
    const z = await createZone(t, 'edge-live.test');
    expect((await get('www.edge-live.test')).status).toBe(530);
    await record(z.id, { type: 'A', name: 'www', content: SECOND, proxied: true });
    expect((await get('www.edge-live.test')).body.toString()).toBe('second origin');
  });
});

describe('origin failures', () => {
  it('1016 for a CNAME that resolves to nothing', async () => {
    const res = await get('dangling.edge-routing.test');
    expect(res.status).toBe(530);
    expect(res.body.toString()).toContain('Error 1016');
  });
  it('521 when the origin refuses', async () => {
    const res = await get('refused.edge-routing.test');
    expect(res.status).toBe(521);
    expect(res.body.toString()).toContain('Error code 521');
  });
  it('522 when the origin does not accept in time', async () => {
    const res = await get('blackhole.edge-routing.test');
    expect(res.status).toBe(522);
  });
  it('524 when the origin does not answer in time', async () => {
    const res = await get('silent.edge-routing.test');
    expect(res.status).toBe(524);
  });
  it('502 when the origin drops the connection', async () => {
    const res = await get('reset.edge-routing.test');
    expect(res.status).toBe(502);
  });
});

describe('streaming and upgrades', () => {
  it('streams a large request body to the origin and a large response back', async () => {
    const body = randomBytes(12 * 1024 * 1024);
    const up = await get('www.edge-routing.test', '/upload', { method: 'POST', body });
    const seen = JSON.parse(up.body.toString());
    expect(seen.length).toBe(body.length);
    expect(seen.sha256).toBe(createHash('sha256').update(body).digest('hex'));
    const down = await get('two.edge-routing.test', '/big');
    expect(down.body.length).toBe(128 * 65536);
  });

  it('proxies a WebSocket echo', async () => {
    const key = randomBytes(16).toString('base64');
    const reply = await new Promise<string>((resolve, reject) => {
      const req = http.request({
        host: edgeUrl.hostname,
        port: edgeUrl.port,
        headers: { host: 'www.edge-routing.test', connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-key': key, 'sec-websocket-version': '13' },
      });
      req.on('upgrade', (res, socket) => {
        expect(res.statusCode).toBe(101);
        expect(res.headers['sec-websocket-accept']).toBe(wsAccept(key));
        let buf = Buffer.alloc(0);
        socket.on('data', (d: Buffer) => {
          buf = Buffer.concat([buf, d]);
          const text = decodeFrame(buf);
          if (text !== undefined) {
            socket.destroy();
            resolve(text);
          }
        });
        socket.write(encodeFrame('hello through the edge', true));
      });
      req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
      req.on('error', reject);
      req.end();
    });
    expect(reply).toBe('echo: hello through the edge');
  });
});

describe('request events', () => {
  it('emits one event per request with zone, status, bytes and timings', async () => {
    events.length = 0;
    await get('www.edge-routing.test', '/evented', { method: 'POST', body: Buffer.from('12345') });
    await new Promise((r) => setTimeout(r, 20));
    const e = events.find((x) => x.path === '/evented')!;
    expect(e).toBeDefined();
    expect(e.host).toBe('www.edge-routing.test');
    expect(e.status).toBe(200);
    expect(e.bytesIn).toBe(5);
    expect(e.bytesOut).toBeGreaterThan(0);
    expect(e.method).toBe('POST');
    expect(e.zoneId).toMatch(/^[0-9a-f]{32}$/);
    expect(e.durationMs).toBeGreaterThanOrEqual(e.originMs ?? 0);
  });
});
