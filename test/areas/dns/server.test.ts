/**
 * The authoritative DNS server, queried with the real `dig` (Debian bind9-dnsutils) over UDP and
 * TCP, with zones and records created through the API. Runs on SQLite, or on PostgreSQL when
 * OUTPOST_TEST_DATABASE is set.
 */
import { execFile } from 'node:child_process';
import dgram from 'node:dgram';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDnsServer } from '../../../src/areas/dns/server.ts';
import { ZoneIndex } from '../../../src/areas/dns/zone-index.ts';
import {
  decodeMessage,
  emptyMessage,
  encodeMessage,
  Rcode,
  RRClass,
  RRType,
  type Message,
} from '../../../src/areas/dns/wire.ts';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';

const DIG = '/usr/bin/dig';

interface DigRecord {
  name: string;
  ttl: number;
  class: string;
  type: string;
  data: string;
}

interface DigResult {
  raw: string;
  status: string;
  flags: string[];
  udp?: number;
  answer: DigRecord[];
  authority: DigRecord[];
  additional: DigRecord[];
}

function parseDig(raw: string): DigResult {
  const status = /status: ([A-Z]+)/.exec(raw)?.[1];
  if (!status) throw new Error(`dig gave no answer:\n${raw}`);
  // With several queries in one run, the last answer is the one parsed.
  const last = raw.slice(raw.lastIndexOf('->>HEADER<<-'));
  const flags = (/;; flags:([^;]*);/.exec(last)?.[1] ?? '').trim().split(/\s+/).filter(Boolean);
  const udp = /udp: (\d+)/.exec(last)?.[1];
  const section = (title: string): DigRecord[] => {
    const at = last.indexOf(`;; ${title} SECTION:\n`);
    if (at < 0) return [];
    const lines = last.slice(at).split('\n').slice(1);
    const out: DigRecord[] = [];
    for (const line of lines) {
      if (line.trim() === '' || line.startsWith(';;')) break;
      const [name, ttl, cls, type, ...rest] = line.split(/\s+/);
      out.push({ name, ttl: Number(ttl), class: cls, type, data: rest.join(' ') });
    }
    return out;
  };
  return {
    raw,
    status: /status: ([A-Z]+)/.exec(last)![1],
    flags,
    udp: udp ? Number(udp) : undefined,
    answer: section('ANSWER'),
    authority: section('AUTHORITY'),
    additional: section('ADDITIONAL'),
  };
}

let t: TestServer;
let port: number;

function digRaw(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      DIG,
      [`@127.0.0.1`, '-p', String(port), '+norec', '+time=2', '+tries=1', ...args],
      { timeout: 10_000 },
      (err, stdout, stderr) => {
        // dig exits 9 when no reply came; the caller decides whether that is expected.
        if (err && !stdout)
          reject(new Error(`dig ${args.join(' ')} failed: ${err.message}\n${stderr}`));
        else resolve(stdout);
      },
    );
  });
}

async function dig(name: string, type = 'A', ...opts: string[]): Promise<DigResult> {
  return parseDig(await digRaw([...opts, name, type]));
}

const data = (r: DigResult, type?: string) =>
  r.answer
    .filter((a) => !type || a.type === type)
    .map((a) => a.data)
    .sort();

async function record(zoneId: string, body: Record<string, unknown>): Promise<{ id: string }> {
  const res = await t.call('POST', `/zones/${zoneId}/dns_records`, body);
  if (res.status !== 200) throw new Error(`record create failed: ${res.text}`);
  return res.body.result;
}

let zone: { id: string; name: string };
let other: { id: string; name: string };

