/**
 * The wire contract between the edge and `outpost tunnel run`, shared by both sides.
 *
 * A connector opens `GET /_outpost/tunnel/connect` on the management API port with
 * `Upgrade: outpost-tunnel` and `Authorization: Bearer <tunnel token>`; after `101` the socket
 * carries plain HTTP/2 in which the connector is the SERVER and the edge the CLIENT (as the
 * platform's connector does in its HTTP/2 mode). Every edge → connector exchange is one HTTP/2
 * stream:
 * - configuration push: `POST /` with `cf-cloudflared-proxy-connection-upgrade:
 *   update-configuration`, body `{version, config}`, answered `200 {lastAppliedVersion}`;
 * - a visitor's request: the visitor's method, path and headers (`:authority` = visitor host),
 *   bodies streamed both ways under HTTP/2 flow control;
 * - a WebSocket (any HTTP/1.1 Upgrade): a `GET` stream carrying
 *   `cf-cloudflared-proxy-connection-upgrade: <upgrade protocol>`; the connector answers `200`
 *   with the same header once the origin switched protocols, and from then on the stream's DATA
 *   frames are the upgraded bytes in each direction (HTTP/2 has no 101);
 * - a private-network TCP connection: a standard HTTP/2 `CONNECT` stream, `:authority` =
 *   `ip:port`, answered `200` once the connector has dialed the address.
 * Answers the connector produced itself (origin unreachable, unsupported service) carry
 * `cf-cloudflared-response-meta: {"src":"cloudflared"}`.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

export const CONNECT_PATH = '/_outpost/tunnel/connect';
export const ACCESS_PATH = '/_outpost/tunnel/access';
export const TUNNEL_UPGRADE = 'outpost-tunnel';
export const ACCESS_UPGRADE = 'outpost-tcp';

/** Header names of the protocol (lowercase, as HTTP/2 requires). */
export const H = {
  upgrade: 'cf-cloudflared-proxy-connection-upgrade',
  responseMeta: 'cf-cloudflared-response-meta',
  clientId: 'outpost-tunnel-client-id',
  connIndex: 'outpost-tunnel-conn-index',
  haConnections: 'outpost-tunnel-ha-connections',
  version: 'outpost-tunnel-client-version',
  arch: 'outpost-tunnel-arch',
  features: 'outpost-tunnel-features',
  connectionId: 'outpost-tunnel-connection-id',
  colo: 'outpost-tunnel-colo',
  remoteConfig: 'outpost-tunnel-remote-config',
  destination: 'outpost-destination',
  account: 'outpost-account',
  virtualNetwork: 'outpost-virtual-network',
  dialError: 'outpost-dial-error',
  /** On a 503 from an endpoint that was not ready: retry at once, no backoff. */
  retry: 'x-outpost-retry',
} as const;

export const UPDATE_CONFIGURATION = 'update-configuration';
export const META_CLOUDFLARED = '{"src":"cloudflared"}';
export const META_ORIGIN = '{"src":"origin"}';

/** HTTP/2 settings both sides use: large windows so one stream can fill a fast link. */
export const H2_SETTINGS = {
  initialWindowSize: 4 * 1024 * 1024,
  maxConcurrentStreams: 10_000,
  enablePush: false,
};
export const H2_CONNECTION_WINDOW = 32 * 1024 * 1024;
/** Memory an HTTP/2 session may buffer (MB) before it refuses new streams. */
export const H2_MAX_SESSION_MEMORY = 256;
export const PING_INTERVAL_MS = 15_000;
export const PING_TIMEOUT_MS = 10_000;

/** Hop-by-hop headers (RFC 9110 §7.6.1) and the ones HTTP/2 forbids (RFC 9113 §8.2.2). */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
  'host',
]);

/**
 * Copies HTTP/1.1 (or HTTP/2) headers into a form HTTP/2 and HTTP/1.1 both accept: no pseudo
 * headers, no hop-by-hop headers, none listed in `Connection`.
 */
export function endToEndHeaders(src: IncomingHttpHeaders, keepHost = false): OutgoingHttpHeaders {
  const listed = new Set(
    String(src.connection ?? '')
      .toLowerCase()
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  );
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(src)) {
    if (value === undefined || name.startsWith(':')) continue;
    if ((HOP_BY_HOP.has(name) && !(keepHost && name === 'host')) || listed.has(name)) continue;
    out[name] = value;
  }
  return out;
}

/** Splits `host:port` / `[v6]:port`; undefined when malformed. */
export function splitHostPort(authority: string): { host: string; port: number } | undefined {
  const m = /^\[([^\]]+)\]:(\d{1,5})$/.exec(authority) ?? /^([^:]+):(\d{1,5})$/.exec(authority);
  if (!m) return undefined;
  const port = Number(m[2]);
  if (port < 1 || port > 65535) return undefined;
  return { host: m[1], port };
}

export function joinHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}
