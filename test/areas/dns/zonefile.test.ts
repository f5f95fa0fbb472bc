import { describe, expect, it } from 'vitest';
import { canonicalizeRecord, type CanonicalRecord } from '../../../src/areas/dns/record-rules.ts';
import { DnsRecordInput } from '../../../src/areas/dns/schemas.ts';
import { exportZoneFile, parseZoneFile } from '../../../src/areas/dns/zonefile.ts';

const ZONE = 'example.com';
const NOW = new Date('2025-03-04T05:06:07Z');

function rec(body: Record<string, unknown>): CanonicalRecord {
  return canonicalizeRecord(DnsRecordInput.parse(body), ZONE);
}

/** The record lines of an export (no comments, directives or blank lines). */
function recordLines(text: string): string[] {
  return text.split('\n').filter((l) => l !== '' && !l.startsWith(';') && !l.startsWith('$'));
}

function parseOk(text: string, options?: { proxied?: boolean }) {
  const result = parseZoneFile(text, ZONE, options);
  expect(result.errors).toEqual([]);
  return result.records;
}

describe('exportZoneFile', () => {
  const records = [
    rec({ type: 'A', name: 'www', content: '192.0.2.1', proxied: true }),
    rec({ type: 'A', name: 'direct', content: '192.0.2.2', ttl: 300 }),
    rec({ type: 'MX', name: '@', content: 'mail.example.com', priority: 10 }),
    rec({ type: 'TXT', name: '@', content: 'v=spf1 -all' }),
    rec({
      type: 'SRV',
      name: '_sip._tcp',
      data: { priority: 10, weight: 5, port: 5060, target: 'sip.example.com' },
    }),
    rec({ type: 'CAA', name: '@', data: { flags: 0, tag: 'issue', value: 'ca.example' } }),
  ];
  const text = exportZoneFile(ZONE, records, NOW);

  it('writes the header, directives and an SOA record', () => {
    expect(text).toContain(';; Domain:     example.com.\n');
    expect(text).toContain(';; Exported:   2025-03-04 05:06:07\n');
    expect(text).toContain('\n$ORIGIN example.com.\n$TTL 3600\n');
    const serial = Math.floor(NOW.getTime() / 1000);
    expect(text).toContain(
      `example.com.\t3600\tIN\tSOA\tns.example.com. hostmaster.example.com. ${serial} `,
    );
    expect(text.endsWith('\n')).toBe(true);
  });

  it('writes one line per record with absolute names, TTL, class and presentation data', () => {
    const lines = recordLines(text);
    expect(lines).toHaveLength(records.length + 1);
    expect(lines).toContain('www.example.com.\t1\tIN\tA\t192.0.2.1 ; cf_tags=cf-proxied:true');
    expect(lines).toContain(
      'direct.example.com.\t300\tIN\tA\t192.0.2.2 ; cf_tags=cf-proxied:false',
    );
    expect(lines).toContain('example.com.\t1\tIN\tMX\t10 mail.example.com.');
    expect(lines).toContain('example.com.\t1\tIN\tTXT\t"v=spf1 -all"');
    expect(lines).toContain('_sip._tcp.example.com.\t1\tIN\tSRV\t10 5 5060 sip.example.com.');
    expect(lines).toContain('example.com.\t1\tIN\tCAA\t0 issue "ca.example"');
  });

  it('groups records by type under headings', () => {
    const a = text.indexOf(';; A Records');
    const caa = text.indexOf(';; CAA Records');
    const mx = text.indexOf(';; MX Records');
    expect(a).toBeGreaterThan(text.indexOf(';; SOA Record'));
    expect(caa).toBeGreaterThan(a);
    expect(mx).toBeGreaterThan(caa);
    expect(text.indexOf('direct.example.com.')).toBeLessThan(text.indexOf('www.example.com.'));
  });

  it('splits long TXT content into quoted strings of at most 255 bytes and escapes quotes', () => {
    const content = `${'a'.repeat(254)}é${'b'.repeat(300)} say "hi" \\ end`;
    const line = recordLines(
      exportZoneFile(ZONE, [rec({ type: 'TXT', name: 't', content })], NOW),
    )[1];
    const rdata = line.split('\t')[4];
    const strings = [...rdata.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]);
    expect(strings.length).toBe(3);
    expect(strings[0]).toBe('a'.repeat(254)); // é (2 bytes) would not fit
    for (const s of strings) {
      const unescaped = s.replace(/\\(.)/g, '$1');
      expect(Buffer.byteLength(unescaped)).toBeLessThanOrEqual(255);
    }
    expect(strings[2]).toContain('say \\"hi\\" \\\\ end');
  });

  it('writes comments and tags in the trailing comment', () => {
    const r = rec({
      type: 'A',
      name: 'x',
      content: '192.0.2.3',
      comment: 'web server',
      tags: ['team:edge', 'note:a,b'],
    });
    expect(recordLines(exportZoneFile(ZONE, [r], NOW))[1]).toBe(
      'x.example.com.\t1\tIN\tA\t192.0.2.3 ; web server cf_tags=team:edge,note:"a,b",cf-proxied:false',
    );
    const t = rec({ type: 'TXT', name: 'x', content: 'y', comment: 'mentions cf_tags= in text' });
    expect(recordLines(exportZoneFile(ZONE, [t], NOW))[1]).toBe(
      'x.example.com.\t1\tIN\tTXT\t"y" ; mentions cf_tags= in text cf_tags=',
    );
    const c = rec({
      type: 'CNAME',
      name: 'c',
      content: 'target.example.net',
      settings: { flatten_cname: true },
    });
    expect(recordLines(exportZoneFile(ZONE, [c], NOW))[1]).toBe(
      'c.example.com.\t1\tIN\tCNAME\ttarget.example.net. ; cf_tags=cf-proxied:false,cf-flatten-cname',
    );
  });

  it('writes an empty zone as header and SOA only', () => {
    expect(recordLines(exportZoneFile('Example.COM.', [], NOW))).toHaveLength(1);
  });
});

