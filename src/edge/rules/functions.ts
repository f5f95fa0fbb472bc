/**
 * Functions of the rules language. Each definition checks its arguments at parse time (count,
 * types, and which ones must be literals) and returns the implementation the compiler calls.
 *
 * Semantics follow the platform's function reference: a *missing* argument (absent map key,
 * out-of-range index) makes most functions return a missing value, which every comparison treats
 * as false. When the first argument uses `[*]`, the parser maps the function over the elements and
 * drops missing results (an `Array` of results comes back).
 *
 * `bit_slice(protocol, start, end)` with a literal protocol name (`"ip"`, `"tcp"`, `"udp"`, …) reads
 * the packet header bytes a packet-level caller put in the context input as
 * `fields["packet.<protocol>"]`; with any other String argument it slices that value's bits.
 *
 * Deliberate leniencies: arguments the platform requires to be fields (e.g. the source of
 * `url_decode()`) may also be literals, so documentation examples like `url_decode("John%20Doe")`
 * evaluate; the per-phase availability of functions (e.g. `regex_replace()` only in rewrite
 * expressions) is left to the caller.
 */

import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { RequestContext } from './context.ts';
import { RegexError, compileRegex } from './regex.ts';
import { getJwtValidator, type FieldDef } from './scheme.ts';
import {
  BOOL,
  BYTES,
  INT,
  IP,
  arrayOf,
  asciiLower,
  asciiUpper,
  bytesToBuffer,
  bytesToText,
  compareIp,
  displayType,
  formatIp,
  maskIp,
  textToBytes,
  typeEquals,
  type IpAddr,
  type Type,
} from './types.ts';
import { WildcardError, compileWildcard, wildcardReplace } from './wildcard.ts';

export interface ArgInfo {
  /** Type of the argument (the element type when the first argument is mapped with `[*]`). */
  readonly type: Type;
  /** True for literal arguments (`"text"`, `42`, `10.0.0.1`). */
  readonly literal: boolean;
  /** The runtime value of a literal argument. */
  readonly value?: unknown;
  /** Set when the argument is `field` or `field["key"]…` (used by `is_jwt_valid`). */
  readonly field?: FieldDef;
  readonly mapKey?: string;
}

export interface FunctionImpl {
  readonly returns: Type;
  readonly impl: (args: unknown[], ctx: RequestContext) => unknown;
}

export type ArgFail = (argIndex: number, message: string) => never;

export interface FunctionDef {
  readonly name: string;
  readonly minArgs: number;
  readonly maxArgs: number;
  resolve(args: readonly ArgInfo[], fail: ArgFail): FunctionImpl;
}

const registry = new Map<string, FunctionDef>();

export function lookupFunction(name: string): FunctionDef | undefined {
  return registry.get(name);
}

export function listFunctions(): string[] {
  return [...registry.keys()].sort();
}

/** Adds (or replaces) a function; later areas may register product-specific ones. */
export function registerFunction(def: FunctionDef): void {
  registry.set(def.name, def);
}

// ---------------------------------------------------------------------------------------------
// argument checking helpers

type Kind = 'Bool' | 'Int' | 'Bytes' | 'Ip' | 'Array' | 'Map';

function expect(
  fn: string,
  args: readonly ArgInfo[],
  i: number,
  fail: ArgFail,
  kinds: Kind[],
  opts: { literal?: boolean; describe?: string } = {},
): ArgInfo {
  const a = args[i];
  const describe =
    opts.describe ??
    kinds
      .map((k) => displayType({ kind: k, of: BYTES } as Type).replace('<String>', ''))
      .join(' or ');
  if (!kinds.includes(a.type.kind as Kind)) {
    fail(i, `${fn}() argument ${i + 1} must be ${describe}, found ${displayType(a.type)}`);
  }
  if (opts.literal && !a.literal) fail(i, `${fn}() argument ${i + 1} must be a literal value`);
  return a;
}

function literalInt(
  fn: string,
  args: readonly ArgInfo[],
  i: number,
  fail: ArgFail,
  min: number,
  max: number,
): number {
  const a = expect(fn, args, i, fail, ['Int'], { literal: true });
  const v = a.value as number;
  if (v < min || v > max) fail(i, `${fn}() argument ${i + 1} must be between ${min} and ${max}`);
  return v;
}

function def(
  name: string,
  minArgs: number,
  maxArgs: number,
  resolve: (args: readonly ArgInfo[], fail: ArgFail) => FunctionImpl,
): void {
  registerFunction({ name, minArgs, maxArgs, resolve });
}