beforeAll(async () => {
  t = await startTestServer({ dnsPort: 0 });
  const listener = t.server.listeners.find(
    (l) => l.name === 'authoritative DNS' && l.protocol === 'udp',
  );
  expect(listener).toBeDefined();
  port = Number(/:(\d+)$/.exec(listener!.address)![1]);
  expect(
    t.server.listeners.find((l) => l.name === 'authoritative DNS' && l.protocol === 'tcp')?.address,
  ).toBe(listener!.address);

  zone = await createZone(t, 'dig-test.com');
  other = await createZone(t, 'other-zone.net');
  const z = zone.id;
  await record(z, { type: 'A', name: 'www', content: '192.0.2.1', ttl: 1 });
  await record(z, { type: 'A', name: 'www', content: '192.0.2.2', ttl: 1 });
  await record(z, { type: 'AAAA', name: 'www', content: '2001:db8::1', ttl: 120 });
  await record(z, { type: 'A', name: '@', content: '192.0.2.10', ttl: 600 });
  await record(z, { type: 'CNAME', name: 'alias', content: 'www.dig-test.com', ttl: 1 });
  await record(z, { type: 'CNAME', name: 'alias2', content: 'alias.dig-test.com', ttl: 1 });
  await record(z, { type: 'CNAME', name: 'cross', content: 'host.other-zone.net', ttl: 1 });
  await record(z, { type: 'CNAME', name: 'external', content: 'example.org', ttl: 1 });
  await record(z, { type: 'CNAME', name: 'dangling', content: 'missing.other-zone.net', ttl: 1 });
  await record(z, { type: 'CNAME', name: 'loop1', content: 'loop2.dig-test.com', ttl: 1 });
  await record(z, { type: 'CNAME', name: 'loop2', content: 'loop1.dig-test.com', ttl: 1 });
  await record(z, { type: 'TXT', name: 'txt', content: 'hello world', ttl: 1 });
  await record(z, { type: 'TXT', name: 'txt', content: '"v=spf1 -all"', ttl: 1 });
  await record(z, { type: 'TXT', name: 'long', content: 'a'.repeat(300), ttl: 1 });
  await record(z, { type: 'MX', name: '@', content: 'mail.dig-test.com', priority: 10, ttl: 1 });
  await record(z, { type: 'MX', name: '@', content: 'mx.example.net', priority: 20, ttl: 1 });
  await record(z, { type: 'A', name: 'mail', content: '192.0.2.25', ttl: 1 });
  await record(z, {
    type: 'SRV',
    name: '_sip._tcp',
    data: { priority: 10, weight: 5, port: 5060, target: 'sip.dig-test.com' },
    ttl: 1,
  });
  await record(z, {
    type: 'CAA',
    name: '@',
    data: { flags: 0, tag: 'issue', value: 'letsencrypt.org' },
    ttl: 1,
  });
  await record(z, { type: 'PTR', name: 'ptr', content: 'www.dig-test.com', ttl: 1 });
  await record(z, { type: 'NS', name: 'sub', content: 'ns1.sub.dig-test.com', ttl: 1 });
  await record(z, { type: 'A', name: 'ns1.sub', content: '192.0.2.53', ttl: 1 });
  await record(z, { type: 'A', name: '*', content: '192.0.2.99', ttl: 1 });
  await record(z, {
    type: 'TXT',
    name: 'deep.ent',
    content: 'below an empty non-terminal',
    ttl: 1,
  });
  await record(z, { type: 'A', name: 'proxied', content: '203.0.113.7', proxied: true });
  await record(z, {
    type: 'CNAME',
    name: 'proxied-cname',
    content: 'origin.example.net',
    proxied: true,
  });
  await record(z, { type: 'TXT', name: 'proxied', content: 'txt beside a proxied A', ttl: 1 });
  await record(other.id, { type: 'A', name: 'host', content: '198.51.100.1', ttl: 1 });
}, 60_000);

afterAll(async () => {
  await t?.stop();
});

