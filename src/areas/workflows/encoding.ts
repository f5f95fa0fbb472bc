/**
 * The Node side of the wrapper's value encoding: JSON with tagged objects `{$t, v}` for values
 * JSON cannot carry. REST callers send plain JSON (only objects that happen to have a `$t` key need
 * escaping); REST views show the plain JSON form (dates as ISO text, maps as entry lists, binary
 * as base64, undefined as null).
 */

/** Encodes a plain JSON value (from a REST body) in the tagged form. */
export function fromPlain(v: unknown): unknown {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(fromPlain);
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) out[k] = fromPlain(x);
  return Object.prototype.hasOwnProperty.call(out, '$t') ? { $t: 'o', v: out } : out;
}

/** The plain JSON view of an encoded value. */
export function toPlain(v: unknown): unknown {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(toPlain);
  const t = v as { $t?: string; v?: unknown; k?: string };
  switch (t.$t) {
    case undefined: {
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) out[k] = toPlain(x);
      return out;
    }
    case 'u':
      return null;
    case 'n':
      return String(t.v);
    case 'b':
      return String(t.v);
    case 'd':
      return t.v === null ? null : new Date(t.v as number).toISOString();
    case 'r': {
      const [source, flags] = t.v as [string, string];
      return `/${source}/${flags}`;
    }
    case 'm':
      return (t.v as [unknown, unknown][]).map(([k, x]) => [toPlain(k), toPlain(x)]);
    case 's':
      return (t.v as unknown[]).map(toPlain);
    case 'ab':
    case 'ta':
      return t.v;
    case 'e':
      return t.v;
    case 'o':
      return toPlain(t.v);
    default:
      return v;
  }
}

export function byteLength(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}
