/**
 * Attack events in the analytics store: an HTTP flood's start and end are rows of the platform
 * dataset `outpost_ddos_attacks`, queried through the analytics SQL endpoint (also with the query of
 * docs/ddos.md, read from the file), matching the attack record of `/zones/{z}/ddos/attacks`; another account's query
 * does not see them.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { startOrigin, type Origin } from '../../support/origins.ts';
import { flood } from './load.ts';

const ORIGIN = '127.0.225.1';
const HOST = 'www.attacks-sql.test';

let t: TestServer;
let origin: Origin;
let zone: { id: string; name: string };

async function sql(query: string, accountId = t.accountId): Promise<{ status: number; body: any; text: string }> {
  const res = await fetch(`${t.api}/accounts/${accountId}/analytics_engine/sql`, { method: 'POST', headers: { authorization: `Bearer ${t.token}` }, body: query });
  const text = await res.text();
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: res.status, body, text };
}

beforeAll(async () => {
  t = await startTestServer({ ddosDetection: true, ddosWindowMs: 250, ddosCooldownWindows: 2, ddosThresholdPercent: 10, analyticsFlushMs: 50 });
  origin = await startOrigin(ORIGIN, (_req, res) => res.end('ok'));
  zone = await createZone(t, 'attacks-sql.test');
  await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name: 'www', content: ORIGIN, proxied: true, ttl: 1 });
});
afterAll(async () => {
  await origin?.close();
  await t?.stop();
});

describe('attack events in the analytics store', () => {
  it('a flood start and end are rows of outpost_ddos_attacks', async () => {
    const edge = new URL(t.server.listeners.find((l) => l.name.startsWith('edge'))!.address);
    await flood({ url: edge, host: HOST, from: '127.0.225.2', durationMs: 700, concurrency: 4 });
    // The attack record once every attack of the zone has ended.
    let records: any[] = [];
    for (let i = 0; i < 100; i++) {
      const r = await t.call('GET', `/zones/${zone.id}/ddos/attacks`);
      records = r.body.result;
      if (records.length > 0 && records.every((a) => a.status === 'ended')) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    expect(records.length).toBeGreaterThan(0);

    const query = `SELECT event, attack_id, target_hostname, rule_id, action, peak_rate, mitigated, timestamp
FROM outpost_ddos_attacks
WHERE zone_id = '${zone.id}' AND timestamp > NOW() - INTERVAL '1' DAY
ORDER BY timestamp, event DESC
FORMAT JSON`;
    let rows: any[] = [];
    for (let i = 0; i < 100; i++) {
      const r = await sql(query);
      expect(r.status, r.text).toBe(200);
      rows = r.body.data;
      if (rows.filter((x) => x.event === 'end').length === records.length) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    expect(rows.length).toBe(2 * records.length);
    for (const a of records) {
      const mine = rows.filter((x) => x.attack_id === a.id);
      expect(mine.map((x) => x.event)).toEqual(['start', 'end']);
      const end = mine[1];
      expect(end).toMatchObject({ target_hostname: HOST, rule_id: a.rule_id, action: a.action });
      expect(Number(end.peak_rate)).toBe(a.peak_rate);
      expect(Number(end.mitigated)).toBe(a.mitigated);
    }
    expect(rows.some((x) => x.event === 'end' && Number(x.mitigated) > 0)).toBe(true);

    // Columns beyond the example, and aggregation.
    const agg = await sql(`SELECT layer, count() AS n, max(end_time) > max(start_time) AS later FROM outpost_ddos_attacks WHERE event = 'end' GROUP BY layer FORMAT JSON`);
    expect(agg.status, agg.text).toBe(200);
    expect(agg.body.data).toEqual([{ layer: 'l7', n: String(records.length), later: true }]);

    // The query of docs/ddos.md as written there (with the zone's id for $ZONE).
    const doc = readFileSync(new URL('../../../docs/ddos.md', import.meta.url), 'utf8');
    const documented = /analytics_engine\/sql [^\n]*--data-binary "\n([\s\S]*?FORMAT JSON)"/.exec(doc)![1].replace('$ZONE', zone.id);
    const fromDoc = await sql(documented);
    expect(fromDoc.status, fromDoc.text).toBe(200);
    expect(fromDoc.body.data.map((x: any) => x.attack_id).sort()).toEqual(records.map((a) => a.id).sort());
    expect(fromDoc.body.data[0]).toMatchObject({ target_hostname: HOST, action: 'block' });
    expect(fromDoc.body.data.every((x: any) => x.end_time !== null && x.start_time <= x.end_time)).toBe(true);

    const tables = await sql('SHOW TABLES');
    expect(tables.body.data.map((d: any) => d.dataset)).toContain('outpost_ddos_attacks');

    // Another account has no such rows.
    const r = await sql('SELECT count() AS n FROM outpost_ddos_attacks FORMAT JSON', 'e'.repeat(32));
    expect(r.status, r.text).toBe(200);
    expect(r.body.data).toEqual([{ n: '0' }]);
  });
});
