/**
 * The rules that tie an application's fields together, and the run-time plan the proxy follows.
 * `canonicalApp` turns a validated body into the stored form or throws one 400 listing every
 * problem (each message names its field); `planOf` derives what to listen on and where to send.
 */
import net from 'node:net';
import { domainToASCII } from 'node:url';
import { ApiError, CODES } from '../../core/errors.ts';
import type { AppBody, EdgeIpsConfig, PortRange, ProxyProtocol, StoredApp, TlsMode, Transport } from './schemas.ts';

/** Most ports one application may listen on (a port range opens one listener per port). */
export const MAX_PORTS = 1024;

export interface OriginTarget {
  host: string;
  ports: PortRange;
}

export type OriginPlan =
  | { kind: 'direct'; targets: OriginTarget[] }
  | { kind: 'dns'; name: string; type: '' | 'A' | 'AAAA' | 'SRV'; ports?: PortRange; ttlMs: number };

/** What the proxy needs to serve an application. */
export interface AppPlan {
  id: string;
  zoneId: string;
  hostname: string;
  transport: Transport;
  ports: PortRange;
  /** Addresses to listen on. */
  addresses: string[];
  origin: OriginPlan;
  proxyProtocol: ProxyProtocol;
  tls: TlsMode;
  ipFirewall: boolean;
  /** `http`/`https`: connections are handed to the edge's HTTP pipeline. */
  trafficType: 'direct' | 'http' | 'https';
}

// --- small parsers -------------------------------------------------------------------------------

const PROTOCOL = /^(tcp|udp)\/(\d{1,5})(?:-(\d{1,5}))?$/i;
const DIRECT = /^(tcp|udp):\/\/(\[[0-9a-fA-F:.]+\]|[0-9.]+):(\d{1,5})(?:-(\d{1,5}))?$/;
const LABEL = /^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$/;

export function parseProtocol(protocol: string): { transport: Transport; ports: PortRange } | undefined {
  const m = PROTOCOL.exec(protocol.trim());
  if (!m) return undefined;
  const start = Number(m[2]);
  const end = m[3] === undefined ? start : Number(m[3]);
  if (start < 1 || end > 65535 || start > end) return undefined;
  return { transport: m[1].toLowerCase() as Transport, ports: { start, end } };
}

export function portCount(r: PortRange): number {
  return r.end - r.start + 1;
}

/** IPv4 as given (validated), IPv6 lowercased and compressed; undefined when not an address. */
export function canonicalIp(ip: string): string | undefined {
  const s = ip.trim().replace(/^\[|\]$/g, '');
  const family = net.isIP(s);
  if (family === 4) return s;
  if (family === 6) return new URL(`http://[${s}]/`).hostname.replace(/^\[|\]$/g, '');
  return undefined;
}

/** Lowercase ASCII host name without the trailing dot; undefined when not a valid name. */
export function canonicalHostname(name: string): string | undefined {
  const ascii = domainToASCII(name.trim().replace(/\.$/, ''));
  if (!ascii || ascii.length > 253) return undefined;
  return ascii.split('.').every((l) => LABEL.test(l)) ? ascii : undefined;
}

export function formatHostPort(host: string, port: number | string): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

function rangeText(r: PortRange): string {
  return r.start === r.end ? String(r.start) : `${r.start}-${r.end}`;
}

function asRange(p: number | PortRange): PortRange {
  return typeof p === 'number' ? { start: p, end: p } : p;
}

// --- canonical form ------------------------------------------------------------------------------

export interface RuleEnv {
  zoneName: string;
  /** The dynamic edge addresses (bind addresses) of this server. */
  bindAddresses: string[];
}

type Fields = Omit<StoredApp, 'id' | 'created_on' | 'modified_on'>;

