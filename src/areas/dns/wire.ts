/**
 * DNS wire format (RFC 1035 §4, EDNS0 from RFC 6891): a message encoder and decoder with no
 * dependencies. Names are presentation strings without the trailing dot (the root is `''`), with
 * `\.`, `\\` and `\DDD` escapes for bytes that are not plain label characters.
 *
 * Encoding compresses names (RFC 1035 §4.1.4) in owner names and in the RDATA of the RFC 1035
 * types (NS, CNAME, PTR, MX, SOA) and never in newer types (SRV, NAPTR, …) as RFC 3597 requires.
 * With `maxSize` the encoder truncates: answer or authority records that do not fit are dropped and
 * TC is set; additional records that do not fit are dropped silently; the OPT record always fits.
 *
 * Decoding follows compression pointers only backwards (each pointer must point before the start
 * of the name segment that contains it), so a pointer loop is an error, never a hang. Every read is
 * bounds-checked; malformed input throws `WireError`, nothing else.
 *
 * Why not the `dns-packet` library: measured beside it (`npm run bench -- dns-qps`), it is wrong for
 * an authoritative server in four ways this codec is tested for. It does not compress names, so
 * answers are larger and truncate sooner; it cannot truncate to the client's payload size; it
 * reads labels as UTF-8 text without escapes, so a question with a `.` or a non-UTF-8 byte inside
 * a label is echoed with other bytes (resolvers drop such answers); and it does not check RDATA
 * lengths (a 3-byte A record reads a byte of what follows). Per query it was several times faster
 * than the first version of this codec; since name parsing got a fast path and a cache the two are
 * within a few percent of each other.
 */

export const RRType = {
  A: 1,
  NS: 2,
  CNAME: 5,
  SOA: 6,
  PTR: 12,
  HINFO: 13,
  MX: 15,
  TXT: 16,
  AAAA: 28,
  LOC: 29,
  SRV: 33,
  NAPTR: 35,
  CERT: 37,
  OPT: 41,
  DS: 43,
  SSHFP: 44,
  DNSKEY: 48,
  TLSA: 52,
  SMIMEA: 53,
  OPENPGPKEY: 61,
  SVCB: 64,
  HTTPS: 65,
  IXFR: 251,
  AXFR: 252,
  ANY: 255,
  URI: 256,
  CAA: 257,
} as const;

export const RRClass = { IN: 1, CH: 3, HS: 4, NONE: 254, ANY: 255 } as const;

export const Rcode = {
  NOERROR: 0,
  FORMERR: 1,
  SERVFAIL: 2,
  NXDOMAIN: 3,
  NOTIMP: 4,
  REFUSED: 5,
  /** Extended (needs EDNS): the 8 upper bits travel in the OPT record. */
  BADVERS: 16,
} as const;

export const Opcode = { QUERY: 0, IQUERY: 1, STATUS: 2, NOTIFY: 4, UPDATE: 5 } as const;

/** Largest DNS message (TCP length prefix is 16 bits). */
export const MAX_MESSAGE = 65535;
/** Largest name in wire form, length bytes included (RFC 1035 §2.3.4). */
export const MAX_NAME_WIRE = 255;

export class WireError extends Error {}

export interface Question {
  name: string;
  type: number;
  class: number;
}

interface RRBase {
  name: string;
  class: number;
  ttl: number;
}

export type RecordData =
  | { type: typeof RRType.A; address: string }
  | { type: typeof RRType.AAAA; address: string }
  | { type: typeof RRType.NS | typeof RRType.CNAME | typeof RRType.PTR; target: string }
  | { type: typeof RRType.MX; preference: number; exchange: string }
  | { type: typeof RRType.TXT; strings: Uint8Array[] }
  | { type: typeof RRType.SRV; priority: number; weight: number; port: number; target: string }
  | { type: typeof RRType.CAA; flags: number; tag: string; value: string }
  | { type: typeof RRType.HINFO; cpu: string; os: string }
  | {
      type: typeof RRType.SOA;
      mname: string;
      rname: string;
      serial: number;
      refresh: number;
      retry: number;
      expire: number;
      minimum: number;
    }
  /** Any other type: RDATA as bytes, written and read verbatim (RFC 3597). */
  | { type: number; rdata: Uint8Array };

