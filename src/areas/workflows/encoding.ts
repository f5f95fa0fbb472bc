/**
 * The Node side of the wrapper's value encoding: JSON with tagged objects `{$t, v}` for values
 * JSON cannot carry. REST callers send plain JSON (only objects that happen to have a `$t` key need
 * escaping); REST views show the plain JSON form (dates as ISO text, maps as entry lists, binary
 * as base64, undefined as null).
 */

type Slot = [into: Record<string | number, unknown>, key: string | number, value: unknown];

/** Sets a property, `__proto__` included, as an own data property. */
function put(into: Record<string | number, unknown>, key: string | number, value: unknown): void {
  if (key === '__proto__') {
    Object.defineProperty(into, key, { value, writable: true, enumerable: true, configurable: true });
  } else into[key] = value;
}

/** A fresh object with the keys of `src` in their order (values filled in later). */
function shell(src: object, stack: Slot[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(src)) {
    put(out, k, null);
    stack.push([out, k, x]);
  }
  return out;
}

/**
 * Encodes a plain JSON value (from a REST body) in the tagged form. Iterative (an explicit stack),
 * so the depth of a value never exhausts the call stack.
 */
export function fromPlain(v: unknown): unknown {
  const root: Record<string, unknown> = {};
  const stack: Slot[] = [[root, 'v', v]];
  for (let slot = stack.pop(); slot; slot = stack.pop()) {
    const [into, key, x] = slot;
    if (x === null || typeof x !== 'object') {
      put(into, key, x);
    } else if (Array.isArray(x)) {
      const arr: unknown[] = new Array<unknown>(x.length).fill(null);
      put(into, key, arr);
      for (let i = 0; i < x.length; i++) stack.push([arr as unknown as Record<number, unknown>, i, x[i]]);
    } else {
      const out = shell(x, stack);
      put(into, key, Object.prototype.hasOwnProperty.call(x, '$t') ? { $t: 'o', v: out } : out);
    }
  }
  return root.v;
}

/** The plain JSON view of an encoded value. Iterative, like `fromPlain`. */
export function toPlain(v: unknown): unknown {
  const root: Record<string, unknown> = {};
  const stack: Slot[] = [[root, 'v', v]];
  const list = (items: unknown[]): unknown[] => {
    const arr: unknown[] = new Array<unknown>(items.length).fill(null);
    for (let i = 0; i < items.length; i++) stack.push([arr as unknown as Record<number, unknown>, i, items[i]]);
    return arr;
  };
  for (let slot = stack.pop(); slot; slot = stack.pop()) {
    const [into, key, x] = slot;
    if (x === null || typeof x !== 'object') {
      put(into, key, x);
      continue;
    }
    if (Array.isArray(x)) {
      put(into, key, list(x));
      continue;
    }
    const t = x as { $t?: string; v?: unknown };
    switch (t.$t) {
      case undefined:
        put(into, key, shell(x, stack));
        break;
      case 'u':
        put(into, key, null);
        break;
      case 'n':
      case 'b':
        put(into, key, String(t.v));
        break;
      case 'd':
        put(into, key, t.v === null ? null : new Date(t.v as number).toISOString());
        break;
      case 'r': {
        const [source, flags] = t.v as [string, string];
        put(into, key, `/${source}/${flags}`);
        break;
      }
      case 'm': {
        // Each entry [k, v] becomes a two-element list of plain values.
        const entries = t.v as [unknown, unknown][];
        const pairs = entries.map(([k, e]) => {
          const pair: unknown[] = [null, null];
          stack.push([pair as unknown as Record<number, unknown>, 0, k], [pair as unknown as Record<number, unknown>, 1, e]);
          return pair;
        });
        put(into, key, pairs);
        break;
      }
      case 's':
        put(into, key, list(t.v as unknown[]));
        break;
      case 'ab':
      case 'ta':
      case 'e':
        put(into, key, t.v);
        break;
      case 'o':
        stack.push([into, key, t.v]);
        break;
      default:
        put(into, key, x);
    }
  }
  return root.v;
}

export function byteLength(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}
