/**
 * Thin handlers: relay keys under the management API, and the credential host's
 * `/v1/turn/keys/{key_id}/credentials/…` operations (authenticated with the key secret).
 */
import { timingSafeEqual, randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { Context } from 'hono';
import type { AreaContext } from '../../core/area.ts';
import { ApiError, apiError } from '../../core/errors.ts';
import { hexId, secret } from '../../core/ids.ts';
import type { Doc } from '../../core/storage/collection.ts';
import { credentialFor, parseUsername, revocationId, revocations, turnKeys, type RelayIndex, type TurnKey } from './keys.ts';
import { iceUrls, type RelayPorts } from './ice.ts';

export interface RelayState {
  index: RelayIndex;
  /** Ports the running relay listens on (empty until the area starts). */
  ports: RelayPorts;
  host: string;
  /** Tears down live allocations of a username at once (no-op before start). */
  drop(username: string): void;
}

const KeyBody = z.object({ name: z.string().max(200).optional() });
/** ttl: 1…172800 seconds; public examples all use 86400, which is our default. */
const GenerateBody = z.object({ ttl: z.number().int().min(1).max(172_800).optional() }).optional();
const RevokeBody = z.object({ username: z.string().min(1).max(256) });
export const DEFAULT_TTL = 86_400;

const KEY_ID = { key_id: 'hex32' } as const;

export function mountRelayRoutes(ctx: AreaContext, state: RelayState): void {
  const { router, database, clock } = ctx;
  const db = database.db;
  const read = { permission: 'calls', level: 'read' } as const;
  const edit = { permission: 'calls', level: 'edit' } as const;
  const tags = ['calls'];

  const view = (k: TurnKey) => ({ uid: k.uid, name: k.name, created: k.created, modified: k.modified });
  const mustGet = async (accountId: string, uid: string): Promise<Doc<TurnKey>> => {
    const doc = await turnKeys.get(db, accountId, uid);
    if (!doc) throw apiError('relay_key_not_found', uid);
    return doc;
  };

  router.add(
    { method: 'GET', path: '/accounts/:account_id/calls/turn_keys', operationId: 'calls-turn-key-list', summary: 'List relay keys', auth: read, tags },
    async ({ params }) => (await turnKeys.all(db, params.account_id)).map((d) => view(d.body)),
  );

  router.add(
    { method: 'POST', path: '/accounts/:account_id/calls/turn_keys', operationId: 'calls-turn-key-create', summary: 'Create a relay key (the secret `key` is returned only here)', auth: edit, body: KeyBody.optional(), status: 201, tags },
    async ({ params, body }) => {
      const now = clock.now();
      const key: TurnKey = { uid: hexId(), name: body?.name ?? '', key: secret(64), created: now.toISOString(), modified: now.toISOString() };
      await turnKeys.insert(db, params.account_id, key.uid, key, now);
      await state.index.refresh(db);
      return { ...view(key), key: key.key };
    },
  );

  router.add(
    { method: 'GET', path: '/accounts/:account_id/calls/turn_keys/:key_id', operationId: 'calls-retrieve-turn-key-details', summary: 'Relay key details', auth: read, params: KEY_ID, tags },
    async ({ params }) => view((await mustGet(params.account_id, params.key_id)).body),
  );

  router.add(
    { method: 'PUT', path: '/accounts/:account_id/calls/turn_keys/:key_id', operationId: 'calls-update-turn-key', summary: 'Rename a relay key', auth: edit, params: KEY_ID, body: KeyBody, tags },
    async ({ params, body }) => {
      const doc = await mustGet(params.account_id, params.key_id);
      const now = clock.now();
      const next = { ...doc.body, name: body.name ?? doc.body.name, modified: now.toISOString() };
      return view((await turnKeys.update(db, doc, next, now)).body);
    },
  );

  router.add(
    { method: 'DELETE', path: '/accounts/:account_id/calls/turn_keys/:key_id', operationId: 'calls-delete-turn-key', summary: 'Delete a relay key (every credential minted from it stops working)', auth: edit, params: KEY_ID, tags },
    async ({ params }) => {
      const doc = await mustGet(params.account_id, params.key_id);
      await db.transaction().execute(async (tx) => {
        await turnKeys.delete(tx, doc.scopeId, doc.id);
        await revocations.deleteScope(tx, doc.id);
      });
      state.index.forgetKey(doc.id);
      // Live allocations of this key's credentials are torn down by the relay's next sweep.
      return view(doc.body);
    },
  );

  // --- credential host ------------------------------------------------------------------------

  /** The key named in the path, if the bearer is its secret; 401 otherwise. */
  const authenticateKey = async (authorization: string | undefined, keyUid: string): Promise<TurnKey> => {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (!m) throw apiError('relay_unauthorized', 'missing Authorization: Bearer <key secret>');
    const doc = await turnKeys.findById(db, keyUid);
    const given = Buffer.from(m[1]);
    if (!doc || given.length !== doc.body.key.length || !timingSafeEqual(given, Buffer.from(doc.body.key))) {
      throw apiError('relay_unauthorized', 'the bearer is not the secret of this key');
    }
    return doc.body;
  };

  /** Route option: the key secret authenticates the request before its path and body are checked. */
  const byKey = { authenticate: (c: Context, params: Record<string, string>) => authenticateKey(c.req.header('authorization'), params.key_id) };

  const mint = (key: TurnKey, ttl: number) => {
    const expiry = Math.floor(clock.now().getTime() / 1000) + ttl;
    const username = `${expiry}:${key.uid}.${randomBytes(4).toString('hex')}`;
    return { username, credential: credentialFor(key.key, username) };
  };

  router.add(
    { method: 'POST', path: '/v1/turn/keys/:key_id/credentials/generate', operationId: 'relay-credentials-generate', summary: 'Mint a short-lived relay credential (spec form: one ICE server object)', auth: 'custom', ...byKey, params: KEY_ID, body: GenerateBody, status: 201, tags },
    async ({ c, authenticated, body }) => {
      const cred = mint(authenticated as TurnKey, body?.ttl ?? DEFAULT_TTL);
      return c.json({ iceServers: { urls: iceUrls(state.host, state.ports), ...cred } }, 201);
    },
  );

  router.add(
    { method: 'POST', path: '/v1/turn/keys/:key_id/credentials/generate-ice-servers', operationId: 'relay-credentials-generate-ice-servers', summary: 'Mint a short-lived relay credential (official form: an ICE server array)', auth: 'custom', ...byKey, params: KEY_ID, body: GenerateBody, status: 201, tags },
    async ({ c, authenticated, body }) => {
      const cred = mint(authenticated as TurnKey, body?.ttl ?? DEFAULT_TTL);
      const urls = iceUrls(state.host, state.ports);
      return c.json({ iceServers: [{ urls: urls.filter((u) => u.startsWith('stun:')) }, { urls: urls.filter((u) => !u.startsWith('stun:')), ...cred }] }, 201);
    },
  );

  const revoke = async (key: TurnKey, username: string): Promise<Response> => {
    const parsed = parseUsername(username);
    if (!parsed || (parsed.keyUid !== undefined && parsed.keyUid !== key.uid)) {
      throw new ApiError(400, [{ code: 1004, message: `username: ${username} was not minted by key ${key.uid}` }]);
    }
    const now = clock.now();
    const id = revocationId(username);
    if (!(await revocations.get(db, key.uid, id))) {
      try {
        await revocations.insert(db, key.uid, id, { username, key_uid: key.uid, expires: parsed.expiry }, now);
      } catch (err) {
        // A concurrent revoke of the same username stored it first: that is the same outcome.
        if (!(await revocations.get(db, key.uid, id))) throw err;
      }
    }
    state.index.revoke(username);
    state.drop(username);
    return new Response(null, { status: 204 });
  };

  router.add(
    { method: 'POST', path: '/v1/turn/keys/:key_id/credentials/revoke', operationId: 'relay-credentials-revoke', summary: 'Revoke a credential (spec form: username in the body)', auth: 'custom', ...byKey, params: KEY_ID, body: RevokeBody, tags },
    async ({ authenticated, body }) => revoke(authenticated as TurnKey, body.username),
  );
  router.add(
    { method: 'POST', path: '/v1/turn/keys/:key_id/credentials/:username/revoke', operationId: 'relay-credentials-revoke-path', summary: 'Revoke a credential (official form: username in the path)', auth: 'custom', ...byKey, params: KEY_ID, tags },
    async ({ authenticated, params }) => revoke(authenticated as TurnKey, safeDecode(params.username)),
  );
}

/** Percent-decodes a path segment; text that is not valid percent-encoding stays as it is. */
function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
