/**
 * The pipeline SQL's semantics on single events (SQL null rules, CASE forms, CAST conversions,
 * IN with nulls, BETWEEN, ||) and the local stream log's recovery: a torn or corrupt tail, which
 * was never acknowledged, is cut off on open while every complete record stays readable.
 */
import { appendFileSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/core/log.ts';
import { LocalLog } from '../../../src/areas/pipelines/log.ts';
import { compilePipeline, type SqlCatalog } from '../../../src/areas/pipelines/sql.ts';

const catalog: SqlCatalog = {
  stream: (name) => (name === 'ev' ? { id: 's'.repeat(32), name, version: 1 } : undefined),
  sink: (name) => (name === 'out' ? { id: 'k'.repeat(32), name } : undefined),
};

async function rows(select: string, events: Record<string, unknown>[]) {
  const c = await compilePipeline(`INSERT INTO out ${select}`, catalog);
  return events.map((e) => c.apply(e) ?? 'dropped');
}

describe('pipeline SQL semantics', () => {
  it('null in, null out; WHERE keeps only true', async () => {
    expect(await rows('SELECT a + 1 AS x, UPPER(s) AS u, CONCAT(s, NULL, \'!\') AS c, s || \'?\' AS p FROM ev', [{ a: 1, s: 'hi' }, {}])).toEqual([
      { x: 2, u: 'HI', c: 'hi!', p: 'hi?' },
      { x: null, u: null, c: '!', p: null },
    ]);
    expect(await rows('SELECT a FROM ev WHERE a > 1', [{ a: 2 }, { a: 1 }, {}, { a: null }])).toEqual([{ a: 2 }, 'dropped', 'dropped', 'dropped']);
    expect(await rows('SELECT a FROM ev WHERE NOT (a IN (1, NULL))', [{ a: 2 }, { a: 1 }])).toEqual(['dropped', 'dropped']);
    expect(await rows('SELECT a FROM ev WHERE a NOT IN (1, 3) AND a BETWEEN 0 AND 10', [{ a: 2 }, { a: 3 }, { a: 11 }])).toEqual([{ a: 2 }, 'dropped', 'dropped']);
    expect(await rows('SELECT a FROM ev WHERE b IS NULL OR b = true', [{ a: 1 }, { a: 2, b: true }, { a: 3, b: false }])).toEqual([{ a: 1 }, { a: 2 }, 'dropped']);
  });

  it('CASE with and without an operand, COALESCE, arithmetic types', async () => {
    const sql = "SELECT CASE k WHEN 'a' THEN 1 WHEN 'b' THEN 2 END AS n, CASE WHEN v >= 10 THEN 'big' WHEN v >= 0 THEN 'small' ELSE 'neg' END AS size, COALESCE(m, v, 0) AS first, v / 4 AS q, v % 4 AS r FROM ev";
    expect(await rows(sql, [{ k: 'b', v: 10 }, { k: 'z', v: -1, m: 5 }])).toEqual([
      { n: 2, size: 'big', first: 10, q: 2.5, r: 2 },
      { n: null, size: 'neg', first: 5, q: -0.25, r: -1 },
    ]);
    const c = await compilePipeline('INSERT INTO out SELECT v / 4 AS q, v + 1 AS s, CAST(v AS int32) + 1 AS i FROM ev', catalog);
    expect(c.columns.map((x) => x.type)).toEqual(['float64', undefined, 'int64']);
  });

  it('CAST converts or gives null', async () => {
    const sql = 'SELECT CAST(x AS int32) AS i, CAST(x AS int64) AS l, CAST(x AS float32) AS f, CAST(x AS float64) AS d, CAST(x AS bool) AS b, CAST(x AS string) AS s, CAST(x AS timestamp) AS t FROM ev';
    expect(await rows(sql, [{ x: '42.9' }, { x: 'true' }, { x: 3e10 }, { x: 1740823200000 }, { x: { a: 1 } }])).toEqual([
      { i: 42, l: 42, f: Math.fround(42.9), d: 42.9, b: null, s: '42.9', t: null },
      { i: null, l: null, f: null, d: null, b: true, s: 'true', t: null },
      { i: null, l: 30000000000, f: 30000001024, d: 3e10, b: true, s: '30000000000', t: '1970-12-14T05:20:00.000Z' },
      { i: null, l: 1740823200000, f: Math.fround(1740823200000), d: 1740823200000, b: true, s: '1740823200000', t: '2025-03-01T10:00:00.000Z' },
      { i: null, l: null, f: null, d: null, b: null, s: '{"a":1}', t: null },
    ]);
  });

  it('nested fields, stream-qualified names and SELECT * on an untyped stream', async () => {
    expect(await rows('SELECT ev.user.id AS uid, e.tag FROM ev AS e', [{ user: { id: 7 }, tag: 'x' }, { user: 'flat' }])).toEqual([
      { uid: 7, tag: 'x' },
      { uid: null, tag: null },
    ]);
    expect(await rows('SELECT * FROM ev WHERE keep', [{ keep: true, a: [1] }, { keep: false }])).toEqual([{ keep: true, a: [1] }, 'dropped']);
  });
});

describe('local stream log', () => {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-log-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const id = 'ab'.repeat(16);

  it('cuts a torn or corrupt tail on open and keeps every complete record', async () => {
    const log = new LocalLog(dir, createLogger('silent'));
    await Promise.all(Array.from({ length: 50 }, (_, i) => log.append(id, Buffer.from(JSON.stringify([{ i }])))));
    const seg = join(dir, id, '0000000000000000.seg');
    const before = statSync(seg).size;
    await log.close();
    // A record header promising more bytes than follow (a crash mid-write).
    const header = Buffer.alloc(8);
    header.writeUInt32LE(1000, 0);
    appendFileSync(seg, Buffer.concat([header, Buffer.from('[{"partial"')]));
    const again = new LocalLog(dir, createLogger('silent'));
    const records = await again.read(id, 0, 1 << 20);
    expect(records.map((r) => JSON.parse(r.payload.toString())[0].i).sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(statSync(seg).size).toBe(before);
    // Appends continue after the cut; a complete record with a wrong checksum is cut too.
    await again.append(id, Buffer.from('[{"i":50}]'));
    await again.close();
    const bad = Buffer.alloc(8 + 4);
    bad.writeUInt32LE(4, 0);
    bad.writeUInt32LE(12345, 4);
    bad.write('[{}]', 8);
    appendFileSync(seg, bad);
    const third = new LocalLog(dir, createLogger('silent'));
    const all = await third.read(id, 0, 1 << 20);
    expect(all).toHaveLength(51);
    expect(all[50].payload.toString()).toBe('[{"i":50}]');
    expect(await third.read(id, all[50].next, 1 << 20)).toEqual([]);
    await third.close();
  });

  it('rolls segments, and compaction deletes the ones wholly before an offset', async () => {
    const sid = 'cd'.repeat(16);
    // A log of the earlier one-file layout becomes the first segment.
    writeFileSync(join(dir, `${sid}.log`), '');
    const log = new LocalLog(dir, createLogger('silent'), 100);
    for (let i = 0; i < 30; i++) await log.append(sid, Buffer.from(JSON.stringify([{ i, pad: 'x'.repeat(30) }])));
    const segs = () => readdirSync(join(dir, sid)).sort();
    expect(segs().length).toBeGreaterThan(5);
    expect(existsSync(join(dir, `${sid}.log`))).toBe(false);
    const all: { i: number; next: number }[] = [];
    for (let off = 0; ; ) {
      const rs = await log.read(sid, off, 1 << 20);
      if (rs.length === 0) break;
      for (const r of rs) all.push({ i: JSON.parse(r.payload.toString())[0].i, next: r.next });
      off = rs[rs.length - 1].next;
    }
    expect(all.map((r) => r.i)).toEqual(Array.from({ length: 30 }, (_, i) => i));
    // Compact up to the end of record 14: segments ending at or before it go, the rest stay.
    const count = segs().length;
    const freed = await log.compact(sid, all[14].next);
    expect(freed).toBeGreaterThan(0);
    expect(segs().length).toBeLessThan(count);
    const first = await log.start(sid);
    expect(first).toBeLessThanOrEqual(all[14].next);
    // A reader from the first kept offset (or from before it) still sees records 15..29.
    const from = async (off: number, l = log) => {
      const seen: number[] = [];
      for (;;) {
        const rs = await l.read(sid, off, 1 << 20);
        if (rs.length === 0) return seen;
        for (const r of rs) seen.push(JSON.parse(r.payload.toString())[0].i);
        off = rs[rs.length - 1].next;
      }
    };
    expect((await from(first)).slice(-15)).toEqual(Array.from({ length: 15 }, (_, i) => i + 15));
    expect(await from(0)).toEqual(await from(first));
    // Compacting everything keeps the last (written) segment; appends and a reopen continue.
    await log.compact(sid, all[29].next);
    expect(segs()).toHaveLength(1);
    await log.append(sid, Buffer.from('[{"i":30}]'));
    await log.close();
    const again = new LocalLog(dir, createLogger('silent'), 100);
    const kept = await from(await again.start(sid), again);
    expect(kept.at(-1)).toBe(30);
    expect(kept.length).toBeLessThan(5);
    await again.close();
  });
});
