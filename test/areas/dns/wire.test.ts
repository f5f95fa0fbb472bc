/** The DNS wire codec: round trips, name compression, truncation, EDNS, and malformed input. */
import { describe, expect, it } from 'vitest';
import {
  bytesToIpv6,
  decodeMessage,
  ipv4ToBytes,
  emptyMessage,
  encodeMessage,
  ipv6ToBytes,
  nameToWire,
  parseName,
  Rcode,
  RRClass,
  RRType,
  splitCharacterStrings,
  WireError,
  type Message,
  type RecordData,
  type ResourceRecord,
} from '../../../src/areas/dns/wire.ts';

const te = new TextEncoder();
const IN = RRClass.IN;

function sample(): Message {
  const rr = (r: { name: string; ttl?: number } & RecordData) =>
    ({ class: IN, ttl: 300, ...r }) as ResourceRecord;
  return {
    ...emptyMessage(0xbeef),
    qr: true,
    aa: true,
    rd: true,
    cd: true,
    questions: [{ name: 'www.Example.com', type: RRType.A, class: IN }],
    answers: [
      rr({ name: 'www.Example.com', type: RRType.CNAME, target: 'web.example.com' }),
      rr({ name: 'web.example.com', type: RRType.A, address: '192.0.2.1' }),
      rr({ name: 'web.example.com', type: RRType.AAAA, address: '2001:db8::1' }),
      rr({ name: 'example.com', type: RRType.MX, preference: 10, exchange: 'mail.example.com' }),
      rr({ name: 'example.com', type: RRType.NS, target: 'ns1.example.com' }),
      rr({ name: '1.2.0.192.in-addr.arpa', type: RRType.PTR, target: 'web.example.com' }),
      rr({
        name: 'example.com',
        type: RRType.TXT,
        strings: [te.encode('v=spf1 -all'), te.encode(''), te.encode('ünïcode')],
      }),
      rr({
        name: '_sip._tcp.example.com',
        type: RRType.SRV,
        priority: 10,
        weight: 5,
        port: 5060,
        target: 'sip.example.com',
      }),
      rr({
        name: 'example.com',
        type: RRType.CAA,
        flags: 128,
        tag: 'issue',
        value: 'letsencrypt.org; validationmethods=dns-01',
      }),
      rr({ name: 'example.com', type: RRType.HINFO, cpu: 'RFC8482', os: '' }),
      rr({ name: 'example.com', type: 65280, rdata: Uint8Array.from([1, 2, 3, 0xff]) }),
    ],
    authority: [
      rr({
        name: 'example.com',
        type: RRType.SOA,
        ttl: 3600,
        mname: 'ns1.example.com',
        rname: 'dns.example.com',
        serial: 4294967295,
        refresh: 10000,
        retry: 2400,
        expire: 604800,
        minimum: 1800,
      }),
    ],
    additional: [rr({ name: 'mail.example.com', type: RRType.A, address: '192.0.2.25' })],
    edns: {
      udpSize: 1232,
      version: 0,
      dnssecOk: true,
      options: [{ code: 10, data: Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]) }],
    },
  };
}

