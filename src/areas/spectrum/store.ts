/**
 * Proxied applications are zone-scoped documents (they disappear with their zone), with the DNS
 * name indexed for the "same name and port" conflict check and for finding the applications that
 * share a DNS record. Analytics are persisted as one document per zone and minute (analytics.ts).
 */
import { defineCollection, type Doc } from '../../core/storage/collection.ts';
import type { Executor } from '../../core/storage/db.ts';
import { apiError } from '../../core/errors.ts';
import type { StoredApp } from './schemas.ts';
import type { MinuteDoc } from './analytics.ts';

export const apps = defineCollection<StoredApp, 'name'>({
  kind: 'spectrum_app',
  indexes: { name: (a) => a.dns.name },
});

export const analyticsMinutes = defineCollection<MinuteDoc>({ kind: 'spectrum_analytics_minute' });

export async function getApp(db: Executor, zoneId: string, id: string): Promise<Doc<StoredApp>> {
  const doc = await apps.get(db, zoneId, id);
  if (!doc) throw apiError('spectrum_app_not_found', id);
  return doc;
}

/** The applications of a zone whose DNS name is `name`. */
export async function appsNamed(db: Executor, zoneId: string, name: string): Promise<StoredApp[]> {
  const { items } = await apps.list(db, zoneId, { filters: [{ field: 'name', op: 'eq', value: name }] });
  return items.map((d) => d.body);
}
