/**
 * An area is one product surface: `defineArea({ name, mount })`. `mount(ctx)` declares routes and
 * permission groups; an area with a data plane returns `{ start, stop }` from it — `start` opens
 * its listeners and returns them for the listener table, `stop` closes them. State lives in the
 * closure of `mount`, so several servers in one process (tests) never share it. Areas reach each
 * other only through exports of their `index.ts` or through the event bus.
 */
import type { Config } from './config.ts';
import type { Clock } from './clock.ts';
import type { Logger } from './log.ts';
import type { EventBus } from './events.ts';
import type { Database } from './storage/db.ts';
import type { AuthService } from './auth.ts';
import type { PermissionRegistry } from './permissions.ts';
import type { Router } from './router.ts';
import type { Services } from './services.ts';
import type { Upgrades } from './upgrades.ts';

export interface AreaContext {
  config: Config;
  clock: Clock;
  log: Logger;
  events: EventBus;
  database: Database;
  auth: AuthService;
  permissions: PermissionRegistry;
  router: Router;
  services: Services;
  /** HTTP/1.1 upgrade paths on the API port. */
  upgrades: Upgrades;
}

export interface Listener {
  name: string;
  protocol: string;
  address: string;
}

export interface DataPlane {
  start?(): Promise<Listener[] | void>;
  stop?(): Promise<void>;
}

export interface Area {
  name: string;
  mount(ctx: AreaContext): DataPlane | void;
}

export function defineArea(area: Area): Area {
  return area;
}
