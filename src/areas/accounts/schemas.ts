/** Request bodies and queries for accounts and API tokens. */
import { z } from 'zod';
import { pageQuery } from '../../core/pagination.ts';
import { qString } from '../../core/validate.ts';
import { parseCidr } from '../../core/auth.ts';

export const ListAccountsQuery = z.object({
  ...pageQuery({ perPage: 20, min: 5, max: 50 }),
  name: qString().optional(),
  direction: qString(z.enum(['asc', 'desc'])).optional(),
});

const ResourceValue = z.union([z.literal('*'), z.string(), z.record(z.string(), z.string())]);

export const PolicyInput = z.object({
  id: z.string().optional(),
  effect: z.enum(['allow', 'deny']),
  permission_groups: z
    .array(z.object({ id: z.string().min(1), name: z.string().optional(), meta: z.unknown().optional() }))
    .min(1),
  resources: z.record(z.string(), ResourceValue).refine((r) => Object.keys(r).length > 0, 'at least one resource'),
});

const Cidr = z.string().refine((s) => parseCidr(s) !== undefined, 'not an IP address or CIDR range');
const Condition = z.object({
  request_ip: z
    .object({ in: z.array(Cidr).max(100).optional(), not_in: z.array(Cidr).max(100).optional() })
    .optional(),
});

const Timestamp = z.iso.datetime({ offset: true });

export const CreateTokenBody = z.object({
  name: z.string().min(1).max(120),
  policies: z.array(PolicyInput).min(1),
  expires_on: Timestamp.nullable().optional(),
  not_before: Timestamp.nullable().optional(),
  condition: Condition.optional(),
});

export const UpdateTokenBody = CreateTokenBody.extend({
  status: z.enum(['active', 'disabled', 'expired']).optional(),
});

export const ListTokensQuery = z.object({
  ...pageQuery({ perPage: 20, min: 5, max: 50 }),
  direction: qString(z.enum(['asc', 'desc'])).optional(),
});
