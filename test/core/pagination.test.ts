import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { limitOffset, pageFrom, pageOf, pageQuery, resultInfo } from '../../src/core/pagination.ts';
import { Page } from '../../src/core/envelope.ts';
import { parseQuery, validate } from '../../src/core/validate.ts';
import { ApiError } from '../../src/core/errors.ts';

const items = Array.from({ length: 17 }, (_, i) => i + 1);

describe('pageOf', () => {
  it('returns the requested slice with a complete result_info', () => {
    const p = pageOf(items, { page: 2, per_page: 5 });
    expect(p).toBeInstanceOf(Page);
    expect(p.items).toEqual([6, 7, 8, 9, 10]);
    expect(p.info).toEqual({ page: 2, per_page: 5, count: 5, total_count: 17, total_pages: 4 });
  });

  it('returns a short last page', () => {
    const p = pageOf(items, { page: 4, per_page: 5 });
    expect(p.items).toEqual([16, 17]);
    expect(p.info).toEqual({ page: 4, per_page: 5, count: 2, total_count: 17, total_pages: 4 });
  });

  it('returns an empty page past the end, still with the full result_info', () => {
    const p = pageOf(items, { page: 5, per_page: 5 });
    expect(p.items).toEqual([]);
    expect(p.info).toEqual({ page: 5, per_page: 5, count: 0, total_count: 17, total_pages: 4 });
    expect(pageOf(items, { page: 1000, per_page: 50 }).info).toEqual({
      page: 1000,
      per_page: 50,
      count: 0,
      total_count: 17,
      total_pages: 1,
    });
  });

  it('reports one page for an empty list', () => {
    const p = pageOf([], { page: 1, per_page: 20 });
    expect(p.items).toEqual([]);
    expect(p.info).toEqual({ page: 1, per_page: 20, count: 0, total_count: 0, total_pages: 1 });
  });

  it('does not modify the input', () => {
    const copy = [...items];
    pageOf(items, { page: 2, per_page: 3 });
    expect(items).toEqual(copy);
  });
});

describe('pageFrom / resultInfo / limitOffset', () => {
  it('wraps a LIMIT/OFFSET result with the total', () => {
    const p = pageFrom(['a', 'b'], 12, { page: 3, per_page: 5 });
    expect(p.items).toEqual(['a', 'b']);
    expect(p.info).toEqual({ page: 3, per_page: 5, count: 2, total_count: 12, total_pages: 3 });
  });

  it('rounds total_pages up', () => {
    expect(resultInfo({ page: 1, per_page: 5 }, 5, 11).total_pages).toBe(3);
    expect(resultInfo({ page: 1, per_page: 5 }, 5, 10).total_pages).toBe(2);
  });

  it('turns page and per_page into limit and offset', () => {
    expect(limitOffset({ page: 1, per_page: 20 })).toEqual({ limit: 20, offset: 0 });
    expect(limitOffset({ page: 4, per_page: 5 })).toEqual({ limit: 5, offset: 15 });
  });
});

describe('pageQuery', () => {
  const schema = z.object(pageQuery({ perPage: 20, min: 5, max: 50 }));
  const parse = (search: string) => validate(schema, parseQuery(search), 'query');

  it('applies the defaults', () => {
    expect(parse('')).toEqual({ page: 1, per_page: 20 });
  });

  it('reads page and per_page from strings', () => {
    expect(parse('page=3&per_page=5')).toEqual({ page: 3, per_page: 5 });
    expect(parse('per_page=50').per_page).toBe(50);
  });

  it.each(['per_page=4', 'per_page=51', 'page=0', 'page=-1', 'per_page=x'])(
    'rejects %s with 400 naming the field',
    (q) => {
      try {
        parse(q);
        expect.unreachable();
      } catch (err) {
        expect(err).toBeInstanceOf(ApiError);
        expect((err as ApiError).status).toBe(400);
        expect((err as ApiError).errors[0].message).toMatch(new RegExp(`^${q.split('=')[0]}: `));
      }
    },
  );
});
