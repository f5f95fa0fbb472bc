/**
 * The UDP proxy: `dig` through an app whose origin is Outpost's own authoritative DNS server,
 * the simple proxy protocol and PROXY v2 (DGRAM) headers read by small UDP origins, a flow per
 * client, the idle timeout, failover on ICMP port unreachable, and flows ended by delete.
 */
import { execFile } from 'node:child_process';
import dgram from 'node:dgram';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ipFrom16, parseSimpleHeader, v2HeaderLength } from '../../../src/areas/spectrum/proxy-protocol.ts';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { flowEvents, freePort, waitFor, withTimeout } from './peers.ts';

const run = promisify(execFile);
const IDLE_MS = 400;

let t: TestServer;
let zone: { id: string; name: string };
let dnsPort: number;
let events: ReturnType<typeof flowEvents>;
const sockets: dgram.Socket[] = [];

interface UdpOrigin {
  port: number;
  /** Source ports of datagrams it received. */
  sources: number[];
  seen: Buffer[];
}

/** A UDP origin; `reply` builds the answer to each datagram (undefined: no answer). */
async function udpOrigin(reply: (msg: Buffer) => Buffer | undefined): Promise<UdpOrigin> {
  const s = dgram.createSocket('udp4');
  sockets.push(s);
  const o: UdpOrigin = { port: 0, sources: [], seen: [] };
  s.on('message', (msg, rinfo) => {
    o.sources.push(rinfo.port);
    o.seen.push(msg);
    const out = reply(msg);
    if (out) s.send(out, rinfo.port, rinfo.address);
  });
  await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
  o.port = s.address().port;
  return o;
}

/** A client socket that collects replies. */
async function client(host = '127.0.0.1'): Promise<{ sock: dgram.Socket; port: number; next(ms?: number): Promise<Buffer> }> {
  const sock = dgram.createSocket(host.includes(':') ? 'udp6' : 'udp4');
  sockets.push(sock);
  const inbox: Buffer[] = [];
  sock.on('message', (m) => inbox.push(m));
  await new Promise<void>((r) => sock.bind(0, host, () => r()));
  return {
    sock,
    port: sock.address().port,
    async next(ms = 3000) {
      await waitFor(() => inbox.length > 0, ms, 'a UDP reply');
      return inbox.shift()!;
    },
  };
}

beforeAll(async () => {
  t = await startTestServer({ dnsPort: 0, spectrumUdpIdleTimeoutMs: IDLE_MS });
  const dns = t.server.listeners.find((l) => l.name === 'authoritative DNS' && l.protocol === 'udp');
  if (!dns) throw new Error(`no DNS listener in ${JSON.stringify(t.server.listeners)}`);
  dnsPort = Number(dns.address.split(':').pop());
  zone = await createZone(t, 'udp.test');
  events = flowEvents(t.server.events);
});
afterAll(async () => {
  events?.stop();
  for (const s of sockets) {
    try {
      s.close();
    } catch {
      // already closed
    }
  }
  await t?.stop();
});

let n = 0;
async function app(origin: string[], extra: Record<string, unknown> = {}): Promise<{ id: string; port: number }> {
  const port = await freePort('udp');
  const res = await t.call('POST', `/zones/${zone.id}/spectrum/apps`, { protocol: `udp/${port}`, dns: { type: 'CNAME', name: `u${++n}.udp.test` }, origin_direct: origin, ...extra });
  if (res.status !== 200) throw new Error(res.text);
  return { id: res.body.result.id, port };
}

describe('dig through a UDP app', () => {
  it("answers from Outpost's authoritative DNS behind the app, over IPv4 and IPv6", async () => {
    expect((await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'www.udp.test', content: '192.0.2.55' })).status).toBe(200);
    const a = await app([`udp://127.0.0.1:${dnsPort}`]);
    const dig = (server: string) => run('dig', [`@${server}`, '-p', String(a.port), 'www.udp.test', 'A', '+short', '+tries=1', '+time=2'], { timeout: 10_000 });
    expect((await dig('127.0.0.1')).stdout.trim()).toBe('192.0.2.55');
    expect((await dig('::1')).stdout.trim()).toBe('192.0.2.55');
    // The app's own name answers with the edge addresses (its proxied CNAME).
    const own = await run('dig', ['@127.0.0.1', '-p', String(dnsPort), 'u1.udp.test', 'A', '+short', '+tries=1', '+time=2'], { timeout: 10_000 });
    expect(own.stdout.trim().split('\n')).toContain('127.0.0.1');
  });
});

