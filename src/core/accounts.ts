/** Accounts: the tenancy every zone and account-level resource belongs to. */
import { z } from 'zod';
import { apiError } from './errors.ts';
import { defineCollection } from './storage/collection.ts';
import type { Executor } from './storage/db.ts';

export const AccountBody = z.object({
  id: z.string(),
  name: z.string(),
  type: z.enum(['standard', 'enterprise']),
  created_on: z.string(),
  settings: z.object({ enforce_twofactor: z.boolean(), abuse_contact_email: z.string().nullable() }),
});
export type AccountBody = z.infer<typeof AccountBody>;

/** Accounts live in one global scope. */
export const GLOBAL_SCOPE = '';
export const accounts = defineCollection<AccountBody>({ kind: 'account' });

/** 404 unless the account in the path exists (the router has already checked the permission). */
export async function requireAccount(db: Executor, accountId: string): Promise<void> {
  if (!(await accounts.get(db, GLOBAL_SCOPE, accountId))) throw apiError('account_not_found', accountId);
}
