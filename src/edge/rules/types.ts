/**
 * Types and runtime values of the rules language.
 *
 * The engine's types are Bool, Int (i64), Bytes, Ip, Array<T> and Map<T> (the product docs call them
 * Boolean, Integer, String, IP address, Array and Map). At run time:
 *   - Bool   → `boolean`
 *   - Int    → `number` (integers; values beyond ±2^53 lose precision)
 *   - Bytes  → a *binary string*: one JavaScript character per byte (char codes 0–255). Node hands
 *              request lines and header values over in exactly this form (latin1), so no copy is made
 *              on the hot path; text from elsewhere is UTF-8 encoded first (`textToBytes`).
 *   - Ip     → `IpAddr` (IPv4 as an unsigned 32-bit number, IPv6 as a bigint)
 *   - Array  → JavaScript array; Map → `Map<string, T>` with binary-string keys
 * A *missing* value (absent map key, out-of-range index, failed lookup) is `undefined`.
 */

export type Type =
  | { readonly kind: 'Bool' }
  | { readonly kind: 'Int' }
  | { readonly kind: 'Bytes' }
  | { readonly kind: 'Ip' }
  | { readonly kind: 'Array'; readonly of: Type }
  | { readonly kind: 'Map'; readonly of: Type };

export const BOOL: Type = Object.freeze({ kind: 'Bool' });
export const INT: Type = Object.freeze({ kind: 'Int' });
export const BYTES: Type = Object.freeze({ kind: 'Bytes' });
export const IP: Type = Object.freeze({ kind: 'Ip' });
export const arrayOf = (of: Type): Type => ({ kind: 'Array', of });
export const mapOf = (of: Type): Type => ({ kind: 'Map', of });

export function typeEquals(a: Type, b: Type): boolean {
  if (a.kind !== b.kind) return false;
  if (a.kind === 'Array' || a.kind === 'Map') return typeEquals(a.of, (b as typeof a).of);
  return true;
}

/** Engine spelling: `Bool`, `Array<Bytes>`, `Map<Array<Bytes>>`. */
export function typeName(t: Type): string {
  return t.kind === 'Array' || t.kind === 'Map' ? `${t.kind}<${typeName(t.of)}>` : t.kind;
}

/** Documentation spelling: `Boolean`, `String`, `Array<String>`, `IP address`. */
export function displayType(t: Type): string {
  switch (t.kind) {
    case 'Bool':
      return 'Boolean';
    case 'Int':
      return 'Integer';
    case 'Bytes':
      return 'String';
    case 'Ip':
      return 'IP address';
    default:
      return `${t.kind}<${displayType(t.of)}>`;
  }
}

const SCALAR_NAMES: Record<string, Type> = {
  bool: BOOL,
  boolean: BOOL,
  int: INT,
  integer: INT,
  number: INT,
  bytes: BYTES,
  string: BYTES,
  ip: IP,
  'ip address': IP,
  ipaddr: IP,
};

/** Reads either spelling (`Map<Array<Bytes>>`, `Array<String>`, `IP address`, …). */
export function parseType(text: string): Type {
  const s = text.trim();
  const generic = /^(array|map)\s*<(.*)>$/i.exec(s);
  if (generic) {
    const inner = parseType(generic[2]);
    return generic[1].toLowerCase() === 'array' ? arrayOf(inner) : mapOf(inner);
  }
  const scalar = SCALAR_NAMES[s.toLowerCase()];
  if (!scalar) throw new Error(`unknown rules type "${text}"`);
  return scalar;
}

// ---------------------------------------------------------------------------------------------
// IP addresses

export type IpAddr = { readonly v: 4; readonly n: number } | { readonly v: 6; readonly n: bigint };

const V4_RE = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

export function parseIpv4(s: string): IpAddr | undefined {
  const m = V4_RE.exec(s);
  if (!m) return undefined;
  let n = 0;
  for (let i = 1; i <= 4; i++) {
    const part = m[i];
    if (part.length > 1 && part[0] === '0') return undefined;
    const b = Number(part);
    if (b > 255) return undefined;
    n = n * 256 + b;
  }
  return { v: 4, n };
}

