/** Identifier formats: 32 lowercase hex for most v4 resources, UUIDs where the spec shows them. */
import { randomBytes, randomUUID, createHash } from 'node:crypto';

export const HEX32 = /^[0-9a-f]{32}$/;
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export function hexId(): string {
  return randomBytes(16).toString('hex');
}

export function uuid(): string {
  return randomUUID();
}

/** A random secret of `length` URL-safe characters (API tokens, relay keys). */
export function secret(length = 40): string {
  return randomBytes(Math.ceil((length * 3) / 4) + 2)
    .toString('base64url')
    .slice(0, length);
}

/** A stable 32-hex id derived from a name (permission group ids must not change across restarts). */
export function stableId(name: string): string {
  return createHash('sha256').update(name).digest('hex').slice(0, 32);
}

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
