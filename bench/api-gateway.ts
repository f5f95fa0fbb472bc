/**
 * The API gateway on the TLS edge: requests/s and p50/p99 of a GraphQL POST carrying an RS256 JWT
 * through Outpost's HTTPS edge with the gateway on (JWT validation, schema validation of the body,
 * GraphQL parsing with limits) beside the same request to a zone with no gateway configuration,
 * and beside nginx (1 worker) terminating TLS in front of the same origin. All sides use HTTP/1.1
 * over TLS with keep-alive from one Node load driver; sides alternate round by round and the
 * median per side is reported. See bench/README.md ("api-gateway").
 *
 *   npm run bench -- api-gateway [--seconds 5] [--rounds 3] [--warmup 1] [--connections 16]
 */
import { spawn } from 'node:child_process';
import https from 'node:https';
import { writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { int, ms, ratio, table } from './lib/format.ts';
import { parseOrExit } from './lib/args.ts';
import { startOutpost } from './lib/outpost.ts';
import { median, which } from './lib/host-load.ts';
import { installCleanupHandlers, Interrupted, onCleanup, runCleanups, spawnNode, tempDir, throwIfInterrupted } from './lib/procs.ts';
import { createCa, issueCertificate } from '../src/edge/tls/ca.ts';
import { TokenVerifier } from '../src/areas/api-gateway/tokens.ts';

export const description = 'TLS edge req/s with JWT (RS256) + schema + GraphQL checks vs the gateway off, and vs nginx terminating TLS';

const ORIGIN_IP = '127.0.33.1';
const ON_ZONE = 'gwon.bench.test';
const OFF_ZONE = 'gwoff.bench.test';
const QUERY = JSON.stringify({ query: '{ viewer { name repositories(first: 5) { nodes { name stars } } } }' });

const USAGE = `usage: npm run bench -- api-gateway [options]

  --seconds N       length of each measured run (default 5)
  --rounds N        rounds; each measures every side once (default 3)
  --warmup N        unmeasured seconds per side before the first round (default 1)
  --connections N   concurrent keep-alive TLS connections (default 16)

The origin listens on ${ORIGIN_IP}:80 (binding it needs root). nginx (Debian package nginx) is
the peer; without it that side is left out.
`;

interface Options {
  seconds: number;
  rounds: number;
  warmup: number;
  connections: number;
}

function parseOptions(argv: string[]): Options | 'help' {
  const o: Options = { seconds: 5, rounds: 3, warmup: 1, connections: 16 };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
    if (flag === '--help' || flag === '-h') return 'help';
    const key = flag.replace(/^--/, '') as keyof Options;
    if (!(key in o)) throw new Error(`unknown option ${argv[i]}\n${USAGE}`);
    const n = Number(inline ?? argv[++i]);
    if (!Number.isInteger(n) || n < (key === 'warmup' ? 0 : 1)) throw new Error(`${flag} needs a positive integer`);
    o[key] = n;
  }
  return o;
}

const ORIGIN_SOURCE = `import http from 'node:http';
const body = Buffer.from(JSON.stringify({ data: { viewer: { name: 'bench', repositories: { nodes: [] } } } }));
const server = http.createServer({ keepAliveTimeout: 300000 }, (req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
    res.end(body);
  });
});
server.listen(80, ${JSON.stringify(ORIGIN_IP)}, () => process.stdout.write('origin listening\\n'));
process.on('SIGTERM', () => process.exit(0));
`;

interface Side {
  label: string;
  port: number;
  host: string;
  ca: string;
}

interface Measured {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
}

/** Closed-loop load: `connections` loops, each sending its next request when the last one ended. */
async function load(side: Side, token: string, seconds: number, connections: number): Promise<Measured> {
  const agent = new https.Agent({ keepAlive: true, maxSockets: connections, ca: side.ca, servername: side.host });
  const latencies: number[] = [];
  let errors = 0;
  const end = performance.now() + seconds * 1000;
  const one = () =>
    new Promise<void>((resolve) => {
      const t0 = performance.now();
      const req = https.request(
        { host: '127.0.0.1', port: side.port, method: 'POST', path: '/graphql', agent, headers: { host: side.host, authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(QUERY) } },
        (res) => {
          res.resume();
          res.on('end', () => {
            if (res.statusCode === 200) latencies.push(performance.now() - t0);
            else errors++;
            resolve();
          });
        },
      );
      req.on('error', () => {
        errors++;
        resolve();
      });
      req.end(QUERY);
    });
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (performance.now() < end) await one();
    }),
  );
  agent.destroy();
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))] ?? NaN;
  return { rps: latencies.length / seconds, p50: pct(0.5), p99: pct(0.99), errors };
}

