/**
 * Tunnel tokens: standard base64 of the JSON `{"a": account tag, "t": tunnel id, "s": secret
 * (base64), "e": endpoint}`, the platform's format plus `e`, the address where connectors reach
 * this Outpost, so the token alone is enough to run a connector.
 */

export interface TunnelToken {
  /** Account id. */
  a: string;
  /** Tunnel id (UUID). */
  t: string;
  /** The tunnel secret, base64. */
  s: string;
  /** Where connectors reach Outpost (`http://host:port`); absent in the platform's own tokens. */
  e?: string;
}

export class TokenError extends Error {}

export function encodeToken(token: TunnelToken): string {
  const body: TunnelToken = { a: token.a, t: token.t, s: token.s };
  if (token.e) body.e = token.e;
  return Buffer.from(JSON.stringify(body), 'utf8').toString('base64');
}

export function decodeToken(text: string): TunnelToken {
  const trimmed = text.trim();
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(trimmed)) throw new TokenError('the token is not base64');
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(trimmed, 'base64').toString('utf8'));
  } catch {
    throw new TokenError('the token does not decode to JSON');
  }
  const p = parsed as Record<string, unknown>;
  if (
    typeof p !== 'object' ||
    p === null ||
    typeof p.a !== 'string' ||
    typeof p.t !== 'string' ||
    typeof p.s !== 'string'
  ) {
    throw new TokenError('the token lacks the account (a), tunnel (t) or secret (s) field');
  }
  const token: TunnelToken = { a: p.a, t: p.t, s: p.s };
  if (typeof p.e === 'string' && p.e) token.e = p.e;
  return token;
}

/** Decodes a base64 secret (standard or URL-safe, padding optional). */
export function secretBytes(secret: string): Buffer | undefined {
  const s = secret.trim();
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(s)) return undefined;
  return Buffer.from(s.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
}
