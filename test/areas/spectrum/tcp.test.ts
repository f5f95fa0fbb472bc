/**
 * The TCP proxy with real origins on loopback: echo, half-close, backpressure, failover between
 * origins, origins named in Outpost's own zones, port ranges, IPv6 clients, IP access rules,
 * listeners opened on create, reconfigured on update without touching other apps, closed with
 * their flows on delete and with their zone, and ports below 1024 (bound as root, or mapped).
 */
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { canBind, flowEvents, freePort, freePortRange, startEcho, tcpExchange, waitFor, withTimeout, type EchoOrigin } from './peers.ts';

let t: TestServer;
let zone: { id: string; name: string };
let echo: EchoOrigin;
let events: ReturnType<typeof flowEvents>;
const cleanup: (() => Promise<unknown> | void)[] = [];

beforeAll(async () => {
  t = await startTestServer({ dnsPort: 0, originConnectTimeoutMs: 2000 });
  zone = await createZone(t, 'tcp.test');
  echo = await startEcho();
  events = flowEvents(t.server.events);
});
afterAll(async () => {
  events?.stop();
  for (const fn of cleanup.reverse()) await fn();
  await echo?.close();
  await t?.stop();
});

let n = 0;
async function app(body: Record<string, unknown>, z = zone): Promise<{ id: string; port: number; result: any }> {
  const port = typeof body.port === 'number' ? body.port : await freePort();
  delete body.port;
  const res = await t.call('POST', `/zones/${z.id}/spectrum/apps`, { protocol: `tcp/${port}`, dns: { type: 'CNAME', name: `a${++n}.${z.name}` }, ...body });
  if (res.status !== 200) throw new Error(`create failed: ${res.text}`);
  return { id: res.body.result.id, port, result: res.body.result };
}

/** A blocked client gets nothing back: the connection is closed or reset before any byte. */
async function turnedAway(port: number, localAddress: string): Promise<boolean> {
  try {
    return (await tcpExchange(port, 'let me in', { localAddress })).length === 0;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ECONNRESET';
  }
}

/** Opens a connection and waits until it is established. */
function connect(port: number, opts: { host?: string; localAddress?: string } = {}): Promise<net.Socket> {
  return withTimeout(
    new Promise((resolve, reject) => {
      const s = net.connect({ port, host: opts.host ?? '127.0.0.1', localAddress: opts.localAddress, allowHalfOpen: true });
      s.once('connect', () => resolve(s));
      s.once('error', reject);
    }),
    3000,
    `connect to ${port}`,
  );
}

/** Sends a line and waits for it to come back. */
async function ping(s: net.Socket, text: string): Promise<string> {
  return withTimeout(
    new Promise((resolve, reject) => {
      let got = '';
      const onData = (d: Buffer) => {
        got += d.toString();
        if (got.length >= text.length) {
          s.off('data', onData);
          resolve(got);
        }
      };
      s.on('data', onData);
      s.once('error', reject);
      s.write(text);
    }),
    3000,
    `echo of ${text}`,
  );
}

/** The proxy ended the connection: FIN (`end`, the socket is half-open) or close. */
function closed(s: net.Socket, ms = 3000): Promise<void> {
  if (s.destroyed || s.readableEnded) return Promise.resolve();
  return withTimeout(
    new Promise((resolve) => {
      s.once('end', () => resolve());
      s.once('close', () => resolve());
      s.resume();
    }),
    ms,
    'socket end',
  );
}

