/**
 * Event validation: a batch is a JSON array of objects; on a stream with a schema every event
 * must carry its required fields with values of the declared types (the first mismatch is named,
 * with the event's index). Fields the schema does not name are kept as they are.
 */
import type { Field, StoredStream } from './schemas.ts';
import { RFC3339 } from './sql.ts';

export class EventError extends Error {}

const INT32 = [-2147483648, 2147483647];

/** Checks one value against a field; returns the problem or undefined. */
function checkValue(f: Field, v: unknown, path: string): string | undefined {
  const got = v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v;
  const bad = (want: string) => `field ${path} must be ${want}, got ${got}${typeof v === 'number' || typeof v === 'string' ? ` ${JSON.stringify(v).slice(0, 40)}` : ''}`;
  switch (f.type) {
    case 'string':
      return typeof v === 'string' ? undefined : bad('a string');
    case 'int32':
      return typeof v === 'number' && Number.isInteger(v) && v >= INT32[0] && v <= INT32[1] ? undefined : bad('an int32');
    case 'int64':
      return typeof v === 'number' && Number.isSafeInteger(v) ? undefined : bad('an int64');
    case 'float32':
    case 'float64':
      return typeof v === 'number' && Number.isFinite(v) ? undefined : bad(`a ${f.type} number`);
    case 'bool':
      return typeof v === 'boolean' ? undefined : bad('a boolean');
    case 'timestamp':
      if (typeof v === 'number' && Number.isFinite(v)) return undefined;
      if (typeof v === 'string' && RFC3339.test(v) && !Number.isNaN(Date.parse(v))) return undefined;
      return bad('a timestamp (RFC 3339 text or milliseconds since the epoch)');
    case 'binary':
      return typeof v === 'string' && /^[A-Za-z0-9+/]*={0,2}$/.test(v) ? undefined : bad('base64 text (binary)');
    case 'json':
      return undefined;
    case 'list':
      return Array.isArray(v) ? undefined : bad('a list (array)');
    case 'struct': {
      if (v === null || typeof v !== 'object' || Array.isArray(v)) return bad('a struct (object)');
      return checkObject(f.fields ?? [], v as Record<string, unknown>, `${path}.`);
    }
  }
}

function checkObject(fields: Field[], obj: Record<string, unknown>, prefix: string): string | undefined {
  for (const f of fields) {
    const v = obj[f.name];
    if (v === undefined || v === null) {
      if (f.required) return `field ${prefix}${f.name} is required`;
      continue;
    }
    const p = checkValue(f, v, prefix + f.name);
    if (p) return p;
  }
  return undefined;
}

/**
 * Validates a parsed batch for a stream; throws EventError naming the first problem (`event 3:`,
 * or `row 3:` for the rows of a Parquet body). Returns the events.
 */
export function validateBatch(stream: StoredStream, batch: unknown, opts: { allowSingle: boolean; what?: 'event' | 'row' }): unknown[] {
  const what = opts.what ?? 'event';
  let events: unknown[];
  if (Array.isArray(batch)) events = batch;
  else if (opts.allowSingle && batch !== null && typeof batch === 'object') events = [batch];
  else if (batch !== null && typeof batch === 'object')
    throw new EventError('The body must be a JSON array of event objects; a single object is not accepted (wrap it in [ ])');
  else throw new EventError('The body must be a JSON array of event objects');
  const fields = stream.schema?.fields;
  for (let i = 0; i < events.length; i++) {
    const ev = events[i];
    if (ev === null || typeof ev !== 'object' || Array.isArray(ev)) throw new EventError(`${what} ${i}: each event must be a JSON object`);
    if (fields && fields.length > 0) {
      const p = checkObject(fields, ev as Record<string, unknown>, '');
      if (p) throw new EventError(`${what} ${i}: ${p}`);
    }
  }
  return events;
}
