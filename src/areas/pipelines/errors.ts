/** The pipelines area's errors, built from the one error table. */
import { apiError, type ApiError } from '../../core/errors.ts';

const NAMES = {
  invalid: 'pipelines_invalid',
  sql_invalid: 'pipelines_sql_invalid',
  stream_not_found: 'pipelines_stream_not_found',
  sink_not_found: 'pipelines_sink_not_found',
  pipeline_not_found: 'pipelines_pipeline_not_found',
  name_exists: 'pipelines_name_exists',
  in_use: 'pipelines_in_use',
  ingest_invalid: 'pipelines_ingest_invalid',
  ingest_too_large: 'pipelines_ingest_too_large',
  ingest_rate_limited: 'pipelines_ingest_rate_limited',
  ingest_disabled: 'pipelines_ingest_disabled',
  query_invalid: 'pipelines_query_invalid',
} as const;

export function pipelinesError(name: keyof typeof NAMES, ...args: string[]): ApiError {
  return apiError(NAMES[name], ...args);
}
