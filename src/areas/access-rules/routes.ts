/** Thin handlers for `/{zones|accounts}/{id}/firewall/access_rules/rules…`. */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { accounts, GLOBAL_SCOPE } from '../../core/accounts.ts';
import { apiError } from '../../core/errors.ts';
import { pageOf, pageQuery } from '../../core/pagination.ts';
import type { Req } from '../../core/router.ts';
import { qString } from '../../core/validate.ts';
import type { Zone } from '../zones/index.ts';
import { CreateBody, EditBody, MODES, type AccessRule, type AccessRuleStore, type Owner } from './store.ts';
import { TARGETS } from './targets.ts';

export const ListQuery = z.object({
  ...pageQuery({ perPage: 20, min: 1, max: 1000 }),
  mode: qString(z.enum(MODES)).optional(),
  'configuration.target': qString(z.enum(TARGETS)).optional(),
  'configuration.value': qString().optional(),
  notes: qString().optional(),
  match: qString(z.enum(['any', 'all'])).optional(),
  order: qString(z.enum(['configuration.target', 'configuration.value', 'mode'])).optional(),
  direction: qString(z.enum(['asc', 'desc'])).optional(),
});
type ListQuery = z.infer<typeof ListQuery>;

const RULE_ID = { rule_id: 'hex32' } as const;

interface LevelRoutes {
  prefix: string;
  name: string;
  permission: string;
  owner(req: Req<unknown, unknown>): Promise<Owner>;
}

export function mountAccessRuleRoutes(ctx: AreaContext, store: AccessRuleStore): void {
  const db = ctx.database.db;
  const levels: LevelRoutes[] = [
    {
      prefix: '/zones/:zone_id',
      name: 'zone',
      permission: 'firewall_services',
      owner: async ({ resolved }) => {
        const zone = resolved.zone_id as Zone;
        return { type: 'zone', id: zone.id, accountId: zone.account.id, name: zone.name };
      },
    },
    {
      prefix: '/accounts/:account_id',
      name: 'account',
      permission: 'account_firewall_access_rules',
      owner: async ({ params }) => {
        if (!(await accounts.get(db, GLOBAL_SCOPE, params.account_id))) throw apiError('account_not_found', params.account_id);
        return { type: 'account', id: params.account_id, accountId: params.account_id };
      },
    },
  ];

  for (const lv of levels) {
    const { router } = ctx;
    const read = { permission: lv.permission, level: 'read' } as const;
    const edit = { permission: lv.permission, level: 'edit' } as const;
    const tags = ['access-rules'];
    const base = `${lv.prefix}/firewall/access_rules/rules`;
    const op = (verb: string) => `ip-access-rules-for-${lv.name === 'zone' ? 'a-zone' : 'an-account'}-${verb}`;

    router.add(
      { method: 'GET', path: base, operationId: op('list-ip-access-rules'), summary: `List IP access rules${lv.name === 'zone' ? ' (with the account rules that apply to the zone)' : ''}`, auth: read, query: ListQuery, tags },
      async (req) => pageOf(filterAndSort(await store.visible(await lv.owner(req)), req.query), req.query),
    );

    router.add(
      { method: 'POST', path: base, operationId: op('create-an-ip-access-rule'), summary: 'Create an IP access rule', auth: edit, body: CreateBody, tags },
      async (req) => store.create(await lv.owner(req), req.body),
    );

    router.add(
      { method: 'GET', path: `${base}/:rule_id`, operationId: op('get-an-ip-access-rule'), summary: 'Get an IP access rule', auth: read, params: RULE_ID, tags },
      async (req) => store.get(await lv.owner(req), req.params.rule_id),
    );

    router.add(
      { method: 'PATCH', path: `${base}/:rule_id`, operationId: op('update-an-ip-access-rule'), summary: 'Change the mode, notes or configuration of an IP access rule', auth: edit, params: RULE_ID, body: EditBody, tags },
      async (req) => store.edit(await lv.owner(req), req.params.rule_id, req.body),
    );

    router.add(
      { method: 'DELETE', path: `${base}/:rule_id`, operationId: op('delete-an-ip-access-rule'), summary: 'Delete an IP access rule', auth: edit, params: RULE_ID, tags },
      async (req) => {
        await store.delete(await lv.owner(req), req.params.rule_id);
        return { id: req.params.rule_id };
      },
    );
  }
}

/** Applies the list filters (`match` any/all; notes is a case-insensitive substring) and order. */
export function filterAndSort(rules: AccessRule[], q: ListQuery): AccessRule[] {
  const tests: ((r: AccessRule) => boolean)[] = [];
  if (q.mode) tests.push((r) => r.mode === q.mode);
  if (q['configuration.target']) tests.push((r) => r.configuration.target === q['configuration.target']);
  const value = q['configuration.value'];
  if (value) tests.push((r) => r.configuration.value.toLowerCase() === value.trim().toLowerCase());
  const notes = q.notes;
  if (notes) tests.push((r) => r.notes.toLowerCase().includes(notes.toLowerCase()));
  const kept = tests.length === 0 ? [...rules] : rules.filter((r) => (q.match === 'any' ? tests.some((t) => t(r)) : tests.every((t) => t(r))));
  const key = (r: AccessRule): string => {
    switch (q.order) {
      case 'configuration.target':
        return r.configuration.target;
      case 'configuration.value':
        return r.configuration.value;
      case 'mode':
        return r.mode;
      default:
        return r.created_on;
    }
  };
  const dir = q.direction === 'desc' ? -1 : 1;
  return kept.sort((a, b) => {
    const ka = key(a);
    const kb = key(b);
    if (ka !== kb) return ka < kb ? -dir : dir;
    return a.id < b.id ? -dir : a.id > b.id ? dir : 0;
  });
}
