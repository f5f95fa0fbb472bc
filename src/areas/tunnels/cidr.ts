/** CIDR arithmetic for private network routes: parse, normalise, contain, overlap (IPv4 and IPv6). */
import net from 'node:net';

export interface Cidr {
  family: 4 | 6;
  /** Network address as an integer (host bits cleared). */
  base: bigint;
  prefix: number;
  /** Canonical text, e.g. `10.0.0.0/8`, `fd00::/64`. */
  text: string;
}

function v4ToBig(ip: string): bigint {
  return ip.split('.').reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n);
}

function v6ToBig(ip: string): bigint {
  let s = ip;
  // An embedded IPv4 tail (::ffff:1.2.3.4) becomes two hex groups.
  const tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (tail) {
    const n = v4ToBig(tail[1]);
    s = s.slice(0, -tail[1].length) + `${(n >> 16n).toString(16)}:${(n & 0xffffn).toString(16)}`;
  }
  const [head, rest] = s.split('::');
  const left = head ? head.split(':') : [];
  const right = rest !== undefined && rest !== '' ? rest.split(':') : [];
  const groups =
    rest === undefined
      ? left
      : [...left, ...Array(8 - left.length - right.length).fill('0'), ...right];
  return groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g || '0', 16)), 0n);
}

function bigToV4(n: bigint): string {
  return [24n, 16n, 8n, 0n].map((s) => String((n >> s) & 0xffn)).join('.');
}

function bigToV6(n: bigint): string {
  const groups = Array.from({ length: 8 }, (_, i) => Number((n >> BigInt((7 - i) * 16)) & 0xffffn));
  // Compress the longest run of zero groups (RFC 5952).
  let best = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i > 1) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

export function ipToBig(ip: string): { family: 4 | 6; value: bigint } | undefined {
  const family = net.isIP(ip);
  if (family === 4) return { family: 4, value: v4ToBig(ip) };
  if (family === 6) return { family: 6, value: v6ToBig(ip.toLowerCase()) };
  return undefined;
}

/** Parses `a.b.c.d/n`, `v6/n` or a bare address (a host route); undefined when invalid. */
export function parseCidr(input: string): Cidr | undefined {
  const [addr, len, extra] = input.trim().split('/');
  if (extra !== undefined || !addr) return undefined;
  const ip = ipToBig(addr);
  if (!ip) return undefined;
  const bits = ip.family === 4 ? 32 : 128;
  if (len !== undefined && !/^\d{1,3}$/.test(len)) return undefined;
  const prefix = len === undefined ? bits : Number(len);
  if (prefix > bits) return undefined;
  const hostBits = BigInt(bits - prefix);
  const base = (ip.value >> hostBits) << hostBits;
  const text = `${ip.family === 4 ? bigToV4(base) : bigToV6(base)}/${prefix}`;
  return { family: ip.family, base, prefix, text };
}

export function containsIp(c: Cidr, ip: { family: 4 | 6; value: bigint }): boolean {
  if (c.family !== ip.family) return false;
  const hostBits = BigInt((c.family === 4 ? 32 : 128) - c.prefix);
  return ip.value >> hostBits === c.base >> hostBits;
}

/** True if `inner` lies within `outer` (equal counts). */
export function within(inner: Cidr, outer: Cidr): boolean {
  return (
    inner.family === outer.family &&
    inner.prefix >= outer.prefix &&
    containsIp(outer, { family: inner.family, value: inner.base })
  );
}

export function overlaps(a: Cidr, b: Cidr): boolean {
  return within(a, b) || within(b, a);
}
