/** Zone request bodies and list query (spec 001 "Zone"; create/edit/delete from the official document). */
import { z } from 'zod';
import { pageQuery } from '../../core/pagination.ts';
import { qList, qString } from '../../core/validate.ts';

export const ZoneType = z.enum(['full', 'partial', 'secondary', 'internal']);

export const CreateZoneBody = z.object({
  name: z.string().min(1).max(253),
  account: z.object({ id: z.string().regex(/^[0-9a-f]{32}$/, 'must be 32 lowercase hex characters') }),
  type: ZoneType.optional(),
  jump_start: z.boolean().optional(),
});

export const EditZoneBody = z.object({
  paused: z.boolean().optional(),
  type: ZoneType.optional(),
  vanity_name_servers: z.array(z.string().min(1).max(253)).optional(),
});

export const ZoneStatus = z.enum(['initializing', 'pending', 'active', 'moved']);

export const ListZonesQuery = z.object({
  ...pageQuery({ perPage: 20, min: 5, max: 50 }),
  name: qString().optional(),
  status: qString(ZoneStatus).optional(),
  'account.id': qString().optional(),
  'account.name': qString().optional(),
  /** Repeated or comma-separated; without it, `internal` zones are left out (spec). */
  type: qList(ZoneType).optional(),
  order: qString(z.enum(['name', 'status', 'account.id', 'account.name', 'plan.id'])).optional(),
  direction: qString(z.enum(['asc', 'desc'])).optional(),
  match: qString(z.enum(['any', 'all'])).optional(),
});

export interface Zone {
  id: string;
  name: string;
  status: z.infer<typeof ZoneStatus>;
  paused: boolean;
  type: z.infer<typeof ZoneType>;
  development_mode: number;
  name_servers: string[];
  original_name_servers: string[] | null;
  original_registrar: string | null;
  original_dnshost: string | null;
  vanity_name_servers: string[];
  created_on: string;
  modified_on: string;
  activated_on: string | null;
  account: { id: string; name: string };
  owner: { id: string; type: string; name: string };
  meta: { step: number; custom_certificate_quota: number; page_rule_quota: number; phishing_detected: boolean };
  plan: { id: string; name: string; price: number; currency: string; frequency: string; is_subscribed: boolean; can_subscribe: boolean; legacy_id: string; legacy_discount: boolean; externally_managed: boolean };
  permissions: string[];
  verification_key?: string;
  cname_suffix?: string;
}
