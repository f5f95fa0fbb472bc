/** Request bodies and list queries of the tunnels area (spec 000 "Tunnels"; real forms from the official document). */
import { z } from 'zod';
import { pageQuery } from '../../core/pagination.ts';
import { qBool, qList, qString } from '../../core/validate.ts';
import { UUID } from '../../core/ids.ts';

const uuidString = () => z.string().toLowerCase().regex(UUID, 'must be a UUID');

export const TUNNEL_PARAMS = { tunnel_id: 'uuid' } as const;

export const ConfigSrc = z.enum(['local', 'cloudflare']);
export const TunnelStatus = z.enum(['inactive', 'degraded', 'healthy', 'down']);
export const TUN_TYPES = [
  'cfd_tunnel',
  'warp_connector',
  'warp',
  'magic',
  'ip_sec',
  'gre',
  'cni',
] as const;

export const CreateTunnelBody = z.object({
  name: z.string().trim().min(1).max(255),
  tunnel_secret: z.string().optional(),
  config_src: ConfigSrc.optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
});
export type CreateTunnelBody = z.infer<typeof CreateTunnelBody>;

export const EditTunnelBody = z.object({
  name: z.string().trim().min(1).max(255).optional(),
  tunnel_secret: z.string().optional(),
});

const text = qString().optional();
const timestamp = qString(
  z.string().refine((s) => !Number.isNaN(Date.parse(s)), 'must be an RFC 3339 timestamp'),
).optional();

export const ListTunnelsQuery = z.object({
  ...pageQuery({ perPage: 20, min: 1, max: 1000 }),
  name: text,
  uuid: text,
  is_deleted: qBool().optional(),
  existed_at: timestamp,
  include_prefix: text,
  exclude_prefix: text,
  status: qString(TunnelStatus).optional(),
  was_active_at: timestamp,
  was_inactive_at: timestamp,
  tun_types: qList(z.string()).optional(),
});
export type ListTunnelsQuery = z.infer<typeof ListTunnelsQuery>;

const seconds = z.union([z.number().min(0), z.string()]);
export const OriginRequestSchema = z
  .object({
    connectTimeout: seconds.optional(),
    tlsTimeout: seconds.optional(),
    tcpKeepAlive: seconds.optional(),
    keepAliveTimeout: seconds.optional(),
    keepAliveConnections: z.number().int().min(0).optional(),
    noHappyEyeballs: z.boolean().optional(),
    httpHostHeader: z.string().optional(),
    originServerName: z.string().optional(),
    matchSNItoHost: z.boolean().optional(),
    caPool: z.string().optional(),
    noTLSVerify: z.boolean().optional(),
    disableChunkedEncoding: z.boolean().optional(),
    http2Origin: z.boolean().optional(),
    proxyType: z.string().optional(),
    access: z
      .object({
        required: z.boolean().optional(),
        teamName: z.string(),
        audTag: z.array(z.string()),
      })
      .optional(),
  })
  .passthrough();

export const IngressRuleSchema = z.object({
  hostname: z.string().max(255).optional(),
  path: z.string().max(1024).optional(),
  service: z.string().min(1, 'a rule needs a service'),
  originRequest: OriginRequestSchema.optional(),
});

export const TunnelConfigSchema = z
  .object({
    ingress: z.array(IngressRuleSchema).max(1000).optional(),
    originRequest: OriginRequestSchema.optional(),
    'warp-routing': z.object({ enabled: z.boolean().optional() }).passthrough().optional(),
  })
  .passthrough();

export const PutConfigBody = z.object({ config: TunnelConfigSchema.optional() });

export const CleanupQuery = z.object({ client_id: qString(uuidString()).optional() });

export const DnsRouteBody = z.object({
  hostname: z.string().trim().min(1).max(253),
  overwrite_existing: z.boolean().optional(),
});

export const ZoneRouteBody = z.object({
  type: z.string(),
  user_hostname: z.string().trim().min(1).max(253).optional(),
  overwrite_existing: z.boolean().optional(),
});

export const CreateRouteBody = z.object({
  network: z.string().min(1),
  tunnel_id: uuidString(),
  comment: z.string().max(100).optional(),
  virtual_network_id: uuidString().optional(),
});

export const SpecRouteBody = z.object({
  ip_network: z.string().min(1),
  comment: z.string().max(100).optional(),
  virtual_network_id: uuidString().optional(),
});

export const NetworkRouteBody = z.object({
  tunnel_id: uuidString(),
  comment: z.string().max(100).optional(),
  virtual_network_id: uuidString().optional(),
});

export const EditRouteBody = z.object({
  network: z.string().min(1).optional(),
  tunnel_id: uuidString().optional(),
  comment: z.string().max(100).optional(),
  virtual_network_id: uuidString().nullable().optional(),
});

export const ListRoutesQuery = z.object({
  ...pageQuery({ perPage: 20, min: 1, max: 1000 }),
  tunnel_id: qString(uuidString()).optional(),
  comment: text,
  is_deleted: qBool().optional(),
  network_subset: text,
  network_superset: text,
  existed_at: timestamp,
  route_id: text,
  tun_types: qList(z.string()).optional(),
  virtual_network_id: qString(uuidString()).optional(),
});
export type ListRoutesQuery = z.infer<typeof ListRoutesQuery>;

export const NetworkDeleteQuery = z.object({
  tun_type: text,
  tunnel_id: qString(uuidString()).optional(),
  virtual_network_id: qString(uuidString()).optional(),
});

export const IpLookupQuery = z.object({
  virtual_network_id: qString(uuidString()).optional(),
  default_virtual_network_fallback: qBool().optional(),
});
