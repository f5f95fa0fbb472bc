/**
 * Real traffic through a tunnel: an HTTP origin on a private port, a real connector process
 * (`outpost tunnel run --token …`), requests through the edge (node's HTTP client and curl),
 * WebSocket, streaming both ways, live configuration, reconnects, and a SOCKS5 access process
 * reaching a private TCP address through an IP route.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import net from 'node:net';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import {
  decodeFrame,
  echoHandler,
  encodeFrame,
  startOrigin,
  wsEchoUpgrade,
  type Origin,
} from '../../support/origins.ts';
import {
  edgeRequest,
  socksConnect,
  spawnConnector,
  spawnOutpost,
  until,
  waitOutput,
  type Proc,
} from './helpers.ts';

const run = promisify(execFile);
const ZONE = 'tunnel-dp.test';
const PRIVATE = '127.0.55.1';
const MiB = 1024 * 1024;

let t: TestServer;
let A: string;
let edge: URL;
let tunnelId: string;
let token: string;
const origins: Origin[] = [];
const procs: Proc[] = [];
const servers: net.Server[] = [];
let echoPort: number;
let streamPort: number;
/** Bytes the flood origin has written so far (backpressure check). */
let flooded = 0;

function port(o: Origin): number {
  return (o.server.address() as net.AddressInfo).port;
}

/** Streams `total` bytes in 64 KiB chunks, honouring backpressure; counts what was written. */
function pump(res: ServerResponse, total: number, onWrite?: (n: number) => void): void {
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': total });
  let sent = 0;
  const next = () => {
    while (sent < total) {
      const chunk = Buffer.alloc(Math.min(65536, total - sent), sent % 251);
      sent += chunk.length;
      onWrite?.(sent);
      if (!res.write(chunk)) return void res.once('drain', next);
    }
    res.end();
  };
  next();
}

function expectedHash(total: number): string {
  const h = createHash('sha256');
  for (let sent = 0; sent < total;) {
    const n = Math.min(65536, total - sent);
    h.update(Buffer.alloc(n, sent % 251));
    sent += n;
  }
  return h.digest('hex');
}

function streamOrigin(req: IncomingMessage, res: ServerResponse): void {
  if (req.url === '/big') return pump(res, 64 * MiB);
  if (req.url === '/flood') return pump(res, 256 * MiB, (n) => (flooded = n));
  res.writeHead(200, { 'content-type': 'text/plain', 'x-origin': 'stream' });
  res.end(`stream origin ${req.url}`);
}

async function status(id = tunnelId) {
  return (await t.call('GET', `${A}/cfd_tunnel/${id}`)).body.result as {
    status: string;
    connections: { id: string; is_pending_reconnect: boolean }[];
  };
}

async function healthy(id = tunnelId, count = 4) {
  return until(`tunnel ${id} healthy with ${count} connections`, async () => {
    const s = await status(id);
    return (
      s.status === 'healthy' &&
      s.connections.filter((c) => !c.is_pending_reconnect).length === count &&
      s
    );
  });
}

async function route(hostname: string, id = tunnelId) {
  const res = await t.call('POST', `${A}/tunnels/${id}/connections`, { hostname });
  if (res.status !== 200) throw new Error(res.text);
}

function ingress(extra: { hostname?: string; path?: string; service: string }[] = []) {
  return {
    config: {
      ingress: [
        { hostname: `app.${ZONE}`, path: '^/api/', service: `http://127.0.0.1:${echoPort}` },
        { hostname: `app.${ZONE}`, service: `http://127.0.0.1:${streamPort}` },
        {
          hostname: `*.wild.${ZONE}`,
          service: `http://127.0.0.1:${echoPort}`,
          originRequest: { httpHostHeader: 'rewritten.internal' },
        },
        { hostname: `teapot.${ZONE}`, service: 'http_status:418' },
        { hostname: `ws.${ZONE}`, service: `http://127.0.0.1:${echoPort}` },
        { hostname: `hello.${ZONE}`, service: 'hello_world' },
        { hostname: `down.${ZONE}`, service: 'http://127.0.0.1:1' },
        ...extra,
        { service: 'http_status:404' },
      ],
    },
  };
}

