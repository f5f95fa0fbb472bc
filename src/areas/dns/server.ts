/**
 * The authoritative DNS server: answers for every active zone from its DNS records over UDP and
 * TCP on one port (`--dns-port`), with the codec in wire.ts.
 *
 * Lookups never touch the database: records come from the area's shared in-memory `ZoneIndex`
 * (zone-index.ts), turned once per zone version into an answering view (wire-form records, names
 * that exist, delegations). The index applies every change event synchronously before the API
 * answers, and bumps the zone's `version`, so the next query sees the change.
 *
 * Resolution (RFC 1034 §4.3.2 with RFC 4592 wildcards, RFC 2308 negative answers):
 * - the zone is the longest active zone name that is a suffix of the query name, else REFUSED;
 * - NS records below the apex are delegations: a non-authoritative referral with glue;
 * - an existing name answers its records of the type (NODATA = NOERROR with the SOA when none);
 *   an empty non-terminal exists without records; otherwise `*.<closest encloser>` is used, else
 *   NXDOMAIN with the SOA;
 * - a CNAME is followed inside our zones (the chain goes in the answer, the RCODE and authority are
 *   those of the last name); targets outside them end the chain;
 * - a proxied record (A, AAAA or CNAME with `proxied: true`) makes its name answer A and AAAA
 *   with the edge's addresses and no CNAME, as the platform does (not in a paused zone);
 * - the apex always has a synthesised SOA, and NS records from the zone's name servers unless the
 *   zone has its own NS records there;
 * - ANY is answered minimally (RFC 8482): the CNAME if there is one, else one HINFO "RFC8482".
 *
 * UDP answers are cut to the client's EDNS payload size (at most 1232, 512 without EDNS) with TC
 * set; TCP uses 2-byte length framing, several queries per connection and an idle timeout.
 * Malformed packets get FORMERR when their header is readable and are dropped otherwise.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Listener } from '../../core/area.ts';
import type { Clock } from '../../core/clock.ts';
import type { Logger } from '../../core/log.ts';
import { normalizeZoneName, splitPresentation } from './record-rules.ts';
import type { StoredRecord } from './store.ts';
import type { IndexedZone } from './zone-index.ts';
import {
  bytesToIpv6,
  decodeMessage,
  emptyMessage,
  encodeMessage,
  ipv4ToBytes,
  ipv6ToBytes,
  lowerName,
  nameToWire,
  Opcode,
  peekHeader,
  Rcode,
  RRClass,
  RRType,
  splitCharacterStrings,
  type Message,
  type RecordData,
  type ResourceRecord,
} from './wire.ts';

/** Answer TTL of records with the automatic TTL (`ttl: 1`) and of proxied records. */
export const AUTO_TTL = 300;
export const SOA_TTL = 3600;
export const NS_TTL = 86400;
/** SOA timers: refresh, retry, expire, minimum (the negative-caching TTL). */
export const SOA_TIMERS = { refresh: 10000, retry: 2400, expire: 604800, minimum: 1800 } as const;
/** Our advertised EDNS UDP payload size and the cap on UDP answers (DNS flag day 2020). */
export const EDNS_UDP_SIZE = 1232;
export const DEFAULT_TCP_IDLE_MS = 10_000;
const MAX_CNAME_CHAIN = 12;
const MAX_TCP_CONNECTIONS = 1024;
/** Queries a TCP connection may have waiting before we stop reading from it. */
const MAX_TCP_PIPELINE = 64;
const PROXIABLE = new Set(['A', 'AAAA', 'CNAME']);

export interface EdgeAddresses {
  v4: string[];
  v6: string[];
}

/**
 * The addresses proxied records answer with: the configured list, else derived from the listen
 * host (a loopback or wildcard host answers 127.0.0.1 and ::1).
 */
