/**
 * The standard fields of the scheme and how they derive from a request.
 *
 * Request-line fields follow the platform's URL normalisation for the non-`raw.` variants: back
 * slashes become slashes, percent-encoded unreserved characters are decoded, remaining
 * percent-escapes are upper-cased, runs of slashes are merged and dot segments removed. The `raw.`
 * variants keep the request target exactly as received. Query arguments (`http.request.uri.args`)
 * are URL-decoded (`+` is a space); `raw.http.request.uri.args` are not. Header names in
 * `http.request.headers` are lower-cased; `http.request.headers.names` keeps the client's case.
 *
 * `cf.*` fields (bot management, TLS client auth, API gateway, …) are only stored here: their values
 * come from the context input (`cf`/`edge`/`fields`) or from the area that computes them.
 */

import { registerField, type FieldDef } from './scheme.ts';
import type { RequestContext } from './context.ts';
import {
  BOOL,
  BYTES,
  INT,
  IP,
  arrayOf,
  asciiLower,
  bytesFromBuffer,
  coerceValue,
  mapOf,
  textToBytes,
  type Type,
} from './types.ts';

const UNRESERVED = /[A-Za-z0-9\-._~]/;

/** Percent-decodes a binary string (`+` → space when `plus`); invalid escapes stay as they are. */
export function percentDecode(s: string, plus: boolean): string {
  if (s.indexOf('%') < 0 && (!plus || s.indexOf('+') < 0)) return s;
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === '+' && plus) out += ' ';
    else if (c === '%' && /^[0-9a-fA-F]{2}$/.test(s.slice(i + 1, i + 3))) {
      out += String.fromCharCode(parseInt(s.slice(i + 1, i + 3), 16));
      i += 2;
    } else out += c;
  }
  return out;
}

/** The platform's default URL normalisation of a path (see the module comment). */
const NEEDS_NORMALISING = /[\\%]|\/\/|\/\.\.?(?:\/|$)|^[^/]/;

export function normalizePath(raw: string): string {
  if (raw === '*' || !NEEDS_NORMALISING.test(raw)) return raw;
  let p = raw.replace(/\\/g, '/');
  p = p.replace(/%([0-9a-fA-F]{2})/g, (m, hex: string) => {
    const ch = String.fromCharCode(parseInt(hex, 16));
    return UNRESERVED.test(ch) ? ch : `%${hex.toUpperCase()}`;
  });
  p = p.replace(/\/{2,}/g, '/');
  if (!p.startsWith('/')) p = `/${p}`;
  // RFC 3986 §5.2.4 remove_dot_segments
  const out: string[] = [];
  const segments = p.split('/');
  for (let i = 1; i < segments.length; i++) {
    const seg = segments[i];
    const last = i === segments.length - 1;
    if (seg === '.') {
      if (last) out.push('');
    } else if (seg === '..') {
      out.pop();
      if (last) out.push('');
    } else out.push(seg);
  }
  return `/${out.join('/')}`;
}

function parseArgs(query: string | undefined, decode: boolean): Array<[string, string]> {
  if (!query) return [];
  const out: Array<[string, string]> = [];
  for (const part of query.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const name = eq >= 0 ? part.slice(0, eq) : part;
    const value = eq >= 0 ? part.slice(eq + 1) : '';
    out.push(decode ? [percentDecode(name, true), percentDecode(value, true)] : [name, value]);
  }
  return out;
}

function toMultiMap(pairs: Array<[string, string]>): Map<string, string[]> {
  const map = new Map<string, string[]>();
  for (const [k, v] of pairs) {
    const list = map.get(k);
    if (list) list.push(v);
    else map.set(k, [v]);
  }
  return map;
}

const target = (c: RequestContext) => c.parsedTarget();
const path = (c: RequestContext) => c.memoize('path', () => normalizePath(target(c).rawPath));
const query = (c: RequestContext) => target(c).rawQuery ?? '';
const uri = (c: RequestContext) => {
  const q = target(c).rawQuery;
  return q === undefined ? path(c) : `${path(c)}?${q}`;
};
const rawUri = (c: RequestContext) => {
  const t = target(c);
  return t.rawQuery === undefined ? t.rawPath : `${t.rawPath}?${t.rawQuery}`;
};
const authority = (c: RequestContext) => {
  const t = target(c);
  return t.port ? `${t.host}:${t.port}` : t.host;
};
const args = (c: RequestContext) => c.memoize('args', () => parseArgs(target(c).rawQuery, true));
const rawArgs = (c: RequestContext) =>
  c.memoize('rawArgs', () => parseArgs(target(c).rawQuery, false));
