/**
 * BIND / RFC 1035 master-file export and import for a zone's records.
 *
 * Record attributes travel in the trailing comment of each record line, as the platform does:
 * `; <comment> cf_tags=<tag>,<tag>:<value>,cf-proxied:true`. On export every proxiable record
 * carries `cf-proxied:true|false` and flattened CNAMEs carry `cf-flatten-cname`.
 */
import { ApiError } from '../../core/errors.ts';
import {
  canonicalizeRecord,
  dataFromTokens,
  escapeQuoted,
  normalizeZoneName,
  PROXIABLE_TYPES,
  splitPresentation,
  type CanonicalRecord,
  type RdataToken,
} from './record-rules.ts';
import { isDataType, isRecordType, RECORD_TYPES, type DnsRecordInput } from './schemas.ts';

export interface ZoneFileError {
  line: number;
  message: string;
}

export interface ParseZoneFileOptions {
  /** Proxied status for proxiable records that carry no `cf-proxied` tag (default false). */
  proxied?: boolean;
}

// --- export --------------------------------------------------------------------------------------

const SOA_TIMERS = '10000 2400 604800 1800';
const TYPE_ORDER = [...RECORD_TYPES].sort();

function absolute(name: string): string {
  return name === '.' ? '.' : `${name}.`;
}

/** TXT content as quoted character-strings of at most 255 bytes each. */
function txtStrings(content: string): string {
  const chunks: string[] = [];
  let current = '';
  let size = 0;
  for (const ch of content) {
    const bytes = Buffer.byteLength(ch);
    if (size + bytes > 255) {
      chunks.push(current);
      current = '';
      size = 0;
    }
    const code = ch.codePointAt(0)!;
    if (ch === '"' || ch === '\\') current += `\\${ch}`;
    else if (code < 0x20 || code === 0x7f) current += `\\${String(code).padStart(3, '0')}`;
    else current += ch;
    size += bytes;
  }
  chunks.push(current);
  return chunks.map((c) => `"${c}"`).join(' ');
}

function rdata(r: CanonicalRecord): string {
  const d = r.data ?? {};
  switch (r.type) {
    case 'CNAME':
    case 'NS':
    case 'PTR':
      return absolute(r.content);
    case 'MX':
      return `${r.priority} ${absolute(r.content)}`;
    case 'TXT':
      return txtStrings(r.content);
    case 'SRV':
      return `${d.priority} ${d.weight} ${d.port} ${absolute(String(d.target))}`;
    case 'URI':
      return `${r.priority} ${d.weight} "${escapeQuoted(String(d.target))}"`;
    case 'HTTPS':
    case 'SVCB':
      return `${d.priority} ${absolute(String(d.target))}${d.value ? ` ${d.value}` : ''}`;
    case 'NAPTR': {
      const q = (v: unknown) => `"${escapeQuoted(String(v))}"`;
      return `${d.order} ${d.preference} ${q(d.flags)} ${q(d.service)} ${q(d.regex)} ${absolute(String(d.replacement))}`;
    }
    default:
      // A, AAAA, OPENPGPKEY and the data types whose content is already presentation text.
      return r.content;
  }
}

