/**
 * Network-layer DDoS detection on proxied applications: a UDP flood from one loopback source is
 * dropped at the proxy while a normal client keeps its flow (every datagram echoed); a TCP
 * connection flood is cut; the account's `ddos_l4` override (through the official client) turns
 * mitigation into logging; UDP reflection — datagrams from a reflection source port (DNS 53,
 * NTP 123), from one reflector or many small ones — is dropped at rates the generic UDP rule lets
 * pass, while other ports and other clients pass. Floors scaled to 10 %, windows to 250 ms.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DDOS_L4_ID, managedRuleId } from '../../../src/areas/rulesets/index.ts';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { sdk, type Cloudflare } from '../../support/sdk.ts';
import { freePort, startEcho, type EchoOrigin } from '../spectrum/peers.ts';

const UDP_RULE = '599dab0942ff4898ac1b7797e954e98b';
const REFLECTION_RULE = managedRuleId('l4', 2);
const SYN_RULE = managedRuleId('l4', 3);

let t: TestServer;
let cf: Cloudflare;
let zone: { id: string; name: string };
let udpOrigin: dgram.Socket;
let originSeen = 0;
let tcpOrigin: EchoOrigin;
const sockets: dgram.Socket[] = [];

beforeAll(async () => {
  t = await startTestServer({ ddosDetection: true, ddosWindowMs: 250, ddosCooldownWindows: 2, ddosThresholdPercent: 10 });
  cf = sdk(t);
  zone = await createZone(t, 'l4flood.test');
  udpOrigin = dgram.createSocket('udp4');
  udpOrigin.on('message', (m, r) => {
    originSeen++;
    udpOrigin.send(m, r.port, r.address);
  });
  await new Promise<void>((r) => udpOrigin.bind(0, '127.0.0.1', () => r()));
  tcpOrigin = await startEcho();
});
afterAll(async () => {
  for (const s of sockets) s.close();
  udpOrigin?.close();
  await tcpOrigin?.close();
  await t?.stop();
});

async function app(protocol: string, origin: number, name: string): Promise<number> {
  const port = await freePort(protocol as 'tcp' | 'udp');
  const res = await t.call('POST', `/zones/${zone.id}/spectrum/apps`, { protocol: `${protocol}/${port}`, dns: { type: 'CNAME', name }, origin_direct: [`${protocol}://127.0.0.1:${origin}`] });
  if (res.status !== 200) throw new Error(res.text);
  return port;
}

async function udpClient(from: string, port = 0): Promise<{ sock: dgram.Socket; replies: () => number }> {
  const sock = dgram.createSocket('udp4');
  sockets.push(sock);
  let n = 0;
  sock.on('message', () => n++);
  await new Promise<void>((resolve, reject) => {
    sock.once('error', reject);
    sock.bind(port, from, () => resolve());
  });
  return { sock, replies: () => n };
}

/** Waits (bounded) until `done` holds, polling. */
async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 40 && !done(); i++) await new Promise((r) => setTimeout(r, 50));
}

/** Sends `count` datagrams in bursts of 50 per event-loop turn. */
async function udpFlood(sock: dgram.Socket, port: number, count: number): Promise<void> {
  const payload = Buffer.alloc(64, 1);
  for (let i = 0; i < count; i += 50) {
    for (let j = 0; j < 50; j++) sock.send(payload, port, '127.0.0.1');
    await new Promise((r) => setTimeout(r, 1));
  }
}

async function attacks(): Promise<any[]> {
  const res = await t.call('GET', `/accounts/${t.accountId}/ddos/attacks?layer=l4&per_page=100`);
  expect(res.status).toBe(200);
  return res.body.result;
}

