import { describe, expect, it } from 'vitest';
import {
  Attr,
  StunClass,
  StunMethod,
  attrErrorCode,
  attrString,
  attrUInt32,
  attrXorAddress,
  canonicalIp,
  crc32,
  decodeChannelData,
  decodeErrorCode,
  decodeMessageType,
  decodeStun,
  decodeString,
  decodeUInt32,
  decodeXorAddress,
  encodeChannelData,
  encodeMessageType,
  encodeStun,
  formatIpv6,
  getAttribute,
  longTermKey,
  newTransactionId,
  parseIp,
  restPassword,
  streamFrameLength,
  unknownRequiredAttributes,
  verifyIntegrity,
  verifyIntegritySha256,
  type StunMessage,
} from '../../../src/areas/calls/stun.ts';

/** Hex as printed in RFC 5769 (spaces and newlines allowed). */
function hex(text: string): Buffer {
  return Buffer.from(text.replace(/\s+/g, ''), 'hex');
}

// RFC 5769 test vectors.
const SHORT_TERM_PASSWORD = Buffer.from('VOkJxbRl1RmTxUk/WvJxBt');
const SAMPLE_REQUEST = hex(`
  00 01 00 58 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
  80 22 00 10 53 54 55 4e 20 74 65 73 74 20 63 6c 69 65 6e 74
  00 24 00 04 6e 00 01 ff
  80 29 00 08 93 2f f9 b1 51 26 3b 36
  00 06 00 09 65 76 74 6a 3a 68 36 76 59 20 20 20
  00 08 00 14 9a ea a7 0c bf d8 cb 56 78 1e f2 b5 b2 d3 f2 49 c1 b5 71 a2
  80 28 00 04 e5 7a 3b cf`);
const SAMPLE_IPV4_RESPONSE = hex(`
  01 01 00 3c 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
  80 22 00 0b 74 65 73 74 20 76 65 63 74 6f 72 20
  00 20 00 08 00 01 a1 47 e1 12 a6 43
  00 08 00 14 2b 91 f5 99 fd 9e 90 c3 8c 74 89 f9 2a f9 ba 53 f0 6b e7 d7
  80 28 00 04 c0 7d 4c 96`);
const SAMPLE_IPV6_RESPONSE = hex(`
  01 01 00 48 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
  80 22 00 0b 74 65 73 74 20 76 65 63 74 6f 72 20
  00 20 00 14 00 02 a1 47 01 13 a9 fa a5 d3 f1 79 bc 25 f4 b5 be d2 b9 d9
  00 08 00 14 a3 82 95 4e 4b e6 7b f1 17 84 c9 7c 82 92 c2 75 bf e3 ed 41
  80 28 00 04 c8 fb 0b 4c`);
const SAMPLE_LONG_TERM_REQUEST = hex(`
  00 01 00 60 21 12 a4 42 78 ad 34 33 c6 ad 72 c0 29 da 41 2e
  00 06 00 12 e3 83 9e e3 83 88 e3 83 aa e3 83 83 e3 82 af e3 82 b9 00 00
  00 15 00 1c 66 2f 2f 34 39 39 6b 39 35 34 64 36 4f 4c 33 34 6f 4c 39 46 53 54 76 79 36 34 73 41
  00 14 00 0b 65 78 61 6d 70 6c 65 2e 6f 72 67 00
  00 08 00 14 f6 70 24 65 6d d6 4a 3e 02 b8 e0 71 2e 85 c9 a2 8c a8 96 66`);

function mustDecode(buf: Buffer): StunMessage {
  const res = decodeStun(buf);
  if (!res.ok) throw new Error(`decode failed: ${res.reason}`);
  return res.message;
}

describe('message type', () => {
  it('interleaves class bits as RFC 8489/8656 specify', () => {
    const cases: Array<[number, StunClass, number]> = [
      [StunMethod.Binding, StunClass.Request, 0x0001],
      [StunMethod.Binding, StunClass.SuccessResponse, 0x0101],
      [StunMethod.Binding, StunClass.ErrorResponse, 0x0111],
      [StunMethod.Allocate, StunClass.Request, 0x0003],
      [StunMethod.Allocate, StunClass.ErrorResponse, 0x0113],
      [StunMethod.Refresh, StunClass.Request, 0x0004],
      [StunMethod.Send, StunClass.Indication, 0x0016],
      [StunMethod.Data, StunClass.Indication, 0x0017],
      [StunMethod.CreatePermission, StunClass.SuccessResponse, 0x0108],
      [StunMethod.ChannelBind, StunClass.Request, 0x0009],
    ];
    for (const [method, cls, type] of cases) {
      expect(encodeMessageType(method, cls)).toBe(type);
      expect(decodeMessageType(type)).toEqual({ method, cls });
    }
  });
});