describe('record types over UDP', () => {
  it('answers A records authoritatively with EDNS', async () => {
    const r = await dig('www.dig-test.com', 'A');
    expect(r.status).toBe('NOERROR');
    expect(r.flags).toEqual(expect.arrayContaining(['qr', 'aa']));
    expect(r.flags).not.toContain('ra');
    expect(data(r)).toEqual(['192.0.2.1', '192.0.2.2']);
    expect(
      r.answer.every((a) => a.ttl === 300 && a.class === 'IN' && a.name === 'www.dig-test.com.'),
    ).toBe(true);
    expect(r.udp).toBe(1232);
  });

  it('answers AAAA with the record TTL', async () => {
    const r = await dig('www.dig-test.com', 'AAAA');
    expect(r.answer).toEqual([
      { name: 'www.dig-test.com.', ttl: 120, class: 'IN', type: 'AAAA', data: '2001:db8::1' },
    ]);
  });

  it('answers A at the apex', async () => {
    const r = await dig('dig-test.com', 'A');
    expect(r.answer).toEqual([
      { name: 'dig-test.com.', ttl: 600, class: 'IN', type: 'A', data: '192.0.2.10' },
    ]);
  });

  it('answers a CNAME query with the CNAME only', async () => {
    const r = await dig('alias.dig-test.com', 'CNAME');
    expect(r.answer).toEqual([
      {
        name: 'alias.dig-test.com.',
        ttl: 300,
        class: 'IN',
        type: 'CNAME',
        data: 'www.dig-test.com.',
      },
    ]);
  });

  it('answers TXT, reading quoted content as strings and splitting long text at 255 bytes', async () => {
    const r = await dig('txt.dig-test.com', 'TXT');
    expect(data(r)).toEqual(['"hello world"', '"v=spf1 -all"']);
    const long = await dig('long.dig-test.com', 'TXT');
    expect(long.answer).toHaveLength(1);
    expect(long.answer[0].data).toBe(`"${'a'.repeat(255)}" "${'a'.repeat(45)}"`);
  });

  it('answers MX with the exchange address of an in-zone target in the additional section', async () => {
    const r = await dig('dig-test.com', 'MX');
    expect(data(r)).toEqual(['10 mail.dig-test.com.', '20 mx.example.net.']);
    expect(r.additional.filter((a) => a.type === 'A')).toEqual([
      { name: 'mail.dig-test.com.', ttl: 300, class: 'IN', type: 'A', data: '192.0.2.25' },
    ]);
  });

  it('answers SRV', async () => {
    const r = await dig('_sip._tcp.dig-test.com', 'SRV');
    expect(data(r)).toEqual(['10 5 5060 sip.dig-test.com.']);
  });

  it('answers CAA', async () => {
    const r = await dig('dig-test.com', 'CAA');
    expect(data(r)).toEqual(['0 issue "letsencrypt.org"']);
  });

  it('answers PTR, also in a reverse zone', async () => {
    expect(data(await dig('ptr.dig-test.com', 'PTR'))).toEqual(['www.dig-test.com.']);
    const rev = await createZone(t, '2.0.192.in-addr.arpa');
    await record(rev.id, { type: 'PTR', name: '1', content: 'www.dig-test.com', ttl: 1 });
    const r = parseDig(await digRaw(['-x', '192.0.2.1']));
    expect(r.status).toBe('NOERROR');
    expect(data(r)).toEqual(['www.dig-test.com.']);
  });

  it('synthesises SOA and NS at the apex from the zone name servers', async () => {
    const soa = await dig('dig-test.com', 'SOA');
    expect(soa.answer).toHaveLength(1);
    const [mname, rname, serial, ...timers] = soa.answer[0].data.split(' ');
    expect(mname).toBe('ns1.outpost.local.');
    expect(rname).toBe('dns.dig-test.com.');
    expect(Number(serial)).toBeGreaterThan(0);
    expect(timers).toEqual(['10000', '2400', '604800', '1800']);
    const ns = await dig('dig-test.com', 'NS');
    expect(data(ns)).toEqual(['ns1.outpost.local.', 'ns2.outpost.local.']);
    expect(ns.flags).toContain('aa');
  });

  it('answers ANY minimally (RFC 8482)', async () => {
    const r = await dig('www.dig-test.com', 'ANY');
    expect(r.answer).toHaveLength(1);
    expect(r.answer[0].type).toBe('HINFO');
    expect(r.answer[0].data).toBe('"RFC8482" ""');
  });

  it('answers the data-carrying types from their data', async () => {
    const key = Buffer.alloc(64, 7).toString('base64');
    const hash = 'ab'.repeat(32);
    const cases: [string, Record<string, unknown>, string][] = [
      [
        'HTTPS',
        {
          data: {
            priority: 1,
            target: '.',
            value: 'alpn="h3,h2" port=443 ipv4hint=192.0.2.1 ipv6hint=2001:db8::1',
          },
        },
        '1 . alpn="h3,h2" port=443 ipv4hint=192.0.2.1 ipv6hint=2001:db8::1',
      ],
      [
        'SVCB',
        {
          data: {
            priority: 2,
            target: 'svc.example.net',
            value: 'mandatory=port port=8443 no-default-alpn alpn=h2',
          },
        },
        '2 svc.example.net. mandatory=port alpn="h2" no-default-alpn port=8443',
      ],
      [
        'LOC',
        {
          data: {
            lat_degrees: 52,
            lat_minutes: 22,
            lat_seconds: 23,
            lat_direction: 'N',
            long_degrees: 4,
            long_minutes: 53,
            long_seconds: 32,
            long_direction: 'E',
            altitude: -2,
            size: 1,
            precision_horz: 10000,
            precision_vert: 10,
          },
        },
        '52 22 23.000 N 4 53 32.000 E -2.00m 1m 10000m 10m',
      ],
      [
        'TLSA',
        { data: { usage: 3, selector: 1, matching_type: 1, certificate: hash } },
        `3 1 1 ${hash.toUpperCase()}`,
      ],
      [
        'SMIMEA',
        { data: { usage: 3, selector: 1, matching_type: 1, certificate: hash } },
        `3 1 1 ${hash.toUpperCase()}`,
      ],
      [
        'SSHFP',
        { data: { algorithm: 4, type: 2, fingerprint: hash } },
        `4 2 ${hash.toUpperCase()}`,
      ],
      [
        'DS',
        { data: { key_tag: 12345, algorithm: 13, digest_type: 2, digest: hash } },
        `12345 13 2 ${hash.toUpperCase()}`,
      ],
      [
        'DNSKEY',
        { data: { flags: 257, protocol: 3, algorithm: 13, public_key: key } },
        `257 3 13 ${key}`,
      ],
      [
        'CERT',
        { data: { type: 1, key_tag: 0, algorithm: 0, certificate: key } },
        `PKIX 0 0 ${key}`,
      ],
      [
        'URI',
        { data: { weight: 1, target: 'https://example.com/' }, priority: 10 },
        '10 1 "https://example.com/"',
      ],
      [
        'NAPTR',
        {
          data: {
            order: 100,
            preference: 10,
            flags: 'U',
            service: 'E2U+sip',
            regex: '!^.*$!sip:info@example.com!',
            replacement: '.',
          },
        },
        '100 10 "U" "E2U+sip" "!^.*$!sip:info@example.com!" .',
      ],
      ['OPENPGPKEY', { content: key }, key],
    ];
    for (const [type, body] of cases)
      await record(zone.id, { type, name: `t-${type.toLowerCase()}`, ttl: 1, ...body });
    // dig breaks long base64 and hex into groups: those types compare without spaces.
    const binary = new Set(['TLSA', 'SMIMEA', 'SSHFP', 'DS', 'DNSKEY', 'CERT', 'OPENPGPKEY']);
    for (const [type, , expected] of cases) {
      const r = await dig(`t-${type.toLowerCase()}.dig-test.com`, type);
      expect(r.status, type).toBe('NOERROR');
      const norm = (x: string) => (binary.has(type) ? x.replace(/\s+/g, '') : x);
      expect(data(r).map(norm), type).toEqual([norm(expected)]);
    }
  });

  it('matches names case-insensitively and echoes the question as asked', async () => {
    const r = await dig('WwW.DiG-TeSt.CoM', 'A');
    expect(r.status).toBe('NOERROR');
    expect(data(r)).toEqual(['192.0.2.1', '192.0.2.2']);
    expect(r.raw).toContain(';WwW.DiG-TeSt.CoM.');
  });
});

