import { describe, expect, it } from 'vitest';
import { ApiError } from '../../../src/core/errors.ts';
import {
  applyPatch,
  canonicalIPv6,
  canonicalizeRecord,
  findConflict,
  type CanonicalRecord,
} from '../../../src/areas/dns/record-rules.ts';
import { DnsRecordInput, DnsRecordPatch } from '../../../src/areas/dns/schemas.ts';

const ZONE = 'example.com';

/** Parses a body the way a route would, then canonicalises it. */
function rec(body: Record<string, unknown>, zone = ZONE): CanonicalRecord {
  return canonicalizeRecord(DnsRecordInput.parse(body), zone);
}

/** Runs fn, expecting a 400 ApiError with `code` whose message matches `field`. */
function expectError(fn: () => unknown, code: number, field: RegExp): ApiError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(ApiError);
  const err = caught as ApiError;
  expect(err.status).toBe(400);
  expect(err.errors[0].code).toBe(code);
  expect(err.errors[0].message).toMatch(field);
  return err;
}

describe('schemas', () => {
  it('applies defaults, upper-cases the type and ignores unknown keys', () => {
    const body = DnsRecordInput.parse({
      type: 'a',
      name: 'www',
      content: '192.0.2.1',
      zone_id: 'abc',
      id: 'ignored',
      meta: { auto_added: false },
    });
    expect(body).toEqual({ type: 'A', name: 'www', content: '192.0.2.1', ttl: 1, proxied: false });
  });

  it('rejects malformed bodies', () => {
    const base = { type: 'A', name: 'www', content: '192.0.2.1' };
    expect(DnsRecordInput.safeParse({ ...base, type: 'SPF' }).success).toBe(false);
    expect(DnsRecordInput.safeParse({ ...base, name: 'a'.repeat(256) }).success).toBe(false);
    expect(DnsRecordInput.safeParse({ ...base, comment: 'x'.repeat(101) }).success).toBe(false);
    expect(DnsRecordInput.safeParse({ ...base, priority: 65536 }).success).toBe(false);
    expect(DnsRecordInput.safeParse({ ...base, priority: -1 }).success).toBe(false);
    expect(DnsRecordInput.safeParse({ ...base, tags: ['no spaces:x', 'ok:1'] }).success).toBe(
      false,
    );
    expect(DnsRecordInput.safeParse({ ...base, proxied: 'yes' }).success).toBe(false);
    expect(DnsRecordInput.safeParse({ content: '192.0.2.1', name: 'www' }).success).toBe(false);
  });

  it('accepts every documented type, tags, settings and a numeric-string priority', () => {
    for (const type of [
      'A',
      'AAAA',
      'CNAME',
      'MX',
      'NS',
      'TXT',
      'PTR',
      'CAA',
      'SRV',
      'HTTPS',
      'SVCB',
      'TLSA',
      'SSHFP',
      'DS',
      'DNSKEY',
      'CERT',
      'LOC',
      'NAPTR',
      'SMIMEA',
      'URI',
      'OPENPGPKEY',
    ]) {
      expect(DnsRecordInput.safeParse({ type, name: 'x' }).success).toBe(true);
    }
    const body = DnsRecordInput.parse({
      type: 'MX',
      name: '@',
      content: 'mx.example.com',
      priority: '10',
      tags: ['team:dns', 'flag'],
      settings: { ipv4_only: true, unknown: 1 },
    });
    expect(body.priority).toBe(10);
    expect(body.tags).toEqual(['team:dns', 'flag']);
    expect(body.settings).toEqual({ ipv4_only: true });
  });

  it('PATCH bodies have every field optional and no defaults', () => {
    expect(DnsRecordPatch.parse({})).toEqual({});
    expect(DnsRecordPatch.parse({ comment: null, extra: 1 })).toEqual({ comment: null });
  });
});