describe('bytes through', () => {
  it('echoes exactly what was sent (1 MiB), and the flow reports connect then disconnect with those bytes', async () => {
    const a = await app({ origin_direct: [`tcp://127.0.0.1:${echo.port}`] });
    const payload = randomBytes(1 << 20);
    const back = await tcpExchange(a.port, payload);
    expect(back.equals(payload)).toBe(true);
    const done = await events.wait((e) => e.appId === a.id && e.event === 'disconnect', 3000, 'disconnect event');
    const mine = events.list.filter((e) => e.appId === a.id);
    expect(mine.map((e) => e.event)).toEqual(['connect', 'disconnect']);
    expect(mine.reduce((s, e) => s + e.bytesIngress, 0)).toBe(payload.length);
    expect(mine.reduce((s, e) => s + e.bytesEgress, 0)).toBe(payload.length);
    expect(done.durationMs).toBeGreaterThan(0);
    expect(done).toMatchObject({ zoneId: zone.id, ipVersion: 4, coloName: 'LOC' });
  });

  it('passes a half-close on: the origin answers after the client has finished sending', async () => {
    // The origin reads everything, and only at the client's FIN answers with the digest.
    const server = net.createServer({ allowHalfOpen: true }, (s) => {
      const hash = createHash('sha256');
      s.on('data', (d) => hash.update(d));
      s.on('end', () => s.end(`sha256:${hash.digest('hex')}`));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    cleanup.push(() => new Promise((r) => server.close(r)));
    const a = await app({ origin_direct: [`tcp://127.0.0.1:${(server.address() as net.AddressInfo).port}`] });
    const payload = randomBytes(300_000);
    const answer = (await tcpExchange(a.port, payload)).toString();
    expect(answer).toBe(`sha256:${createHash('sha256').update(payload).digest('hex')}`);
  });

  it('applies backpressure: a stalled origin stops the client, then everything arrives intact', async () => {
    let originSocket: net.Socket | undefined;
    const received: Buffer[] = [];
    const server = net.createServer((s) => {
      originSocket = s;
      s.pause();
      s.on('data', (d) => received.push(d));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    cleanup.push(() => new Promise((r) => server.close(r)));
    const a = await app({ origin_direct: [`tcp://127.0.0.1:${(server.address() as net.AddressInfo).port}`] });
    const client = await connect(a.port);
    await waitFor(() => originSocket !== undefined, 3000, 'origin connection');
    const chunk = randomBytes(64 * 1024);
    let written = 0;
    // Write until the socket says stop and no drain comes for 500 ms.
    for (let i = 0; i < 4096; i++) {
      written += chunk.length;
      if (!client.write(chunk)) {
        const drained = await new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(false), 500);
          client.once('drain', () => {
            clearTimeout(timer);
            resolve(true);
          });
        });
        if (!drained) break;
      }
    }
    // Kernel buffers on three sockets plus the proxy's stream buffers: far below 256 MiB.
    expect(written).toBeLessThan(64 * 1024 * 1024);
    const wrote = written;
    client.end();
    originSocket!.resume();
    await waitFor(() => received.reduce((s, b) => s + b.length, 0) >= wrote, 10_000, 'all bytes at the origin');
    expect(Buffer.concat(received).length).toBe(wrote);
    client.destroy();
  });

  it('maps every port of a range to the origin port', async () => {
    const port = await freePortRange(2);
    const res = await t.call('POST', `/zones/${zone.id}/spectrum/apps`, { protocol: `tcp/${port}-${port + 1}`, dns: { type: 'CNAME', name: 'range.tcp.test' }, origin_direct: [`tcp://127.0.0.1:${echo.port}`] });
    expect(res.status).toBe(200);
    expect((await tcpExchange(port, 'first')).toString()).toBe('first');
    expect((await tcpExchange(port + 1, 'second')).toString()).toBe('second');
  });

  it('serves IPv6 clients on ::1 (ipVersion 6)', async () => {
    const a = await app({ origin_direct: [`tcp://127.0.0.1:${echo.port}`] });
    expect(a.result.edge_ips.ips).toContain('::1');
    expect((await tcpExchange(a.port, 'six', { host: '::1' })).toString()).toBe('six');
    const e = await events.wait((x) => x.appId === a.id && x.event === 'disconnect', 3000, 'v6 disconnect');
    expect(e.ipVersion).toBe(6);
  });
});

describe('origins', () => {
  it('fails over when an origin is down, and reports originError when none answers', async () => {
    const o1 = await startEcho();
    const o2 = await startEcho();
    cleanup.push(() => o2.close());
    const a = await app({ origin_direct: [`tcp://127.0.0.1:${o1.port}`, `tcp://127.0.0.1:${o2.port}`] });
    for (let i = 0; i < 4; i++) expect((await tcpExchange(a.port, `x${i}`)).toString()).toBe(`x${i}`);
    // Round robin: both origins got connections.
    expect(o1.peers.length).toBeGreaterThan(0);
    expect(o2.peers.length).toBeGreaterThan(0);
    await o1.close();
    for (let i = 0; i < 4; i++) expect((await tcpExchange(a.port, `y${i}`)).toString()).toBe(`y${i}`);
    await o2.close();
    expect((await tcpExchange(a.port, 'nobody')).length).toBe(0);
    await events.wait((e) => e.appId === a.id && e.event === 'originError', 3000, 'originError event');
  });

  it('resolves origin_dns through the zone (A record, and a CNAME to a name only the system resolver knows)', async () => {
    await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'origin.tcp.test', content: '127.0.0.1' });
    await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'CNAME', name: 'alias.tcp.test', content: 'localhost' });
    const a = await app({ origin_dns: { name: 'origin.tcp.test' }, origin_port: echo.port });
    expect((await tcpExchange(a.port, 'by-zone')).toString()).toBe('by-zone');
    const b = await app({ origin_dns: { name: 'alias.tcp.test', type: 'A' }, origin_port: echo.port });
    expect((await tcpExchange(b.port, 'by-cname')).toString()).toBe('by-cname');
    // A name that resolves nowhere: the client is closed and originError reported.
    const c = await app({ origin_dns: { name: 'missing.tcp.test' }, origin_port: echo.port });
    expect((await tcpExchange(c.port, 'nothing')).length).toBe(0);
    await events.wait((e) => e.appId === c.id && e.event === 'originError', 3000, 'originError for a missing name');
    // A record added later is used at once (zone data is read per connection).
    await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'missing.tcp.test', content: '127.0.0.1' });
    expect((await tcpExchange(c.port, 'now')).toString()).toBe('now');
  });
});

