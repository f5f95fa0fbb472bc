/**
 * Ingress rules with the platform connector's semantics: rules are tried top to bottom and the
 * first match wins; `hostname` is exact, `*.example.com` (any name ending in `.example.com`), or
 * empty/`*` (any host); the request's port is ignored; `path` is a regular expression tested
 * unanchored against the request path. The last rule must match everything.
 *
 * Validation reproduces the connector's messages, checking each rule in order: its service, then
 * its hostname, then its path. Used by the API (400 on PUT configurations) and by the connector.
 *
 * Paths are JavaScript regular expressions; the RE2 forms `(?i)`/`(?s)`/`(?m)` flag prefixes,
 * `(?P<name>…)`, `\A` and `\z` are translated.
 */
import { domainToASCII } from 'node:url';

/** `originRequest` as written in configurations (remote: numbers are seconds; local: `30s`). */
export interface OriginRequest {
  connectTimeout?: number | string;
  tlsTimeout?: number | string;
  tcpKeepAlive?: number | string;
  keepAliveTimeout?: number | string;
  keepAliveConnections?: number;
  noHappyEyeballs?: boolean;
  httpHostHeader?: string;
  originServerName?: string;
  matchSNItoHost?: boolean;
  caPool?: string;
  noTLSVerify?: boolean;
  disableChunkedEncoding?: boolean;
  http2Origin?: boolean;
  proxyType?: string;
  access?: { required?: boolean; teamName?: string; audTag?: string[] };
  [key: string]: unknown;
}

export interface IngressRuleInput {
  hostname?: string;
  path?: string;
  service: string;
  originRequest?: OriginRequest;
}

export interface TunnelConfig {
  ingress?: IngressRuleInput[];
  originRequest?: OriginRequest;
  'warp-routing'?: { enabled?: boolean; connectTimeout?: number | string; [key: string]: unknown };
  [key: string]: unknown;
}

export type Service =
  | { kind: 'http'; protocol: 'http:' | 'https:'; host: string; port: number }
  | { kind: 'unix'; path: string; tls: boolean }
  | { kind: 'status'; code: number }
  | { kind: 'hello_world' }
  /** `tcp://`, `ssh://`, `rdp://` and other schemes: TCP carried over WebSocket. */
  | { kind: 'tcp'; url: string }
  | { kind: 'socks5' }
  | { kind: 'bastion' };

/** Origin options resolved to milliseconds and booleans. */
export interface ResolvedOriginRequest {
  connectTimeoutMs: number;
  tlsTimeoutMs: number;
  tcpKeepAliveMs: number;
  keepAliveTimeoutMs: number;
  keepAliveConnections: number;
  httpHostHeader?: string;
  originServerName?: string;
  matchSNItoHost: boolean;
  caPool?: string;
  noTLSVerify: boolean;
  disableChunkedEncoding: boolean;
}

export interface CompiledRule {
  /** 1-based, as in the connector's messages. */
  number: number;
  hostname: string;
  punycodeHostname?: string;
  path?: RegExp;
  service: Service;
  /** The service as written. */
  serviceText: string;
  options: ResolvedOriginRequest;
}

export interface CompiledIngress {
  rules: CompiledRule[];
  defaults: ResolvedOriginRequest;
  /** warp-routing connect timeout for private-network TCP, ms. */
  warpConnectTimeoutMs: number;
}

export class IngressError extends Error {}

export const ERR_LAST_RULE_NOT_CATCH_ALL =
  'The last ingress rule must match all URLs (i.e. it should not have a hostname or path filter)';
export const ERR_BAD_WILDCARD =
  'Hostname patterns can have at most one wildcard character ("*") and it can only be used for subdomains, e.g. "*.example.com"';
export const ERR_HOSTNAME_PORT = 'Hostname cannot contain a port';
export const ERR_NO_RULES = "The config file doesn't contain any ingress rules";

const DEFAULTS: ResolvedOriginRequest = {
  connectTimeoutMs: 30_000,
  tlsTimeoutMs: 10_000,
  tcpKeepAliveMs: 30_000,
  keepAliveTimeoutMs: 90_000,
  keepAliveConnections: 100,
  matchSNItoHost: false,
  noTLSVerify: false,
  disableChunkedEncoding: false,
};

const GO_UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/** A duration: a number of seconds (remote JSON) or a Go duration string (`30s`, `1m30s`). */
export function durationMs(value: number | string | undefined, fallback: number): number {
  if (value === undefined || value === null) return fallback;
  if (typeof value === 'number') return value * 1000;
  const s = value.trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s) * 1000;
  const parts = [...s.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== s) return fallback;
  return parts.reduce((sum, p) => sum + Number(p[1]) * GO_UNITS[p[2]], 0);
}