describe('canonicalizeRecord: names', () => {
  const name = (n: string, zone = ZONE) =>
    rec({ type: 'A', name: n, content: '192.0.2.1' }, zone).name;

  it('completes relative names and recognises the apex', () => {
    expect(name('@')).toBe('example.com');
    expect(name('')).toBe('example.com');
    expect(name('www')).toBe('www.example.com');
    expect(name('a.b.c')).toBe('a.b.c.example.com');
    expect(name('example.com')).toBe('example.com');
    expect(name('www.example.com')).toBe('www.example.com');
    // A name that does not end in the zone is relative to it, as on the platform.
    expect(name('www.example.org')).toBe('www.example.org.example.com');
  });

  it('treats a trailing dot as absolute and lowercases', () => {
    expect(name('www.example.com.')).toBe('www.example.com');
    expect(name('example.com.')).toBe('example.com');
    expect(name('WWW.Example.COM')).toBe('www.example.com');
    expect(name('Mail', 'Example.COM.')).toBe('mail.example.com');
  });

  it('accepts wildcards, underscores and converts Unicode labels to punycode', () => {
    expect(name('*')).toBe('*.example.com');
    expect(name('*.dev')).toBe('*.dev.example.com');
    expect(name('_dmarc')).toBe('_dmarc.example.com');
    expect(name('bücher')).toBe('xn--bcher-kva.example.com');
  });

  it('rejects names outside the zone', () => {
    expectError(
      () => name('www.example.org.'),
      9000,
      /name www\.example\.org is not inside zone example\.com/,
    );
    expectError(() => name('badexample.com.'), 9000, /name/);
  });

  it('rejects malformed names', () => {
    expectError(() => name('a.*.dev'), 9000, /name/);
    expectError(() => name('bad name'), 9000, /name/);
    expectError(() => name('a..b'), 9000, /name/);
    expectError(() => name('x'.repeat(64)), 9000, /name/);
    expectError(() => name(`${'abcdefghi.'.repeat(25)}x`), 9000, /name/);
  });
});

