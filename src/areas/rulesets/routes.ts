/** Thin handlers for `/zones/{zone_id}/rulesets…` and `/accounts/{account_id}/rulesets…`. */
import type { Context } from 'hono';
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { accounts, GLOBAL_SCOPE } from '../../core/accounts.ts';
import { ApiError, apiError, CODES } from '../../core/errors.ts';
import type { Req } from '../../core/router.ts';
import { qBool, qInt, qString } from '../../core/validate.ts';
import type { Zone } from '../zones/index.ts';
import type { RulesetSummary } from './model.ts';
import type { Owner, RulesetStore } from './store.ts';
import { parseNewRule, parseRulePatch, parseRulesetBody } from './validate.ts';

const ListQuery = z.object({
  cursor: qString().optional(),
  per_page: qInt(z.number().int().min(1).max(50)).default(50),
});
const DryRun = z.object({ dry_run: qBool().optional() });
/** Bodies are checked by the area itself, so failures carry `source.pointer`. */
const AnyBody = z.unknown();

const RULESET_ID = { ruleset_id: 'hex32' } as const;
const RULE_ID = { ruleset_id: 'hex32', rule_id: 'hex32' } as const;

interface LevelRoutes {
  prefix: string;
  level: 'zone' | 'account';
  /** Part of operation ids: `Zone` or `Account`. */
  name: string;
  permission: string;
  owner(req: Req<unknown, unknown>): Promise<Owner>;
}

export function mountRulesetRoutes(ctx: AreaContext, store: RulesetStore): void {
  const db = ctx.database.db;
  const levels: LevelRoutes[] = [
    {
      prefix: '/zones/:zone_id',
      level: 'zone',
      name: 'Zone',
      permission: 'zone_waf',
      owner: async ({ resolved }) => {
        const zone = resolved.zone_id as Zone;
        return { level: 'zone', id: zone.id, accountId: zone.account.id };
      },
    },
    {
      prefix: '/accounts/:account_id',
      level: 'account',
      name: 'Account',
      permission: 'account_rulesets',
      owner: async ({ params }) => {
        if (!(await accounts.get(db, GLOBAL_SCOPE, params.account_id))) throw apiError('account_not_found', params.account_id);
        return { level: 'account', id: params.account_id, accountId: params.account_id };
      },
    },
  ];
  for (const level of levels) mountLevel(ctx, store, level);
}