export type ResourceRecord = RRBase & RecordData;

export interface EdnsOption {
  code: number;
  data: Uint8Array;
}

export interface Edns {
  /** Requestor's UDP payload size (the OPT record's CLASS). */
  udpSize: number;
  version: number;
  /** DNSSEC OK bit. */
  dnssecOk: boolean;
  options: EdnsOption[];
}

export interface Message {
  id: number;
  qr: boolean;
  opcode: number;
  aa: boolean;
  tc: boolean;
  rd: boolean;
  ra: boolean;
  ad: boolean;
  cd: boolean;
  /** Full 12-bit RCODE; values above 15 need `edns` (upper bits go in the OPT record). */
  rcode: number;
  questions: Question[];
  answers: ResourceRecord[];
  authority: ResourceRecord[];
  /** Without the OPT record: that one is `edns`. */
  additional: ResourceRecord[];
  edns?: Edns;
}

export function emptyMessage(id = 0): Message {
  return {
    id,
    qr: false,
    opcode: Opcode.QUERY,
    aa: false,
    tc: false,
    rd: false,
    ra: false,
    ad: false,
    cd: false,
    rcode: Rcode.NOERROR,
    questions: [],
    answers: [],
    authority: [],
    additional: [],
  };
}

// --- names ---------------------------------------------------------------------------------------

const textEncoder = new TextEncoder();
const utf8 = new TextDecoder('utf-8');

/** ASCII-only lowercasing (RFC 4343: DNS compares names case-insensitively for A–Z only). */
export function lowerName(name: string): string {
  return name.replace(/[A-Z]+/g, (s) => s.toLowerCase());
}

interface ParsedName {
  readonly labels: readonly Uint8Array[];
  /** Presentation form of each label, for compression keys. */
  readonly keys: readonly string[];
  /** `keys.slice(i).join('.')` for each i: the name's suffixes, as compression keys. */
  readonly suffixes: readonly string[];
}

/**
 * Parsed names by text. An answer writes the same few names (the zone's, its records' owners)
 * again and again, and parsing was most of the encoder's time. Bounded: emptied when full, so
 * names from queries cannot grow it.
 */
const parsedNames = new Map<string, ParsedName>();
const PARSED_NAMES_MAX = 4096;

/** Splits a presentation name into label bytes; throws WireError on a bad name. Read-only result. */
export function parseName(name: string): ParsedName {
  const cached = parsedNames.get(name);
  if (cached !== undefined) return cached;
  const parsed = plainName(name) ?? escapedName(name);
  if (parsedNames.size >= PARSED_NAMES_MAX) parsedNames.clear();
  parsedNames.set(name, parsed);
  return parsed;
}

function withSuffixes(labels: Uint8Array[], keys: string[], name: string): ParsedName {
  const total = labels.reduce((n, l) => n + l.length + 1, 1);
  if (total > MAX_NAME_WIRE)
    throw new WireError(`name longer than 255 bytes: "${name.slice(0, 40)}…"`);
  const suffixes = new Array<string>(keys.length);
  for (let i = keys.length - 1; i >= 0; i--)
    suffixes[i] = i === keys.length - 1 ? keys[i] : `${keys[i]}.${suffixes[i + 1]}`;
  return { labels, keys, suffixes };
}

/** The common case, printable ASCII without escapes; undefined when the name needs the full parse. */
function plainName(name: string): ParsedName | undefined {
  if (name === '' || name === '.') return withSuffixes([], [], name);
  const end = name.endsWith('.') ? name.length - 1 : name.length;
  const labels: Uint8Array[] = [];
  const keys: string[] = [];
  let start = 0;
  for (let i = 0; i <= end; i++) {
    const c = i === end ? 0x2e : name.charCodeAt(i);
    if (c === 0x2e) {
      const length = i - start;
      if (length === 0) throw new WireError(`empty label in "${name}"`);
      if (length > 63) throw new WireError(`label longer than 63 bytes in "${name}"`);
      const label = new Uint8Array(length);
      for (let j = 0; j < length; j++) label[j] = name.charCodeAt(start + j);
      labels.push(label);
      keys.push(name.slice(start, i));
      start = i + 1;
    } else if (c === 0x5c || c <= 0x20 || c >= 0x7f) {
      return undefined;
    }
  }
  return withSuffixes(labels, keys, name);
}

