/**
 * Relay keys and revoked credentials, and the in-memory index the TURN server asks on every
 * authentication. The index is rebuilt from the database at start, after every local write, and
 * every couple of seconds (so several Outpost nodes sharing a database converge quickly).
 */
import { createHmac } from 'node:crypto';
import { defineCollection } from '../../core/storage/collection.ts';
import type { Executor } from '../../core/storage/db.ts';
import { sha256 } from '../../core/ids.ts';

export interface TurnKey {
  uid: string;
  name: string;
  /** The shared secret credentials are minted with (the key's `key`). */
  key: string;
  created: string;
  modified: string;
}

export interface Revocation {
  username: string;
  key_uid: string;
  /** Unix seconds after which the username is dead anyway and the row can go. */
  expires: number;
}

export const turnKeys = defineCollection<TurnKey>({ kind: 'turn_key' });
/** Scoped by key uid; id = sha256(username). */
export const revocations = defineCollection<Revocation>({ kind: 'turn_revocation' });

/** `<expiry>:<key uid>.<random>` — the label names the key so authentication needs one HMAC. */
export function parseUsername(username: string): { expiry: number; keyUid?: string } | undefined {
  const m = /^(\d{1,12}):(.*)$/.exec(username);
  if (!m) return undefined;
  const keyUid = /^([0-9a-f]{32})\./.exec(m[2])?.[1];
  return { expiry: Number(m[1]), keyUid };
}

/** The shared-secret scheme coturn's `use-auth-secret` also accepts. */
export function credentialFor(secret: string, username: string): string {
  return createHmac('sha1', secret).update(username).digest('base64');
}

export function revocationId(username: string): string {
  return sha256(username).slice(0, 32);
}

export class RelayIndex {
  private secrets = new Map<string, string>();
  private revoked = new Set<string>();
  /**
   * Revocations and deletions made on this node, kept across refreshes: a refresh whose read
   * started before the row was written must not bring the secret or username back to life.
   * Usernames are kept until they expire; deleted key uids are never reused.
   */
  private localRevoked = new Map<string, number>();
  private deletedKeys = new Set<string>();

  /** Refreshes overlap (the timer's and a route's); only a read newer than the last applied one may land. */
  private refreshesStarted = 0;
  private refreshApplied = 0;

  async refresh(db: Executor): Promise<void> {
    const seq = ++this.refreshesStarted;
    const [keys, revs] = await Promise.all([turnKeys.all(db, null), revocations.all(db, null)]);
    // A slower read that began before a newer one (say, before a key was created) would put stale state back.
    if (seq < this.refreshApplied) return;
    this.refreshApplied = seq;
    const nowSec = Date.now() / 1000;
    for (const [username, expiry] of this.localRevoked) if (expiry < nowSec) this.localRevoked.delete(username);
    this.secrets = new Map(keys.filter((d) => !this.deletedKeys.has(d.body.uid)).map((d) => [d.body.uid, d.body.key]));
    this.revoked = new Set([...revs.map((d) => d.body.username), ...this.localRevoked.keys()]);
  }

  /** Deletes revocation rows of usernames past their expiry (they are refused anyway). */
  async pruneExpired(db: Executor, nowSec: number): Promise<number> {
    let n = 0;
    for (const d of await revocations.all(db, null)) {
      if (d.body.expires < nowSec && (await revocations.delete(db, d.scopeId, d.id))) n++;
    }
    return n;
  }

  secretOf(keyUid: string): string | undefined {
    return this.secrets.get(keyUid);
  }

  revoke(username: string): void {
    this.revoked.add(username);
    this.localRevoked.set(username, parseUsername(username)?.expiry ?? Infinity);
  }

  forgetKey(keyUid: string): void {
    this.secrets.delete(keyUid);
    this.deletedKeys.add(keyUid);
  }

  /**
   * Candidate secrets for a TURN username: the key named in the label, or every key for
   * usernames minted elsewhere with one of our secrets. Revoked names get none.
   */
  secretsFor(username: string): string[] {
    if (this.revoked.has(username)) return [];
    const parsed = parseUsername(username);
    if (!parsed) return [];
    if (parsed.keyUid) {
      const secret = this.secrets.get(parsed.keyUid);
      return secret ? [secret] : [];
    }
    return [...this.secrets.values()];
  }
}
