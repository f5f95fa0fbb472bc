/**
 * Thin handlers for the smart routing setting (both paths) and the operator's billing and plan
 * switches under `/_outpost/…`. All answers use the v4 envelope.
 */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { accounts, GLOBAL_SCOPE } from '../../core/accounts.ts';
import type { Principal } from '../../core/auth.ts';
import { apiError } from '../../core/errors.ts';
import { lockScope } from '../../core/storage/locks.ts';
import type { Executor } from '../../core/storage/db.ts';
import type { Zone } from '../zones/index.ts';
import {
  billing,
  BILLING_SCOPE,
  BillingBody,
  PLAN_ID,
  readBilling,
  readPlan,
  settings,
  SETTING_ID,
  zonePlans,
  ZonePlanBody,
  type Billing,
  type ZonePlan,
} from './store.ts';

export const ZONE_SETTINGS = 'zone_settings';
/** The official client's path segment, then the spec's neutral one. */
export const PREFIXES = ['argo', 'acceleration'] as const;

const EditBody = z.object({ value: z.enum(['on', 'off']) });

export function mountSmartRoutingRoutes(ctx: AreaContext): void {
  const { router, database, clock } = ctx;
  const db = database.db;
  const tags = ['smart-routing'];

  async function view(tx: Executor, zone: Zone, principal: Principal) {
    const doc = await settings.get(tx, zone.id, SETTING_ID);
    const editable =
      principal.allows(ZONE_SETTINGS, 'edit', { accountId: zone.account.id, zoneId: zone.id }) &&
      (await readBilling(tx, zone.account.id)).configured &&
      (await readPlan(tx, zone.id)).smart_routing === 'allowed';
    return {
      id: SETTING_ID,
      value: doc?.body.value ?? 'off',
      editable,
      // The setting exists, switched off, since the zone was created.
      modified_on: doc?.body.modified_on ?? zone.created_on,
    };
  }

  for (const prefix of PREFIXES) {
    const path = `/zones/:zone_id/${prefix}/smart_routing`;
    const official = prefix === 'argo';
    router.add(
      {
        method: 'GET',
        path,
        operationId: official
          ? 'argo-smart-routing-get-argo-smart-routing-setting'
          : 'acceleration-smart-routing-get',
        summary: 'Get the smart routing setting',
        auth: { permission: ZONE_SETTINGS, level: 'read' },
        tags,
      },
      async ({ resolved, principal }) => view(db, resolved.zone_id as Zone, principal!),
    );
    router.add(
      {
        method: 'PATCH',
        path,
        operationId: official
          ? 'argo-smart-routing-patch-argo-smart-routing-setting'
          : 'acceleration-smart-routing-patch',
        summary: 'Switch smart routing on or off',
        auth: { permission: ZONE_SETTINGS, level: 'edit' },
        body: EditBody,
        tags,
      },
      async ({ resolved, body, principal }) => {
        const zone = resolved.zone_id as Zone;
        return db.transaction().execute(async (tx) => {
          await lockScope(tx, database.dialect, `smart-routing:${zone.id}`);
          if (!(await readBilling(tx, zone.account.id)).configured)
            throw apiError('smart_routing_no_billing', zone.account.id);
          const plan = await readPlan(tx, zone.id);
          if (plan.smart_routing !== 'allowed')
            throw apiError('smart_routing_plan_forbids', plan.plan);
          const doc = await settings.get(tx, zone.id, SETTING_ID);
          const current = doc?.body.value ?? 'off';
          // modified_on moves only when the value does.
          if (current !== body.value) {
            const now = clock.now();
            const next = { value: body.value, modified_on: now.toISOString() };
            if (doc) await settings.update(tx, doc, next, now);
            else await settings.insert(tx, zone.id, SETTING_ID, next, now);
          }
          return view(tx, zone, principal!);
        });
      },
    );
  }

  // --- operator ----------------------------------------------------------------------------------

  const rootOnly = (principal: Principal) => {
    if (!principal.isRoot) throw apiError('smart_routing_operator_only');
  };
  const billingPath = '/_outpost/accounts/:account_id/billing';
  const billingView = (accountId: string, b: Billing) => ({ account_id: accountId, ...b });
  const planPath = '/_outpost/zones/:zone_id/plan';
  const planView = (zoneId: string, p: ZonePlan) => ({ zone_id: zoneId, ...p });
  const ensureAccount = async (accountId: string) => {
    if (!(await accounts.get(db, GLOBAL_SCOPE, accountId)))
      throw apiError('account_not_found', accountId);
  };

  router.add(
    {
      method: 'GET',
      path: billingPath,
      operationId: 'outpost_get_account_billing',
      summary: 'Operator: read the account billing profile',
      auth: 'authenticated',
      tags: ['operator'],
    },
    async ({ params, principal }) => {
      rootOnly(principal!);
      await ensureAccount(params.account_id);
      return billingView(params.account_id, await readBilling(db, params.account_id));
    },
  );

  router.add(
    {
      method: 'PUT',
      path: billingPath,
      operationId: 'outpost_set_account_billing',
      summary: 'Operator: configure or remove the account billing profile',
      auth: 'authenticated',
      body: BillingBody,
      tags: ['operator'],
    },
    async ({ params, body, principal }) => {
      rootOnly(principal!);
      await ensureAccount(params.account_id);
      const next: Billing = { configured: body.configured, modified_on: clock.now().toISOString() };
      await db.transaction().execute(async (tx) => {
        await lockScope(tx, database.dialect, `billing:${params.account_id}`);
        const doc = await billing.get(tx, BILLING_SCOPE, params.account_id);
        if (doc) await billing.update(tx, doc, next, clock.now());
        else await billing.insert(tx, BILLING_SCOPE, params.account_id, next, clock.now());
      });
      return billingView(params.account_id, next);
    },
  );

  // Zone-scoped: the router resolves the zone (404 when unknown); the root check follows.
  router.add(
    {
      method: 'GET',
      path: planPath,
      operationId: 'outpost_get_zone_plan',
      summary: 'Operator: read the zone plan',
      auth: { permission: ZONE_SETTINGS, level: 'read' },
      tags: ['operator'],
    },
    async ({ resolved, principal }) => {
      rootOnly(principal!);
      const zone = resolved.zone_id as Zone;
      return planView(zone.id, await readPlan(db, zone.id));
    },
  );

  router.add(
    {
      method: 'PUT',
      path: planPath,
      operationId: 'outpost_set_zone_plan',
      summary: 'Operator: set the zone plan and whether it allows smart routing changes',
      auth: { permission: ZONE_SETTINGS, level: 'edit' },
      body: ZonePlanBody,
      tags: ['operator'],
    },
    async ({ resolved, body, principal }) => {
      rootOnly(principal!);
      const zone = resolved.zone_id as Zone;
      const next: ZonePlan = {
        plan: body.plan,
        smart_routing: body.smart_routing,
        modified_on: clock.now().toISOString(),
      };
      await db.transaction().execute(async (tx) => {
        await lockScope(tx, database.dialect, `smart-routing:${zone.id}`);
        const doc = await zonePlans.get(tx, zone.id, PLAN_ID);
        if (doc) await zonePlans.update(tx, doc, next, clock.now());
        else await zonePlans.insert(tx, zone.id, PLAN_ID, next, clock.now());
      });
      return planView(zone.id, next);
    },
  );
}
