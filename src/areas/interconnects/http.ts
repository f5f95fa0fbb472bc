/**
 * Response and access helpers shared by the interconnect routes. CNI bodies are bare JSON (no
 * envelope); lists carry `items` and `next` (the official form) and paging works with either
 * `cursor`/`limit` or `page`/`per_page`.
 */
import type { WindowQuery } from './schemas.ts';

/** Permission keys: the platform accepts either group for interconnect operations. */
export const MAGIC_WAN = 'magic_wan';
export const MAGIC_TRANSIT = 'magic_transit';

const DEFAULT_LIMIT = 100;

export function bare(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json' },
  });
}

/** DELETE answers 200 with no body, as the platform does. */
export function noBody(): Response {
  return new Response(null, { status: 200 });
}

/** Either group grants interconnect operations (routes declare this; the router checks it). */
export const CNI_PERMISSIONS = [MAGIC_WAN, MAGIC_TRANSIT];

export interface Window {
  offset: number;
  size: number;
  mode: 'cursor' | 'page';
}

/** `cursor`/`limit` when either is present, else `page`/`per_page`. */
export function windowOf(q: WindowQuery): Window {
  if (q.cursor !== undefined || q.limit !== undefined) {
    return { offset: q.cursor ?? 0, size: q.limit || DEFAULT_LIMIT, mode: 'cursor' };
  }
  const size = q.per_page ?? DEFAULT_LIMIT;
  return { offset: ((q.page ?? 1) - 1) * size, size, mode: 'page' };
}

/**
 * A list answer. `next` is the cursor of the next item, or null on the last page. With
 * `withResult` the same array is also under `result` with a `result_info`, the spec's form.
 */
export function listBody<T>(all: T[], w: Window, withResult = false): Response {
  const items = all.slice(w.offset, w.offset + w.size);
  const end = w.offset + items.length;
  const next = end < all.length ? end : null;
  const body: Record<string, unknown> = { items, next };
  if (withResult) {
    body.result = items;
    body.result_info = {
      page: Math.floor(w.offset / w.size) + 1,
      per_page: w.size,
      count: items.length,
      total_count: all.length,
      total_pages: Math.max(1, Math.ceil(all.length / w.size)),
    };
  }
  return bare(body);
}
