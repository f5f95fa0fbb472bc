/**
 * STUN (RFC 8489) message codec plus the TURN (RFC 8656) attributes and
 * ChannelData framing.
 *
 * Decoding never throws: malformed input yields `{ ok: false }` so a server can
 * drop the datagram or answer 400 without try/catch on the hot path. Attribute
 * values are returned as views into the received buffer (no copies).
 */
import { createHash, createHmac, randomFillSync, timingSafeEqual } from 'node:crypto';

export const MAGIC_COOKIE = 0x2112a442;
export const HEADER_LENGTH = 20;
export const CHANNEL_DATA_HEADER_LENGTH = 4;
const FINGERPRINT_XOR = 0x5354554e;
const SHA1_LENGTH = 20;

export const StunClass = {
  Request: 0,
  Indication: 1,
  SuccessResponse: 2,
  ErrorResponse: 3,
} as const;
export type StunClass = (typeof StunClass)[keyof typeof StunClass];

export const StunMethod = {
  Binding: 0x001,
  Allocate: 0x003,
  Refresh: 0x004,
  Send: 0x006,
  Data: 0x007,
  CreatePermission: 0x008,
  ChannelBind: 0x009,
} as const;

export const Attr = {
  MappedAddress: 0x0001,
  ChangeRequest: 0x0003,
  Username: 0x0006,
  MessageIntegrity: 0x0008,
  ErrorCode: 0x0009,
  UnknownAttributes: 0x000a,
  ChannelNumber: 0x000c,
  Lifetime: 0x000d,
  XorPeerAddress: 0x0012,
  Data: 0x0013,
  Realm: 0x0014,
  Nonce: 0x0015,
  XorRelayedAddress: 0x0016,
  RequestedAddressFamily: 0x0017,
  EvenPort: 0x0018,
  RequestedTransport: 0x0019,
  DontFragment: 0x001a,
  MessageIntegritySha256: 0x001c,
  PasswordAlgorithm: 0x001d,
  Userhash: 0x001e,
  XorMappedAddress: 0x0020,
  ReservationToken: 0x0022,
  AdditionalAddressFamily: 0x8000,
  PasswordAlgorithms: 0x8002,
  Software: 0x8022,
  Fingerprint: 0x8028,
} as const;

/** Transport protocol numbers carried by REQUESTED-TRANSPORT. */
export const TRANSPORT_UDP = 17;
export const FAMILY_IPV4 = 0x01;
export const FAMILY_IPV6 = 0x02;

export const MIN_CHANNEL = 0x4000;
/** RFC 8656 narrowed the usable range; 0x5000-0x7FFF are reserved there. */
export const MAX_CHANNEL = 0x4fff;
/** RFC 5766 allowed up to 0x7FFF and older clients (coturn's own test client included) still pick from it. */
export const MAX_CHANNEL_RFC5766 = 0x7fff;

export interface StunAttribute {
  type: number;
  /** View into the message buffer (unpadded). */
  value: Buffer;
  /** Offset of the attribute header inside the message. */
  start: number;
}

export interface StunHeader {
  method: number;
  cls: StunClass;
  transactionId: Buffer;
}

export interface StunMessage extends StunHeader {
  /** The whole message (exactly HEADER_LENGTH + length bytes). */
  raw: Buffer;
  /**
   * Attributes in wire order. Anything after MESSAGE-INTEGRITY other than
   * MESSAGE-INTEGRITY-SHA256 and FINGERPRINT is omitted, as RFC 8489 requires
   * receivers to ignore it.
   */
  attributes: StunAttribute[];
  /** Start offset of MESSAGE-INTEGRITY, or -1. */
  integrityStart: number;
  /** Start offset of MESSAGE-INTEGRITY-SHA256, or -1. */
  integritySha256Start: number;
  hasFingerprint: boolean;
}

export type StunDecodeResult =
  | { ok: true; message: StunMessage }
  /** `header` is set when the 20-byte header itself was sound, so a request can still get a 400. */
  | { ok: false; reason: string; header: StunHeader | null };

export interface TransportAddress {
  family: 4 | 6;
  address: string;
  port: number;
}

