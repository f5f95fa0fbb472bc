/**
 * DNS record rules: turn a request body into the canonical stored form (absolute lowercase
 * names, normalised content, `data` rendered into `content` the way the platform does), and find
 * conflicts with the records already in the zone. Pure functions; failures are `ApiError`s from
 * the shared error table, each message naming the offending field.
 */
import { domainToASCII } from 'node:url';
import type { z } from 'zod';
import { ApiError, apiError } from '../../core/errors.ts';
import {
  DATA_SCHEMAS,
  isDataType,
  type DataType,
  type DnsRecordInput,
  type DnsRecordPatch,
  type RecordType,
} from './schemas.ts';

export interface RecordSettings {
  ipv4_only?: boolean;
  ipv6_only?: boolean;
  flatten_cname?: boolean;
}

/** A record as stored and answered (wire field names; id and timestamps are added elsewhere). */
export interface CanonicalRecord {
  type: RecordType;
  /** Absolute, lowercase, punycode, no trailing dot. */
  name: string;
  content: string;
  /** Only for data-carrying types (CAA, SRV, …). */
  data?: Record<string, string | number>;
  /** Only for MX, SRV and URI. */
  priority?: number;
  /** 1 = automatic. */
  ttl: number;
  proxied: boolean;
  proxiable: boolean;
  comment: string | null;
  tags: string[];
  settings: RecordSettings;
  /** Only present (true) on A/AAAA records that asked for it. */
  private_routing?: boolean;
}

export const PROXIABLE_TYPES: ReadonlySet<string> = new Set(['A', 'AAAA', 'CNAME']);
export const MAX_TXT_LENGTH = 2048;
export const MAX_COMMENT_LENGTH = 100;

// --- names ---------------------------------------------------------------------------------------

/** Lowercase, no trailing dot. */
export function normalizeZoneName(zone: string): string {
  return zone.trim().replace(/\.$/, '').toLowerCase();
}

const LABEL = /^[a-z0-9_-]{1,63}$/;

/** Lowercases and converts non-ASCII labels to punycode; '' when a label cannot be converted. */
function toAsciiName(name: string): string {
  return name
    .split('.')
    .map((label) => {
      if (!/[^\x00-\x7f]/.test(label)) return label.toLowerCase();
      return domainToASCII(label) || '\u0000';
    })
    .join('.');
}

function validName(name: string, allowWildcard: boolean): boolean {
  if (name.length === 0 || name.length > 253) return false;
  return name
    .split('.')
    .every((label, i) => LABEL.test(label) || (allowWildcard && i === 0 && label === '*'));
}

/**
 * Completes a record name given in a request against the zone: `@` and '' are the apex, a
 * trailing dot marks an absolute name (which must then lie inside the zone), and a name that does
 * not already end in the zone name is relative to it.
 */
export function completeName(input: string, zoneName: string): string {
  const zone = normalizeZoneName(zoneName);
  let name = input.trim();
  if (name === '' || name === '@') return zone;
  let absolute = false;
  if (name.endsWith('.')) {
    absolute = true;
    name = name.slice(0, -1);
  }
  name = toAsciiName(name);
  if (!validName(name, true)) {
    throw apiError('dns_invalid_name', `name "${input}" is not a valid host name`);
  }
  const inside = name === zone || name.endsWith(`.${zone}`);
  if (absolute && !inside) throw apiError('dns_outside_zone', name, zone);
  if (!inside) name = `${name}.${zone}`;
  if (name.length > 253) {
    throw apiError('dns_invalid_name', `name "${name}" is longer than 253 characters`);
  }
  return name;
}

/** A target host name (CNAME, MX, NS, … content): lowercase, no trailing dot; null if invalid. */
export function normalizeHostname(input: string): string | null {
  const name = toAsciiName(input.trim().replace(/\.$/, ''));
  if (!validName(name, false)) return null;
  if (isIPv4(name)) return null;
  return name;
}

