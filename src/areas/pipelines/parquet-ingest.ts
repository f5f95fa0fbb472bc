/**
 * Parquet request bodies of streams with `format.type: "parquet"`: a whole Parquet file (`PAR1`
 * at its start and end), every row one event. Rows become the same JSON values a JSON event would
 * carry, so typed-stream validation, the durable log (which stores the decoded events as JSON),
 * the SQL and the sinks treat them exactly like JSON events:
 *
 * - INT64 / UINT64 → a number when it is a safe integer (|n| ≤ 2^53 − 1), otherwise its decimal
 *   text (a typed `int64` field then refuses it, as it refuses such a number in JSON);
 * - timestamps (millis, micros, nanos, INT96) → RFC 3339 text in UTC, with the fraction the unit
 *   carries (`2025-03-01T10:00:00.123456Z`); DATE → `YYYY-MM-DD`;
 * - BYTE_ARRAY / FIXED_LEN_BYTE_ARRAY without a string annotation → base64 text (binary);
 * - lists → arrays, structs and maps → objects, JSON columns → their value, null → null;
 * - floats that JSON cannot hold (NaN, ±Infinity) → null.
 *
 * A Parquet body is hostile input like any other: decompression is bounded (a page may not
 * claim more than the bytes left of `MAX_DECODED_BYTES`), the row count is bounded, and anything
 * the reader cannot decode is a `ParquetBodyError` (400), never a crash.
 */
import { parquetMetadata, parquetReadObjects, type Compressors } from 'hyparquet';
import { compressors as codecs, decompressZstd } from 'hyparquet-compressors';

export class ParquetBodyError extends Error {}

const MAGIC = Buffer.from('PAR1');
/** Uncompressed bytes the pages of one body may expand to. */
export const MAX_DECODED_BYTES = 32 * 1024 * 1024;
/** Rows in one body (the decoded JSON must also stay under the stream log's record limit). */
export const MAX_ROWS = 1_000_000;
const PARQUET_TYPES = new Set(['application/vnd.apache.parquet', 'application/x-parquet', 'application/octet-stream']);

/** The body starts with the Parquet magic, or its Content-Type says it is a Parquet file. */
export function looksLikeParquet(body: Buffer, contentType: string | undefined): boolean {
  if (body.length >= 4 && body.subarray(0, 4).equals(MAGIC)) return true;
  const ct = (contentType ?? '').split(';')[0].trim().toLowerCase();
  return PARQUET_TYPES.has(ct);
}

/** Decompressors that refuse to produce more than the remaining budget of the body. */
function boundedCodecs(): Compressors {
  let left = MAX_DECODED_BYTES;
  const take = (n: number) => {
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`a page claims ${n} uncompressed bytes`);
    if (n > left) throw new ParquetBodyError(`The Parquet body's pages expand to more than ${MAX_DECODED_BYTES} bytes; send fewer rows per request`);
    left -= n;
  };
  const out: Compressors = {};
  for (const [codec, fn] of Object.entries(codecs) as [keyof Compressors, NonNullable<Compressors[keyof Compressors]>][]) {
    out[codec] = (input, length) => {
      take(length);
      // The bundled ZSTD decoder sizes its output from the frame itself; give it the page's size.
      return codec === 'ZSTD' ? decompressZstd(input, new Uint8Array(length)) : fn(input, length);
    };
  }
  return out;
}

const two = (n: number) => String(n).padStart(2, '0');

/** RFC 3339 UTC text of a count of `unitsPerMs`-ths of a millisecond since the epoch. */
function rfc3339(value: bigint, digits: 3 | 6 | 9): string {
  const per = 10n ** BigInt(digits - 3);
  let ms = value / per;
  let frac = value % per;
  if (frac < 0n) {
    frac += per;
    ms -= 1n;
  }
  const d = new Date(Number(ms));
  const year = d.getUTCFullYear();
  if (Number.isNaN(d.getTime()) || year < 0 || year > 9999) throw new ParquetBodyError('The Parquet body holds a timestamp outside the years 0000-9999 (RFC 3339 cannot express it)');
  const fraction = (String(d.getUTCMilliseconds()).padStart(3, '0') + (digits > 3 ? String(frac).padStart(digits - 3, '0') : '')).replace(/0+$/, '');
  return `${String(year).padStart(4, '0')}-${two(d.getUTCMonth() + 1)}-${two(d.getUTCDate())}T${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())}${fraction ? `.${fraction}` : ''}Z`;
}

/** Parquet reader values → JSON values (see the module comment). */
function toJson(v: unknown, depth: number): unknown {
  if (depth > 200) throw new ParquetBodyError('The Parquet body nests lists and structs more than 200 levels deep');
  if (v === null || v === undefined) return null;
  switch (typeof v) {
    case 'bigint':
      return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString();
    case 'number':
      return Number.isFinite(v) ? v : null;
    case 'string':
    case 'boolean':
      return v;
    case 'object':
      break;
    default:
      return null;
  }
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64');
  if (v instanceof Date) {
    if (Number.isNaN(v.getTime())) throw new Error('an invalid date');
    return v.toISOString();
  }
  if (Array.isArray(v) || ArrayBuffer.isView(v)) return Array.from(v as ArrayLike<unknown>, (x) => toJson(x, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) out[k] = toJson(x, depth + 1);
  return out;
}

/** Decodes a Parquet file into one JSON object per row; throws ParquetBodyError. */
export async function decodeParquet(body: Buffer): Promise<Record<string, unknown>[]> {
  const notReadable = (why: string) => new ParquetBodyError(`The body is not a readable Parquet file: ${why}`);
  if (body.length < 12 || !body.subarray(0, 4).equals(MAGIC) || !body.subarray(body.length - 4).equals(MAGIC))
    throw notReadable('a Parquet file starts and ends with PAR1 (send the whole file, e.g. curl --data-binary @events.parquet)');
  // A copy: the reader takes an ArrayBuffer, and a pooled Buffer's may hold other bytes.
  const file = new Uint8Array(body).buffer;
  try {
    const metadata = parquetMetadata(file);
    const rows = Number(metadata.num_rows);
    if (!Number.isSafeInteger(rows) || rows < 0) throw new Error(`its footer claims ${String(metadata.num_rows)} rows`);
    if (rows > MAX_ROWS) throw new ParquetBodyError(`The Parquet body holds ${rows} rows; send at most ${MAX_ROWS} per request`);
    if (rows === 0) return [];
    const utc = {
      timestampFromMilliseconds: (v: bigint) => rfc3339(BigInt(v), 3),
      timestampFromMicroseconds: (v: bigint) => rfc3339(BigInt(v), 6),
      timestampFromNanoseconds: (v: bigint) => rfc3339(BigInt(v), 9),
      dateFromDays: (days: number) => rfc3339(BigInt(days) * 86_400_000n, 3).slice(0, 10),
    };
    const objects = await parquetReadObjects({ file, metadata, compressors: boundedCodecs(), utf8: false, parsers: utc, geoparquet: false });
    return objects.map((r) => toJson({ ...r }, 0) as Record<string, unknown>);
  } catch (err) {
    if (err instanceof ParquetBodyError) throw err;
    throw notReadable(String((err as Error)?.message ?? err).slice(0, 200));
  }
}
