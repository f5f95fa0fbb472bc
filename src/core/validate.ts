/**
 * Request validation: zod schemas for bodies and queries, and the query-string reader that turns
 * `?account.id=x&type=A&type=AAAA&proxied=false` into `{ 'account.id': 'x', type: ['A','AAAA'],
 * proxied: 'false' }` (schemas coerce with `qBool`/`qInt`, never with `z.coerce`, which would make
 * "false" true). Every failure becomes a 400 envelope with one error per issue, path-prefixed.
 */
import { z, type ZodType } from 'zod';
import { ApiError, CODES } from './errors.ts';

export type Query = Record<string, string | string[]>;

export function parseQuery(search: string): Query {
  const out: Query = {};
  for (const [key, value] of new URLSearchParams(search)) {
    // `type[]=A` and `type=A` are the same field.
    const k = key.endsWith('[]') ? key.slice(0, -2) : key;
    const prev = out[k];
    if (prev === undefined) out[k] = value;
    else out[k] = Array.isArray(prev) ? [...prev, value] : [prev, value];
  }
  return out;
}

const first = (v: unknown) => (Array.isArray(v) ? v[v.length - 1] : v);

/** A boolean query parameter: "true"/"1" → true, "false"/"0" → false. */
export function qBool() {
  return z.preprocess((v) => {
    const s = first(v);
    if (s === 'true' || s === '1' || s === true) return true;
    if (s === 'false' || s === '0' || s === false) return false;
    return s;
  }, z.boolean());
}

/** An integer query parameter validated by `inner`. */
export function qInt<T extends ZodType>(inner: T) {
  return z.preprocess((v) => {
    const s = first(v);
    if (typeof s === 'string' && /^-?\d+$/.test(s.trim())) return Number(s);
    return s;
  }, inner);
}

/** A single string query parameter (the last one wins if repeated). */
export function qString(): z.ZodPipe<z.ZodTransform<unknown, unknown>, z.ZodString>;
export function qString<T extends ZodType>(inner: T): z.ZodPipe<z.ZodTransform<unknown, unknown>, T>;
export function qString(inner?: ZodType): unknown {
  return z.preprocess(first, inner ?? z.string());
}

/** A list query parameter: repeated keys or one comma-separated value. */
export function qList<T extends ZodType>(item: T) {
  return z.preprocess(
    (v) => (Array.isArray(v) ? v : typeof v === 'string' ? v.split(',').filter(Boolean) : v),
    z.array(item),
  );
}

export function validationError(error: z.ZodError, where: 'body' | 'query'): ApiError {
  const items = error.issues.slice(0, 20).map((issue) => {
    const path = issue.path.map(String).join('.');
    const message = path ? `${path}: ${issue.message}` : `${where}: ${issue.message}`;
    return { code: CODES.validation.code, message };
  });
  return new ApiError(CODES.validation.status, items);
}

export function validate<T>(schema: ZodType<T>, input: unknown, where: 'body' | 'query'): T {
  const parsed = schema.safeParse(input);
  if (!parsed.success) throw validationError(parsed.error, where);
  return parsed.data;
}