export function parseIpv6(s: string): IpAddr | undefined {
  if (s.length < 2 || !/^[0-9a-fA-F:.]+$/.test(s)) return undefined;
  let text = s;
  const lastColon = text.lastIndexOf(':');
  if (lastColon < 0) return undefined;
  if (text.indexOf('.', lastColon) >= 0) {
    // An embedded IPv4 tail ("::ffff:192.0.2.1") becomes the last two 16-bit groups.
    const v4 = parseIpv4(text.slice(lastColon + 1));
    if (!v4) return undefined;
    const n = v4.n as number;
    text = `${text.slice(0, lastColon + 1)}${Math.floor(n / 65536).toString(16)}:${(n % 65536).toString(16)}`;
  }
  const dbl = text.indexOf('::');
  if (dbl >= 0 && text.indexOf('::', dbl + 1) >= 0) return undefined;
  const parseGroups = (part: string): number[] | undefined => {
    if (part === '') return [];
    const out: number[] = [];
    for (const g of part.split(':')) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
      out.push(parseInt(g, 16));
    }
    return out;
  };
  let groups: number[];
  if (dbl >= 0) {
    const head = parseGroups(text.slice(0, dbl));
    const rest = parseGroups(text.slice(dbl + 2));
    if (!head || !rest) return undefined;
    const fill = 8 - head.length - rest.length;
    if (fill < 1) return undefined;
    groups = [...head, ...new Array<number>(fill).fill(0), ...rest];
  } else {
    const all = parseGroups(text);
    if (!all || all.length !== 8) return undefined;
    groups = all;
  }
  let n = 0n;
  for (const g of groups) n = (n << 16n) | BigInt(g);
  return { v: 6, n };
}

export function parseIp(s: string): IpAddr | undefined {
  return s.includes(':') ? parseIpv6(s) : parseIpv4(s);
}

export function formatIp(ip: IpAddr): string {
  if (ip.v === 4) {
    const n = ip.n;
    return `${Math.floor(n / 16777216) % 256}.${Math.floor(n / 65536) % 256}.${Math.floor(n / 256) % 256}.${n % 256}`;
  }
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((ip.n >> BigInt(i * 16)) & 0xffffn));
  // RFC 5952: compress the longest run (≥ 2) of zero groups, the first one on ties.
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

export const IPV4_ZERO: IpAddr = Object.freeze({ v: 4, n: 0 }) as IpAddr;

/** -1 / 0 / 1, or `undefined` when the versions differ (incomparable). */
export function compareIp(a: IpAddr, b: IpAddr): number | undefined {
  if (a.v !== b.v) return undefined;
  return a.n < b.n ? -1 : a.n > b.n ? 1 : 0;
}

/** Keeps the first `bits` bits of the address (network address of the prefix). */
export function maskIp(ip: IpAddr, bits: number): IpAddr {
  if (ip.v === 4) {
    if (bits <= 0) return { v: 4, n: 0 };
    if (bits >= 32) return ip;
    const size = 2 ** (32 - bits);
    return { v: 4, n: ip.n - (ip.n % size) };
  }
  if (bits <= 0) return { v: 6, n: 0n };
  if (bits >= 128) return ip;
  const hostBits = BigInt(128 - bits);
  return { v: 6, n: (ip.n >> hostBits) << hostBits };
}

/** Inclusive [start, end] of a prefix. */
export function cidrBounds(ip: IpAddr, bits: number): [IpAddr, IpAddr] {
  const start = maskIp(ip, bits);
  if (start.v === 4) {
    const size = 2 ** (32 - Math.min(32, Math.max(0, bits)));
    return [start, { v: 4, n: start.n + size - 1 }];
  }
  const hostBits = BigInt(128 - Math.min(128, Math.max(0, bits)));
  return [start, { v: 6, n: start.n + (1n << hostBits) - 1n }];
}