describe('resolution', () => {
  it('follows CNAME chains inside the zone and adds them to the answer', async () => {
    const r = await dig('alias2.dig-test.com', 'A');
    expect(r.status).toBe('NOERROR');
    expect(r.answer.map((a) => `${a.name} ${a.type} ${a.data}`)).toEqual([
      'alias2.dig-test.com. CNAME alias.dig-test.com.',
      'alias.dig-test.com. CNAME www.dig-test.com.',
      'www.dig-test.com. A 192.0.2.1',
      'www.dig-test.com. A 192.0.2.2',
    ]);
  });

  it('follows a CNAME into another of our zones', async () => {
    const r = await dig('cross.dig-test.com', 'A');
    expect(r.answer.map((a) => `${a.name} ${a.type} ${a.data}`)).toEqual([
      'cross.dig-test.com. CNAME host.other-zone.net.',
      'host.other-zone.net. A 198.51.100.1',
    ]);
  });

  it('ends the chain at a name outside our zones', async () => {
    const r = await dig('external.dig-test.com', 'A');
    expect(r.status).toBe('NOERROR');
    expect(r.answer.map((a) => `${a.type} ${a.data}`)).toEqual(['CNAME example.org.']);
  });

  it('gives the RCODE of the last name in the chain, and survives CNAME loops', async () => {
    const r = await dig('dangling.dig-test.com', 'A');
    expect(r.status).toBe('NXDOMAIN');
    expect(r.answer.map((a) => a.type)).toEqual(['CNAME']);
    // The authority is the SOA of the zone holding the last name.
    expect(r.authority.map((a) => `${a.name} ${a.type}`)).toEqual(['other-zone.net. SOA']);
    const loop = await dig('loop1.dig-test.com', 'A');
    expect(loop.status).toBe('NOERROR');
    expect(loop.answer.map((a) => `${a.name} ${a.data}`)).toEqual([
      'loop1.dig-test.com. loop2.dig-test.com.',
      'loop2.dig-test.com. loop1.dig-test.com.',
    ]);
  });

  it('answers wildcard records for names that do not exist, at any depth', async () => {
    const r = await dig('anything.dig-test.com', 'A');
    expect(r.status).toBe('NOERROR');
    expect(r.answer).toEqual([
      { name: 'anything.dig-test.com.', ttl: 300, class: 'IN', type: 'A', data: '192.0.2.99' },
    ]);
    expect(data(await dig('a.b.c.dig-test.com', 'A'))).toEqual(['192.0.2.99']);
    // The wildcard has no TXT: NODATA, not NXDOMAIN.
    const nodata = await dig('anything.dig-test.com', 'TXT');
    expect(nodata.status).toBe('NOERROR');
    expect(nodata.answer).toEqual([]);
    expect(nodata.authority.map((a) => a.type)).toEqual(['SOA']);
  });

  it('does not apply the wildcard to existing names or below an empty non-terminal', async () => {
    // www exists (A, AAAA): its TXT is NODATA, not the wildcard.
    const www = await dig('www.dig-test.com', 'TXT');
    expect(www.status).toBe('NOERROR');
    expect(www.answer).toEqual([]);
    // ent.dig-test.com has no records but a name below it: it exists (NODATA)...
    const ent = await dig('ent.dig-test.com', 'A');
    expect(ent.status).toBe('NOERROR');
    expect(ent.answer).toEqual([]);
    // ...and is the closest encloser of x.ent, so *.dig-test.com does not match there (RFC 4592).
    expect((await dig('x.ent.dig-test.com', 'A')).status).toBe('NXDOMAIN');
    expect(data(await dig('deep.ent.dig-test.com', 'TXT'))).toEqual([
      '"below an empty non-terminal"',
    ]);
  });

  it('answers proxied records with the edge addresses instead of their content', async () => {
    const a = await dig('proxied.dig-test.com', 'A');
    expect(a.answer).toEqual([
      { name: 'proxied.dig-test.com.', ttl: 300, class: 'IN', type: 'A', data: '127.0.0.1' },
    ]);
    const aaaa = await dig('proxied.dig-test.com', 'AAAA');
    expect(aaaa.answer).toEqual([
      { name: 'proxied.dig-test.com.', ttl: 300, class: 'IN', type: 'AAAA', data: '::1' },
    ]);
    expect(data(await dig('proxied.dig-test.com', 'TXT'))).toEqual(['"txt beside a proxied A"']);
    const cname = await dig('proxied-cname.dig-test.com', 'A');
    expect(cname.answer.map((x) => `${x.type} ${x.data}`)).toEqual(['A 127.0.0.1']);
    const noCname = await dig('proxied-cname.dig-test.com', 'CNAME');
    expect(noCname.status).toBe('NOERROR');
    expect(noCname.answer).toEqual([]);
  });

  it('answers NXDOMAIN with the SOA for unknown names of a zone without a wildcard', async () => {
    const r = await dig('nope.other-zone.net', 'A');
    expect(r.status).toBe('NXDOMAIN');
    expect(r.flags).toContain('aa');
    expect(r.answer).toEqual([]);
    expect(r.authority).toHaveLength(1);
    expect(r.authority[0]).toMatchObject({ name: 'other-zone.net.', type: 'SOA', ttl: 1800 });
  });

  it('answers NODATA (NOERROR with the SOA) for a name that has other types', async () => {
    const r = await dig('mail.dig-test.com', 'AAAA');
    expect(r.status).toBe('NOERROR');
    expect(r.answer).toEqual([]);
    expect(r.authority.map((a) => `${a.name} ${a.type}`)).toEqual(['dig-test.com. SOA']);
  });

  it('refuses names outside our zones, other classes and zone transfers', async () => {
    const r = await dig('example.org', 'A');
    expect(r.status).toBe('REFUSED');
    expect(r.flags).not.toContain('aa');
    expect((await dig('com', 'NS')).status).toBe('REFUSED');
    expect((await dig('www.dig-test.com', 'TXT', '-c', 'CH')).status).toBe('REFUSED');
    const axfr = await digRaw(['dig-test.com', 'AXFR']);
    expect(axfr).toMatch(/Transfer failed|REFUSED/);
  });

  it('refers delegated subdomains to their name servers with glue', async () => {
    const r = await dig('host.sub.dig-test.com', 'A');
    expect(r.status).toBe('NOERROR');
    expect(r.flags).not.toContain('aa');
    expect(r.answer).toEqual([]);
    expect(r.authority.map((a) => `${a.name} ${a.type} ${a.data}`)).toEqual([
      'sub.dig-test.com. NS ns1.sub.dig-test.com.',
    ]);
    expect(r.additional.map((a) => `${a.name} ${a.type} ${a.data}`)).toEqual([
      'ns1.sub.dig-test.com. A 192.0.2.53',
    ]);
  });

  it('treats a dot inside a label as part of the label', async () => {
    // Labels "a.dig-test" and "com": not one of our zones.
    expect((await dig('a\\.dig-test.com', 'A')).status).toBe('REFUSED');
    // Labels "x.y", "dig-test", "com": a name in the zone, answered by the wildcard.
    const r = await dig('x\\.y.dig-test.com', 'A');
    expect(r.status).toBe('NOERROR');
    expect(r.answer.map((a) => `${a.name} ${a.data}`)).toEqual(['x\\.y.dig-test.com. 192.0.2.99']);
    expect(data(await dig('www.dig-test.com', 'A'))).toEqual(['192.0.2.1', '192.0.2.2']);
  });

  it('serves the longest matching zone', async () => {
    const inner = await createZone(t, 'inner.dig-test.com');
    await record(inner.id, { type: 'A', name: 'www', content: '192.0.2.77', ttl: 1 });
    expect(data(await dig('www.inner.dig-test.com', 'A'))).toEqual(['192.0.2.77']);
    const soa = await dig('nothing.inner.dig-test.com', 'A');
    expect(soa.status).toBe('NXDOMAIN');
    expect(soa.authority[0].name).toBe('inner.dig-test.com.');
    await t.call('DELETE', `/zones/${inner.id}`);
    // Back to the parent zone's wildcard.
    expect(data(await dig('www.inner.dig-test.com', 'A'))).toEqual(['192.0.2.99']);
  });
});