beforeAll(async () => {
  t = await startTestServer({ originResponseTimeoutMs: 20_000 });
  A = `/accounts/${t.accountId}`;
  edge = new URL(t.server.listeners.find((l) => l.name.startsWith('edge'))!.address);
  const echo = await startOrigin('127.0.0.1', echoHandler, wsEchoUpgrade, 0);
  const stream = await startOrigin('127.0.0.1', streamOrigin, undefined, 0);
  origins.push(echo, stream);
  echoPort = port(echo);
  streamPort = port(stream);
  await createZone(t, ZONE);

  const created = await t.call('POST', `${A}/tunnels`, {
    name: 'data-plane',
    tunnel_secret: randomBytes(32).toString('base64'),
  });
  tunnelId = created.body.result.id;
  token = created.body.result.token;
  const cfg = await t.call('PUT', `${A}/tunnels/${tunnelId}/configurations`, ingress());
  if (cfg.status !== 200) throw new Error(cfg.text);
  for (const h of ['app', '*.wild', 'teapot', 'ws', 'hello', 'down', 'nomatch'])
    await route(`${h}.${ZONE}`);

  procs.push(spawnConnector(token));
  await healthy();
}, 60_000);

afterAll(async () => {
  await Promise.all(procs.map((p) => p.stop()));
  for (const s of servers) s.close();
  for (const o of origins) await o.close();
  await t?.stop();
});

