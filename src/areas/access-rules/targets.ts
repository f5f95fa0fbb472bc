/**
 * Access rule targets: validation and canonical form of `configuration {target, value}`, and the
 * address arithmetic the edge's decision needs.
 * - `ip`: one IPv4 or IPv6 address; `ip6`: one IPv6 address (`/128` accepted) or a `/64`;
 * - `ip_range`: IPv4 `/16` or `/24`, IPv6 `/32`, `/48`, `/64` (and `/128`), with no host bits set;
 * - `asn`: `AS13335` (the `AS` is optional on input);
 * - `country`: an ISO 3166-1 alpha-2 code, `T1` (Tor) or `XX` (unknown).
 */

export const TARGETS = ['ip', 'ip6', 'ip_range', 'asn', 'country'] as const;
export type Target = (typeof TARGETS)[number];

export interface Network {
  family: 4 | 6;
  /** The address as an integer (network address for prefixes). */
  bits: bigint;
  prefix: number;
}

export type Canonical = { ok: true; value: string } | { ok: false; message: string };

/** Parses an IPv4 address in dotted-quad form. */
export function parseIPv4(s: string): bigint | undefined {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(s);
  if (!m) return undefined;
  let out = 0n;
  for (const part of m.slice(1)) {
    if (part.length > 1 && part.startsWith('0')) return undefined;
    const n = Number(part);
    if (n > 255) return undefined;
    out = (out << 8n) | BigInt(n);
  }
  return out;
}

