/** Thin handlers for `/accounts` and `/user/tokens`. */
import type { AreaContext } from '../../core/area.ts';
import { accounts, GLOBAL_SCOPE, type AccountBody } from '../../core/accounts.ts';
import { apiError } from '../../core/errors.ts';
import { pageOf } from '../../core/pagination.ts';
import { ApiError, CODES } from '../../core/errors.ts';
import { tokens, USER_SCOPE, type Policy, type TokenBody } from '../../core/auth.ts';
import { hexId, secret, sha256, stableId } from '../../core/ids.ts';
import type { Doc } from '../../core/storage/collection.ts';
import { CreateTokenBody, ListAccountsQuery, ListTokensQuery, UpdateTokenBody, PolicyInput } from './schemas.ts';
import type { z } from 'zod';

const TOKEN_ID = { token_id: 'hex32' } as const;

export function mountAccountRoutes(ctx: AreaContext): void {
  const { router, database, clock, permissions, auth } = ctx;
  const db = database.db;

  router.add(
    { method: 'GET', path: '/accounts', operationId: 'accounts-list-accounts', summary: 'List accounts', auth: 'authenticated', query: ListAccountsQuery, tags: ['accounts'] },
    async ({ query, principal }) => {
      let all = (await accounts.all(db, GLOBAL_SCOPE)).map(accountView).filter((a) => principal!.isRoot || principal!.seesAccount(a.id));
      if (query.name) all = all.filter((a) => a.name.toLowerCase().includes(query.name!.toLowerCase()));
      if (query.direction === 'desc') all.reverse();
      return pageOf(all, query);
    },
  );

  router.add(
    { method: 'GET', path: '/accounts/:account_id', operationId: 'accounts-account-details', summary: 'Account details', auth: 'authenticated', tags: ['accounts'] },
    async ({ params, principal }) => {
      const doc = await accounts.get(db, GLOBAL_SCOPE, params.account_id);
      if (!doc) throw apiError('account_not_found', params.account_id);
      if (!principal!.isRoot && !principal!.seesAccount(doc.id)) throw apiError('forbidden_resource', `account ${doc.id}`);
      return accountView(doc);
    },
  );

  router.add(
    { method: 'GET', path: '/user/tokens/permission_groups', operationId: 'permission-groups-list', summary: 'List permission groups', auth: { permission: 'api_tokens', level: 'read' }, tags: ['tokens'] },
    async () => permissions.list().map((g) => ({ id: g.id, name: g.name, scopes: g.scopes })),
  );

  // The one user of this server (the owner of the global key and of every token), as deploy tools
  // read it to show who is logged in.
  router.add(
    { method: 'GET', path: '/user', operationId: 'user-user-details', summary: 'The user behind the credentials', auth: 'authenticated', tags: ['user'] },
    async () => ({
      id: stableId(ctx.config.apiEmail),
      email: ctx.config.apiEmail,
      username: ctx.config.apiEmail.split('@')[0],
      first_name: null,
      last_name: null,
      suspended: false,
      two_factor_authentication_enabled: false,
      has_pro_zones: false,
      has_business_zones: false,
      has_enterprise_zones: false,
      organizations: [],
    }),
  );

  router.add(
    { method: 'GET', path: '/user/tokens/verify', operationId: 'user-api-tokens-verify-token', summary: 'Verify the calling token', auth: 'authenticated', tags: ['tokens'] },
    async ({ c, principal }) => {
      if (principal!.kind !== 'token') {
        throw new ApiError(400, [{ code: 1000, message: 'Token verification needs an Authorization: Bearer token, not the global key' }]);
      }
      const m = /^Bearer\s+(\S+)/i.exec(c.req.header('authorization') ?? '');
      const token = m ? await auth.lookup(m[1]) : undefined;
      if (!token) throw apiError('auth_invalid');
      return { id: token.id, status: token.status, expires_on: token.expires_on ?? undefined, not_before: token.not_before ?? undefined };
    },
  );

  router.add(
    { method: 'GET', path: '/user/tokens', operationId: 'user-api-tokens-list-tokens', summary: 'List tokens', auth: { permission: 'api_tokens', level: 'read' }, query: ListTokensQuery, tags: ['tokens'] },
    async ({ query }) => {
      const all = (await tokens.all(db, USER_SCOPE)).map(tokenView);
      if (query.direction === 'desc') all.reverse();
      return pageOf(all, query);
    },
  );

  router.add(
    { method: 'POST', path: '/user/tokens', operationId: 'user-api-tokens-create-token', summary: 'Create a token (the secret is returned only here)', auth: { permission: 'api_tokens', level: 'edit' }, body: CreateTokenBody, tags: ['tokens'] },
    async ({ body }) => {
      const now = clock.now();
      const value = secret(40);
      const id = hexId();
      const token: TokenBody = {
        id,
        name: body.name,
        status: 'active',
        issued_on: now.toISOString(),
        modified_on: now.toISOString(),
        last_used_on: null,
        expires_on: body.expires_on ?? null,
        not_before: body.not_before ?? null,
        policies: checkPolicies(body.policies),
        condition: body.condition,
        secret_hash: sha256(value),
      };
      const doc = await tokens.insert(db, USER_SCOPE, id, token, now);
      auth.invalidate();
      return { ...tokenView(doc), value };
    },
  );

  router.add(
    { method: 'GET', path: '/user/tokens/:token_id', operationId: 'user-api-tokens-token-details', summary: 'Token details', auth: { permission: 'api_tokens', level: 'read' }, params: TOKEN_ID, tags: ['tokens'] },
    async ({ params }) => tokenView(await mustGetToken(params.token_id)),
  );

  router.add(
    { method: 'PUT', path: '/user/tokens/:token_id', operationId: 'user-api-tokens-update-token', summary: 'Update a token', auth: { permission: 'api_tokens', level: 'edit' }, params: TOKEN_ID, body: UpdateTokenBody, tags: ['tokens'] },
    async ({ params, body }) => {
      const doc = await mustGetToken(params.token_id);
      const now = clock.now();
      const next: TokenBody = {
        ...doc.body,
        name: body.name,
        policies: checkPolicies(body.policies),
        status: body.status ?? doc.body.status,
        expires_on: body.expires_on === undefined ? doc.body.expires_on : body.expires_on,
        not_before: body.not_before === undefined ? doc.body.not_before : body.not_before,
        condition: body.condition ?? doc.body.condition,
        modified_on: now.toISOString(),
      };
      const updated = await tokens.update(db, doc, next, now);
      auth.invalidate();
      return tokenView(updated);
    },
  );

  router.add(
    { method: 'DELETE', path: '/user/tokens/:token_id', operationId: 'user-api-tokens-delete-token', summary: 'Delete a token', auth: { permission: 'api_tokens', level: 'edit' }, params: TOKEN_ID, tags: ['tokens'] },
    async ({ params }) => {
      const doc = await mustGetToken(params.token_id);
      await tokens.delete(db, doc.scopeId, doc.id);
      auth.invalidate();
      return { id: doc.id };
    },
  );

  async function mustGetToken(id: string): Promise<Doc<TokenBody>> {
    const doc = await tokens.get(db, USER_SCOPE, id);
    if (!doc) throw apiError('token_not_found', id);
    return doc;
  }

  /** Every group id must exist and every resource key must be one the platform knows. */
  function checkPolicies(input: z.infer<typeof PolicyInput>[]): Policy[] {
    return input.map((p, i) => {
      const groups = p.permission_groups.map((ref, j) => {
        const g = permissions.get(ref.id) ?? (ref.name ? permissions.findByName(ref.name) : undefined);
        if (!g) throw badPolicy(`policies.${i}.permission_groups.${j}.id: unknown permission group ${ref.id}; see GET /user/tokens/permission_groups`);
        return { id: g.id, name: g.name };
      });
      for (const key of Object.keys(p.resources)) {
        if (!/^com\.cloudflare\.api\.(account(\.zone)?|user)\.(\*|[0-9a-f]{32})$/.test(key)) {
          throw badPolicy(`policies.${i}.resources: unknown resource ${key}; use com.cloudflare.api.account.<id>, com.cloudflare.api.account.zone.<id> or a * wildcard`);
        }
      }
      return { id: p.id ?? hexId(), effect: p.effect, permission_groups: groups, resources: p.resources as Policy['resources'] };
    });
  }
}

function badPolicy(message: string): ApiError {
  return new ApiError(CODES.token_invalid_policy.status, [{ code: CODES.token_invalid_policy.code, message }]);
}

function accountView(doc: Doc<AccountBody>): AccountBody {
  return doc.body;
}

function tokenView(doc: Doc<TokenBody>) {
  const { secret_hash: _hash, root: _root, ...rest } = doc.body;
  return rest;
}
