/**
 * Permission groups. An area declares the groups its routes need (`{ key: 'dns', name: 'DNS',
 * scope: 'zone' }` gives "DNS Read" and "DNS Write"); tokens carry group ids in their policies;
 * every route names the `(key, level)` it requires. Edit implies read.
 */
import { stableId } from './ids.ts';

export type Level = 'read' | 'edit';
export type GroupScope = 'account' | 'zone' | 'user';

export interface PermissionArea {
  key: string;
  /** Display name; groups are named `<name> Read` and `<name> Write`. */
  name: string;
  scope: GroupScope;
}

export interface PermissionGroup {
  id: string;
  name: string;
  key: string;
  level: Level;
  scopes: string[];
}

const SCOPE_NAMES: Record<GroupScope, string> = {
  account: 'com.cloudflare.api.account',
  zone: 'com.cloudflare.api.account.zone',
  user: 'com.cloudflare.api.user',
};

export class PermissionRegistry {
  private readonly byId = new Map<string, PermissionGroup>();
  private readonly keys = new Set<string>();

  define(area: PermissionArea): void {
    if (this.keys.has(area.key)) return;
    this.keys.add(area.key);
    for (const level of ['read', 'edit'] as const) {
      const name = `${area.name} ${level === 'read' ? 'Read' : 'Write'}`;
      const group = { id: stableId(`permission-group:${name}`), name, key: area.key, level, scopes: [SCOPE_NAMES[area.scope]] };
      this.byId.set(group.id, group);
    }
  }

  has(key: string): boolean {
    return this.keys.has(key);
  }

  get(id: string): PermissionGroup | undefined {
    return this.byId.get(id);
  }

  findByName(name: string): PermissionGroup | undefined {
    for (const g of this.byId.values()) if (g.name.toLowerCase() === name.toLowerCase()) return g;
    return undefined;
  }

  list(): PermissionGroup[] {
    return [...this.byId.values()].sort((a, b) => a.name.localeCompare(b.name));
  }
}