function mountLevel(ctx: AreaContext, store: RulesetStore, lv: LevelRoutes): void {
  const { router } = ctx;
  const read = { permission: lv.permission, level: 'read' } as const;
  const edit = { permission: lv.permission, level: 'edit' } as const;
  const tags = ['rulesets'];
  const base = `${lv.prefix}/rulesets`;
  const owner = (req: Req<unknown, unknown>) => lv.owner(req);
  const noContent = () => new Response(null, { status: 204 });

  router.add(
    { method: 'GET', path: base, operationId: `list${lv.name}Rulesets`, summary: `List the rulesets of ${lv.level === 'zone' ? 'a zone' : 'an account'} (cursor paging)`, auth: read, query: ListQuery, tags },
    async (req) => cursorPage(req.c, await store.list(await owner(req)), req.query.cursor, req.query.per_page),
  );

  router.add(
    { method: 'POST', path: base, operationId: `create${lv.name}Ruleset`, summary: 'Create a ruleset (kind custom, or the phase entry point kind)', auth: edit, query: DryRun, body: AnyBody, tags },
    async (req) => store.create(await owner(req), parseRulesetBody(req.body), req.query.dry_run === true),
  );

  // --- phase entry points -----------------------------------------------------------------
  const entry = `${base}/phases/:ruleset_phase/entrypoint`;
  const entrypointOf = async (req: Req<unknown, unknown>) => {
    const o = await owner(req);
    const doc = await store.entrypoint(o, req.params.ruleset_phase);
    if (!doc) throw apiError('ruleset_entrypoint_not_found', req.params.ruleset_phase);
    return { o, ruleset: doc.body };
  };

  router.add(
    { method: 'GET', path: entry, operationId: `get${lv.name}EntrypointRuleset`, summary: 'Get the entry point ruleset of a phase (404 until the first PUT)', auth: read, tags },
    async (req) => {
      // The snippets phase's rules live with the snippets area (spec: snippet rules are read here).
      const zoneId = req.params.zone_id;
      if (zoneId && req.params.ruleset_phase === 'http_request_snippets') {
        const snippets = ctx.services.optional<{ entrypoint(zoneId: string): Promise<unknown> }>('snippets');
        const view = await snippets?.entrypoint(zoneId);
        if (view) return view;
      }
      return (await entrypointOf(req)).ruleset;
    },
  );

  router.add(
    { method: 'PUT', path: entry, operationId: `update${lv.name}EntrypointRuleset`, summary: 'Replace the rules of a phase entry point, creating it if needed', auth: edit, query: DryRun, body: AnyBody, tags },
    async (req) => store.putEntrypoint(await owner(req), req.params.ruleset_phase, parseRulesetBody(req.body), req.query.dry_run === true),
  );

  router.add(
    { method: 'GET', path: `${entry}/versions`, operationId: `list${lv.name}EntrypointRulesetVersions`, summary: 'List the versions of a phase entry point', auth: read, tags },
    async (req) => {
      const { o, ruleset } = await entrypointOf(req);
      return store.versions(o, ruleset.id);
    },
  );

  router.add(
    { method: 'GET', path: `${entry}/versions/:ruleset_version`, operationId: `get${lv.name}EntrypointRulesetVersion`, summary: 'Get one version of a phase entry point', auth: read, tags },
    async (req) => {
      const { o, ruleset } = await entrypointOf(req);
      return store.version(o, ruleset.id, req.params.ruleset_version);
    },
  );

  // --- one ruleset ------------------------------------------------------------------------
  const one = `${base}/:ruleset_id`;

  router.add(
    { method: 'GET', path: one, operationId: `get${lv.name}Ruleset`, summary: 'Get a ruleset with its rules', auth: read, params: RULESET_ID, tags },
    async (req) => store.get(await owner(req), req.params.ruleset_id),
  );

  router.add(
    { method: 'PUT', path: one, operationId: `update${lv.name}Ruleset`, summary: 'Replace a ruleset (makes a new version)', auth: edit, params: RULESET_ID, query: DryRun, body: AnyBody, tags },
    async (req) => store.update(await owner(req), req.params.ruleset_id, parseRulesetBody(req.body), req.query.dry_run === true),
  );

  router.add(
    { method: 'DELETE', path: one, operationId: `delete${lv.name}Ruleset`, summary: 'Delete a ruleset and its versions (204)', auth: edit, params: RULESET_ID, tags },
    async (req) => {
      await store.delete(await owner(req), req.params.ruleset_id);
      return noContent();
    },
  );

  router.add(
    { method: 'GET', path: `${one}/versions`, operationId: `list${lv.name}RulesetVersions`, summary: 'List the versions of a ruleset', auth: read, params: RULESET_ID, tags },
    async (req) => store.versions(await owner(req), req.params.ruleset_id),
  );

  router.add(
    { method: 'GET', path: `${one}/versions/:ruleset_version`, operationId: `get${lv.name}RulesetVersion`, summary: 'Get one version of a ruleset', auth: read, params: RULESET_ID, tags },
    async (req) => store.version(await owner(req), req.params.ruleset_id, req.params.ruleset_version),
  );

  router.add(
    { method: 'DELETE', path: `${one}/versions/:ruleset_version`, operationId: `delete${lv.name}RulesetVersion`, summary: 'Delete an old version of a ruleset (204)', auth: edit, params: RULESET_ID, tags },
    async (req) => {
      await store.deleteVersion(await owner(req), req.params.ruleset_id, req.params.ruleset_version);
      return noContent();
    },
  );

  // --- rules ------------------------------------------------------------------------------
  router.add(
    { method: 'POST', path: `${one}/rules`, operationId: `create${lv.name}RulesetRule`, summary: 'Add a rule (at the end, or at position {before|after|index}); answers the ruleset', auth: edit, params: RULESET_ID, query: DryRun, body: AnyBody, tags },
    async (req) => {
      const { rule, position } = parseNewRule(req.body);
      return store.addRule(await owner(req), req.params.ruleset_id, rule, position, req.query.dry_run === true);
    },
  );

  router.add(
    { method: 'PATCH', path: `${one}/rules/:rule_id`, operationId: `update${lv.name}RulesetRule`, summary: 'Change fields of a rule, or move it; answers the ruleset', auth: edit, params: RULE_ID, query: DryRun, body: AnyBody, tags },
    async (req) => {
      const { patch, position } = parseRulePatch(req.body);
      return store.patchRule(await owner(req), req.params.ruleset_id, req.params.rule_id, patch, position, req.query.dry_run === true);
    },
  );

  router.add(
    { method: 'DELETE', path: `${one}/rules/:rule_id`, operationId: `delete${lv.name}RulesetRule`, summary: 'Delete a rule; answers the ruleset', auth: edit, params: RULE_ID, query: DryRun, tags },
    async (req) => store.deleteRule(await owner(req), req.params.ruleset_id, req.params.rule_id, req.query.dry_run === true),
  );
}

/**
 * A cursor page of summaries (sorted by id): `result_info.cursor` and `result_info.cursors.after`
 * name the last id of the page while more follow, and are absent on the last page.
 */
function cursorPage(c: Context, all: RulesetSummary[], cursor: string | undefined, perPage: number): Response {
  let start = 0;
  if (cursor) {
    const after = Buffer.from(cursor, 'base64url').toString('utf8');
    if (!/^[0-9a-f]{32}$/.test(after)) {
      throw new ApiError(400, [{ code: CODES.ruleset_invalid.code, message: 'cursor: not a cursor from a previous page' }]);
    }
    start = all.findIndex((r) => r.id > after);
    if (start < 0) start = all.length;
  }
  const items = all.slice(start, start + perPage);
  const more = start + perPage < all.length;
  const info: Record<string, unknown> = { count: items.length, per_page: perPage };
  if (more) {
    const next = Buffer.from(items[items.length - 1].id).toString('base64url');
    info.cursor = next;
    info.cursors = { after: next };
  }
  return c.json({ result: items, success: true, errors: [], messages: [], result_info: info });
}
