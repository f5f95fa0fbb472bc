/**
 * PROXY protocol to the origin. HAProxy (Debian package) is the origin, with `accept-proxy`
 * frontends that answer each HTTP request with the client and frontend addresses it took from the
 * header (`%ci %cp %fi %fp`): that proves v1 and v2 as a real implementation reads them, for
 * IPv4 and IPv6 clients. A raw origin also checks the exact bytes, and the encoders are checked
 * against hand-written headers.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseSimpleHeader, proxyV1, proxyV2, simpleHeader, v2HeaderLength } from '../../../src/areas/spectrum/proxy-protocol.ts';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { freePort, waitFor, withTimeout } from './peers.ts';

const HAPROXY = '/usr/sbin/haproxy';
/** HAProxy is the real peer that proves the headers; its absence is a failure, not a skip. */
function requireHaproxy(): void {
  if (!existsSync(HAPROXY)) throw new Error(`${HAPROXY} is missing: apt-get install haproxy (scripts/test.sh does it)`);
}

describe('header encoders', () => {
  it('v1 is one text line; TCP6 when a side is IPv6', () => {
    expect(proxyV1({ ip: '192.0.2.1', port: 5000 }, { ip: '198.51.100.2', port: 22 }).toString()).toBe('PROXY TCP4 192.0.2.1 198.51.100.2 5000 22\r\n');
    expect(proxyV1({ ip: '2001:db8::1', port: 5000 }, { ip: '::1', port: 22 }).toString()).toBe('PROXY TCP6 2001:db8::1 ::1 5000 22\r\n');
  });

  it('v2 has the signature, PROXY command, family and addresses (STREAM for TCP, DGRAM for UDP)', () => {
    const h = proxyV2({ ip: '192.0.2.1', port: 5000 }, { ip: '198.51.100.2', port: 22 }, 'tcp');
    expect(h.toString('hex')).toBe('0d0a0d0a000d0a515549540a' + '21' + '11' + '000c' + 'c0000201' + 'c6336402' + '1388' + '0016');
    const u = proxyV2({ ip: '::1', port: 53000 }, { ip: '2001:db8::2', port: 53 }, 'udp');
    expect(u[13]).toBe(0x22);
    expect(u.readUInt16BE(14)).toBe(36);
    expect(u.subarray(16, 32).toString('hex')).toBe('00000000000000000000000000000001');
    expect(v2HeaderLength(Buffer.concat([u, Buffer.from('payload')]))).toBe(52);
  });

  it('the simple proxy protocol header is 38 bytes with IPv4-mapped addresses and reads back', () => {
    const h = simpleHeader({ ip: '192.0.2.1', port: 40000 }, { ip: '127.0.0.1', port: 53 });
    expect(h.length).toBe(38);
    expect(h.toString('hex')).toBe('56ec' + '00000000000000000000ffffc0000201' + '00000000000000000000ffff7f000001' + '9c40' + '0035');
    const parsed = parseSimpleHeader(Buffer.concat([h, Buffer.from('q')]));
    expect(parsed).toMatchObject({ client: { ip: '192.0.2.1', port: 40000 }, proxy: { ip: '127.0.0.1', port: 53 } });
    expect(parsed!.payload.toString()).toBe('q');
    expect(parseSimpleHeader(Buffer.from('no header here, just a datagram of some length'))).toBeUndefined();
  });
});