describe('canonicalizeRecord: content types', () => {
  it('accepts IPv4 for A and rejects anything else with 9005', () => {
    expect(rec({ type: 'A', name: 'www', content: ' 192.0.2.1 ' }).content).toBe('192.0.2.1');
    for (const bad of ['256.1.1.1', '1.2.3', '01.2.3.4', '1.1', 'example.com', '2001:db8::1']) {
      expectError(
        () => rec({ type: 'A', name: 'www', content: bad }),
        9005,
        /Content for A record/,
      );
    }
  });

  it('normalises IPv6 to the RFC 5952 form', () => {
    const v6 = (c: string) => rec({ type: 'AAAA', name: 'www', content: c }).content;
    expect(v6('2001:DB8:0:0:0:0:0:1')).toBe('2001:db8::1');
    expect(v6('2001:0db8:0000:0000:0001:0000:0000:0001')).toBe('2001:db8::1:0:0:1');
    expect(v6('2001:db8:0:0:1:0:0:0')).toBe('2001:db8:0:0:1::');
    expect(v6('2001:db8:0:1:1:1:1:1')).toBe('2001:db8:0:1:1:1:1:1');
    expect(v6('0:0:0:0:0:0:0:1')).toBe('::1');
    expect(v6('::')).toBe('::');
    expect(v6('fe80::0:0:1')).toBe('fe80::1');
    expect(v6('::FFFF:192.0.2.1')).toBe('::ffff:192.0.2.1');
    expect(v6('64:ff9b::192.0.2.33')).toBe('64:ff9b::c000:221');
    expect(canonicalIPv6('not-an-address')).toBeNull();
  });

  it('rejects invalid IPv6 with 9006', () => {
    for (const bad of [
      '2001:db8::1::2',
      '12345::',
      'fe80::1%eth0',
      '192.0.2.1',
      '1:2:3:4:5:6:7',
      '1:2:3:4:5:6:7:8:9',
      'g::1',
    ]) {
      expectError(
        () => rec({ type: 'AAAA', name: 'www', content: bad }),
        9006,
        /Content for AAAA record/,
      );
    }
  });

  it('normalises host-name targets for CNAME, NS and PTR', () => {
    expect(rec({ type: 'CNAME', name: 'www', content: 'Target.Example.NET.' }).content).toBe(
      'target.example.net',
    );
    expect(rec({ type: 'NS', name: 'sub', content: 'ns1.provider.net' }).content).toBe(
      'ns1.provider.net',
    );
    expect(rec({ type: 'PTR', name: '1.2', content: 'host.example.com.' }).content).toBe(
      'host.example.com',
    );
  });

  it('rejects non-host targets with 9007 naming content', () => {
    expectError(
      () => rec({ type: 'CNAME', name: 'www', content: '192.0.2.1' }),
      9007,
      /CNAME.*content/,
    );
    expectError(
      () => rec({ type: 'CNAME', name: 'www', content: 'https://x.example' }),
      9007,
      /content/,
    );
    expectError(() => rec({ type: 'NS', name: 'sub', content: 'bad host' }), 9007, /NS.*content/);
    expectError(() => rec({ type: 'PTR', name: 'p', content: '*.example.com' }), 9007, /content/);
  });

  it('requires a priority for MX and validates its target', () => {
    const mx = rec({ type: 'MX', name: '@', content: 'Mail.Example.com', priority: 10 });
    expect(mx).toMatchObject({ content: 'mail.example.com', priority: 10, proxiable: false });
    expect(rec({ type: 'MX', name: '@', content: 'mx.example.com', priority: 0 }).priority).toBe(0);
    expectError(() => rec({ type: 'MX', name: '@', content: 'mx.example.com' }), 9100, /priority/);
    expectError(
      () => rec({ type: 'MX', name: '@', content: '192.0.2.1', priority: 5 }),
      9007,
      /MX.*content/,
    );
    expectError(
      () =>
        canonicalizeRecord(
          {
            type: 'MX',
            name: '@',
            content: 'mx.example.com',
            priority: 70000,
            ttl: 1,
            proxied: false,
          },
          ZONE,
        ),
      9008,
      /priority/,
    );
  });

  it('does not keep a priority on types that have none', () => {
    expect(
      rec({ type: 'A', name: 'www', content: '192.0.2.1', priority: 5 }).priority,
    ).toBeUndefined();
  });

  it('keeps TXT content verbatim up to 2048 characters', () => {
    const text = ' v=spf1 include:_spf.example.net ~all ';
    expect(rec({ type: 'TXT', name: '@', content: text }).content).toBe(text);
    expect(rec({ type: 'TXT', name: '@', content: 'é'.repeat(2048) }).content).toHaveLength(2048);
    expectError(
      () => rec({ type: 'TXT', name: '@', content: 'x'.repeat(2049) }),
      1004,
      /content.*2048/,
    );
    expectError(
      () => rec({ type: 'TXT', name: '@', content: '' }),
      1004,
      /content is a required field/,
    );
  });

  it('requires content for content types', () => {
    expectError(() => rec({ type: 'A', name: 'www' }), 1004, /content is a required field/);
    expectError(() => rec({ type: 'CNAME', name: 'www', content: '  ' }), 1004, /content/);
  });

  it('validates OPENPGPKEY content as base64', () => {
    expect(rec({ type: 'OPENPGPKEY', name: 'k', content: 'mQINBF y4QQ==' }).content).toBe(
      'mQINBFy4QQ==',
    );
    expectError(
      () => rec({ type: 'OPENPGPKEY', name: 'k', content: 'not base64!' }),
      1004,
      /content.*base64/,
    );
  });
});

