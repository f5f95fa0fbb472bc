import { describe, expect, it } from 'vitest';
import { canonicalValue, formatIPv6, parseAddress, parseIPv6, type Target } from '../../../src/areas/access-rules/targets.ts';

describe('IPv6 text', () => {
  const cases: [string, string][] = [
    ['2001:DB8:0:0:0:0:0:1', '2001:db8::1'],
    ['2001:db8::', '2001:db8::'],
    ['::', '::'],
    ['::1', '::1'],
    ['2001:db8:0:1:0:0:0:0', '2001:db8:0:1::'],
    ['2001:0db8:0000:0000:1:0000:0000:0001', '2001:db8::1:0:0:1'],
    ['2001:db8:1:2:3:4:5:6', '2001:db8:1:2:3:4:5:6'],
    ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'],
    ['::ffff:192.0.2.1', '::ffff:c000:201'],
  ];
  for (const [input, canonical] of cases) {
    it(`${input} → ${canonical}`, () => {
      const bits = parseIPv6(input);
      expect(bits).toBeDefined();
      expect(formatIPv6(bits!)).toBe(canonical);
    });
  }
  for (const bad of ['1:2:3:4:5:6:7:8:9', '2001:db8::1::2', 'g::1', '2001:db8', '12345::1', '1.2.3.4', 'fe80::1%eth0']) {
    it(`rejects ${bad}`, () => expect(parseIPv6(bad)).toBeUndefined());
  }
  it('treats IPv4-mapped client addresses as IPv4', () => {
    expect(parseAddress('::ffff:192.0.2.1')).toEqual({ family: 4, bits: 0xc0000201n });
  });
});

describe('configuration values per target', () => {
  const ok: [Target, string, string][] = [
    ['ip', '192.0.2.3', '192.0.2.3'],
    ['ip', ' 2001:DB8::3 ', '2001:db8::3'],
    ['ip6', '2001:db8::1/128', '2001:db8::1'],
    ['ip6', '2001:db8:1:2::/64', '2001:db8:1:2::/64'],
    ['ip_range', '192.0.2.0/24', '192.0.2.0/24'],
    ['ip_range', '192.168.0.0/16', '192.168.0.0/16'],
    ['ip_range', '2001:DB8::/32', '2001:db8::/32'],
    ['ip_range', '2001:db8:ab::/48', '2001:db8:ab::/48'],
    ['ip_range', '2001:db8::/64', '2001:db8::/64'],
    ['asn', 'AS13335', 'AS13335'],
    ['asn', 'as64512', 'AS64512'],
    ['asn', '64512', 'AS64512'],
    ['country', 'us', 'US'],
    ['country', 'T1', 'T1'],
    ['country', 'XX', 'XX'],
  ];
  for (const [target, input, canonical] of ok) {
    it(`${target} ${input} → ${canonical}`, () => expect(canonicalValue(target, input)).toEqual({ ok: true, value: canonical }));
  }
  const bad: [Target, string][] = [
    ['ip', '256.1.1.1'],
    ['ip', '192.0.2.0/24'],
    ['ip', '01.2.3.4'],
    ['ip6', '192.0.2.1'],
    ['ip6', '2001:db8::/48'],
    ['ip_range', '192.0.2.0/25'],
    ['ip_range', '10.0.0.0/8'],
    ['ip_range', '192.0.2.5/24'],
    ['ip_range', '2001:db8::/56'],
    ['ip_range', '192.0.2.1'],
    ['asn', 'AS'],
    ['asn', 'AS0'],
    ['asn', 'ASX1'],
    ['country', 'ZZ'],
    ['country', 'USA'],
  ];
  for (const [target, input] of bad) {
    it(`rejects ${target} ${input}`, () => {
      const r = canonicalValue(target, input);
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.message.length).toBeGreaterThan(0);
    });
  }
});
