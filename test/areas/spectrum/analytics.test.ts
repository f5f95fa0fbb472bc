/**
 * Analytics from the proxy's own events: the numbers equal the bytes the test moved (TCP and UDP),
 * per event, application and IP version; filters, sort, limit; time intervals; the last-minute
 * aggregate; bad queries; and the figures surviving a restart.
 */
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../../src/core/storage/db.ts';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { flowEvents, freePort, startEcho, tcpExchange, waitFor, type EchoOrigin } from './peers.ts';

let t: TestServer;
let zone: { id: string; name: string };
let echo: EchoOrigin;
let udpEcho: dgram.Socket;
let events: ReturnType<typeof flowEvents>;
let since: string;
const ids: Record<'a' | 'b' | 'u', string> = { a: '', b: '', u: '' };
const ports: Record<'a' | 'b' | 'u', number> = { a: 0, b: 0, u: 0 };

async function create(key: 'a' | 'b' | 'u', server = t, z = zone): Promise<void> {
  const transport = key === 'u' ? 'udp' : 'tcp';
  ports[key] = await freePort(transport);
  const origin = transport === 'udp' ? `udp://127.0.0.1:${udpEcho.address().port}` : `tcp://127.0.0.1:${echo.port}`;
  const res = await server.call('POST', `/zones/${z.id}/spectrum/apps`, { protocol: `${transport}/${ports[key]}`, dns: { type: 'CNAME', name: `${key}.${z.name}` }, origin_direct: [origin] });
  if (res.status !== 200) throw new Error(res.text);
  ids[key] = res.body.result.id;
}

async function sendUdp(port: number, sizes: number[]): Promise<void> {
  const c = dgram.createSocket('udp4');
  let got = 0;
  c.on('message', () => got++);
  await new Promise<void>((r) => c.bind(0, '127.0.0.1', () => r()));
  for (const size of sizes) c.send(randomBytes(size), port, '127.0.0.1');
  await waitFor(() => got === sizes.length, 3000, 'UDP echoes');
  c.close();
}

beforeAll(async () => {
  t = await startTestServer({ dnsPort: 0, spectrumUdpIdleTimeoutMs: 300 });
  zone = await createZone(t, 'stats.test');
  echo = await startEcho();
  udpEcho = dgram.createSocket('udp4');
  udpEcho.on('message', (m, r) => udpEcho.send(m, r.port, r.address));
  await new Promise<void>((r) => udpEcho.bind(0, '127.0.0.1', () => r()));
  events = flowEvents(t.server.events);
  since = new Date(Date.now() - 1000).toISOString();
  await create('a');
  await create('b');
  await create('u');
  for (const size of [1000, 2000, 3000]) await tcpExchange(ports.a, randomBytes(size));
  await tcpExchange(ports.b, randomBytes(500));
  await tcpExchange(ports.b, randomBytes(250), { host: '::1' });
  await sendUdp(ports.u, [100, 100, 100]);
  await waitFor(() => events.list.filter((e) => e.event === 'disconnect').length === 6, 5000, 'six disconnects');
});
afterAll(async () => {
  events?.stop();
  udpEcho?.close();
  await echo?.close();
  await t?.stop();
});

const path = (report: string, q: string) => `/zones/${zone.id}/spectrum/analytics/${report}?${q}`;
async function summary(q: string) {
  const res = await t.call('GET', path('events/summary', `since=${since}&${q}`));
  expect(res.status, res.text).toBe(200);
  return res.body.result;
}

