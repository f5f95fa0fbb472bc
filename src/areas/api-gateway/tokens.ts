/**
 * Token validation: checking key sets when they are stored, reading tokens from the configured
 * sources, and verifying them at the edge (JWS signature with `jose`, then `exp` and `nbf` against
 * the clock). Signature results are cached per token and key set, so a client that repeats its
 * token pays for one verification; expiry is checked on every request.
 */
import { compactVerify, decodeProtectedHeader, importJWK, type JWK } from 'jose';
import { apiError } from '../../core/errors.ts';
import type { Jwk, TokenConfig } from './store.ts';

export const KEY_ALGS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'HS256', 'HS384', 'HS512'] as const;
const CURVE_OF: Record<string, string> = { ES256: 'P-256', ES384: 'P-384' };

/** Parses the spec form's `jwks` text; 400 when it is not JSON or holds no keys. */
export function parseJwksText(text: string): Jwk[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw apiError('api_gateway_invalid', `jwks is not valid JSON: ${(err as Error).message}`);
  }
  const keys = (parsed as { keys?: unknown })?.keys;
  if (!Array.isArray(keys)) throw apiError('api_gateway_invalid', 'jwks must be a JSON key set: {"keys": [...]}');
  return keys as Jwk[];
}

/** Checks each key (type, algorithm, curve, importable) and returns them; 400 naming the bad one. */
export async function checkKeys(keys: unknown[]): Promise<Jwk[]> {
  if (keys.length === 0) throw apiError('api_gateway_invalid', 'the key set has no keys');
  if (keys.length > 32) throw apiError('api_gateway_invalid', 'the key set has more than 32 keys');
  const out: Jwk[] = [];
  for (const [i, key] of keys.entries()) {
    const where = `keys[${i}]`;
    if (typeof key !== 'object' || key === null || Array.isArray(key)) throw apiError('api_gateway_invalid', `${where} is not a JSON object`);
    const k = key as Jwk;
    if (k.d !== undefined) throw apiError('api_gateway_invalid', `${where} is a private key; give the public key only`);
    if (typeof k.alg !== 'string' || !(KEY_ALGS as readonly string[]).includes(k.alg)) {
      throw apiError('api_gateway_invalid', `${where}.alg must be one of ${KEY_ALGS.join(', ')}`);
    }
    const kty = k.alg.startsWith('ES') ? 'EC' : k.alg.startsWith('HS') ? 'oct' : 'RSA';
    if (k.kty !== kty) throw apiError('api_gateway_invalid', `${where}.kty must be ${kty} for ${k.alg}`);
    if (kty === 'EC' && k.crv !== CURVE_OF[k.alg]) throw apiError('api_gateway_invalid', `${where}.crv must be ${CURVE_OF[k.alg]} for ${k.alg}`);
    if (kty === 'RSA' && (typeof k.n !== 'string' || Buffer.from(k.n, 'base64url').length < 256)) {
      throw apiError('api_gateway_invalid', `${where}.n must be an RSA modulus of at least 2048 bits`);
    }
    if (k.kid !== undefined && typeof k.kid !== 'string') throw apiError('api_gateway_invalid', `${where}.kid must be a string`);
    try {
      await importJWK(k as JWK, k.alg);
    } catch (err) {
      throw apiError('api_gateway_invalid', `${where} is not a usable ${k.alg} key: ${(err as Error).message}`);
    }
    out.push(k);
  }
  return out;
}

/** Symmetric keys are used but never shown. */
export function publicView(cfg: TokenConfig): TokenConfig & { name: string; location: { header?: string; cookie?: string } } {
  const src = parseSource(cfg.token_sources[0] ?? '');
  return {
    ...cfg,
    credentials: { keys: cfg.credentials.keys.map((k) => (k.kty === 'oct' ? { kid: k.kid, alg: k.alg, kty: k.kty } : k)) },
    name: cfg.title,
    location: src ? { [src.kind]: src.name } : {},
  };
}

export interface TokenSource {
  kind: 'header' | 'cookie';
  name: string;
}