function formatTag(tag: string): string {
  const colon = tag.indexOf(':');
  if (colon < 0) return tag;
  const name = tag.slice(0, colon);
  const value = tag.slice(colon + 1);
  const needsQuotes = /["=,\\]/.test(value) || value !== value.trim();
  return `${name}:${needsQuotes ? JSON.stringify(value) : value}`;
}

function attributes(r: CanonicalRecord): string {
  const tags = r.tags.map(formatTag);
  if (r.proxiable) tags.push(`cf-proxied:${r.proxied}`);
  if (r.settings.flatten_cname) tags.push('cf-flatten-cname');
  const comment = r.comment ?? '';
  if (tags.length === 0) {
    if (!comment) return '';
    return ` ; ${comment}${comment.includes('cf_tags=') ? ' cf_tags=' : ''}`;
  }
  return ` ; ${comment ? `${comment} ` : ''}cf_tags=${tags.join(',')}`;
}

function pad(n: number): string {
  return String(n).padStart(2, '0');
}

/** Writes the zone's records as an RFC 1035 master file. */
export function exportZoneFile(zoneName: string, records: CanonicalRecord[], now: Date): string {
  const zone = normalizeZoneName(zoneName);
  const stamp =
    `${now.getUTCFullYear()}-${pad(now.getUTCMonth() + 1)}-${pad(now.getUTCDate())} ` +
    `${pad(now.getUTCHours())}:${pad(now.getUTCMinutes())}:${pad(now.getUTCSeconds())}`;
  const serial = Math.floor(now.getTime() / 1000) % 2 ** 32;
  const out: string[] = [
    ';;',
    `;; Domain:     ${zone}.`,
    `;; Exported:   ${stamp}`,
    ';;',
    ';; A snapshot of the records of this zone, for archiving and migration.',
    ';; Before serving it from another name server, replace the SOA record and the',
    ';; NS records with the ones of that server.',
    ';;',
    ';; A TTL of 1 means "automatic". The trailing comment of a record holds its',
    ';; comment and tags; cf-proxied:true marks records served through the proxy.',
    ';;',
    '',
    `$ORIGIN ${zone}.`,
    '$TTL 3600',
    '',
    ';; SOA Record',
    `${zone}.\t3600\tIN\tSOA\tns.${zone}. hostmaster.${zone}. ${serial} ${SOA_TIMERS}`,
  ];
  for (const type of TYPE_ORDER) {
    const group = records
      .filter((r) => r.type === type)
      .sort((a, b) => (a.name === b.name ? cmp(a.content, b.content) : cmp(a.name, b.name)));
    if (group.length === 0) continue;
    out.push('', `;; ${type} Records`);
    for (const r of group) {
      out.push(`${r.name}.\t${r.ttl}\tIN\t${r.type}\t${rdata(r)}${attributes(r)}`);
    }
  }
  return `${out.join('\n')}\n`;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

// --- import: lexing ------------------------------------------------------------------------------

interface Entry {
  /** Line where the entry starts. */
  line: number;
  /** Entry text with comments removed and parentheses turned into spaces. */
  text: string;
  /** The entry's first line began with blank space: the owner is the previous one. */
  ownerOmitted: boolean;
  /** Comment that follows the entry on its last line. */
  comment: string | null;
}

/** Splits master-file text into logical entries (joining parenthesised continuation lines). */
function lex(src: string, errors: ZoneFileError[]): Entry[] {
  const entries: Entry[] = [];
  let buf = '';
  let depth = 0;
  let inQuote = false;
  let line = 1;
  let startLine = 1;
  let ownerOmitted = false;
  let comment: string | null = null;
  let broken = false;
  let atLineStart = true;

  const finish = () => {
    if (depth > 0) {
      errors.push({ line: startLine, message: 'unbalanced parentheses: "(" is never closed' });
      broken = true;
    }
    if (!broken && buf.trim() !== '') {
      entries.push({ line: startLine, text: buf, ownerOmitted, comment });
    }
    buf = '';
    comment = null;
    depth = 0;
    broken = false;
  };

  for (let i = 0; i < src.length; i++) {
    const ch = src[i];
    if (atLineStart && depth === 0 && buf.trim() === '') {
      startLine = line;
      ownerOmitted = ch === ' ' || ch === '\t';
      buf = '';
    }
    atLineStart = false;

    if (inQuote) {
      if (ch === '\\' && i + 1 < src.length && src[i + 1] !== '\n') {
        buf += ch + src[++i];
        continue;
      }
      if (ch === '"') {
        inQuote = false;
        buf += ch;
        continue;
      }
      if (ch !== '\n') {
        buf += ch;
        continue;
      }
      errors.push({ line, message: 'unterminated quoted string' });
      inQuote = false;
      broken = true;
      // fall through to the newline handling below
    }

    switch (ch) {
      case '\\':
        if (i + 1 < src.length && src[i + 1] !== '\n') buf += ch + src[++i];
        else buf += ch;
        break;
      case '"':
        inQuote = true;
        buf += ch;
        break;
      case ';': {
        let end = src.indexOf('\n', i);
        if (end < 0) end = src.length;
        if (depth === 0) comment = src.slice(i + 1, end).replace(/\r$/, '');
        i = end - 1;
        break;
      }
      case '(':
        depth++;
        buf += ' ';
        break;
      case ')':
        if (depth === 0) {
          errors.push({ line, message: 'unbalanced parentheses: ")" without "("' });
          broken = true;
        } else {
          depth--;
        }
        buf += ' ';
        break;
      case '\n':
        line++;
        atLineStart = true;
        if (depth === 0) finish();
        else buf += ' ';
        break;
      case '\r':
        buf += ' ';
        break;
      default:
        buf += ch;
    }
  }
  if (inQuote) {
    errors.push({ line, message: 'unterminated quoted string' });
    broken = true;
  }
  finish();
  return entries;
}

// --- import: record attributes -------------------------------------------------------------------

interface Attributes {
  comment: string | null;
  tags: string[];
  proxied?: boolean;
  flattenCname?: boolean;
}

/** Parses `a,b:c,d:"quoted, value"`; null when the text is not a tag list. */
function parseTagList(text: string): { name: string; value: string | null }[] | null {
  const s = text.trim();
  const items: { name: string; value: string | null }[] = [];
  if (s === '') return items;
  let i = 0;
  for (;;) {
    while (s[i] === ' ' || s[i] === '\t') i++;
    let j = i;
    while (j < s.length && s[j] !== ':' && s[j] !== ',') j++;
    const name = s.slice(i, j).trim();
    if (!/^[A-Za-z0-9_-]+$/.test(name)) return null;
    i = j;
    let value: string | null = null;
    if (s[i] === ':') {
      i++;
      while (s[i] === ' ' || s[i] === '\t') i++;
      if (s[i] === '"') {
        let k = i + 1;
        while (k < s.length && s[k] !== '"') k += s[k] === '\\' ? 2 : 1;
        if (k >= s.length) return null;
        try {
          value = JSON.parse(s.slice(i, k + 1)) as string;
        } catch {
          return null;
        }
        i = k + 1;
        while (s[i] === ' ' || s[i] === '\t') i++;
        if (i < s.length && s[i] !== ',') return null;
      } else {
        let k = i;
        while (k < s.length && s[k] !== ',') k++;
        value = s.slice(i, k).trim();
        i = k;
      }
    }
    items.push({ name, value });
    if (i >= s.length) return items;
    i++; // the comma
  }
}

function parseAttributes(raw: string | null): Attributes {
  const out: Attributes = { comment: null, tags: [] };
  if (raw === null) return out;
  const text = raw.trim();
  let commentText = text;
  // The tag list follows the last `cf_tags=` that starts a well-formed list.
  for (let at = text.lastIndexOf('cf_tags='); at >= 0; at = text.lastIndexOf('cf_tags=', at - 1)) {
    const list = parseTagList(text.slice(at + 'cf_tags='.length));
    if (list !== null) {
      commentText = text.slice(0, at).trim();
      for (const { name, value } of list) {
        const lower = name.toLowerCase();
        if (lower === 'cf-proxied') out.proxied = value?.toLowerCase() === 'true';
        else if (lower === 'cf-flatten-cname')
          out.flattenCname = value === null || value === 'true';
        else if (!lower.startsWith('cf-')) out.tags.push(`${lower}:${value ?? ''}`);
      }
      break;
    }
    if (at === 0) break;
  }
  out.comment = commentText === '' ? null : commentText;
  return out;
}

// --- import: records -----------------------------------------------------------------------------

const TTL_UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 };

/** `3600`, or BIND units such as `1h30m`; undefined when the token is not a TTL. */
function parseTtl(token: string): number | undefined {
  if (/^\d+$/.test(token)) return Number(token);
  if (!/^(\d+[smhdw])+$/i.test(token)) return undefined;
  let total = 0;
  for (const m of token.toLowerCase().matchAll(/(\d+)([smhdw])/g)) {
    total += Number(m[1]) * TTL_UNITS[m[2]];
  }
  return total;
}

/** Resolves a domain name in the file against the current origin; no trailing dot. */
function resolve(name: string, origin: string): string {
  if (name === '@') return origin;
  if (name.endsWith('.')) return name.slice(0, -1).toLowerCase();
  return (origin === '' ? name : `${name}.${origin}`).toLowerCase();
}

class LineError extends Error {}

function one(type: string, rd: RdataToken[]): string {
  if (rd.length !== 1) throw new LineError(`${type} record needs exactly one value`);
  return rd[0].text;
}

/** Builds the API body for one record line. */
function recordInput(
  type: string,
  owner: string,
  ttl: number,
  rd: RdataToken[],
  origin: string,
): DnsRecordInput {
  if (!isRecordType(type)) throw new LineError(`unsupported record type ${type}`);
  const input: DnsRecordInput = { type, name: `${owner}.`, ttl, proxied: false };
  const target = (n: string) => resolve(n, origin);
  switch (type) {
    case 'A':
    case 'AAAA':
      input.content = one(type, rd);
      break;
    case 'CNAME':
    case 'NS':
    case 'PTR':
      input.content = target(one(type, rd));
      break;
    case 'MX': {
      if (rd.length !== 2) throw new LineError('MX record needs a preference and an exchange');
      if (!/^\d+$/.test(rd[0].text))
        throw new LineError(`MX preference "${rd[0].text}" is not an integer`);
      input.priority = Number(rd[0].text);
      input.content = target(rd[1].text);
      break;
    }
    case 'TXT':
      if (rd.length === 0) throw new LineError('TXT record needs at least one string');
      input.content = rd.map((t) => t.text).join('');
      break;
    case 'OPENPGPKEY':
      if (rd.length === 0) throw new LineError('OPENPGPKEY record needs a key');
      input.content = rd.map((t) => t.text).join('');
      break;
    default: {
      if (!isDataType(type)) throw new LineError(`unsupported record type ${type}`);
      try {
        const { data, priority } = dataFromTokens(type, rd, target);
        input.data = data;
        if (priority !== undefined) input.priority = priority;
      } catch (err) {
        throw new LineError((err as Error).message);
      }
    }
  }
  return input;
}

/**
 * Reads an RFC 1035 master file into API record bodies. Each body has passed the same validation
 * as a create request; anything that could not be read or validated is reported with its line
 * number instead (the SOA record is skipped: the zone owns it).
 */
export function parseZoneFile(
  text: string,
  zoneName: string,
  options: ParseZoneFileOptions = {},
): { records: DnsRecordInput[]; errors: ZoneFileError[] } {
  const zone = normalizeZoneName(zoneName);
  const errors: ZoneFileError[] = [];
  const records: DnsRecordInput[] = [];
  let origin = zone;
  let defaultTtl: number | undefined;
  let lastTtl: number | undefined;
  let lastOwner: string | undefined;

  for (const entry of lex(text, errors)) {
    const fail = (message: string) => errors.push({ line: entry.line, message });
    let tokens: RdataToken[];
    try {
      tokens = splitPresentation(entry.text);
    } catch (err) {
      fail((err as Error).message);
      continue;
    }
    if (tokens.length === 0) continue;

    if (!entry.ownerOmitted && tokens[0].raw.startsWith('$')) {
      const directive = tokens[0].raw.toUpperCase();
      if (directive === '$ORIGIN') {
        if (tokens.length !== 2) fail('$ORIGIN needs exactly one domain name');
        else origin = resolve(tokens[1].text, origin);
      } else if (directive === '$TTL') {
        const ttl = tokens.length === 2 ? parseTtl(tokens[1].text) : undefined;
        if (ttl === undefined) fail('$TTL needs one TTL value');
        else defaultTtl = ttl;
      } else if (directive === '$INCLUDE') {
        fail('$INCLUDE directive not allowed');
      } else {
        fail(`unsupported directive ${tokens[0].raw}`);
      }
      continue;
    }

    try {
      let idx = 0;
      let owner: string;
      if (entry.ownerOmitted) {
        if (lastOwner === undefined)
          throw new LineError('record has no owner name and none precedes it');
        owner = lastOwner;
      } else {
        owner = resolve(tokens[0].text, origin);
        idx = 1;
      }
      lastOwner = owner;

      let ttl: number | undefined;
      let sawClass = false;
      while (idx < tokens.length && !tokens[idx].quoted) {
        const t = tokens[idx].text;
        const asTtl = ttl === undefined ? parseTtl(t) : undefined;
        if (asTtl !== undefined) {
          ttl = asTtl;
        } else if (!sawClass && /^(IN|CH|HS|CS)$/i.test(t)) {
          if (t.toUpperCase() !== 'IN')
            throw new LineError(`class ${t} is not supported (only IN)`);
          sawClass = true;
        } else {
          break;
        }
        idx++;
      }
      if (idx >= tokens.length) throw new LineError('record has no type');
      const type = tokens[idx].text.toUpperCase();
      if (ttl !== undefined) lastTtl = ttl;
      if (type === 'SOA') continue;

      const input = recordInput(
        type,
        owner,
        ttl ?? defaultTtl ?? lastTtl ?? 1,
        tokens.slice(idx + 1),
        origin,
      );
      const attrs = parseAttributes(entry.comment);
      if (attrs.comment !== null) input.comment = attrs.comment;
      if (attrs.tags.length) input.tags = attrs.tags;
      if (attrs.flattenCname) input.settings = { flatten_cname: true };
      input.proxied = PROXIABLE_TYPES.has(type)
        ? (attrs.proxied ?? options.proxied ?? false)
        : false;

      canonicalizeRecord(input, zone);
      records.push(input);
    } catch (err) {
      if (err instanceof LineError) fail(err.message);
      else if (err instanceof ApiError) fail(err.errors[0].message);
      else throw err;
    }
  }
  return { records, errors };
}
