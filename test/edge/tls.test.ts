/**
 * The edge's HTTPS listener with real clients: Node's https client and curl trusting the local CA
 * (downloaded from the API), HTTP/2 by ALPN (`curl --http2`), a zone's own certificate, client
 * certificates (`curl --cert`) checked against the zone's client CA and acted on by a custom rule,
 * and the TLS attributes rules see.
 */
import https from 'node:https';
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, sqlitePassOnly, startTestServer, type TestServer } from '../support/server.ts';
import { echoHandler, startOrigin, type Origin } from '../support/origins.ts';
import { createCa, issueCertificate } from '../../src/edge/tls/ca.ts';

const run = promisify(execFile);
const ORIGIN = '127.0.12.1';
let t: TestServer;
let port: number;
let caPem: string;
let caFile: string;
let zone: { id: string; name: string };
let origin: Origin;

interface Got {
  status: number;
  body: string;
  headers: Record<string, unknown>;
  authorized: boolean;
  subject: string;
}

function get(host: string, path: string, opts: { ca?: string; cert?: string; key?: string } = {}): Promise<Got> {
  return new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, path, servername: host, headers: { host }, ca: opts.ca ?? caPem, cert: opts.cert, key: opts.key, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      const sock = res.socket as import('node:tls').TLSSocket;
      const subject = String(sock.getPeerCertificate().subject?.CN ?? '');
      res.on('end', () => resolve({ status: res.statusCode!, body, headers: res.headers, authorized: sock.authorized, subject }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function curl(args: string[]): Promise<{ stdout: string; stderr: string }> {
  return run('curl', ['-sS', '--max-time', '10', ...args]);
}

describe.skipIf(sqlitePassOnly('the TLS listener stores nothing in the database'))('edge over TLS', () => {
  beforeAll(async () => {
    t = await startTestServer({ edgeTlsPort: 0 });
    port = Number(new URL(t.server.listeners.find((l) => l.protocol === 'https')!.address).port);
    origin = await startOrigin(ORIGIN, echoHandler);
    zone = await createZone(t, 'tls.test');
    for (const name of ['www', 'api', 'mtls']) await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name, content: ORIGIN, proxied: true, ttl: 1 });
    const ca = await fetch(`${t.api}/edge/tls/ca_certificate`);
    expect(ca.status).toBe(200);
    caPem = await ca.text();
    caFile = join(t.config.dataDir, 'trusted-ca.pem');
    writeFileSync(caFile, caPem);
  });
  afterAll(async () => {
    await origin?.close();
    await t?.stop();
  });

  it('serves a zone over HTTPS with a certificate from the local CA that clients verify', async () => {
    expect(caPem).toContain('BEGIN CERTIFICATE');
    const res = await get('www.tls.test', '/hello?x=1');
    expect(res.status).toBe(200);
    expect(res.authorized).toBe(true);
    expect(res.subject).toBe('tls.test');
    const echoed = JSON.parse(res.body);
    expect(echoed.url).toBe('/hello?x=1');
    expect(echoed.headers['x-forwarded-proto']).toBe('https');
    // Without the CA the same certificate is refused.
    await expect(get('www.tls.test', '/', { ca: '' })).rejects.toThrow(/certificate|self.signed|issuer/i);
    // A name outside every zone gets no certificate at all.
    await expect(get('nowhere.example', '/')).rejects.toThrow();
  });

  it('speaks HTTP/2 with curl (ALPN) and HTTP/1.1 when asked', async () => {
    const h2 = await curl(['--cacert', caFile, '--http2', '-w', '\\n%{http_version}', '--resolve', `api.tls.test:${port}:127.0.0.1`, `https://api.tls.test:${port}/v2/items`]);
    const [body, version] = h2.stdout.trim().split('\n');
    expect(version).toBe('2');
    const echoed = JSON.parse(body);
    expect(echoed.url).toBe('/v2/items');
    expect(echoed.headers.host).toBe(`api.tls.test:${port}`);
    expect(Object.keys(echoed.headers).some((k) => k.startsWith(':'))).toBe(false);
    const h1 = await curl(['--cacert', caFile, '--http1.1', '-w', '%{http_version}', '-o', '/dev/null', '--resolve', `api.tls.test:${port}:127.0.0.1`, `https://api.tls.test:${port}/`]);
    expect(h1.stdout).toBe('1.1');
  });

  it('gives rules the TLS version, cipher and protocol', async () => {
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, {
      rules: [
        { action: 'block', expression: 'http.host eq "www.tls.test" and ssl and cf.tls_version eq "TLSv1.3" and http.request.version eq "HTTP/2"', action_parameters: { response: { status_code: 418, content: 'tls13 over h2', content_type: 'text/plain' } } },
      ],
    });
    const h2 = await curl(['--cacert', caFile, '--http2', '--tlsv1.3', '--resolve', `www.tls.test:${port}:127.0.0.1`, `https://www.tls.test:${port}/`]);
    expect(h2.stdout).toBe('tls13 over h2');
    const h1 = await get('www.tls.test', '/');
    expect(h1.status).toBe(200);
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, { rules: [] });
  });

  it('uses an operator-supplied certificate for a zone when one is in the data directory', async () => {
    const own = await createCa('Operator CA');
    const leaf = await issueCertificate(own, { commonName: 'operator.own.test', dnsNames: ['own.test', '*.own.test'], usage: 'server' });
    const z = await createZone(t, 'own.test');
    await t.call('POST', `/zones/${z.id}/dns_records`, { type: 'A', name: 'www', content: ORIGIN, proxied: true, ttl: 1 });
    const dir = join(t.config.dataDir, 'edge-tls', 'zones', 'own.test');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'cert.pem'), leaf.certPem);
    writeFileSync(join(dir, 'key.pem'), leaf.keyPem);
    const res = await get('www.own.test', '/', { ca: own.certPem });
    expect(res.status).toBe(200);
    expect(res.subject).toBe('operator.own.test');
  });

  it('checks client certificates against the zone client CA (mTLS) and rules act on the result', async () => {
    const clientCa = await createCa('Client CA');
    const good = await issueCertificate(clientCa, { commonName: 'device-1', usage: 'client' });
    const stranger = await issueCertificate(await createCa('Other CA'), { commonName: 'device-x', usage: 'client' });
    const dir = join(t.config.dataDir, 'edge-tls', 'zones', 'tls.test');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'client-ca.pem'), clientCa.certPem);
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, {
      rules: [{ action: 'block', expression: 'http.host eq "mtls.tls.test" and not cf.tls_client_auth.cert_verified' }],
    });
    expect((await get('mtls.tls.test', '/')).status).toBe(403);
    expect((await get('mtls.tls.test', '/', { cert: stranger.certPem, key: stranger.keyPem })).status).toBe(403);
    const ok = await get('mtls.tls.test', '/', { cert: good.certPem, key: good.keyPem });
    expect(ok.status).toBe(200);
    // curl with the client certificate, and the fingerprint as a rule field.
    const certFile = join(t.config.dataDir, 'client.pem');
    const keyFile = join(t.config.dataDir, 'client.key');
    writeFileSync(certFile, good.certPem);
    writeFileSync(keyFile, good.keyPem);
    const fp = (await run('openssl', ['x509', '-in', certFile, '-noout', '-fingerprint', '-sha256'])).stdout.split('=')[1].trim().replace(/:/g, '').toLowerCase();
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, {
      rules: [{ action: 'block', expression: `http.host eq "mtls.tls.test" and edge.tls_client_auth.cert_fingerprint_sha256 eq "${fp}"`, action_parameters: { response: { status_code: 451, content: 'known device', content_type: 'text/plain' } } }],
    });
    const viaCurl = await curl(['--cacert', caFile, '--cert', certFile, '--key', keyFile, '--resolve', `mtls.tls.test:${port}:127.0.0.1`, `https://mtls.tls.test:${port}/`]);
    expect(viaCurl.stdout).toBe('known device');
    await t.call('PUT', `/zones/${zone.id}/rulesets/phases/http_request_firewall_custom/entrypoint`, { rules: [] });
  });
});
