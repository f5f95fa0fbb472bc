/**
 * Request and stored shapes of a proxied application, written from spec 000 ("Proxied application
 * (spectrum app)") with the official document's additions (`origin_port` as `"start-end"`,
 * `origin_dns.ttl`/`type`, `virtual_network_id`). The zod schemas check types and enums; the
 * rules that tie fields together live in app-rules.ts.
 */
import { z } from 'zod';
import { UUID } from '../../core/ids.ts';

export const PROXY_PROTOCOLS = ['off', 'v1', 'v2', 'simple'] as const;
export const TLS_MODES = ['off', 'flexible', 'full', 'strict'] as const;
export const TRAFFIC_TYPES = ['direct', 'http', 'https'] as const;
export const DNS_TYPES = ['CNAME', 'ADDRESS'] as const;
export const CONNECTIVITY = ['all', 'ipv4', 'ipv6'] as const;
export const ORIGIN_DNS_TYPES = ['', 'A', 'AAAA', 'SRV'] as const;

export type ProxyProtocol = (typeof PROXY_PROTOCOLS)[number];
export type TlsMode = (typeof TLS_MODES)[number];
export type Transport = 'tcp' | 'udp';

export interface PortRange {
  start: number;
  end: number;
}

const port = z.number().int().min(1).max(65535);

/** `22`, `"1000-2000"` (official client) or `{start, end}` (spec). */
const OriginPort = z.union([
  port,
  z
    .string()
    .regex(/^\s*\d{1,5}\s*(-\s*\d{1,5}\s*)?$/, 'expected a port (1-65535) or a range "start-end"')
    .transform((s, ctx) => {
      const [a, b] = s.split('-').map((x) => Number(x.trim()));
      const range = { start: a, end: b ?? a };
      if (range.start < 1 || range.end > 65535 || range.start > range.end) {
        ctx.addIssue({ code: 'custom', message: 'ports must be 1-65535 and start <= end' });
        return z.NEVER;
      }
      return b === undefined ? a : range;
    }),
  z.object({ start: port, end: port }).refine((r) => r.start <= r.end, 'start must not be greater than end'),
]);

/** `type` may be left out: `ips` means static, anything else dynamic. */
const EdgeIps = z.preprocess(
  (v) => {
    if (v && typeof v === 'object' && !Array.isArray(v) && !('type' in v)) {
      return { ...v, type: 'ips' in v ? 'static' : 'dynamic' };
    }
    return v;
  },
  z.discriminatedUnion('type', [
    z.object({ type: z.literal('dynamic'), connectivity: z.enum(CONNECTIVITY).default('all') }).strict(),
    z.object({ type: z.literal('static'), ips: z.array(z.string().max(45)).min(1).max(16) }).strict(),
  ]),
);

/** Body of POST and PUT. Read-only fields (`id`, `created_on`, `modified_on`) are ignored. */
export const AppBody = z.object({
  protocol: z.string().max(32),
  dns: z.object({
    type: z.enum(DNS_TYPES),
    name: z.string().min(1).max(253),
  }),
  origin_direct: z.array(z.string().max(128)).min(1).max(32).optional(),
  origin_dns: z
    .object({
      name: z.string().min(1).max(253),
      ttl: z.number().int().min(600).max(86400).optional(),
      type: z.enum(ORIGIN_DNS_TYPES).optional(),
    })
    .optional(),
  origin_port: OriginPort.optional(),
  proxy_protocol: z.enum(PROXY_PROTOCOLS).default('off'),
  ip_firewall: z.boolean().default(false),
  tls: z.enum(TLS_MODES).default('off'),
  edge_ips: EdgeIps.optional(),
  traffic_type: z.enum(TRAFFIC_TYPES).default('direct'),
  argo_smart_routing: z.boolean().default(false),
  virtual_network_id: z.string().regex(UUID, 'expected a UUID').optional(),
});
export type AppBody = z.output<typeof AppBody>;

export type EdgeIpsConfig =
  | { type: 'dynamic'; connectivity: (typeof CONNECTIVITY)[number] }
  | { type: 'static'; ips: string[] };

/** A stored application: the wire fields, canonical (what GET answers, minus `edge_ips.ips`). */
export interface StoredApp {
  id: string;
  created_on: string;
  modified_on: string;
  protocol: string;
  dns: { type: (typeof DNS_TYPES)[number]; name: string };
  origin_direct?: string[];
  origin_dns?: { name: string; ttl?: number; type?: (typeof ORIGIN_DNS_TYPES)[number] };
  origin_port?: number | PortRange;
  proxy_protocol: ProxyProtocol;
  ip_firewall: boolean;
  tls: TlsMode;
  edge_ips: EdgeIpsConfig;
  traffic_type: (typeof TRAFFIC_TYPES)[number];
  argo_smart_routing: boolean;
  virtual_network_id?: string;
}

/** What responses carry: the stored app with the addresses it listens on. */
export type AppResponse = Omit<StoredApp, 'edge_ips'> & { edge_ips: EdgeIpsConfig & { ips: string[] } };