function resolveOptions(
  base: ResolvedOriginRequest,
  o: OriginRequest | undefined,
): ResolvedOriginRequest {
  if (!o) return base;
  const out = { ...base };
  out.connectTimeoutMs = durationMs(o.connectTimeout, base.connectTimeoutMs);
  out.tlsTimeoutMs = durationMs(o.tlsTimeout, base.tlsTimeoutMs);
  out.tcpKeepAliveMs = durationMs(o.tcpKeepAlive, base.tcpKeepAliveMs);
  out.keepAliveTimeoutMs = durationMs(o.keepAliveTimeout, base.keepAliveTimeoutMs);
  if (typeof o.keepAliveConnections === 'number') out.keepAliveConnections = o.keepAliveConnections;
  if (typeof o.httpHostHeader === 'string' && o.httpHostHeader)
    out.httpHostHeader = o.httpHostHeader;
  if (typeof o.originServerName === 'string' && o.originServerName)
    out.originServerName = o.originServerName;
  if (typeof o.matchSNItoHost === 'boolean') out.matchSNItoHost = o.matchSNItoHost;
  if (typeof o.caPool === 'string' && o.caPool) out.caPool = o.caPool;
  if (typeof o.noTLSVerify === 'boolean') out.noTLSVerify = o.noTLSVerify;
  if (typeof o.disableChunkedEncoding === 'boolean')
    out.disableChunkedEncoding = o.disableChunkedEncoding;
  return out;
}

const HTTP_SCHEMES = new Set(['http', 'https', 'ws', 'wss']);

function parseService(text: string): Service {
  if (text.startsWith('unix:'))
    return { kind: 'unix', path: text.slice('unix:'.length), tls: false };
  if (text.startsWith('unix+tls:'))
    return { kind: 'unix', path: text.slice('unix+tls:'.length), tls: true };
  if (text.startsWith('http_status:')) {
    const raw = text.slice('http_status:'.length);
    if (!/^[+-]?\d+$/.test(raw)) {
      throw new IngressError(
        `invalid HTTP status code: strconv.Atoi: parsing ${JSON.stringify(raw)}: invalid syntax`,
      );
    }
    const code = Number(raw);
    if (code < 100 || code > 999) throw new IngressError(`invalid HTTP status code: ${code}`);
    return { kind: 'status', code };
  }
  if (text === 'hello_world' || text === 'hello-world') return { kind: 'hello_world' };
  if (text === 'socks5') return { kind: 'socks5' };
  if (text === 'bastion') return { kind: 'bastion' };
  // scheme://authority[path] — read by hand: a WHATWG URL would invent a "/" path.
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)([^?#]*)/.exec(text);
  const scheme = m?.[1].toLowerCase();
  let host = '';
  let port = '';
  if (m) {
    const authority = m[2].replace(/^[^@]*@/, '');
    const v6 = /^\[([^\]]*)\](?::(\d*))?$/.exec(authority);
    if (v6) {
      host = v6[1];
      port = v6[2] ?? '';
    } else {
      const i = authority.lastIndexOf(':');
      host = i >= 0 ? authority.slice(0, i) : authority;
      port = i >= 0 ? authority.slice(i + 1) : '';
    }
  }
  if (!m || !scheme || !host) {
    throw new IngressError(
      `${text} is an invalid address, please make sure it has a scheme and a hostname`,
    );
  }
  if (m[3] !== '') {
    throw new IngressError(
      `${text} is an invalid address, ingress rules don't support proxying to a different path on the origin service. The path will be the same as the eyeball request's path`,
    );
  }
  if (!HTTP_SCHEMES.has(scheme)) return { kind: 'tcp', url: text };
  const tls = scheme === 'https' || scheme === 'wss';
  if (port !== '' && !/^\d{1,5}$/.test(port)) {
    throw new IngressError(
      `${text} is an invalid address, please make sure it has a scheme and a hostname`,
    );
  }
  return {
    kind: 'http',
    protocol: tls ? 'https:' : 'http:',
    host,
    port: port ? Number(port) : tls ? 443 : 80,
  };
}

/** Go's net.SplitHostPort succeeds (so the name "contains a port") for `h:p` and `[h]:p`. */
function hasPort(hostname: string): boolean {
  if (hostname.startsWith('[')) return /^\[[^\]]*\]:/.test(hostname);
  const i = hostname.lastIndexOf(':');
  return i >= 0 && !hostname.slice(0, i).includes(':');
}

