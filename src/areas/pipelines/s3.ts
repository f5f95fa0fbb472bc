/**
 * Upload of a finished sink file to an S3-compatible endpoint (`--pipelines-s3-endpoint`):
 * `PUT {endpoint}/{bucket}/{key}` (path-style), signed with the sink's own credentials (SigV4,
 * `sigv4.ts`), or unsigned when the sink has none. A failure names what to fix.
 */
import { sha256Hex, signV4 } from './sigv4.ts';

export interface S3Target {
  endpoint: string;
  region: string;
}

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

export async function putObject(
  t: S3Target,
  bucket: string,
  key: string,
  body: Buffer,
  credentials: { access_key_id: string; secret_access_key: string } | undefined,
  now: Date,
  stop?: AbortSignal,
): Promise<void> {
  const url = new URL(`${t.endpoint.replace(/\/+$/, '')}/${bucket}/${key.split('/').map(encodeURIComponent).join('/')}`);
  const payloadHash = sha256Hex(body);
  const headers: Record<string, string> = credentials
    ? signV4({ method: 'PUT', url, payloadHash, accessKeyId: credentials.access_key_id, secretAccessKey: credentials.secret_access_key, region: t.region, date: now })
    : { 'x-amz-content-sha256': payloadHash };
  delete headers.host;
  let res: Response;
  try {
    res = await fetch(url, { method: 'PUT', headers: { ...headers, 'content-length': String(body.length) }, body: new Uint8Array(body), signal: stop ? AbortSignal.any([stop, AbortSignal.timeout(60_000)]) : AbortSignal.timeout(60_000) });
  } catch (err) {
    throw new UploadError(`PUT ${url.href} failed: ${(err as Error).message}`, undefined, undefined, fixFor(undefined, undefined));
  }
  const text = await res.text().catch(() => '');
  if (res.status >= 200 && res.status < 300) return;
  const code = /<Code>([^<]*)<\/Code>/.exec(text)?.[1];
  throw new UploadError(`PUT ${url.href} answered ${res.status}${code ? ` ${code}` : ''}`, res.status, code, fixFor(res.status, code));
}