/** Checks the cross-field rules and returns the canonical stored fields. */
export function canonicalApp(body: AppBody, env: RuleEnv): Fields {
  const issues: string[] = [];
  const bad = (msg: string) => issues.push(msg);

  const proto = parseProtocol(body.protocol);
  if (!proto) bad(`protocol: "${body.protocol}" must look like tcp/<port>, udp/<port> or tcp/<start>-<end> with ports 1-65535`);
  else if (portCount(proto.ports) > MAX_PORTS) bad(`protocol: a port range may hold at most ${MAX_PORTS} ports`);
  const transport = proto?.transport;
  const size = proto ? portCount(proto.ports) : 1;

  const zone = env.zoneName.toLowerCase();
  const dnsName = canonicalHostname(body.dns.name);
  if (!dnsName) bad(`dns.name: "${body.dns.name}" is not a valid host name`);
  else if (dnsName !== zone && !dnsName.endsWith(`.${zone}`)) bad(`dns.name: ${dnsName} is not inside zone ${zone}`);

  // Origins: exactly one of origin_direct or origin_dns (+ origin_port).
  let originDirect: string[] | undefined;
  let originPort: number | PortRange | undefined;
  if (body.origin_direct && body.origin_dns) bad('origin_direct and origin_dns are mutually exclusive: give one of them');
  else if (!body.origin_direct && !body.origin_dns) bad('one of origin_direct or origin_dns is required');
  if (body.origin_direct) {
    originDirect = [];
    body.origin_direct.forEach((entry, i) => {
      const m = DIRECT.exec(entry.trim());
      const host = m ? canonicalIp(m[2]) : undefined;
      if (!m || !host) {
        bad(`origin_direct.${i}: "${entry}" must look like ${transport ?? 'tcp'}://<ip>:<port> (IPv6 in brackets)`);
        return;
      }
      const scheme = m[1];
      const start = Number(m[3]);
      const end = m[4] === undefined ? start : Number(m[4]);
      if (start < 1 || end > 65535 || start > end) {
        bad(`origin_direct.${i}: ports must be 1-65535 and start <= end`);
        return;
      }
      if (transport && scheme !== transport) bad(`origin_direct.${i}: scheme ${scheme} does not match protocol ${transport}`);
      const n = end - start + 1;
      if (n > 1 && n !== size) bad(`origin_direct.${i}: the port range holds ${n} ports but protocol holds ${size}`);
      const text = `${scheme}://${formatHostPort(host, rangeText({ start, end }))}`;
      if (!originDirect!.includes(text)) originDirect!.push(text);
    });
    if (body.origin_port !== undefined) bad('origin_port: only used with origin_dns (origin_direct entries carry their ports)');
  }
  let originDns: StoredApp['origin_dns'];
  if (body.origin_dns) {
    const name = canonicalHostname(body.origin_dns.name);
    if (!name) bad(`origin_dns.name: "${body.origin_dns.name}" is not a valid host name`);
    originDns = { name: name ?? body.origin_dns.name };
    if (body.origin_dns.ttl !== undefined) originDns.ttl = body.origin_dns.ttl;
    if (body.origin_dns.type !== undefined) originDns.type = body.origin_dns.type;
    const srv = body.origin_dns.type === 'SRV';
    if (body.origin_port === undefined) {
      if (!srv) bad('origin_port: required with origin_dns (SRV origins take their ports from the SRV records)');
    } else {
      originPort = body.origin_port;
      const n = portCount(asRange(originPort));
      if (n > 1 && n !== size) bad(`origin_port: the range holds ${n} ports but protocol holds ${size}`);
    }
  }

  // Protocol-dependent settings.
  if (transport === 'udp') {
    if (body.proxy_protocol === 'v1') bad('proxy_protocol: v1 is for TCP applications; UDP applications use v2 or simple');
    if (body.tls !== 'off') bad('tls: TLS termination is only available for TCP applications');
    if (body.traffic_type !== 'direct') bad(`traffic_type: ${body.traffic_type} is only available for TCP applications`);
  }
  if (transport === 'tcp' && body.proxy_protocol === 'simple') bad('proxy_protocol: simple is for UDP applications; TCP applications use v1 or v2');
  if (body.argo_smart_routing && body.traffic_type !== 'direct') bad('argo_smart_routing: only available with traffic_type direct');

  // Edge addresses.
  let edgeIps: EdgeIpsConfig;
  const given = body.edge_ips;
  if (given?.type === 'static') {
    if (body.dns.type !== 'ADDRESS') bad('edge_ips: static edge IPs are only valid with dns.type ADDRESS');
    const ips: string[] = [];
    given.ips.forEach((ip, i) => {
      const c = canonicalIp(ip);
      if (!c) bad(`edge_ips.ips.${i}: "${ip}" is not an IP address`);
      else if (!ips.includes(c)) ips.push(c);
    });
    edgeIps = { type: 'static', ips };
  } else if (given?.type === 'dynamic') {
    if (body.dns.type !== 'CNAME') bad('edge_ips: dynamic edge IPs are only valid with dns.type CNAME');
    edgeIps = { type: 'dynamic', connectivity: given.connectivity };
  } else if (body.dns.type === 'ADDRESS') {
    const ips = env.bindAddresses.filter((a) => a !== '0.0.0.0' && a !== '::');
    if (ips.length === 0) bad('edge_ips: dns.type ADDRESS needs static edge_ips.ips on this server (it listens on a wildcard address)');
    edgeIps = { type: 'static', ips };
  } else {
    edgeIps = { type: 'dynamic', connectivity: 'all' };
  }
  if (edgeIps.type === 'dynamic' && edgeIps.connectivity !== 'all') {
    const family = edgeIps.connectivity === 'ipv4' ? 4 : 6;
    if (!env.bindAddresses.some((a) => net.isIP(a) === family)) {
      bad(`edge_ips.connectivity: this server has no IPv${family} edge address (see --spectrum-bind-addresses)`);
    }
  }

  if (issues.length > 0) {
    throw new ApiError(CODES.spectrum_invalid.status, issues.slice(0, 20).map((message) => ({ code: CODES.spectrum_invalid.code, message })));
  }

  const out: Fields = {
    protocol: `${transport}/${rangeText(proto!.ports)}`,
    dns: { type: body.dns.type, name: dnsName! },
    ...(originDirect ? { origin_direct: originDirect } : {}),
    ...(originDns ? { origin_dns: originDns } : {}),
    ...(originPort !== undefined ? { origin_port: originPort } : {}),
    proxy_protocol: body.proxy_protocol,
    ip_firewall: body.ip_firewall,
    tls: body.tls,
    edge_ips: edgeIps,
    traffic_type: body.traffic_type,
    argo_smart_routing: body.argo_smart_routing,
    ...(body.virtual_network_id ? { virtual_network_id: body.virtual_network_id } : {}),
  };
  return out;
}