describe('round trip', () => {
  it('decodes what it encodes, for every supported type', () => {
    const msg = sample();
    const decoded = decodeMessage(encodeMessage(msg));
    expect(decoded).toEqual(msg);
  });

  it('carries the header bits and the extended RCODE through EDNS', () => {
    const msg: Message = {
      ...emptyMessage(1),
      qr: true,
      opcode: 4,
      tc: true,
      ra: true,
      ad: true,
      rcode: Rcode.BADVERS,
      edns: { udpSize: 512, version: 0, dnssecOk: false, options: [] },
    };
    const d = decodeMessage(encodeMessage(msg));
    expect(d).toEqual(msg);
    expect(() => encodeMessage({ ...msg, edns: undefined })).toThrow(WireError);
  });

  it('keeps escaped label bytes', () => {
    const name = 'a\\.b\\\\c\\000.x\\255y.example';
    const msg: Message = { ...emptyMessage(2), questions: [{ name, type: RRType.TXT, class: IN }] };
    expect(decodeMessage(encodeMessage(msg)).questions[0].name).toBe(name);
    expect(parseName(name).labels[0]).toEqual(Uint8Array.from([0x61, 0x2e, 0x62, 0x5c, 0x63, 0]));
  });

  it('parses names the same way however often they are seen (the parse cache is bounded)', () => {
    const first = parseName('Mail.Example.com.');
    expect(first.labels.map((l) => Buffer.from(l).toString())).toEqual(['Mail', 'Example', 'com']);
    expect(first.suffixes).toEqual(['Mail.Example.com', 'Example.com', 'com']);
    for (let i = 0; i < 10_000; i++) parseName(`n${i}.example.com`);
    expect(parseName('Mail.Example.com.')).toEqual(first);
    expect(() => parseName('a..b')).toThrow(/empty label/);
    expect(() => parseName('a..b')).toThrow(/empty label/);
    expect(parseName('caf\u00e9.example').labels[0]).toEqual(
      Uint8Array.from([0x63, 0x61, 0x66, 0xc3, 0xa9]),
    );
  });

  it('reads IPv4 addresses strictly', () => {
    expect(ipv4ToBytes('192.0.2.1')).toEqual(Uint8Array.from([192, 0, 2, 1]));
    expect(ipv4ToBytes('0.0.0.0')).toEqual(new Uint8Array(4));
    for (const bad of [
      '1.2.3',
      '1.2.3.4.5',
      '256.1.1.1',
      '1..2.3',
      '1.2.3.',
      '1234.1.1.1',
      ' 1.2.3.4',
      'a.b.c.d',
      '',
    ])
      expect(() => ipv4ToBytes(bad), bad).toThrow(WireError);
  });

  it('encodes the root name as one zero byte', () => {
    expect(nameToWire('')).toEqual(Uint8Array.from([0]));
    expect(nameToWire('.')).toEqual(Uint8Array.from([0]));
    expect(nameToWire('ab.c.')).toEqual(Uint8Array.from([2, 0x61, 0x62, 1, 0x63, 0]));
  });

  it('formats IPv6 addresses canonically (RFC 5952)', () => {
    expect(bytesToIpv6(ipv6ToBytes('2001:0DB8:0:0:0:0:0:1'))).toBe('2001:db8::1');
    expect(bytesToIpv6(ipv6ToBytes('::'))).toBe('::');
    expect(bytesToIpv6(ipv6ToBytes('1:0:0:2:0:0:0:3'))).toBe('1:0:0:2::3');
    expect(bytesToIpv6(ipv6ToBytes('::ffff:192.0.2.1'))).toBe('::ffff:c000:201');
    expect(() => ipv6ToBytes('1::2::3')).toThrow(WireError);
    expect(() => ipv6ToBytes('12345::')).toThrow(WireError);
  });

  it('splits text into character-strings of at most 255 bytes without cutting a character', () => {
    expect(splitCharacterStrings('')).toEqual([new Uint8Array(0)]);
    const parts = splitCharacterStrings('é'.repeat(200)); // 400 bytes
    expect(parts.map((p) => p.length)).toEqual([254, 146]);
    expect(new TextDecoder().decode(Buffer.concat(parts))).toBe('é'.repeat(200));
  });
});

describe('name compression', () => {
  it('points repeated names and suffixes at their first occurrence', () => {
    const msg = sample();
    const compressed = encodeMessage(msg);
    // The first answer's owner is the question name: a 2-byte pointer to offset 12.
    const afterQuestion = 12 + nameToWire('www.Example.com').length + 4;
    expect([compressed[afterQuestion], compressed[afterQuestion + 1]]).toEqual([0xc0, 12]);
    // Two records at one name: the second owner is a pointer.
    const two = encodeMessage({ ...emptyMessage(), answers: [msg.answers[1], msg.answers[2]] });
    expect(two.length).toBe(12 + (17 + 10 + 4) + (2 + 10 + 16));
    // A suffix: "mail.example.com" after "example.com" is one label and a pointer.
    const suffix = encodeMessage({
      ...emptyMessage(),
      questions: [
        { name: 'example.com', type: 1, class: IN },
        { name: 'mail.example.com', type: 1, class: IN },
      ],
    });
    expect(suffix.length).toBe(12 + (13 + 4) + (5 + 2 + 4));
  });

  it('keeps the case of every name (compression matches exact spelling only)', () => {
    const msg: Message = {
      ...emptyMessage(5),
      questions: [{ name: 'WwW.ExAmPlE.cOm', type: RRType.A, class: IN }],
      answers: [
        { name: 'WwW.ExAmPlE.cOm', class: IN, ttl: 1, type: RRType.A, address: '192.0.2.1' },
        { name: 'example.com', class: IN, ttl: 1, type: RRType.NS, target: 'ns.example.com' },
      ],
    };
    expect(decodeMessage(encodeMessage(msg))).toEqual(msg);
  });

  it('never compresses the SRV target (RFC 2782), but may point to it', () => {
    const srv: ResourceRecord = {
      name: 'x.example.com',
      class: IN,
      ttl: 1,
      type: RRType.SRV,
      priority: 0,
      weight: 0,
      port: 1,
      target: 'x.example.com',
    };
    const buf = encodeMessage({ ...emptyMessage(), answers: [srv] });
    // Owner (15 bytes) + fixed + priority/weight/port + the target spelled out (15 bytes).
    expect(buf.length).toBe(12 + 15 + 10 + 6 + 15);
    expect(decodeMessage(buf).answers[0]).toEqual(srv);
    const cname: ResourceRecord = {
      name: 'y.example.com',
      class: IN,
      ttl: 1,
      type: RRType.CNAME,
      target: 'x.example.com',
    };
    const both = encodeMessage({ ...emptyMessage(), answers: [srv, cname] });
    expect(decodeMessage(both).answers).toEqual([srv, cname]);
    // The CNAME's owner is "y" + a pointer, its target a pointer into the SRV target.
    expect(both.length).toBe(buf.length + (2 + 2) + 10 + 2);
  });
});