const str = (v: unknown): v is string => typeof v === 'string';

// ---------------------------------------------------------------------------------------------
// any / all / coalesce / concat / len

def('any', 1, 1, (args, fail) => {
  const a = args[0];
  if (a.type.kind !== 'Array' || a.type.of.kind !== 'Bool') {
    fail(
      0,
      `any() expects Array<Boolean> (e.g. any(field[*] == "x")), found ${displayType(a.type)}`,
    );
  }
  return {
    returns: BOOL,
    impl: ([v]) => (v === undefined ? undefined : (v as boolean[]).some((b) => b)),
  };
});

def('all', 1, 1, (args, fail) => {
  const a = args[0];
  if (a.type.kind !== 'Array' || a.type.of.kind !== 'Bool') {
    fail(
      0,
      `all() expects Array<Boolean> (e.g. all(field[*] == "x")), found ${displayType(a.type)}`,
    );
  }
  return {
    returns: BOOL,
    impl: ([v]) => (v === undefined ? undefined : (v as boolean[]).every((b) => b)),
  };
});

def('coalesce', 1, Infinity, (args, fail) => {
  const t = args[0].type;
  args.forEach((a, i) => {
    if (!typeEquals(a.type, t))
      fail(i, `coalesce() arguments must all be ${displayType(t)}, found ${displayType(a.type)}`);
  });
  return { returns: t, impl: (vals) => vals.find((v) => v !== undefined) };
});

def('concat', 1, Infinity, (args, fail) => {
  const first = args[0].type;
  if (first.kind !== 'Bytes' && first.kind !== 'Array') {
    fail(0, `concat() takes String or Array arguments, found ${displayType(first)}`);
  }
  args.forEach((a, i) => {
    if (!typeEquals(a.type, first)) {
      fail(
        i,
        `concat() arguments must all have the same type (${displayType(first)}), found ${displayType(a.type)}`,
      );
    }
  });
  if (first.kind === 'Bytes') {
    return {
      returns: BYTES,
      impl: (vals) => {
        let out = '';
        let any = false;
        for (const v of vals) {
          if (v === undefined) continue;
          any = true;
          out += v as string;
        }
        return any ? out : undefined;
      },
    };
  }
  return {
    returns: first,
    impl: (vals) => {
      const out: unknown[] = [];
      let any = false;
      for (const v of vals) {
        if (v === undefined) continue;
        any = true;
        for (const x of v as unknown[]) out.push(x);
      }
      return any ? out : undefined;
    },
  };
});

def('len', 1, 1, (args, fail) => {
  expect('len', args, 0, fail, ['Bytes', 'Array', 'Map'], {
    describe: 'String, Bytes, Array or Map',
  });
  return {
    returns: INT,
    impl: ([v]) =>
      v === undefined ? undefined : v instanceof Map ? v.size : (v as string | unknown[]).length,
  };
});

// ---------------------------------------------------------------------------------------------
// strings

def('lower', 1, 1, (args, fail) => {
  expect('lower', args, 0, fail, ['Bytes']);
  return { returns: BYTES, impl: ([v]) => (str(v) ? asciiLower(v) : undefined) };
});

def('upper', 1, 1, (args, fail) => {
  expect('upper', args, 0, fail, ['Bytes']);
  return { returns: BYTES, impl: ([v]) => (str(v) ? asciiUpper(v) : undefined) };
});

def('starts_with', 2, 2, (args, fail) => {
  expect('starts_with', args, 0, fail, ['Bytes']);
  expect('starts_with', args, 1, fail, ['Bytes']);
  return { returns: BOOL, impl: ([a, b]) => (str(a) && str(b) ? a.startsWith(b) : undefined) };
});

def('ends_with', 2, 2, (args, fail) => {
  expect('ends_with', args, 0, fail, ['Bytes']);
  expect('ends_with', args, 1, fail, ['Bytes']);
  return { returns: BOOL, impl: ([a, b]) => (str(a) && str(b) ? a.endsWith(b) : undefined) };
});

def('substring', 2, 3, (args, fail) => {
  expect('substring', args, 0, fail, ['Bytes']);
  expect('substring', args, 1, fail, ['Int']);
  if (args.length > 2) expect('substring', args, 2, fail, ['Int']);
  return {
    returns: BYTES,
    impl: ([v, s, e]) => {
      if (!str(v) || s === undefined) return undefined;
      const n = v.length;
      const norm = (i: number) => (i < 0 ? Math.max(0, n + i) : Math.min(n, i));
      const from = norm(s as number);
      const to = e === undefined ? n : norm(e as number);
      return to > from ? v.slice(from, to) : '';
    },
  };
});

