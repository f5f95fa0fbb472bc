/**
 * Serialises writers of one scope inside a transaction, so check-then-write rules (no duplicate
 * DNS record, no duplicate zone name) hold under concurrency. SQLite transactions already run one
 * at a time on its single connection; PostgreSQL takes a transaction-scoped advisory lock.
 */
import { sql } from 'kysely';
import type { Tx } from './db.ts';

export async function lockScope(tx: Tx, dialect: 'sqlite' | 'postgres', key: string): Promise<void> {
  if (dialect !== 'postgres') return;
  await sql`select pg_advisory_xact_lock(hashtext(${key}))`.execute(tx);
}