describe('truncation', () => {
  const many = (n: number): ResourceRecord[] =>
    Array.from({ length: n }, (_, i) => ({
      name: 'big.example.com',
      class: IN,
      ttl: 60,
      type: RRType.TXT,
      strings: [te.encode(`${i}`.padEnd(200, 'x'))],
    }));

  it('drops answers that do not fit, sets TC and keeps the OPT record', () => {
    const msg: Message = {
      ...emptyMessage(3),
      qr: true,
      questions: [{ name: 'big.example.com', type: RRType.TXT, class: IN }],
      answers: many(10),
      authority: many(1),
      edns: { udpSize: 1232, version: 0, dnssecOk: false, options: [] },
    };
    const buf = encodeMessage(msg, { maxSize: 512 });
    expect(buf.length).toBeLessThanOrEqual(512);
    const d = decodeMessage(buf);
    expect(d.tc).toBe(true);
    expect(d.answers.length).toBeLessThan(10);
    expect(d.answers).toEqual(msg.answers.slice(0, d.answers.length));
    expect(d.authority).toEqual([]);
    expect(d.edns?.udpSize).toBe(1232);
    const whole = decodeMessage(encodeMessage(msg));
    expect(whole.tc).toBe(false);
    expect(whole.answers).toHaveLength(10);
  });

  it('drops additional records that do not fit without setting TC', () => {
    const msg: Message = { ...emptyMessage(4), answers: many(1), additional: many(5) };
    const d = decodeMessage(encodeMessage(msg, { maxSize: 700 }));
    expect(d.tc).toBe(false);
    expect(d.answers).toHaveLength(1);
    expect(d.additional.length).toBeGreaterThan(0);
    expect(d.additional.length).toBeLessThan(5);
  });
});

