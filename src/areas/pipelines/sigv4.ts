/**
 * AWS Signature Version 4 for S3-compatible requests (header form), as used by sinks that upload
 * finished files to `--pipelines-s3-endpoint`.
 *
 * Steps:
 *   1. Canonical request: method, URI-encoded path (each segment; `/` kept), sorted and encoded
 *      query, the signed headers as `name:value` lines (lower-case names, trimmed values, sorted),
 *      the list of signed header names, and the payload's SHA-256 hex (`x-amz-content-sha256`).
 *   2. String to sign: `AWS4-HMAC-SHA256`, the request time, the scope
 *      `<yyyymmdd>/<region>/<service>/aws4_request`, and the SHA-256 hex of the canonical request.
 *   3. Signing key: HMAC chain of `AWS4<secret>` over date, region, service, `aws4_request`.
 *   4. Signature: HMAC of the string to sign with that key, hex; sent in `Authorization`.
 *
 * The path is signed with every character but `A-Z a-z 0-9 - _ . ~ /` percent-encoded; callers
 * send it encoded the same way so servers that sign the raw path and servers that re-encode it
 * agree.
 */
import { createHash, createHmac } from 'node:crypto';

export interface SignInput {
  method: string;
  url: URL;
  /** Headers to sign besides host, x-amz-date and x-amz-content-sha256 (added here). */
  headers?: Record<string, string>;
  /** SHA-256 hex of the body (`sha256Hex(body)`). */
  payloadHash: string;
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
  service?: string;
  date: Date;
}

export const sha256Hex = (data: string | Uint8Array): string => createHash('sha256').update(data).digest('hex');
const hmac = (key: string | Buffer, data: string): Buffer => createHmac('sha256', key).update(data).digest();

/** RFC 3986 encoding: everything but unreserved characters is percent-encoded. */
function uriEncode(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** `20130524T000000Z` */
export function amzDate(d: Date): string {
  return d.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');
}

/** Returns the request's headers with `authorization`, `x-amz-date`, `x-amz-content-sha256` and `host` set. */
export function signV4(i: SignInput): Record<string, string> {
  const service = i.service ?? 's3';
  const when = amzDate(i.date);
  const day = when.slice(0, 8);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(i.headers ?? {})) headers[k.toLowerCase()] = v;
  headers.host = i.url.host;
  headers['x-amz-date'] = when;
  headers['x-amz-content-sha256'] = i.payloadHash;
  // 1. Canonical request.
  const path = i.url.pathname
    .split('/')
    .map((seg) => uriEncode(decodeURIComponent(seg)))
    .join('/');
  const query = [...i.url.searchParams.entries()]
    .map(([k, v]) => [uriEncode(k), uriEncode(v)])
    .sort((a, b) => (a[0] === b[0] ? (a[1] < b[1] ? -1 : 1) : a[0] < b[0] ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
  const names = Object.keys(headers).sort();
  const canonicalHeaders = names.map((n) => `${n}:${headers[n].trim().replace(/\s+/g, ' ')}\n`).join('');
  const signedHeaders = names.join(';');
  const canonical = [i.method.toUpperCase(), path || '/', query, canonicalHeaders, signedHeaders, i.payloadHash].join('\n');
  // 2. String to sign.
  const scope = `${day}/${i.region}/${service}/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', when, scope, sha256Hex(canonical)].join('\n');
  // 3. Signing key.
  const key = hmac(hmac(hmac(hmac(`AWS4${i.secretAccessKey}`, day), i.region), service), 'aws4_request');
  // 4. Signature.
  const signature = createHmac('sha256', key).update(toSign).digest('hex');
  headers.authorization = `AWS4-HMAC-SHA256 Credential=${i.accessKeyId}/${scope}, SignedHeaders=${signedHeaders}, Signature=${signature}`;
  return headers;
}
