/**
 * The server (API and edge) restarts under a running connector: the tunnel is `down` while the
 * connector waits to reconnect, then `healthy` again with traffic flowing, and the connector's
 * graceful stop leaves it `down` with no connection pending reconnect.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../../src/core/storage/db.ts';
import {
  createZone,
  startTestServer,
  testDatabase,
  type TestServer,
} from '../../support/server.ts';
import { echoHandler, startOrigin, type Origin } from '../../support/origins.ts';
import { edgeRequest, freePort, spawnConnector, until, waitOutput, type Proc } from './helpers.ts';

const ZONE = 'tunnel-restart.test';
const pg = testDatabase();
const dataDir = mkdtempSync(join(tmpdir(), 'outpost-tunnel-restart-'));
let apiPort: number;
let edgePort: number;
let t: TestServer | undefined;
let origin: Origin;
let connector: Proc;
let tunnelId: string;

function start(): Promise<TestServer> {
  return startTestServer(
    { apiPort, edgePort, ...(pg.url ? { database: pg.url, databaseSchema: pg.schema } : {}) },
    { dataDir },
  );
}

function edgeOf(s: TestServer): URL {
  return new URL(s.server.listeners.find((l) => l.name.startsWith('edge'))!.address);
}

async function tunnel(s: TestServer) {
  // fetch may first pick a kept-alive socket of the previous server on the same port: retry once.
  const get = () => s.call('GET', `/accounts/${s.accountId}/cfd_tunnel/${tunnelId}`);
  const res = await get().catch(get);
  return res.body.result as { status: string; connections: { is_pending_reconnect: boolean }[] };
}

beforeAll(async () => {
  apiPort = await freePort();
  edgePort = await freePort();
  t = await start();
  origin = await startOrigin('127.0.0.1', echoHandler, undefined, 0);
  const port = (origin.server.address() as { port: number }).port;
  await createZone(t, ZONE);
  const A = `/accounts/${t.accountId}`;
  const created = await t.call('POST', `${A}/tunnels`, {
    name: 'restart',
    tunnel_secret: randomBytes(32).toString('base64'),
  });
  tunnelId = created.body.result.id;
  await t.call('PUT', `${A}/tunnels/${tunnelId}/configurations`, {
    config: { ingress: [{ service: `http://127.0.0.1:${port}` }] },
  });
  await t.call('POST', `${A}/tunnels/${tunnelId}/connections`, { hostname: `app.${ZONE}` });
  // Two connections, slow first retry: the restart is over before the connector comes back.
  connector = spawnConnector(created.body.result.token, [
    '--ha-connections',
    '2',
    '--retry-base',
    '1500ms',
  ]);
}, 60_000);

afterAll(async () => {
  await connector?.stop();
  await origin?.close();
  await t?.stop();
  if (pg.url && pg.schema) await dropSchema(pg.url, pg.schema);
  rmSync(dataDir, { recursive: true, force: true });
});

describe('server restart under a running connector', () => {
  it('healthy → (restart) down → healthy, traffic flows again', async () => {
    await until(
      'healthy',
      async () =>
        (await tunnel(t!)).status === 'healthy' && (await tunnel(t!)).connections.length === 2,
    );
    expect((await edgeRequest(edgeOf(t!), `app.${ZONE}`, '/before')).status).toBe(200);

    await t!.stop();
    t = await start();
    expect((await tunnel(t)).status).toBe('down');
    expect((await edgeRequest(edgeOf(t), `app.${ZONE}`, '/while-down')).status).toBe(530);

    await until(
      'healthy after the restart',
      async () =>
        (await tunnel(t!)).status === 'healthy' && (await tunnel(t!)).connections.length === 2,
      30_000,
    );
    const res = await edgeRequest(edgeOf(t), `app.${ZONE}`, '/after');
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body.toString()).url).toBe('/after');
  }, 60_000);

  it('a graceful connector stop leaves the tunnel down with nothing pending', async () => {
    await connector.stop();
    expect(connector.child.exitCode).toBe(0);
    await waitOutput(connector, /Stopping: closing tunnel connections/);
    const after = await until('down', async () => {
      const s = await tunnel(t!);
      return s.status === 'down' && s;
    });
    expect(after.connections).toEqual([]);
  });
});