describe('RFC 5769 vectors', () => {
  it('crc32 has the standard check value', () => {
    expect(crc32(Buffer.from('123456789'))).toBe(0xcbf43926);
  });

  it('sample request: fingerprint and short-term integrity verify', () => {
    const msg = mustDecode(SAMPLE_REQUEST);
    expect(msg.method).toBe(StunMethod.Binding);
    expect(msg.cls).toBe(StunClass.Request);
    expect(msg.hasFingerprint).toBe(true);
    expect(decodeString(getAttribute(msg, Attr.Username))).toBe('evtj:h6vY');
    expect(decodeString(getAttribute(msg, Attr.Software))).toBe('STUN test client');
    expect(verifyIntegrity(msg, SHORT_TERM_PASSWORD)).toBe(true);
    expect(verifyIntegrity(msg, Buffer.from('wrong'))).toBe(false);
  });

  it('sample responses decode to the documented addresses', () => {
    const v4 = mustDecode(SAMPLE_IPV4_RESPONSE);
    expect(verifyIntegrity(v4, SHORT_TERM_PASSWORD)).toBe(true);
    expect(decodeXorAddress(getAttribute(v4, Attr.XorMappedAddress), v4.transactionId)).toEqual({
      family: 4,
      address: '192.0.2.1',
      port: 32853,
    });
    const v6 = mustDecode(SAMPLE_IPV6_RESPONSE);
    expect(verifyIntegrity(v6, SHORT_TERM_PASSWORD)).toBe(true);
    expect(decodeXorAddress(getAttribute(v6, Attr.XorMappedAddress), v6.transactionId)).toEqual({
      family: 6,
      address: '2001:db8:1234:5678:11:2233:4455:6677',
      port: 32853,
    });
  });

  it('long-term request verifies under MD5(username:realm:password)', () => {
    const msg = mustDecode(SAMPLE_LONG_TERM_REQUEST);
    const username = decodeString(getAttribute(msg, Attr.Username))!;
    expect(username).toBe('\u30DE\u30C8\u30EA\u30C3\u30AF\u30B9');
    expect(decodeString(getAttribute(msg, Attr.Realm))).toBe('example.org');
    expect(decodeString(getAttribute(msg, Attr.Nonce))).toBe('f//499k954d6OL34oL9FSTvy64sA');
    expect(verifyIntegrity(msg, longTermKey(username, 'example.org', 'TheMatrIX'))).toBe(true);
    expect(verifyIntegrity(msg, longTermKey(username, 'example.org', 'TheMatrix'))).toBe(false);
  });

  it('the encoder reproduces the sample IPv4 and IPv6 response bodies', () => {
    for (const [vector, address] of [
      [SAMPLE_IPV4_RESPONSE, '192.0.2.1'],
      [SAMPLE_IPV6_RESPONSE, '2001:db8:1234:5678:11:2233:4455:6677'],
    ] as const) {
      const tid = vector.subarray(8, 20);
      const out = encodeStun({
        method: StunMethod.Binding,
        cls: StunClass.SuccessResponse,
        transactionId: tid,
        attributes: [
          attrString(Attr.Software, 'test vector'),
          attrXorAddress(Attr.XorMappedAddress, address, 32853, tid)!,
        ],
      });
      // The RFC pads SOFTWARE with a space where the encoder writes zero (either is legal).
      out[20 + 4 + 11] = 0x20;
      expect(out.readUInt16BE(0)).toBe(vector.readUInt16BE(0));
      expect(out.subarray(4)).toEqual(vector.subarray(4, out.length));
    }
  });
});