describe('canonicalizeRecord: data types', () => {
  it('renders CAA data into content', () => {
    const r = rec({
      type: 'CAA',
      name: '@',
      data: { flags: 0, tag: 'Issue', value: 'ca.example' },
    });
    expect(r.content).toBe('0 issue "ca.example"');
    expect(r.data).toEqual({ flags: 0, tag: 'issue', value: 'ca.example' });
    expect(r.priority).toBeUndefined();
    expect(
      rec({
        type: 'CAA',
        name: '@',
        data: { flags: 128, tag: 'iodef', value: 'mailto:a@b.example' },
      }).content,
    ).toBe('128 iodef "mailto:a@b.example"');
  });

  it('reads CAA given as content only', () => {
    const r = rec({ type: 'CAA', name: '@', content: '0 issuewild "ca.example; account=1"' });
    expect(r.data).toEqual({ flags: 0, tag: 'issuewild', value: 'ca.example; account=1' });
  });

  it('rejects bad CAA data naming the field', () => {
    expectError(
      () => rec({ type: 'CAA', name: '@', data: { flags: 0, tag: 'bogus', value: 'x' } }),
      1004,
      /data\.tag/,
    );
    expectError(
      () => rec({ type: 'CAA', name: '@', data: { flags: 256, tag: 'issue', value: 'x' } }),
      1004,
      /data\.flags/,
    );
    expectError(
      () => rec({ type: 'CAA', name: '@', data: { flags: 0, tag: 'issue' } }),
      1004,
      /data\.value/,
    );
  });

  it('requires data (or content) for data types', () => {
    expectError(() => rec({ type: 'CAA', name: '@' }), 1004, /data is a required field/);
    expectError(() => rec({ type: 'SRV', name: '_sip._tcp' }), 1004, /data/);
  });

  it('renders SRV data as "<weight> <port> <target>" with the priority separate', () => {
    const r = rec({
      type: 'SRV',
      name: '_sip._tcp',
      data: { priority: 10, weight: 5, port: 5060, target: 'SIP.example.com.' },
    });
    expect(r).toMatchObject({
      name: '_sip._tcp.example.com',
      content: '5 5060 sip.example.com',
      priority: 10,
      data: { priority: 10, weight: 5, port: 5060, target: 'sip.example.com' },
    });
  });

  it('takes the SRV priority from the top level when data has none', () => {
    const r = rec({
      type: 'SRV',
      name: '_sip._udp',
      priority: 20,
      data: { weight: 0, port: 5060, target: '.' },
    });
    expect(r).toMatchObject({
      priority: 20,
      content: '0 5060 .',
      data: { priority: 20, target: '.' },
    });
    expectError(
      () =>
        rec({ type: 'SRV', name: '_sip._udp', data: { weight: 0, port: 1, target: 'a.example' } }),
      9100,
      /priority/,
    );
  });

  it('builds the SRV name from the legacy service/proto/name data', () => {
    const r = rec({
      type: 'SRV',
      name: 'ignored',
      data: {
        service: '_xmpp',
        proto: 'tcp',
        name: 'example.com',
        priority: 1,
        weight: 2,
        port: 5222,
        target: 'chat.example.com',
      },
    });
    expect(r.name).toBe('_xmpp._tcp.example.com');
    expect(r.data).toEqual({ priority: 1, weight: 2, port: 5222, target: 'chat.example.com' });
    expect(
      rec({
        type: 'SRV',
        name: 'chat',
        data: { service: 'sip', proto: 'tls', priority: 0, weight: 0, port: 1, target: '.' },
      }).name,
    ).toBe('_sip._tls.chat.example.com');
  });

  it('reads SRV given as content plus priority', () => {
    const r = rec({
      type: 'SRV',
      name: '_sip._tcp',
      content: '5 5060 sip.example.com',
      priority: 10,
    });
    expect(r.data).toEqual({ priority: 10, weight: 5, port: 5060, target: 'sip.example.com' });
    expectError(
      () => rec({ type: 'SRV', name: '_sip._tcp', content: '5 5060 sip.example.com' }),
      9100,
      /priority/,
    );
    expectError(
      () => rec({ type: 'SRV', name: '_sip._tcp', content: '5 sip.example.com', priority: 1 }),
      1004,
      /content/,
    );
  });

  it('rejects bad SRV names and fields', () => {
    expectError(
      () =>
        rec({
          type: 'SRV',
          name: 'sip',
          data: { priority: 1, weight: 1, port: 1, target: 'a.example' },
        }),
      9000,
      /name/,
    );
    expectError(
      () =>
        rec({
          type: 'SRV',
          name: '_sip._tcp',
          data: { priority: 1, weight: 1, port: 70000, target: 'a.example' },
        }),
      1004,
      /data\.port/,
    );
    expectError(
      () =>
        rec({
          type: 'SRV',
          name: '_sip._tcp',
          data: { priority: 1, weight: 1, port: 1, target: '192.0.2.1' },
        }),
      9007,
      /data\.target/,
    );
  });

  it('handles URI with a separate priority', () => {
    const r = rec({
      type: 'URI',
      name: '_ftp._tcp',
      priority: 10,
      data: { weight: 1, target: 'ftp://ftp.example.com/' },
    });
    expect(r).toMatchObject({
      priority: 10,
      content: '1 "ftp://ftp.example.com/"',
      data: { weight: 1, target: 'ftp://ftp.example.com/' },
    });
    expectError(
      () => rec({ type: 'URI', name: '_ftp._tcp', data: { weight: 1, target: 'ftp://x/' } }),
      9100,
      /priority/,
    );
  });

  it('handles HTTPS and SVCB', () => {
    const h = rec({
      type: 'HTTPS',
      name: '@',
      data: { priority: 1, target: '.', value: 'alpn="h3,h2"' },
    });
    expect(h).toMatchObject({
      content: '1 . alpn="h3,h2"',
      data: { priority: 1, target: '.', value: 'alpn="h3,h2"' },
    });
    expect(h.priority).toBeUndefined();
    const s = rec({
      type: 'SVCB',
      name: '_dns',
      data: { priority: 0, target: 'Resolver.Example.net.' },
    });
    expect(s).toMatchObject({ content: '0 resolver.example.net', data: { value: '' } });
  });

  it('handles DS, DNSKEY, CERT, TLSA, SMIMEA and SSHFP', () => {
    expect(
      rec({
        type: 'DS',
        name: 'sub',
        data: { key_tag: 2371, algorithm: 13, digest_type: 2, digest: 'AB CD 12' },
      }).content,
    ).toBe('2371 13 2 abcd12');
    expectError(
      () =>
        rec({
          type: 'DS',
          name: 'sub',
          data: { key_tag: 1, algorithm: 13, digest_type: 2, digest: 'xyz' },
        }),
      1004,
      /data\.digest/,
    );
    expect(
      rec({
        type: 'DNSKEY',
        name: '@',
        data: {
          flags: 257,
          protocol: 3,
          algorithm: 13,
          public_key:
            'mdsswUyr3DPW132mOi8V9xESWE8jTo0d xCjjnopKl+GqJxpVXckHAeF+KkxLbxILfDLUT0rAK9iUzy1L53eKGQ==',
        },
      }).content,
    ).toBe(
      '257 3 13 mdsswUyr3DPW132mOi8V9xESWE8jTo0dxCjjnopKl+GqJxpVXckHAeF+KkxLbxILfDLUT0rAK9iUzy1L53eKGQ==',
    );
    expectError(
      () =>
        rec({
          type: 'DNSKEY',
          name: '@',
          data: { flags: 257, protocol: 3, algorithm: 13, public_key: '***' },
        }),
      1004,
      /data\.public_key/,
    );
    expect(
      rec({
        type: 'CERT',
        name: 'c',
        data: { type: 1, key_tag: 0, algorithm: 0, certificate: 'TUlJQg==' },
      }).content,
    ).toBe('1 0 0 TUlJQg==');
    expect(
      rec({
        type: 'TLSA',
        name: '_443._tcp',
        data: { usage: 3, selector: 1, matching_type: 1, certificate: 'ABCDEF' },
      }).content,
    ).toBe('3 1 1 abcdef');
    expectError(
      () =>
        rec({
          type: 'TLSA',
          name: '_443._tcp',
          data: { usage: 3, selector: 1, matching_type: 1, certificate: 'ABC' },
        }),
      1004,
      /data\.certificate/,
    );
    expect(
      rec({
        type: 'SMIMEA',
        name: 'x._smimecert',
        data: { usage: 0, selector: 0, matching_type: 0, certificate: '0a0b' },
      }).content,
    ).toBe('0 0 0 0a0b');
    expect(
      rec({
        type: 'SSHFP',
        name: 'host',
        data: { algorithm: 4, type: 2, fingerprint: '123456789ABCDEF0' },
      }).content,
    ).toBe('4 2 123456789abcdef0');
    expectError(
      () =>
        rec({ type: 'SSHFP', name: 'host', data: { algorithm: 300, type: 2, fingerprint: '12' } }),
      1004,
      /data\.algorithm/,
    );
  });

  it('handles NAPTR and LOC', () => {
    const n = rec({
      type: 'NAPTR',
      name: '@',
      data: {
        order: 100,
        preference: 10,
        flags: 'S',
        service: 'SIP+D2U',
        regex: '',
        replacement: '_sip._udp.example.com.',
      },
    });
    expect(n.content).toBe('100 10 "S" "SIP+D2U" "" _sip._udp.example.com');
    const l = rec({
      type: 'LOC',
      name: 'office',
      data: {
        lat_degrees: 37,
        lat_minutes: 46,
        lat_seconds: 46,
        lat_direction: 'N',
        long_degrees: 122,
        long_minutes: 23,
        long_seconds: 35,
        long_direction: 'W',
        altitude: 0,
        size: 100,
        precision_horz: 0,
        precision_vert: 0,
      },
    });
    expect(l.content).toBe('37 46 46 N 122 23 35 W 0m 100m 0m 0m');
    const fromContent = rec({
      type: 'LOC',
      name: 'office',
      content: '52 22 23.000 N 4 53 32.000 E -2.00m',
    });
    expect(fromContent.data).toMatchObject({
      lat_degrees: 52,
      lat_seconds: 23,
      long_direction: 'E',
      altitude: -2,
      size: 1,
      precision_horz: 10000,
      precision_vert: 10,
    });
    expectError(
      () =>
        rec({
          type: 'LOC',
          name: 'o',
          data: {
            lat_degrees: 91,
            lat_direction: 'N',
            long_degrees: 0,
            long_direction: 'E',
            altitude: 0,
          },
        }),
      1004,
      /data\.lat_degrees/,
    );
  });
});

