/**
 * The per-request evaluation context. `buildRequestContext()` stores the request as given and
 * computes each field the first time a rule reads it (then caches it), so a request pays only for
 * the fields its rules use. Values not derivable from the request come from the `cf` (or `edge`)
 * object, the `geo` object or the `fields` map of the input; anything still absent evaluates as its
 * type's default (false, 0, "", empty array/map, 0.0.0.0), like the platform. (A request without
 * a method or URL reads as `GET /`.)
 *
 * Later stages can also `set()` a field on a context they own (e.g. the API gateway after it has
 * identified the session), which replaces any cached value.
 */

import { randomBytes } from 'node:crypto';
import { lookupField, type FieldDef, type JwtValidator } from './scheme.ts';
import { coerceValue, defaultValue, wireToBytes } from './types.ts';

export type HeaderInput =
  | Record<string, string | string[] | number | undefined>
  | Iterable<readonly [string, string]>
  | { forEach(cb: (value: string, name: string) => void): void };

export interface RequestInput {
  method?: string;
  /** Absolute URL or origin-form request target (`/path?query`). */
  url?: string;
  /** Host (overrides the Host header and the URL's host). */
  host?: string;
  /** `http` or `https` (defaults from `ssl` or the URL). */
  scheme?: string;
  headers?: HeaderInput;
  /**
   * Node's `req.rawHeaders` (`[name, value, name, value, …]`). When given it is used instead of
   * `headers`, so `http.request.headers.names` keeps the client's spelling of each name.
   */
  rawHeaders?: readonly string[];
  clientIp?: string;
  ssl?: boolean;
  /** `1.1`, `2`, `HTTP/2`, … */
  httpVersion?: string;
  body?: string | Uint8Array;
  bodyTruncated?: boolean;
  /** Request arrival time in milliseconds since the epoch (default: now). */
  timestamp?: number;
  /** Port the edge received the request on (`cf.edge.server_port`). */
  serverPort?: number;
  /** Geolocation of the client address (`ip.src.country`, `ip.src.asnum`, …). */
  geo?: Record<string, unknown>;
  /** `cf.*` values, nested (`{bot_management: {score: 5}}`) or dotted (`{'bot_management.score': 5}`). */
  cf?: Record<string, unknown>;
  /** The spec's spelling of `cf`. */
  edge?: Record<string, unknown>;
  /** Any field by full name. */
  fields?: Record<string, unknown>;
  /** Per-request `is_jwt_valid()` hook (takes precedence over the global one). */
  jwtValidator?: JwtValidator;
}

interface ParsedTarget {
  scheme: string;
  host: string;
  port: string;
  rawPath: string;
  rawQuery: string | undefined;
}

export class RequestContext {
  private readonly values: unknown[] = [];
  private target?: ParsedTarget;
  private headerList?: Array<[string, string]>;
  private headerMap?: Map<string, string[]>;
  private memo = new Map<string, unknown>();

  constructor(readonly input: RequestInput) {}

  /** Value of a field for this request (computed once). */
  get(field: FieldDef): unknown {
    const v = this.values[field.slot];
    if (v !== undefined) return v;
    const computed = this.computeField(field);
    this.values[field.slot] = computed;
    return computed;
  }

  /** Value of a field by name (either spelling). */
  getField(name: string): unknown {
    const def = lookupField(name);
    if (!def) throw new Error(`unknown field "${name}"`);
    return this.get(def);
  }

  /** Overrides a field's value for this request. Host values are converted to the field's type. */
  set(name: string, value: unknown): void {
    const def = lookupField(name);
    if (!def) throw new Error(`unknown field "${name}"`);
    this.values[def.slot] = coerceValue(def.type, value, def.wire);
  }

  private computeField(field: FieldDef): unknown {
    const explicit = this.explicitValue(field.name);
    if (explicit !== undefined) return coerceValue(field.type, explicit, field.wire);
    if (field.compute) {
      const v = field.compute(this);
      if (v !== undefined && v !== null) return v;
    }
    return defaultValue(field.type);
  }

  private explicitValue(name: string): unknown {
    const { fields, cf, edge } = this.input;
    if (!fields && !cf && !edge) return undefined;
    if (fields) {
      if (name in fields) return fields[name];
      const edgeName = name.startsWith('cf.') ? `edge.${name.slice(3)}` : undefined;
      if (edgeName && edgeName in fields) return fields[edgeName];
    }
    if (name.startsWith('cf.')) {
      const path = name.slice(3);
      return lookupPath(cf, path) ?? lookupPath(edge, path.replace(/cf-risk-/g, 'edge-risk-'));
    }
    return undefined;
  }

  /** Caches an intermediate result shared by several fields. */
  memoize<T>(key: string, compute: () => T): T {
    if (this.memo.has(key)) return this.memo.get(key) as T;
    const v = compute();
    this.memo.set(key, v);
    return v;
  }

  // -------------------------------------------------------------------------------------------
  // Request parsing helpers used by the standard fields