export async function main(argv: string[]): Promise<number> {
  const o = parseOrExit(argv, parseOptions, USAGE);
  if (typeof o === 'number') return o;
  installCleanupHandlers();
  const log = (s: string) => process.stdout.write(`${s}\n`);
  try {
    const dir = tempDir('outpost-bench-gateway-');
    const originFile = join(dir.path, 'origin.mjs');
    writeFileSync(originFile, ORIGIN_SOURCE);
    await spawnNode('origin', [originFile], { cwd: dir.path, ready: /origin listening/ });

    const outpost = await startOutpost(join(dir.path, 'data'), {
      args: ['--edge-tls-port', '0'],
      ready: /edge \(proxied HTTPS[^)]*\)\s+https\s+(https:\/\/\S+)/,
    });
    const { accountId, call, api: apiUrl } = outpost;
    const tlsPort = Number(new URL(outpost.child.ready[1]).port);
    const ca = await (await fetch(`${apiUrl}/edge/tls/ca_certificate`)).text();

    // Zone with the gateway on: token validation (RS256, block), a schema for the body, GraphQL limits.
    const pair = await generateKeyPair('RS256', { extractable: true });
    const jwk = { ...(await exportJWK(pair.publicKey)), kid: 'bench', alg: 'RS256' };
    const token = await new SignJWT({ sub: 'bench-user', role: 'reader' }).setProtectedHeader({ alg: 'RS256', kid: 'bench' }).setIssuedAt().setExpirationTime('2h').sign(pair.privateKey);
    const on = await call('POST', '/zones', { name: ON_ZONE, account: { id: accountId } });
    const off = await call('POST', '/zones', { name: OFF_ZONE, account: { id: accountId } });
    for (const z of [on, off]) await call('POST', `/zones/${z.id}/dns_records`, { type: 'A', name: 'api', content: ORIGIN_IP, proxied: true, ttl: 1 });
    const cfg = await call('POST', `/zones/${on.id}/token_validation/config`, { title: 'bench', token_sources: ['http.request.headers["authorization"][0]'], credentials: { keys: [jwk] } });
    await call('POST', `/zones/${on.id}/token_validation/rules`, { title: 'bench', action: 'block', expression: `is_jwt_valid(http.request.jwt.payload["${cfg.id}"][0])`, selector: { include: [{ host: [`api.${ON_ZONE}`] }] } });
    await call('POST', `/zones/${on.id}/api_gateway/user_schemas`, {
      name: 'graphql',
      validation_enabled: true,
      source: {
        openapi: '3.0.3',
        info: { title: 'bench', version: '1' },
        servers: [{ url: `https://api.${ON_ZONE}` }],
        paths: { '/graphql': { post: { requestBody: { required: true, content: { 'application/json': { schema: { type: 'object', required: ['query'], properties: { query: { type: 'string', maxLength: 4096 } } } } } }, responses: { '200': { description: 'ok' } } } } },
      },
    });
    await call('PUT', `/zones/${on.id}/api_gateway/settings/schema_validation`, { validation_default_mitigation_action: 'block' });
    await call('PUT', `/zones/${on.id}/api_gateway/settings/graphql_protection`, { max_depth: 6, max_size: 50 });

    const sides: Side[] = [
      { label: 'TLS edge, gateway off', port: tlsPort, host: `api.${OFF_ZONE}`, ca },
      { label: 'TLS edge, JWT + schema + GraphQL', port: tlsPort, host: `api.${ON_ZONE}`, ca },
    ];

    // nginx terminating TLS (1 worker) in front of the same origin, with a certificate from a CA of its own.
    const nginx = which('nginx');
    if (nginx) {
      const nginxCa = await createCa('nginx bench CA');
      const leaf = await issueCertificate(nginxCa, { commonName: 'nginx', dnsNames: ['api.nginx.bench.test'], usage: 'server' });
      writeFileSync(join(dir.path, 'nginx.crt'), leaf.certPem);
      writeFileSync(join(dir.path, 'nginx.key'), leaf.keyPem);
      const port = 20000 + Math.floor(Math.random() * 20000);
      writeFileSync(
        join(dir.path, 'nginx.conf'),
        `worker_processes 1; daemon off; pid ${dir.path}/nginx.pid; error_log ${dir.path}/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream origin { server ${ORIGIN_IP}:80; keepalive 64; }
  server {
    listen 127.0.0.1:${port} ssl;
    ssl_certificate ${dir.path}/nginx.crt; ssl_certificate_key ${dir.path}/nginx.key;
    ssl_protocols TLSv1.3; keepalive_requests 1000000; client_body_temp_path ${dir.path}; proxy_temp_path ${dir.path};
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
`,
      );
      const proc = spawn(nginx, ['-c', join(dir.path, 'nginx.conf'), '-p', dir.path], { stdio: 'ignore' });
      onCleanup(
        'stop nginx',
        () => {
          proc.kill('SIGTERM');
        },
        () => proc.kill('SIGKILL'),
      );
      await new Promise((r) => setTimeout(r, 500));
      sides.push({ label: 'nginx (1 worker) terminating TLS', port, host: 'api.nginx.bench.test', ca: nginxCa.certPem });
    } else log('nginx not found: the nginx side is left out (apt-get install nginx)');

    // Each side must answer 200 before it is measured; the gateway must refuse a missing token.
    for (const s of sides) {
      const m = await load(s, token, 0.2, 1);
      if (m.errors > 0 || m.rps === 0) throw new Error(`${s.label}: the check request failed`);
    }
    const refused = await load(sides[1], 'not-a-token', 0.2, 1);
    if (refused.errors === 0) throw new Error('the gateway let a request without a valid token through');

    log(`node ${process.version}; ${availableParallelism()} CPUs shared by the load driver, Outpost, nginx and the origin; load average ${loadavg().map((n) => n.toFixed(2)).join(' ')}`);
    log(`load: ${o.connections} keep-alive HTTP/1.1-over-TLS connections from one Node process, POST /graphql (${QUERY.length}-byte body, RS256 JWT); ${o.seconds} s × ${o.rounds} round(s) per side, ${o.warmup} s warm-up`);
    if (o.warmup > 0) for (const s of sides) await load(s, token, o.warmup, o.connections);
    const results = new Map<string, Measured[]>(sides.map((s) => [s.label, []]));
    for (let r = 0; r < o.rounds; r++) {
      for (const s of sides) {
        throwIfInterrupted();
        results.get(s.label)!.push(await load(s, token, o.seconds, o.connections));
      }
    }
    const base = median(results.get(sides[0].label)!.map((m) => m.rps));
    const rows = sides.map((s) => {
      const list = results.get(s.label)!;
      const rps = median(list.map((m) => m.rps));
      return [s.label, int(rps), ms(median(list.map((m) => m.p50))), ms(median(list.map((m) => m.p99))), ratio(rps, base), int(list.reduce((a, m) => a + m.errors, 0))];
    });
    log('');
    log(table(['side (same origin)', 'req/s', 'p50 ms', 'p99 ms', 'vs gateway off', 'errors'], rows));
    // The edge verifies a token's signature once and then reuses the result (expiry is checked on
    // every request); the load above repeats one token. What a first sight of a token costs:
    const fresh = await Promise.all(
      Array.from({ length: 200 }, (_, i) => new SignJWT({ sub: `user-${i}` }).setProtectedHeader({ alg: 'RS256', kid: 'bench' }).setExpirationTime('2h').sign(pair.privateKey)),
    );
    const verifier = new TokenVerifier({ id: 'bench', title: 'bench', description: '', token_type: 'JWT', token_sources: ['http.request.headers["authorization"][0]'], credentials: { keys: [{ ...jwk, kty: 'RSA' }] }, created_at: '', last_updated: '' });
    await verifier.verify(token, Date.now());
    const v0 = performance.now();
    for (const t of fresh) if ((await verifier.verify(t, Date.now())).status !== 'valid') throw new Error('a fresh token did not verify');
    const perToken = (performance.now() - v0) / fresh.length;
    log(`first verification of a token (RS256, jose, in this process): ${perToken.toFixed(3)} ms each (${int(1000 / perToken)}/s on one core), ${fresh.length} distinct tokens`);
    log(`load average after: ${loadavg().map((n) => n.toFixed(2)).join(' ')}`);
    return 0;
  } catch (err) {
    if (err instanceof Interrupted) return 130;
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    return 1;
  } finally {
    await runCleanups();
  }
}