export function edgeAddressesFor(host: string, configured: string[]): EdgeAddresses {
  let list = configured;
  if (list.length === 0) {
    const h = host.replace(/^\[|\]$/g, '');
    if (net.isIP(h) === 0 || h === '0.0.0.0' || h === '::') list = ['127.0.0.1', '::1'];
    else if (h.startsWith('127.')) list = [h, '::1'];
    else if (h === '::1') list = ['127.0.0.1', '::1'];
    else list = [h];
  }
  const out: EdgeAddresses = { v4: [], v6: [] };
  for (const a of list) {
    const family = net.isIP(a);
    if (family === 4 && !out.v4.includes(a)) out.v4.push(a);
    else if (family === 6) {
      const canonical = bytesToIpv6(ipv6ToBytes(a));
      if (!out.v6.includes(canonical)) out.v6.push(canonical);
    } else if (family === 0) throw new Error(`edge address "${a}" is not an IPv4 or IPv6 address`);
  }
  return out;
}

// --- records to wire data ------------------------------------------------------------------------

const writerBytes = (...parts: (number[] | Uint8Array)[]): Uint8Array => {
  const out: number[] = [];
  for (const p of parts) out.push(...p);
  return Uint8Array.from(out);
};
const u8 = (v: number) => [v & 0xff];
const u16 = (v: number) => [(v >> 8) & 0xff, v & 0xff];
const u32 = (v: number) => [(v >>> 24) & 0xff, (v >>> 16) & 0xff, (v >>> 8) & 0xff, v & 0xff];
const hexBytes = (s: string) => Uint8Array.from(Buffer.from(s, 'hex'));
const base64Bytes = (s: string) => Uint8Array.from(Buffer.from(s, 'base64'));
const text = (s: string) => Uint8Array.from(Buffer.from(s, 'utf8'));
const charString = (s: string) => {
  const b = text(s);
  if (b.length > 255) throw new Error('character-string longer than 255 bytes');
  return writerBytes(u8(b.length), b);
};
/** A stored target name: `.` is the root. */
const target = (s: string) => (s === '.' ? '' : s);

/** TXT content: quoted presentation strings are read as such, any other text is split in 255-byte pieces. */
export function txtStrings(content: string): Uint8Array[] {
  const t = content.trim();
  if (t.length >= 2 && t.startsWith('"') && t.endsWith('"')) {
    try {
      const tokens = splitPresentation(t);
      if (tokens.length > 0 && tokens.every((tk) => tk.quoted))
        return tokens.flatMap((tk) => splitCharacterStrings(tk.text));
    } catch {
      // not presentation text: served as written
    }
  }
  return splitCharacterStrings(content);
}

/** RFC 1876 size/precision byte: mantissa and power of ten of a length in centimetres. */
function locPrecision(meters: number): number {
  const cm = Math.round(meters * 100);
  let exponent = 0;
  while (exponent < 9 && cm >= 10 ** (exponent + 1)) exponent++;
  return (Math.min(9, Math.floor(cm / 10 ** exponent)) << 4) | exponent;
}

function locRdata(d: Record<string, string | number>): Uint8Array {
  const n = (k: string) => Number(d[k] ?? 0);
  const angle = (deg: number, min: number, sec: number, negative: boolean) => {
    const thousandths = Math.round((deg * 3600 + min * 60 + sec) * 1000);
    return (2 ** 31 + (negative ? -thousandths : thousandths)) >>> 0;
  };
  return writerBytes(
    u8(0),
    u8(locPrecision(n('size'))),
    u8(locPrecision(n('precision_horz'))),
    u8(locPrecision(n('precision_vert'))),
    u32(
      angle(
        n('lat_degrees'),
        n('lat_minutes'),
        n('lat_seconds'),
        String(d.lat_direction).toUpperCase() === 'S',
      ),
    ),
    u32(
      angle(
        n('long_degrees'),
        n('long_minutes'),
        n('long_seconds'),
        String(d.long_direction).toUpperCase() === 'W',
      ),
    ),
    u32((Math.round(n('altitude') * 100) + 10_000_000) >>> 0),
  );
}

const SVC_KEYS: Record<string, number> = {
  mandatory: 0,
  alpn: 1,
  'no-default-alpn': 2,
  port: 3,
  ipv4hint: 4,
  ech: 5,
  ipv6hint: 6,
};

function svcKey(name: string): number {
  const key = SVC_KEYS[name] ?? (/^key(\d{1,5})$/.exec(name) ? Number(name.slice(3)) : NaN);
  if (!Number.isInteger(key) || key > 65535) throw new Error(`unknown SvcParam key ${name}`);
  return key;
}