describe('canonicalizeRecord: ttl, proxying and attributes', () => {
  const a = (extra: Record<string, unknown>) =>
    rec({ type: 'A', name: 'www', content: '192.0.2.1', ...extra });

  it('accepts ttl 1 (automatic) and 60..86400', () => {
    expect(a({}).ttl).toBe(1);
    expect(a({ ttl: 60 }).ttl).toBe(60);
    expect(a({ ttl: 86400 }).ttl).toBe(86400);
  });

  it('rejects other TTLs with 9021', () => {
    for (const ttl of [0, 2, 30, 59, 86401, 120.5, -1]) {
      expectError(() => a({ ttl }), 9021, /TTL/);
    }
  });

  it('marks A, AAAA and CNAME proxiable and lets them be proxied with the automatic TTL', () => {
    const p = a({ proxied: true, ttl: 3600 });
    expect(p).toMatchObject({ proxied: true, proxiable: true, ttl: 1 });
    expect(rec({ type: 'AAAA', name: 'x', content: '::1', proxied: true }).proxiable).toBe(true);
    expect(rec({ type: 'CNAME', name: 'x', content: 'y.example.net', proxied: true }).proxied).toBe(
      true,
    );
    expect(rec({ type: 'TXT', name: 'x', content: 'hi' }).proxiable).toBe(false);
  });

  it('refuses to proxy other types with 9004 naming proxied', () => {
    expectError(
      () => rec({ type: 'TXT', name: 'x', content: 'hi', proxied: true }),
      9004,
      /proxied/,
    );
    expectError(
      () => rec({ type: 'MX', name: 'x', content: 'mx.example.com', priority: 1, proxied: true }),
      9004,
      /proxied/,
    );
    expectError(
      () =>
        rec({
          type: 'CAA',
          name: 'x',
          data: { flags: 0, tag: 'issue', value: 'a' },
          proxied: true,
        }),
      9004,
      /proxied/,
    );
  });

  it('normalises the comment', () => {
    expect(a({}).comment).toBeNull();
    expect(a({ comment: '' }).comment).toBeNull();
    expect(a({ comment: 'web server' }).comment).toBe('web server');
    const long = { type: 'A' as const, name: 'www', content: '192.0.2.1', ttl: 1, proxied: false };
    expectError(
      () => canonicalizeRecord({ ...long, comment: 'x'.repeat(101) }, ZONE),
      1004,
      /comment/,
    );
    expectError(() => a({ comment: 'two\nlines' }), 1004, /comment/);
  });

  it('normalises tags and refuses reserved ones', () => {
    expect(a({ tags: ['Team:Edge', 'flag', 'team:Edge', 'empty:'] }).tags).toEqual([
      'team:Edge',
      'flag:',
      'empty:',
    ]);
    expect(a({}).tags).toEqual([]);
    expectError(() => a({ tags: ['cf-proxied:true'] }), 1004, /tags/);
    expectError(
      () =>
        canonicalizeRecord(
          {
            type: 'A',
            name: 'w',
            content: '192.0.2.1',
            ttl: 1,
            proxied: false,
            tags: ['bad name:x'],
          },
          ZONE,
        ),
      1004,
      /tags/,
    );
  });

  it('keeps only meaningful settings', () => {
    expect(
      a({ settings: { ipv4_only: true, ipv6_only: false, flatten_cname: true } }).settings,
    ).toEqual({ ipv4_only: true });
    expect(
      rec({ type: 'CNAME', name: 'x', content: 'y.example.net', settings: { flatten_cname: true } })
        .settings,
    ).toEqual({ flatten_cname: true });
    expect(a({}).settings).toEqual({});
    expectError(() => a({ settings: { ipv4_only: true, ipv6_only: true } }), 1004, /settings/);
  });

  it('keeps private_routing only on A and AAAA', () => {
    expect(a({ private_routing: true }).private_routing).toBe(true);
    expect(a({ private_routing: false }).private_routing).toBeUndefined();
    expect(
      rec({ type: 'TXT', name: 'x', content: 'y', private_routing: true }).private_routing,
    ).toBeUndefined();
  });
});