describe('IP access rules', () => {
  it('with ip_firewall, a client a block rule names is dropped; others, allow rules and apps without ip_firewall pass', async () => {
    const rule = await t.call('POST', `/zones/${zone.id}/firewall/access_rules/rules`, { mode: 'block', configuration: { target: 'ip_range', value: '127.0.0.0/24' } });
    expect(rule.status).toBe(200);
    const allow = await t.call('POST', `/zones/${zone.id}/firewall/access_rules/rules`, { mode: 'whitelist', configuration: { target: 'ip', value: '127.0.0.3' } });
    expect(allow.status).toBe(200);
    const guarded = await app({ origin_direct: [`tcp://127.0.0.1:${echo.port}`], ip_firewall: true });
    const open = await app({ origin_direct: [`tcp://127.0.0.1:${echo.port}`] });
    expect(await turnedAway(guarded.port, '127.0.0.2')).toBe(true);
    const filtered = await events.wait((e) => e.appId === guarded.id && e.event === 'clientFiltered', 3000, 'clientFiltered event');
    expect(filtered.bytesIngress).toBe(0);
    expect((await tcpExchange(guarded.port, 'allowed', { localAddress: '127.0.0.3' })).toString()).toBe('allowed');
    expect((await tcpExchange(guarded.port, 'v6 passes', { host: '::1' })).toString()).toBe('v6 passes');
    expect((await tcpExchange(open.port, 'no firewall', { localAddress: '127.0.0.2' })).toString()).toBe('no firewall');
    // The rule going away takes effect at once.
    await t.call('DELETE', `/zones/${zone.id}/firewall/access_rules/rules/${rule.body.result.id}`);
    expect((await tcpExchange(guarded.port, 'free again', { localAddress: '127.0.0.2' })).toString()).toBe('free again');
    await t.call('DELETE', `/zones/${zone.id}/firewall/access_rules/rules/${allow.body.result.id}`);
  });
});

describe('listeners follow the API', () => {
  it('delete closes the listener and ends open connections', async () => {
    const a = await app({ origin_direct: [`tcp://127.0.0.1:${echo.port}`] });
    const s = await connect(a.port);
    expect(await ping(s, 'alive')).toBe('alive');
    expect((await t.call('DELETE', `/zones/${zone.id}/spectrum/apps/${a.id}`)).status).toBe(200);
    await closed(s);
    await expect(connect(a.port)).rejects.toThrow(/ECONNREFUSED/);
    await events.wait((e) => e.appId === a.id && e.event === 'disconnect', 3000, 'disconnect on delete');
  });

  it('update moves one app without dropping another app or its connections; a kept port keeps its connections', async () => {
    const other = await startEcho();
    cleanup.push(() => other.close());
    const a = await app({ origin_direct: [`tcp://127.0.0.1:${echo.port}`] });
    const b = await app({ origin_direct: [`tcp://127.0.0.1:${echo.port}`] });
    const onB = await connect(b.port);
    const onA = await connect(a.port);
    expect(await ping(onA, 'a-before')).toBe('a-before');
    // Same port, new origin: the open connection stays with its origin; new ones go to the new one.
    const same = await t.call('PUT', `/zones/${zone.id}/spectrum/apps/${a.id}`, { protocol: `tcp/${a.port}`, dns: a.result.dns, origin_direct: [`tcp://127.0.0.1:${other.port}`] });
    expect(same.status).toBe(200);
    expect(await ping(onA, 'a-still')).toBe('a-still');
    const before = other.peers.length;
    expect((await tcpExchange(a.port, 'to-new-origin')).toString()).toBe('to-new-origin');
    expect(other.peers.length).toBe(before + 1);
    // New port: the old one closes (with its connections), B is untouched.
    const newPort = await freePort();
    const moved = await t.call('PUT', `/zones/${zone.id}/spectrum/apps/${a.id}`, { protocol: `tcp/${newPort}`, dns: a.result.dns, origin_direct: [`tcp://127.0.0.1:${echo.port}`] });
    expect(moved.status).toBe(200);
    await closed(onA);
    await expect(connect(a.port)).rejects.toThrow(/ECONNREFUSED/);
    expect((await tcpExchange(newPort, 'moved')).toString()).toBe('moved');
    expect(await ping(onB, 'b-untouched')).toBe('b-untouched');
    onB.destroy();
  });

  it('deleting the zone closes its apps', async () => {
    const z = await createZone(t, 'gone.tcp.test');
    const a = await app({ origin_direct: [`tcp://127.0.0.1:${echo.port}`] }, z);
    expect((await tcpExchange(a.port, 'here')).toString()).toBe('here');
    expect((await t.call('DELETE', `/zones/${z.id}`)).status).toBe(200);
    await waitFor(async () => !(await connect(a.port).then((s) => (s.destroy(), true), () => false)), 3000, 'listener closed');
  });
});

