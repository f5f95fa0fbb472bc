/**
 * Request-body schemas for DNS records. These check shapes only; the per-type rules (addresses,
 * host names, TTL range, proxying, conflicts) live in record-rules.ts so they can answer with the
 * platform's own error codes. Unknown keys are stripped: the official client sends extra ones.
 */
import { z } from 'zod';

/** Types whose value travels in `content`. */
export const CONTENT_TYPES = [
  'A',
  'AAAA',
  'CNAME',
  'MX',
  'NS',
  'OPENPGPKEY',
  'PTR',
  'TXT',
] as const;
/** Types whose value travels in `data` (the API also renders a `content` string for them). */
export const DATA_TYPES = [
  'CAA',
  'CERT',
  'DNSKEY',
  'DS',
  'HTTPS',
  'LOC',
  'NAPTR',
  'SMIMEA',
  'SRV',
  'SSHFP',
  'SVCB',
  'TLSA',
  'URI',
] as const;
export const RECORD_TYPES = [...CONTENT_TYPES, ...DATA_TYPES] as const;

export type ContentType = (typeof CONTENT_TYPES)[number];
export type DataType = (typeof DATA_TYPES)[number];
export type RecordType = (typeof RECORD_TYPES)[number];

export function isDataType(type: string): type is DataType {
  return (DATA_TYPES as readonly string[]).includes(type);
}

export function isRecordType(type: string): type is RecordType {
  return (RECORD_TYPES as readonly string[]).includes(type);
}

/** Unsigned integer up to `max`; numeric strings are accepted and converted. */
function uint(max: number) {
  return z
    .union([z.number(), z.string().regex(/^\d+$/, 'expected an integer').transform(Number)])
    .pipe(z.number().int().min(0).max(max));
}

/** Non-negative decimal number up to `max` (LOC fields); numeric strings are accepted. */
function decimal(min: number, max: number) {
  return z
    .union([
      z.number(),
      z
        .string()
        .regex(/^-?\d+(\.\d+)?$/, 'expected a number')
        .transform(Number),
    ])
    .pipe(z.number().min(min).max(max));
}

const RecordTypeSchema = z
  .string()
  .transform((s) => s.toUpperCase())
  .pipe(z.enum(RECORD_TYPES));

/** `name:value` (value may be empty); a bare `name` is read as `name:`. */
const Tag = z
  .string()
  .max(1000)
  .regex(
    /^[A-Za-z0-9_-]+(:[^\r\n]*)?$/,
    'tags must look like name:value (name: letters, digits, - and _)',
  );

const Settings = z.object({
  ipv4_only: z.boolean().optional(),
  ipv6_only: z.boolean().optional(),
  flatten_cname: z.boolean().optional(),
});

const common = {
  name: z.string().max(255),
  content: z.string().max(4096).optional(),
  data: z.record(z.string(), z.unknown()).optional(),
  priority: uint(65535).optional(),
  comment: z.string().max(100).nullable().optional(),
  tags: z.array(Tag).max(100).optional(),
  settings: Settings.optional(),
  private_routing: z.boolean().optional(),
};

/** Body of POST and PUT. */
export const DnsRecordInput = z.object({
  type: RecordTypeSchema,
  ...common,
  ttl: z.number().default(1),
  proxied: z.boolean().default(false),
});
export type DnsRecordInput = z.output<typeof DnsRecordInput>;

/** Body of PATCH: every field optional, no defaults (absent means "keep"). */
export const DnsRecordPatch = z.object({
  type: RecordTypeSchema.optional(),
  name: common.name.optional(),
  content: common.content,
  data: common.data,
  priority: common.priority,
  comment: common.comment,
  tags: common.tags,
  settings: common.settings,
  private_routing: common.private_routing,
  ttl: z.number().optional(),
  proxied: z.boolean().optional(),
});
export type DnsRecordPatch = z.output<typeof DnsRecordPatch>;

// --- per-type `data` shapes (checked by record-rules.ts once the type is known) ----------------

const u8 = uint(255);
const u16 = uint(65535);
const text = (max: number) => z.string().max(max);

export const DATA_SCHEMAS = {
  CAA: z.object({
    flags: u8.default(0),
    tag: z
      .string()
      .transform((s) => s.toLowerCase())
      .pipe(z.enum(['issue', 'issuewild', 'iodef', 'issuemail', 'issuevmc'])),
    value: text(1024),
  }),
  CERT: z.object({ type: u16, key_tag: u16, algorithm: u8, certificate: text(4096) }),
  DNSKEY: z.object({ flags: u16, protocol: u8, algorithm: u8, public_key: text(4096) }),
  DS: z.object({ key_tag: u16, algorithm: u8, digest_type: u8, digest: text(1024) }),
  HTTPS: z.object({ priority: u16, target: text(255), value: text(2048).default('') }),
  SVCB: z.object({ priority: u16, target: text(255), value: text(2048).default('') }),
  LOC: z.object({
    lat_degrees: uint(90),
    lat_minutes: uint(59).default(0),
    lat_seconds: decimal(0, 59.999).default(0),
    lat_direction: z.enum(['N', 'S']),
    long_degrees: uint(180),
    long_minutes: uint(59).default(0),
    long_seconds: decimal(0, 59.999).default(0),
    long_direction: z.enum(['E', 'W']),
    altitude: decimal(-100000, 42849672.95),
    size: decimal(0, 90000000).default(1),
    precision_horz: decimal(0, 90000000).default(10000),
    precision_vert: decimal(0, 90000000).default(10),
  }),
  NAPTR: z.object({
    order: u16,
    preference: u16,
    flags: text(255).default(''),
    service: text(255).default(''),
    regex: text(255).default(''),
    replacement: text(255),
  }),
  SMIMEA: z.object({ usage: u8, selector: u8, matching_type: u8, certificate: text(4096) }),
  TLSA: z.object({ usage: u8, selector: u8, matching_type: u8, certificate: text(4096) }),
  SRV: z.object({
    priority: u16.optional(),
    weight: u16,
    port: u16,
    target: text(255),
    // Legacy shape: the owner name given as its parts.
    service: text(63).optional(),
    proto: text(63).optional(),
    name: text(255).optional(),
  }),
  SSHFP: z.object({ algorithm: u8, type: u8, fingerprint: text(1024) }),
  URI: z.object({ weight: u16, target: text(2048) }),
} satisfies Record<DataType, z.ZodType>;