describe('malformed input', () => {
  const valid = encodeMessage(sample());

  it('throws WireError (and nothing else) for every truncation of a valid message', () => {
    for (let n = 0; n < valid.length; n++) {
      let error: unknown;
      try {
        decodeMessage(valid.subarray(0, n));
      } catch (err) {
        error = err;
      }
      expect(error, `prefix of ${n} bytes`).toBeInstanceOf(WireError);
    }
  });

  it('rejects compression pointer loops and forward pointers', () => {
    const header = (qd: number) => [0, 1, 0, 0, 0, qd, 0, 0, 0, 0, 0, 0];
    // Pointer to itself.
    expect(() => decodeMessage(Uint8Array.from([...header(1), 0xc0, 12, 0, 1, 0, 1]))).toThrow(
      /backwards/,
    );
    // Two labels pointing at each other: "a" at 12 then pointer to 15; at 15 "b" then pointer to 12.
    const cycle = Uint8Array.from([...header(1), 1, 0x61, 0xc0, 15, 1, 0x62, 0xc0, 12, 0, 1, 0, 1]);
    expect(() => decodeMessage(cycle)).toThrow(WireError);
    // A pointer beyond the end.
    expect(() => decodeMessage(Uint8Array.from([...header(1), 0xc0, 200, 0, 1, 0, 1]))).toThrow(
      WireError,
    );
    // Reserved label types 0x40 and 0x80.
    expect(() => decodeMessage(Uint8Array.from([...header(1), 0x41, 0, 0, 1, 0, 1]))).toThrow(
      /label type/,
    );
    expect(() => decodeMessage(Uint8Array.from([...header(1), 0x81, 0, 0, 1, 0, 1]))).toThrow(
      /label type/,
    );
  });

  it('follows a valid backward pointer chain', () => {
    // Question 1: "example.com"; question 2: "www" + pointer to it; question 3: "a" + pointer to question 2.
    const q1 = [7, ...te.encode('example'), 3, ...te.encode('com'), 0, 0, 1, 0, 1];
    const q2 = [3, ...te.encode('www'), 0xc0, 12, 0, 1, 0, 1];
    const q3 = [1, 0x61, 0xc0, 12 + q1.length, 0, 1, 0, 1];
    const d = decodeMessage(
      Uint8Array.from([0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, ...q1, ...q2, ...q3]),
    );
    expect(d.questions.map((q) => q.name)).toEqual([
      'example.com',
      'www.example.com',
      'a.www.example.com',
    ]);
  });

  it('rejects names longer than 255 bytes, even when built from pointers', () => {
    const label = [63, ...new Array(63).fill(0x61)];
    // 4 × 64 + 1 = 257 bytes.
    const long = Uint8Array.from([
      0,
      1,
      0,
      0,
      0,
      1,
      0,
      0,
      0,
      0,
      0,
      0,
      ...label,
      ...label,
      ...label,
      ...label,
      0,
      0,
      1,
      0,
      1,
    ]);
    expect(() => decodeMessage(long)).toThrow(/255/);
    expect(() => parseName(`${'a'.repeat(63)}.`.repeat(4))).toThrow(WireError);
    expect(() => parseName(`${'a'.repeat(64)}.com`)).toThrow(/63/);
    expect(() => parseName('a..b')).toThrow(/empty label/);
  });

  it('rejects bad RDATA lengths, stray bytes and misplaced OPT records', () => {
    const rr = (type: number, rdata: number[], name = [0]) => [
      ...name,
      type >> 8,
      type & 255,
      0,
      1,
      0,
      0,
      0,
      60,
      rdata.length >> 8,
      rdata.length & 255,
      ...rdata,
    ];
    const withAnswer = (bytes: number[], section = 1) => {
      const counts = [0, 0, 0, 0];
      counts[section] = 1;
      return Uint8Array.from([0, 1, 0x80, 0, ...counts.flatMap((c) => [0, c]), ...bytes]);
    };
    expect(() => decodeMessage(withAnswer(rr(RRType.A, [1, 2, 3])))).toThrow(/4 bytes/);
    expect(() => decodeMessage(withAnswer(rr(RRType.AAAA, [1, 2, 3, 4])))).toThrow(/16 bytes/);
    expect(() => decodeMessage(withAnswer(rr(RRType.CNAME, [0, 9])))).toThrow(/stray/);
    expect(() => decodeMessage(withAnswer(rr(RRType.TXT, [5, 0x61])))).toThrow(WireError);
    expect(() => decodeMessage(withAnswer(rr(RRType.MX, [0, 10, 3, 0x61])))).toThrow(WireError);
    expect(() => decodeMessage(withAnswer(rr(RRType.OPT, []), 1))).toThrow(/OPT/);
    expect(() => decodeMessage(withAnswer(rr(RRType.OPT, [], [1, 0x61, 0]), 3))).toThrow(/root/);
    const twoOpt = Uint8Array.from([
      0,
      1,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      2,
      ...rr(RRType.OPT, []),
      ...rr(RRType.OPT, []),
    ]);
    expect(() => decodeMessage(twoOpt)).toThrow(/more than one/);
    expect(() => decodeMessage(withAnswer(rr(RRType.OPT, [0, 10, 0, 8, 1]), 3))).toThrow(WireError);
  });

  it('throws only WireError on random bytes', () => {
    let seed = 12345;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed;
    };
    for (let i = 0; i < 5000; i++) {
      const buf = new Uint8Array(rand() % 80);
      for (let j = 0; j < buf.length; j++) buf[j] = rand() & 0xff;
      // Mostly small counts so decoding gets past the header.
      if (buf.length >= 12) for (const k of [4, 6, 8, 10]) buf[k] = 0;
      if (buf.length >= 12) for (const k of [5, 7, 9, 11]) buf[k] &= 3;
      try {
        decodeMessage(buf);
      } catch (err) {
        expect(err).toBeInstanceOf(WireError);
      }
    }
    // Mutations of a valid message.
    for (let i = 0; i < 5000; i++) {
      const buf = Uint8Array.from(valid);
      for (let k = 0; k < 3; k++) buf[rand() % buf.length] = rand() & 0xff;
      try {
        decodeMessage(buf);
      } catch (err) {
        expect(err).toBeInstanceOf(WireError);
      }
    }
  });
});