describe('changes through the API', () => {
  it('are visible to the very next query: create, update, delete', async () => {
    const created = await record(zone.id, {
      type: 'A',
      name: 'fresh',
      content: '192.0.2.200',
      ttl: 1,
    });
    expect(data(await dig('fresh.dig-test.com', 'A'))).toEqual(['192.0.2.200']);
    const put = await t.call('PATCH', `/zones/${zone.id}/dns_records/${created.id}`, {
      content: '192.0.2.201',
    });
    expect(put.status).toBe(200);
    expect(data(await dig('fresh.dig-test.com', 'A'))).toEqual(['192.0.2.201']);
    const proxied = await t.call('PATCH', `/zones/${zone.id}/dns_records/${created.id}`, {
      proxied: true,
    });
    expect(proxied.status).toBe(200);
    expect(data(await dig('fresh.dig-test.com', 'A'))).toEqual(['127.0.0.1']);
    expect((await t.call('DELETE', `/zones/${zone.id}/dns_records/${created.id}`)).status).toBe(
      200,
    );
    // Gone: the wildcard answers again.
    expect(data(await dig('fresh.dig-test.com', 'A'))).toEqual(['192.0.2.99']);
  });

  it('serves a new zone at once and refuses it once deleted', async () => {
    const z = await createZone(t, 'brand-new.org');
    const soa = await dig('brand-new.org', 'SOA');
    expect(soa.status).toBe('NOERROR');
    expect(soa.answer[0].type).toBe('SOA');
    await record(z.id, { type: 'TXT', name: '@', content: 'hi', ttl: 1 });
    expect(data(await dig('brand-new.org', 'TXT'))).toEqual(['"hi"']);
    const before = Number(soa.answer[0].data.split(' ')[2]);
    const after = Number((await dig('brand-new.org', 'SOA')).answer[0].data.split(' ')[2]);
    expect(after).toBeGreaterThan(before);
    expect((await t.call('DELETE', `/zones/${z.id}`)).status).toBe(200);
    expect((await dig('brand-new.org', 'TXT')).status).toBe('REFUSED');
  });

  it('keeps answering under a burst of concurrent writes and queries', async () => {
    const names = Array.from({ length: 20 }, (_, i) => `burst${i}`);
    await Promise.all(
      names.map((n, i) =>
        record(zone.id, { type: 'A', name: n, content: `192.0.2.${100 + i}`, ttl: 1 }),
      ),
    );
    const answers = await Promise.all(names.map((n) => dig(`${n}.dig-test.com`, 'A')));
    expect(answers.map((r) => data(r)[0])).toEqual(names.map((_, i) => `192.0.2.${100 + i}`));
  });
});

