/**
 * V4 page pagination. A page past the end is a 200 with an empty `result`: the official client
 * keeps asking for page+1 until it sees an empty page.
 */
import { z } from 'zod';
import { Page, type ResultInfo } from './envelope.ts';
import { qInt } from './validate.ts';

export interface PageParams {
  page: number;
  per_page: number;
}

/** Query fields `page` and `per_page` with an area's default and bounds. */
export function pageQuery(defaults: { perPage: number; min: number; max: number }) {
  return {
    page: qInt(z.number().int().min(1)).default(1),
    per_page: qInt(z.number().int().min(defaults.min).max(defaults.max)).default(defaults.perPage),
  };
}

export function resultInfo(p: PageParams, count: number, total: number): ResultInfo {
  return {
    page: p.page,
    per_page: p.per_page,
    count,
    total_count: total,
    total_pages: Math.max(1, Math.ceil(total / p.per_page)),
  };
}

/** Pages an in-memory list. */
export function pageOf<T>(all: T[], p: PageParams): Page<T> {
  const start = (p.page - 1) * p.per_page;
  const items = all.slice(start, start + p.per_page);
  return new Page(items, resultInfo(p, items.length, all.length));
}

/** Wraps items already fetched with LIMIT/OFFSET. */
export function pageFrom<T>(items: T[], total: number, p: PageParams): Page<T> {
  return new Page(items, resultInfo(p, items.length, total));
}

export function limitOffset(p: PageParams): { limit: number; offset: number } {
  return { limit: p.per_page, offset: (p.page - 1) * p.per_page };
}
