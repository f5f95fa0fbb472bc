/**
 * The relay's alternative ports (the platform's 53/udp, 80/tcp, 443/tls) mapped to free ports:
 * the ICE list shows all seven forms on the ports that serve them, each answering STUN, and a port
 * that cannot be opened gives a startup warning naming it while its form falls back to the main port.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/core/config.ts';
import { createLogger } from '../../../src/core/log.ts';
import { dropSchema } from '../../../src/core/storage/db.ts';
import { startServer, type RunningServer } from '../../../src/server.ts';
import { parseAltPorts } from '../../../src/areas/calls/ice.ts';
import { ROOT_TOKEN, testDatabase } from '../../support/server.ts';
import { Attr, StunClass, StunMethod, decodeStun, encodeStun, getAttribute, newTransactionId } from '../../../src/areas/calls/stun.ts';

const cleanups: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

async function serve(relayAltPorts: string): Promise<{ server: RunningServer; logs: () => string }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'outpost-alt-'));
  const pg = testDatabase();
  const config = loadConfig({}, {}, {
    apiPort: 0, edgePort: 0, dnsPort: 0, turnPort: 0, turnsPort: 0, relayTls: 'self-signed', relayAltPorts,
    dataDir, database: pg.url ?? join(dataDir, 'outpost.db'), databaseSchema: pg.schema, apiToken: ROOT_TOKEN, logLevel: 'warn',
  });
  let out = '';
  const sink = new PassThrough();
  sink.on('data', (d) => (out += d));
  const server = await startServer(config, { logger: createLogger('warn', sink) });
  cleanups.push(async () => {
    await server.stop();
    if (pg.url && pg.schema) await dropSchema(pg.url, pg.schema);
    rmSync(dataDir, { recursive: true, force: true });
  });
  return { server, logs: () => out };
}

async function urlsOf(server: RunningServer): Promise<string[]> {
  const h = { authorization: `Bearer ${ROOT_TOKEN}`, 'content-type': 'application/json' };
  const key = await (await fetch(`${server.apiUrl}/client/v4/accounts/${server.seeded.accountId}/calls/turn_keys`, { method: 'POST', headers: h, body: '{}' })).json();
  const res = await fetch(`${server.apiUrl}/v1/turn/keys/${key.result.uid}/credentials/generate`, { method: 'POST', headers: { ...h, authorization: `Bearer ${key.result.key}` }, body: '{"ttl":60}' });
  return ((await res.json()) as { iceServers: { urls: string[] } }).iceServers.urls;
}

/** A STUN Binding request over UDP or TCP to the port; resolves when a success answer arrives. */
async function stunAnswers(port: number, transport: 'udp' | 'tcp'): Promise<boolean> {
  const tid = newTransactionId();
  const req = encodeStun({ cls: StunClass.Request, method: StunMethod.Binding, transactionId: tid, attributes: [] }, { fingerprint: true });
  const check = (buf: Buffer) => {
    const res = decodeStun(buf);
    return res.ok && res.message.cls === StunClass.SuccessResponse && !!getAttribute(res.message, Attr.XorMappedAddress);
  };
  if (transport === 'udp') {
    const dgram = await import('node:dgram');
    const sock = dgram.createSocket('udp4');
    try {
      return await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), 3000);
        sock.on('message', (m) => { clearTimeout(timer); resolve(check(m)); });
        sock.send(req, port, '127.0.0.1');
      });
    } finally {
      sock.close();
    }
  }
  const sock = net.connect(port, '127.0.0.1');
  try {
    return await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 3000);
      sock.on('data', (m) => { clearTimeout(timer); resolve(check(m)); });
      sock.on('error', () => resolve(false));
      sock.write(req);
    });
  } finally {
    sock.destroy();
  }
}

const portOf = (url: string) => Number(/:(\d+)\?/.exec(url)![1]);

describe('relay alternative ports', () => {
  it('mapped to free ports: seven URL forms, the alternatives answering STUN', async () => {
    const { server, logs } = await serve('udp53=0,tcp80=0,tls443=0');
    const urls = await urlsOf(server);
    expect(urls).toHaveLength(7);
    expect(urls.map((u) => u.replace(/:\d+(\?|$)/, ':P$1'))).toEqual([
      'stun:127.0.0.1:P', 'turn:127.0.0.1:P?transport=udp', 'turn:127.0.0.1:P?transport=tcp', 'turn:127.0.0.1:P?transport=udp',
      'turn:127.0.0.1:P?transport=tcp', 'turns:127.0.0.1:P?transport=tcp', 'turns:127.0.0.1:P?transport=tcp',
    ]);
    // The 53 and 80 forms are on their own listeners, distinct from the main port.
    expect(portOf(urls[3])).not.toBe(portOf(urls[1]));
    expect(portOf(urls[4])).not.toBe(portOf(urls[2]));
    expect(portOf(urls[6])).not.toBe(portOf(urls[5]));
    expect(await stunAnswers(portOf(urls[3]), 'udp')).toBe(true);
    expect(await stunAnswers(portOf(urls[4]), 'tcp')).toBe(true);
    expect(server.listeners.map((l) => l.name)).toEqual(expect.arrayContaining(['TURN (alt 53)', 'TURN (alt 80)', 'TURN over TLS (alt 443)']));
    expect(logs()).not.toContain('could not be opened');
  });

  it('a port that cannot be opened: a startup warning names it and the form falls back to the main port', async () => {
    const busy = net.createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise<void>((r) => busy.close(() => r())));
    const busyPort = (busy.address() as net.AddressInfo).port;
    const { server, logs } = await serve(`tcp80=${busyPort}`);
    const urls = await urlsOf(server);
    expect(urls).toHaveLength(7);
    expect(portOf(urls[4])).toBe(portOf(urls[2]));
    expect(logs()).toContain(`relay alternative port ${busyPort} (tcp80) could not be opened`);
  });

  it('rejects a malformed mapping with the form it expects', () => {
    expect(() => parseAltPorts('tcp81=80', 3478, false)).toThrow(/udp53=10053/);
    expect(parseAltPorts('auto', 0, true)).toEqual([]);
    expect(parseAltPorts('auto', 3478, false)).toEqual([{ form: 'udp53', port: 53 }, { form: 'tcp80', port: 80 }]);
    expect(parseAltPorts('off', 3478, true)).toEqual([]);
  });
});