/** Names with `\.`, `\\` and `\DDD` escapes or non-ASCII characters (written as UTF-8). */
function escapedName(name: string): ParsedName {
  const labels: Uint8Array[] = [];
  const keys: string[] = [];
  let bytes: number[] = [];
  let key = '';
  const finish = () => {
    if (bytes.length === 0) throw new WireError(`empty label in "${name}"`);
    if (bytes.length > 63) throw new WireError(`label longer than 63 bytes in "${name}"`);
    labels.push(Uint8Array.from(bytes));
    keys.push(key);
    bytes = [];
    key = '';
  };
  for (let i = 0; i < name.length; i++) {
    const ch = name[i];
    if (ch === '.') {
      finish();
      if (i === name.length - 1) break;
      continue;
    }
    if (ch === '\\') {
      const digits = /^\d{3}/.exec(name.slice(i + 1, i + 4));
      if (digits) {
        const v = Number(digits[0]);
        if (v > 255) throw new WireError(`bad escape \\${digits[0]} in "${name}"`);
        bytes.push(v);
        key += name.slice(i, i + 4);
        i += 3;
      } else {
        if (i + 1 >= name.length) throw new WireError(`dangling backslash in "${name}"`);
        const c = String.fromCodePoint(name.codePointAt(i + 1)!);
        bytes.push(...textEncoder.encode(c));
        key += `\\${c}`;
        i += c.length;
      }
      continue;
    }
    const c = String.fromCodePoint(name.codePointAt(i)!);
    bytes.push(...textEncoder.encode(c));
    key += c;
    i += c.length - 1;
  }
  if (bytes.length > 0 || key !== '') finish();
  return withSuffixes(labels, keys, name);
}

/** One label's bytes in presentation form. */
function labelText(bytes: Uint8Array): string {
  let plain = true;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if (b <= 0x20 || b >= 0x7f || b === 0x2e || b === 0x5c) {
      plain = false;
      break;
    }
  }
  if (plain) return String.fromCharCode.apply(null, bytes as unknown as number[]);
  let out = '';
  for (const b of bytes) {
    if (b === 0x2e || b === 0x5c) out += `\\${String.fromCharCode(b)}`;
    else if (b <= 0x20 || b >= 0x7f) out += `\\${String(b).padStart(3, '0')}`;
    else out += String.fromCharCode(b);
  }
  return out;
}

/** A name in uncompressed wire form (for RDATA built outside this module, e.g. NAPTR). */
export function nameToWire(name: string): Uint8Array {
  const { labels } = parseName(name);
  const out = new Uint8Array(labels.reduce((n, l) => n + l.length + 1, 1));
  let p = 0;
  for (const l of labels) {
    out[p++] = l.length;
    out.set(l, p);
    p += l.length;
  }
  out[p] = 0;
  return out;
}

// --- addresses -----------------------------------------------------------------------------------

export function ipv4ToBytes(address: string): Uint8Array {
  // Digits and dots only, read in one pass; anything else goes through the checks below.
  const out = new Uint8Array(4);
  let part = 0;
  let digits = 0;
  let value = 0;
  for (let i = 0; i <= address.length; i++) {
    const c = i === address.length ? 0x2e : address.charCodeAt(i);
    if (c === 0x2e) {
      if (digits === 0 || value > 255 || part > 3) break;
      out[part++] = value;
      digits = 0;
      value = 0;
    } else if (c >= 0x30 && c <= 0x39 && digits < 3) {
      value = value * 10 + (c - 0x30);
      digits++;
    } else break;
  }
  if (part === 4 && digits === 0) return out;
  const parts = address.split('.');
  if (parts.length !== 4 || !parts.every((p) => /^\d{1,3}$/.test(p) && Number(p) <= 255)) {
    throw new WireError(`not an IPv4 address: ${address}`);
  }
  return Uint8Array.from(parts.map(Number));
}