describe('parseZoneFile', () => {
  it('reads names relative to $ORIGIN, @, absolute names and omitted owners', () => {
    const records = parseOk(
      [
        '$ORIGIN example.com.',
        '@        300 IN A 192.0.2.1',
        'www      300 IN A 192.0.2.2',
        '         300 IN A 192.0.2.3',
        'api.example.com. 300 IN A 192.0.2.4',
        '$ORIGIN dev.example.com.',
        'app      300 IN A 192.0.2.5',
        '@        300 IN A 192.0.2.6',
        '$ORIGIN sub',
        'deep     300 IN A 192.0.2.7',
      ].join('\n'),
    );
    expect(records.map((r) => [r.name, r.content])).toEqual([
      ['example.com.', '192.0.2.1'],
      ['www.example.com.', '192.0.2.2'],
      ['www.example.com.', '192.0.2.3'],
      ['api.example.com.', '192.0.2.4'],
      ['app.dev.example.com.', '192.0.2.5'],
      ['dev.example.com.', '192.0.2.6'],
      ['deep.sub.dev.example.com.', '192.0.2.7'],
    ]);
  });

  it('defaults to the zone as origin', () => {
    expect(parseOk('www 60 A 192.0.2.1')[0].name).toBe('www.example.com.');
  });

  it('reads TTL and class in either order or omitted, with $TTL and unit suffixes', () => {
    const records = parseOk(
      [
        'a IN 120 A 192.0.2.1',
        'b 120 IN A 192.0.2.1',
        'c A 192.0.2.1',
        '$TTL 1h',
        'd IN A 192.0.2.1',
        'e 1h30m A 192.0.2.1',
        'f 1 A 192.0.2.1',
      ].join('\n'),
    );
    expect(records.map((r) => r.ttl)).toEqual([120, 120, 120, 3600, 5400, 1]);
  });

  it('uses the automatic TTL when nothing gives one', () => {
    expect(parseOk('a A 192.0.2.1')[0].ttl).toBe(1);
  });

  it('skips the SOA record, including one spanning lines in parentheses', () => {
    const records = parseOk(
      [
        '$TTL 3600',
        '@ IN SOA ns1.example.com. hostmaster.example.com. (',
        '        2024010101 ; serial',
        '        7200       ; refresh',
        '        3600 1209600 3600 )',
        '  IN NS ns1.provider.net.',
      ].join('\n'),
    );
    expect(records).toEqual([
      { type: 'NS', name: 'example.com.', ttl: 3600, proxied: false, content: 'ns1.provider.net' },
    ]);
  });

  it('handles comments, quotes, escapes and multi-string TXT', () => {
    const records = parseOk(
      [
        '; a whole-line comment',
        'a TXT "semi;colon" ; trailing comment',
        'b TXT "part one, " "part two"',
        'c TXT "quote \\" backslash \\\\ letter \\065 é \\195\\169"',
        'd TXT unquoted-word',
        'e TXT ( "first "',
        '        "second" ) ; after the parenthesis',
      ].join('\n'),
    );
    expect(records.map((r) => r.content)).toEqual([
      'semi;colon',
      'part one, part two',
      'quote " backslash \\ letter A é é',
      'unquoted-word',
      'first second',
    ]);
    expect(records[0].comment).toBe('trailing comment');
    expect(records[4].comment).toBe('after the parenthesis');
    expect(records[1].comment).toBeUndefined();
  });

  it('reports an empty TXT record as invalid content', () => {
    const result = parseZoneFile('ok A 192.0.2.1\nf TXT ""', ZONE);
    expect(result.records).toHaveLength(1);
    expect(result.errors).toEqual([
      { line: 2, message: 'DNS Validation Error: content is a required field for TXT records.' },
    ]);
  });

  it('reads cf_tags: proxied status, flattening, tags and comments', () => {
    const records = parseOk(
      [
        'a 60 IN A 192.0.2.1 ; cf_tags=cf-proxied:true',
        'b 60 IN A 192.0.2.1 ; cf_tags=cf-proxied:false',
        'c 60 IN A 192.0.2.1 ;   cf_tags=awesome,Tag2:value2,tag3:"value,with,commas",tag4:"with \\"quotes\\""',
        'd 60 IN A 192.0.2.1 ; this comment contains cf_tags= as text cf_tags=',
        'e 60 IN A 192.0.2.1 ; simple example cf_tags=important,ticket:THIS-12345,cf-proxied:true',
        'f 60 IN CNAME target.example.net. ; cf_tags=cf-flatten-cname',
        'g 60 IN A 192.0.2.1 ; just a comment',
      ].join('\n'),
    );
    expect(records[0].proxied).toBe(true);
    expect(records[1].proxied).toBe(false);
    expect(records[2].tags).toEqual([
      'awesome:',
      'tag2:value2',
      'tag3:value,with,commas',
      'tag4:with "quotes"',
    ]);
    expect(records[2].comment).toBeUndefined();
    expect(records[3]).toMatchObject({ comment: 'this comment contains cf_tags= as text' });
    expect(records[3].tags).toBeUndefined();
    expect(records[4]).toMatchObject({
      comment: 'simple example',
      tags: ['important:', 'ticket:THIS-12345'],
      proxied: true,
    });
    expect(records[5].settings).toEqual({ flatten_cname: true });
    expect(records[6].comment).toBe('just a comment');
  });

  it('applies the proxied option only to proxiable records without a cf-proxied tag', () => {
    const records = parseOk(
      ['a A 192.0.2.1', 'b A 192.0.2.1 ; cf_tags=cf-proxied:false', 'c TXT "x"'].join('\n'),
      { proxied: true },
    );
    expect(records.map((r) => r.proxied)).toEqual([true, false, false]);
  });

  it('resolves relative targets against the origin', () => {
    const records = parseOk(
      [
        'www CNAME web',
        'alias CNAME @',
        '@ MX 10 mail',
        '@ MX 20 backup.example.net.',
        'sub NS ns1.sub',
        '4 PTR host',
        '_sip._tcp SRV 1 2 5060 sip',
      ].join('\n'),
    );
    expect(records.map((r) => r.content ?? r.data)).toEqual([
      'web.example.com',
      'example.com',
      'mail.example.com',
      'backup.example.net',
      'ns1.sub.example.com',
      'host.example.com',
      { priority: 1, weight: 2, port: 5060, target: 'sip.example.com' },
    ]);
    expect(records[2].priority).toBe(10);
    expect(records[6].priority).toBe(1);
  });

  it('reads every supported type', () => {
    const records = parseOk(
      [
        'a A 192.0.2.1',
        'a AAAA 2001:db8::1',
        'c CNAME a.example.com.',
        '@ MX 10 mx.example.com.',
        's NS ns.example.net.',
        't TXT "hello"',
        'p PTR a.example.com.',
        'k OPENPGPKEY mQINBFy4 QQ==',
        '@ CAA 0 issue "ca.example"',
        'cert CERT PKIX 0 0 TUlJ Qg==',
        '@ DNSKEY 257 3 13 ( mdsswUyr3DPW132mOi8V9xESWE8jTo0d',
        '          xCjjnopKl+GqJxpVXckHAeF+KkxLbxILfDLUT0rAK9iUzy1L53eKGQ== )',
        'sub DS 2371 13 2 1F987CC6583E92DF0890718C42 ( 91F4E8A1F4E5D6B0C7A1F1EAB1A6B0C7A1 )',
        '@ HTTPS 1 . alpn="h3,h2" ipv4hint=192.0.2.1',
        'loc LOC 52 22 23.000 N 4 53 32.000 E -2.00m 0.00m 10000m 10m',
        '@ NAPTR 100 10 "S" "SIP+D2U" "" _sip._udp.example.com.',
        'x._smimecert SMIMEA 3 1 1 ABCDEF',
        '_sip._tcp SRV 10 5 5060 sip.example.com.',
        'host SSHFP 4 2 123456789ABCDEF0',
        '_dns SVCB 1 resolver.example.net. alpn=dot',
        '_443._tcp TLSA 3 1 1 0a0b0c',
        '_ftp._tcp URI 10 1 "ftp://ftp.example.com/public"',
      ].join('\n'),
    );
    expect(records.map((r) => r.type)).toEqual([
      'A',
      'AAAA',
      'CNAME',
      'MX',
      'NS',
      'TXT',
      'PTR',
      'OPENPGPKEY',
      'CAA',
      'CERT',
      'DNSKEY',
      'DS',
      'HTTPS',
      'LOC',
      'NAPTR',
      'SMIMEA',
      'SRV',
      'SSHFP',
      'SVCB',
      'TLSA',
      'URI',
    ]);
    const byType = Object.fromEntries(records.map((r) => [r.type, r]));
    expect(byType.OPENPGPKEY.content).toBe('mQINBFy4QQ==');
    expect(byType.CAA.data).toEqual({ flags: 0, tag: 'issue', value: 'ca.example' });
    expect(byType.CERT.data).toEqual({
      type: 1,
      key_tag: 0,
      algorithm: 0,
      certificate: 'TUlJQg==',
    });
    expect(byType.DNSKEY.data).toMatchObject({ flags: 257, protocol: 3, algorithm: 13 });
    expect(String(byType.DNSKEY.data!.public_key)).toMatch(/^mdssw.*GQ==$/);
    expect(byType.DS.data).toMatchObject({
      key_tag: 2371,
      digest: '1F987CC6583E92DF0890718C4291F4E8A1F4E5D6B0C7A1F1EAB1A6B0C7A1',
    });
    expect(byType.HTTPS.data).toEqual({
      priority: 1,
      target: '.',
      value: 'alpn="h3,h2" ipv4hint=192.0.2.1',
    });
    expect(byType.LOC.data).toMatchObject({
      lat_degrees: 52,
      lat_seconds: 23,
      long_direction: 'E',
      altitude: -2,
      size: 0,
    });
    expect(byType.NAPTR.data).toEqual({
      order: 100,
      preference: 10,
      flags: 'S',
      service: 'SIP+D2U',
      regex: '',
      replacement: '_sip._udp.example.com',
    });
    expect(byType.SVCB.data).toEqual({
      priority: 1,
      target: 'resolver.example.net',
      value: 'alpn=dot',
    });
    expect(byType.URI).toMatchObject({
      priority: 10,
      data: { weight: 1, target: 'ftp://ftp.example.com/public' },
    });
  });

  it('reports unknown types and bad lines with their line numbers and keeps going', () => {
    const result = parseZoneFile(
      [
        'ok1 A 192.0.2.1',
        'bad WKS 192.0.2.1 TCP ftp',
        'ip A 999.1.1.1',
        'cls CH A 192.0.2.1',
        '$INCLUDE other.zone',
        'mx MX mail.example.com.',
        'out.example.org. A 192.0.2.1',
        'ok2 A 192.0.2.2',
        'two A 192.0.2.1 192.0.2.2',
        '$GENERATE 1-3 host$ A 192.0.2.$',
        'short SRV 1 2 3',
        'ok3 A 192.0.2.3',
      ].join('\n'),
      ZONE,
    );
    expect(result.records.map((r) => r.name)).toEqual([
      'ok1.example.com.',
      'ok2.example.com.',
      'ok3.example.com.',
    ]);
    expect(result.errors.map((e) => e.line)).toEqual([2, 3, 4, 5, 6, 7, 9, 10, 11]);
    expect(result.errors[0].message).toMatch(/unsupported record type WKS/);
    expect(result.errors[1].message).toMatch(/Content for A record must be a valid IPv4 address/);
    expect(result.errors[2].message).toMatch(/class CH/);
    expect(result.errors[3].message).toMatch(/\$INCLUDE directive not allowed/);
    expect(result.errors[4].message).toMatch(/MX/);
    expect(result.errors[5].message).toMatch(/not inside zone example\.com/);
    expect(result.errors[6].message).toMatch(/exactly one value/);
    expect(result.errors[7].message).toMatch(/\$GENERATE/);
    expect(result.errors[8].message).toMatch(/SRV/);
  });

  it('reports broken quoting and parentheses without throwing', () => {
    const result = parseZoneFile(
      [
        'a TXT "never closed',
        'b A 192.0.2.1',
        'c A 192.0.2.1 )',
        'd TXT ( "x"',
        'e A 192.0.2.2',
      ].join('\n'),
      ZONE,
    );
    expect(result.records.map((r) => r.name)).toEqual(['b.example.com.']);
    expect(result.errors).toEqual([
      { line: 1, message: 'unterminated quoted string' },
      { line: 3, message: 'unbalanced parentheses: ")" without "("' },
      { line: 4, message: 'unbalanced parentheses: "(" is never closed' },
    ]);
  });

  it('reports a record without an owner before any other', () => {
    const result = parseZoneFile('   IN A 192.0.2.1', ZONE);
    expect(result.records).toEqual([]);
    expect(result.errors).toEqual([
      { line: 1, message: 'record has no owner name and none precedes it' },
    ]);
  });

  it('handles CRLF line endings and empty input', () => {
    expect(
      parseOk('a A 192.0.2.1\r\nb A 192.0.2.2 ; note\r\n').map((r) => [r.name, r.comment]),
    ).toEqual([
      ['a.example.com.', undefined],
      ['b.example.com.', 'note'],
    ]);
    expect(parseZoneFile('', ZONE)).toEqual({ records: [], errors: [] });
  });
});

