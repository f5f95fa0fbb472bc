/**
 * DNS record list filters that have no indexed column: `comment[.exact|.contains|.startswith|
 * .endswith|.present|.absent]`, `tag[.exact|.contains|.startswith|.endswith|.present|.absent]`
 * (combined among themselves by `tag_match`) and `search` (any of name, content, comment and tags
 * contains the text). When a list uses one of them, every filter is evaluated here, in memory, with
 * the same rules as the SQL filters (exact comparisons are exact; contains/startswith/endswith
 * ignore case), and `match` combines the conditions.
 */
import type { Filter } from '../../core/storage/collection.ts';
import type { RecordField, StoredRecord } from './store.ts';

type Op = 'eq' | 'contains' | 'startswith' | 'endswith';
type Cond = (r: StoredRecord) => boolean;

export interface ExtraFilters {
  comment: [op: Op | 'present' | 'absent', value: string][];
  tag: [op: Op | 'present' | 'absent', value: string][];
  search?: string;
  tagMatch: 'any' | 'all';
}

const SUFFIXES: Record<string, Op | 'present' | 'absent'> = {
  '': 'eq',
  exact: 'eq',
  contains: 'contains',
  startswith: 'startswith',
  endswith: 'endswith',
  present: 'present',
  absent: 'absent',
};

export const COMMENT_KEYS = Object.keys(SUFFIXES).map((s) => (s ? `comment.${s}` : 'comment'));
export const TAG_KEYS = Object.keys(SUFFIXES).map((s) => (s ? `tag.${s}` : 'tag'));

/** Reads the extra filters from the parsed query (each key may repeat); undefined when none. */
export function extraFilters(q: Record<string, unknown>): ExtraFilters | undefined {
  const out: ExtraFilters = { comment: [], tag: [], tagMatch: q.tag_match === 'any' ? 'any' : 'all' };
  for (const [field, keys] of [['comment', COMMENT_KEYS], ['tag', TAG_KEYS]] as const) {
    for (const key of keys) {
      const raw = q[key];
      if (raw === undefined) continue;
      const op = SUFFIXES[key.slice(field.length + 1)];
      for (const v of Array.isArray(raw) ? raw : [raw]) out[field].push([op, String(v)]);
    }
  }
  if (typeof q.search === 'string' && q.search !== '') out.search = q.search;
  return out.comment.length || out.tag.length || out.search !== undefined ? out : undefined;
}

function test(op: Op, have: string, want: string): boolean {
  if (op === 'eq') return have === want;
  const h = have.toLowerCase();
  const w = want.toLowerCase();
  if (op === 'contains') return h.includes(w);
  if (op === 'startswith') return h.startsWith(w);
  return h.endsWith(w);
}

function splitTag(tag: string): [string, string] {
  const i = tag.indexOf(':');
  return i < 0 ? [tag, ''] : [tag.slice(0, i), tag.slice(i + 1)];
}

function commentCond(op: Op | 'present' | 'absent', value: string): Cond {
  if (op === 'present') return (r) => !!r.comment;
  if (op === 'absent') return (r) => !r.comment;
  return (r) => !!r.comment && test(op, r.comment, value);
}

/** `tag.present=name`, `tag.absent=name`; otherwise `name:value` compared on the tag's value. */
function tagCond(op: Op | 'present' | 'absent', value: string): Cond {
  const [name, want] = splitTag(value);
  const named = (r: StoredRecord) => (r.tags ?? []).map(splitTag).filter(([n]) => n === name);
  if (op === 'present') return (r) => named(r).length > 0;
  if (op === 'absent') return (r) => named(r).length === 0;
  return (r) => named(r).some(([, v]) => test(op, v, want));
}

function baseCond(f: Filter<RecordField>): Cond {
  const value = String(f.value);
  return (r) => {
    const have = String((r as unknown as Record<string, unknown>)[f.field] ?? '');
    return test(f.op as Op, have, value);
  };
}

function searchCond(text: string): Cond {
  const w = text.toLowerCase();
  return (r) =>
    [r.name, r.content, r.comment ?? '', ...(r.tags ?? [])].some((s) => String(s).toLowerCase().includes(w));
}

/** One predicate for the whole list query. */
export function recordPredicate(filters: Filter<RecordField>[], extra: ExtraFilters, match: 'any' | 'all' | undefined): Cond {
  const conds: Cond[] = filters.map(baseCond);
  conds.push(...extra.comment.map(([op, v]) => commentCond(op, v)));
  if (extra.tag.length) {
    const tags = extra.tag.map(([op, v]) => tagCond(op, v));
    conds.push(extra.tagMatch === 'any' ? (r) => tags.some((c) => c(r)) : (r) => tags.every((c) => c(r)));
  }
  if (extra.search !== undefined) conds.push(searchCond(extra.search));
  return match === 'any' ? (r) => conds.some((c) => c(r)) : (r) => conds.every((c) => c(r));
}