// --- addresses -----------------------------------------------------------------------------------

export function isIPv4(s: string): boolean {
  const parts = s.split('.');
  return parts.length === 4 && parts.every((p) => /^(0|[1-9]\d{0,2})$/.test(p) && Number(p) <= 255);
}

/** Parses an IPv6 address into eight 16-bit groups; null when it is not one. */
function parseIPv6(input: string): number[] | null {
  let s = input.toLowerCase();
  if (!/^[0-9a-f:.]+$/.test(s) || !s.includes(':')) return null;
  if (s.includes('.')) {
    const cut = s.lastIndexOf(':');
    const v4 = s.slice(cut + 1);
    if (!isIPv4(v4)) return null;
    const o = v4.split('.').map(Number);
    s = `${s.slice(0, cut + 1)}${((o[0] << 8) | o[1]).toString(16)}:${((o[2] << 8) | o[3]).toString(16)}`;
  }
  const halves = s.split('::');
  if (halves.length > 2) return null;
  const groups = (part: string) => (part === '' ? [] : part.split(':'));
  const head = groups(halves[0]);
  const tail = halves.length === 2 ? groups(halves[1]) : [];
  if (![...head, ...tail].every((g) => /^[0-9a-f]{1,4}$/.test(g))) return null;
  if (halves.length === 2) {
    if (head.length + tail.length > 7) return null;
    const fill = new Array<string>(8 - head.length - tail.length).fill('0');
    return [...head, ...fill, ...tail].map((g) => parseInt(g, 16));
  }
  return head.length === 8 ? head.map((g) => parseInt(g, 16)) : null;
}

/** RFC 5952 text form: lowercase, no leading zeros, longest zero run (≥2 groups) as `::`. */
function formatIPv6(g: number[]): string {
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) {
    return `::ffff:${g[6] >> 8}.${g[6] & 255}.${g[7] >> 8}.${g[7] & 255}`;
  }
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = g.map((x) => x.toString(16));
  if (bestLen < 2) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

/** Canonical IPv6 text, or null when the input is not an IPv6 address. */
export function canonicalIPv6(input: string): string | null {
  const groups = parseIPv6(input.trim());
  return groups ? formatIPv6(groups) : null;
}

// --- presentation-format tokens (shared with the zone-file parser) -------------------------------

