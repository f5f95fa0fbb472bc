/**
 * Starts a real Outpost server on port 0 for a test file, on SQLite (default) or on PostgreSQL
 * when OUTPOST_TEST_DATABASE is a postgres:// URL (each server gets its own schema, dropped on stop).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { loadConfig, type Config } from '../../src/core/config.ts';
import { createLogger } from '../../src/core/log.ts';
import { dropSchema } from '../../src/core/storage/db.ts';
import { startServer, type RunningServer } from '../../src/server.ts';
import type { Clock } from '../../src/core/clock.ts';

export const ROOT_TOKEN = 'outpost-test-root-token-0123456789abcdef';
export const LEGACY = { email: 'admin@outpost.local', key: 'outpost-test-global-key' };

export interface TestServer {
  server: RunningServer;
  url: string;
  /** `${url}/client/v4` */
  api: string;
  accountId: string;
  token: string;
  config: Config;
  /** JSON request with the root token unless headers say otherwise. */
  call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<CallResult>;
  stop(): Promise<void>;
}

export interface CallResult {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

/**
 * For tests whose subject does not touch storage (media, browsers, load): true on the PostgreSQL
 * pass, after printing why the file runs on the SQLite pass only. Use with `describe.skipIf`.
 */
export function sqlitePassOnly(reason: string): boolean {
  if (!process.env.OUTPOST_TEST_DATABASE?.startsWith('postgres')) return false;
  console.log(`runs on the SQLite pass only: ${reason}`);
  return true;
}

export function testDatabase(): { url?: string; schema?: string } {
  const url = process.env.OUTPOST_TEST_DATABASE;
  if (url && url.startsWith('postgres')) return { url, schema: `t_${randomBytes(6).toString('hex')}` };
  return {};
}

export async function startTestServer(overrides: Partial<Config> = {}, opts: { clock?: Clock; dataDir?: string } = {}): Promise<TestServer> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'outpost-test-'));
  const pg = testDatabase();
  const config = loadConfig(
    {},
    {},
    {
      apiPort: 0,
      edgePort: 0,
      dataDir,
      database: pg.url ?? join(dataDir, 'outpost.db'),
      databaseSchema: pg.schema,
      apiToken: ROOT_TOKEN,
      apiKey: LEGACY.key,
      logLevel: 'silent',
      shutdownTimeoutMs: 2000,
      turnPort: 0,
      dnsPort: 0,
      relayAllowLoopback: true,
      // Tests drive the edge from one loopback source as fast as they can, which the DDoS
      // detector rightly calls a flood on a fast machine; the DDoS and alerting tests switch it on.
      ddosDetection: false,
      ...overrides,
    },
  );
  const server = await startServer(config, { clock: opts.clock, logger: createLogger('silent') });
  const url = server.apiUrl;
  const call: TestServer['call'] = async (method, path, body, headers = {}) => {
    const h: Record<string, string> = { authorization: `Bearer ${ROOT_TOKEN}`, ...headers };
    for (const [k, v] of Object.entries(h)) if (v === '') delete h[k];
    let payload: string | undefined;
    if (body !== undefined) {
      payload = typeof body === 'string' ? body : JSON.stringify(body);
      h['content-type'] ??= 'application/json';
    }
    const res = await fetch(`${url}/client/v4${path}`, { method, headers: h, body: payload });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: res.status, headers: res.headers, body: parsed, text };
  };
  return {
    server,
    url,
    api: `${url}/client/v4`,
    accountId: server.seeded.accountId,
    token: ROOT_TOKEN,
    config,
    call,
    stop: async () => {
      await server.stop();
      if (pg.url && pg.schema) await dropSchema(pg.url, pg.schema);
      if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Creates a scoped API token through the API and returns its secret. */
export async function createToken(
  t: TestServer,
  groups: string[],
  resources: Record<string, string | Record<string, string>>,
): Promise<string> {
  const all = await t.call('GET', '/user/tokens/permission_groups');
  const ids = groups.map((name) => {
    const g = all.body.result.find((x: { name: string }) => x.name === name);
    if (!g) throw new Error(`no permission group ${name}`);
    return { id: g.id };
  });
  const res = await t.call('POST', '/user/tokens', {
    name: `test ${groups.join(',')}`,
    policies: [{ effect: 'allow', permission_groups: ids, resources }],
  });
  if (res.status !== 200) throw new Error(`token create failed: ${res.text}`);
  return res.body.result.value as string;
}

export async function createZone(t: TestServer, name: string): Promise<{ id: string; name: string }> {
  const res = await t.call('POST', '/zones', { name, account: { id: t.accountId } });
  if (res.status !== 200) throw new Error(`zone create failed: ${res.text}`);
  return res.body.result;
}