// ---------------------------------------------------------------------------------------------
// Bytes (binary strings)

const NON_ASCII = /[^\x00-\x7f]/;
const ABOVE_LATIN1 = /[^\x00-\xff]/;

/** UTF-8 encodes JavaScript text into a binary string (no copy for ASCII). */
export function textToBytes(s: string): string {
  if (!NON_ASCII.test(s)) return s;
  return Buffer.from(s, 'utf8').toString('latin1');
}

/**
 * For values that arrive from the HTTP layer: Node already gives header values and the request
 * target as one char per byte; only strings with characters above U+00FF are genuine text.
 */
export function wireToBytes(s: string): string {
  return ABOVE_LATIN1.test(s) ? Buffer.from(s, 'utf8').toString('latin1') : s;
}

/** Decodes a binary string as UTF-8 (invalid sequences become U+FFFD). */
export function bytesToText(b: string): string {
  if (!NON_ASCII.test(b)) return b;
  return Buffer.from(b, 'latin1').toString('utf8');
}

export function bytesFromBuffer(buf: Uint8Array): string {
  return Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength).toString('latin1');
}

export function bytesToBuffer(b: string): Buffer {
  return Buffer.from(b, 'latin1');
}

const UPPER_RUN = /[A-Z]+/g;
const LOWER_RUN = /[a-z]+/g;
const HAS_UPPER = /[A-Z]/;
const HAS_LOWER = /[a-z]/;

/** ASCII-only lowercase: other bytes are unaffected (as the platform documents for `lower()`). */
export function asciiLower(s: string): string {
  return HAS_UPPER.test(s) ? s.replace(UPPER_RUN, (m) => m.toLowerCase()) : s;
}

export function asciiUpper(s: string): string {
  return HAS_LOWER.test(s) ? s.replace(LOWER_RUN, (m) => m.toUpperCase()) : s;
}

/** The default value of a type, used for fields a request context does not provide. */
export function defaultValue(t: Type): unknown {
  switch (t.kind) {
    case 'Bool':
      return false;
    case 'Int':
      return 0;
    case 'Bytes':
      return '';
    case 'Ip':
      return IPV4_ZERO;
    case 'Array':
      return EMPTY_ARRAY;
    case 'Map':
      return EMPTY_MAP;
  }
}

export const EMPTY_ARRAY: readonly unknown[] = Object.freeze([]);
export const EMPTY_MAP: ReadonlyMap<string, unknown> = new Map();

/**
 * Converts a host value (from `buildRequestContext` or `RequestContext.set`) into the runtime
 * representation of `t`. Strings for Bytes are treated as text (UTF-8 encoded) unless `wire` is set.
 */
export function coerceValue(t: Type, value: unknown, wire = false): unknown {
  if (value === undefined || value === null) return defaultValue(t);
  switch (t.kind) {
    case 'Bool':
      return value === true || value === 'true' || value === 1 || value === '1';
    case 'Int': {
      const n = typeof value === 'number' ? value : Number(value);
      return Number.isFinite(n) ? Math.trunc(n) : 0;
    }
    case 'Bytes':
      if (typeof value === 'string') return wire ? wireToBytes(value) : textToBytes(value);
      if (value instanceof Uint8Array) return bytesFromBuffer(value);
      return textToBytes(String(value));
    case 'Ip': {
      if (typeof value === 'object' && value !== null && 'v' in value) return value;
      const s = String(value).trim();
      const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(s);
      return parseIp(mapped ? mapped[1] : s) ?? IPV4_ZERO;
    }
    case 'Array': {
      const items = Array.isArray(value) ? value : [value];
      return items.map((v) => coerceValue(t.of, v, wire));
    }
    case 'Map': {
      const out = new Map<string, unknown>();
      const entries: Iterable<[unknown, unknown]> =
        value instanceof Map ? value.entries() : Object.entries(value as Record<string, unknown>);
      for (const [k, v] of entries) out.set(textToBytes(String(k)), coerceValue(t.of, v, wire));
      return out;
    }
  }
}