const cookiePairs = (c: RequestContext) =>
  c.memoize('cookies', () => {
    const out: Array<[string, string]> = [];
    for (const header of c.headers().get('cookie') ?? []) {
      for (const part of header.split(';')) {
        const item = part.trim();
        if (!item) continue;
        const eq = item.indexOf('=');
        out.push(eq >= 0 ? [item.slice(0, eq).trim(), item.slice(eq + 1).trim()] : [item, '']);
      }
    }
    return out;
  });
const body = (c: RequestContext) =>
  c.memoize('body', () => {
    const b = c.input.body;
    if (b === undefined) return '';
    return typeof b === 'string' ? textToBytes(b) : bytesFromBuffer(b);
  });
const contentType = (c: RequestContext) => asciiLower(c.header('content-type') ?? '');
const formPairs = (c: RequestContext) =>
  c.memoize('form', () =>
    contentType(c).startsWith('application/x-www-form-urlencoded')
      ? parseArgs(body(c), true)
      : ([] as Array<[string, string]>),
  );
const ssl = (c: RequestContext) => c.input.ssl ?? target(c).scheme === 'https';
const geo = (c: RequestContext, ...keys: string[]) => {
  const g = c.input.geo;
  if (!g) return undefined;
  for (const k of keys) if (g[k] !== undefined && g[k] !== null) return g[k];
  return undefined;
};

type Compute = (c: RequestContext) => unknown;

function field(
  name: string,
  type: Type,
  compute?: Compute,
  aliases?: string[],
  wire = false,
): FieldDef {
  return registerField(name, type, { compute, aliases, wire });
}

function geoField(name: string, type: Type, keys: string[], aliases: string[] = []): void {
  field(
    name,
    type,
    (c) => {
      const v = geo(c, ...keys);
      return v === undefined ? undefined : coerceValue(type, v);
    },
    aliases,
  );
}

const ARRAY_BYTES = arrayOf(BYTES);
const MAP_ARRAY_BYTES = mapOf(arrayOf(BYTES));

// --- request line and URI -----------------------------------------------------------------------
field('http.host', BYTES, (c) => target(c).host, [], true);
field('http.request.method', BYTES, (c) => c.input.method ?? 'GET', [], true);
field('http.request.version', BYTES, (c) => {
  const v = c.input.httpVersion ?? '1.1';
  if (v.startsWith('HTTP/')) return v;
  return v === '2' || v === '2.0' ? 'HTTP/2' : v === '3' || v === '3.0' ? 'HTTP/3' : `HTTP/${v}`;
});
field('http.request.uri', BYTES, uri, [], true);
field('http.request.uri.path', BYTES, path, [], true);
field('http.request.uri.path.extension', BYTES, (c) => {
  const p = path(c);
  const lastSeg = p.slice(p.lastIndexOf('/') + 1);
  const dot = lastSeg.lastIndexOf('.');
  return dot >= 0 ? asciiLower(lastSeg.slice(dot + 1)) : '';
});
field('http.request.uri.query', BYTES, query, [], true);
field(
  'http.request.full_uri',
  BYTES,
  (c) => `${target(c).scheme}://${authority(c)}${uri(c)}`,
  [],
  true,
);
field('http.request.uri.args', MAP_ARRAY_BYTES, (c) => toMultiMap(args(c)));
field('http.request.uri.args.names', ARRAY_BYTES, (c) => args(c).map((p) => p[0]));
field('http.request.uri.args.values', ARRAY_BYTES, (c) => args(c).map((p) => p[1]));
field('raw.http.request.uri', BYTES, rawUri, [], true);
field('raw.http.request.uri.path', BYTES, (c) => target(c).rawPath, [], true);
field('raw.http.request.uri.path.extension', BYTES, (c) => {
  const p = target(c).rawPath;
  const lastSeg = p.slice(p.lastIndexOf('/') + 1);
  const dot = lastSeg.lastIndexOf('.');
  return dot >= 0 ? asciiLower(lastSeg.slice(dot + 1)) : '';
});
field('raw.http.request.uri.query', BYTES, query, [], true);
field(
  'raw.http.request.full_uri',
  BYTES,
  (c) => `${target(c).scheme}://${authority(c)}${rawUri(c)}`,
  [],
  true,
);
field('raw.http.request.uri.args', MAP_ARRAY_BYTES, (c) => toMultiMap(rawArgs(c)));
field('raw.http.request.uri.args.names', ARRAY_BYTES, (c) => rawArgs(c).map((p) => p[0]));
field('raw.http.request.uri.args.values', ARRAY_BYTES, (c) => rawArgs(c).map((p) => p[1]));