// ---------------------------------------------------------------------------
// Message type encoding: the class bits are interleaved into the method bits.

export function encodeMessageType(method: number, cls: number): number {
  return (
    (method & 0x000f) |
    ((method & 0x0070) << 1) |
    ((method & 0x0f80) << 2) |
    ((cls & 0x1) << 4) |
    ((cls & 0x2) << 7)
  );
}

export function decodeMessageType(type: number): { method: number; cls: StunClass } {
  const method = (type & 0x000f) | ((type & 0x00e0) >> 1) | ((type & 0x3e00) >> 2);
  const cls = (((type & 0x0010) >> 4) | ((type & 0x0100) >> 7)) as StunClass;
  return { method, cls };
}

// ---------------------------------------------------------------------------
// CRC-32 (IEEE 802.3, reflected), used by FINGERPRINT.

const CRC_TABLE = buildCrcTable();

function buildCrcTable(): Int32Array {
  const table = new Int32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c;
  }
  return table;
}

export function crc32(buf: Uint8Array, start = 0, end = buf.length): number {
  let crc = -1;
  for (let i = start; i < end; i++) crc = CRC_TABLE[(crc ^ buf[i]) & 0xff] ^ (crc >>> 8);
  return (crc ^ -1) >>> 0;
}

function fingerprintOver(buf: Uint8Array, end: number): number {
  return (crc32(buf, 0, end) ^ FINGERPRINT_XOR) >>> 0;
}

// ---------------------------------------------------------------------------
// Decoding

/** True when the first byte can start a STUN message (top two bits 00). */
export function looksLikeStun(buf: Uint8Array): boolean {
  return buf.length >= HEADER_LENGTH && (buf[0] & 0xc0) === 0;
}

/** True when the first byte can start a ChannelData message (top two bits 01). */
export function looksLikeChannelData(buf: Uint8Array): boolean {
  return buf.length >= CHANNEL_DATA_HEADER_LENGTH && (buf[0] & 0xc0) === 0x40;
}

function decodeHeader(buf: Buffer): StunHeader | null {
  if (buf.length < HEADER_LENGTH || (buf[0] & 0xc0) !== 0) return null;
  if (buf.readUInt32BE(4) !== MAGIC_COOKIE) return null;
  const { method, cls } = decodeMessageType(buf.readUInt16BE(0));
  return { method, cls, transactionId: buf.subarray(8, HEADER_LENGTH) };
}

function fail(reason: string, header: StunHeader | null): StunDecodeResult {
  return { ok: false, reason, header };
}

/**
 * Decodes one complete STUN message. The buffer must hold exactly one message
 * (datagram or a frame cut from a stream). Never throws.
 */
export function decodeStun(buf: Buffer): StunDecodeResult {
  const header = decodeHeader(buf);
  if (!header) return fail('bad header', null);
  const bodyLength = buf.readUInt16BE(2);
  if (bodyLength % 4 !== 0) return fail('length not a multiple of 4', header);
  if (buf.length !== HEADER_LENGTH + bodyLength) return fail('length mismatch', header);
  return decodeAttributes(buf, header);
}