describe('PROXY headers at real origins', () => {
  let t: TestServer;
  let zone: { id: string; name: string };
  let haproxy: ChildProcess | undefined;
  let dir: string;
  let v1Port: number;
  let v2Port: number;
  let haproxyLog = '';
  const raw: { server?: net.Server; first: Buffer[] } = { first: [] };

  beforeAll(async () => {
    t = await startTestServer({ dnsPort: 0 });
    zone = await createZone(t, 'pp.test');
    // A raw origin: keeps the first bytes of each connection, answers "ok".
    raw.server = net.createServer((s) => {
      s.once('data', (d) => {
        raw.first.push(d);
        s.end('ok');
      });
      s.on('error', () => s.destroy());
    });
    await new Promise<void>((r) => raw.server!.listen(0, '127.0.0.1', () => r()));
    if (!existsSync(HAPROXY)) return; // the HAProxy tests below then fail with the reason
    dir = mkdtempSync(join(tmpdir(), 'outpost-spectrum-haproxy-'));
    v1Port = await freePort();
    v2Port = await freePort();
    const frontend = (name: string, port: number) => [
      `frontend ${name}`,
      `  bind 127.0.0.1:${port} accept-proxy`,
      '  http-request return status 200 content-type text/plain lf-string "%ci %cp %fi %fp"',
    ];
    writeFileSync(
      join(dir, 'haproxy.cfg'),
      [
        'global',
        '  maxconn 256',
        'defaults',
        '  mode http',
        '  timeout connect 2s',
        '  timeout client 5s',
        '  timeout server 5s',
        ...frontend('fe_v1', v1Port),
        ...frontend('fe_v2', v2Port),
        '',
      ].join('\n'),
    );
    haproxy = spawn(HAPROXY, ['-f', join(dir, 'haproxy.cfg'), '-db'], { stdio: ['ignore', 'pipe', 'pipe'] });
    haproxy.stdout!.on('data', (d) => (haproxyLog += d));
    haproxy.stderr!.on('data', (d) => (haproxyLog += d));
    const up = (port: number) =>
      new Promise<boolean>((resolve) => {
        const s = net.connect(port, '127.0.0.1', () => {
          s.destroy();
          resolve(true);
        });
        s.on('error', () => resolve(false));
      });
    await waitFor(async () => (await up(v1Port)) && (await up(v2Port)), 10_000, `HAProxy listening (log: ${haproxyLog})`);
  });

  afterAll(async () => {
    if (haproxy && haproxy.exitCode === null) {
      haproxy.kill('SIGTERM');
      await withTimeout(new Promise((r) => haproxy!.once('exit', r)), 5000, 'HAProxy exit').catch(() => haproxy!.kill('SIGKILL'));
    }
    raw.server?.close();
    await t?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function app(proxyProtocol: string, originPort: number): Promise<number> {
    const port = await freePort();
    const res = await t.call('POST', `/zones/${zone.id}/spectrum/apps`, { protocol: `tcp/${port}`, dns: { type: 'CNAME', name: `${proxyProtocol}-${originPort}.pp.test` }, origin_direct: [`tcp://127.0.0.1:${originPort}`], proxy_protocol: proxyProtocol });
    if (res.status !== 200) throw new Error(res.text);
    return port;
  }

  /** One HTTP/1.0 request through the app from a chosen local address; returns body and our port. */
  function request(port: number, host: string, localAddress: string): Promise<{ body: string; localPort: number }> {
    return withTimeout(
      new Promise((resolve, reject) => {
        let data = '';
        const s = net.connect({ port, host, localAddress }, () => s.write('GET / HTTP/1.0\r\nHost: pp.test\r\n\r\n'));
        const localPort = () => s.localPort;
        let lp = 0;
        s.once('connect', () => (lp = localPort()!));
        s.on('data', (d) => (data += d));
        s.on('error', reject);
        s.on('close', () => resolve({ body: data.split('\r\n\r\n')[1] ?? '', localPort: lp }));
      }),
      5000,
      'request through HAProxy',
    );
  }

  it('HAProxy reads the client address from a v1 header (IPv4 and IPv6 clients)', async () => {
    requireHaproxy();
    const port = await app('v1', v1Port);
    const r = await request(port, '127.0.0.1', '127.0.0.9');
    expect(r.body).toBe(`127.0.0.9 ${r.localPort} 127.0.0.1 ${port}`);
    const r6 = await request(port, '::1', '::1');
    expect(r6.body).toBe(`::1 ${r6.localPort} ::1 ${port}`);
  });

  it('HAProxy reads the client address from a v2 header (IPv4 and IPv6 clients)', async () => {
    requireHaproxy();
    const port = await app('v2', v2Port);
    const r = await request(port, '127.0.0.1', '127.0.0.10');
    expect(r.body).toBe(`127.0.0.10 ${r.localPort} 127.0.0.1 ${port}`);
    const r6 = await request(port, '::1', '::1');
    expect(r6.body).toBe(`::1 ${r6.localPort} ::1 ${port}`);
  });

  it('the origin gets exactly the header, then the client bytes (v1 and v2), and nothing when off', async () => {
    const originPort = (raw.server!.address() as net.AddressInfo).port;
    for (const mode of ['v1', 'v2', 'off'] as const) {
      raw.first.length = 0;
      const port = await app(mode, originPort);
      const got = await withTimeout(
        new Promise<{ reply: string; localPort: number }>((resolve, reject) => {
          let reply = '';
          const s = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.11' }, () => s.write('hello'));
          let localPort = 0;
          s.once('connect', () => (localPort = s.localPort!));
          s.on('data', (d) => (reply += d));
          s.on('error', reject);
          s.on('close', () => resolve({ reply, localPort }));
        }),
        5000,
        `raw origin with ${mode}`,
      );
      expect(got.reply).toBe('ok');
      await waitFor(() => raw.first.length > 0, 3000, 'first bytes at the origin');
      // The header and "hello" may arrive in one read or two.
      const first = raw.first[0];
      const client = { ip: '127.0.0.11', port: got.localPort };
      const edge = { ip: '127.0.0.1', port };
      const header = mode === 'v1' ? proxyV1(client, edge) : mode === 'v2' ? proxyV2(client, edge, 'tcp') : Buffer.alloc(0);
      expect(first.subarray(0, header.length).equals(header)).toBe(true);
      expect(['', 'hello']).toContain(first.subarray(header.length).toString());
    }
  });
});
