/**
 * The platform's signing key: one RSA key pair per installation, created on first use and kept in
 * the settings table so every node and every restart signs with the same key. It signs webhook
 * bodies (`rtk-signature`, RSA-SHA256 PKCS#1 v1.5, as the platform) and participant tokens (RS256
 * JWTs carrying `meetingId`, `orgId`, `participantId`), so a receiver can check both with the key
 * published at `/.well-known/webhooks.json`.
 */
import { createPrivateKey, createPublicKey, createSign, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import { getSetting, type Executor } from '../../core/storage/db.ts';

const SETTING = 'realtime_kit.signing_key';

export interface SigningKey {
  privateKey: KeyObject;
  publicKey: KeyObject;
  publicPem: string;
}

export async function loadSigningKey(db: Executor): Promise<SigningKey> {
  let pem = await getSetting(db, SETTING);
  if (!pem) {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const fresh = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    // Two nodes starting at once may both generate: the first write wins, and both read it back.
    await db.insertInto('settings').values({ key: SETTING, value: fresh }).onConflict((oc) => oc.column('key').doNothing()).execute();
    pem = (await getSetting(db, SETTING)) ?? fresh;
  }
  const privateKey = createPrivateKey(pem);
  const publicKey = createPublicKey(privateKey);
  return { privateKey, publicKey, publicPem: publicKey.export({ type: 'spki', format: 'pem' }).toString() };
}

/** base64 RSA-SHA256 (PKCS#1 v1.5) signature of the exact body bytes. */
export function signBody(key: SigningKey, body: string): string {
  return createSign('RSA-SHA256').update(body).sign(key.privateKey, 'base64');
}

export interface TokenClaims {
  meetingId: string;
  orgId: string;
  participantId: string;
  appId: string;
  presetName: string;
}

export async function issueToken(key: SigningKey, claims: TokenClaims, now: Date, ttlSecs: number): Promise<string> {
  const iat = Math.floor(now.getTime() / 1000);
  return new SignJWT({ ...claims })
    .setProtectedHeader({ alg: 'RS256', typ: 'JWT' })
    .setIssuedAt(iat)
    .setExpirationTime(iat + ttlSecs)
    .sign(key.privateKey);
}

/** The claims of a valid token, or why it is refused (forged, expired, missing claims). */
export async function verifyToken(key: SigningKey, token: string, now: Date): Promise<{ ok: true; claims: TokenClaims } | { ok: false; reason: string }> {
  try {
    const { payload } = await jwtVerify(token, key.publicKey, { algorithms: ['RS256'], currentDate: now });
    const { meetingId, orgId, participantId, appId, presetName } = payload as Record<string, unknown>;
    if (typeof meetingId !== 'string' || typeof orgId !== 'string' || typeof participantId !== 'string' || typeof appId !== 'string') {
      return { ok: false, reason: 'the token lacks meetingId, orgId or participantId' };
    }
    return { ok: true, claims: { meetingId, orgId, participantId, appId, presetName: typeof presetName === 'string' ? presetName : '' } };
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired) return { ok: false, reason: 'the token has expired' };
    return { ok: false, reason: 'the token is not valid' };
  }
}