function decodeAttributes(buf: Buffer, header: StunHeader): StunDecodeResult {
  const attributes: StunAttribute[] = [];
  let integrityStart = -1;
  let integritySha256Start = -1;
  let hasFingerprint = false;
  let off = HEADER_LENGTH;
  const end = buf.length;
  while (off < end) {
    if (hasFingerprint) return fail('attribute after FINGERPRINT', header);
    if (off + 4 > end) return fail('truncated attribute header', header);
    const type = buf.readUInt16BE(off);
    const length = buf.readUInt16BE(off + 2);
    const valueStart = off + 4;
    if (valueStart + length > end) return fail('truncated attribute value', header);
    const start = off;
    off = valueStart + ((length + 3) & ~3);
    if (off > end) return fail('truncated attribute padding', header);
    const value = buf.subarray(valueStart, valueStart + length);

    if (type === Attr.Fingerprint) {
      if (length !== 4) return fail('bad FINGERPRINT length', header);
      if (value.readUInt32BE(0) !== fingerprintOver(buf, start)) {
        return fail('FINGERPRINT mismatch', header);
      }
      hasFingerprint = true;
      attributes.push({ type, value, start });
      continue;
    }
    if (type === Attr.MessageIntegritySha256) {
      if (integritySha256Start >= 0) continue;
      if (length < 16 || length > 32 || length % 4 !== 0) {
        return fail('bad MESSAGE-INTEGRITY-SHA256 length', header);
      }
      integritySha256Start = start;
      attributes.push({ type, value, start });
      continue;
    }
    // Everything else after an integrity attribute is ignored per RFC 8489 §14.5.
    if (integrityStart >= 0 || integritySha256Start >= 0) continue;
    if (type === Attr.MessageIntegrity) {
      if (length !== SHA1_LENGTH) return fail('bad MESSAGE-INTEGRITY length', header);
      integrityStart = start;
    }
    attributes.push({ type, value, start });
  }
  const message: StunMessage = {
    ...header,
    raw: buf,
    attributes,
    integrityStart,
    integritySha256Start,
    hasFingerprint,
  };
  return { ok: true, message };
}

/** First attribute of a type, or undefined. */
export function getAttribute(msg: StunMessage, type: number): Buffer | undefined {
  const attrs = msg.attributes;
  for (let i = 0; i < attrs.length; i++) if (attrs[i].type === type) return attrs[i].value;
  return undefined;
}

/** All attributes of a type (e.g. several XOR-PEER-ADDRESS in CreatePermission). */
export function getAttributes(msg: StunMessage, type: number): Buffer[] {
  const out: Buffer[] = [];
  for (const a of msg.attributes) if (a.type === type) out.push(a.value);
  return out;
}

const KNOWN_ATTRIBUTES = new Set<number>(Object.values(Attr));

/**
 * Comprehension-required attributes (type < 0x8000) this codec does not
 * understand; a server answers 420 listing them.
 */
export function unknownRequiredAttributes(
  msg: StunMessage,
  extraUnsupported?: ReadonlySet<number>,
): number[] {
  const out: number[] = [];
  for (const a of msg.attributes) {
    const unknown = !KNOWN_ATTRIBUTES.has(a.type) || (extraUnsupported?.has(a.type) ?? false);
    if (a.type < 0x8000 && unknown && !out.includes(a.type)) out.push(a.type);
  }
  return out;
}

export function decodeString(value: Buffer | undefined): string | undefined {
  return value === undefined ? undefined : value.toString('utf8');
}

export function decodeUInt32(value: Buffer | undefined): number | undefined {
  return value !== undefined && value.length === 4 ? value.readUInt32BE(0) : undefined;
}

/** CHANNEL-NUMBER: 16-bit number followed by 16 reserved bits. */
export function decodeChannelNumber(value: Buffer | undefined): number | undefined {
  return value !== undefined && value.length === 4 ? value.readUInt16BE(0) : undefined;
}

/** REQUESTED-TRANSPORT: protocol number followed by 24 reserved bits. */
export function decodeRequestedTransport(value: Buffer | undefined): number | undefined {
  return value !== undefined && value.length === 4 ? value[0] : undefined;
}

/** REQUESTED-ADDRESS-FAMILY: 0x01 (IPv4) or 0x02 (IPv6) followed by 24 reserved bits. */
export function decodeAddressFamily(value: Buffer | undefined): number | undefined {
  return value !== undefined && value.length === 4 ? value[0] : undefined;
}

export function decodeErrorCode(
  value: Buffer | undefined,
): { code: number; reason: string } | undefined {
  if (value === undefined || value.length < 4) return undefined;
  const code = (value[2] & 0x07) * 100 + value[3];
  return { code, reason: value.subarray(4).toString('utf8') };
}

export function decodeUnknownAttributes(value: Buffer | undefined): number[] {
  const out: number[] = [];
  if (!value) return out;
  for (let i = 0; i + 1 < value.length; i += 2) out.push(value.readUInt16BE(i));
  return out;
}

