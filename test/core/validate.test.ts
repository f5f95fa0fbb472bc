import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  parseQuery,
  qBool,
  qInt,
  qList,
  qString,
  validate,
  validationError,
} from '../../src/core/validate.ts';
import { ApiError } from '../../src/core/errors.ts';

describe('parseQuery', () => {
  it('keeps dotted keys as they are', () => {
    expect(parseQuery('?account.id=abc&name.contains=ex')).toEqual({
      'account.id': 'abc',
      'name.contains': 'ex',
    });
  });

  it('collects repeated keys into an array in order', () => {
    expect(parseQuery('type=A&type=AAAA&type=CNAME')).toEqual({ type: ['A', 'AAAA', 'CNAME'] });
  });

  it('treats a [] suffix as the same field', () => {
    expect(parseQuery('type[]=A&type=MX&type%5B%5D=TXT')).toEqual({ type: ['A', 'MX', 'TXT'] });
  });

  it('decodes percent escapes and plus signs', () => {
    expect(parseQuery('name=a%20b&comment=x+y')).toEqual({ name: 'a b', comment: 'x y' });
  });

  it('returns an empty object for an empty query', () => {
    expect(parseQuery('')).toEqual({});
    expect(parseQuery('?')).toEqual({});
  });
});

describe('query coercion', () => {
  const schema = z.object({
    proxied: qBool().optional(),
    page: qInt(z.number().int().min(1)).optional(),
    name: qString().optional(),
    type: qList(z.enum(['A', 'AAAA', 'MX'])).optional(),
  });
  const parse = (search: string) => validate(schema, parseQuery(search), 'query');

  it('reads "false" as false and "true" as true', () => {
    expect(parse('proxied=false').proxied).toBe(false);
    expect(parse('proxied=true').proxied).toBe(true);
    expect(parse('proxied=0').proxied).toBe(false);
    expect(parse('proxied=1').proxied).toBe(true);
  });

  it('rejects a boolean that is neither', () => {
    expect(() => parse('proxied=maybe')).toThrow(ApiError);
  });

  it('takes the last value of a repeated scalar', () => {
    expect(parse('proxied=true&proxied=false').proxied).toBe(false);
    expect(parse('name=a&name=b').name).toBe('b');
    expect(parse('page=2&page=3').page).toBe(3);
  });

  it('converts integers and rejects non-integers with the field named', () => {
    expect(parse('page=7').page).toBe(7);
    for (const bad of ['page=abc', 'page=1.5', 'page=0']) {
      try {
        parse(bad);
        expect.unreachable(`${bad} should fail`);
      } catch (err) {
        expect(err).toBeInstanceOf(ApiError);
        expect((err as ApiError).status).toBe(400);
        expect((err as ApiError).errors[0].message).toMatch(/^page: /);
      }
    }
  });

  it('reads lists from repeated keys or one comma-separated value', () => {
    expect(parse('type=A&type=MX').type).toEqual(['A', 'MX']);
    expect(parse('type=A,AAAA').type).toEqual(['A', 'AAAA']);
    expect(parse('type[]=AAAA').type).toEqual(['AAAA']);
  });
});

describe('validate', () => {
  const body = z.object({ name: z.string().min(1), account: z.object({ id: z.string() }) });

  it('returns the parsed value', () => {
    expect(validate(body, { name: 'x', account: { id: 'a' } }, 'body')).toEqual({
      name: 'x',
      account: { id: 'a' },
    });
  });

  it('throws a 400 ApiError naming each failing field with its path', () => {
    try {
      validate(body, { name: '', account: {} }, 'body');
      expect.unreachable();
    } catch (err) {
      const e = err as ApiError;
      expect(e).toBeInstanceOf(ApiError);
      expect(e.status).toBe(400);
      const messages = e.errors.map((x) => x.message);
      expect(messages.some((m) => m.startsWith('name: '))).toBe(true);
      expect(messages.some((m) => m.startsWith('account.id: '))).toBe(true);
      for (const item of e.errors) expect(item.code).toBeGreaterThanOrEqual(1000);
    }
  });

  it('names the location when the whole input is wrong', () => {
    try {
      validate(body, undefined, 'body');
      expect.unreachable();
    } catch (err) {
      expect((err as ApiError).errors[0].message).toMatch(/^body: /);
    }
  });

  it('validationError caps the number of reported issues', () => {
    const many = z.object(
      Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`f${i}`, z.string()])),
    );
    const parsed = many.safeParse({});
    expect(parsed.success).toBe(false);
    if (!parsed.success) {
      const err = validationError(parsed.error, 'query');
      expect(err.errors.length).toBe(20);
      expect(err.status).toBe(400);
    }
  });
});