export function ipv6ToBytes(address: string): Uint8Array {
  let s = address.toLowerCase();
  const bad = () => new WireError(`not an IPv6 address: ${address}`);
  if (!/^[0-9a-f:.]+$/.test(s) || !s.includes(':')) throw bad();
  if (s.includes('.')) {
    const cut = s.lastIndexOf(':');
    const v4 = ipv4ToBytes(s.slice(cut + 1));
    s = `${s.slice(0, cut + 1)}${((v4[0] << 8) | v4[1]).toString(16)}:${((v4[2] << 8) | v4[3]).toString(16)}`;
  }
  const halves = s.split('::');
  if (halves.length > 2) throw bad();
  const groups = (part: string) => (part === '' ? [] : part.split(':'));
  const head = groups(halves[0]);
  const tail = halves.length === 2 ? groups(halves[1]) : [];
  if (![...head, ...tail].every((g) => /^[0-9a-f]{1,4}$/.test(g))) throw bad();
  let all: string[];
  if (halves.length === 2) {
    if (head.length + tail.length > 7) throw bad();
    all = [...head, ...new Array<string>(8 - head.length - tail.length).fill('0'), ...tail];
  } else {
    if (head.length !== 8) throw bad();
    all = head;
  }
  const out = new Uint8Array(16);
  all.forEach((g, i) => {
    const v = parseInt(g, 16);
    out[i * 2] = v >> 8;
    out[i * 2 + 1] = v & 0xff;
  });
  return out;
}