describe('applyPatch', () => {
  const base = rec({
    type: 'A',
    name: 'www',
    content: '192.0.2.1',
    ttl: 300,
    comment: 'web',
    tags: ['team:a'],
    settings: { ipv4_only: true },
  });
  const patch = (existing: CanonicalRecord, body: Record<string, unknown>) =>
    applyPatch(existing, DnsRecordPatch.parse(body), ZONE);

  it('changes only the given fields', () => {
    expect(patch(base, { content: '192.0.2.2' })).toEqual({ ...base, content: '192.0.2.2' });
    expect(patch(base, {})).toEqual(base);
    expect(patch(base, { ttl: 600, name: 'api' })).toEqual({
      ...base,
      ttl: 600,
      name: 'api.example.com',
    });
  });

  it('clears the comment with null, replaces tags and merges settings', () => {
    expect(patch(base, { comment: null }).comment).toBeNull();
    expect(patch(base, { tags: ['x:1'] }).tags).toEqual(['x:1']);
    expect(patch(base, { tags: [] }).tags).toEqual([]);
    expect(patch(base, { settings: { ipv4_only: false } }).settings).toEqual({});
    expect(patch(base, { proxied: true })).toMatchObject({ proxied: true, ttl: 1 });
  });

  it('re-validates the merged record', () => {
    expectError(() => patch(base, { ttl: 5 }), 9021, /TTL/);
    expectError(() => patch(base, { content: 'nope' }), 9005, /Content for A record/);
    expectError(() => patch(base, { type: 'AAAA' }), 9006, /Content for AAAA record/);
    expectError(() => patch(base, { name: 'x.example.org.' }), 9000, /name/);
  });

  it('changes the type together with the content, dropping proxying for non-proxiable types', () => {
    const proxied = patch(base, { proxied: true });
    const txt = patch(proxied, { type: 'TXT', content: 'hello' });
    expect(txt).toMatchObject({ type: 'TXT', content: 'hello', proxied: false, proxiable: false });
    expect(patch(base, { type: 'AAAA', content: '2001:db8::5' }).content).toBe('2001:db8::5');
  });

  it('merges partial data of the same type and applies a new SRV priority', () => {
    const srv = rec({
      type: 'SRV',
      name: '_sip._tcp',
      data: { priority: 10, weight: 5, port: 5060, target: 'sip.example.com' },
    });
    expect(patch(srv, { data: { port: 5061 } })).toMatchObject({
      content: '5 5061 sip.example.com',
      priority: 10,
    });
    expect(patch(srv, { priority: 20 })).toMatchObject({ priority: 20, data: { priority: 20 } });
    const caa = rec({
      type: 'CAA',
      name: '@',
      data: { flags: 0, tag: 'issue', value: 'a.example' },
    });
    expect(patch(caa, { content: '0 issuewild "b.example"' }).data).toEqual({
      flags: 0,
      tag: 'issuewild',
      value: 'b.example',
    });
    expect(patch(caa, { comment: 'ca' })).toEqual({ ...caa, comment: 'ca' });
  });

  it('keeps the MX priority unless changed', () => {
    const mx = rec({ type: 'MX', name: '@', content: 'mx.example.com', priority: 10 });
    expect(patch(mx, { content: 'mx2.example.com' })).toMatchObject({
      priority: 10,
      content: 'mx2.example.com',
    });
    expect(patch(mx, { priority: 5 }).priority).toBe(5);
  });
});