async function ended(ruleId: string, before: number): Promise<any> {
  for (let i = 0; i < 100; i++) {
    const list = (await attacks()).filter((a) => a.rule_id === ruleId);
    if (list.length > before && list[0].status === 'ended') return list[0];
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('no ended attack');
}

describe('UDP flood', () => {
  it('is dropped at the proxy while a normal client keeps its flow, and recorded', async () => {
    const port = await app('udp', udpOrigin.address().port, 'udp.l4flood.test');
    const normal = await udpClient('127.0.222.9');
    const attacker = await udpClient('127.0.222.2');
    let sent = 0;
    const ticker = setInterval(() => {
      normal.sock.send('ping', port, '127.0.0.1');
      sent++;
    }, 50);
    await new Promise((r) => setTimeout(r, 300));
    const seenBefore = originSeen;
    await udpFlood(attacker.sock, port, 6000);
    await new Promise((r) => setTimeout(r, 300));
    clearInterval(ticker);
    await new Promise((r) => setTimeout(r, 200));
    const rec = await ended(UDP_RULE, 0);
    expect(rec).toMatchObject({ layer: 'l4', protocol: 'UDP', action: 'block', target_hostname: 'udp.l4flood.test', sources: ['127.0.222.2'], target_port: port });
    expect(rec.mitigated).toBeGreaterThan(3000);
    // Most of the flood never reached the origin; the normal client kept its flow. While the
    // flood fills the proxy's socket buffer, the kernel may drop the odd datagram of the normal
    // client before the proxy sees it (UDP), so nine in ten answers is the bar, not all of them.
    expect(originSeen - seenBefore).toBeLessThan(3000);
    expect(normal.replies()).toBeGreaterThanOrEqual(Math.floor(sent * 0.9));
  });

  it('with the account override action log, the flood passes and is only recorded', async () => {
    await cf.rulesets.phases.update('ddos_l4', {
      account_id: t.accountId,
      rules: [{ action: 'execute', expression: 'true', action_parameters: { id: DDOS_L4_ID, overrides: { categories: [{ category: 'udp-flood', action: 'log' }] } } }],
    } as never);
    const got = await cf.rulesets.phases.get('ddos_l4', { account_id: t.accountId });
    expect(got.rules[0].action_parameters).toMatchObject({ id: DDOS_L4_ID });
    // The override reaches the proxy's cache in the background.
    await new Promise((r) => setTimeout(r, 200));
    const port = await app('udp', udpOrigin.address().port, 'udp2.l4flood.test');
    const attacker = await udpClient('127.0.222.3');
    const before = (await attacks()).filter((a) => a.rule_id === UDP_RULE).length;
    await udpFlood(attacker.sock, port, 4000);
    const rec = await ended(UDP_RULE, before);
    expect(rec).toMatchObject({ action: 'log', mitigated: 0 });
    expect(rec.logged).toBeGreaterThan(0);
    await cf.rulesets.phases.update('ddos_l4', { account_id: t.accountId, rules: [] } as never);
  });
});

// Reflectors answer from a reflection port (DNS 53, NTP 123, …): sockets bound to those ports on
// loopback addresses of their own (low ports: the tests run as root, as the proxy's own tests do).
describe('UDP reflection', () => {
  it('drops datagrams from a reflection port at a rate the generic UDP rule lets pass; other ports pass', async () => {
    const port = await app('udp', udpOrigin.address().port, 'refl.l4flood.test');
    const reflector = await udpClient('127.0.231.5', 53);
    const sameAddress = await udpClient('127.0.231.5');
    const other = await udpClient('127.0.231.6');
    // 30 datagrams each: over the reflection rule's 5 per source and window (20/s at 10 %, 250 ms
    // windows), under the generic rule's 50, even with everything of one address in one window.
    const send = async (c: { sock: dgram.Socket }, n: number) => {
      for (let i = 0; i < n; i += 10) {
        for (let j = 0; j < 10; j++) c.sock.send('ping', port, '127.0.0.1');
        await new Promise((r) => setTimeout(r, 1));
      }
    };
    await send(other, 30);
    await until(() => other.replies() === 30);
    expect(other.replies()).toBe(30);
    await send(reflector, 30);
    await send(sameAddress, 10);
    await until(() => sameAddress.replies() === 10);
    expect(sameAddress.replies()).toBe(10);
    const rec = await ended(REFLECTION_RULE, 0);
    expect(rec).toMatchObject({
      layer: 'l4',
      protocol: 'UDP',
      attack_type: 'UDP reflection',
      category: 'udp-flood',
      action: 'block',
      detection: 'single_source',
      target_hostname: 'refl.l4flood.test',
      target_port: port,
      sources: ['127.0.231.5'],
    });
    expect(rec.mitigated).toBeGreaterThanOrEqual(20);
    expect(reflector.replies()).toBeLessThanOrEqual(10);
    // Neither the reflection rule nor the generic one took the other clients for attackers.
    const all = await attacks();
    expect(all.filter((a) => a.rule_id === REFLECTION_RULE)).toHaveLength(1);
    expect(all.flatMap((a) => a.sources)).not.toContain('127.0.231.6');
  });

  it('drops the traffic of many reflectors that each stay under the per-source threshold', async () => {
    const port = await app('udp', udpOrigin.address().port, 'refl2.l4flood.test');
    const before = (await attacks()).filter((a) => a.rule_id === REFLECTION_RULE).length;
    // 40 NTP reflectors, 4 datagrams each: never 5 from one source in a window, 160 together —
    // over the application's 50 per window even if a window boundary cuts them in three.
    const reflectors = await Promise.all(Array.from({ length: 40 }, (_, i) => udpClient(`127.0.231.${10 + i}`, 123)));
    for (let round = 0; round < 4; round++) for (const r of reflectors) r.sock.send('ntp', port, '127.0.0.1');
    const rec = await ended(REFLECTION_RULE, before);
    expect(rec).toMatchObject({ attack_type: 'UDP reflection', detection: 'many_sources', target_hostname: 'refl2.l4flood.test', action: 'block' });
    // At least the datagrams after the 50th of the window that held most of them were dropped, and
    // the attackers are the reflectors.
    expect(rec.mitigated).toBeGreaterThanOrEqual(10);
    expect(rec.source_count).toBeGreaterThan(1);
    expect(rec.sources.every((s: string) => s.startsWith('127.0.231.'))).toBe(true);
    const answered = reflectors.reduce((sum, r) => sum + r.replies(), 0);
    expect(answered).toBeLessThanOrEqual(160 - rec.mitigated);
  });
});

describe('TCP connection flood', () => {
  it('cuts the flooding source while another client still connects', async () => {
    const port = await app('tcp', tcpOrigin.port, 'tcp.l4flood.test');
    await new Promise((r) => setTimeout(r, 200));
    let refused = 0;
    const connectOnce = (from: string) =>
      new Promise<boolean>((resolve) => {
        const s = net.connect({ port, host: '127.0.0.1', localAddress: from }, () => s.write('x'));
        s.on('data', () => {
          s.destroy();
          resolve(true);
        });
        s.on('error', () => resolve(false));
        s.on('close', () => resolve(false));
        s.setTimeout(2000, () => s.destroy());
      });
    const deadline = Date.now() + 1200;
    const workers = Array.from({ length: 8 }, async () => {
      while (Date.now() < deadline) if (!(await connectOnce('127.0.222.4'))) refused++;
    });
    await Promise.all(workers);
    expect(refused).toBeGreaterThan(0);
    expect(await connectOnce('127.0.222.9')).toBe(true);
    const rec = await ended(SYN_RULE, 0);
    expect(rec).toMatchObject({ protocol: 'TCP', category: 'syn-flood', sources: ['127.0.222.4'] });
  });
});