describe('encode/decode round trip', () => {
  it('round-trips attributes with padding, integrity and fingerprint', () => {
    const tid = newTransactionId();
    const key = longTermKey('1700000000:alice', 'outpost.test', 'pw');
    const data = Buffer.from('odd-length payload!');
    const buf = encodeStun(
      {
        method: StunMethod.Allocate,
        cls: StunClass.ErrorResponse,
        transactionId: tid,
        attributes: [
          attrErrorCode(438, 'Stale Nonce'),
          attrString(Attr.Realm, 'outpost.test'),
          attrUInt32(Attr.Lifetime, 600),
          { type: Attr.Data, value: data },
          attrXorAddress(Attr.XorPeerAddress, '2001:db8::1', 443, tid)!,
          attrXorAddress(Attr.XorRelayedAddress, '203.0.113.9', 50000, tid)!,
        ],
      },
      { integrityKey: key, integrity: 'both', fingerprint: true },
    );
    expect(buf.length % 4).toBe(0);
    const msg = mustDecode(buf);
    expect(msg.method).toBe(StunMethod.Allocate);
    expect(msg.cls).toBe(StunClass.ErrorResponse);
    expect(msg.transactionId).toEqual(tid);
    expect(decodeErrorCode(getAttribute(msg, Attr.ErrorCode))).toEqual({
      code: 438,
      reason: 'Stale Nonce',
    });
    expect(decodeUInt32(getAttribute(msg, Attr.Lifetime))).toBe(600);
    expect(getAttribute(msg, Attr.Data)).toEqual(data);
    expect(decodeXorAddress(getAttribute(msg, Attr.XorPeerAddress), tid)).toEqual({
      family: 6,
      address: '2001:db8::1',
      port: 443,
    });
    expect(decodeXorAddress(getAttribute(msg, Attr.XorRelayedAddress), tid)).toEqual({
      family: 4,
      address: '203.0.113.9',
      port: 50000,
    });
    expect(verifyIntegrity(msg, key)).toBe(true);
    expect(verifyIntegritySha256(msg, key)).toBe(true);
    expect(verifyIntegrity(msg, Buffer.from('nope'))).toBe(false);
    expect(verifyIntegritySha256(msg, Buffer.from('nope'))).toBe(false);
    expect(msg.hasFingerprint).toBe(true);
  });

  it('ignores attributes after MESSAGE-INTEGRITY', () => {
    const tid = newTransactionId();
    const key = Buffer.from('k');
    const signed = encodeStun(
      { method: StunMethod.Binding, cls: StunClass.Request, transactionId: tid, attributes: [] },
      { integrityKey: key },
    );
    // Append a USERNAME after MESSAGE-INTEGRITY and fix the length.
    const extra = Buffer.from([0x00, 0x06, 0x00, 0x04, 0x61, 0x62, 0x63, 0x64]);
    const tampered = Buffer.concat([signed, extra]);
    tampered.writeUInt16BE(tampered.length - 20, 2);
    const msg = mustDecode(tampered);
    expect(getAttribute(msg, Attr.Username)).toBeUndefined();
    expect(verifyIntegrity(msg, key)).toBe(true);
  });

  it('reports unknown comprehension-required attributes only', () => {
    const tid = newTransactionId();
    const buf = encodeStun({
      method: StunMethod.Allocate,
      cls: StunClass.Request,
      transactionId: tid,
      attributes: [
        { type: 0x7777, value: Buffer.alloc(4) },
        { type: 0xc001, value: Buffer.alloc(4) }, // comprehension-optional: ignored
        attrUInt32(Attr.Lifetime, 1),
      ],
    });
    expect(unknownRequiredAttributes(mustDecode(buf))).toEqual([0x7777]);
  });
});

describe('malformed input', () => {
  it('rejects without throwing', () => {
    const cases: Buffer[] = [
      Buffer.alloc(0),
      Buffer.alloc(19),
      Buffer.from([0xff, 0xff, 0xff, 0xff]),
      (() => {
        const b = Buffer.from(SAMPLE_REQUEST);
        b[4] ^= 1; // wrong cookie
        return b;
      })(),
      (() => {
        const b = Buffer.from(SAMPLE_REQUEST);
        b.writeUInt16BE(0x5c, 2); // declared length beyond the buffer
        return b;
      })(),
      (() => {
        const b = Buffer.from(SAMPLE_REQUEST);
        b.writeUInt16BE(0x0057, 2); // not a multiple of 4
        return b;
      })(),
      (() => {
        const b = Buffer.from(SAMPLE_REQUEST);
        b.writeUInt16BE(0x4000, 22); // first attribute runs past the message
        return b;
      })(),
      (() => {
        const b = Buffer.from(SAMPLE_REQUEST);
        b[30] ^= 1; // breaks FINGERPRINT
        return b;
      })(),
      SAMPLE_REQUEST.subarray(0, 60),
    ];
    for (const c of cases) {
      let res: ReturnType<typeof decodeStun> | undefined;
      expect(() => (res = decodeStun(c))).not.toThrow();
      expect(res?.ok).toBe(false);
    }
  });

  it('keeps the header of a request with broken attributes so a server can answer 400', () => {
    const b = Buffer.from(SAMPLE_REQUEST);
    b.writeUInt16BE(0x4000, 22);
    const res = decodeStun(b);
    expect(res.ok).toBe(false);
    if (!res.ok) {
      expect(res.header?.cls).toBe(StunClass.Request);
      expect(res.header?.method).toBe(StunMethod.Binding);
    }
  });

  it('survives random garbage', () => {
    // Deterministic PRNG so a failure is reproducible.
    let seed = 12345;
    const rand = (): number => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed;
    };
    for (let i = 0; i < 2000; i++) {
      const len = rand() % 120;
      const b = Buffer.alloc(len);
      for (let j = 0; j < len; j++) b[j] = rand() & 0xff;
      if (len >= 8 && i % 2 === 0) {
        b[0] &= 0x3f;
        b.writeUInt32BE(0x2112a442, 4);
        b.writeUInt16BE((len - 20) & 0xfffc, 2);
      }
      expect(() => decodeStun(b)).not.toThrow();
      expect(() => decodeChannelData(b)).not.toThrow();
      const res = decodeStun(b);
      if (res.ok) {
        expect(() =>
          decodeXorAddress(
            getAttribute(res.message, Attr.XorPeerAddress),
            res.message.transactionId,
          ),
        ).not.toThrow();
      }
    }
  });

  it('decodes truncated attribute values as undefined', () => {
    const tid = newTransactionId();
    expect(decodeXorAddress(Buffer.from([0, 1, 0]), tid)).toBeUndefined();
    expect(decodeXorAddress(Buffer.from([0, 9, 0, 0, 0, 0, 0, 0]), tid)).toBeUndefined();
    expect(decodeUInt32(Buffer.alloc(3))).toBeUndefined();
    expect(decodeErrorCode(Buffer.alloc(2))).toBeUndefined();
  });
});