/** SVCB/HTTPS RDATA (RFC 9460) from the record's priority, target and SvcParams text. */
function svcbRdata(d: Record<string, string | number>): Uint8Array {
  const params: [number, Uint8Array][] = [];
  for (const token of splitPresentation(String(d.value ?? ''))) {
    const eq = token.text.indexOf('=');
    const name = (eq < 0 ? token.text : token.text.slice(0, eq)).toLowerCase();
    const value = eq < 0 ? '' : token.text.slice(eq + 1);
    const key = svcKey(name);
    const list = value === '' ? [] : value.split(',');
    let data: Uint8Array;
    switch (key) {
      case 0:
        data = writerBytes(
          ...list
            .map((k) => svcKey(k))
            .sort((a, b) => a - b)
            .map(u16),
        );
        break;
      case 1:
        data = writerBytes(...list.map(charString));
        break;
      case 2:
        data = new Uint8Array(0);
        break;
      case 3:
        if (!/^\d+$/.test(value) || Number(value) > 65535) throw new Error('bad port');
        data = Uint8Array.from(u16(Number(value)));
        break;
      case 4:
        data = writerBytes(...list.map(ipv4ToBytes));
        break;
      case 5:
        data = base64Bytes(value);
        break;
      case 6:
        data = writerBytes(...list.map(ipv6ToBytes));
        break;
      default:
        data = text(value);
    }
    params.push([key, data]);
  }
  params.sort((a, b) => a[0] - b[0]);
  return writerBytes(
    u16(Number(d.priority ?? 0)),
    nameToWire(target(String(d.target ?? '.'))),
    ...params.map(([k, v]) => writerBytes(u16(k), u16(v.length), v)),
  );
}

/** The wire form of a stored record's data; throws when the record cannot be expressed. */
export function recordData(
  rec: Pick<StoredRecord, 'type' | 'content' | 'data' | 'priority'>,
): RecordData {
  const d = rec.data ?? {};
  const n = (k: string) => Number(d[k] ?? 0);
  const s = (k: string) => String(d[k] ?? '');
  const raw = (type: number, rdata: Uint8Array): RecordData => ({ type, rdata });
  switch (rec.type) {
    case 'A':
      return { type: RRType.A, address: rec.content };
    case 'AAAA':
      return { type: RRType.AAAA, address: rec.content };
    case 'CNAME':
      return { type: RRType.CNAME, target: target(rec.content) };
    case 'NS':
      return { type: RRType.NS, target: target(rec.content) };
    case 'PTR':
      return { type: RRType.PTR, target: target(rec.content) };
    case 'MX':
      return { type: RRType.MX, preference: rec.priority ?? 0, exchange: target(rec.content) };
    case 'TXT':
      return { type: RRType.TXT, strings: txtStrings(rec.content) };
    case 'SRV':
      return {
        type: RRType.SRV,
        priority: rec.priority ?? n('priority'),
        weight: n('weight'),
        port: n('port'),
        target: target(s('target')),
      };
    case 'CAA':
      return { type: RRType.CAA, flags: n('flags'), tag: s('tag'), value: s('value') };
    case 'TLSA':
    case 'SMIMEA':
      return raw(
        RRType[rec.type],
        writerBytes(
          u8(n('usage')),
          u8(n('selector')),
          u8(n('matching_type')),
          hexBytes(s('certificate')),
        ),
      );
    case 'SSHFP':
      return raw(
        RRType.SSHFP,
        writerBytes(u8(n('algorithm')), u8(n('type')), hexBytes(s('fingerprint'))),
      );
    case 'DS':
      return raw(
        RRType.DS,
        writerBytes(
          u16(n('key_tag')),
          u8(n('algorithm')),
          u8(n('digest_type')),
          hexBytes(s('digest')),
        ),
      );
    case 'DNSKEY':
      return raw(
        RRType.DNSKEY,
        writerBytes(
          u16(n('flags')),
          u8(n('protocol')),
          u8(n('algorithm')),
          base64Bytes(s('public_key')),
        ),
      );
    case 'CERT':
      return raw(
        RRType.CERT,
        writerBytes(
          u16(n('type')),
          u16(n('key_tag')),
          u8(n('algorithm')),
          base64Bytes(s('certificate')),
        ),
      );
    case 'URI':
      return raw(
        RRType.URI,
        writerBytes(u16(rec.priority ?? 0), u16(n('weight')), text(s('target'))),
      );
    case 'OPENPGPKEY':
      return raw(RRType.OPENPGPKEY, base64Bytes(rec.content));
    case 'NAPTR':
      return raw(
        RRType.NAPTR,
        writerBytes(
          u16(n('order')),
          u16(n('preference')),
          charString(s('flags')),
          charString(s('service')),
          charString(s('regex')),
          nameToWire(target(s('replacement'))),
        ),
      );
    case 'LOC':
      return raw(RRType.LOC, locRdata(d));
    case 'SVCB':
    case 'HTTPS':
      return raw(RRType[rec.type], svcbRdata(d));
  }
}