  parsedTarget(): ParsedTarget {
    if (this.target) return this.target;
    const input = this.input;
    const url = wireToBytes(input.url ?? '/');
    let scheme = '';
    let authority = '';
    let rest = url;
    const abs = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)/.exec(url);
    if (abs) {
      scheme = abs[1].toLowerCase();
      authority = abs[2];
      rest = url.slice(abs[0].length);
    }
    const hash = rest.indexOf('#');
    if (hash >= 0) rest = rest.slice(0, hash);
    const q = rest.indexOf('?');
    let rawPath = q >= 0 ? rest.slice(0, q) : rest;
    const rawQuery = q >= 0 ? rest.slice(q + 1) : undefined;
    if (rawPath === '') rawPath = '/';
    if (input.scheme) scheme = input.scheme.toLowerCase().replace(/:$/, '');
    if (!scheme) scheme = input.ssl ? 'https' : 'http';
    const hostSource = input.host ?? this.header('host') ?? authority;
    const { host, port } = splitHostPort(wireToBytes(hostSource ?? ''));
    this.target = { scheme, host, port, rawPath, rawQuery };
    return this.target;
  }

  /** Request headers as [name, value] pairs, names in their original case. */
  headerPairs(): Array<[string, string]> {
    if (this.headerList) return this.headerList;
    const out: Array<[string, string]> = [];
    const raw = this.input.rawHeaders;
    const h = raw ? undefined : this.input.headers;
    if (raw) {
      for (let i = 0; i + 1 < raw.length; i += 2) out.push([raw[i], wireToBytes(raw[i + 1])]);
    } else if (h) {
      if (typeof (h as { forEach?: unknown }).forEach === 'function' && !Array.isArray(h)) {
        (h as { forEach(cb: (value: string, name: string) => void): void }).forEach((value, name) =>
          out.push([name, wireToBytes(String(value))]),
        );
      } else if (Symbol.iterator in (h as object)) {
        for (const [name, value] of h as Iterable<readonly [string, string]>) {
          out.push([name, wireToBytes(String(value))]);
        }
      } else {
        for (const [name, value] of Object.entries(h as Record<string, unknown>)) {
          if (value === undefined) continue;
          if (Array.isArray(value)) for (const v of value) out.push([name, wireToBytes(String(v))]);
          else out.push([name, wireToBytes(String(value))]);
        }
      }
    }
    this.headerList = out;
    return out;
  }

  /** Lowercased header name → values. */
  headers(): Map<string, string[]> {
    if (this.headerMap) return this.headerMap;
    const map = new Map<string, string[]>();
    for (const [name, value] of this.headerPairs()) {
      const key = name.toLowerCase();
      const list = map.get(key);
      if (list) list.push(value);
      else map.set(key, [value]);
    }
    this.headerMap = map;
    return map;
  }

  /** First value of a header (case-insensitive name). */
  header(name: string): string | undefined {
    const key = name.toLowerCase();
    if (this.headerMap) return this.headerMap.get(key)?.[0];
    // a single lookup is cheaper as a scan than building the whole map
    for (const [n, v] of this.headerPairs()) {
      if (n.length === key.length && (n === key || n.toLowerCase() === key)) return v;
    }
    return undefined;
  }

  /** All values of a header joined as the platform shows them. */
  headerJoined(name: string, sep = ', '): string | undefined {
    const values = this.headers().get(name.toLowerCase());
    return values ? values.join(sep) : undefined;
  }

  randomSeed(): string {
    return this.memoize('random_seed', () => randomBytes(32).toString('latin1'));
  }
}

/** Builds the evaluation context of one request (nothing is computed until a rule reads it). */
export function buildRequestContext(input: RequestInput = {}): RequestContext {
  return new RequestContext(input);
}

function lookupPath(obj: unknown, path: string): unknown {
  if (obj === undefined || obj === null || typeof obj !== 'object') return undefined;
  const rec = obj as Record<string, unknown>;
  if (path in rec && rec[path] !== undefined) return rec[path];
  const dot = path.indexOf('.');
  if (dot < 0) return undefined;
  // try every split point so `{bot_management: {'js_detection.passed': true}}` also resolves
  for (let i = dot; i >= 0; i = path.indexOf('.', i + 1)) {
    const head = path.slice(0, i);
    const child = rec[head];
    if (
      child !== undefined &&
      child !== null &&
      typeof child === 'object' &&
      !(child instanceof Map)
    ) {
      const v = lookupPath(child, path.slice(i + 1));
      if (v !== undefined) return v;
    }
  }
  return undefined;
}

function splitHostPort(hostPort: string): { host: string; port: string } {
  if (hostPort.startsWith('[')) {
    const close = hostPort.indexOf(']');
    const host = close > 0 ? hostPort.slice(0, close + 1) : hostPort;
    const port = close > 0 && hostPort[close + 1] === ':' ? hostPort.slice(close + 2) : '';
    return { host: host.toLowerCase(), port };
  }
  const colon = hostPort.lastIndexOf(':');
  if (colon >= 0 && hostPort.indexOf(':') === colon) {
    return { host: hostPort.slice(0, colon).toLowerCase(), port: hostPort.slice(colon + 1) };
  }
  return { host: hostPort.toLowerCase(), port: '' };
}