describe('HTTP through the tunnel', () => {
  it('ingress by host and path, wildcard hosts, http_status and hello_world rules, catch-all', async () => {
    const api = await edgeRequest(edge, `app.${ZONE}`, '/api/users?x=1');
    expect(api.status).toBe(200);
    const seen = JSON.parse(api.body.toString());
    expect(seen).toMatchObject({ method: 'GET', url: '/api/users?x=1' });
    expect(seen.headers).toMatchObject({
      host: `app.${ZONE}`,
      'cf-connecting-ip': '127.0.0.1',
      'x-forwarded-proto': 'http',
    });
    expect(seen.headers['cf-ray']).toMatch(/-OUT$/);
    expect(api.headers['cf-ray']).toMatch(/-OUT$/);

    const other = await edgeRequest(edge, `app.${ZONE}`, '/v2/api/x');
    expect(other.body.toString()).toBe('stream origin /v2/api/x');
    expect(other.headers['x-origin']).toBe('stream');

    const wild = await edgeRequest(edge, `deep.sub.wild.${ZONE}`, '/w');
    expect(JSON.parse(wild.body.toString()).headers.host).toBe('rewritten.internal');

    const teapot = await edgeRequest(edge, `teapot.${ZONE}`, '/');
    expect(teapot.status).toBe(418);
    const hello = await edgeRequest(edge, `hello.${ZONE}`, '/');
    expect(hello.status).toBe(200);
    expect(hello.body.toString()).toContain('tunnel');
    const fallback = await edgeRequest(edge, `nomatch.${ZONE}`, '/');
    expect(fallback.status).toBe(404);
  });

  it('an origin the connector cannot reach is the 502 error page', async () => {
    const res = await edgeRequest(edge, `down.${ZONE}`, '/');
    expect(res.status).toBe(502);
    expect(res.body.toString()).toContain('Bad gateway');
  });

  it('curl through the edge', async () => {
    const { stdout } = await run('curl', [
      '-sS',
      '--max-time',
      '20',
      '-H',
      `Host: app.${ZONE}`,
      '-d',
      'from curl',
      `http://${edge.host}/api/curl`,
    ]);
    expect(JSON.parse(stdout)).toMatchObject({ method: 'POST', url: '/api/curl', length: 9 });
  });

  it('streams a large upload (64 MiB, chunked) to the origin intact', async () => {
    const total = 64 * MiB;
    const hash = createHash('sha256');
    let made = 0;
    const body = new Readable({
      read() {
        if (made >= total) return void this.push(null);
        const chunk = randomBytes(Math.min(256 * 1024, total - made));
        made += chunk.length;
        hash.update(chunk);
        this.push(chunk);
      },
    });
    const res = await edgeRequest(edge, `app.${ZONE}`, '/api/upload', {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/octet-stream' },
      timeoutMs: 60_000,
    });
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body.toString())).toMatchObject({
      length: total,
      sha256: hash.digest('hex'),
    });
  }, 60_000);

  it('streams a large download (64 MiB) intact', async () => {
    const res = await edgeRequest(edge, `app.${ZONE}`, '/big', { timeoutMs: 60_000 });
    expect(res.status).toBe(200);
    expect(res.body.length).toBe(64 * MiB);
    expect(createHash('sha256').update(res.body).digest('hex')).toBe(expectedHash(64 * MiB));
  }, 60_000);

  it('applies backpressure: a visitor that does not read holds the origin back', async () => {
    flooded = 0;
    const total = 256 * MiB;
    await new Promise<void>((resolve, reject) => {
      const req = http.get(
        { host: edge.hostname, port: edge.port, path: '/flood', headers: { host: `app.${ZONE}` } },
        (res) => {
          res.pause();
          setTimeout(() => {
            try {
              // Windows and socket buffers are a few MiB each; nothing like the whole body.
              expect(flooded).toBeGreaterThan(0);
              expect(flooded).toBeLessThan(48 * MiB);
            } catch (err) {
              res.destroy();
              return reject(err);
            }
            let got = 0;
            res.on('data', (c: Buffer) => (got += c.length));
            res.on('end', () =>
              got === total ? resolve() : reject(new Error(`got ${got} bytes`)),
            );
            res.resume();
          }, 1500);
        },
      );
      req.setTimeout(60_000, () => req.destroy(new Error('flood timed out')));
      req.on('error', reject);
    });
  }, 90_000);

  it('carries a WebSocket through the tunnel', async () => {
    const socket = net.connect(Number(edge.port), edge.hostname);
    const got: string[] = [];
    let pending = Buffer.alloc(0);
    let upgraded = false;
    const ready = new Promise<string>((resolve, reject) => {
      socket.on('error', reject);
      socket.on('data', (d: Buffer) => {
        pending = Buffer.concat([pending, d]);
        if (!upgraded) {
          const end = pending.indexOf('\r\n\r\n');
          if (end < 0) return;
          const head = pending.subarray(0, end).toString();
          pending = pending.subarray(end + 4);
          upgraded = true;
          resolve(head);
        }
        const text = decodeFrame(pending);
        if (text !== undefined) {
          pending = Buffer.alloc(0);
          got.push(text);
        }
      });
    });
    socket.write(
      `GET /chat HTTP/1.1\r\nHost: ws.${ZONE}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`,
    );
    const head = await ready;
    expect(head).toMatch(/^HTTP\/1.1 101 /);
    expect(head).toMatch(/Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK\+xOo=/i);
    for (const msg of ['hello', 'through the tunnel']) {
      socket.write(encodeFrame(msg, true));
      await until(`echo of ${msg}`, async () => got.includes(`echo: ${msg}`), 10_000, 20);
    }
    socket.destroy();
  });
});

