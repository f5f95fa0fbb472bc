/** Streams, sinks and pipelines are account-scoped documents; names are unique per account. */
import { defineCollection } from '../../core/storage/collection.ts';
import type { StoredLegacyPipeline } from './legacy.ts';
import type { StoredPipeline, StoredSink, StoredStream } from './schemas.ts';

export const streams = defineCollection<StoredStream, 'name'>({ kind: 'pipelines_stream', indexes: { name: (s) => s.name } });
export const sinks = defineCollection<StoredSink, 'name'>({ kind: 'pipelines_sink', indexes: { name: (s) => s.name } });
export const pipelines = defineCollection<StoredPipeline, 'name' | 'stream' | 'sink'>({
  kind: 'pipelines_pipeline',
  indexes: { name: (p) => p.name, stream: (p) => p.stream_id, sink: (p) => p.sink_id },
});
/** Pipelines of the deprecated API: each names the stream, sink and pipeline it is made of. */
export const legacyPipelines = defineCollection<StoredLegacyPipeline, 'name'>({ kind: 'pipelines_legacy', indexes: { name: (p) => p.name } });