describe('client address headers', () => {
  it('simple proxy protocol: 38-byte header on each datagram, the echoed header is removed', async () => {
    const origin = await udpOrigin((msg) => {
      const h = parseSimpleHeader(msg);
      return h ? Buffer.concat([msg.subarray(0, 38), Buffer.from('pong:'), h.payload]) : Buffer.from('no header');
    });
    const a = await app([`udp://127.0.0.1:${origin.port}`], { proxy_protocol: 'simple' });
    const c = await client();
    c.sock.send('ping', a.port, '127.0.0.1');
    expect((await c.next()).toString()).toBe('pong:ping');
    c.sock.send('again', a.port, '127.0.0.1');
    expect((await c.next()).toString()).toBe('pong:again');
    const h = parseSimpleHeader(origin.seen[0])!;
    expect(h.client).toEqual({ ip: '127.0.0.1', port: c.port });
    expect(h.proxy).toEqual({ ip: '127.0.0.1', port: a.port });
    expect(origin.seen.every((m) => parseSimpleHeader(m) !== undefined)).toBe(true);
  });

  it('PROXY v2 over UDP: a DGRAM header on each datagram carries the client (IPv6 too)', async () => {
    const origin = await udpOrigin((msg) => Buffer.concat([Buffer.from('ack:'), msg.subarray(v2HeaderLength(msg))]));
    const a = await app([`udp://127.0.0.1:${origin.port}`], { proxy_protocol: 'v2' });
    const c4 = await client();
    c4.sock.send('four', a.port, '127.0.0.1');
    expect((await c4.next()).toString()).toBe('ack:four');
    const h = origin.seen[0];
    expect(h[13]).toBe(0x12);
    expect(`${h[16]}.${h[17]}.${h[18]}.${h[19]}:${h.readUInt16BE(24)}`).toBe(`127.0.0.1:${c4.port}`);
    const c6 = await client('::1');
    c6.sock.send('six', a.port, '::1');
    expect((await c6.next()).toString()).toBe('ack:six');
    const h6 = origin.seen[1];
    expect(h6[13]).toBe(0x22);
    expect(`${ipFrom16(h6.subarray(16, 32))}:${h6.readUInt16BE(48)}`).toBe(`::1:${c6.port}`);
  });
});

describe('flows', () => {
  it('keeps one flow per client: replies reach the right client', async () => {
    const origin = await udpOrigin((msg) => Buffer.concat([Buffer.from('re:'), msg]));
    const a = await app([`udp://127.0.0.1:${origin.port}`]);
    const [c1, c2] = [await client(), await client()];
    c1.sock.send('one', a.port, '127.0.0.1');
    c2.sock.send('two', a.port, '127.0.0.1');
    expect((await c1.next()).toString()).toBe('re:one');
    expect((await c2.next()).toString()).toBe('re:two');
    expect(new Set(origin.sources).size).toBe(2);
  });

  it('ends a flow after the idle timeout (disconnect with its bytes); the next datagram opens a new one', async () => {
    const origin = await udpOrigin((msg) => msg);
    const a = await app([`udp://127.0.0.1:${origin.port}`]);
    const c = await client();
    c.sock.send('12345', a.port, '127.0.0.1');
    expect((await c.next()).toString()).toBe('12345');
    const gone = await events.wait((e) => e.appId === a.id && e.event === 'disconnect', IDLE_MS * 10, 'idle disconnect');
    const bytes = events.list.filter((e) => e.appId === a.id).reduce((s, e) => [s[0] + e.bytesIngress, s[1] + e.bytesEgress], [0, 0]);
    expect(bytes).toEqual([5, 5]);
    expect(gone.durationMs).toBeGreaterThanOrEqual(IDLE_MS - 50);
    c.sock.send('again', a.port, '127.0.0.1');
    expect((await c.next()).toString()).toBe('again');
    expect(events.list.filter((e) => e.appId === a.id && e.event === 'connect')).toHaveLength(2);
    expect(new Set(origin.sources).size).toBe(2);
  });

  it('fails over when an origin port is unreachable (ICMP), and reports originError when none is left', async () => {
    const dead = await freePort('udp');
    const origin = await udpOrigin((msg) => Buffer.concat([Buffer.from('alive:'), msg]));
    const a = await app([`udp://127.0.0.1:${dead}`, `udp://127.0.0.1:${origin.port}`]);
    const c = await client();
    c.sock.send('hello', a.port, '127.0.0.1');
    expect((await c.next()).toString()).toBe('alive:hello');
    const b = await app([`udp://127.0.0.1:${dead}`]);
    c.sock.send('anyone?', b.port, '127.0.0.1');
    await events.wait((e) => e.appId === b.id && e.event === 'originError', 3000, 'UDP originError');
  });

  it('delete ends the open flows and closes the port', async () => {
    const origin = await udpOrigin((msg) => msg);
    const a = await app([`udp://127.0.0.1:${origin.port}`]);
    const c = await client();
    c.sock.send('hi', a.port, '127.0.0.1');
    expect((await c.next()).toString()).toBe('hi');
    expect((await t.call('DELETE', `/zones/${zone.id}/spectrum/apps/${a.id}`)).status).toBe(200);
    await events.wait((e) => e.appId === a.id && e.event === 'disconnect', 2000, 'disconnect on delete');
    c.sock.send('still there?', a.port, '127.0.0.1');
    await expect(withTimeout(c.next(600), 1000, 'no reply')).rejects.toThrow(/timed out/);
  });
});
