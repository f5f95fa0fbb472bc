/**
 * Addressing rules of a CNI object: the two ends of the peering link are the two addresses of one
 * IPv4 /31 (RFC 3021: both addresses usable, no network or broadcast address), and the customer
 * ASN must be one a BGP speaker may use.
 */

/** An IPv4 address as an unsigned 32-bit integer, or undefined if the text is not one. */
export function parseIpv4(text: string): number | undefined {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  if (!m) return undefined;
  let n = 0;
  for (let i = 1; i <= 4; i++) {
    // Leading zeros are refused: some stacks read them as octal.
    if (m[i].length > 1 && m[i].startsWith('0')) return undefined;
    const o = Number(m[i]);
    if (o > 255) return undefined;
    n = n * 256 + o;
  }
  return n;
}

export function formatIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

export interface Cidr {
  address: number;
  prefix: number;
}

/** Parses `A.B.C.D/N`; returns an error message instead when the text is not one. */
export function parseCidr(text: string): Cidr | string {
  const m = /^([^/]+)\/(\d{1,2})$/.exec(text);
  if (!m) return `${JSON.stringify(text)} is not in the form A.B.C.D/N`;
  const address = parseIpv4(m[1]);
  if (address === undefined) return `${JSON.stringify(m[1])} is not an IPv4 address`;
  const prefix = Number(m[2]);
  if (prefix > 32) return `prefix length /${prefix} is above /32`;
  return { address, prefix };
}

/** Network number of a /31: both of its addresses share it. */
export function pairOf(address: number): number {
  return Math.floor(address / 2);
}

/** Addresses that cannot terminate a peering link. */
export function unusableReason(address: number): string | undefined {
  const first = address >>> 24;
  if (first === 0) return 'is in 0.0.0.0/8 ("this network")';
  if (first === 127) return 'is a loopback address';
  if (first >= 224 && first <= 239) return 'is a multicast address';
  if (first >= 240) return 'is in the reserved 240.0.0.0/4 range';
  return undefined;
}

/** The platform's own autonomous system: a customer cannot peer with it as its own. */
export const PLATFORM_ASN = 13335;

/**
 * Why an ASN cannot be a customer's, or undefined when it can. Public (1–4199999999 less the
 * reserved blocks) and private (64512–65534, 4200000000–4294967294) numbers are accepted.
 */
export function asnProblem(asn: number): string | undefined {
  if (!Number.isInteger(asn) || asn < 0 || asn > 4294967295)
    return 'must be an integer between 1 and 4294967294';
  if (asn === 0) return 'AS 0 is reserved (RFC 7607)';
  if (asn === 23456) return 'AS 23456 is AS_TRANS (RFC 6793), not a real ASN';
  if (asn >= 64496 && asn <= 64511) return `AS ${asn} is reserved for documentation (RFC 5398)`;
  if (asn >= 65536 && asn <= 65551) return `AS ${asn} is reserved for documentation (RFC 5398)`;
  if (asn === 65535 || asn === 4294967295) return `AS ${asn} is reserved (RFC 7300)`;
  if (asn >= 65552 && asn <= 131071) return `AS ${asn} is in a reserved block (IANA)`;
  if (asn === PLATFORM_ASN) return `AS ${PLATFORM_ASN} is the platform's own ASN`;
  return undefined;
}