describe('summary', () => {
  it('per event for one app: exactly the bytes sent and echoed', async () => {
    const r = await summary(`metrics=count,bytesIngress,bytesEgress&dimensions=event&filters=appID==${ids.a}`);
    expect(r.data).toEqual([
      { dimensions: ['connect'], metrics: [3, 0, 0] },
      { dimensions: ['disconnect'], metrics: [3, 6000, 6000] },
    ]);
    expect(r.totals).toEqual({ count: 6, bytesIngress: 6000, bytesEgress: 6000 });
    expect(r.min).toEqual({ count: 3, bytesIngress: 0, bytesEgress: 0 });
    expect(r.max).toEqual({ count: 3, bytesIngress: 6000, bytesEgress: 6000 });
    expect(r.rows).toBe(2);
    expect(r.data_lag).toBe(0);
    expect(r.query).toMatchObject({ metrics: ['count', 'bytesIngress', 'bytesEgress'], dimensions: ['event'], filters: `appID==${ids.a}`, since: new Date(since).toISOString(), limit: 10000, sort: [] });
  });

  it('per app, sorted and limited; totals cover every app; UDP bytes too', async () => {
    const r = await summary('metrics=bytesIngress,bytesEgress&dimensions=appID&sort=-bytesIngress');
    expect(r.data).toEqual([
      { dimensions: [ids.a], metrics: [6000, 6000] },
      { dimensions: [ids.b], metrics: [750, 750] },
      { dimensions: [ids.u], metrics: [300, 300] },
    ]);
    const limited = await summary('metrics=bytesIngress&dimensions=appID&sort=%2BbytesIngress&limit=1');
    expect(limited.data).toEqual([{ dimensions: [ids.u], metrics: [300] }]);
    expect(limited.rows).toBe(1);
    expect(limited.totals).toEqual({ bytesIngress: 7050 });
  });

  it('repeated keys (the official client) work like comma lists; ipVersion and coloName dimensions', async () => {
    const r = await summary(`metrics=count&metrics=bytesIngress&dimensions=ipVersion&dimensions=coloName&filters=${encodeURIComponent(`appID==${ids.b};event==disconnect`)}`);
    expect(r.data).toEqual([
      { dimensions: ['4', 'LOC'], metrics: [1, 500] },
      { dimensions: ['6', 'LOC'], metrics: [1, 250] },
    ]);
  });

  it('filters: OR with a comma or OR, AND with ; or AND, comparisons', async () => {
    const or = await summary(`metrics=count&filters=${encodeURIComponent('event==connect,event==clientFiltered')}`);
    expect(or.totals.count).toBe(6);
    const orWord = await summary(`metrics=count&filters=${encodeURIComponent('event==connect OR event==disconnect')}`);
    expect(orWord.totals.count).toBe(12);
    const and = await summary(`metrics=bytesIngress&filters=${encodeURIComponent(`event==disconnect AND appID!=${ids.a}`)}`);
    expect(and.totals.bytesIngress).toBe(1050);
    const v6 = await summary(`metrics=bytesIngress&filters=${encodeURIComponent('ipVersion>4')}`);
    expect(v6.totals.bytesIngress).toBe(250);
    const none = await summary('metrics=count&filters=event==originError');
    expect(none.data).toEqual([{ dimensions: [], metrics: [0] }]);
  });

  it('durations: average, percentiles in ms and the total in seconds', async () => {
    const r = await summary(`metrics=durationAvg,durationMedian,duration90th,duration99th,duration&filters=appID==${ids.a}`);
    const [avg, median, p90, p99, total] = r.data[0].metrics;
    const durations = events.list.filter((e) => e.appId === ids.a && e.event === 'disconnect').map((e) => e.durationMs!);
    expect(avg).toBeCloseTo(durations.reduce((s, d) => s + d, 0) / 3, 2);
    expect(median).toBeLessThanOrEqual(p90);
    expect(p90).toBeLessThanOrEqual(p99);
    expect(p99).toBeCloseTo(Math.max(...durations), 2);
    expect(total).toBeCloseTo(durations.reduce((s, d) => s + d, 0) / 1000, 3);
  });

  it('a window before the traffic is empty', async () => {
    const res = await t.call('GET', path('events/summary', 'since=2020-01-01T00:00:00Z&until=2020-01-02T00:00:00Z&metrics=count&dimensions=event'));
    expect(res.body.result).toMatchObject({ data: [], rows: 0, totals: { count: 0 } });
  });
});

describe('bytime', () => {
  it('splits into time intervals; each series sums to the summary', async () => {
    const from = new Date(Date.now() - 3 * 60_000).toISOString();
    const res = await t.call('GET', path('events/bytime', `since=${from}&time_delta=minute&metrics=count,bytesIngress&dimensions=appID&sort=-bytesIngress`));
    expect(res.status).toBe(200);
    const r = res.body.result;
    expect(r.time_intervals.length).toBeGreaterThanOrEqual(4);
    for (const [s, e] of r.time_intervals) expect(new Date(e).getTime() - new Date(s).getTime()).toBe(60_000);
    expect(r.data[0].dimensions).toEqual([ids.a]);
    const [counts, bytes] = r.data[0].metrics;
    expect(counts).toHaveLength(r.time_intervals.length);
    expect(counts.reduce((s: number, x: number) => s + x, 0)).toBe(6);
    expect(bytes.reduce((s: number, x: number) => s + x, 0)).toBe(6000);
    expect(r.totals).toEqual({ count: 12, bytesIngress: 7050 });
    expect(r.max.bytesIngress).toBeGreaterThanOrEqual(6000);
    expect(r.min.count).toBe(0);
  });

  it('without time_delta picks an interval; coarse deltas align to UTC calendar units', async () => {
    const auto = await t.call('GET', path('events/bytime', 'metrics=count'));
    expect(auto.status).toBe(200);
    expect(auto.body.result.time_intervals.length).toBeGreaterThan(300);
    const day = await t.call('GET', path('events/bytime', 'since=2026-03-30T10:00:00Z&until=2026-04-02T10:00:00Z&time_delta=week&metrics=count'));
    expect(day.body.result.time_intervals).toEqual([
      ['2026-03-30T00:00:00.000Z', '2026-04-06T00:00:00.000Z'],
    ]);
    const quarter = await t.call('GET', path('events/bytime', 'since=2026-02-10T00:00:00Z&until=2026-05-01T00:00:00Z&time_delta=quarter&metrics=count'));
    expect(quarter.body.result.time_intervals).toEqual([
      ['2026-01-01T00:00:00.000Z', '2026-04-01T00:00:00.000Z'],
      ['2026-04-01T00:00:00.000Z', '2026-07-01T00:00:00.000Z'],
    ]);
  });
});