// --- headers and cookies ------------------------------------------------------------------------
field('http.request.headers', MAP_ARRAY_BYTES, (c) => c.headers());
field('http.request.headers.names', ARRAY_BYTES, (c) => c.headerPairs().map((p) => p[0]));
field('http.request.headers.values', ARRAY_BYTES, (c) => c.headerPairs().map((p) => p[1]));
field('http.request.headers.truncated', BOOL);
field('http.request.accepted_languages', ARRAY_BYTES, (c) => {
  const header = c.headerJoined('accept-language', ',');
  if (!header) return [];
  return header
    .split(',')
    .map((part, i) => {
      const [tag, ...params] = part.trim().split(';');
      const q = params.map((p) => /^\s*q=([0-9.]+)/.exec(p)).find((m) => m);
      return { tag: tag.trim(), q: q ? Number(q[1]) : 1, i };
    })
    .filter((x) => x.tag && x.q > 0)
    .sort((a, b) => b.q - a.q || a.i - b.i)
    .map((x) => x.tag);
});
field('http.cookie', BYTES, (c) => c.headerJoined('cookie', '; ') ?? '', [], true);
field('http.request.cookies', MAP_ARRAY_BYTES, (c) => toMultiMap(cookiePairs(c)));
field('http.user_agent', BYTES, (c) => c.header('user-agent') ?? '', [], true);
field('http.referer', BYTES, (c) => c.header('referer') ?? '', [], true);
field('http.x_forwarded_for', BYTES, (c) => c.headerJoined('x-forwarded-for') ?? '', [], true);

// --- body ---------------------------------------------------------------------------------------
field('http.request.body.raw', BYTES, body);
field('http.request.body.size', INT, (c) => body(c).length);
field('http.request.body.truncated', BOOL, (c) => c.input.bodyTruncated ?? false);
field('http.request.body.mime', BYTES, (c) => contentType(c).split(';')[0].trim());
field('http.request.body.form', MAP_ARRAY_BYTES, (c) => toMultiMap(formPairs(c)));
field('http.request.body.form.names', ARRAY_BYTES, (c) => formPairs(c).map((p) => p[0]));
field('http.request.body.form.values', ARRAY_BYTES, (c) => formPairs(c).map((p) => p[1]));

// --- time ---------------------------------------------------------------------------------------
const now = (c: RequestContext) => c.memoize('now', () => c.input.timestamp ?? Date.now());
field('http.request.timestamp.sec', INT, (c) => Math.floor(now(c) / 1000));
field('http.request.timestamp.msec', INT, (c) => now(c) % 1000);

// --- client address and geolocation -------------------------------------------------------------
field('ip.src', IP, (c) => (c.input.clientIp ? coerceValue(IP, c.input.clientIp) : undefined));
geoField('ip.src.country', BYTES, ['country'], ['ip.geoip.country']);
geoField('ip.src.continent', BYTES, ['continent'], ['ip.geoip.continent']);
geoField('ip.src.asnum', INT, ['asnum', 'asn'], ['ip.geoip.asnum']);
geoField('ip.src.city', BYTES, ['city']);
geoField('ip.src.region', BYTES, ['region']);
geoField('ip.src.region_code', BYTES, ['region_code', 'regionCode']);
geoField(
  'ip.src.subdivision_1_iso_code',
  BYTES,
  ['subdivision_1_iso_code', 'subdivision1'],
  ['ip.geoip.subdivision_1_iso_code'],
);
geoField(
  'ip.src.subdivision_2_iso_code',
  BYTES,
  ['subdivision_2_iso_code', 'subdivision2'],
  ['ip.geoip.subdivision_2_iso_code'],
);
geoField('ip.src.postal_code', BYTES, ['postal_code', 'postalCode']);
geoField('ip.src.metro_code', BYTES, ['metro_code', 'metroCode']);
geoField('ip.src.lat', BYTES, ['lat', 'latitude']);
geoField('ip.src.lon', BYTES, ['lon', 'longitude']);
geoField('ip.src.timezone.name', BYTES, ['timezone']);
geoField(
  'ip.src.is_in_european_union',
  BOOL,
  ['is_in_european_union', 'isEU', 'eu'],
  ['ip.geoip.is_in_european_union'],
);
field('ssl', BOOL, ssl);