// --- zone views ----------------------------------------------------------------------------------

/** What the server needs from the DNS area's shared zone index (zone-index.ts). */
export interface ZoneSource {
  zoneFor(host: string): IndexedZone | undefined;
}

interface Entry {
  type: number;
  ttl: number;
  data: RecordData;
}

interface Node {
  byType: Map<number, Entry[]>;
  /** A proxied A/AAAA/CNAME record lives here: A and AAAA answer the edge, no CNAME. */
  proxied: boolean;
  cname?: Entry;
}

/** One zone as the server answers it: records in wire form, names that exist, delegations. */
export interface ZoneView {
  id: string;
  name: string;
  serial: number;
  /** Name servers for the synthesised SOA and NS. */
  nameServers: string[];
  nodes: Map<string, Node>;
  /** Names with records and every ancestor up to the apex (empty non-terminals included). */
  existing: Set<string>;
  /** Names below the apex holding NS records (delegations). */
  cuts: Set<string>;
}

/** The name one label up; escaped dots stay inside their label. */
function parentName(name: string): string {
  for (let i = 0; i < name.length; i++) {
    if (name[i] === '\\') i++;
    else if (name[i] === '.') return name.slice(i + 1);
  }
  return '';
}

function inZone(name: string, zone: string): boolean {
  return name === zone || name.endsWith(`.${zone}`);
}

/**
 * Builds the answering view of a zone. Records that cannot be put on the wire are skipped (and
 * logged). A paused zone serves its proxied records' own content, as the platform does.
 */
export function buildZoneView(zone: IndexedZone, serial: number, log?: Logger): ZoneView {
  const name = normalizeZoneName(zone.name);
  const view: ZoneView = {
    id: zone.id,
    name,
    serial,
    nameServers: zone.nameServers.map((s) => normalizeZoneName(s)).filter(Boolean),
    nodes: new Map(),
    existing: new Set([name]),
    cuts: new Set(),
  };
  if (view.nameServers.length === 0) view.nameServers = [`ns.${name}`];
  for (const records of zone.records.values()) {
    for (const rec of records) {
      const owner = normalizeZoneName(rec.name);
      if (!inZone(owner, name)) continue;
      let data: RecordData;
      try {
        data = recordData(rec);
        // Proves the record encodes (addresses, names, string lengths) before it is ever served.
        encodeMessage({
          ...emptyMessage(),
          answers: [{ name: owner, class: RRClass.IN, ttl: 0, ...data } as ResourceRecord],
        });
      } catch (err) {
        log?.warn(
          { zone: name, record: rec.id, type: rec.type, err: (err as Error).message },
          'DNS record cannot be served; skipped',
        );
        continue;
      }
      let node = view.nodes.get(owner);
      if (!node) {
        node = { byType: new Map(), proxied: false };
        view.nodes.set(owner, node);
      }
      for (let n = owner; n !== name && n !== ''; n = parentName(n)) view.existing.add(n);
      if (rec.proxied && PROXIABLE.has(rec.type) && !zone.paused) {
        node.proxied = true;
        continue;
      }
      const e: Entry = { type: data.type, ttl: rec.ttl === 1 ? AUTO_TTL : rec.ttl, data };
      const list = node.byType.get(e.type) ?? [];
      list.push(e);
      node.byType.set(e.type, list);
      if (e.type === RRType.NS && owner !== name) view.cuts.add(owner);
    }
  }
  for (const node of view.nodes.values()) {
    if (node.proxied) {
      // Proxied names answer the edge: their own address and CNAME records are not served.
      node.byType.delete(RRType.A);
      node.byType.delete(RRType.AAAA);
      node.byType.delete(RRType.CNAME);
    }
    node.cname = node.byType.get(RRType.CNAME)?.[0];
  }
  return view;
}

