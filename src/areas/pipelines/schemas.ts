/**
 * Request bodies and stored records of streams, sinks and pipelines, as the official client sends
 * them (`/accounts/{a}/pipelines/v1/…`). Unknown keys are refused so a typo is a 400, not a
 * silently ignored setting.
 */
import { z } from 'zod';

export const FIELD_TYPES = ['int32', 'int64', 'float32', 'float64', 'bool', 'string', 'binary', 'timestamp', 'json', 'struct', 'list'] as const;
export type FieldType = (typeof FIELD_TYPES)[number];

const NAME = z
  .string({ error: 'name is required' })
  .regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, 'name must be 1-128 letters, digits or underscores, starting with a letter or underscore (it is a table name in SQL)');

export const JsonFormat = z.strictObject({
  type: z.literal('json'),
  decimal_encoding: z.enum(['number', 'string', 'bytes']).optional(),
  timestamp_format: z.enum(['rfc3339', 'unix_millis']).optional(),
  unstructured: z.boolean().optional(),
});
export const ParquetFormat = z.strictObject({
  type: z.literal('parquet'),
  compression: z.enum(['uncompressed', 'snappy', 'gzip', 'zstd', 'lz4']).optional(),
  row_group_bytes: z.number().int().positive().nullable().optional(),
});
export const Format = z.discriminatedUnion('type', [JsonFormat, ParquetFormat], { error: 'format.type must be json or parquet' });
export type Format = z.infer<typeof Format>;

export interface Field {
  name: string;
  type: FieldType;
  required?: boolean;
  sql_name?: string;
  metadata_key?: string | null;
  unit?: string;
  fields?: Field[];
  items?: unknown;
}
export const FieldSchema: z.ZodType<Field> = z.lazy(() =>
  z.object({
    name: z.string({ error: 'field name is required' }).min(1).max(128),
    type: z.enum(FIELD_TYPES, { error: `field type must be one of ${FIELD_TYPES.join(', ')}` }),
    required: z.boolean().optional(),
    sql_name: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'sql_name must be an SQL identifier').optional(),
    metadata_key: z.string().nullable().optional(),
    unit: z.string().optional(),
    fields: z.array(FieldSchema).optional(),
    items: z.unknown().optional(),
  }),
);
export const Schema = z.strictObject({
  fields: z.array(FieldSchema).max(1000).optional(),
  format: Format.optional(),
  inferred: z.boolean().nullable().optional(),
});
export type Schema = z.infer<typeof Schema>;

const Http = z.strictObject({
  enabled: z.boolean({ error: 'http.enabled must be a boolean' }),
  authentication: z.boolean({ error: 'http.authentication must be a boolean' }),
  cors: z.strictObject({ origins: z.array(z.string()).optional() }).optional(),
});
const WorkerBinding = z.strictObject({ enabled: z.boolean({ error: 'worker_binding.enabled must be a boolean' }) });

export const StreamCreate = z.strictObject({
  name: NAME,
  format: Format.optional(),
  schema: Schema.optional(),
  http: Http.optional(),
  worker_binding: WorkerBinding.optional(),
});
export const StreamPatch = z.strictObject({ http: Http.optional(), worker_binding: WorkerBinding.optional() });

export interface StoredStream {
  id: string;
  name: string;
  format: Format;
  schema?: Schema;
  http: { enabled: boolean; authentication: boolean; cors?: { origins?: string[] } };
  worker_binding: { enabled: boolean };
  version: number;
  created_at: string;
  modified_at: string;
}

