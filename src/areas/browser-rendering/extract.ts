/**
 * `/json` without a model: the structured data a page carries — JSON-LD blocks, microdata
 * (`itemprop`), meta tags (`name`, `property`: Open Graph, Twitter), tables (a two-column table
 * read as label → value, other tables by column header) and headings — collected in the page, then
 * matched to the requested fields by name. A field is looked up, in this order, in JSON-LD (any
 * depth), microdata, meta tags (`<name>`, `og:<name>`, `twitter:<name>`, `article:<name>`),
 * label/value tables, table columns (array fields) and, for `title`/`heading`/`name`, the first
 * `h1` or the document title. Names match case-insensitively ignoring `_`, `-` and spaces. Values
 * are converted to the requested type; a field with no match is `null`.
 */
import type { Page } from 'puppeteer-core';

export interface PageData {
  title: string;
  jsonLd: unknown[];
  microdata: Record<string, string[]>;
  meta: Record<string, string>;
  pairs: Record<string, string>;
  columns: Record<string, string[]>;
  headings: Record<string, string[]>;
}

export async function collect(page: Page): Promise<PageData> {
  return page.evaluate(() => {
    const text = (el: Element | null) => ((el as HTMLElement | null)?.innerText ?? el?.textContent ?? '').trim();
    const jsonLd: unknown[] = [];
    for (const s of Array.from(document.querySelectorAll('script[type="application/ld+json"]'))) {
      try {
        jsonLd.push(JSON.parse(s.textContent ?? ''));
      } catch {
        /* not JSON: skipped */
      }
    }
    const microdata: Record<string, string[]> = {};
    for (const el of Array.from(document.querySelectorAll('[itemprop]'))) {
      const v = el.getAttribute('content') ?? el.getAttribute('datetime') ?? el.getAttribute('href') ?? el.getAttribute('src') ?? text(el);
      for (const name of (el.getAttribute('itemprop') ?? '').split(/\s+/).filter(Boolean)) (microdata[name] ??= []).push(v);
    }
    const meta: Record<string, string> = {};
    for (const m of Array.from(document.querySelectorAll('meta[content]'))) {
      const k = m.getAttribute('name') ?? m.getAttribute('property') ?? m.getAttribute('itemprop');
      if (k && !(k in meta)) meta[k] = m.getAttribute('content') ?? '';
    }
    const pairs: Record<string, string> = {};
    const columns: Record<string, string[]> = {};
    for (const table of Array.from(document.querySelectorAll('table'))) {
      const rows = Array.from(table.querySelectorAll('tr')).map((tr) => Array.from(tr.querySelectorAll('th,td')).map(text));
      if (rows.length === 0) continue;
      if (rows.every((r) => r.length === 2)) for (const [k, v] of rows) if (!(k in pairs)) pairs[k] = v;
      const head = table.querySelector('thead tr') ?? table.querySelector('tr');
      const isHeader = head && head.querySelectorAll('th').length > 0;
      if (isHeader) {
        const names = Array.from(head.querySelectorAll('th,td')).map(text);
        for (const r of rows.slice(1)) names.forEach((n, i) => (columns[n] ??= []).push(r[i] ?? ''));
      }
    }
    const headings: Record<string, string[]> = {};
    for (const h of Array.from(document.querySelectorAll('h1,h2,h3'))) (headings[h.tagName.toLowerCase()] ??= []).push(text(h));
    return { title: document.title, jsonLd, microdata, meta, pairs, columns, headings };
  });
}

const norm = (s: string) => s.toLowerCase().replace(/[\s_\-:]/g, '');

function findIn(v: unknown, key: string, depth = 0): unknown {
  if (depth > 8 || v === null || typeof v !== 'object') return undefined;
  if (Array.isArray(v)) {
    for (const x of v) {
      const f = findIn(x, key, depth + 1);
      if (f !== undefined) return f;
    }
    return undefined;
  }
  for (const [k, x] of Object.entries(v)) if (norm(k) === key) return x;
  for (const x of Object.values(v)) {
    const f = findIn(x, key, depth + 1);
    if (f !== undefined) return f;
  }
  return undefined;
}

function lookup<T>(rec: Record<string, T>, key: string): T | undefined {
  for (const [k, v] of Object.entries(rec)) if (norm(k) === key) return v;
  return undefined;
}

function raw(data: PageData, field: string, type: string): unknown {
  const key = norm(field);
  const fromLd = findIn(data.jsonLd, key);
  if (fromLd !== undefined) return fromLd;
  const md = lookup(data.microdata, key);
  if (md) return type === 'array' ? md : md[0];
  for (const prefix of ['', 'og', 'twitter', 'article', 'product']) {
    const m = lookup(data.meta, prefix + key);
    if (m !== undefined) return m;
  }
  const pair = lookup(data.pairs, key);
  if (pair !== undefined) return pair;
  const col = lookup(data.columns, key);
  if (col) return type === 'array' ? col : col[0];
  if (key === 'title' || key === 'heading' || key === 'name' || key === 'headline') return data.headings.h1?.[0] ?? data.title;
  if (/^h[123]s?$/.test(key)) return data.headings[key.slice(0, 2)];
  return undefined;
}

/** Converts a found value to a type name: string, number, integer, boolean, array, object. */
export function coerce(v: unknown, type: string): unknown {
  if (v === undefined || v === null) return null;
  switch (type.toLowerCase()) {
    case 'string':
      if (typeof v === 'object') {
        const o = v as Record<string, unknown>;
        if (typeof o.name === 'string') return o.name;
        if (typeof o['@value'] === 'string') return o['@value'];
        return JSON.stringify(v);
      }
      return String(v);
    case 'number':
    case 'float':
    case 'integer':
    case 'int': {
      const src = typeof v === 'object' && v !== null && 'value' in v ? (v as { value: unknown }).value : v;
      const n = typeof src === 'number' ? src : Number(String(src).replace(/[^0-9.eE+-]/g, ''));
      if (!Number.isFinite(n) || String(src).trim() === '') return null;
      return type.startsWith('int') ? Math.round(n) : n;
    }
    case 'boolean':
    case 'bool':
      if (typeof v === 'boolean') return v;
      return /^(true|yes|1|instock|https?:\/\/schema\.org\/instock)$/i.test(String(v).trim());
    case 'array':
      return Array.isArray(v) ? v : [v];
    default:
      return v;
  }
}

/** Fields and their type names from the spec's `schema` or a JSON Schema (`response_format`). */
export function fieldsOf(schema: Record<string, unknown> | undefined, jsonSchema: Record<string, unknown> | undefined): Record<string, string> | undefined {
  if (schema) return Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, String(v)]));
  if (!jsonSchema) return undefined;
  const inner = (jsonSchema.schema as Record<string, unknown> | undefined) ?? jsonSchema;
  const props = inner.properties as Record<string, { type?: unknown }> | undefined;
  if (!props || typeof props !== 'object') return undefined;
  return Object.fromEntries(Object.entries(props).map(([k, v]) => [k, typeof v?.type === 'string' ? v.type : Array.isArray(v?.type) ? String(v.type[0]) : 'string']));
}

export function extract(data: PageData, fields: Record<string, string>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, type] of Object.entries(fields)) out[name] = coerce(raw(data, name, type), type);
  return out;
}