/** RFC 5952 text form of 16 address bytes. */
export function bytesToIpv6(b: Uint8Array): string {
  const g: number[] = [];
  for (let i = 0; i < 16; i += 2) g.push((b[i] << 8) | b[i + 1]);
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

// --- encoder -------------------------------------------------------------------------------------

class Writer {
  buf = Buffer.allocUnsafe(512);
  len = 0;
  /**
   * Name suffix → offset of its first occurrence (compression targets). Keys keep their case, so
   * every name is read back exactly as written (a 0x20-mixed-case question stays apart).
   */
  private names = new Map<string, number>();

  private ensure(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = Buffer.allocUnsafe(size);
    this.buf.copy(next, 0, 0, this.len);
    this.buf = next;
  }

  u8(v: number): void {
    this.ensure(1);
    this.buf[this.len++] = v & 0xff;
  }

  u16(v: number): void {
    this.ensure(2);
    this.buf.writeUInt16BE(v & 0xffff, this.len);
    this.len += 2;
  }

  u32(v: number): void {
    this.ensure(4);
    this.buf.writeUInt32BE(v >>> 0, this.len);
    this.len += 4;
  }

  bytes(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }

  /** A <character-string>: length byte and up to 255 bytes. */
  charString(b: Uint8Array): void {
    if (b.length > 255) throw new WireError('character-string longer than 255 bytes');
    this.u8(b.length);
    this.bytes(b);
  }

  name(name: string, compress: boolean): void {
    const { labels, suffixes } = parseName(name);
    for (let i = 0; i < labels.length; i++) {
      const key = suffixes[i];
      const at = this.names.get(key);
      if (compress && at !== undefined) {
        this.u16(0xc000 | at);
        return;
      }
      if (at === undefined && this.len < 0x4000) this.names.set(key, this.len);
      this.u8(labels[i].length);
      this.bytes(labels[i]);
    }
    this.u8(0);
  }

  /** Drops everything written after `mark`, compression targets included. */
  rollback(mark: number): void {
    this.len = mark;
    for (const [key, off] of this.names) if (off >= mark) this.names.delete(key);
  }

  patch16(at: number, v: number): void {
    this.buf.writeUInt16BE(v, at);
  }

  result(): Buffer {
    return Buffer.from(this.buf.subarray(0, this.len));
  }
}

function writeRdata(w: Writer, rr: ResourceRecord): void {
  if ('rdata' in rr) {
    w.bytes(rr.rdata);
    return;
  }
  switch (rr.type) {
    case RRType.A:
      w.bytes(ipv4ToBytes(rr.address));
      return;
    case RRType.AAAA:
      w.bytes(ipv6ToBytes(rr.address));
      return;
    case RRType.NS:
    case RRType.CNAME:
    case RRType.PTR:
      w.name(rr.target, true);
      return;
    case RRType.MX:
      w.u16(rr.preference);
      w.name(rr.exchange, true);
      return;
    case RRType.TXT:
      // A TXT record holds at least one string (RFC 1035 §3.3.14).
      if (rr.strings.length === 0) w.u8(0);
      for (const s of rr.strings) w.charString(s);
      return;
    case RRType.SRV:
      w.u16(rr.priority);
      w.u16(rr.weight);
      w.u16(rr.port);
      w.name(rr.target, false);
      return;
    case RRType.CAA: {
      const tag = textEncoder.encode(rr.tag);
      if (tag.length === 0 || tag.length > 255) throw new WireError('CAA tag must be 1–255 bytes');
      w.u8(rr.flags);
      w.u8(tag.length);
      w.bytes(tag);
      w.bytes(textEncoder.encode(rr.value));
      return;
    }
    case RRType.HINFO:
      w.charString(textEncoder.encode(rr.cpu));
      w.charString(textEncoder.encode(rr.os));
      return;
    case RRType.SOA:
      w.name(rr.mname, true);
      w.name(rr.rname, true);
      w.u32(rr.serial);
      w.u32(rr.refresh);
      w.u32(rr.retry);
      w.u32(rr.expire);
      w.u32(rr.minimum);
      return;
  }
}

function writeRecord(w: Writer, rr: ResourceRecord): void {
  w.name(rr.name, true);
  w.u16(rr.type);
  w.u16(rr.class);
  w.u32(rr.ttl);
  const lengthAt = w.len;
  w.u16(0);
  writeRdata(w, rr);
  const rdlength = w.len - lengthAt - 2;
  if (rdlength > 0xffff) throw new WireError('RDATA longer than 65535 bytes');
  w.patch16(lengthAt, rdlength);
}

function ednsSize(edns: Edns): number {
  return 11 + edns.options.reduce((n, o) => n + 4 + o.data.length, 0);
}

export interface EncodeOptions {
  /** Largest message to produce (a UDP client's payload size); default 65535. */
  maxSize?: number;
}

/** Encodes a message; with `maxSize` it truncates as described at the top of this module. */
export function encodeMessage(msg: Message, opts: EncodeOptions = {}): Buffer {
  const max = Math.min(opts.maxSize ?? MAX_MESSAGE, MAX_MESSAGE);
  if (msg.rcode > 15 && !msg.edns) throw new WireError(`RCODE ${msg.rcode} needs EDNS`);
  const w = new Writer();
  w.u16(msg.id);
  w.u16(0); // flags, patched below
  for (let i = 0; i < 4; i++) w.u16(0); // counts, patched below
  for (const q of msg.questions) {
    w.name(q.name, true);
    w.u16(q.type);
    w.u16(q.class);
  }
  const reserve = msg.edns ? ednsSize(msg.edns) : 0;
  let tc = msg.tc;
  const counts = [msg.questions.length, 0, 0, 0];
  const sections: [ResourceRecord[], number, boolean][] = [
    [msg.answers, 1, true],
    [msg.authority, 2, true],
    [msg.additional, 3, false],
  ];
  for (const [records, index, required] of sections) {
    if (tc && required) continue;
    for (const rr of records) {
      const mark = w.len;
      writeRecord(w, rr);
      if (w.len + reserve > max) {
        w.rollback(mark);
        if (required) tc = true;
        break;
      }
      counts[index]++;
    }
  }
  if (msg.edns) {
    const e = msg.edns;
    w.u8(0); // root owner name
    w.u16(RRType.OPT);
    w.u16(e.udpSize);
    w.u32(((msg.rcode >> 4) << 24) | ((e.version & 0xff) << 16) | (e.dnssecOk ? 0x8000 : 0));
    w.u16(ednsSize(e) - 11);
    for (const o of e.options) {
      w.u16(o.code);
      w.u16(o.data.length);
      w.bytes(o.data);
    }
    counts[3]++;
  }
  const flags =
    (msg.qr ? 0x8000 : 0) |
    ((msg.opcode & 0xf) << 11) |
    (msg.aa ? 0x0400 : 0) |
    (tc ? 0x0200 : 0) |
    (msg.rd ? 0x0100 : 0) |
    (msg.ra ? 0x0080 : 0) |
    (msg.ad ? 0x0020 : 0) |
    (msg.cd ? 0x0010 : 0) |
    (msg.rcode & 0xf);
  w.patch16(2, flags);
  counts.forEach((n, i) => w.patch16(4 + i * 2, n));
  return w.result();
}

// --- decoder -------------------------------------------------------------------------------------

class Reader {
  constructor(
    readonly buf: Uint8Array,
    public pos = 0,
  ) {}

  need(n: number, end = this.buf.length): void {
    if (this.pos + n > end) throw new WireError(`message truncated at byte ${this.pos}`);
  }

  u8(end?: number): number {
    this.need(1, end);
    return this.buf[this.pos++];
  }

  u16(end?: number): number {
    this.need(2, end);
    const v = (this.buf[this.pos] << 8) | this.buf[this.pos + 1];
    this.pos += 2;
    return v;
  }

  u32(end?: number): number {
    this.need(4, end);
    const b = this.buf;
    const p = this.pos;
    this.pos += 4;
    return ((b[p] << 24) | (b[p + 1] << 16) | (b[p + 2] << 8) | b[p + 3]) >>> 0;
  }

  bytes(n: number, end?: number): Uint8Array {
    this.need(n, end);
    // A copy as a plain Uint8Array (Buffer#slice would alias the packet).
    const out = new Uint8Array(this.buf.subarray(this.pos, this.pos + n));
    this.pos += n;
    return out;
  }

  charString(end?: number): Uint8Array {
    return this.bytes(this.u8(end), end);
  }

  /**
   * Reads a possibly compressed name. A pointer must point before the start of the segment it
   * ends, so the segments' starts strictly decrease and a loop cannot go unnoticed.
   */
  name(end = this.buf.length): string {
    const labels: string[] = [];
    let p = this.pos;
    let segmentStart = p;
    let resume = -1;
    let wire = 1;
    for (;;) {
      if (p >= (resume < 0 ? end : this.buf.length))
        throw new WireError(`name truncated at byte ${p}`);
      const len = this.buf[p];
      if (len === 0) {
        p++;
        break;
      }
      const kind = len & 0xc0;
      if (kind === 0xc0) {
        if (p + 1 >= (resume < 0 ? end : this.buf.length))
          throw new WireError(`compression pointer truncated at byte ${p}`);
        const target = ((len & 0x3f) << 8) | this.buf[p + 1];
        if (target >= segmentStart)
          throw new WireError(`compression pointer at byte ${p} does not point backwards`);
        if (resume < 0) resume = p + 2;
        p = target;
        segmentStart = target;
        continue;
      }
      if (kind !== 0)
        throw new WireError(`unsupported label type 0x${kind.toString(16)} at byte ${p}`);
      const limit = resume < 0 ? end : this.buf.length;
      if (p + 1 + len > limit) throw new WireError(`label truncated at byte ${p}`);
      wire += len + 1;
      if (wire > MAX_NAME_WIRE) throw new WireError('name longer than 255 bytes');
      labels.push(labelText(this.buf.subarray(p + 1, p + 1 + len)));
      p += 1 + len;
    }
    this.pos = resume < 0 ? p : resume;
    return labels.join('.');
  }
}

function readRdata(r: Reader, type: number, rdlength: number): RecordData {
  const end = r.pos + rdlength;
  r.need(rdlength);
  const done = <T extends RecordData>(data: T): T => {
    if (r.pos !== end) throw new WireError(`RDATA of type ${type} has ${end - r.pos} stray bytes`);
    return data;
  };
  switch (type) {
    case RRType.A:
      if (rdlength !== 4) throw new WireError('A RDATA must be 4 bytes');
      return done({ type, address: Array.from(r.bytes(4)).join('.') });
    case RRType.AAAA:
      if (rdlength !== 16) throw new WireError('AAAA RDATA must be 16 bytes');
      return done({ type, address: bytesToIpv6(r.bytes(16)) });
    case RRType.NS:
    case RRType.CNAME:
    case RRType.PTR:
      return done({ type, target: r.name(end) });
    case RRType.MX:
      return done({ type, preference: r.u16(end), exchange: r.name(end) });
    case RRType.TXT: {
      const strings: Uint8Array[] = [];
      while (r.pos < end) strings.push(r.charString(end));
      return done({ type, strings });
    }
    case RRType.SRV:
      return done({
        type,
        priority: r.u16(end),
        weight: r.u16(end),
        port: r.u16(end),
        target: r.name(end),
      });
    case RRType.CAA: {
      const flags = r.u8(end);
      const tag = utf8.decode(r.charString(end));
      return done({ type, flags, tag, value: utf8.decode(r.bytes(end - r.pos, end)) });
    }
    case RRType.HINFO:
      return done({
        type,
        cpu: utf8.decode(r.charString(end)),
        os: utf8.decode(r.charString(end)),
      });
    case RRType.SOA:
      return done({
        type,
        mname: r.name(end),
        rname: r.name(end),
        serial: r.u32(end),
        refresh: r.u32(end),
        retry: r.u32(end),
        expire: r.u32(end),
        minimum: r.u32(end),
      });
    default:
      return done({ type, rdata: r.bytes(rdlength, end) });
  }
}

function readOptions(r: Reader, rdlength: number): EdnsOption[] {
  const end = r.pos + rdlength;
  r.need(rdlength);
  const options: EdnsOption[] = [];
  while (r.pos < end) {
    const code = r.u16(end);
    options.push({ code, data: r.bytes(r.u16(end), end) });
  }
  return options;
}

/** Decodes a whole message; throws WireError on malformed input. */
export function decodeMessage(buf: Uint8Array): Message {
  const r = new Reader(buf);
  if (buf.length < 12) throw new WireError('message shorter than its 12-byte header');
  const id = r.u16();
  const flags = r.u16();
  const counts = [r.u16(), r.u16(), r.u16(), r.u16()];
  const msg: Message = {
    ...emptyMessage(id),
    qr: (flags & 0x8000) !== 0,
    opcode: (flags >> 11) & 0xf,
    aa: (flags & 0x0400) !== 0,
    tc: (flags & 0x0200) !== 0,
    rd: (flags & 0x0100) !== 0,
    ra: (flags & 0x0080) !== 0,
    ad: (flags & 0x0020) !== 0,
    cd: (flags & 0x0010) !== 0,
    rcode: flags & 0xf,
  };
  for (let i = 0; i < counts[0]; i++) {
    msg.questions.push({ name: r.name(), type: r.u16(), class: r.u16() });
  }
  const sections = [msg.answers, msg.authority, msg.additional];
  for (let s = 0; s < 3; s++) {
    for (let i = 0; i < counts[s + 1]; i++) {
      const name = r.name();
      const type = r.u16();
      const cls = r.u16();
      const ttl = r.u32();
      const rdlength = r.u16();
      if (type === RRType.OPT) {
        if (s !== 2) throw new WireError('OPT record outside the additional section');
        if (msg.edns) throw new WireError('more than one OPT record');
        if (name !== '') throw new WireError('OPT record owner is not the root');
        msg.rcode |= (ttl >>> 24) << 4;
        msg.edns = {
          udpSize: cls,
          version: (ttl >>> 16) & 0xff,
          dnssecOk: (ttl & 0x8000) !== 0,
          options: readOptions(r, rdlength),
        };
        continue;
      }
      sections[s].push({
        name,
        class: cls,
        ttl,
        ...readRdata(r, type, rdlength),
      } as ResourceRecord);
    }
  }
  return msg;
}

/**
 * The header fields of a packet too broken to decode, so a FORMERR can still echo its id;
 * undefined when even the header is missing.
 */
export function peekHeader(
  buf: Uint8Array,
): { id: number; qr: boolean; opcode: number; rd: boolean; cd: boolean } | undefined {
  if (buf.length < 12) return undefined;
  const flags = (buf[2] << 8) | buf[3];
  return {
    id: (buf[0] << 8) | buf[1],
    qr: (flags & 0x8000) !== 0,
    opcode: (flags >> 11) & 0xf,
    rd: (flags & 0x0100) !== 0,
    cd: (flags & 0x0010) !== 0,
  };
}

/** Character-strings from text: UTF-8 split into pieces of at most 255 bytes, never inside a character. */
export function splitCharacterStrings(text: string): Uint8Array[] {
  const out: Uint8Array[] = [];
  let current: number[] = [];
  for (const ch of text) {
    const b = textEncoder.encode(ch);
    if (current.length + b.length > 255) {
      out.push(Uint8Array.from(current));
      current = [];
    }
    current.push(...b);
  }
  if (current.length > 0 || out.length === 0) out.push(Uint8Array.from(current));
  return out;
}