describe('ports below 1024', () => {
  it('binds a low port directly when permitted (root)', async () => {
    let low = 0;
    for (let p = 900; p < 1000 && !low; p++) if ((await canBind('tcp', '127.0.0.1', p)) && (await canBind('tcp', '::1', p))) low = p;
    expect(low).toBeGreaterThan(0);
    const a = await app({ port: low, origin_direct: [`tcp://127.0.0.1:${echo.port}`] });
    expect(a.result.edge_ips.ips).toEqual(['127.0.0.1', '::1']);
    expect((await tcpExchange(low, 'low')).toString()).toBe('low');
  });

  it('maps a low port to port + offset when told to, and shows the mapping in edge_ips.ips', async () => {
    const high = await freePort();
    const low = 922;
    const mapped = await startTestServer({ dnsPort: 0, spectrumMapLowPorts: true, spectrumPortOffset: high - low, spectrumBindAddresses: ['127.0.0.1'] });
    cleanup.push(() => mapped.stop());
    const z = await createZone(mapped, 'mapped.test');
    const res = await mapped.call('POST', `/zones/${z.id}/spectrum/apps`, { protocol: `tcp/${low}`, dns: { type: 'CNAME', name: 'ssh.mapped.test' }, origin_direct: [`tcp://127.0.0.1:${echo.port}`] });
    expect(res.status).toBe(200);
    expect(res.body.result.protocol).toBe(`tcp/${low}`);
    expect(res.body.result.edge_ips.ips).toEqual([`127.0.0.1:${high}`]);
    expect((await tcpExchange(high, 'mapped')).toString()).toBe('mapped');
    expect((await mapped.call('GET', `/zones/${z.id}/spectrum/apps/${res.body.result.id}`)).body.result.edge_ips.ips).toEqual([`127.0.0.1:${high}`]);
  });
});

describe('restart', () => {
  it('apps stored before a restart listen again when the server starts', async () => {
    const { mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const dataDir = mkdtempSync(join(tmpdir(), 'outpost-spectrum-restart-'));
    const pg = process.env.OUTPOST_TEST_DATABASE?.startsWith('postgres') ? { database: process.env.OUTPOST_TEST_DATABASE, databaseSchema: `t_sp_${randomBytes(5).toString('hex')}` } : {};
    const first = await startTestServer({ dnsPort: 0, ...pg }, { dataDir });
    const z = await createZone(first, 'restart.test');
    const port = await freePort();
    expect((await first.call('POST', `/zones/${z.id}/spectrum/apps`, { protocol: `tcp/${port}`, dns: { type: 'CNAME', name: 'r.restart.test' }, origin_direct: [`tcp://127.0.0.1:${echo.port}`] })).status).toBe(200);
    await first.stop();
    await expect(connect(port)).rejects.toThrow(/ECONNREFUSED/);
    const second = await startTestServer({ dnsPort: 0, ...pg }, { dataDir });
    try {
      expect((await tcpExchange(port, 'again')).toString()).toBe('again');
    } finally {
      await second.stop();
      if (pg.database) {
        const { dropSchema } = await import('../../../src/core/storage/db.ts');
        await dropSchema(pg.database, pg.databaseSchema!);
      }
      const { rmSync } = await import('node:fs');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