// --- edge and zone ------------------------------------------------------------------------------
field('cf.edge.server_port', INT, (c) => {
  if (c.input.serverPort !== undefined) return c.input.serverPort;
  const port = Number(target(c).port);
  return port > 0 ? port : ssl(c) ? 443 : 80;
});
field('cf.edge.server_ip', IP);
field('cf.zone.name', BYTES);
field('cf.zone.plan', BYTES);
field('cf.ray_id', BYTES);
field('cf.colo.name', BYTES);
field('cf.colo.region', BYTES);
field('cf.hostname.metadata', BYTES);
field('cf.worker.upstream_zone', BYTES);
field('cf.metal.id', INT);
field('cf.random_seed', BYTES, (c) => c.randomSeed());
field('cf.threat_score', INT);
field('cf.client.bot', BOOL);
field('cf.verified_bot_category', BYTES);

// --- bot management -----------------------------------------------------------------------------
for (const [name, type] of [
  ['score', INT],
  ['verified_bot', BOOL],
  ['static_resource', BOOL],
  ['corporate_proxy', BOOL],
  ['js_detection.passed', BOOL],
  ['ja3_hash', BYTES],
  ['ja4', BYTES],
  ['detection_ids', arrayOf(INT)],
] as Array<[string, Type]>) {
  field(`cf.bot_management.${name}`, type);
}

// --- WAF ----------------------------------------------------------------------------------------
for (const name of ['cf.waf.score', 'cf.waf.score.sqli', 'cf.waf.score.xss', 'cf.waf.score.rce']) {
  field(name, INT);
}
field('cf.waf.score.class', BYTES);
field('cf.waf.credential_check.password_leaked', BOOL);
field('cf.waf.credential_check.username_and_password_leaked', BOOL);
field('cf.waf.credential_check.username_leaked', BOOL);
field('cf.waf.credential_check.username_password_similar', BOOL);
field('cf.waf.auth_detected', BOOL);
field('cf.waf.content_scan.has_obj', BOOL);
field('cf.waf.content_scan.has_malicious_obj', BOOL);
field('cf.waf.content_scan.num_obj', INT);
field('cf.waf.content_scan.num_malicious_obj', INT);

// --- TLS ----------------------------------------------------------------------------------------
field('cf.tls_version', BYTES);
field('cf.tls_cipher', BYTES);
field('cf.tls_client_hello_length', INT);
field('cf.tls_client_random', BYTES);
field('cf.tls_client_extensions_sha1', BYTES);
for (const name of ['cert_presented', 'cert_verified', 'cert_revoked']) {
  field(`cf.tls_client_auth.${name}`, BOOL);
}
for (const name of [
  'cert_fingerprint_sha256',
  'cert_fingerprint_sha1',
  'cert_issuer_dn',
  'cert_subject_dn',
  'cert_issuer_dn_rfc2253',
  'cert_subject_dn_rfc2253',
  'cert_issuer_dn_legacy',
  'cert_subject_dn_legacy',
  'cert_serial',
  'cert_issuer_serial',
  'cert_issuer_ski',
  'cert_ski',
  'cert_not_before',
  'cert_not_after',
]) {
  field(`cf.tls_client_auth.${name}`, BYTES);
}

// --- API gateway (filled in by the API gateway area) --------------------------------------------
field('cf.api_gateway.auth_id_present', BOOL);
field('cf.api_gateway.request_violates_schema', BOOL);
field('cf.api_gateway.fallthrough_detected', BOOL, undefined, [
  'cf.api_gateway.fallthrough_triggered',
]);
field('cf.api_gateway.jwt_claims_valid', BOOL);
for (const label of [
  'bola-enumeration',
  'bola-pollution',
  'missing-auth',
  'mixed-auth',
  'sensitive',
]) {
  field(`cf.api_gateway.cf-risk-${label}`, BOOL);
}
field('cf.api_gateway.graphql.query_size', INT);
field('cf.api_gateway.graphql.query_depth', INT);
field('cf.api_gateway.graphql.parsed_successfully', BOOL);
field('cf.sequence.current_op', BYTES);
field('cf.sequence.previous_ops', ARRAY_BYTES);
field('cf.sequence.msec_since_op', mapOf(INT));
field('http.request.jwt.payload', MAP_ARRAY_BYTES);
field('http.request.jwt.claims', MAP_ARRAY_BYTES);

// --- response phase (set by the stage that has the response) ------------------------------------
field('http.response.code', INT);
field('http.response.headers', MAP_ARRAY_BYTES);
field('http.response.headers.names', ARRAY_BYTES);
field('http.response.headers.values', ARRAY_BYTES);
field('http.response.content_type.media_type', BYTES);
field('cf.response.1xxx_code', INT);
field('cf.response.error_type', BYTES);

// Exposed for areas that build contexts from other sources.
export { parseArgs, toMultiMap };
