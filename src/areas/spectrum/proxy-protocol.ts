/**
 * Headers that tell an origin who the client is: PROXY protocol v1 (text) and v2 (binary, STREAM
 * for TCP and DGRAM for UDP), per haproxy.org/download/2.0/doc/proxy-protocol.txt, and the
 * platform's Simple Proxy Protocol for UDP (38 bytes before every datagram: magic 0x56EC, client
 * and proxy addresses as 16 bytes each — IPv4-mapped for IPv4 — then client and proxy ports).
 */
import net from 'node:net';

export interface Endpoint {
  ip: string;
  port: number;
}

export const V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
export const SPP_MAGIC = 0x56ec;
export const SPP_HEADER_LENGTH = 38;

/** Strips the IPv4-mapped prefix Node reports on dual-stack sockets. */
export function plainIp(ip: string | undefined): string {
  if (!ip) return '0.0.0.0';
  return ip.startsWith('::ffff:') && net.isIPv4(ip.slice(7)) ? ip.slice(7) : ip;
}

function ipv4Bytes(ip: string): Buffer {
  return Buffer.from(ip.split('.').map(Number));
}

/** 16 bytes; an IPv4 address becomes IPv4-mapped (::ffff:a.b.c.d). */
export function ipv6Bytes(ip: string): Buffer {
  if (net.isIPv4(ip)) return Buffer.concat([Buffer.alloc(10), Buffer.from([0xff, 0xff]), ipv4Bytes(ip)]);
  // The URL serializer writes IPv6 in hex groups only (an embedded dotted quad becomes two groups).
  const canon = new URL(`http://[${ip}]/`).hostname.replace(/^\[|\]$/g, '');
  const [head, tail] = canon.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...new Array<string>(8 - h.length - t.length).fill('0'), ...t];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

/** Both endpoints in one family: IPv4 when both are IPv4, else IPv6 (IPv4 ones mapped). */
function sameFamily(src: Endpoint, dst: Endpoint): 4 | 6 {
  return net.isIPv4(src.ip) && net.isIPv4(dst.ip) ? 4 : 6;
}

/** `PROXY TCP4 <src> <dst> <sport> <dport>\r\n` (TCP6 when either side is IPv6). */
export function proxyV1(src: Endpoint, dst: Endpoint): Buffer {
  const family = sameFamily(src, dst);
  const ip = (e: Endpoint) => (family === 6 && net.isIPv4(e.ip) ? `::ffff:${e.ip}` : e.ip);
  return Buffer.from(`PROXY TCP${family} ${ip(src)} ${ip(dst)} ${src.port} ${dst.port}\r\n`, 'latin1');
}

/** PROXY v2, command PROXY, STREAM (TCP) or DGRAM (UDP) over INET or INET6. */
export function proxyV2(src: Endpoint, dst: Endpoint, transport: 'tcp' | 'udp'): Buffer {
  const family = sameFamily(src, dst);
  const proto = transport === 'tcp' ? 0x1 : 0x2;
  const addrLen = family === 4 ? 12 : 36;
  const out = Buffer.alloc(16 + addrLen);
  V2_SIGNATURE.copy(out, 0);
  out[12] = 0x21;
  out[13] = ((family === 4 ? 0x1 : 0x2) << 4) | proto;
  out.writeUInt16BE(addrLen, 14);
  if (family === 4) {
    ipv4Bytes(src.ip).copy(out, 16);
    ipv4Bytes(dst.ip).copy(out, 20);
    out.writeUInt16BE(src.port, 24);
    out.writeUInt16BE(dst.port, 26);
  } else {
    ipv6Bytes(src.ip).copy(out, 16);
    ipv6Bytes(dst.ip).copy(out, 32);
    out.writeUInt16BE(src.port, 48);
    out.writeUInt16BE(dst.port, 50);
  }
  return out;
}

/** The Simple Proxy Protocol header (38 bytes). */
export function simpleHeader(client: Endpoint, proxy: Endpoint): Buffer {
  const out = Buffer.alloc(SPP_HEADER_LENGTH);
  out.writeUInt16BE(SPP_MAGIC, 0);
  ipv6Bytes(client.ip).copy(out, 2);
  ipv6Bytes(proxy.ip).copy(out, 18);
  out.writeUInt16BE(client.port, 34);
  out.writeUInt16BE(proxy.port, 36);
  return out;
}

/** Reads a Simple Proxy Protocol header; undefined when the datagram does not start with one. */
export function parseSimpleHeader(buf: Buffer): { client: Endpoint; proxy: Endpoint; payload: Buffer } | undefined {
  if (buf.length < SPP_HEADER_LENGTH || buf.readUInt16BE(0) !== SPP_MAGIC) return undefined;
  return {
    client: { ip: ipFrom16(buf.subarray(2, 18)), port: buf.readUInt16BE(34) },
    proxy: { ip: ipFrom16(buf.subarray(18, 34)), port: buf.readUInt16BE(36) },
    payload: buf.subarray(SPP_HEADER_LENGTH),
  };
}

/** Length of a PROXY v2 header at the start of `buf`, or 0. */
export function v2HeaderLength(buf: Buffer): number {
  if (buf.length < 16 || !buf.subarray(0, 12).equals(V2_SIGNATURE)) return 0;
  const len = 16 + buf.readUInt16BE(14);
  return len <= buf.length ? len : 0;
}

/** An IPv4-mapped address comes back as IPv4. */
export function ipFrom16(b: Buffer): string {
  const mapped = b.subarray(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff;
  if (mapped) return `${b[12]}.${b[13]}.${b[14]}.${b[15]}`;
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
  return new URL(`http://[${groups.join(':')}]/`).hostname.replace(/^\[|\]$/g, '');
}