describe('ChannelData', () => {
  it('encodes and decodes, with and without stream padding', () => {
    const payload = Buffer.from('hello');
    const udp = encodeChannelData(0x4001, payload, false);
    expect(udp.length).toBe(9);
    expect(decodeChannelData(udp)).toEqual({ channel: 0x4001, data: payload });
    const tcp = encodeChannelData(0x4001, payload, true);
    expect(tcp.length).toBe(12);
    expect(decodeChannelData(tcp)).toEqual({ channel: 0x4001, data: payload });
    expect(decodeChannelData(udp.subarray(0, 8))).toBeUndefined();
    expect(decodeChannelData(Buffer.from([0x00, 0x01, 0x00, 0x00]))).toBeUndefined();
  });

  it('frames a TCP stream of STUN and padded ChannelData', () => {
    const stunMsg = SAMPLE_REQUEST;
    const cd = encodeChannelData(0x4002, Buffer.from('abc'), true);
    const stream = Buffer.concat([stunMsg, cd]);
    expect(streamFrameLength(stream, 0, stream.length)).toBe(stunMsg.length);
    expect(streamFrameLength(stream, stunMsg.length, cd.length)).toBe(8);
    expect(streamFrameLength(stream, 0, 3)).toBe(0);
    expect(streamFrameLength(Buffer.from([0x80, 0, 0, 0]), 0, 4)).toBe(-1);
  });
});

describe('credentials and addresses', () => {
  it('derives the TURN REST password and long-term key', () => {
    // Independent check: base64(HMAC-SHA1("SECRET", "1795369987:alice")) as computed by openssl.
    expect(restPassword('SECRET', '1795369987:alice')).toBe('sKteM9+JToZ8qhy7Gke2/8ral94=');
    expect(longTermKey('user', 'realm', 'pass').toString('hex')).toBe(
      '8493fbc53ba582fb4c044c456bdc40eb',
    );
  });

  it('parses and formats IP literals', () => {
    expect(parseIp('10.1.2.3')).toEqual(Buffer.from([10, 1, 2, 3]));
    expect(parseIp('::ffff:10.1.2.3')).toEqual(Buffer.from([10, 1, 2, 3]));
    expect(parseIp('256.1.1.1')).toBeUndefined();
    expect(parseIp('1::2::3')).toBeUndefined();
    expect(parseIp('hello')).toBeUndefined();
    expect(canonicalIp('2001:0db8:0000:0000:0000:0000:0000:0001')).toBe('2001:db8::1');
    expect(canonicalIp('::1')).toBe('::1');
    expect(canonicalIp('fe80::1%eth0')).toBe('fe80::1');
    expect(formatIpv6(parseIp('2001:db8:0:1:0:0:0:1')!)).toBe('2001:db8:0:1::1');
    expect(formatIpv6(parseIp('2001:db8:0:1:1:1:1:1')!)).toBe('2001:db8:0:1:1:1:1:1');
  });
});
