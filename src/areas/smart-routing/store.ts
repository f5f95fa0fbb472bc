/**
 * Smart routing state: the per-zone setting, and the two operator-controlled facts that decide
 * whether it may change — the account's billing profile and the zone's plan. Zone-scoped documents
 * disappear with their zone.
 */
import { z } from 'zod';
import { defineCollection } from '../../core/storage/collection.ts';
import type { Executor } from '../../core/storage/db.ts';

export const SETTING_ID = 'smart_routing';

export interface SmartRoutingSetting {
  value: 'on' | 'off';
  modified_on: string;
}
export const settings = defineCollection<SmartRoutingSetting>({ kind: 'smart_routing_setting' });

export const PLANS = ['free', 'pro', 'business', 'enterprise'] as const;

export const ZonePlanBody = z.object({
  plan: z.enum(PLANS),
  /** Whether the plan lets the zone's smart routing be changed (default allowed). */
  smart_routing: z.enum(['allowed', 'forbidden']).default('allowed'),
});
export interface ZonePlan {
  plan: (typeof PLANS)[number];
  smart_routing: 'allowed' | 'forbidden';
  modified_on: string | null;
}
export const PLAN_ID = 'plan';
export const zonePlans = defineCollection<ZonePlan>({ kind: 'smart_routing_zone_plan' });
const DEFAULT_PLAN: ZonePlan = { plan: 'free', smart_routing: 'allowed', modified_on: null };

export const BillingBody = z.object({ configured: z.boolean() });
export interface Billing {
  configured: boolean;
  modified_on: string | null;
}
/** Billing profiles are keyed by account id in one global scope. */
export const BILLING_SCOPE = '';
export const billing = defineCollection<Billing>({ kind: 'account_billing' });
/** Accounts have a billing profile unless an operator removes it. */
const DEFAULT_BILLING: Billing = { configured: true, modified_on: null };

export async function readPlan(db: Executor, zoneId: string): Promise<ZonePlan> {
  return (await zonePlans.get(db, zoneId, PLAN_ID))?.body ?? DEFAULT_PLAN;
}

export async function readBilling(db: Executor, accountId: string): Promise<Billing> {
  return (await billing.get(db, BILLING_SCOPE, accountId))?.body ?? DEFAULT_BILLING;
}