/** `http.request.headers["authorization"][0]` or `http.request.cookies["session"][0]`. */
export function parseSource(text: string): TokenSource | undefined {
  const m = /^http\.request\.(headers|cookies)\["([^"\\]{1,256})"\]\[0\]$/.exec(text.trim());
  if (!m) return undefined;
  return { kind: m[1] === 'headers' ? 'header' : 'cookie', name: m[1] === 'headers' ? m[2].toLowerCase() : m[2] };
}

export function checkSources(sources: string[]): string[] {
  if (sources.length === 0) throw apiError('api_gateway_invalid', 'token_sources must name at least one source');
  for (const s of sources) {
    if (!parseSource(s)) throw apiError('api_gateway_invalid', `token source ${JSON.stringify(s)} is not http.request.headers["<name>"][0] or http.request.cookies["<name>"][0]`);
  }
  return sources;
}

export function headerSource(header: string): string {
  return `http.request.headers["${header.toLowerCase()}"][0]`;
}

export type Verdict = { status: 'missing' } | { status: 'invalid'; reason: string } | { status: 'valid'; payload: string };

interface SignatureResult {
  ok: boolean;
  reason?: string;
  payload?: string;
  claims?: { exp?: unknown; nbf?: unknown };
}

/** Verifies tokens for one configuration (its keys imported once). */
export class TokenVerifier {
  private readonly keys: Promise<{ jwk: Jwk; key: CryptoKey | Uint8Array }[]>;
  private readonly cache = new Map<string, SignatureResult>();
  readonly sources: TokenSource[];

  constructor(readonly config: TokenConfig) {
    this.sources = config.token_sources.map(parseSource).filter((s): s is TokenSource => s !== undefined);
    this.keys = Promise.all(config.credentials.keys.map(async (jwk) => ({ jwk, key: (await importJWK(jwk as JWK, jwk.alg)) as CryptoKey | Uint8Array })));
  }

  /** The token from the first source the request carries (a `Bearer ` prefix is dropped). */
  tokenOf(header: (name: string) => string | undefined, cookie: (name: string) => string | undefined): string | undefined {
    for (const s of this.sources) {
      const raw = s.kind === 'header' ? header(s.name) : cookie(s.name);
      if (raw) return raw.replace(/^Bearer\s+/i, '').trim();
    }
    return undefined;
  }

  async verify(token: string | undefined, nowMs: number): Promise<Verdict> {
    if (!token) return { status: 'missing' };
    let sig = this.cache.get(token);
    if (!sig) {
      sig = await this.checkSignature(token);
      if (this.cache.size >= 10_000) this.cache.delete(this.cache.keys().next().value as string);
      this.cache.set(token, sig);
    }
    if (!sig.ok) return { status: 'invalid', reason: sig.reason ?? 'invalid' };
    const now = Math.floor(nowMs / 1000);
    const { exp, nbf } = sig.claims ?? {};
    if (exp !== undefined && (typeof exp !== 'number' || now >= exp)) return { status: 'invalid', reason: 'expired' };
    if (nbf !== undefined && (typeof nbf !== 'number' || now < nbf)) return { status: 'invalid', reason: 'not yet valid' };
    return { status: 'valid', payload: sig.payload! };
  }

  private async checkSignature(token: string): Promise<SignatureResult> {
    let header: { alg?: string; kid?: string };
    try {
      header = decodeProtectedHeader(token);
    } catch {
      return { ok: false, reason: 'malformed' };
    }
    const keys = (await this.keys).filter((k) => k.jwk.alg === header.alg && (header.kid === undefined || k.jwk.kid === undefined || k.jwk.kid === header.kid));
    if (keys.length === 0) return { ok: false, reason: 'no key for the token' };
    for (const { key } of keys) {
      try {
        const { payload } = await compactVerify(token, key, { algorithms: [header.alg!] });
        const text = new TextDecoder().decode(payload);
        let claims: unknown;
        try {
          claims = JSON.parse(text);
        } catch {
          return { ok: false, reason: 'payload is not JSON' };
        }
        if (typeof claims !== 'object' || claims === null || Array.isArray(claims)) return { ok: false, reason: 'payload is not a JSON object' };
        return { ok: true, payload: text, claims: claims as SignatureResult['claims'] };
      } catch {
        /* try the next key with this kid/alg */
      }
    }
    return { ok: false, reason: 'signature' };
  }
}