/** Decodes XOR-MAPPED/RELAYED/PEER-ADDRESS. Returns undefined for malformed values. */
export function decodeXorAddress(
  value: Buffer | undefined,
  transactionId: Buffer,
): TransportAddress | undefined {
  if (value === undefined || value.length < 8) return undefined;
  const family = value[1];
  const port = value.readUInt16BE(2) ^ (MAGIC_COOKIE >>> 16);
  if (family === FAMILY_IPV4 && value.length === 8) {
    const a = (value.readUInt32BE(4) ^ MAGIC_COOKIE) >>> 0;
    return {
      family: 4,
      address: `${a >>> 24}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}`,
      port,
    };
  }
  if (family === FAMILY_IPV6 && value.length === 20) {
    const bytes = Buffer.allocUnsafe(16);
    xorIpv6(value.subarray(4, 20), transactionId, bytes);
    return { family: 6, address: formatIpv6(bytes), port };
  }
  return undefined;
}

/** Decodes the plain (non-XOR) MAPPED-ADDRESS. */
export function decodeMappedAddress(value: Buffer | undefined): TransportAddress | undefined {
  if (value === undefined || value.length < 8) return undefined;
  const family = value[1];
  const port = value.readUInt16BE(2);
  if (family === FAMILY_IPV4 && value.length === 8) {
    return { family: 4, address: Array.from(value.subarray(4, 8)).join('.'), port };
  }
  if (family === FAMILY_IPV6 && value.length === 20) {
    return { family: 6, address: formatIpv6(value.subarray(4, 20)), port };
  }
  return undefined;
}

function xorIpv6(src: Uint8Array, transactionId: Uint8Array, out: Uint8Array): void {
  out[0] = src[0] ^ 0x21;
  out[1] = src[1] ^ 0x12;
  out[2] = src[2] ^ 0xa4;
  out[3] = src[3] ^ 0x42;
  for (let i = 0; i < 12; i++) out[4 + i] = src[4 + i] ^ transactionId[i];
}

// ---------------------------------------------------------------------------
// Integrity

/**
 * Verifies MESSAGE-INTEGRITY (HMAC-SHA1). The HMAC covers the message up to the
 * attribute, with the header length rewritten as if MESSAGE-INTEGRITY were last.
 */
export function verifyIntegrity(msg: StunMessage, key: Buffer): boolean {
  if (msg.integrityStart < 0) return false;
  const expected = hmacUpTo('sha1', key, msg.raw, msg.integrityStart, SHA1_LENGTH);
  const got = msg.raw.subarray(msg.integrityStart + 4, msg.integrityStart + 4 + SHA1_LENGTH);
  return timingSafeEqual(expected, got);
}

/** Verifies MESSAGE-INTEGRITY-SHA256, which may be truncated to 16..32 bytes. */
export function verifyIntegritySha256(msg: StunMessage, key: Buffer): boolean {
  if (msg.integritySha256Start < 0) return false;
  const start = msg.integritySha256Start;
  const length = msg.raw.readUInt16BE(start + 2);
  const expected = hmacUpTo('sha256', key, msg.raw, start, length).subarray(0, length);
  return timingSafeEqual(expected, msg.raw.subarray(start + 4, start + 4 + length));
}

function hmacUpTo(
  algorithm: 'sha1' | 'sha256',
  key: Buffer,
  raw: Buffer,
  attrStart: number,
  valueLength: number,
): Buffer {
  const header = Buffer.allocUnsafe(HEADER_LENGTH);
  raw.copy(header, 0, 0, HEADER_LENGTH);
  header.writeUInt16BE(attrStart - HEADER_LENGTH + 4 + valueLength, 2);
  return createHmac(algorithm, key)
    .update(header)
    .update(raw.subarray(HEADER_LENGTH, attrStart))
    .digest();
}

/** Long-term credential key: MD5(username ":" realm ":" password). */
export function longTermKey(username: string, realm: string, password: string): Buffer {
  return createHash('md5').update(`${username}:${realm}:${password}`).digest();
}

/** TURN REST shared-secret password: base64(HMAC-SHA1(secret, username)). */
export function restPassword(secret: string, username: string): string {
  return createHmac('sha1', secret).update(username).digest('base64');
}