describe('aggregate/current', () => {
  it('one line per app over the last minute; appID and colo_name narrow it', async () => {
    const res = await t.call('GET', `/zones/${zone.id}/spectrum/analytics/aggregate/current`);
    expect(res.status).toBe(200);
    const byId = Object.fromEntries(res.body.result.map((l: { appID: string }) => [l.appID, l]));
    expect(byId[ids.a]).toMatchObject({ appID: ids.a, bytesIngress: 6000, bytesEgress: 6000, connections: 3 });
    expect(byId[ids.a].durationAvg).toBeGreaterThan(0);
    expect(byId[ids.u]).toMatchObject({ bytesIngress: 300, bytesEgress: 300, connections: 1 });
    const one = await t.call('GET', `/zones/${zone.id}/spectrum/analytics/aggregate/current?appID=${ids.b}`);
    expect(one.body.result).toEqual([{ appID: ids.b, bytesIngress: 750, bytesEgress: 750, connections: 2, durationAvg: expect.any(Number) }]);
    const elsewhere = await t.call('GET', `/zones/${zone.id}/spectrum/analytics/aggregate/current?appID=${ids.b}&colo_name=SFO`);
    expect(elsewhere.body.result).toEqual([{ appID: ids.b, bytesIngress: 0, bytesEgress: 0, connections: 0, durationAvg: 0 }]);
    const spec = await t.call('GET', `/zones/${zone.id}/spectrum/analytics/aggregate/current?metrics=bytesIngress,count&dimensions=appID`);
    expect(spec.status).toBe(200);
  });
});

describe('bad queries', () => {
  const bad: [string, string][] = [
    ['an unknown metric', 'events/summary?metrics=bytes'],
    ['an unknown dimension', 'events/summary?dimensions=country'],
    ['since after until', 'events/summary?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z'],
    ['since not a timestamp', 'events/summary?since=yesterday'],
    ['sort on a field not requested', 'events/summary?metrics=count&sort=-bytesIngress'],
    ['a filter on a metric', 'events/summary?filters=count>1'],
    ['a filter without operator', 'events/summary?filters=event'],
    ['limit 0', 'events/summary?limit=0'],
    ['an unknown time_delta', 'events/bytime?time_delta=second'],
    ['too many intervals', 'events/bytime?time_delta=minute&since=2020-01-01T00:00:00Z&until=2026-01-01T00:00:00Z'],
    ['a malformed appID', 'aggregate/current?appID=xyz'],
    ['a colo_name over 3 characters', 'aggregate/current?colo_name=LONDON'],
  ];
  for (const [what, q] of bad) {
    it(`refuses ${what} with 400`, async () => {
      const res = await t.call('GET', `/zones/${zone.id}/spectrum/analytics/${q}`);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, result: null });
    });
  }
});

describe('persistence', () => {
  it('the figures survive a restart', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'outpost-spectrum-stats-'));
    const pgUrl = process.env.OUTPOST_TEST_DATABASE?.startsWith('postgres') ? process.env.OUTPOST_TEST_DATABASE : undefined;
    const pg = pgUrl ? { database: pgUrl, databaseSchema: `t_sps_${randomBytes(5).toString('hex')}` } : {};
    try {
      const first = await startTestServer({ dnsPort: 0, ...pg }, { dataDir });
      const z = await createZone(first, 'persist.test');
      const seen = flowEvents(first.server.events);
      await create('a', first, z);
      await tcpExchange(ports.a, randomBytes(4321));
      await seen.wait((e) => e.event === 'disconnect', 3000, 'disconnect');
      const q = `/zones/${z.id}/spectrum/analytics/events/summary?metrics=count,bytesIngress&dimensions=event`;
      const before = (await first.call('GET', q)).body.result.data;
      expect(before).toEqual([
        { dimensions: ['connect'], metrics: [1, 0] },
        { dimensions: ['disconnect'], metrics: [1, 4321] },
      ]);
      seen.stop();
      await first.stop();
      const second = await startTestServer({ dnsPort: 0, ...pg }, { dataDir });
      try {
        expect((await second.call('GET', q)).body.result.data).toEqual(before);
      } finally {
        await second.stop();
      }
    } finally {
      if (pgUrl) await dropSchema(pgUrl, pg.databaseSchema!);
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
