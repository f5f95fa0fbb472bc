/**
 * Sorted, merged interval sets used by `in {…}` (integers, IP addresses, CIDRs, ranges) and by
 * static named lists. Lookups are binary searches; small sets stay linear-scan fast.
 */

import { cidrBounds, parseIp, textToBytes, type IpAddr } from './types.ts';
import type { ListItemType, RuleList } from './scheme.ts';

class IntervalSet<T extends number | bigint> {
  private readonly starts: T[] = [];
  private readonly ends: T[] = [];

  constructor(intervals: Array<[T, T]>, succ: (v: T) => T) {
    const sorted = [...intervals].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    for (const [s, e] of sorted) {
      const n = this.starts.length;
      // merge overlapping or adjacent intervals
      if (n && s <= succ(this.ends[n - 1])) {
        if (e > this.ends[n - 1]) this.ends[n - 1] = e;
      } else {
        this.starts.push(s);
        this.ends.push(e);
      }
    }
  }

  get size(): number {
    return this.starts.length;
  }

  has(v: T): boolean {
    let lo = 0;
    let hi = this.starts.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (v < this.starts[mid]) hi = mid - 1;
      else if (v > this.ends[mid]) lo = mid + 1;
      else return true;
    }
    return false;
  }
}

export class IntRangeSet {
  private readonly set: IntervalSet<number>;

  constructor(intervals: Array<[number, number]>) {
    this.set = new IntervalSet<number>(intervals, (v) => v + 1);
  }

  has(v: number): boolean {
    return this.set.has(v);
  }
}

export class IpRangeSet {
  private readonly v4: IntervalSet<number>;
  private readonly v6: IntervalSet<bigint>;

  constructor(ranges: Array<[IpAddr, IpAddr]>) {
    const v4: Array<[number, number]> = [];
    const v6: Array<[bigint, bigint]> = [];
    for (const [a, b] of ranges) {
      if (a.v === 4 && b.v === 4) v4.push([a.n, b.n]);
      else if (a.v === 6 && b.v === 6) v6.push([a.n, b.n]);
    }
    this.v4 = new IntervalSet<number>(v4, (v) => v + 1);
    this.v6 = new IntervalSet<bigint>(v6, (v) => v + 1n);
  }

  has(ip: IpAddr): boolean {
    return ip.v === 4 ? this.v4.has(ip.n) : this.v6.has(ip.n);
  }
}

/**
 * A named list with fixed contents, for tests and for areas that keep list items in memory.
 * Items: IPs / CIDRs / `a..b` ranges for `Ip`; integers or `a..b` for `Int`; strings for `Bytes`
 * (hostname lists compare case-insensitively).
 */
export function createStaticList(type: ListItemType, items: Iterable<string | number>): RuleList {
  if (type === 'Ip') {
    const ranges: Array<[IpAddr, IpAddr]> = [];
    for (const raw of items) {
      const item = String(raw).trim();
      const dots = item.indexOf('..');
      if (dots > 0) {
        const a = parseIp(item.slice(0, dots));
        const b = parseIp(item.slice(dots + 2));
        if (!a || !b || a.v !== b.v) throw new Error(`invalid IP range "${item}"`);
        ranges.push([a, b]);
        continue;
      }
      const slash = item.indexOf('/');
      const ip = parseIp(slash >= 0 ? item.slice(0, slash) : item);
      if (!ip) throw new Error(`invalid IP list item "${item}"`);
      const bits = slash >= 0 ? Number(item.slice(slash + 1)) : ip.v === 4 ? 32 : 128;
      ranges.push(cidrBounds(ip, bits));
    }
    const set = new IpRangeSet(ranges);
    return { type, contains: (v) => typeof v === 'object' && set.has(v) };
  }
  if (type === 'Int') {
    const ranges: Array<[number, number]> = [];
    for (const raw of items) {
      const item = String(raw).trim();
      const m = /^(-?\d+)(?:\.\.(-?\d+))?$/.exec(item);
      if (!m) throw new Error(`invalid integer list item "${item}"`);
      ranges.push([Number(m[1]), Number(m[2] ?? m[1])]);
    }
    const set = new IntRangeSet(ranges);
    return { type, contains: (v) => typeof v === 'number' && set.has(v) };
  }
  const values = new Set<string>();
  for (const raw of items) values.add(textToBytes(String(raw)).toLowerCase());
  return { type, contains: (v) => typeof v === 'string' && values.has(v.toLowerCase()) };
}
