/**
 * Static assets of customer scripts: the three-step upload (session → buckets → completion token),
 * the blob store behind it, and serving (content types, ETags, `html_handling`,
 * `not_found_handling`).
 *
 * Tokens are HS256 JWTs signed with a key kept in the data directory (so sessions survive a
 * restart). An upload session token names the session; once every missing hash has arrived the
 * upload answers a completion token for the same session, which the script upload then presents
 * as `assets.jwt`. Content is stored per namespace by hash: a hash already stored is not asked for
 * again (that is how "upload only what is missing" works, and why customers who need isolation
 * derive their hashes from their own id and the content, as the spec describes).
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, extname } from 'node:path';
import { apiError, ApiError } from '../../../core/errors.ts';
import type { BlobStore } from '../../../core/storage/blobs.ts';
import {
  applyHeaders,
  matchRedirect,
  parseHeaders,
  parseRedirects,
  redirectLocation,
  rulesOf,
} from './rules.ts';
import type { AssetEntry, AssetsConfig, ScriptAssets } from './store.ts';

export const HASH = /^[0-9a-f]{32}$/;
export const MAX_ASSET_BYTES = 25 * 1024 * 1024;
export const MAX_ASSET_FILES = 20_000;
/** Hashes per bucket (each bucket is one upload request). */
export const BUCKET_SIZE = 50;
export const SESSION_TTL_S = 3600;
/** Size limit of a `_redirects` or `_headers` file. */
export const MAX_RULES_BYTES = 1024 * 1024;

export const DEFAULT_CONFIG: AssetsConfig = {
  html_handling: 'auto-trailing-slash',
  not_found_handling: 'none',
  run_worker_first: false,
};

export interface TokenClaims {
  /** `upload` (send buckets) or `complete` (deploy with it). */
  kind: 'upload' | 'complete';
  /** The session document id. */
  sid: string;
  acct: string;
  exp: number;
}

const b64url = (b: Buffer | string): string => Buffer.from(b).toString('base64url');

export class Tokens {
  private readonly key: Buffer;

  constructor(keyFile: string) {
    if (existsSync(keyFile)) this.key = Buffer.from(readFileSync(keyFile, 'utf8').trim(), 'hex');
    else {
      this.key = randomBytes(32);
      mkdirSync(dirname(keyFile), { recursive: true });
      writeFileSync(keyFile, this.key.toString('hex'), { mode: 0o600 });
    }
  }

  sign(claims: TokenClaims): string {
    const head = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
    const body = b64url(JSON.stringify(claims));
    const sig = createHmac('sha256', this.key).update(`${head}.${body}`).digest();
    return `${head}.${body}.${b64url(sig)}`;
  }

  /** The claims of a token this server signed, or the reason it is refused (401). */
  verify(token: string, nowS: number): TokenClaims {
    const parts = token.split('.');
    if (parts.length !== 3) throw apiError('assets_token_invalid', 'the asset token is malformed');
    const want = createHmac('sha256', this.key).update(`${parts[0]}.${parts[1]}`).digest();
    const got = Buffer.from(parts[2], 'base64url');
    if (got.length !== want.length || !timingSafeEqual(got, want))
      throw apiError('assets_token_invalid', 'the asset token was not issued by this server');
    let claims: TokenClaims;
    try {
      claims = JSON.parse(Buffer.from(parts[1], 'base64url').toString('utf8')) as TokenClaims;
    } catch {
      throw apiError('assets_token_invalid', 'the asset token is malformed');
    }
    if (typeof claims.exp !== 'number' || claims.exp < nowS)
      throw apiError('assets_token_invalid', 'the asset token has expired');
    return claims;
  }
}

