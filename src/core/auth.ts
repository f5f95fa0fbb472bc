/**
 * Authentication and authorisation, used by every route through the router:
 * - `Authorization: Bearer <token>`: an API token with policies (permission groups × resources);
 * - legacy `X-Auth-Email` + `X-Auth-Key`: the global key, full access, cannot be scoped.
 * Resources follow the platform's names: `com.cloudflare.api.account.<id>` (the account and all its
 * zones), `com.cloudflare.api.account.zone.<id>`, `*` wildcards, and an account key whose value is
 * an object of zone keys (zones within that account).
 *
 * Token secrets are stored as SHA-256 hashes; verified tokens are cached for a few seconds and the
 * cache is dropped on every token write in this process.
 */
import { timingSafeEqual } from 'node:crypto';
import { BlockList, isIP } from 'node:net';
import { z } from 'zod';
import { ApiError, apiError, CODES } from './errors.ts';
import { sha256 } from './ids.ts';
import type { Clock } from './clock.ts';
import type { Executor } from './storage/db.ts';
import { defineCollection } from './storage/collection.ts';
import type { Level, PermissionRegistry } from './permissions.ts';

export const Policy = z.object({
  id: z.string(),
  effect: z.enum(['allow', 'deny']),
  permission_groups: z.array(z.object({ id: z.string(), name: z.string().optional(), meta: z.unknown().optional() })),
  resources: z.record(z.string(), z.union([z.string(), z.record(z.string(), z.string())])),
});
export type Policy = z.infer<typeof Policy>;

export const TokenBody = z.object({
  id: z.string(),
  name: z.string(),
  status: z.enum(['active', 'disabled', 'expired']),
  issued_on: z.string(),
  modified_on: z.string(),
  last_used_on: z.string().nullable().optional(),
  expires_on: z.string().nullable().optional(),
  not_before: z.string().nullable().optional(),
  policies: z.array(Policy),
  condition: z
    .object({ request_ip: z.object({ in: z.array(z.string()).optional(), not_in: z.array(z.string()).optional() }).optional() })
    .optional(),
  /** SHA-256 of the secret; never returned. */
  secret_hash: z.string(),
  /** Root tokens (seeded or created at first start) have every permission on every resource. */
  root: z.boolean().optional(),
});
export type TokenBody = z.infer<typeof TokenBody>;

/** Tokens are user-level: one scope for the single local user. */
export const USER_SCOPE = 'user';
export const tokens = defineCollection<TokenBody, 'secret_hash'>({
  kind: 'api_token',
  indexes: { secret_hash: (t) => t.secret_hash },
});

/** What a request is about, for resource checks. */
export interface Target {
  accountId?: string;
  zoneId?: string;
}

export class Principal {
  constructor(
    readonly kind: 'token' | 'legacy',
    readonly id: string,
    private readonly policies: Policy[],
    private readonly root: boolean,
    private readonly groups: PermissionRegistry,
  ) {}

  get isRoot(): boolean {
    return this.root;
  }

  /** True if the principal holds `key` at `level` for the target (or anywhere, without one). */
  allows(key: string, level: Level, target?: Target): boolean {
    if (this.root) return true;
    const matching = (p: Policy) =>
      p.permission_groups.some((ref) => {
        const g = this.groups.get(ref.id);
        return !!g && g.key === key && (g.level === level || g.level === 'edit');
      }) && (target === undefined || covers(p.resources, target));
    // Without a target ("anywhere?"), a deny limited to named accounts or zones leaves the rest
    // allowed; only an unrestricted deny (a `*` or user resource) answers no.
    const denies = (p: Policy) => target !== undefined || Object.keys(p.resources).some((k) => k.endsWith('.*') || k.startsWith(USER));
    if (this.policies.some((p) => p.effect === 'deny' && matching(p) && denies(p))) return false;
    return this.policies.some((p) => p.effect === 'allow' && matching(p));
  }

  /** True if any allow policy reaches the account (any permission group). */
  seesAccount(accountId: string): boolean {
    if (this.root) return true;
    return this.policies.some((p) => p.effect === 'allow' && covers(p.resources, { accountId }));
  }

  /** Throws 403 unless `allows`. */
  require(key: string, level: Level, target?: Target): void {
    if (this.allows(key, level, target)) return;
    const need = `${key}:${level}`;
    if (target && this.allows(key, level)) {
      throw apiError('forbidden_resource', target.zoneId ? `zone ${target.zoneId}` : `account ${target.accountId}`);
    }
    throw apiError('forbidden', need);
  }
}

const ACCOUNT = 'com.cloudflare.api.account.';
const ZONE = 'com.cloudflare.api.account.zone.';
const USER = 'com.cloudflare.api.user.';

function covers(resources: Policy['resources'], t: Target): boolean {
  for (const [key, value] of Object.entries(resources)) {
    if (key === `${ACCOUNT}*`) return true;
    if (key.startsWith(ZONE)) {
      const zone = key.slice(ZONE.length);
      if (t.zoneId && (zone === '*' || zone === t.zoneId)) return true;
      continue;
    }
    if (key.startsWith(ACCOUNT) && t.accountId && key.slice(ACCOUNT.length) === t.accountId) {
      if (typeof value === 'string') return true;
      // Nested form: the zones of this account the policy names.
      if (t.zoneId && (value[`${ZONE}*`] !== undefined || value[`${ZONE}${t.zoneId}`] !== undefined)) return true;
      if (!t.zoneId) return true;
    }
  }
  return false;
}

