/**
 * Upload of a finished sink file to an S3-compatible endpoint (`--pipelines-s3-endpoint`),
 * path-style, every request signed with the sink's own credentials (SigV4, `sigv4.ts`), or
 * unsigned when the sink has none. A failure names what to fix.
 *
 * A file of at most `partBytes` (default 8 MiB) goes up in one `PUT {endpoint}/{bucket}/{key}`.
 * A larger one goes up as a multipart upload, read from disk one part at a time so it is never
 * held in memory whole: `POST …?uploads` (CreateMultipartUpload) → `PUT …?partNumber=N&uploadId=…`
 * per part (UploadPart) → `POST …?uploadId=…` with the parts' ETags (CompleteMultipartUpload).
 * If any step fails the upload is aborted (`DELETE …?uploadId=…`, best effort: an endpoint that
 * keeps the parts drops them by its own lifecycle rules) and the error is thrown; the caller
 * retries the whole file, which starts a new upload under the same key.
 */
import { open } from 'node:fs/promises';
import { sha256Hex, signV4 } from './sigv4.ts';

export interface S3Target {
  endpoint: string;
  region: string;
  /** Files larger than this go up in parts of this size (default 8 MiB; S3 needs at least 5 MiB but the last). */
  partBytes?: number;
}

export const DEFAULT_PART_BYTES = 8 * 1024 * 1024;
/** S3 allows part numbers 1..10000; a larger file gets larger parts. */
const MAX_PARTS = 10_000;
const REQUEST_TIMEOUT_MS = 60_000;

type Credentials = { access_key_id: string; secret_access_key: string } | undefined;

export class UploadError extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
    readonly code: string | undefined,
    readonly fix: string,
  ) {
    super(message);
  }
}

function fixFor(status: number | undefined, code: string | undefined): string {
  switch (code) {
    case 'SignatureDoesNotMatch':
      return "check the sink's config.credentials.secret_access_key (and --pipelines-s3-region)";
    case 'InvalidAccessKeyId':
      return "check the sink's config.credentials.access_key_id";
    case 'AccessDenied':
      return "give the sink's credentials write access to the bucket, or set config.credentials";
    case 'NoSuchBucket':
      return "create the sink's bucket on the endpoint";
    case 'RequestTimeTooSkewed':
      return "correct this machine's clock";
  }
  if (status === undefined) return 'check that --pipelines-s3-endpoint is reachable';
  if (status === 403) return "check the sink's config.credentials";
  if (status >= 500) return 'the endpoint failed; it is tried again';
  return 'check the endpoint and the sink configuration';
}

/** Object key of a file: the sink's path, then the file's path under it (the same as on disk). */
export function objectKey(path: string | undefined, rel: string): string {
  return [...(path ?? '').split('/').filter(Boolean), ...rel.split(/[\\/]/).filter(Boolean)].join('/');
}

/** The object's URL; each key segment encoded as the signer signs it. */
function objectUrl(t: S3Target, bucket: string, key: string): URL {
  return new URL(`${t.endpoint.replace(/\/+$/, '')}/${bucket}/${key.split('/').map(encodeURIComponent).join('/')}`);
}

/** One signed request; a non-2xx answer (or a 200 carrying an S3 `<Error>`) is an UploadError. */
async function send(method: string, url: URL, body: Uint8Array, credentials: Credentials, t: S3Target, stop: AbortSignal | undefined, what: string): Promise<{ text: string; headers: Headers }> {
  const payloadHash = sha256Hex(body);
  const headers: Record<string, string> = credentials
    ? signV4({ method, url, payloadHash, accessKeyId: credentials.access_key_id, secretAccessKey: credentials.secret_access_key, region: t.region, date: new Date() })
    : { 'x-amz-content-sha256': payloadHash };
  delete headers.host;
  const label = `${what} ${method} ${url.origin}${url.pathname}`;
  let res: Response;
  try {
    const signal = stop ? AbortSignal.any([stop, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]) : AbortSignal.timeout(REQUEST_TIMEOUT_MS);
    res = await fetch(url, { method, headers: { ...headers, 'content-length': String(body.length) }, body: method === 'DELETE' ? undefined : (body as Uint8Array<ArrayBuffer>), signal });
  } catch (err) {
    throw new UploadError(`${label} failed: ${(err as Error).message}`, undefined, undefined, fixFor(undefined, undefined));
  }
  const text = await res.text().catch(() => '');
  const code = /<Code>([^<]*)<\/Code>/.exec(text)?.[1];
  // CompleteMultipartUpload may answer 200 and report a failure in the body.
  if (res.status >= 200 && res.status < 300 && !(/<Error>/.test(text) && code)) return { text, headers: res.headers };
  throw new UploadError(`${label} answered ${res.status}${code ? ` ${code}` : ''}`, res.status, code, fixFor(res.status, code));
}