/** Validates an upload manifest: paths with a leading `/`, 32-hex hashes, sizes within limits. */
export function checkManifest(raw: unknown): Record<string, AssetEntry> {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw))
    throw apiError('worker_invalid', 'manifest must be an object keyed by file path');
  const entries = Object.entries(raw as Record<string, unknown>);
  if (entries.length === 0) throw apiError('worker_invalid', 'manifest has no files');
  if (entries.length > MAX_ASSET_FILES)
    throw apiError(
      'worker_invalid',
      `manifest has ${entries.length} files; the limit is ${MAX_ASSET_FILES}`,
    );
  const out: Record<string, AssetEntry> = {};
  for (const [path, v] of entries) {
    const where = `manifest[${JSON.stringify(path)}]`;
    if (!path.startsWith('/') || path.includes('\0') || path.split('/').includes('..'))
      throw apiError('worker_invalid', `${where}: a path must start with / and not contain ..`);
    const e = v as { hash?: unknown; size?: unknown } | null;
    if (!e || typeof e !== 'object')
      throw apiError('worker_invalid', `${where}: expected {hash, size}`);
    if (typeof e.hash !== 'string' || !HASH.test(e.hash))
      throw apiError(
        'worker_invalid',
        `${where}.hash: expected 32 lowercase hex characters (the first 16 bytes of a SHA-256), got ${JSON.stringify(e.hash)}`,
      );
    if (typeof e.size !== 'number' || !Number.isInteger(e.size) || e.size < 0)
      throw apiError('worker_invalid', `${where}.size: expected a non-negative integer`);
    if (e.size > MAX_ASSET_BYTES)
      throw apiError(
        'worker_invalid',
        `${where}.size: ${e.size} bytes; the limit is ${MAX_ASSET_BYTES} bytes per file`,
      );
    out[path] = { hash: e.hash, size: e.size };
  }
  return out;
}

/** The hash the spec gives for a file (first 16 bytes of SHA-256, hex); `salt` isolates. */
export function assetHash(content: Uint8Array | string, salt = ''): string {
  return createHash('sha256').update(salt).update(content).digest('hex').slice(0, 32);
}

export function blobKey(namespaceId: string, hash: string): string {
  return `dispatch-assets/${namespaceId}/${hash}`;
}

export function buckets(hashes: string[]): string[][] {
  const out: string[][] = [];
  for (let i = 0; i < hashes.length; i += BUCKET_SIZE) out.push(hashes.slice(i, i + BUCKET_SIZE));
  return out;
}