describe('zone state', () => {
  it("serves a paused zone's proxied records with their own content", async () => {
    const z = await createZone(t, 'paused-zone.com');
    await record(z.id, { type: 'A', name: 'www', content: '192.0.2.120', proxied: true });
    expect(data(await dig('www.paused-zone.com', 'A'))).toEqual(['127.0.0.1']);
    expect((await t.call('PATCH', `/zones/${z.id}`, { paused: true })).status).toBe(200);
    expect(data(await dig('www.paused-zone.com', 'A'))).toEqual(['192.0.2.120']);
    expect((await dig('www.paused-zone.com', 'AAAA')).answer).toEqual([]);
  });

  it('refuses pending zones until activation, and answers proxied records with --edge-addresses', async () => {
    const manual = await startTestServer({
      dnsPort: 0,
      zoneActivation: 'manual',
      edgeAddresses: ['192.0.2.80', '2001:DB8::80'],
    });
    const saved = port;
    try {
      port = Number(
        /:(\d+)$/.exec(
          manual.server.listeners.find((l) => l.name === 'authoritative DNS')!.address,
        )![1],
      );
      const res = await manual.call('POST', '/zones', {
        name: 'pending-zone.com',
        account: { id: manual.accountId },
      });
      expect(res.body.result.status).toBe('pending');
      const id = res.body.result.id;
      expect(
        (
          await manual.call('POST', `/zones/${id}/dns_records`, {
            type: 'A',
            name: 'www',
            content: '192.0.2.1',
            proxied: true,
          })
        ).status,
      ).toBe(200);
      expect((await dig('www.pending-zone.com', 'A')).status).toBe('REFUSED');
      expect((await manual.call('PUT', `/zones/${id}/activation_check`)).status).toBe(200);
      expect(data(await dig('www.pending-zone.com', 'A'))).toEqual(['192.0.2.80']);
      expect(data(await dig('www.pending-zone.com', 'AAAA'))).toEqual(['2001:db8::80']);
    } finally {
      port = saved;
      await manual.stop();
    }
  });
});