// ---------------------------------------------------------------------------
// Encoding

export interface OutgoingAttribute {
  type: number;
  value: Buffer;
}

export interface StunOutgoing {
  method: number;
  cls: StunClass;
  transactionId: Buffer;
  attributes: OutgoingAttribute[];
}

export interface EncodeOptions {
  /** Key for MESSAGE-INTEGRITY / MESSAGE-INTEGRITY-SHA256. */
  integrityKey?: Buffer;
  /** Which integrity attribute(s) to add when a key is given. Default 'sha1'. */
  integrity?: 'sha1' | 'sha256' | 'both';
  fingerprint?: boolean;
}

function paddedLength(n: number): number {
  return (n + 3) & ~3;
}

export function encodeStun(msg: StunOutgoing, opts: EncodeOptions = {}): Buffer {
  const mode = opts.integrityKey ? (opts.integrity ?? 'sha1') : null;
  const withSha1 = mode === 'sha1' || mode === 'both';
  const withSha256 = mode === 'sha256' || mode === 'both';
  let size = HEADER_LENGTH;
  for (const a of msg.attributes) size += 4 + paddedLength(a.value.length);
  const total = size + (withSha1 ? 24 : 0) + (withSha256 ? 36 : 0) + (opts.fingerprint ? 8 : 0);
  if (total - HEADER_LENGTH > 0xffff) throw new RangeError('STUN message too large');

  const buf = Buffer.alloc(total);
  buf.writeUInt16BE(encodeMessageType(msg.method, msg.cls), 0);
  buf.writeUInt32BE(MAGIC_COOKIE, 4);
  msg.transactionId.copy(buf, 8, 0, 12);
  let off = HEADER_LENGTH;
  for (const a of msg.attributes) {
    buf.writeUInt16BE(a.type, off);
    buf.writeUInt16BE(a.value.length, off + 2);
    a.value.copy(buf, off + 4);
    off += 4 + paddedLength(a.value.length);
  }
  if (withSha1)
    off = appendIntegrity(buf, off, Attr.MessageIntegrity, 'sha1', opts.integrityKey!, 20);
  if (withSha256)
    off = appendIntegrity(buf, off, Attr.MessageIntegritySha256, 'sha256', opts.integrityKey!, 32);
  if (opts.fingerprint) {
    buf.writeUInt16BE(off + 8 - HEADER_LENGTH, 2);
    buf.writeUInt16BE(Attr.Fingerprint, off);
    buf.writeUInt16BE(4, off + 2);
    buf.writeUInt32BE(fingerprintOver(buf, off), off + 4);
    off += 8;
  }
  buf.writeUInt16BE(off - HEADER_LENGTH, 2);
  return buf;
}

function appendIntegrity(
  buf: Buffer,
  off: number,
  type: number,
  algorithm: 'sha1' | 'sha256',
  key: Buffer,
  length: number,
): number {
  buf.writeUInt16BE(off + 4 + length - HEADER_LENGTH, 2);
  const mac = createHmac(algorithm, key).update(buf.subarray(0, off)).digest();
  buf.writeUInt16BE(type, off);
  buf.writeUInt16BE(length, off + 2);
  mac.copy(buf, off + 4, 0, length);
  return off + 4 + length;
}

export function attrString(type: number, value: string): OutgoingAttribute {
  return { type, value: Buffer.from(value, 'utf8') };
}

export function attrUInt32(type: number, value: number): OutgoingAttribute {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(value >>> 0, 0);
  return { type, value: b };
}

export function attrErrorCode(code: number, reason: string): OutgoingAttribute {
  const text = Buffer.from(reason, 'utf8');
  const b = Buffer.alloc(4 + text.length);
  b[2] = Math.floor(code / 100) & 0x07;
  b[3] = code % 100;
  text.copy(b, 4);
  return { type: Attr.ErrorCode, value: b };
}

export function attrUnknownAttributes(types: number[]): OutgoingAttribute {
  const b = Buffer.allocUnsafe(types.length * 2);
  types.forEach((t, i) => b.writeUInt16BE(t, i * 2));
  return { type: Attr.UnknownAttributes, value: b };
}