describe('round trip', () => {
  const bodies: Record<string, unknown>[] = [
    {
      type: 'A',
      name: '@',
      content: '192.0.2.1',
      proxied: true,
      comment: 'apex; main site',
      tags: ['team:web'],
    },
    { type: 'A', name: 'www', content: '192.0.2.10', ttl: 300 },
    {
      type: 'A',
      name: 'www',
      content: '192.0.2.11',
      ttl: 300,
      tags: ['pool:blue', 'note:"x=1, y=2"'],
    },
    { type: 'AAAA', name: 'www6', content: '2001:0DB8::0:1', proxied: true },
    {
      type: 'CNAME',
      name: 'blog',
      content: 'hosting.example.net',
      proxied: false,
      settings: { flatten_cname: true },
    },
    {
      type: 'CNAME',
      name: '*.apps',
      content: 'ingress.example.com',
      comment: 'mentions cf_tags= here',
    },
    { type: 'MX', name: '@', content: 'mx1.example.com', priority: 10, ttl: 3600 },
    { type: 'MX', name: '@', content: 'mx2.example.net', priority: 20, ttl: 3600 },
    { type: 'TXT', name: '@', content: 'v=spf1 include:_spf.example.net ~all' },
    {
      type: 'TXT',
      name: 'dkim._domainkey',
      content: `v=DKIM1; k=rsa; p=${'A'.repeat(400)}"quoted"\\é`,
    },
    { type: 'NS', name: 'delegated', content: 'ns1.other.net', ttl: 86400 },
    { type: 'PTR', name: '5.2', content: 'host.example.com' },
    { type: 'CAA', name: '@', data: { flags: 0, tag: 'issue', value: 'ca.example; account=42' } },
    {
      type: 'SRV',
      name: '_sip._tcp',
      data: { priority: 10, weight: 60, port: 5060, target: 'sip.example.com' },
    },
    { type: 'SRV', name: '_none._tcp', data: { priority: 0, weight: 0, port: 0, target: '.' } },
    {
      type: 'URI',
      name: '_ftp._tcp',
      priority: 10,
      data: { weight: 1, target: 'ftp://ftp.example.com/"pub"' },
    },
    {
      type: 'HTTPS',
      name: '@',
      data: { priority: 1, target: '.', value: 'alpn="h3,h2" ipv4hint=192.0.2.1' },
    },
    {
      type: 'SVCB',
      name: '_dns',
      data: { priority: 2, target: 'resolver.example.net', value: 'alpn=dot port=853' },
    },
    {
      type: 'DS',
      name: 'delegated',
      data: { key_tag: 2371, algorithm: 13, digest_type: 2, digest: 'abcdef0123456789' },
    },
    {
      type: 'DNSKEY',
      name: '@',
      data: { flags: 257, protocol: 3, algorithm: 13, public_key: 'AwEAAag=' },
    },
    {
      type: 'CERT',
      name: 'cert',
      data: { type: 1, key_tag: 12, algorithm: 8, certificate: 'TUlJQg==' },
    },
    {
      type: 'TLSA',
      name: '_443._tcp.www',
      data: { usage: 3, selector: 1, matching_type: 1, certificate: '0a0b0c' },
    },
    {
      type: 'SMIMEA',
      name: 'x._smimecert',
      data: { usage: 3, selector: 0, matching_type: 0, certificate: 'ff' },
    },
    { type: 'SSHFP', name: 'host', data: { algorithm: 4, type: 2, fingerprint: '00ff' } },
    {
      type: 'NAPTR',
      name: '@',
      data: {
        order: 100,
        preference: 10,
        flags: 'U',
        service: 'E2U+sip',
        regex: '!^.*$!sip:info@example.com!',
        replacement: '.',
      },
    },
    {
      type: 'LOC',
      name: 'office',
      data: {
        lat_degrees: 51,
        lat_minutes: 30,
        lat_seconds: 12.748,
        lat_direction: 'N',
        long_degrees: 0,
        long_minutes: 7,
        long_seconds: 39.611,
        long_direction: 'W',
        altitude: 12.5,
        size: 1,
        precision_horz: 10000,
        precision_vert: 10,
      },
    },
    { type: 'OPENPGPKEY', name: 'key._openpgpkey', content: 'mQINBFy4QQ==' },
  ];
  const sortKey = (r: CanonicalRecord) => `${r.type} ${r.name} ${r.content} ${r.priority ?? ''}`;
  const sorted = (rs: CanonicalRecord[]) =>
    [...rs].sort((a, b) => (sortKey(a) < sortKey(b) ? -1 : 1));

  it('parse(export(records)) gives back the same records', () => {
    const original = bodies.map(rec);
    const text = exportZoneFile(ZONE, original, NOW);
    const parsed = parseZoneFile(text, ZONE);
    expect(parsed.errors).toEqual([]);
    expect(parsed.records).toHaveLength(original.length);
    const back = parsed.records.map((r) => canonicalizeRecord(r, ZONE));
    expect(sorted(back)).toEqual(sorted(original));
  });

  it('is stable: exporting the re-imported records gives the same file', () => {
    const original = bodies.map(rec);
    const text = exportZoneFile(ZONE, original, NOW);
    const again = parseZoneFile(text, ZONE).records.map((r) => canonicalizeRecord(r, ZONE));
    expect(exportZoneFile(ZONE, again, NOW)).toBe(text);
  });
});