describe('configuration and connections', () => {
  it('connectors report their connections; requests spread over them', async () => {
    const clients = (await t.call('GET', `${A}/cfd_tunnel/${tunnelId}/connections`)).body.result;
    expect(clients).toHaveLength(1);
    expect(clients[0]).toMatchObject({
      version: '0.1.0',
      config_version: 1,
      arch: `${process.platform}_${process.arch}`,
    });
    expect(clients[0].conns).toHaveLength(4);
    for (const c of clients[0].conns) {
      expect(c).toMatchObject({
        colo_name: 'outpost',
        origin_ip: '127.0.0.1',
        client_id: clients[0].id,
        client_version: '0.1.0',
        is_pending_reconnect: false,
      });
      expect(Date.parse(c.opened_at)).not.toBeNaN();
    }
    const tun = await status();
    expect(tun).toMatchObject({ status: 'healthy', conns_active_at: expect.any(String) });
  });

  it('applies a new configuration while requests flow, without failing any', async () => {
    let stop = false;
    const statuses: number[] = [];
    const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
    const worker = async () => {
      while (!stop)
        statuses.push((await edgeRequest(edge, `app.${ZONE}`, '/api/flow', { agent })).status);
    };
    const workers = Array.from({ length: 8 }, worker);
    await until('requests flowing', async () => statuses.length > 50, 10_000, 20);
    await route(`late.${ZONE}`);
    const put = await t.call(
      'PUT',
      `${A}/cfd_tunnel/${tunnelId}/configurations`,
      ingress([{ hostname: `late.${ZONE}`, service: 'http_status:202' }]),
    );
    expect(put.body.result.version).toBe(2);
    await until(
      'the new rule in force',
      async () => (await edgeRequest(edge, `late.${ZONE}`, '/')).status === 202,
      10_000,
      50,
    );
    const before = statuses.length;
    await until(
      'more requests after the update',
      async () => statuses.length > before + 50,
      10_000,
      20,
    );
    stop = true;
    await Promise.all(workers);
    agent.destroy();
    expect(statuses.length).toBeGreaterThan(100);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    const clients = (await t.call('GET', `${A}/cfd_tunnel/${tunnelId}/connections`)).body.result;
    expect(clients[0].config_version).toBe(2);
  });

  it('a tunnel with live connections cannot be deleted', async () => {
    const res = await t.call('DELETE', `${A}/cfd_tunnel/${tunnelId}`);
    expect(res.status).toBe(400);
    expect(res.body.errors[0].code).toBe(1022);
  });

  it('a tunnel without a live connection answers 1033', async () => {
    const dark = await t.call('POST', `${A}/tunnels`, {
      name: 'dark',
      tunnel_secret: randomBytes(32).toString('base64'),
    });
    await route(`dark.${ZONE}`, dark.body.result.id);
    const res = await edgeRequest(edge, `dark.${ZONE}`, '/');
    expect(res.status).toBe(530);
    expect(res.body.toString()).toContain('Error 1033');
  });

  it('reconnects after its connections are cut: healthy → down → healthy', async () => {
    const before = await status();
    expect(before.status).toBe('healthy');
    const cut = await t.call('DELETE', `${A}/cfd_tunnel/${tunnelId}/connections`);
    expect(cut.status).toBe(200);
    expect((await status()).status).toBe('down');
    expect((await edgeRequest(edge, `app.${ZONE}`, '/api/during')).status).toBe(530);
    const after = await healthy();
    const oldIds = new Set(before.connections.map((c) => c.id));
    expect(after.connections.every((c) => !oldIds.has(c.id))).toBe(true);
    expect((await edgeRequest(edge, `app.${ZONE}`, '/api/after')).status).toBe(200);
  });
});