/**
 * Answering views over the shared index, built on first use of each zone version (the index
 * replaces a zone's entry object on every reload) and never from the database.
 */
export class ZoneViews {
  private views = new WeakMap<IndexedZone, { version: number; view: ZoneView }>();
  private serials = new Map<string, number>();

  constructor(
    private readonly source: ZoneSource,
    private readonly clock: Clock,
    private readonly log?: Logger,
  ) {}

  /** The active zone with the longest name that is a suffix of `name` (lowercase). */
  find(name: string): ZoneView | undefined {
    if (name.includes('\\')) return this.findExact(name);
    for (let n = name; ;) {
      const zone = this.source.zoneFor(n);
      if (!zone) return undefined;
      if (zone.status === 'active') return this.view(zone);
      // An inactive zone is not served; a zone above it may be.
      n = parentName(normalizeZoneName(zone.name));
      if (n === '') return undefined;
    }
  }

  /**
   * For names with escaped bytes (a label holding a dot): walk label by label and take only exact
   * zone names, since the index splits host names at every dot.
   */
  private findExact(name: string): ZoneView | undefined {
    for (let n = name; n !== ''; n = parentName(n)) {
      const zone = this.source.zoneFor(n);
      if (zone && zone.status === 'active' && normalizeZoneName(zone.name) === n)
        return this.view(zone);
    }
    return undefined;
  }

  private view(zone: IndexedZone): ZoneView {
    const cached = this.views.get(zone);
    let view = cached?.version === zone.version ? cached.view : undefined;
    if (!view) {
      // A new version of the zone gets a larger serial (seconds, or one more than the last).
      const previous = this.serials.get(zone.id);
      const now = Math.floor(this.clock.now().getTime() / 1000) >>> 0;
      const serial = previous === undefined ? now : Math.max(now, (previous + 1) >>> 0);
      this.serials.set(zone.id, serial);
      view = buildZoneView(zone, serial, this.log);
      this.views.set(zone, { version: zone.version, view });
    }
    return view;
  }
}

export type Transport = 'udp' | 'tcp';

interface Resolution {
  rcode: number;
  aa: boolean;
  answers: ResourceRecord[];
  authority: ResourceRecord[];
  additional: ResourceRecord[];
}

/** Resolution over the zone views (see the module comment for the rules). */
class Resolver {
  constructor(
    private readonly zones: ZoneViews,
    private readonly edge: EdgeAddresses,
  ) {}

  /** Undefined when the name is in none of our zones (REFUSED). */
  resolve(qname: string, qtype: number): Resolution | undefined {
    const name = lowerName(qname);
    const zone = this.zones.find(name);
    if (!zone) return undefined;
    const out: Resolution = { rcode: Rcode.NOERROR, aa: true, answers: [], authority: [], additional: [] };
    this.lookup(zone, qname, name, qtype, out, new Set([name]), true);
    this.addAdditional(out);
    return out;
  }

  private soa(zone: ZoneView, ttl: number = SOA_TTL): ResourceRecord {
    return {
      name: zone.name,
      class: RRClass.IN,
      ttl,
      type: RRType.SOA,
      mname: zone.nameServers[0],
      rname: `dns.${zone.name}`,
      serial: zone.serial,
      ...SOA_TIMERS,
    };
  }

  /** RFC 2308: the SOA in the authority section, its TTL capped by the minimum. */
  private negative(zone: ZoneView, out: Resolution): void {
    out.authority.push(this.soa(zone, Math.min(SOA_TTL, SOA_TIMERS.minimum)));
  }

