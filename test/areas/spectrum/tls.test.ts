/**
 * TLS termination at the edge: `openssl s_client` against a `flexible` app (TLS to the client,
 * plain to the origin, certificate made for the app's host name), `full` (TLS to an origin whose
 * certificate is not checked) and `strict` (the origin certificate must chain to a trusted CA and
 * name the origin), with a CA and certificates made by openssl for the test.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { flowEvents, freePort, withTimeout } from './peers.ts';

let t: TestServer;
let zone: { id: string; name: string };
let dir: string;
let events: ReturnType<typeof flowEvents>;
const servers: net.Server[] = [];

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: 'ignore', timeout: 20_000 });
}

async function listen(server: net.Server): Promise<number> {
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return (server.address() as net.AddressInfo).port;
}

/** Answers the first chunk with `echo:<chunk>` and closes. */
function replyOnce(s: net.Socket): void {
  s.once('data', (d) => s.end(`echo:${d.toString()}`));
  s.on('error', () => s.destroy());
}

let plainPort: number;
let trustedPort: number;
let untrustedPort: number;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'outpost-spectrum-tls-'));
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(['req', '-x509', ...ec, '-days', '2', '-subj', '/CN=Spectrum Test CA', '-keyout', join(dir, 'ca.key'), '-out', join(dir, 'ca.crt')]);
  openssl(['req', ...ec, '-subj', '/CN=origin.tls.test', '-keyout', join(dir, 'leaf.key'), '-out', join(dir, 'leaf.csr')]);
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1,DNS:origin.tls.test\n');
  openssl(['x509', '-req', '-in', join(dir, 'leaf.csr'), '-CA', join(dir, 'ca.crt'), '-CAkey', join(dir, 'ca.key'), '-CAcreateserial', '-days', '2', '-extfile', join(dir, 'ext.cnf'), '-out', join(dir, 'leaf.crt')]);
  openssl(['req', '-x509', ...ec, '-days', '2', '-subj', '/CN=untrusted.tls.test', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', join(dir, 'self.key'), '-out', join(dir, 'self.crt')]);

  plainPort = await listen(net.createServer(replyOnce));
  trustedPort = await listen(tls.createServer({ cert: readFileSync(join(dir, 'leaf.crt')), key: readFileSync(join(dir, 'leaf.key')) }, replyOnce));
  untrustedPort = await listen(tls.createServer({ cert: readFileSync(join(dir, 'self.crt')), key: readFileSync(join(dir, 'self.key')) }, replyOnce));

  t = await startTestServer({ dnsPort: 0, spectrumOriginCa: join(dir, 'ca.crt'), originConnectTimeoutMs: 2000 });
  zone = await createZone(t, 'tls.test');
  events = flowEvents(t.server.events);
});
afterAll(async () => {
  events?.stop();
  await t?.stop();
  for (const s of servers) s.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function app(name: string, tlsMode: string, origin: Record<string, unknown>): Promise<{ id: string; port: number }> {
  const port = await freePort();
  const res = await t.call('POST', `/zones/${zone.id}/spectrum/apps`, { protocol: `tcp/${port}`, dns: { type: 'CNAME', name }, tls: tlsMode, ...origin });
  if (res.status !== 200) throw new Error(res.text);
  return { id: res.body.result.id, port };
}

/** A TLS client that does not check the edge certificate; resolves with all it received. */
function tlsExchange(port: number, servername: string, text: string): Promise<{ data: string; peer: tls.PeerCertificate }> {
  return withTimeout(
    new Promise((resolve, reject) => {
      let data = '';
      const s = tls.connect({ port, host: '127.0.0.1', servername, rejectUnauthorized: false }, () => s.write(text));
      let peer: tls.PeerCertificate | undefined;
      s.once('secureConnect', () => (peer = s.getPeerCertificate()));
      s.on('data', (d) => (data += d));
      s.on('error', reject);
      s.on('close', () => resolve({ data, peer: peer! }));
    }),
    5000,
    `TLS exchange on ${port}`,
  );
}

describe('tls at the edge', () => {
  it('flexible: openssl s_client gets the app certificate and the plain origin answers', async () => {
    const a = await app('flex.tls.test', 'flexible', { origin_direct: [`tcp://127.0.0.1:${plainPort}`] });
    expect(existsSync(join(t.config.dataDir, 'spectrum', 'tls', 'flex.tls.test.crt'))).toBe(true);
    const child = spawn('openssl', ['s_client', '-connect', `127.0.0.1:${a.port}`, '-servername', 'flex.tls.test', '-ign_eof'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.stdin.end('hello over tls\n');
    const code = await withTimeout(
      new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c))),
      10_000,
      'openssl s_client exit',
    ).finally(() => child.kill('SIGKILL'));
    expect(out).toMatch(/subject=\s*CN\s*=\s*flex\.tls\.test/);
    expect(out).toContain('echo:hello over tls');
    expect(code).toBe(0);
  });

  it('full: TLS to an origin whose certificate is not checked', async () => {
    const a = await app('full.tls.test', 'full', { origin_direct: [`tcp://127.0.0.1:${untrustedPort}`] });
    const r = await tlsExchange(a.port, 'full.tls.test', 'full-mode');
    expect(r.data).toBe('echo:full-mode');
    expect(r.peer.subject.CN).toBe('full.tls.test');
  });

  it('strict: a certificate from the trusted CA naming the origin passes (by address and by name)', async () => {
    const byIp = await app('strict.tls.test', 'strict', { origin_direct: [`tcp://127.0.0.1:${trustedPort}`] });
    expect((await tlsExchange(byIp.port, 'strict.tls.test', 'strict-ip')).data).toBe('echo:strict-ip');
    await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'origin.tls.test', content: '127.0.0.1' });
    const byName = await app('strict2.tls.test', 'strict', { origin_dns: { name: 'origin.tls.test' }, origin_port: trustedPort });
    expect((await tlsExchange(byName.port, 'strict2.tls.test', 'strict-name')).data).toBe('echo:strict-name');
  });

  it('strict: an untrusted origin certificate fails the origin (originError), full accepts the same origin', async () => {
    const a = await app('reject.tls.test', 'strict', { origin_direct: [`tcp://127.0.0.1:${untrustedPort}`] });
    const r = await tlsExchange(a.port, 'reject.tls.test', 'nope').catch((err: NodeJS.ErrnoException) => ({ data: '', code: err.code }));
    expect(r.data).toBe('');
    await events.wait((e) => e.appId === a.id && e.event === 'originError', 3000, 'originError for an untrusted origin');
  });

  it('a plain TCP client on a TLS app gets no origin bytes', async () => {
    const a = await app('plain.tls.test', 'flexible', { origin_direct: [`tcp://127.0.0.1:${plainPort}`] });
    const got = await withTimeout(
      new Promise<string>((resolve) => {
        let data = '';
        const s = net.connect(a.port, '127.0.0.1', () => s.write('GET / HTTP/1.0\r\n\r\n'));
        s.on('data', (d) => (data += d.toString('latin1')));
        s.on('error', () => resolve(data));
        s.on('close', () => resolve(data));
      }),
      12_000,
      'plain client on a TLS app',
    );
    expect(got).not.toContain('echo:');
  });
});