function isCatchAll(r: IngressRuleInput): boolean {
  return (!r.hostname || r.hostname === '*') && !r.path;
}

function validateHostname(r: IngressRuleInput, index: number, total: number): void {
  const hostname = r.hostname ?? '';
  if (hasPort(hostname)) throw new IngressError(ERR_HOSTNAME_PORT);
  if (hostname.lastIndexOf('*') > 0) throw new IngressError(ERR_BAD_WILDCARD);
  const last = index === total - 1;
  if (last && !isCatchAll(r)) throw new IngressError(ERR_LAST_RULE_NOT_CATCH_ALL);
  if (!last && isCatchAll(r)) {
    throw new IngressError(
      `Rule #${index + 1} is matching the hostname '${hostname}', but this will match every hostname, meaning the rules which follow it will never be triggered.`,
    );
  }
}

/** Translates the RE2 forms JavaScript lacks; compiles unanchored. */
export function compilePathRegex(source: string): RegExp {
  let flags = '';
  let body = source;
  const lead = /^\(\?([ims]+)\)/.exec(body);
  if (lead) {
    flags = [...new Set(lead[1])].join('');
    body = body.slice(lead[0].length);
  }
  body = body
    .replace(/\(\?P</g, '(?<')
    .replace(/\\A/g, '(?<![\\s\\S])')
    .replace(/\\z/g, '(?![\\s\\S])');
  return new RegExp(body, flags);
}

function punycode(hostname: string): string | undefined {
  if (/^[\x00-\x7f]*$/.test(hostname)) return undefined;
  const wildcard = hostname.startsWith('*.');
  const ascii = domainToASCII(wildcard ? hostname.slice(2) : hostname);
  if (!ascii) return undefined;
  return wildcard ? `*.${ascii}` : ascii;
}

/** Validates and compiles a configuration; throws IngressError with the connector's message. */
export function compileIngress(
  config: TunnelConfig,
  opts: { allowEmpty?: boolean } = {},
): CompiledIngress {
  const defaults = resolveOptions(DEFAULTS, config.originRequest);
  const warpConnectTimeoutMs = durationMs(config['warp-routing']?.connectTimeout, 5_000);
  const input = config.ingress;
  if (input === undefined || input.length === 0) {
    if (input !== undefined && !opts.allowEmpty) throw new IngressError(ERR_NO_RULES);
    // No rules: every request is answered 503, as the connector does without ingress rules.
    const rule: CompiledRule = {
      number: 1,
      hostname: '',
      service: { kind: 'status', code: 503 },
      serviceText: 'http_status:503',
      options: defaults,
    };
    return { rules: [rule], defaults, warpConnectTimeoutMs };
  }
  const rules = input.map((r, i): CompiledRule => {
    if (typeof r.service !== 'string') throw new IngressError(`Rule #${i + 1} has no service`);
    const service = parseService(r.service);
    validateHostname(r, i, input.length);
    let path: RegExp | undefined;
    if (r.path) {
      try {
        path = compilePathRegex(r.path);
      } catch (err) {
        throw new IngressError(`Rule #${i + 1} has an invalid regex: ${(err as Error).message}`);
      }
    }
    const hostname = (r.hostname ?? '').toLowerCase();
    const rule: CompiledRule = {
      number: i + 1,
      hostname,
      service,
      serviceText: r.service,
      options: resolveOptions(defaults, r.originRequest),
    };
    if (path) rule.path = path;
    const puny = isCatchAll(r) ? undefined : punycode(hostname);
    if (puny && puny !== hostname) rule.punycodeHostname = puny;
    return rule;
  });
  return { rules, defaults, warpConnectTimeoutMs };
}

function matchHost(ruleHost: string, reqHost: string): boolean {
  if (ruleHost === reqHost) return true;
  if (ruleHost.startsWith('*.')) return reqHost.endsWith(ruleHost.slice(1));
  return false;
}

/** The first rule matching the host (port ignored) and path; the last rule otherwise. */
export function matchRule(ingress: CompiledIngress, host: string, path: string): CompiledRule {
  const h = host
    .toLowerCase()
    .replace(/:\d+$/, '')
    .replace(/^\[|\]$/g, '');
  const p = path.split('?')[0];
  for (const rule of ingress.rules) {
    const hostOk =
      rule.hostname === '' ||
      rule.hostname === '*' ||
      matchHost(rule.hostname, h) ||
      (rule.punycodeHostname !== undefined && matchHost(rule.punycodeHostname, h));
    if (hostOk && (!rule.path || rule.path.test(p))) return rule;
  }
  return ingress.rules[ingress.rules.length - 1];
}