/** One PUT of a whole file held in memory. */
export async function putObject(t: S3Target, bucket: string, key: string, body: Buffer, credentials: Credentials, stop?: AbortSignal): Promise<void> {
  await send('PUT', objectUrl(t, bucket, key), body, credentials, t, stop, 'upload');
}

const xmlEscape = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** A multipart upload of the file at `path` (`size` bytes), part by part from disk. */
async function multipartUpload(t: S3Target, bucket: string, key: string, path: string, size: number, partBytes: number, credentials: Credentials, stop: AbortSignal | undefined): Promise<void> {
  const base = objectUrl(t, bucket, key);
  const withQuery = (q: Record<string, string>) => {
    const u = new URL(base);
    for (const [k, v] of Object.entries(q)) u.searchParams.set(k, v);
    return u;
  };
  const created = await send('POST', withQuery({ uploads: '' }), new Uint8Array(0), credentials, t, stop, 'CreateMultipartUpload');
  const uploadId = /<UploadId>([^<]+)<\/UploadId>/.exec(created.text)?.[1];
  if (!uploadId) throw new UploadError(`CreateMultipartUpload POST ${base.href} answered without an UploadId`, 200, undefined, 'check that the endpoint supports multipart uploads');
  try {
    const etags: string[] = [];
    const fh = await open(path, 'r');
    try {
      const buf = Buffer.allocUnsafe(partBytes);
      for (let n = 1, offset = 0; offset < size; n++, offset += partBytes) {
        const len = Math.min(partBytes, size - offset);
        let got = 0;
        while (got < len) {
          const { bytesRead } = await fh.read(buf, got, len - got, offset + got);
          if (bytesRead === 0) throw new Error(`${path} is shorter than ${size} bytes`);
          got += bytesRead;
        }
        const part = await send('PUT', withQuery({ partNumber: String(n), uploadId }), buf.subarray(0, len), credentials, t, stop, `UploadPart ${n}`);
        const etag = part.headers.get('etag');
        if (!etag) throw new UploadError(`UploadPart ${n} of ${base.href} answered without an ETag`, 200, undefined, 'check that the endpoint supports multipart uploads');
        etags.push(etag);
      }
    } finally {
      await fh.close();
    }
    const xml = `<CompleteMultipartUpload>${etags.map((e, i) => `<Part><PartNumber>${i + 1}</PartNumber><ETag>${xmlEscape(e)}</ETag></Part>`).join('')}</CompleteMultipartUpload>`;
    await send('POST', withQuery({ uploadId }), Buffer.from(xml), credentials, t, stop, 'CompleteMultipartUpload');
  } catch (err) {
    // Parts of an upload that is not completed are stored (and billed) until aborted.
    await send('DELETE', withQuery({ uploadId }), new Uint8Array(0), credentials, t, undefined, 'AbortMultipartUpload').catch(() => undefined);
    throw err;
  }
}

/**
 * Uploads the finished file at `path` under `key`: one PUT up to `t.partBytes`, a multipart
 * upload above it. Throws UploadError (the caller retries the whole file).
 */
export async function uploadFile(t: S3Target, bucket: string, key: string, path: string, credentials: Credentials, stop?: AbortSignal): Promise<void> {
  const fh = await open(path, 'r');
  let size: number;
  let whole: Buffer | undefined;
  try {
    size = (await fh.stat()).size;
    if (size <= (t.partBytes ?? DEFAULT_PART_BYTES)) whole = await fh.readFile();
  } finally {
    await fh.close();
  }
  if (whole) return putObject(t, bucket, key, whole, credentials, stop);
  const partBytes = Math.max(t.partBytes ?? DEFAULT_PART_BYTES, Math.ceil(size / MAX_PARTS));
  await multipartUpload(t, bucket, key, path, size, partBytes, credentials, stop);
}