export function attrChannelNumber(channel: number): OutgoingAttribute {
  const b = Buffer.alloc(4);
  b.writeUInt16BE(channel, 0);
  return { type: Attr.ChannelNumber, value: b };
}

export function attrRequestedTransport(protocol: number): OutgoingAttribute {
  const b = Buffer.alloc(4);
  b[0] = protocol;
  return { type: Attr.RequestedTransport, value: b };
}

export function attrAddressFamily(type: number, family: number): OutgoingAttribute {
  const b = Buffer.alloc(4);
  b[0] = family;
  return { type, value: b };
}

/** XOR-encodes an address; returns undefined when `address` is not an IP literal. */
export function attrXorAddress(
  type: number,
  address: string,
  port: number,
  transactionId: Buffer,
): OutgoingAttribute | undefined {
  const value = encodeXorAddressValue(address, port, transactionId);
  return value ? { type, value } : undefined;
}

export function encodeXorAddressValue(
  address: string,
  port: number,
  transactionId: Buffer,
): Buffer | undefined {
  const ip = parseIp(address);
  if (!ip) return undefined;
  const xport = (port ^ (MAGIC_COOKIE >>> 16)) & 0xffff;
  if (ip.length === 4) {
    const b = Buffer.allocUnsafe(8);
    b[0] = 0;
    b[1] = FAMILY_IPV4;
    b.writeUInt16BE(xport, 2);
    b.writeUInt32BE((ip.readUInt32BE(0) ^ MAGIC_COOKIE) >>> 0, 4);
    return b;
  }
  const b = Buffer.allocUnsafe(20);
  b[0] = 0;
  b[1] = FAMILY_IPV6;
  b.writeUInt16BE(xport, 2);
  xorIpv6(ip, transactionId, b.subarray(4));
  return b;
}

// ---------------------------------------------------------------------------
// ChannelData

export interface ChannelData {
  channel: number;
  /** View into the input buffer. */
  data: Buffer;
}

/**
 * Decodes ChannelData. Trailing bytes beyond the declared length are allowed
 * (padding); fewer are not. Never throws.
 */
export function decodeChannelData(buf: Buffer): ChannelData | undefined {
  if (buf.length < CHANNEL_DATA_HEADER_LENGTH || (buf[0] & 0xc0) !== 0x40) return undefined;
  const length = buf.readUInt16BE(2);
  if (CHANNEL_DATA_HEADER_LENGTH + length > buf.length) return undefined;
  return { channel: buf.readUInt16BE(0), data: buf.subarray(4, 4 + length) };
}

/** Encodes ChannelData; `pad` rounds the frame up to 4 bytes as stream transports require. */
export function encodeChannelData(channel: number, data: Uint8Array, pad: boolean): Buffer {
  const frame = CHANNEL_DATA_HEADER_LENGTH + data.length;
  const size = pad ? paddedLength(frame) : frame;
  const buf = Buffer.allocUnsafe(size);
  buf.writeUInt16BE(channel, 0);
  buf.writeUInt16BE(data.length, 2);
  buf.set(data, 4);
  if (size > frame) buf.fill(0, frame, size);
  return buf;
}

/**
 * Length of the frame starting at `buf[offset]` on a stream transport (TCP/TLS):
 * STUN frames are 20 + length, ChannelData frames are 4 + length padded to 4.
 * Returns 0 when more bytes are needed and -1 when the bytes cannot start a frame.
 */
export function streamFrameLength(buf: Uint8Array, offset: number, available: number): number {
  if (available < 1) return 0;
  const top = buf[offset] & 0xc0;
  if (top !== 0 && top !== 0x40) return -1;
  if (available < 4) return 0;
  const length = (buf[offset + 2] << 8) | buf[offset + 3];
  if (top === 0) return length % 4 === 0 ? HEADER_LENGTH + length : -1;
  return paddedLength(CHANNEL_DATA_HEADER_LENGTH + length);
}

// ---------------------------------------------------------------------------
// IP literal helpers