def('remove_bytes', 2, 2, (args, fail) => {
  expect('remove_bytes', args, 0, fail, ['Bytes']);
  expect('remove_bytes', args, 1, fail, ['Bytes']);
  return {
    returns: BYTES,
    impl: ([v, set]) => {
      if (!str(v) || !str(set)) return undefined;
      if (set === '') return v;
      let out = '';
      for (let i = 0; i < v.length; i++) if (set.indexOf(v[i]) < 0) out += v[i];
      return out;
    },
  };
});

def('join', 2, 2, (args, fail) => {
  const a = args[0];
  if (a.type.kind !== 'Array' || a.type.of.kind !== 'Bytes') {
    fail(0, `join() argument 1 must be Array<String>, found ${displayType(a.type)}`);
  }
  expect('join', args, 1, fail, ['Bytes']);
  return {
    returns: BYTES,
    impl: ([items, sep]) =>
      items === undefined || !str(sep) ? undefined : (items as string[]).join(sep),
  };
});

def('split', 3, 3, (args, fail) => {
  expect('split', args, 0, fail, ['Bytes']);
  const sep = expect('split', args, 1, fail, ['Bytes'], { literal: true }).value as string;
  if (sep === '') fail(1, 'split() separator must be a non-empty string');
  const limit = literalInt('split', args, 2, fail, 1, 128);
  return {
    returns: arrayOf(BYTES),
    impl: ([v]) => {
      if (!str(v)) return undefined;
      const parts: string[] = [];
      let from = 0;
      while (parts.length < limit - 1) {
        const at = v.indexOf(sep, from);
        if (at < 0) break;
        parts.push(v.slice(from, at));
        from = at + sep.length;
      }
      parts.push(v.slice(from));
      return parts;
    },
  };
});

def('to_string', 1, 1, (args, fail) => {
  expect('to_string', args, 0, fail, ['Int', 'Bool', 'Ip'], {
    describe: 'Integer, Boolean or IP address',
  });
  return {
    returns: BYTES,
    impl: ([v]) => {
      if (v === undefined) return undefined;
      if (typeof v === 'object') return formatIp(v as IpAddr);
      return String(v);
    },
  };
});

def('sha256', 1, 1, (args, fail) => {
  expect('sha256', args, 0, fail, ['Bytes']);
  return {
    returns: BYTES,
    impl: ([v]) =>
      str(v)
        ? createHash('sha256').update(bytesToBuffer(v)).digest().toString('latin1')
        : undefined,
  };
});

// ---------------------------------------------------------------------------------------------
// encodings

def('url_decode', 1, 2, (args, fail) => {
  expect('url_decode', args, 0, fail, ['Bytes']);
  const opts =
    args.length > 1
      ? (expect('url_decode', args, 1, fail, ['Bytes'], { literal: true }).value as string)
      : '';
  const recursive = opts.includes('r');
  const unicode = opts.includes('u');
  return {
    returns: BYTES,
    impl: ([v]) => {
      if (!str(v)) return undefined;
      let current = v;
      let next = urlDecodeOnce(current, unicode);
      if (!recursive) return next;
      for (let i = 0; i < 10 && next !== current; i++) {
        current = next;
        next = urlDecodeOnce(current, unicode);
      }
      return current;
    },
  };
});