  private rrset(zone: ZoneView, node: Node | undefined, apex: boolean, qtype: number, owner: string): ResourceRecord[] {
    const rr = (e: Entry): ResourceRecord => ({ name: owner, class: RRClass.IN, ttl: e.ttl, ...e.data }) as ResourceRecord;
    if (node?.proxied && (qtype === RRType.A || qtype === RRType.AAAA)) {
      const list = qtype === RRType.A ? this.edge.v4 : this.edge.v6;
      return list.map((address) => ({ name: owner, class: RRClass.IN, ttl: AUTO_TTL, type: qtype, address }) as ResourceRecord);
    }
    if (apex && qtype === RRType.SOA) return [this.soa(zone)];
    const own = node?.byType.get(qtype) ?? [];
    if (apex && qtype === RRType.NS && own.length === 0) {
      return zone.nameServers.map((ns) => ({ name: owner, class: RRClass.IN, ttl: NS_TTL, type: RRType.NS, target: ns }) as ResourceRecord);
    }
    return own.map(rr);
  }

  /** The delegation point above (or at) `name`, if any; DS at the cut belongs to the parent. */
  private cutFor(zone: ZoneView, name: string, qtype: number): string | undefined {
    if (zone.cuts.size === 0) return undefined;
    let found: string | undefined;
    for (let n = name; n !== zone.name && n !== ''; n = parentName(n)) {
      if (zone.cuts.has(n) && !(n === name && qtype === RRType.DS)) found = n;
    }
    return found;
  }

  private lookup(zone: ZoneView, owner: string, name: string, qtype: number, out: Resolution, seen: Set<string>, first: boolean): void {
    const cut = this.cutFor(zone, name, qtype);
    if (cut) {
      if (first) out.aa = false;
      out.authority.push(...this.rrset(zone, zone.nodes.get(cut), false, RRType.NS, cut));
      return;
    }
    const apex = name === zone.name;
    let node = zone.nodes.get(name);
    if (!node && !apex) {
      // An empty non-terminal exists: NODATA, and it blocks wildcards below the closest encloser.
      if (zone.existing.has(name)) return this.negative(zone, out);
      let encloser = parentName(name);
      while (encloser !== zone.name && encloser !== '' && !zone.existing.has(encloser)) encloser = parentName(encloser);
      node = encloser === '' ? undefined : zone.nodes.get(`*.${encloser}`);
      if (!node) {
        out.rcode = Rcode.NXDOMAIN;
        return this.negative(zone, out);
      }
    }
    const cname = apex && (qtype === RRType.SOA || qtype === RRType.NS) ? undefined : node?.cname;
    if (qtype === RRType.ANY) {
      if (cname) out.answers.push({ name: owner, class: RRClass.IN, ttl: cname.ttl, ...cname.data } as ResourceRecord);
      else out.answers.push({ name: owner, class: RRClass.IN, ttl: SOA_TTL, type: RRType.HINFO, cpu: 'RFC8482', os: '' });
      return;
    }
    if (cname && qtype !== RRType.CNAME) {
      out.answers.push({ name: owner, class: RRClass.IN, ttl: cname.ttl, ...cname.data } as ResourceRecord);
      const next = lowerName((cname.data as { target: string }).target);
      if (seen.has(next) || seen.size >= MAX_CNAME_CHAIN) return;
      seen.add(next);
      const nextZone = this.zones.find(next);
      if (nextZone) this.lookup(nextZone, next, next, qtype, out, seen, false);
      return;
    }
    const answers = this.rrset(zone, node, apex, qtype, owner);
    if (answers.length === 0) return this.negative(zone, out);
    out.answers.push(...answers);
  }

  /** Addresses of NS, MX and SRV targets that live in our zones. */
  private addAdditional(out: Resolution): void {
    const done = new Set<string>();
    for (const rr of [...out.answers, ...out.authority]) {
      let host: string | undefined;
      if (rr.type === RRType.NS && 'target' in rr) host = rr.target;
      else if (rr.type === RRType.MX && 'exchange' in rr) host = rr.exchange;
      else if (rr.type === RRType.SRV && 'target' in rr) host = rr.target;
      if (!host) continue;
      const name = lowerName(host);
      if (done.has(name)) continue;
      done.add(name);
      const zone = this.zones.find(name);
      const node = zone?.nodes.get(name);
      if (!zone || !node) continue;
      for (const type of [RRType.A, RRType.AAAA]) out.additional.push(...this.rrset(zone, node, false, type, name));
    }
  }
}