/** Parses an IPv4 or IPv6 literal into 4 or 16 bytes; IPv4-mapped IPv6 becomes 4 bytes. */
export function parseIp(address: string): Buffer | undefined {
  const v4 = parseIpv4(address);
  if (v4) return v4;
  const v6 = parseIpv6(address);
  if (!v6) return undefined;
  if (isIpv4Mapped(v6)) return Buffer.from(v6.subarray(12));
  return v6;
}

function parseIpv4(address: string): Buffer | undefined {
  const parts = address.split('.');
  if (parts.length !== 4) return undefined;
  const out = Buffer.allocUnsafe(4);
  for (let i = 0; i < 4; i++) {
    const p = parts[i];
    if (!/^\d{1,3}$/.test(p)) return undefined;
    const n = Number(p);
    if (n > 255) return undefined;
    out[i] = n;
  }
  return out;
}

function parseIpv6(input: string): Buffer | undefined {
  const zone = input.indexOf('%');
  const address = zone >= 0 ? input.slice(0, zone) : input;
  if (address.length < 2 || address.length > 45) return undefined;
  const halves = address.split('::');
  if (halves.length > 2) return undefined;
  const head = parseIpv6Groups(halves[0]);
  const tail = halves.length === 2 ? parseIpv6Groups(halves[1]) : [];
  if (!head || !tail) return undefined;
  const groups = halves.length === 2 ? head.length + tail.length : head.length;
  if (halves.length === 2 ? groups > 7 : groups !== 8) return undefined;
  const out = Buffer.alloc(16);
  head.forEach((g, i) => out.writeUInt16BE(g, i * 2));
  tail.forEach((g, i) => out.writeUInt16BE(g, 16 - (tail.length - i) * 2));
  return out;
}

/** Parses colon-separated hex groups; a trailing dotted quad counts as two groups. */
function parseIpv6Groups(text: string): number[] | undefined {
  if (text === '') return [];
  const parts = text.split(':');
  const groups: number[] = [];
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i];
    if (i === parts.length - 1 && p.includes('.')) {
      const v4 = parseIpv4(p);
      if (!v4) return undefined;
      groups.push(v4.readUInt16BE(0), v4.readUInt16BE(2));
    } else {
      if (!/^[0-9a-fA-F]{1,4}$/.test(p)) return undefined;
      groups.push(parseInt(p, 16));
    }
  }
  return groups;
}

function isIpv4Mapped(b: Uint8Array): boolean {
  for (let i = 0; i < 10; i++) if (b[i] !== 0) return false;
  return b[10] === 0xff && b[11] === 0xff;
}

/** Deprecated ::a.b.c.d form; glibc prints it dotted when the seventh group is non-zero. */
function isIpv4Compatible(b: Uint8Array): boolean {
  for (let i = 0; i < 12; i++) if (b[i] !== 0) return false;
  return b[12] !== 0 || b[13] !== 0;
}

/** RFC 5952 text form (matches what the OS reports for received packets). */
export function formatIpv6(b: Uint8Array): string {
  if (isIpv4Mapped(b)) return `::ffff:${b[12]}.${b[13]}.${b[14]}.${b[15]}`;
  if (isIpv4Compatible(b)) return `::${b[12]}.${b[13]}.${b[14]}.${b[15]}`;
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((b[i] << 8) | b[i + 1]);
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (bestLen < 2) return groups.map((g) => g.toString(16)).join(':');
  const left = groups
    .slice(0, bestStart)
    .map((g) => g.toString(16))
    .join(':');
  const right = groups
    .slice(bestStart + bestLen)
    .map((g) => g.toString(16))
    .join(':');
  return `${left}::${right}`;
}

/** Canonical text for an IP literal (IPv4-mapped IPv6 collapses to IPv4), or undefined. */
export function canonicalIp(address: string): string | undefined {
  const ip = parseIp(address);
  if (!ip) return undefined;
  return ip.length === 4 ? `${ip[0]}.${ip[1]}.${ip[2]}.${ip[3]}` : formatIpv6(ip);
}

// ---------------------------------------------------------------------------

/** Fresh random 96-bit transaction id. */
export function newTransactionId(): Buffer {
  return randomFillSync(Buffer.allocUnsafe(12));
}