function urlDecodeOnce(s: string, unicode: boolean): string {
  if (s.indexOf('%') < 0 && s.indexOf('+') < 0) return s;
  let out = '';
  for (let i = 0; i < s.length;) {
    const c = s[i];
    if (c === '+') {
      out += ' ';
      i++;
    } else if (c === '%') {
      if (
        unicode &&
        (s[i + 1] === 'u' || s[i + 1] === 'U') &&
        /^[0-9a-fA-F]{4}$/.test(s.slice(i + 2, i + 6))
      ) {
        const cp = parseInt(s.slice(i + 2, i + 6), 16);
        if (cp < 0xd800 || cp > 0xdfff) {
          out += textToBytes(String.fromCodePoint(cp));
          i += 6;
          continue;
        }
      }
      const hex = s.slice(i + 1, i + 3);
      if (/^[0-9a-fA-F]{2}$/.test(hex)) {
        out += String.fromCharCode(parseInt(hex, 16));
        i += 3;
      } else {
        out += '%';
        i++;
      }
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

def('encode_base64', 1, 2, (args, fail) => {
  expect('encode_base64', args, 0, fail, ['Bytes']);
  const flags =
    args.length > 1
      ? (expect('encode_base64', args, 1, fail, ['Bytes'], { literal: true }).value as string)
      : '';
  const urlSafe = flags.includes('u');
  const pad = !urlSafe || flags.includes('p');
  return {
    returns: BYTES,
    impl: ([v]) => {
      if (!str(v)) return undefined;
      let out = bytesToBuffer(v).toString(urlSafe ? 'base64url' : 'base64');
      if (urlSafe && pad) while (out.length % 4) out += '=';
      return out;
    },
  };
});

const BASE64_STD = /^[A-Za-z0-9+/]*={0,2}$/;
const BASE64_URL = /^[A-Za-z0-9_-]*={0,2}$/;

def('decode_base64', 1, 1, (args, fail) => {
  expect('decode_base64', args, 0, fail, ['Bytes']);
  return {
    returns: BYTES,
    impl: ([v]) => {
      if (!str(v)) return undefined;
      const s = v.trim();
      const std = BASE64_STD.test(s);
      if ((!std && !BASE64_URL.test(s)) || s.replace(/=+$/, '').length % 4 === 1) return undefined;
      return Buffer.from(s, std ? 'base64' : 'base64url').toString('latin1');
    },
  };
});

def('uuidv4', 1, 1, (args, fail) => {
  expect('uuidv4', args, 0, fail, ['Bytes']);
  return {
    returns: BYTES,
    impl: ([v]) => {
      if (!str(v)) return undefined;
      const src = bytesToBuffer(v);
      const b = Buffer.alloc(16);
      if (src.length >= 16) src.copy(b, 0, 0, 16);
      else createHash('sha256').update(src).digest().copy(b, 0, 0, 16);
      b[6] = (b[6] & 0x0f) | 0x40;
      b[8] = (b[8] & 0x3f) | 0x80;
      const h = b.toString('hex');
      return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
    },
  };
});

// ---------------------------------------------------------------------------------------------
// JSON

const jsonCache = { text: '', parsed: undefined as unknown, ok: false };

function parseJsonCached(bytes: string): { ok: boolean; value: unknown } {
  if (jsonCache.text === bytes && jsonCache.parsed !== undefined) {
    return { ok: jsonCache.ok, value: jsonCache.parsed };
  }
  let ok = true;
  let value: unknown = null;
  try {
    value = JSON.parse(bytesToText(bytes));
  } catch {
    ok = false;
  }
  jsonCache.text = bytes;
  jsonCache.parsed = value ?? null;
  jsonCache.ok = ok;
  return { ok, value };
}

function lookupJson(doc: unknown, keys: unknown[]): unknown {
  let cur = doc;
  for (const k of keys) {
    if (k === undefined || cur === null || typeof cur !== 'object') return undefined;
    if (typeof k === 'number') {
      if (!Array.isArray(cur) || k < 0 || k >= cur.length) return undefined;
      cur = cur[k];
    } else {
      if (Array.isArray(cur)) return undefined;
      const key = bytesToText(k as string);
      if (!Object.prototype.hasOwnProperty.call(cur, key)) return undefined;
      cur = (cur as Record<string, unknown>)[key];
    }
  }
  return cur;
}

function jsonLookupDef(name: string, returns: Type, pick: (v: unknown) => unknown): void {
  def(name, 2, Infinity, (args, fail) => {
    expect(name, args, 0, fail, ['Bytes']);
    for (let i = 1; i < args.length; i++) {
      expect(name, args, i, fail, ['Bytes', 'Int'], { describe: 'a String or Integer key' });
    }
    return {
      returns,
      impl: (vals) => {
        const src = vals[0];
        if (!str(src)) return undefined;
        const { ok, value } = parseJsonCached(src);
        if (!ok) return undefined;
        return pick(lookupJson(value, vals.slice(1)));
      },
    };
  });
}

jsonLookupDef('lookup_json_string', BYTES, (v) =>
  typeof v === 'string' ? textToBytes(v) : undefined,
);
jsonLookupDef('lookup_json_integer', INT, (v) =>
  typeof v === 'number' && Number.isInteger(v) ? v : undefined,
);

// ---------------------------------------------------------------------------------------------
// query strings, replacement

def('remove_query_args', 2, Infinity, (args, fail) => {
  expect('remove_query_args', args, 0, fail, ['Bytes']);
  const names = new Set<string>();
  for (let i = 1; i < args.length; i++) {
    names.add(
      expect('remove_query_args', args, i, fail, ['Bytes'], { literal: true }).value as string,
    );
  }
  return {
    returns: BYTES,
    impl: ([v]) => {
      if (!str(v)) return undefined;
      if (v === '') return v;
      return v
        .split('&')
        .filter((part) => {
          const eq = part.indexOf('=');
          return !names.has(eq >= 0 ? part.slice(0, eq) : part);
        })
        .join('&');
    },
  };
});

def('wildcard_replace', 3, 4, (args, fail) => {
  expect('wildcard_replace', args, 0, fail, ['Bytes']);
  const pattern = expect('wildcard_replace', args, 1, fail, ['Bytes'], { literal: true })
    .value as string;
  const replacement = expect('wildcard_replace', args, 2, fail, ['Bytes'], { literal: true })
    .value as string;
  const flags =
    args.length > 3
      ? (expect('wildcard_replace', args, 3, fail, ['Bytes'], { literal: true }).value as string)
      : '';
  let compiled;
  try {
    compiled = compileWildcard(pattern, flags === 's');
  } catch (err) {
    return fail(1, (err as WildcardError).message);
  }
  const refs = [...replacement.matchAll(/\$\{?(\d+)\}?/g)].map((m) => Number(m[1]));
  if (refs.length > 8) fail(2, 'wildcard_replace() replacement may use at most eight references');
  return {
    returns: BYTES,
    impl: ([v]) => (str(v) ? wildcardReplace(compiled, v, replacement) : undefined),
  };
});

def('regex_replace', 3, 3, (args, fail) => {
  expect('regex_replace', args, 0, fail, ['Bytes']);
  const pattern = expect('regex_replace', args, 1, fail, ['Bytes'], { literal: true })
    .value as string;
  const replacement = expect('regex_replace', args, 2, fail, ['Bytes'], { literal: true })
    .value as string;
  let program;
  try {
    program = compileRegex(bytesToText(pattern));
  } catch (err) {
    return fail(1, `invalid regular expression: ${(err as RegexError).message}`);
  }
  return {
    returns: BYTES,
    impl: ([v]) => (str(v) ? program.replaceFirst(v, replacement) : undefined),
  };
});

// ---------------------------------------------------------------------------------------------
// maps and arrays

def('has_key', 2, 2, (args, fail) => {
  expect('has_key', args, 0, fail, ['Map']);
  expect('has_key', args, 1, fail, ['Bytes']);
  return {
    returns: BOOL,
    impl: ([m, k]) => (m === undefined || !str(k) ? undefined : (m as Map<string, unknown>).has(k)),
  };
});

def('has_value', 2, 2, (args, fail) => {
  const a = expect('has_value', args, 0, fail, ['Map', 'Array']);
  const elem = (a.type as { of: Type }).of;
  if (elem.kind === 'Array' || elem.kind === 'Map') {
    fail(0, `has_value() needs a map or array of scalar values, found ${displayType(a.type)}`);
  }
  const b = args[1];
  if (!typeEquals(b.type, elem)) {
    fail(1, `has_value() argument 2 must be ${displayType(elem)}, found ${displayType(b.type)}`);
  }
  const eq =
    elem.kind === 'Ip'
      ? (x: unknown, y: unknown) => compareIp(x as IpAddr, y as IpAddr) === 0
      : (x: unknown, y: unknown) => x === y;
  return {
    returns: BOOL,
    impl: ([coll, v]) => {
      if (coll === undefined || v === undefined) return undefined;
      const items = coll instanceof Map ? coll.values() : (coll as unknown[]);
      for (const x of items) if (eq(x, v)) return true;
      return false;
    },
  };
});

// ---------------------------------------------------------------------------------------------
// IP addresses and bits

def('cidr', 3, 3, (args, fail) => {
  expect('cidr', args, 0, fail, ['Ip']);
  const v4 = literalInt('cidr', args, 1, fail, 1, 32);
  const v6 = literalInt('cidr', args, 2, fail, 1, 128);
  return {
    returns: IP,
    impl: ([ip]) =>
      ip === undefined ? undefined : maskIp(ip as IpAddr, (ip as IpAddr).v === 4 ? v4 : v6),
  };
});

def('cidr6', 2, 2, (args, fail) => {
  expect('cidr6', args, 0, fail, ['Ip']);
  const v6 = literalInt('cidr6', args, 1, fail, 1, 128);
  return {
    returns: IP,
    impl: ([ip]) =>
      ip === undefined ? undefined : (ip as IpAddr).v === 4 ? ip : maskIp(ip as IpAddr, v6),
  };
});

const PACKET_PROTOCOLS = new Set(['ip', 'ipv4', 'ipv6', 'tcp', 'udp', 'icmp', 'eth']);

def('bit_slice', 3, 3, (args, fail) => {
  const src = expect('bit_slice', args, 0, fail, ['Bytes']);
  const start = literalInt('bit_slice', args, 1, fail, 0, 2040);
  const end = literalInt('bit_slice', args, 2, fail, 0, 2040);
  if (end <= start) fail(2, 'bit_slice() end offset must be greater than the start offset');
  if (end - start > 32) fail(2, 'bit_slice() can extract at most 32 bits');
  const protocol =
    src.literal && PACKET_PROTOCOLS.has(src.value as string) ? (src.value as string) : undefined;
  return {
    returns: INT,
    impl: ([v], ctx) => {
      let bytes: string | undefined;
      if (protocol) {
        const packet = ctx.input.fields?.[`packet.${protocol}`];
        bytes =
          typeof packet === 'string'
            ? packet
            : packet instanceof Uint8Array
              ? Buffer.from(packet).toString('latin1')
              : undefined;
      } else bytes = str(v) ? v : undefined;
      if (bytes === undefined || bytes.length * 8 < end) return undefined;
      let out = 0;
      for (let bit = start; bit < end; bit++) {
        const byte = bytes.charCodeAt(bit >> 3);
        out = out * 2 + ((byte >> (7 - (bit & 7))) & 1);
      }
      return out;
    },
  };
});

// ---------------------------------------------------------------------------------------------
// token validation

def('is_jwt_valid', 1, 1, (args, fail) => {
  const a = expect('is_jwt_valid', args, 0, fail, ['Bytes']);
  const configId = a.literal
    ? bytesToText(a.value as string)
    : a.mapKey !== undefined
      ? bytesToText(a.mapKey)
      : undefined;
  return {
    returns: BOOL,
    impl: ([v], ctx) => {
      const hook = ctx.input.jwtValidator ?? getJwtValidator();
      const value = str(v) ? v : undefined;
      if (hook) return hook({ configId, value: a.literal ? undefined : value, ctx });
      // Without a validator, a payload the gateway placed in the context counts as validated.
      return !a.literal && value !== undefined && value !== '';
    },
  };
});

def('is_timed_hmac_valid_v0', 4, 6, (args, fail) => {
  const key = expect('is_timed_hmac_valid_v0', args, 0, fail, ['Bytes'], { literal: true })
    .value as string;
  expect('is_timed_hmac_valid_v0', args, 1, fail, ['Bytes']);
  const ttl = literalInt('is_timed_hmac_valid_v0', args, 2, fail, 0, Number.MAX_SAFE_INTEGER);
  expect('is_timed_hmac_valid_v0', args, 3, fail, ['Int']);
  const sepLen = args.length > 4 ? literalInt('is_timed_hmac_valid_v0', args, 4, fail, 0, 4096) : 0;
  const flags =
    args.length > 5
      ? (expect('is_timed_hmac_valid_v0', args, 5, fail, ['Bytes'], { literal: true })
          .value as string)
      : '';
  const urlSafe = flags === 's';
  const keyBuf = bytesToBuffer(key);
  return {
    returns: BOOL,
    impl: ([, token, , now]) => {
      if (!str(token) || typeof now !== 'number') return undefined;
      const m = /^([\s\S]*)(\d{10})-([\s\S]{43,})$/.exec(token);
      if (!m || m[1].length < sepLen + 1) return false;
      const message = m[1].slice(0, m[1].length - sepLen);
      const issued = Number(m[2]);
      if (issued > now || now - issued > ttl) return false;
      const mac = createHmac('sha256', keyBuf)
        .update(bytesToBuffer(message + m[2]))
        .digest();
      const given = urlSafe ? m[3] : urlDecodeOnce(m[3], false).replace(/ /g, '+');
      const expected = mac.toString(urlSafe ? 'base64url' : 'base64');
      const a = Buffer.from(given);
      const b = Buffer.from(expected);
      return a.length === b.length && timingSafeEqual(a, b);
    },
  };
});