export function checkConfig(raw: unknown): AssetsConfig {
  if (raw === undefined || raw === null) return { ...DEFAULT_CONFIG };
  if (typeof raw !== 'object' || Array.isArray(raw))
    throw apiError('worker_invalid', 'metadata.assets.config must be an object');
  const c = raw as Record<string, unknown>;
  const out = { ...DEFAULT_CONFIG };
  const html = ['auto-trailing-slash', 'force-trailing-slash', 'drop-trailing-slash', 'none'];
  if (c.html_handling !== undefined) {
    if (typeof c.html_handling !== 'string' || !html.includes(c.html_handling))
      throw apiError(
        'worker_invalid',
        `metadata.assets.config.html_handling: expected one of ${html.join(', ')}`,
      );
    out.html_handling = c.html_handling as AssetsConfig['html_handling'];
  }
  const nf = ['none', '404-page', 'single-page-application'];
  if (c.not_found_handling !== undefined) {
    if (typeof c.not_found_handling !== 'string' || !nf.includes(c.not_found_handling))
      throw apiError(
        'worker_invalid',
        `metadata.assets.config.not_found_handling: expected one of ${nf.join(', ')}`,
      );
    out.not_found_handling = c.not_found_handling as AssetsConfig['not_found_handling'];
  }
  const rwf = c.run_worker_first;
  if (rwf !== undefined) {
    if (
      typeof rwf !== 'boolean' &&
      !(Array.isArray(rwf) && rwf.every((p) => typeof p === 'string' && /^!?\//.test(p)))
    )
      throw apiError(
        'worker_invalid',
        'metadata.assets.config.run_worker_first: expected a boolean or an array of path patterns starting with / (or !/)',
      );
    out.run_worker_first = rwf;
  }
  for (const file of ['_redirects', '_headers'] as const) {
    const text = c[file];
    if (text === undefined || text === null || text === '') continue;
    if (typeof text !== 'string')
      throw apiError('worker_invalid', `metadata.assets.config.${file}: expected the file's text`);
    if (Buffer.byteLength(text) > MAX_RULES_BYTES)
      throw apiError(
        'worker_invalid',
        `metadata.assets.config.${file}: ${Buffer.byteLength(text)} bytes; the limit is ${MAX_RULES_BYTES}`,
      );
    out[file] = text;
  }
  // Parsed now so that a bad line is refused at upload, naming the line.
  if (out._redirects) parseRedirects(out._redirects);
  if (out._headers) parseHeaders(out._headers);
  return out;
}

function globMatch(pattern: string, path: string): boolean {
  const re = new RegExp(
    `^${pattern
      .split('*')
      .map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
      .join('.*')}$`,
  );
  return re.test(path);
}

/** Whether a request path runs the script before assets are looked at. */
export function workerFirst(config: AssetsConfig, path: string): boolean {
  const r = config.run_worker_first;
  if (typeof r === 'boolean') return r;
  if (r.some((p) => p.startsWith('!') && globMatch(p.slice(1), path))) return false;
  return r.some((p) => !p.startsWith('!') && globMatch(p, path));
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.htm': 'text/html; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.js': 'application/javascript',
  '.mjs': 'application/javascript',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
  '.xml': 'application/xml',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.avif': 'image/avif',
  '.ico': 'image/x-icon',
  '.wasm': 'application/wasm',
  '.woff': 'font/woff',
  '.woff2': 'font/woff2',
  '.pdf': 'application/pdf',
  '.map': 'application/json',
  '.webmanifest': 'application/manifest+json',
};

export function contentTypeOf(path: string): string {
  return TYPES[extname(path).toLowerCase()] ?? 'application/octet-stream';
}

/** What a path resolves to: an asset to serve, a redirect, or nothing. */
export type Resolution =
  | { kind: 'asset'; path: string; entry: AssetEntry; status: number }
  | { kind: 'redirect'; location: string }
  | { kind: 'none' };

/** Resolves a request path against the manifest per `html_handling` (no not-found handling). */
export function resolvePath(assets: ScriptAssets, path: string): Resolution {
  const m = assets.manifest;
  const mode = assets.config.html_handling;
  const hit = (p: string): Resolution | undefined =>
    m[p] ? { kind: 'asset', path: p, entry: m[p], status: 200 } : undefined;
  if (mode === 'none') return hit(path) ?? { kind: 'none' };
  const slash = path.endsWith('/');
  // Canonical forms: `/a/index.html` and `/a.html` are reached without the `.html`.
  if (path.endsWith('/index.html') && m[path]) {
    const bare = path.slice(0, -'index.html'.length);
    return {
      kind: 'redirect',
      location: mode === 'drop-trailing-slash' && bare !== '/' ? bare.slice(0, -1) : bare,
    };
  }
  if (path.endsWith('.html') && m[path]) {
    const bare = path.slice(0, -'.html'.length);
    return { kind: 'redirect', location: mode === 'force-trailing-slash' ? `${bare}/` : bare };
  }
  if (slash) {
    const index = hit(`${path}index.html`);
    if (index) {
      if (mode === 'drop-trailing-slash' && path !== '/')
        return { kind: 'redirect', location: path.slice(0, -1) };
      return index;
    }
    const exact = hit(path);
    if (exact) return exact;
    if (path !== '/' && m[`${path.slice(0, -1)}.html`]) {
      if (mode === 'force-trailing-slash') return hit(`${path.slice(0, -1)}.html`)!;
      return { kind: 'redirect', location: path.slice(0, -1) };
    }
    return { kind: 'none' };
  }
  const exact = hit(path);
  if (exact) return exact;
  const html = hit(`${path}.html`);
  if (html) {
    if (mode === 'force-trailing-slash') return { kind: 'redirect', location: `${path}/` };
    return html;
  }
  if (m[`${path}/index.html`]) {
    if (mode === 'drop-trailing-slash') return hit(`${path}/index.html`)!;
    return { kind: 'redirect', location: `${path}/` };
  }
  return { kind: 'none' };
}

/** The not-found answer per `not_found_handling`, or undefined for none. */
export function notFound(assets: ScriptAssets, path: string): Resolution | undefined {
  const m = assets.manifest;
  if (assets.config.not_found_handling === 'single-page-application' && m['/index.html'])
    return { kind: 'asset', path: '/index.html', entry: m['/index.html'], status: 200 };
  if (assets.config.not_found_handling === '404-page') {
    // The nearest 404.html walking up from the request's directory.
    const dirs = path.split('/').slice(0, -1);
    for (let i = dirs.length; i >= 1; i--) {
      const p = `${dirs.slice(0, i).join('/')}/404.html`;
      if (m[p]) return { kind: 'asset', path: p, entry: m[p], status: 404 };
    }
  }
  return undefined;
}

/**
 * Serves a request from a script's assets, `_redirects` first and `_headers` on every answer.
 * `mode`: `worker` (a script runs when nothing matches: undefined), `binding` (the script's
 * `assets` binding: not-found handling, then undefined) or `only` (an assets-only script:
 * not-found handling, then a 404).
 */
export async function serveAsset(
  blobs: BlobStore,
  namespaceId: string,
  assets: ScriptAssets,
  req: Request,
  mode: 'worker' | 'binding' | 'only',
): Promise<Response | undefined> {
  const url = new URL(req.url);
  const rules = rulesOf(assets.config);
  const answer = (res: Response): Response => {
    applyHeaders(rules, url, res.headers);
    return res;
  };
  let pathname = url.pathname;
  let rewritten = false;
  const rule = matchRedirect(rules, url);
  if (rule && rule.status !== 200)
    return answer(
      new Response(null, {
        status: rule.status,
        headers: { location: redirectLocation(rule.to, url) },
      }),
    );
  if (rule) {
    pathname = new URL(rule.to, url).pathname;
    rewritten = true;
  }
  const getLike = req.method === 'GET' || req.method === 'HEAD';
  if (!getLike && mode !== 'only') return undefined;
  let path: string;
  try {
    path = decodeURIComponent(pathname);
  } catch {
    path = pathname;
  }
  let r = resolvePath(assets, path);
  if (r.kind === 'none' && mode !== 'worker') r = notFound(assets, path) ?? r;
  if (r.kind === 'none') {
    if (mode === 'only' || rewritten) return answer(new Response(null, { status: 404 }));
    return undefined;
  }
  if (!getLike) return answer(new Response(null, { status: 405, headers: { allow: 'GET, HEAD' } }));
  if (r.kind === 'redirect')
    return answer(
      new Response(null, { status: 307, headers: { location: r.location + url.search } }),
    );
  const etag = `"${r.entry.hash}"`;
  const headers = {
    'content-type': contentTypeOf(r.path),
    etag,
    'cache-control': 'public, max-age=0, must-revalidate',
  };
  const inm = req.headers.get('if-none-match');
  if (r.status === 200 && inm && inm.split(',').some((t) => t.trim().replace(/^W\//, '') === etag))
    return answer(new Response(null, { status: 304, headers }));
  const body = await blobs.get(blobKey(namespaceId, r.entry.hash));
  if (!body)
    throw new ApiError(503, [
      { code: 10013, message: `asset ${r.path} is missing from the store` },
    ]);
  return answer(
    new Response(req.method === 'HEAD' ? null : new Uint8Array(body), {
      status: r.status,
      headers: { ...headers, 'content-length': String(body.length) },
    }),
  );
}