/** Parses an IPv6 address (with `::` and an optional trailing dotted IPv4). */
export function parseIPv6(input: string): bigint | undefined {
  let s = input.toLowerCase();
  if (!s.includes(':') || s.includes('%')) return undefined;
  if (s.includes('.')) {
    // A trailing dotted IPv4 (`::ffff:192.0.2.1`) stands for the last two groups.
    const cut = s.lastIndexOf(':');
    const v4 = parseIPv4(s.slice(cut + 1));
    if (v4 === undefined) return undefined;
    s = `${s.slice(0, cut + 1)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
  }
  const halves = s.split('::');
  if (halves.length > 2) return undefined;
  const groupsOf = (part: string): bigint[] | undefined => {
    if (part === '') return [];
    const out: bigint[] = [];
    for (const g of part.split(':')) {
      if (!/^[0-9a-f]{1,4}$/.test(g)) return undefined;
      out.push(BigInt(parseInt(g, 16)));
    }
    return out;
  };
  const head = groupsOf(halves[0]);
  const rest = halves.length === 2 ? groupsOf(halves[1]) : [];
  if (!head || !rest) return undefined;
  let all: bigint[];
  if (halves.length === 2) {
    if (head.length + rest.length > 7) return undefined;
    all = [...head, ...Array<bigint>(8 - head.length - rest.length).fill(0n), ...rest];
  } else {
    if (head.length !== 8) return undefined;
    all = head;
  }
  return all.reduce((acc, g) => (acc << 16n) | g, 0n);
}

export function formatIPv4(bits: bigint): string {
  return [24n, 16n, 8n, 0n].map((s) => String((bits >> s) & 0xffn)).join('.');
}

/** RFC 5952 text: lowercase, leading zeros dropped, the longest run of zero groups as `::`. */
export function formatIPv6(bits: bigint): string {
  const groups = Array.from({ length: 8 }, (_, i) => Number((bits >> BigInt((7 - i) * 16)) & 0xffffn));
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
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

/** Parses a client address for matching (IPv4-mapped IPv6 counts as IPv4). */
export function parseAddress(s: string): { family: 4 | 6; bits: bigint } | undefined {
  const v4 = parseIPv4(s);
  if (v4 !== undefined) return { family: 4, bits: v4 };
  const v6 = parseIPv6(s);
  if (v6 === undefined) return undefined;
  if (v6 >> 32n === 0xffffn) return { family: 4, bits: v6 & 0xffffffffn };
  return { family: 6, bits: v6 };
}

export function mask(bits: bigint, family: 4 | 6, prefix: number): bigint {
  const width = family === 4 ? 32 : 128;
  if (prefix === 0) return 0n;
  const hostBits = BigInt(width - prefix);
  return (bits >> hostBits) << hostBits;
}

const V4_RANGES = [16, 24];
const V6_RANGES = [32, 48, 64, 128];

function cidr(value: string, allowed: { 4: number[]; 6: number[] }): { net: Network; text: string } | string {
  const m = /^([^/]+)\/(\d{1,3})$/.exec(value);
  if (!m) return 'must be an address range in CIDR notation (address/prefix)';
  const prefix = Number(m[2]);
  const v4 = parseIPv4(m[1]);
  const v6 = v4 === undefined ? parseIPv6(m[1]) : undefined;
  if (v4 === undefined && v6 === undefined) return `${m[1]} is not an IP address`;
  const family: 4 | 6 = v4 !== undefined ? 4 : 6;
  const bits = (v4 ?? v6)!;
  if (!allowed[family].includes(prefix)) {
    return `IPv${family} ranges must be /${allowed[family].join(', /')}`;
  }
  if (mask(bits, family, prefix) !== bits) return `${value} has host bits set; the range starts at ${family === 4 ? formatIPv4(mask(bits, 4, prefix)) : formatIPv6(mask(bits, 6, prefix))}/${prefix}`;
  const text = `${family === 4 ? formatIPv4(bits) : formatIPv6(bits)}/${prefix}`;
  return { net: { family, bits, prefix }, text };
}

/** ISO 3166-1 alpha-2 codes, plus the platform's T1 (Tor) and XX (unknown). */
const COUNTRIES = new Set(
  (
    'AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ ' +
    'CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK FM FO FR ' +
    'GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP ' +
    'KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT ' +
    'MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW ' +
    'SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG ' +
    'UM US UY UZ VA VC VE VG VI VN VU WF WS XK YE YT ZA ZM ZW T1 XX'
  ).split(' '),
);

/** Checks a configuration value for its target and returns its canonical text. */
export function canonicalValue(target: Target, raw: string): Canonical {
  const value = raw.trim();
  switch (target) {
    case 'ip': {
      const v4 = parseIPv4(value);
      if (v4 !== undefined) return { ok: true, value: formatIPv4(v4) };
      const v6 = parseIPv6(value);
      if (v6 !== undefined) return { ok: true, value: formatIPv6(v6) };
      return { ok: false, message: `${raw} is not a valid IP address` };
    }
    case 'ip6': {
      const plain = value.endsWith('/128') ? value.slice(0, -4) : value;
      if (!plain.includes('/')) {
        const v6 = parseIPv6(plain);
        if (v6 === undefined) return { ok: false, message: `${raw} is not a valid IPv6 address` };
        return { ok: true, value: formatIPv6(v6) };
      }
      const r = cidr(value, { 4: [], 6: [64] });
      if (typeof r === 'string') return { ok: false, message: `${raw}: ip6 takes an IPv6 address or a /64 (${r})` };
      return { ok: true, value: r.text };
    }
    case 'ip_range': {
      const r = cidr(value, { 4: V4_RANGES, 6: V6_RANGES });
      if (typeof r === 'string') return { ok: false, message: `${raw}: ${r}` };
      return { ok: true, value: r.text };
    }
    case 'asn': {
      const m = /^(?:AS)?(\d{1,10})$/i.exec(value);
      const n = m ? Number(m[1]) : NaN;
      if (!m || n < 1 || n > 4_294_967_295) return { ok: false, message: `${raw} is not an autonomous system number (AS13335)` };
      return { ok: true, value: `AS${n}` };
    }
    case 'country': {
      const code = value.toUpperCase();
      if (!COUNTRIES.has(code)) return { ok: false, message: `${raw} is not an ISO 3166-1 alpha-2 country code (or T1, XX)` };
      return { ok: true, value: code };
    }
  }
}

/** The network a canonical ip/ip6/ip_range value covers. */
export function networkOf(target: Target, value: string): Network | undefined {
  if (target === 'asn' || target === 'country') return undefined;
  const [addr, len] = value.split('/');
  const a = parseAddress(addr);
  if (!a) return undefined;
  const width = a.family === 4 ? 32 : 128;
  return { family: a.family, bits: a.bits, prefix: len === undefined ? width : Number(len) };
}
