/**
 * The ingest fast path and the transform thread: the byte-level checker accepts exactly the
 * bodies `JSON.parse` accepts as an array of objects (crafted cases and seeded random edits), and
 * the transform thread parses, applies the SQL and serialises records, keeping record boundaries,
 * drop counts and value kinds.
 */
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/core/log.ts';
import { sqlitePassOnly } from '../../support/server.ts';
import { countEventArray } from '../../../src/areas/pipelines/json-scan.ts';
import { TransformThread } from '../../../src/areas/pipelines/transform-thread.ts';
import { KIND } from '../../../src/areas/pipelines/transform.ts';

/** What ingestion accepted before the checker: JSON.parse, then an array of objects. */
function reference(text: string): number {
  try {
    const v: unknown = JSON.parse(text);
    return Array.isArray(v) && v.every((e) => e !== null && typeof e === 'object' && !Array.isArray(e)) ? v.length : -1;
  } catch {
    return -1;
  }
}

const storageFree = sqlitePassOnly('the body checker and the transform thread use no storage');

describe.skipIf(storageFree)('ingest body checker', () => {
  it('agrees with JSON.parse on crafted and randomly edited bodies', () => {
    const crafted = [
      '[]', ' [ ] ', '[{}]', '[{},{}]', '[{"a":1}', '[{"a":1},]', '[,{"a":1}]', '{"a":1}', '[1]', '[[]]', '[null]', '["x"]', '',
      '[{"a":01}]', '[{"a":1.}]', '[{"a":.5}]', '[{"a":+1}]', '[{"a":-}]', '[{"a":1e}]', '[{"a":1E+2}]', '[{"a":-0.0e-0}]',
      '[{"a":"\\u12G4"}]', '[{"a":"\\u00e9\\n\\/"}]', '[{"a":"\\x"}]', '[{"a":"tab\there"}]', '[{"a":"raw\u0001"}]', '[{"a":"é✓"}]',
      '[{"a":tru}]', '[{"a":true,"b":false,"c":null}]', '[{"a" 1}]', '[{a:1}]', "[{'a':1}]", '[{"a":1}]x', '[{"a":1}] \n\t\r',
      '\ufeff[{}]', '[{"a":[1,[2,{"b":[]}]]}]', '[{"a":{"b":{}}}]', '[{"a":[1,]}]', '[{"a":{"b":1,}}]', '[{"a":1}{"b":2}]',
    ];
    for (const s of crafted) expect([s, countEventArray(Buffer.from(s))]).toEqual([s, reference(s)]);
    // Seeded random edits of valid bodies: deletions, insertions and replacements of JSON's characters.
    const seeds = ['[{"a":1,"b":[true,false,null],"c":{"d":"x\\"y"}}]', ' [ {"n":-12.5e+3} , {"s":"\\u00e9\\n"} ] ', '[{"a":[[],{}]},{}]'];
    const alphabet = '[]{}",:\\ \t\n0123456789-+.eEtrufalsnu\u0001é';
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    let agree = 0;
    for (let k = 0; k < 5000; k++) {
      let s = seeds[rand(seeds.length)];
      for (let e = 1 + rand(3); e > 0; e--) {
        const at = rand(s.length + 1);
        const c = alphabet[rand(alphabet.length)];
        const op = rand(3);
        s = op === 0 ? s.slice(0, at) + s.slice(at + 1) : op === 1 ? s.slice(0, at) + c + s.slice(at) : s.slice(0, at) + c + s.slice(at + 1);
      }
      if (countEventArray(Buffer.from(s)) === reference(s)) agree++;
      else expect(s).toBe('a body the checker and JSON.parse disagree on');
    }
    expect(agree).toBe(5000);
  });
});

describe.skipIf(storageFree)('transform thread', () => {
  it('parses, applies the SQL and serialises on a worker thread, keeping record boundaries', async () => {
    const thread = new TransformThread(createLogger('silent'));
    try {
      const run = thread.transformer('p1', {
        sql: "INSERT INTO out SELECT id, UPPER(c) AS c, v * 2 AS v FROM ev WHERE id <> 'skip'",
        stream: { id: 's'.repeat(32), name: 'ev', version: 1 },
        sink: { id: 'k'.repeat(32), name: 'out' },
        inferTypes: true,
        unixMillis: false,
      });
      const out = await run([
        Buffer.from('[{"id":"a","c":"de","v":1},{"id":"skip"},7]'),
        Buffer.from('not json'),
        Buffer.from('[{"id":"b","c":"fr","v":1.5}]'),
      ]);
      expect(thread.onThread).toBe(true);
      const text = Buffer.from(out.text).toString();
      expect(text).toBe('{"id":"a","c":"DE","v":2}\n{"id":"b","c":"FR","v":3}\n');
      expect(out.records.map(({ end, rows, events, dropped }) => ({ end, rows, events, dropped }))).toEqual([
        { end: 26, rows: 1, events: 3, dropped: 1 },
        { end: 26, rows: 0, events: 0, dropped: 1 },
        { end: 52, rows: 1, events: 1, dropped: 0 },
      ]);
      expect(out.records[0].kinds).toEqual({ id: KIND.string, c: KIND.string, v: KIND.int });
      expect(out.records[2].kinds?.v).toBe(KIND.int);
    } finally {
      await thread.close();
    }
  });
});
