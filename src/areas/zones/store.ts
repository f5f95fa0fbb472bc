/** The zones collection (scope: the owning account). */
import { defineCollection } from '../../core/storage/collection.ts';
import type { Zone } from './schemas.ts';

export const zones = defineCollection<Zone, 'name' | 'status' | 'account.name' | 'type'>({
  kind: 'zone',
  indexes: { name: (z) => z.name, status: (z) => z.status, 'account.name': (z) => z.account.name, type: (z) => z.type },
});