const Seconds = z.number().positive('must be a positive number of seconds');
export const RollingPolicy = z.strictObject({
  file_size_bytes: z.number().int().positive().optional(),
  interval_seconds: Seconds.optional(),
  inactivity_seconds: Seconds.optional(),
});
export type RollingPolicy = z.infer<typeof RollingPolicy>;
export const R2Config = z.strictObject({
  account_id: z.string().optional(),
  bucket: z.string({ error: 'config.bucket is required' }).regex(/^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$/, 'config.bucket must be 3-63 lowercase letters, digits or hyphens'),
  credentials: z.strictObject({ access_key_id: z.string(), secret_access_key: z.string() }).optional(),
  file_naming: z
    .strictObject({
      prefix: z.string().regex(/^[A-Za-z0-9._-]*$/, 'file_naming.prefix may hold letters, digits, dot, underscore and hyphen').max(64).optional(),
      suffix: z.string().regex(/^[A-Za-z0-9._-]*$/, 'file_naming.suffix may hold letters, digits, dot, underscore and hyphen').max(64).optional(),
      strategy: z.enum(['serial', 'uuid', 'uuid_v7', 'ulid']).optional(),
    })
    .optional(),
  jurisdiction: z.string().optional(),
  partitioning: z.strictObject({ time_pattern: z.string().max(200).optional() }).optional(),
  path: z
    .string()
    .max(512)
    .refine((p) => !p.split('/').some((s) => s === '..' || s === '.'), 'config.path must not contain . or .. segments')
    .refine((p) => /^[A-Za-z0-9._\-/=]*$/.test(p), 'config.path may hold letters, digits, . _ - = and /')
    .refine((p) => p.split('/').filter(Boolean)[0] !== '__r2_data_catalog', "config.path must not start with __r2_data_catalog (the bucket's Iceberg catalog)")
    .optional(),
  rolling_policy: RollingPolicy.optional(),
});
export type R2Config = z.infer<typeof R2Config>;

/** Namespace and table names are directory names and SQL identifiers. */
const CATALOG_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
export const CatalogConfig = z.strictObject({
  token: z.string({ error: 'config.token is required (an API token for the catalog)' }).min(1, 'config.token must not be empty'),
  account_id: z.string().optional(),
  bucket: R2Config.shape.bucket,
  namespace: z.string().regex(CATALOG_NAME, 'config.namespace must be 1-128 letters, digits or underscores, starting with a letter or underscore').optional(),
  table_name: z.string({ error: 'config.table_name is required' }).regex(CATALOG_NAME, 'config.table_name must be 1-128 letters, digits or underscores, starting with a letter or underscore'),
  rolling_policy: RollingPolicy.optional(),
});
export type CatalogConfig = z.infer<typeof CatalogConfig>;
export const CATALOG_NAME_PATTERN = CATALOG_NAME;

export const SinkCreate = z.strictObject({
  name: NAME,
  type: z.enum(['r2', 'r2_data_catalog', 'basin_catalog'], { error: 'type must be r2 or r2_data_catalog' }),
  // Checked against the type's own shape by the route (R2Config or CatalogConfig).
  config: z.record(z.string(), z.unknown(), { error: 'config must be an object' }).optional(),
  format: Format.optional(),
  schema: Schema.optional(),
});

export interface StoredSink {
  id: string;
  name: string;
  type: 'r2' | 'r2_data_catalog';
  format: Format;
  schema?: Schema;
  /** An r2 sink's config; a catalog sink also has `namespace`, `table_name` and `token`. */
  config: R2Config & { bucket: string; namespace?: string; table_name?: string; token?: string; rolling_policy?: RollingPolicy & { max_rows?: number } };
  /** JSON files gzip-compressed (`.json.gz`): set only through the deprecated pipelines API. */
  json_compression?: 'gzip';
  created_at: string;
  modified_at: string;
}

export const PipelineCreate = z.strictObject({
  name: NAME,
  sql: z.string({ error: 'sql is required' }).min(1, 'sql must not be empty').max(100_000),
});
export const ValidateSql = z.strictObject({ sql: z.string({ error: 'sql is required' }).min(1).max(100_000) });

export interface StoredPipeline {
  id: string;
  name: string;
  sql: string;
  stream_id: string;
  sink_id: string;
  /** Names and versions the SQL resolved to when the pipeline was created. */
  sql_tables?: { stream: string; sink: string; stream_version: number };
  status: string;
  created_at: string;
  modified_at: string;
}