/** The largest answer the client can take: TCP's limit, else its EDNS size (512 without EDNS). */
function answerLimit(query: Message | undefined, transport: Transport): number {
  if (transport === 'tcp') return 65535;
  if (!query?.edns) return 512;
  return Math.max(512, Math.min(query.edns.udpSize, EDNS_UDP_SIZE));
}

export class QueryHandler {
  private readonly resolver: Resolver;

  constructor(
    zones: ZoneViews,
    edge: EdgeAddresses,
    private readonly log?: Logger,
  ) {
    this.resolver = new Resolver(zones, edge);
  }

  /** The encoded answer to one packet; undefined to drop it. */
  handle(packet: Uint8Array, transport: Transport): Buffer | undefined {
    const head = peekHeader(packet);
    if (!head || head.qr) return undefined;
    let query: Message;
    try {
      query = decodeMessage(packet);
    } catch {
      return encodeMessage({
        ...emptyMessage(head.id),
        qr: true,
        opcode: head.opcode,
        rd: head.rd,
        cd: head.cd,
        rcode: Rcode.FORMERR,
      });
    }
    return this.answer(query, transport);
  }

  private answer(query: Message, transport: Transport): Buffer {
    const res: Message = {
      ...emptyMessage(query.id),
      qr: true,
      opcode: query.opcode,
      rd: query.rd,
      cd: query.cd,
      questions: query.questions.slice(0, 1),
    };
    if (query.edns)
      res.edns = { udpSize: EDNS_UDP_SIZE, version: 0, dnssecOk: query.edns.dnssecOk, options: [] };
    const limit = answerLimit(query, transport);
    const reply = (rcode: number) => encodeMessage({ ...res, rcode }, { maxSize: limit });
    if (query.edns && query.edns.version > 0) return reply(Rcode.BADVERS);
    if (query.opcode !== Opcode.QUERY) return reply(Rcode.NOTIMP);
    if (query.questions.length !== 1) return reply(Rcode.FORMERR);
    const q = query.questions[0];
    if (q.type === RRType.OPT || q.type === 249 || q.type === 250) return reply(Rcode.FORMERR);
    if (q.class !== RRClass.IN && q.class !== RRClass.ANY) return reply(Rcode.REFUSED);
    if (q.type === RRType.AXFR || q.type === RRType.IXFR) return reply(Rcode.REFUSED);
    if (q.type === 253 || q.type === 254) return reply(Rcode.NOTIMP);
    try {
      const r = this.resolver.resolve(q.name, q.type);
      if (!r) return reply(Rcode.REFUSED);
      return encodeMessage(
        {
          ...res,
          aa: r.aa,
          rcode: r.rcode,
          answers: r.answers,
          authority: r.authority,
          additional: r.additional,
        },
        { maxSize: limit },
      );
    } catch (err) {
      this.log?.error({ err, qname: q.name, qtype: q.type }, 'DNS: answering failed');
      return reply(Rcode.SERVFAIL);
    }
  }
}

// --- listeners -----------------------------------------------------------------------------------

export interface DnsServerOptions {
  host: string;
  /** 0 picks a free port (the same one for UDP and TCP). */
  port: number;
  edge: EdgeAddresses;
  /** The DNS area's shared zone index, already loaded. */
  zones: ZoneSource;
  clock: Clock;
  log?: Logger;
  tcpIdleTimeoutMs?: number;
}

export interface DnsServer {
  port: number;
  listeners: Listener[];
  stop(): Promise<void>;
}

function listenTcp(server: net.Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
}

function bindUdp(socket: dgram.Socket, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    socket.once('error', onError);
    socket.bind(port, host, () => {
      socket.off('error', onError);
      resolve();
    });
  });
}