export interface LegacyCredentials {
  email: string;
  /** SHA-256 of the global key. */
  keyHash: string;
}

export class AuthService {
  private cache = new Map<string, { token: TokenBody | undefined; at: number }>();
  private static readonly CACHE_MS = 5_000;

  constructor(
    private readonly db: Executor,
    private readonly clock: Clock,
    readonly groups: PermissionRegistry,
    private legacy: LegacyCredentials,
  ) {}

  /** Forget cached tokens (called after any token write). */
  invalidate(): void {
    this.cache.clear();
  }

  setLegacy(creds: LegacyCredentials): void {
    this.legacy = creds;
  }

  /**
   * Authenticates a request. `clientIp` is the peer address, checked against the token's
   * `condition.request_ip`; a token with a condition is refused when the address is unknown.
   */
  async authenticate(headers: { get(name: string): string | null | undefined }, clientIp?: string): Promise<Principal> {
    const authorization = headers.get('authorization');
    const email = headers.get('x-auth-email');
    const key = headers.get('x-auth-key');
    if (!authorization && (email || key)) {
      if (!email || !key) throw apiError('auth_missing');
      if (email.toLowerCase() !== this.legacy.email.toLowerCase() || !safeEqual(sha256(key), this.legacy.keyHash)) {
        throw new ApiError(CODES.auth_invalid.status, [{ code: 9103, message: 'Unknown X-Auth-Key or X-Auth-Email' }]);
      }
      return new Principal('legacy', 'global-key', [], true, this.groups);
    }
    if (!authorization) throw apiError('auth_missing');
    const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (!m) {
      throw new ApiError(CODES.auth_malformed.status, [
        {
          code: 6003,
          message: 'Invalid request headers',
          error_chain: [{ code: 6111, message: 'Invalid format for Authorization header' }],
        },
      ]);
    }
    const token = await this.lookup(m[1]);
    if (!token || token.status === 'disabled') throw apiError('auth_invalid');
    const now = this.clock.now().getTime();
    if (token.status === 'expired' || (token.expires_on && Date.parse(token.expires_on) <= now)) {
      throw apiError('auth_expired');
    }
    if (token.not_before && Date.parse(token.not_before) > now) {
      throw new ApiError(401, [{ code: 10000, message: `Authentication error: the token is not valid before ${token.not_before}` }]);
    }
    const cond = token.condition?.request_ip;
    if (cond && !ipAllowed(cond, clientIp)) {
      throw apiError('token_location', clientIp ? plainIp(clientIp) : 'an unknown address');
    }
    return new Principal('token', token.id, token.policies, token.root === true, this.groups);
  }

  /** Finds an active token by its secret; used by authenticate and by /user/tokens/verify. */
  async lookup(secret: string): Promise<TokenBody | undefined> {
    const hash = sha256(secret);
    const hit = this.cache.get(hash);
    const now = Date.now();
    if (hit && now - hit.at < AuthService.CACHE_MS) return hit.token;
    const [doc] = await tokens.findBy(this.db, 'secret_hash', hash);
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(hash, { token: doc?.body, at: now });
    return doc?.body;
  }
}

/** `::ffff:192.0.2.1` (an IPv4 peer on a dual-stack socket) as `192.0.2.1`. */
function plainIp(ip: string): string {
  return /^::ffff:\d+\.\d+\.\d+\.\d+$/i.test(ip) ? ip.slice(7) : ip;
}

/** Parses `192.0.2.0/24`, `2001:db8::/32` or a bare address; undefined when it is neither. */
export function parseCidr(text: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | undefined {
  const [address, prefixText, extra] = text.trim().split('/');
  if (extra !== undefined) return undefined;
  const v = isIP(address);
  if (v === 0) return undefined;
  const max = v === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? max : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN;
  if (!(prefix >= 0 && prefix <= max)) return undefined;
  return { address, prefix, family: v === 4 ? 'ipv4' : 'ipv6' };
}

function listOf(cidrs: string[]): BlockList {
  const list = new BlockList();
  for (const text of cidrs) {
    const c = parseCidr(text);
    if (c) list.addSubnet(c.address, c.prefix, c.family);
  }
  return list;
}

/** True when `ip` satisfies a token's `request_ip` condition (`in`: one must match; `not_in`: none may). */
export function ipAllowed(cond: { in?: string[]; not_in?: string[] }, ip: string | undefined): boolean {
  if (!cond.in?.length && !cond.not_in?.length) return true;
  if (!ip) return false;
  const addr = plainIp(ip);
  const family = isIP(addr) === 6 ? 'ipv6' : 'ipv4';
  if (isIP(addr) === 0) return false;
  if (cond.in?.length && !listOf(cond.in).check(addr, family)) return false;
  if (cond.not_in?.length && listOf(cond.not_in).check(addr, family)) return false;
  return true;
}

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
