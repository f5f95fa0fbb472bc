/**
 * The per-event work of a pipeline: parse each log record (a JSON array of events), apply the
 * compiled SQL, and serialise the rows as newline-delimited JSON. This is the CPU-heavy part of a
 * pipeline, so it runs on a worker thread (`transform-worker.ts`) while the main thread answers
 * ingestion; `inlineTransform` does the same work on the calling thread (fallback and tests).
 *
 * The output keeps record boundaries: for each input record, where its rows end in the text, how
 * many rows and events it had, how many events were dropped (not an object, or the SQL failed on
 * it), and, when asked, which kinds of values each column held (Parquet sinks type untyped
 * columns from them).
 */
import type { Field } from './schemas.ts';
import { compilePipeline, type CompiledPipeline } from './sql.ts';

/** Bits of a column's value kinds. */
export const KIND = { int: 1, float: 2, string: 4, boolean: 8, object: 16, other: 32 } as const;

/** Everything a thread needs to compile the same pipeline: plain data, sent to the worker. */
export interface TransformSpec {
  sql: string;
  stream: { id: string; name: string; version: number; fields?: Field[] };
  sink: { id: string; name: string; fields?: Field[] };
  /** Record the kinds of values per column (Parquet sinks with untyped columns). */
  inferTypes: boolean;
  /** Timestamp columns are written as milliseconds since the epoch (JSON sinks). */
  unixMillis: boolean;
}

export interface RecordResult {
  /** Byte offset in `text` just past this record's rows. */
  end: number;
  rows: number;
  events: number;
  dropped: number;
  kinds?: Record<string, number>;
}

export interface TransformOutput {
  text: Uint8Array;
  records: RecordResult[];
}

export type TransformFn = (payloads: Uint8Array[]) => TransformOutput;

export function compileSpec(spec: TransformSpec): Promise<CompiledPipeline> {
  return compilePipeline(spec.sql, {
    stream: (name) => (name === spec.stream.name ? spec.stream : undefined),
    sink: (name) => (name === spec.sink.name ? spec.sink : undefined),
  });
}

function kindOf(v: unknown): number {
  switch (typeof v) {
    case 'number':
      return Number.isInteger(v) ? KIND.int : KIND.float;
    case 'string':
      return KIND.string;
    case 'boolean':
      return KIND.boolean;
    case 'object':
      return KIND.object;
    default:
      return KIND.other;
  }
}

const decoder = new TextDecoder();
const encoder = new TextEncoder();

export function makeTransform(compiled: CompiledPipeline, spec: Pick<TransformSpec, 'inferTypes' | 'unixMillis'>): TransformFn {
  const millisColumns = spec.unixMillis ? compiled.columns.filter((c) => c.type === 'timestamp').map((c) => c.name) : [];
  return (payloads) => {
    const parts: string[] = [];
    const records: RecordResult[] = [];
    let bytes = 0;
    for (const payload of payloads) {
      const r: RecordResult = { end: bytes, rows: 0, events: 0, dropped: 0 };
      records.push(r);
      let events: unknown;
      try {
        events = JSON.parse(decoder.decode(payload));
      } catch {
        events = undefined;
      }
      if (!Array.isArray(events)) {
        r.dropped += 1;
        continue;
      }
      const kinds: Record<string, number> | undefined = spec.inferTypes ? {} : undefined;
      let text = '';
      for (const ev of events) {
        r.events += 1;
        if (ev === null || typeof ev !== 'object' || Array.isArray(ev)) {
          r.dropped += 1;
          continue;
        }
        let line: string;
        try {
          const row = compiled.apply(ev as Record<string, unknown>);
          if (!row) continue;
          for (const name of millisColumns) if (typeof row[name] === 'string') row[name] = Date.parse(row[name] as string);
          if (kinds) {
            for (const k in row) {
              const v = row[k];
              if (v !== null && v !== undefined) kinds[k] = (kinds[k] ?? 0) | kindOf(v);
            }
          }
          line = JSON.stringify(row);
        } catch {
          // A value the SQL cannot handle (or one too deep to write) drops the event, not the batch.
          r.dropped += 1;
          continue;
        }
        text += line + '\n';
        r.rows += 1;
      }
      if (kinds) r.kinds = kinds;
      if (text.length > 0) {
        parts.push(text);
        bytes += Buffer.byteLength(text);
      }
      r.end = bytes;
    }
    return { text: parts.length === 1 ? encoder.encode(parts[0]) : encoder.encode(parts.join('')), records };
  };
}

/** The transform on the calling thread. */
export async function inlineTransform(spec: TransformSpec): Promise<TransformFn> {
  return makeTransform(await compileSpec(spec), spec);
}