export async function startDnsServer(opts: DnsServerOptions): Promise<DnsServer> {
  const { log } = opts;
  const handler = new QueryHandler(
    new ZoneViews(opts.zones, opts.clock, log),
    opts.edge,
    log,
  );
  const idleMs = opts.tcpIdleTimeoutMs ?? DEFAULT_TCP_IDLE_MS;

  const connections = new Set<net.Socket>();
  let closed = false;

  const onConnection = (socket: net.Socket) => {
    connections.add(socket);
    socket.setNoDelay(true);
    socket.setTimeout(idleMs, () => socket.destroy());
    socket.on('error', () => socket.destroy());
    socket.on('close', () => connections.delete(socket));
    let buffered: Buffer = Buffer.alloc(0);
    let chain: Promise<void> = Promise.resolve();
    let waiting = 0;
    let draining = false;
    const maybeResume = () => {
      if (!draining && waiting < MAX_TCP_PIPELINE && socket.isPaused() && !socket.destroyed)
        socket.resume();
    };
    socket.on('data', (chunk: Buffer) => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      while (buffered.length >= 2) {
        const length = buffered.readUInt16BE(0);
        if (length < 12) {
          // Not even a header: nothing to answer, and the framing cannot be trusted any more.
          socket.destroy();
          return;
        }
        if (buffered.length < 2 + length) break;
        const frame = buffered.subarray(2, 2 + length);
        buffered = buffered.subarray(2 + length);
        waiting++;
        if (waiting >= MAX_TCP_PIPELINE) socket.pause();
        chain = chain
          .then(async () => {
            const out = handler.handle(frame, 'tcp');
            if (!out || socket.destroyed) return;
            const prefix = Buffer.alloc(2);
            prefix.writeUInt16BE(out.length);
            if (!socket.write(Buffer.concat([prefix, out]))) {
              draining = true;
              socket.pause();
              socket.once('drain', () => {
                draining = false;
                maybeResume();
              });
            }
          })
          .catch((err: unknown) => log?.error({ err }, 'DNS over TCP: answering failed'))
          .finally(() => {
            waiting--;
            maybeResume();
          });
      }
    });
  };

  let tcp: net.Server | undefined;
  let udp: dgram.Socket | undefined;
  const attempts = opts.port === 0 ? 20 : 1;
  for (let attempt = 1; ; attempt++) {
    const t = net.createServer(onConnection);
    t.maxConnections = MAX_TCP_CONNECTIONS;
    const u = dgram.createSocket({
      type: net.isIPv6(opts.host.replace(/^\[|\]$/g, '')) ? 'udp6' : 'udp4',
    });
    try {
      await listenTcp(t, opts.port, opts.host);
      await bindUdp(u, (t.address() as AddressInfo).port, opts.host);
      tcp = t;
      udp = u;
      break;
    } catch (err) {
      await new Promise<void>((r) => (t.listening ? t.close(() => r()) : r()));
      try {
        u.close();
      } catch {
        // never bound
      }
      if (attempt >= attempts || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE') {
        throw err;
      }
    }
  }

  const socket = udp;
  socket.on('error', (err) => log?.warn({ err: err.message }, 'DNS over UDP: socket error'));
  socket.on('message', (msg, rinfo) => {
    if (rinfo.port === 0) return;
    const send = (out: Buffer | undefined) => {
      if (!out || closed) return;
      socket.send(out, rinfo.port, rinfo.address, (err) => {
        if (err) log?.debug({ err: err.message }, 'DNS over UDP: send failed');
      });
    };
    try {
      send(handler.handle(msg, 'udp'));
    } catch (err) {
      log?.error({ err }, 'DNS over UDP: answering failed');
    }
  });

  const port = (tcp.address() as AddressInfo).port;
  const shown =
    opts.host.includes(':') && !opts.host.startsWith('[') ? `[${opts.host}]` : opts.host;
  const server = tcp;
  return {
    port,
    listeners: [
      { name: 'authoritative DNS', protocol: 'udp', address: `${shown}:${port}` },
      { name: 'authoritative DNS', protocol: 'tcp', address: `${shown}:${port}` },
    ],
    async stop() {
      if (closed) return;
      closed = true;
      await new Promise<void>((r) => socket.close(() => r()));
      const tcpClosed = new Promise<void>((r) => server.close(() => r()));
      for (const c of connections) c.destroy();
      await tcpClosed;
    },
  };
}
