/** The shapes the edge pipeline passes between its steps and to the areas that plug into it. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { RequestContext } from './rules/index.ts';

/** What host routing found: the zone and the proxied record that serves the host. */
export interface Route {
  zoneId: string;
  zoneName: string;
  accountId: string;
  /** The record's name (may be a wildcard, `*.example.com`). */
  recordName: string;
  recordType: 'A' | 'AAAA' | 'CNAME';
  /** An address for A/AAAA, a host name for CNAME. */
  content: string;
}

/** Where the request goes: an address and port, or a name handled by an origin handler. */
export interface OriginTarget {
  /** Host name or IP address to connect to. */
  host: string;
  port: number;
  /** `Host` header sent to the origin (default: the request's host). */
  hostHeader?: string;
  protocol: 'http:' | 'https:';
}

export interface EdgeRequest {
  rayId: string;
  req: IncomingMessage;
  /** Absent for WebSocket upgrades, which carry `socket` and `head` instead. */
  res?: ServerResponse;
  upgrade?: { socket: Socket; head: Buffer };
  /** Lower-cased, without port. */
  host: string;
  clientIp: string;
  scheme: 'http' | 'https';
  route: Route;
  origin: OriginTarget;
  /** Visitor attributes (country, asn, …), exposed to rules as `ip.src.*` and `cf.*`. */
  visitor: { country: string; asn: number; continent: string; city: string };
  /** Extra rule fields later phases fill (`cf.api_gateway.*`, bot score, …). */
  fields: Record<string, unknown>;
  /** Ids of rules that matched, for the request event. */
  matchedRules: string[];
  /** Phases a `skip` rule or an allow-listed visitor turned off for this request. */
  skipPhases: Set<string>;
  /** The rules-language context, built by the first phase that evaluates a rule. */
  ruleContext?: RequestContext;
  startedAt: number;
}

/**
 * A request phase, run in the platform's order. Returning `handled` means the phase answered the
 * request itself (block page, redirect, a script's response) and the pipeline stops.
 */
export interface Phase {
  name: string;
  /** Lower runs first; see PHASE_ORDER. */
  order: number;
  run(er: EdgeRequest): Promise<'continue' | 'handled'>;
}

/**
 * Handles requests whose origin is a name an area owns instead of an address — a CNAME to
 * `<tunnel id>.cfargotunnel.com` goes to the tunnel area.
 */
export interface OriginHandler {
  matches(target: string): boolean;
  handle(er: EdgeRequest): Promise<void>;
}

/** A host an area serves without a DNS record: the route and the origin name (an origin handler's). */
export interface HostRoute {
  route: Route;
  originHost: string;
}

/** Claims a host before zone routing (workers custom domains, workers.dev-style names); sync, hot. */
export type HostRouter = (host: string) => HostRoute | undefined;

/** One structured event per edge request (consumed by discovery, analytics, logs). */
export interface RequestEvent {
  rayId: string;
  zoneId?: string;
  host: string;
  method: string;
  path: string;
  status: number;
  clientIp: string;
  bytesIn: number;
  bytesOut: number;
  /** Milliseconds from accept to the end of the response. */
  durationMs: number;
  /** Milliseconds spent waiting for the origin's response headers (absent if not proxied). */
  originMs?: number;
  matchedRules: string[];
  error?: string;
  timestamp: string;
}