// --- run-time plan -------------------------------------------------------------------------------

/** The addresses an application listens on. */
export function listenAddresses(app: Pick<StoredApp, 'edge_ips'>, bindAddresses: string[]): string[] {
  if (app.edge_ips.type === 'static') return app.edge_ips.ips;
  const c = app.edge_ips.connectivity;
  if (c === 'all') return bindAddresses;
  return bindAddresses.filter((a) => net.isIP(a) === (c === 'ipv4' ? 4 : 6));
}

export function planOf(app: StoredApp, zoneId: string, bindAddresses: string[]): AppPlan {
  const { transport, ports } = parseProtocol(app.protocol)!;
  let origin: OriginPlan;
  if (app.origin_direct) {
    origin = {
      kind: 'direct',
      targets: app.origin_direct.map((entry) => {
        const m = DIRECT.exec(entry)!;
        const start = Number(m[3]);
        return { host: canonicalIp(m[2])!, ports: { start, end: m[4] === undefined ? start : Number(m[4]) } };
      }),
    };
  } else {
    const d = app.origin_dns!;
    origin = {
      kind: 'dns',
      name: d.name,
      type: d.type ?? '',
      ports: app.origin_port === undefined ? undefined : asRange(app.origin_port),
      ttlMs: (d.ttl ?? 600) * 1000,
    };
  }
  return {
    id: app.id,
    zoneId,
    hostname: app.dns.name,
    transport,
    ports,
    addresses: listenAddresses(app, bindAddresses),
    origin,
    proxyProtocol: app.proxy_protocol,
    tls: app.tls,
    ipFirewall: app.ip_firewall,
    trafficType: app.traffic_type,
  };
}

/** The origin port an edge port maps to: the same offset into a range, or the single port. */
export function originPortFor(range: PortRange, edgePort: number, edgeRange: PortRange): number {
  if (range.start === range.end) return range.start;
  return range.start + (edgePort - edgeRange.start);
}

/** Whether two applications would listen on a common transport and port. */
export function overlaps(a: { protocol: string }, b: { protocol: string }): boolean {
  const x = parseProtocol(a.protocol);
  const y = parseProtocol(b.protocol);
  if (!x || !y || x.transport !== y.transport) return false;
  return x.ports.start <= y.ports.end && y.ports.start <= x.ports.end;
}