describe('private network access (SOCKS5)', () => {
  let access: Proc;
  let socksPort: number;
  let privateHttpPort: number;
  let privateEchoPort: number;

  beforeAll(async () => {
    const echo = net.createServer((s) => s.pipe(s));
    const web = http.createServer((req, res) => res.end(`private web ${req.url}`));
    for (const s of [echo, web]) {
      await new Promise<void>((resolve) => s.listen(0, PRIVATE, () => resolve()));
      servers.push(s);
    }
    privateEchoPort = (echo.address() as net.AddressInfo).port;
    privateHttpPort = (web.address() as net.AddressInfo).port;
    const r = await t.call('POST', `${A}/tunnels/${tunnelId}/routes`, {
      ip_network: '127.0.55.0/24',
      comment: 'lab',
    });
    if (r.status !== 200) throw new Error(r.text);
    access = spawnOutpost([
      'access',
      '--socks5',
      '127.0.0.1:0',
      '--api',
      t.api,
      '--api-token',
      t.token,
    ]);
    procs.push(access);
    socksPort = Number(
      (await waitOutput(access, /SOCKS5 proxy listening on 127\.0\.0\.1:(\d+)/))[1],
    );
  }, 30_000);

  it('curl --socks5 reaches a private HTTP server through the route', async () => {
    const { stdout } = await run('curl', [
      '-sS',
      '--max-time',
      '20',
      '--socks5',
      `127.0.0.1:${socksPort}`,
      `http://${PRIVATE}:${privateHttpPort}/inside`,
    ]);
    expect(stdout).toBe('private web /inside');
  });

  it('a raw TCP stream goes both ways', async () => {
    const { socket, rep } = await socksConnect(socksPort, PRIVATE, privateEchoPort);
    expect(rep).toBe(0);
    const payload = randomBytes(2 * MiB);
    const chunks: Buffer[] = [];
    let got = 0;
    const done = new Promise<void>((resolve) =>
      socket!.on('data', (d: Buffer) => {
        chunks.push(d);
        got += d.length;
        if (got >= payload.length) resolve();
      }),
    );
    socket!.write(payload);
    await Promise.race([
      done,
      new Promise((_, reject) => setTimeout(() => reject(new Error('echo timed out')), 20_000)),
    ]);
    expect(Buffer.concat(chunks).equals(payload)).toBe(true);
    socket!.destroy();
  });

  it('refusals: no route (network unreachable), closed port (connection refused)', async () => {
    expect((await socksConnect(socksPort, '127.0.56.1', privateHttpPort)).rep).toBe(3);
    const closed = await new Promise<number>((resolve) => {
      const s = net.createServer();
      s.listen(0, PRIVATE, () => {
        const p = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    expect((await socksConnect(socksPort, PRIVATE, closed)).rep).toBe(5);
    const failed = await run('curl', [
      '-sS',
      '--max-time',
      '10',
      '--socks5',
      `127.0.0.1:${socksPort}`,
      `http://127.0.56.1:${privateHttpPort}/`,
    ]).catch((e: { code: number }) => e);
    expect((failed as { code: number }).code).toBe(97);
  });
});

describe('a locally managed tunnel with a configuration file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-tunnel-config-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('serves the file ingress, then the remote configuration once one is stored', async () => {
    const created = await t.call('POST', `${A}/cfd_tunnel`, {
      name: 'local-file',
      tunnel_secret: randomBytes(32).toString('base64'),
    });
    const id = created.body.result.id as string;
    expect(created.body.result.config_src).toBe('local');
    const localToken = (await t.call('GET', `${A}/cfd_tunnel/${id}/token`)).body.result as string;
    await route(`local.${ZONE}`, id);
    const file = join(dir, 'config.yml');
    writeFileSync(
      file,
      `# a connector configuration file
tunnel: ${id}
ingress:
  - hostname: local.${ZONE}
    path: ^/echo
    service: http://127.0.0.1:${echoPort}
  - hostname: local.${ZONE}
    service: http_status:451
  - service: http_status:404
`,
    );
    const p = spawnConnector(localToken, ['--config', file, '--ha-connections', '1']);
    procs.push(p);
    await healthy(id, 1);
    expect(
      JSON.parse((await edgeRequest(edge, `local.${ZONE}`, '/echo/1')).body.toString()).url,
    ).toBe('/echo/1');
    expect((await edgeRequest(edge, `local.${ZONE}`, '/other')).status).toBe(451);

    await t.call('PUT', `${A}/cfd_tunnel/${id}/configurations`, {
      config: { ingress: [{ service: 'http_status:418' }] },
    });
    await until(
      'the remote configuration in force',
      async () => (await edgeRequest(edge, `local.${ZONE}`, '/echo/2')).status === 418,
      10_000,
      50,
    );
    await waitOutput(p, /remote configuration replaces the local one/);
    await p.stop();
    expect(p.child.exitCode).toBe(0);
  });
});