export interface RdataToken {
  /** Value with quotes removed and escapes (`\X`, `\DDD`) decoded. */
  text: string;
  /** Source text as written. */
  raw: string;
  /** The whole token was one quoted string. */
  quoted: boolean;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8');

/**
 * Splits RFC 1035 presentation text into whitespace-separated tokens, honouring double quotes and
 * backslash escapes. Throws a plain Error on an unterminated quote or a bad escape.
 */
export function splitPresentation(src: string): RdataToken[] {
  const tokens: RdataToken[] = [];
  const isSpace = (c: string) => c === ' ' || c === '\t' || c === '\r' || c === '\n';
  let i = 0;
  while (i < src.length) {
    if (isSpace(src[i])) {
      i++;
      continue;
    }
    const start = i;
    const bytes: number[] = [];
    let inQuote = false;
    let quoteMarks = 0;
    while (i < src.length && (inQuote || !isSpace(src[i]))) {
      const ch = src[i];
      if (ch === '"') {
        inQuote = !inQuote;
        quoteMarks++;
        i++;
      } else if (ch === '\\') {
        const digits = /^\d{3}/.exec(src.slice(i + 1, i + 4));
        if (digits) {
          const value = Number(digits[0]);
          if (value > 255) throw new Error(`invalid escape \\${digits[0]}`);
          bytes.push(value);
          i += 4;
        } else {
          const next = src.codePointAt(i + 1);
          if (next === undefined) throw new Error('dangling backslash');
          const c = String.fromCodePoint(next);
          bytes.push(...encoder.encode(c));
          i += 1 + c.length;
        }
      } else {
        const c = String.fromCodePoint(src.codePointAt(i)!);
        bytes.push(...encoder.encode(c));
        i += c.length;
      }
    }
    if (inQuote) throw new Error('unterminated quoted string');
    const raw = src.slice(start, i);
    tokens.push({
      text: decoder.decode(Uint8Array.from(bytes)),
      raw,
      quoted: quoteMarks === 2 && raw.startsWith('"') && raw.endsWith('"'),
    });
  }
  return tokens;
}

/** Escapes `"` and `\` for a quoted presentation string. */
export function escapeQuoted(s: string): string {
  return s.replace(/[\\"]/g, (c) => `\\${c}`);
}

const CERT_TYPES: Record<string, number> = {
  PKIX: 1,
  SPKI: 2,
  PGP: 3,
  IPKIX: 4,
  ISPKI: 5,
  IPGP: 6,
  ACPKIX: 7,
  IACPKIX: 8,
  URI: 253,
  OID: 254,
};

function locFields(tokens: string[]): Record<string, string | number> {
  const t = [...tokens];
  const num = (s: string | undefined, what: string): number => {
    if (s === undefined || !/^-?\d+(\.\d+)?$/.test(s))
      throw new Error(`LOC ${what} is not a number`);
    return Number(s);
  };
  const coordinate = (dirs: string[], what: string) => {
    const parts: number[] = [];
    while (t.length && !dirs.includes(t[0].toUpperCase())) {
      if (parts.length === 3) throw new Error(`LOC ${what} has too many parts`);
      parts.push(num(t.shift(), what));
    }
    const dir = t.shift()?.toUpperCase();
    if (!dir || parts.length === 0) throw new Error(`LOC ${what} is incomplete`);
    return { deg: parts[0], min: parts[1] ?? 0, sec: parts[2] ?? 0, dir };
  };
  const meters = (s: string | undefined, what: string, fallback: number) =>
    s === undefined ? fallback : num(s.replace(/m$/i, ''), what);
  const lat = coordinate(['N', 'S'], 'latitude');
  const long = coordinate(['E', 'W'], 'longitude');
  if (t.length === 0) throw new Error('LOC altitude is missing');
  const altitude = meters(t.shift(), 'altitude', 0);
  const size = meters(t.shift(), 'size', 1);
  const horz = meters(t.shift(), 'horizontal precision', 10000);
  const vert = meters(t.shift(), 'vertical precision', 10);
  if (t.length) throw new Error('LOC has trailing fields');
  return {
    lat_degrees: lat.deg,
    lat_minutes: lat.min,
    lat_seconds: lat.sec,
    lat_direction: lat.dir,
    long_degrees: long.deg,
    long_minutes: long.min,
    long_seconds: long.sec,
    long_direction: long.dir,
    altitude,
    size,
    precision_horz: horz,
    precision_vert: vert,
  };
}

/**
 * Reads the presentation-format RDATA of a data-carrying type (as in a zone file, priority
 * included for SRV and URI) into the API's `data` shape. `target` resolves domain-name fields
 * (relative names, `@`) and returns them without a trailing dot; `.` is passed through.
 * Field values are not range-checked here; canonicalizeRecord does that. Throws plain Errors.
 */
export function dataFromTokens(
  type: DataType,
  tokens: RdataToken[],
  target: (name: string) => string,
): { data: Record<string, string | number>; priority?: number } {
  const text = tokens.map((t) => t.text);
  const need = (n: number, shape: string) => {
    if (text.length < n) throw new Error(`${type} data needs ${shape}`);
  };
  const exact = (n: number, shape: string) => {
    if (text.length !== n) throw new Error(`${type} data needs exactly ${shape}`);
  };
  const int = (s: string, field: string) => {
    if (!/^\d+$/.test(s)) throw new Error(`${type} ${field} "${s}" is not an integer`);
    return Number(s);
  };
  const rest = (from: number) => text.slice(from).join('');
  const name = (s: string) => (s === '.' ? '.' : target(s));
  switch (type) {
    case 'CAA':
      need(3, 'flags, tag and value');
      return {
        data: { flags: int(text[0], 'flags'), tag: text[1], value: text.slice(2).join(' ') },
      };
    case 'CERT': {
      need(4, 'type, key tag, algorithm and certificate');
      const certType = CERT_TYPES[text[0].toUpperCase()] ?? int(text[0], 'type');
      return {
        data: {
          type: certType,
          key_tag: int(text[1], 'key_tag'),
          algorithm: int(text[2], 'algorithm'),
          certificate: rest(3),
        },
      };
    }
    case 'DNSKEY':
      need(4, 'flags, protocol, algorithm and public key');
      return {
        data: {
          flags: int(text[0], 'flags'),
          protocol: int(text[1], 'protocol'),
          algorithm: int(text[2], 'algorithm'),
          public_key: rest(3),
        },
      };
    case 'DS':
      need(4, 'key tag, algorithm, digest type and digest');
      return {
        data: {
          key_tag: int(text[0], 'key_tag'),
          algorithm: int(text[1], 'algorithm'),
          digest_type: int(text[2], 'digest_type'),
          digest: rest(3),
        },
      };
    case 'HTTPS':
    case 'SVCB':
      need(2, 'priority and target');
      return {
        data: {
          priority: int(text[0], 'priority'),
          target: name(text[1]),
          value: tokens
            .slice(2)
            .map((t) => t.raw)
            .join(' '),
        },
      };
    case 'LOC':
      return { data: locFields(text) };
    case 'NAPTR':
      exact(6, 'order, preference, flags, service, regex and replacement');
      return {
        data: {
          order: int(text[0], 'order'),
          preference: int(text[1], 'preference'),
          flags: text[2],
          service: text[3],
          regex: text[4],
          replacement: name(text[5]),
        },
      };
    case 'SMIMEA':
    case 'TLSA':
      need(4, 'usage, selector, matching type and certificate');
      return {
        data: {
          usage: int(text[0], 'usage'),
          selector: int(text[1], 'selector'),
          matching_type: int(text[2], 'matching_type'),
          certificate: rest(3),
        },
      };
    case 'SRV': {
      exact(4, 'priority, weight, port and target');
      const priority = int(text[0], 'priority');
      return {
        data: {
          priority,
          weight: int(text[1], 'weight'),
          port: int(text[2], 'port'),
          target: name(text[3]),
        },
        priority,
      };
    }
    case 'SSHFP':
      need(3, 'algorithm, type and fingerprint');
      return {
        data: {
          algorithm: int(text[0], 'algorithm'),
          type: int(text[1], 'type'),
          fingerprint: rest(2),
        },
      };
    case 'URI':
      exact(3, 'priority, weight and target');
      return {
        data: { weight: int(text[1], 'weight'), target: text[2] },
        priority: int(text[0], 'priority'),
      };
  }
}

// --- canonicalisation ----------------------------------------------------------------------------

const TAG_NAME = /^[a-z0-9_-]+$/;

function invalid(message: string): ApiError {
  return apiError('dns_validation', message);
}

function checkPriority(priority: unknown, required: boolean): number | undefined {
  if (priority === undefined || priority === null) {
    if (required) throw apiError('dns_priority_required');
    return undefined;
  }
  if (
    typeof priority !== 'number' ||
    !Number.isInteger(priority) ||
    priority < 0 ||
    priority > 65535
  ) {
    throw apiError('dns_invalid_priority');
  }
  return priority;
}

function hostTarget(type: string, value: string, field: string): string {
  const host = normalizeHostname(value);
  if (!host)
    throw apiError('dns_invalid_target', type, `${field} must be a host name, got "${value}"`);
  return host;
}

/** `.` (no target) or a host name. */
function optionalTarget(type: string, value: string, field: string): string {
  return value.trim() === '.' ? '.' : hostTarget(type, value, field);
}

function base64(type: string, value: string, field: string): string {
  const s = value.replace(/\s+/g, '');
  if (!s || s.length % 4 !== 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(s)) {
    throw invalid(`${field} of a ${type} record must be base64`);
  }
  return s;
}

function hex(type: string, value: string, field: string): string {
  const s = value.replace(/\s+/g, '').toLowerCase();
  if (!s || s.length % 2 !== 0 || !/^[0-9a-f]+$/.test(s)) {
    throw invalid(`${field} of a ${type} record must be hexadecimal`);
  }
  return s;
}

function parseData(type: DataType, raw: unknown): Record<string, string | number> {
  const result = (DATA_SCHEMAS[type] as z.ZodType).safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0];
    const path = ['data', ...issue.path.map(String)].join('.');
    throw invalid(`${path}: ${issue.message}`);
  }
  return result.data as Record<string, string | number>;
}

function ensureUnderscore(label: string): string {
  return label.startsWith('_') ? label : `_${label}`;
}

interface DataOutcome {
  content: string;
  data: Record<string, string | number>;
  priority?: number;
}

/** Validates a data-carrying record and renders its `content` the way the API answers it. */
function canonicalData(type: DataType, input: DnsRecordInput, name: string): DataOutcome {
  let raw: Record<string, unknown>;
  let priority: unknown = input.priority;
  if (input.data !== undefined) {
    raw = input.data;
  } else if (input.content !== undefined && input.content.trim() !== '') {
    // Content-only form: read the presentation text (SRV and URI omit the priority there).
    let tokens: RdataToken[];
    try {
      tokens = splitPresentation(input.content);
      if ((type === 'SRV' && tokens.length === 3) || (type === 'URI' && tokens.length === 2)) {
        const p = checkPriority(input.priority, true)!;
        tokens.unshift({ text: String(p), raw: String(p), quoted: false });
      }
      const parsed = dataFromTokens(type, tokens, (n) => n);
      raw = parsed.data;
      priority = parsed.priority ?? priority;
    } catch (err) {
      if (err instanceof ApiError) throw err;
      throw invalid(`content: ${(err as Error).message}`);
    }
  } else {
    throw invalid(`data is a required field for ${type} records.`);
  }

  const d = parseData(type, raw);
  const n = (k: string) => d[k] as number;
  const s = (k: string) => d[k] as string;
  switch (type) {
    case 'CAA': {
      const data = { flags: n('flags'), tag: s('tag'), value: s('value') };
      return { data, content: `${data.flags} ${data.tag} "${escapeQuoted(data.value)}"` };
    }
    case 'CERT': {
      const data = {
        type: n('type'),
        key_tag: n('key_tag'),
        algorithm: n('algorithm'),
        certificate: base64(type, s('certificate'), 'data.certificate'),
      };
      return {
        data,
        content: `${data.type} ${data.key_tag} ${data.algorithm} ${data.certificate}`,
      };
    }
    case 'DNSKEY': {
      const data = {
        flags: n('flags'),
        protocol: n('protocol'),
        algorithm: n('algorithm'),
        public_key: base64(type, s('public_key'), 'data.public_key'),
      };
      return {
        data,
        content: `${data.flags} ${data.protocol} ${data.algorithm} ${data.public_key}`,
      };
    }
    case 'DS': {
      const data = {
        key_tag: n('key_tag'),
        algorithm: n('algorithm'),
        digest_type: n('digest_type'),
        digest: hex(type, s('digest'), 'data.digest'),
      };
      return {
        data,
        content: `${data.key_tag} ${data.algorithm} ${data.digest_type} ${data.digest}`,
      };
    }
    case 'HTTPS':
    case 'SVCB': {
      const data = {
        priority: n('priority'),
        target: optionalTarget(type, s('target'), 'data.target'),
        value: s('value').trim(),
      };
      if (/[\r\n]/.test(data.value)) throw invalid('data.value must be a single line');
      const content = `${data.priority} ${data.target}${data.value ? ` ${data.value}` : ''}`;
      return { data, content };
    }
    case 'LOC': {
      const data = {
        lat_degrees: n('lat_degrees'),
        lat_minutes: n('lat_minutes'),
        lat_seconds: n('lat_seconds'),
        lat_direction: s('lat_direction'),
        long_degrees: n('long_degrees'),
        long_minutes: n('long_minutes'),
        long_seconds: n('long_seconds'),
        long_direction: s('long_direction'),
        altitude: n('altitude'),
        size: n('size'),
        precision_horz: n('precision_horz'),
        precision_vert: n('precision_vert'),
      };
      const content =
        `${data.lat_degrees} ${data.lat_minutes} ${data.lat_seconds} ${data.lat_direction} ` +
        `${data.long_degrees} ${data.long_minutes} ${data.long_seconds} ${data.long_direction} ` +
        `${data.altitude}m ${data.size}m ${data.precision_horz}m ${data.precision_vert}m`;
      return { data, content };
    }
    case 'NAPTR': {
      const data = {
        order: n('order'),
        preference: n('preference'),
        flags: s('flags'),
        service: s('service'),
        regex: s('regex'),
        replacement: optionalTarget(type, s('replacement'), 'data.replacement'),
      };
      const q = (v: string) => `"${escapeQuoted(v)}"`;
      return {
        data,
        content: `${data.order} ${data.preference} ${q(data.flags)} ${q(data.service)} ${q(data.regex)} ${data.replacement}`,
      };
    }
    case 'SMIMEA':
    case 'TLSA': {
      const data = {
        usage: n('usage'),
        selector: n('selector'),
        matching_type: n('matching_type'),
        certificate: hex(type, s('certificate'), 'data.certificate'),
      };
      return {
        data,
        content: `${data.usage} ${data.selector} ${data.matching_type} ${data.certificate}`,
      };
    }
    case 'SRV': {
      const labels = name.split('.');
      if (labels.length < 3 || !labels[0].startsWith('_') || !labels[1].startsWith('_')) {
        throw apiError(
          'dns_invalid_name',
          `SRV record name "${name}" must look like _service._proto.<name>`,
        );
      }
      const p = checkPriority(d.priority ?? priority, true)!;
      const data = {
        priority: p,
        weight: n('weight'),
        port: n('port'),
        target: optionalTarget(type, s('target'), 'data.target'),
      };
      return { data, priority: p, content: `${data.weight} ${data.port} ${data.target}` };
    }
    case 'SSHFP': {
      const data = {
        algorithm: n('algorithm'),
        type: n('type'),
        fingerprint: hex(type, s('fingerprint'), 'data.fingerprint'),
      };
      return { data, content: `${data.algorithm} ${data.type} ${data.fingerprint}` };
    }
    case 'URI': {
      const p = checkPriority(priority ?? (raw as { priority?: unknown }).priority, true)!;
      const data = { weight: n('weight'), target: s('target') };
      if (data.target === '' || /[\r\n]/.test(data.target)) {
        throw invalid('data.target of a URI record must be a non-empty single line');
      }
      return { data, priority: p, content: `${data.weight} "${escapeQuoted(data.target)}"` };
    }
  }
}

function canonicalContent(
  type: RecordType,
  input: DnsRecordInput,
): { content: string; priority?: number } {
  const raw = input.content;
  if (raw === undefined || (type !== 'TXT' && raw.trim() === '') || raw === '') {
    throw invalid(`content is a required field for ${type} records.`);
  }
  const value = raw.trim();
  switch (type) {
    case 'A':
      if (!isIPv4(value)) throw apiError('dns_invalid_ipv4');
      return { content: value };
    case 'AAAA': {
      const v6 = canonicalIPv6(value);
      if (!v6) throw apiError('dns_invalid_ipv6');
      return { content: v6 };
    }
    case 'CNAME':
    case 'NS':
    case 'PTR':
      return { content: hostTarget(type, value, 'content') };
    case 'MX': {
      const priority = checkPriority(input.priority, true);
      return { content: hostTarget(type, value, 'content'), priority };
    }
    case 'TXT':
      if ([...raw].length > MAX_TXT_LENGTH) {
        throw invalid(`content of a TXT record must be ${MAX_TXT_LENGTH} characters or less.`);
      }
      return { content: raw };
    case 'OPENPGPKEY':
      return { content: base64(type, value, 'content') };
    default:
      throw invalid(`type ${type} is not supported`);
  }
}

function canonicalComment(comment: string | null | undefined): string | null {
  if (comment === undefined || comment === null || comment === '') return null;
  if (/[\r\n]/.test(comment)) throw invalid('comment must not contain line breaks.');
  if ([...comment].length > MAX_COMMENT_LENGTH) {
    throw invalid(`comment must be ${MAX_COMMENT_LENGTH} characters or less.`);
  }
  return comment;
}

function canonicalTags(tags: string[] | undefined): string[] {
  const out: string[] = [];
  for (const tag of tags ?? []) {
    const colon = tag.indexOf(':');
    const tagName = (colon < 0 ? tag : tag.slice(0, colon)).toLowerCase();
    const value = colon < 0 ? '' : tag.slice(colon + 1);
    if (!TAG_NAME.test(tagName)) {
      throw invalid(`tags: "${tag}" must look like name:value (name: letters, digits, - and _)`);
    }
    if (tagName.startsWith('cf-')) throw invalid(`tags: tag names starting with cf- are reserved`);
    if (/[\r\n]/.test(value))
      throw invalid(`tags: the value of "${tagName}" must be a single line`);
    const normal = `${tagName}:${value}`;
    if (!out.includes(normal)) out.push(normal);
  }
  return out;
}

function canonicalSettings(type: RecordType, settings: RecordSettings | undefined): RecordSettings {
  const out: RecordSettings = {};
  if (settings?.ipv4_only) out.ipv4_only = true;
  if (settings?.ipv6_only) out.ipv6_only = true;
  if (settings?.flatten_cname && type === 'CNAME') out.flatten_cname = true;
  if (out.ipv4_only && out.ipv6_only) {
    throw invalid('settings: ipv4_only and ipv6_only cannot both be true.');
  }
  return out;
}

/**
 * Validates a create/PUT body against the zone and returns the canonical record.
 * Throws ApiError (400) naming the field at fault.
 */
export function canonicalizeRecord(input: DnsRecordInput, zoneName: string): CanonicalRecord {
  const zone = normalizeZoneName(zoneName);
  const type = input.type;

  let nameInput = input.name;
  const legacy = input.data as { service?: unknown; proto?: unknown; name?: unknown } | undefined;
  if (
    type === 'SRV' &&
    legacy &&
    typeof legacy.service === 'string' &&
    typeof legacy.proto === 'string'
  ) {
    const base = completeName(typeof legacy.name === 'string' ? legacy.name : input.name, zone);
    nameInput = `${ensureUnderscore(legacy.service)}.${ensureUnderscore(legacy.proto)}.${base}.`;
  }
  const name = completeName(nameInput, zone);

  let content: string;
  let data: Record<string, string | number> | undefined;
  let priority: number | undefined;
  if (isDataType(type)) {
    ({ content, data, priority } = canonicalData(type, input, name));
  } else {
    ({ content, priority } = canonicalContent(type, input));
  }

  const ttl = input.ttl ?? 1;
  if (!(ttl === 1 || (Number.isInteger(ttl) && ttl >= 60 && ttl <= 86400))) {
    throw apiError('dns_invalid_ttl');
  }

  const proxiable = PROXIABLE_TYPES.has(type);
  const proxied = input.proxied ?? false;
  if (proxied && !proxiable) throw apiError('dns_type_not_proxiable');

  const record: CanonicalRecord = {
    type,
    name,
    content,
    // Proxied records are always answered with the automatic TTL.
    ttl: proxied ? 1 : ttl,
    proxied,
    proxiable,
    comment: canonicalComment(input.comment),
    tags: canonicalTags(input.tags),
    settings: canonicalSettings(type, input.settings),
  };
  if (data !== undefined) record.data = data;
  if (priority !== undefined) record.priority = priority;
  if ((type === 'A' || type === 'AAAA') && input.private_routing) record.private_routing = true;
  return record;
}

/**
 * Applies a PATCH body to a stored record and re-validates the result. Absent fields keep their
 * stored value; `comment: null` clears the comment; `settings` and same-type `data` are merged.
 */
export function applyPatch(
  existing: CanonicalRecord,
  patch: DnsRecordPatch,
  zoneName: string,
): CanonicalRecord {
  const type = patch.type ?? existing.type;
  const typeChanged = type !== existing.type;
  const input: DnsRecordInput = {
    type,
    name: patch.name ?? existing.name,
    ttl: patch.ttl ?? existing.ttl,
    proxied: patch.proxied ?? (PROXIABLE_TYPES.has(type) ? existing.proxied : false),
    comment: patch.comment === undefined ? existing.comment : patch.comment,
    tags: patch.tags ?? existing.tags,
    settings: { ...existing.settings, ...(patch.settings ?? {}) },
    priority: patch.priority ?? existing.priority,
  };
  const privateRouting = patch.private_routing ?? existing.private_routing;
  if (privateRouting !== undefined) input.private_routing = privateRouting;

  if (patch.data !== undefined) {
    input.data = !typeChanged && existing.data ? { ...existing.data, ...patch.data } : patch.data;
  } else if (patch.content !== undefined) {
    input.content = patch.content;
  } else if (!typeChanged && existing.data) {
    input.data = { ...existing.data };
  } else if (!isDataType(type)) {
    input.content = existing.content;
  }
  if (type === 'SRV' && patch.priority !== undefined && input.data) {
    input.data = { ...input.data, priority: patch.priority };
  }
  return canonicalizeRecord(input, zoneName);
}

// --- conflicts -----------------------------------------------------------------------------------

/** Same RR data: type, name, content (which renders `data`) and priority. */
export function sameRecordData(a: CanonicalRecord, b: CanonicalRecord): boolean {
  return (
    a.type === b.type && a.name === b.name && a.content === b.content && a.priority === b.priority
  );
}

/**
 * Checks a candidate against the other records of its zone (exclude the record being updated).
 * Several records of one type may share a name (round-robin A, several MX); a CNAME may not share
 * its name with anything. When `zoneName` is given, a delegation (NS below the apex) may not share
 * its name with records of other types either.
 */
export function findConflict(
  existing: CanonicalRecord[],
  candidate: CanonicalRecord,
  zoneName?: string,
): ApiError | null {
  const sameName = existing.filter((r) => r.name === candidate.name);
  if (sameName.some((r) => sameRecordData(r, candidate))) return apiError('dns_identical');
  if (candidate.type === 'CNAME' && sameName.length > 0) {
    return apiError('dns_cname_conflict', candidate.name);
  }
  if (sameName.some((r) => r.type === 'CNAME')) return apiError('dns_cname_exists', candidate.name);
  if (zoneName !== undefined && candidate.name !== normalizeZoneName(zoneName)) {
    const clash =
      candidate.type === 'NS'
        ? sameName.some((r) => r.type !== 'NS')
        : sameName.some((r) => r.type === 'NS');
    if (clash) return apiError('dns_ns_conflict', candidate.name);
  }
  return null;
}
