/** The REST value encoding: round trips, `$t` escaping, key order, and values deeper than the call stack. */
import { describe, expect, it } from 'vitest';
import { fromPlain, toPlain } from '../../../src/areas/workflows/encoding.ts';

function deep(depth: number): unknown {
  let v: unknown = 'leaf';
  for (let i = 0; i < depth; i++) v = i % 2 ? { a: v } : [v];
  return v;
}

function depthOf(v: unknown): number {
  let d = 0;
  for (let x = v; x !== null && typeof x === 'object'; d++) x = Array.isArray(x) ? x[0] : (x as { a: unknown }).a;
  return d;
}

describe('workflow value encoding', () => {
  it('round-trips plain JSON, keeps key order and escapes objects with a $t key', () => {
    const value = { z: 1, a: [1, 'two', null, { $t: 'x', n: [true] }], m: { b: 2, c: { d: [] } } };
    const enc = fromPlain(value) as any;
    expect(Object.keys(enc)).toEqual(['z', 'a', 'm']);
    expect(enc.a[3]).toEqual({ $t: 'o', v: { $t: 'x', n: [true] } });
    expect(toPlain(enc)).toEqual(value);
    expect(Object.keys(toPlain(enc) as object)).toEqual(['z', 'a', 'm']);
  });

  it('keeps a __proto__ key as data, never as a prototype', () => {
    const value = JSON.parse('{"__proto__":{"polluted":true},"k":1}');
    const enc = fromPlain(value) as Record<string, unknown>;
    expect(Object.getPrototypeOf(enc)).toBe(Object.prototype);
    expect(JSON.stringify(enc)).toBe('{"__proto__":{"polluted":true},"k":1}');
    expect(JSON.stringify(toPlain(enc))).toBe('{"__proto__":{"polluted":true},"k":1}');
  });

  it('shows tagged values in their plain form', () => {
    const enc = {
      u: { $t: 'u' },
      n: { $t: 'n', v: '12345678901234567890' },
      d: { $t: 'd', v: 0 },
      r: { $t: 'r', v: ['a+', 'g'] },
      m: { $t: 'm', v: [[{ $t: 'd', v: 0 }, [{ $t: 'u' }]]] },
      s: { $t: 's', v: [1, { $t: 'u' }] },
      o: { $t: 'o', v: { $t: 'raw' } },
    };
    expect(toPlain(enc)).toEqual({
      u: null,
      n: '12345678901234567890',
      d: '1970-01-01T00:00:00.000Z',
      r: '/a+/g',
      m: [['1970-01-01T00:00:00.000Z', [null]]],
      s: [1, null],
      o: { $t: 'raw' },
    });
  });

  it('encodes and decodes values nested far deeper than the call stack allows', () => {
    const value = deep(200_000);
    const enc = fromPlain(value);
    expect(depthOf(enc)).toBe(200_000);
    expect(depthOf(toPlain(enc))).toBe(200_000);
  });
});