describe('transport', () => {
  it('answers over TCP', async () => {
    const r = await dig('www.dig-test.com', 'A', '+tcp');
    expect(r.status).toBe('NOERROR');
    expect(data(r)).toEqual(['192.0.2.1', '192.0.2.2']);
  });

  it('answers several queries on one TCP connection (dig +keepopen)', async () => {
    const raw = await digRaw([
      '+tcp',
      '+keepopen',
      'www.dig-test.com',
      'A',
      'txt.dig-test.com',
      'TXT',
      'nope.other-zone.net',
      'A',
    ]);
    expect(raw.match(/->>HEADER<<-/g)).toHaveLength(3);
    expect(raw).toContain('192.0.2.1');
    expect(raw).toContain('"v=spf1 -all"');
    expect(raw).toContain('status: NXDOMAIN');
  });

  it('truncates UDP answers larger than the client payload size; dig retries over TCP', async () => {
    const big = await t.call('POST', `/zones/${zone.id}/dns_records`, {
      type: 'TXT',
      name: 'big',
      content: 'x'.repeat(2000),
      ttl: 1,
    });
    expect(big.status).toBe(200);
    await record(zone.id, { type: 'TXT', name: 'big', content: 'y'.repeat(2000), ttl: 1 });
    const truncated = await dig('big.dig-test.com', 'TXT', '+ignore');
    expect(truncated.flags).toContain('tc');
    expect(truncated.answer.length).toBeLessThan(2);
    const full = parseDig(await digRaw(['big.dig-test.com', 'TXT']));
    expect(full.raw).toContain('Truncated, retrying in TCP mode');
    expect(full.flags).not.toContain('tc');
    expect(full.answer).toHaveLength(2);
    expect(full.answer.map((a) => a.data.replace(/[" ]/g, '').length)).toEqual([2000, 2000]);
  });

  it('keeps UDP answers within 512 bytes without EDNS and within 1232 with a larger buffer', async () => {
    const noEdns = await dig('big.dig-test.com', 'TXT', '+ignore', '+noedns');
    expect(noEdns.flags).toContain('tc');
    expect(noEdns.udp).toBeUndefined();
    const small = await dig('www.dig-test.com', 'A', '+noedns');
    expect(small.udp).toBeUndefined();
    expect(data(small)).toEqual(['192.0.2.1', '192.0.2.2']);
    const bufsize = await dig('long.dig-test.com', 'TXT', '+bufsize=4096');
    expect(bufsize.udp).toBe(1232);
    expect(bufsize.flags).not.toContain('tc');
  });

  it('answers an unknown EDNS version with BADVERS', async () => {
    const r = await dig('www.dig-test.com', 'A', '+edns=1', '+noednsnegotiation');
    expect(r.status).toBe('BADVERS');
  });
});

/** Sends one UDP datagram and waits for one reply (or none within `waitMs`). */
function udpExchange(packet: Uint8Array, waitMs = 1000): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const sock = dgram.createSocket('udp4');
    const timer = setTimeout(() => {
      sock.close();
      resolve(undefined);
    }, waitMs);
    sock.on('message', (msg) => {
      clearTimeout(timer);
      sock.close();
      resolve(msg);
    });
    sock.send(packet, port, '127.0.0.1');
  });
}

function query(name: string, type: number, id = 4242): Message {
  return { ...emptyMessage(id), questions: [{ name, type, class: RRClass.IN }] };
}

describe('malformed input', () => {
  it('answers FORMERR to undecodable packets with a readable header, and drops the rest', async () => {
    const good = encodeMessage(query('www.dig-test.com', RRType.A, 0x1234));
    const cut = await udpExchange(good.subarray(0, good.length - 3));
    expect(cut).toBeDefined();
    const res = decodeMessage(cut!);
    expect(res.id).toBe(0x1234);
    expect(res.qr).toBe(true);
    expect(res.rcode).toBe(Rcode.FORMERR);
    // A compression pointer to itself in the question name.
    const loop = Buffer.from([0xab, 0xcd, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1]);
    expect(decodeMessage((await udpExchange(loop))!).rcode).toBe(Rcode.FORMERR);
    // Shorter than a header, and a response instead of a query: no reply at all.
    expect(await udpExchange(Buffer.from([1, 2, 3]), 300)).toBeUndefined();
    expect(
      await udpExchange(encodeMessage({ ...query('www.dig-test.com', RRType.A), qr: true }), 300),
    ).toBeUndefined();
    // No question, or two: FORMERR. Another opcode: NOTIMP.
    expect(decodeMessage((await udpExchange(encodeMessage(emptyMessage(7))))!).rcode).toBe(
      Rcode.FORMERR,
    );
    const two = {
      ...query('a.dig-test.com', RRType.A),
      questions: [
        query('a.dig-test.com', RRType.A).questions[0],
        query('b.dig-test.com', RRType.A).questions[0],
      ],
    };
    expect(decodeMessage((await udpExchange(encodeMessage(two)))!).rcode).toBe(Rcode.FORMERR);
    expect(
      decodeMessage(
        (await udpExchange(encodeMessage({ ...query('www.dig-test.com', RRType.A), opcode: 2 })))!,
      ).rcode,
    ).toBe(Rcode.NOTIMP);
    // Random garbage does not take the server down.
    let seed = 7;
    const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff);
    for (let i = 0; i < 200; i++) {
      const junk = Buffer.alloc(12 + (rand() % 100));
      for (let j = 0; j < junk.length; j++) junk[j] = rand() & 0xff;
      junk[2] &= 0x7f; // a query, so it gets an answer or FORMERR
      await udpExchange(junk, 50);
    }
    expect(data(await dig('www.dig-test.com', 'A'))).toEqual(['192.0.2.1', '192.0.2.2']);
  });
});

