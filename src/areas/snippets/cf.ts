/**
 * `request.cf` (also `request.edge`) for snippets: the spec's attributes, from the edge's view of
 * the visitor (country, ASN, continent, city — themselves from the test headers when
 * `--edge-test-headers` is on), the configured defaults (`--snippet-cf '{"colo":"LHR",…}'`), and,
 * in test-headers mode only, a per-request JSON override in the `x-outpost-cf` request header.
 * Loopback defaults: colo `LOC`, country/continent `XX`, coordinates 0, timezone UTC, bot score 99.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { tlsClientAuthOf, type EdgeRequest } from '../../edge/index.ts';

export const CF_OVERRIDE_HEADER = 'x-outpost-cf';

export type Cf = Record<string, unknown>;

/** Parses `--snippet-cf`; throws with a readable message on bad JSON. */
export function parseCfDefaults(text: string | undefined): Cf {
  if (!text) return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new Error(`--snippet-cf is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new Error('--snippet-cf must be a JSON object');
  return value as Cf;
}

function overrideOf(headers: IncomingHttpHeaders): Cf {
  const raw = headers[CF_OVERRIDE_HEADER];
  if (typeof raw !== 'string') return {};
  try {
    const v = JSON.parse(raw) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Cf) : {};
  } catch {
    return {};
  }
}

/** Builds the request's `cf` object. */
export function buildCf(er: EdgeRequest, defaults: Cf, testMode: boolean): Cf {
  const socket = er.req.socket as Partial<TLSSocket>;
  const tls = typeof socket.getProtocol === 'function' ? socket : undefined;
  const override = testMode ? overrideOf(er.req.headers) : {};
  const bot = {
    score: 99,
    verifiedBot: false,
    staticResource: false,
    ja3Hash: '',
    ja4: '',
    detectionIds: [] as number[],
  };
  const cf: Cf = {
    colo: 'LOC',
    country: er.visitor.country,
    continent: er.visitor.continent,
    city: er.visitor.city,
    region: '',
    regionCode: '',
    postalCode: '',
    metroCode: '',
    latitude: '0.00000',
    longitude: '0.00000',
    timezone: 'UTC',
    asn: er.visitor.asn,
    asOrganization: '',
    isEUCountry: '0',
    tlsVersion: tls?.getProtocol?.() ?? '',
    tlsCipher: tls?.getCipher?.()?.name ?? '',
    httpProtocol: `HTTP/${er.req.httpVersion}`,
    requestPriority: '',
    clientTcpRtt: 0,
    clientAcceptEncoding: er.req.headers['accept-encoding'] ?? '',
    edgeRequestKeepAliveStatus: 1,
    tlsClientAuth: tlsClientAuthOf(er.fields),
    jwt: { payload: jwtPayloadsOf(er.fields) },
    ...defaults,
    ...override,
  };
  const mergedBot: Cf = {
    ...bot,
    ...(defaults.botManagement as Cf | undefined),
    ...(override.botManagement as Cf | undefined),
  };
  // The spec writes the bot flags in snake case; the platform in camel case. Both are present.
  mergedBot.verifiedBot = mergedBot.verified_bot ?? mergedBot.verifiedBot;
  mergedBot.staticResource = mergedBot.static_resource ?? mergedBot.staticResource;
  mergedBot.verified_bot = mergedBot.verifiedBot;
  mergedBot.static_resource = mergedBot.staticResource;
  cf.botManagement = mergedBot;
  return cf;
}

/** Validated JWT payloads the API gateway put on the request, parsed (`{<config id>: [claims]}`). */
function jwtPayloadsOf(fields: Record<string, unknown>): Record<string, unknown[]> {
  const src = fields['http.request.jwt.payload'] as Record<string, string[]> | undefined;
  const out: Record<string, unknown[]> = {};
  for (const [id, list] of Object.entries(src ?? {})) {
    out[id] = list.map((text) => {
      try {
        return JSON.parse(text) as unknown;
      } catch {
        return text;
      }
    });
  }
  return out;
}