describe('findConflict', () => {
  const a1 = rec({ type: 'A', name: 'www', content: '192.0.2.1' });
  const a2 = rec({ type: 'A', name: 'www', content: '192.0.2.2' });
  const cname = rec({ type: 'CNAME', name: 'www', content: 'target.example.net' });
  const txt = rec({ type: 'TXT', name: 'www', content: 'hello' });

  it('finds nothing in an empty zone or for other names', () => {
    expect(findConflict([], a1)).toBeNull();
    expect(
      findConflict([rec({ type: 'CNAME', name: 'api', content: 'x.example.net' })], a1),
    ).toBeNull();
  });

  it('allows several A records (and MX records) at one name', () => {
    expect(findConflict([a1], a2)).toBeNull();
    expect(findConflict([a1, txt], rec({ type: 'AAAA', name: 'www', content: '::1' }))).toBeNull();
    const mx10 = rec({ type: 'MX', name: '@', content: 'mx.example.com', priority: 10 });
    expect(
      findConflict([mx10], rec({ type: 'MX', name: '@', content: 'mx.example.com', priority: 20 })),
    ).toBeNull();
  });

  it('reports an identical record with 81058, whatever the TTL, proxying or comment', () => {
    const twin = rec({
      type: 'A',
      name: 'WWW',
      content: '192.0.2.1',
      ttl: 600,
      comment: 'other',
      proxied: true,
    });
    const err = findConflict([a1], twin)!;
    expect(err).toBeInstanceOf(ApiError);
    expect(err.status).toBe(400);
    expect(err.errors[0]).toMatchObject({
      code: 81058,
      message: 'An identical record already exists.',
    });
    expect(
      findConflict([cname], rec({ type: 'CNAME', name: 'www', content: 'Target.example.net.' }))!
        .errors[0].code,
    ).toBe(81058);
    const caa = rec({ type: 'CAA', name: '@', data: { flags: 0, tag: 'issue', value: 'a' } });
    expect(
      findConflict([caa], rec({ type: 'CAA', name: '@', content: '0 issue "a"' }))!.errors[0].code,
    ).toBe(81058);
  });

  it('refuses a CNAME where any record exists (81053)', () => {
    for (const other of [
      a1,
      txt,
      rec({ type: 'CNAME', name: 'www', content: 'elsewhere.example.net' }),
    ]) {
      const err = findConflict([other], cname)!;
      expect(err.errors[0].code).toBe(81053);
      expect(err.errors[0].message).toContain('www.example.com');
    }
  });

  it('refuses any record where a CNAME exists (81054)', () => {
    for (const candidate of [
      a1,
      txt,
      rec({ type: 'MX', name: 'www', content: 'mx.example.com', priority: 1 }),
    ]) {
      const err = findConflict([cname], candidate)!;
      expect(err.errors[0].code).toBe(81054);
      expect(err.errors[0].message).toContain('www.example.com');
    }
  });

  it('keeps delegations apart from other records below the apex when the zone is known', () => {
    const ns = rec({ type: 'NS', name: 'sub', content: 'ns1.other.net' });
    const subA = rec({ type: 'A', name: 'sub', content: '192.0.2.9' });
    expect(findConflict([ns], subA, ZONE)!.errors[0].code).toBe(81056);
    expect(findConflict([subA], ns, ZONE)!.errors[0].code).toBe(81056);
    expect(
      findConflict([ns], rec({ type: 'NS', name: 'sub', content: 'ns2.other.net' }), ZONE),
    ).toBeNull();
    const apexNs = rec({ type: 'NS', name: '@', content: 'ns1.other.net' });
    expect(
      findConflict([apexNs], rec({ type: 'A', name: '@', content: '192.0.2.1' }), ZONE),
    ).toBeNull();
    expect(findConflict([ns], subA)).toBeNull();
  });
});