/** Reads length-framed DNS messages from a TCP socket. */
function frames(sock: net.Socket): { next(): Promise<Message | undefined> } {
  let buf = Buffer.alloc(0);
  const waiters: ((m: Message | undefined) => void)[] = [];
  const ready: (Message | undefined)[] = [];
  const push = (m: Message | undefined) => {
    const w = waiters.shift();
    if (w) w(m);
    else ready.push(m);
  };
  sock.on('data', (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
      const len = buf.readUInt16BE(0);
      push(decodeMessage(buf.subarray(2, 2 + len)));
      buf = buf.subarray(2 + len);
    }
  });
  sock.on('close', () => push(undefined));
  return {
    next: () =>
      ready.length > 0 ? Promise.resolve(ready.shift()) : new Promise((r) => waiters.push(r)),
  };
}

const framed = (m: Message) => {
  const body = encodeMessage(m);
  const len = Buffer.alloc(2);
  len.writeUInt16BE(body.length);
  return Buffer.concat([len, body]);
};

describe('TCP framing', () => {
  it('answers pipelined queries in one write and a query split across writes', async () => {
    const sock = net.connect(port, '127.0.0.1');
    await new Promise((r) => sock.once('connect', r));
    const reader = frames(sock);
    sock.write(
      Buffer.concat([
        framed(query('www.dig-test.com', RRType.A, 1)),
        framed(query('dig-test.com', RRType.MX, 2)),
      ]),
    );
    const first = await reader.next();
    const second = await reader.next();
    expect([first!.id, second!.id]).toEqual([1, 2]);
    expect(first!.answers).toHaveLength(2);
    expect(second!.answers).toHaveLength(2);
    const split = framed(query('txt.dig-test.com', RRType.TXT, 3));
    for (const byte of split) {
      sock.write(Buffer.from([byte]));
      await new Promise((r) => setImmediate(r));
    }
    const third = await reader.next();
    expect(third!.id).toBe(3);
    expect(third!.answers).toHaveLength(2);
    sock.destroy();
  });

  it('closes idle connections', async () => {
    const index = new ZoneIndex(t.server.database.db);
    await index.load();
    const server = await startDnsServer({
      host: '127.0.0.1',
      port: 0,
      edge: { v4: ['127.0.0.1'], v6: [] },
      zones: index,
      clock: { now: () => new Date() },
      tcpIdleTimeoutMs: 300,
    });
    try {
      const sock = net.connect(server.port, '127.0.0.1');
      await new Promise((r) => sock.once('connect', r));
      const reader = frames(sock);
      sock.write(framed(query('www.dig-test.com', RRType.A, 9)));
      expect((await reader.next())!.answers).toHaveLength(2);
      const started = Date.now();
      expect(await reader.next()).toBeUndefined(); // closed by the server
      expect(Date.now() - started).toBeGreaterThanOrEqual(200);
    } finally {
      await server.stop();
    }
  });
});
