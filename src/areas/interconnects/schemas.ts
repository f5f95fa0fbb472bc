/**
 * Request bodies, list queries and stored records of the interconnect area (spec 000 "Interconnect",
 * "CNI object", "Slot", "Interconnect settings"), with the official client's forms accepted beside
 * the spec's: `p2p_ip` for `edge_ip`, `bgp.customer_asn` for `bgp_asn`, `bgp.md5_key` for
 * `bgp_password`, `cursor`/`limit` beside `page`/`per_page`.
 */
import { z } from 'zod';
import { qBool, qInt, qString } from '../../core/validate.ts';

/** Both paging forms; the router rejects out-of-range values with 400. */
const windowQuery = {
  cursor: qInt(z.number().int().min(0)).optional(),
  limit: qInt(z.number().int().min(0).max(1000)).optional(),
  page: qInt(z.number().int().min(1)).optional(),
  per_page: qInt(z.number().int().min(1).max(1000)).optional(),
};
export type WindowQuery = { cursor?: number; limit?: number; page?: number; per_page?: number };

export const ListSlotsQuery = z.object({
  ...windowQuery,
  facility: qString().optional(),
  occupied: qBool().optional(),
  speed: qString().optional(),
  site: qString().optional(),
  address_contains: qString().optional(),
});

export const ListInterconnectsQuery = z.object({
  ...windowQuery,
  site: qString().optional(),
  type: qString().optional(),
});

export const ListCnisQuery = z.object({
  ...windowQuery,
  slot: qString().optional(),
  tunnel_id: qString().optional(),
});

export const CreateInterconnectQuery = z.object({ validate_only: qBool().optional() });

export const LoaQuery = z.object({ name: qString(z.string().min(1).max(200)).optional() });

export const CreateInterconnectBody = z.object({
  account: z.string().min(1).optional(),
  slot_id: z.string().optional(),
  type: z.string().min(1),
  facility: z.string().min(1).optional(),
  speed: z.string().nullable().optional(),
  name: z.string().optional(),
  description: z.string().max(1000).optional(),
  // The official client's cloud-partner variant; refused with a clear message.
  bandwidth: z.string().optional(),
  pairing_key: z.string().optional(),
});
export type CreateInterconnectBody = z.infer<typeof CreateInterconnectBody>;

/** Interconnect names are used as the `{icon}` path segment. */
export const INTERCONNECT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

const Magic = z.object({
  conduit_name: z
    .string()
    .regex(/^[A-Za-z0-9_.-]{1,64}$/, 'conduit_name: 1 to 64 letters, digits, "_", "." or "-"')
    .optional(),
  description: z.string().max(500).optional(),
  mtu: z.number().int().min(576).max(9000).optional(),
});

export const CniBody = z.object({
  id: z.string().optional(),
  account: z.string().min(1).optional(),
  interconnect: z.string().min(1).optional(),
  cust_ip: z.string().optional(),
  edge_ip: z.string().optional(),
  p2p_ip: z.string().optional(),
  bgp_asn: z.number().int().optional(),
  bgp_password: z.string().nullable().optional(),
  vlan: z.number().int().min(1).max(4094).optional(),
  magic: Magic.optional(),
  bgp: z
    .object({
      customer_asn: z.number().int().optional(),
      extra_prefixes: z.array(z.string()).max(256).optional(),
      md5_key: z.string().nullable().optional(),
    })
    .nullable()
    .optional(),
  bgp_mode: z.enum(['dynamic_route_exchange', 'advertise_only']).optional(),
});
export type CniBody = z.infer<typeof CniBody>;

/** The settings have one field: a PUT must carry it, and nothing else (an unknown key is a 400). */
export const SettingsBody = z.strictObject({ default_asn: z.number().int() });

export const LinkBody = z.object({
  state: z.enum(['up', 'down', 'unhealthy']),
  reason: z.string().max(500).optional(),
});

export type LinkState = z.infer<typeof LinkBody>['state'];

/** What the interconnects collection stores. */
export interface StoredInterconnect {
  id: string;
  account: string;
  name: string;
  type: 'direct';
  slot_id: string;
  /** Facility code (spec form). */
  facility: string;
  speed: string;
  description: string;
  site: string;
  ccr_device_name: string;
  virtual_port_reservation_id: string;
  created_on: string;
  /** When provisioning completes: `created_on` plus the configured delay. */
  active_on: string;
  /** Set by the operator endpoint; `up` unless an operator said otherwise. */
  link: { state: LinkState; reason: string | null; changed_on: string | null };
}

export type InterconnectStatus = 'pending' | 'active' | 'down' | 'unhealthy';
export type HealthStatus = 'pending' | 'healthy' | 'down' | 'unhealthy';

export interface StoredCni {
  id: string;
  account: string;
  /** Interconnect name (the official form) and id. */
  interconnect: string;
  interconnect_id: string;
  slot_id: string;
  cust_ip: string;
  edge_ip: string;
  bgp_asn: number;
  /** Kept for the BGP session (TCP MD5 needs the clear text); never returned. */
  bgp_password: string | null;
  vlan: number;
  magic: { conduit_name: string; description: string; mtu: number };
  extra_prefixes: string[];
  bgp_mode?: 'dynamic_route_exchange' | 'advertise_only';
  created_on: string;
  modified_on: string;
}

export interface CniSettings {
  default_asn: number;
}
