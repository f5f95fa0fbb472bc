/**
 * From tunnel health changes (`magic.tunnel_health`, published by the interconnects area's prober)
 * to alerts: policies of type `magic_tunnel_health_check_event` or `magic_wan_tunnel_health` whose
 * filters match get one delivery per mechanism target. A tunnel turning `degraded` or `down` starts
 * an alert, turning `healthy` again ends it; the first result of a fresh tunnel (`unknown` →
 * `healthy`) is no event. Filters: `tunnel_id`, `tunnel_name`, `new_health` (case-insensitive).
 */
import { accounts, GLOBAL_SCOPE } from '../../core/accounts.ts';
import type { Clock } from '../../core/clock.ts';
import type { Database } from '../../core/storage/db.ts';
import type { TunnelHealthEvent } from '../interconnects/index.ts';
import { writeDeliveries } from './dispatch.ts';
import type { Filters, Policy } from './schemas.ts';
import { policies } from './store.ts';

export const TUNNEL_ALERT_TYPES = ['magic_tunnel_health_check_event', 'magic_wan_tunnel_health'];

function matches(f: Filters, e: TunnelHealthEvent): boolean {
  const has = (k: string) => f[k] !== undefined && f[k].length > 0;
  const lower = (k: string) => f[k].map((v) => v.toLowerCase());
  if (has('tunnel_id') && !f.tunnel_id.includes(e.id)) return false;
  if (has('tunnel_name') && !f.tunnel_name.includes(e.name)) return false;
  if (has('new_health') && !lower('new_health').includes(e.status)) return false;
  return true;
}

export async function dispatchTunnelHealth(database: Database, clock: Clock, e: TunnelHealthEvent): Promise<number> {
  if (e.status === 'unknown' || (e.previous === 'unknown' && e.status === 'healthy')) return 0;
  const { items } = await policies.list(database.db, e.account, {
    filters: [{ field: 'alert_type', op: 'in', value: TUNNEL_ALERT_TYPES }],
  });
  const matching: Policy[] = items.map((d) => d.body).filter((p) => p.enabled && matches(p.filters, e));
  if (matching.length === 0) return 0;
  const account = await accounts.get(database.db, GLOBAL_SCOPE, e.account);
  const accountName = (account?.body as { name?: string } | undefined)?.name ?? '';
  const now = clock.now();
  const kind = e.kind === 'gre' ? 'GRE' : 'IPsec';
  const data = {
    account_name: accountName,
    account_tag: e.account,
    tunnel_id: e.id,
    tunnel_name: e.name,
    tunnel_type: kind,
    health_check_target: e.target,
    new_health: e.status,
    previous_health: e.previous,
    checked_at: e.at,
  };
  const text = `${kind} tunnel ${e.name} is ${e.status} (was ${e.previous}): health checks to ${e.target}.`;
  return writeDeliveries(database, e.account, matching, now, (p) => ({
    name: p.name,
    text,
    data,
    ts: Math.floor(now.getTime() / 1000),
    account_id: e.account,
    policy_id: p.id,
    policy_name: p.name,
    alert_type: p.alert_type,
    alert_correlation_id: e.id,
    alert_event: e.status === 'healthy' ? 'ALERT_STATE_EVENT_END' : 'ALERT_STATE_EVENT_START',
  }));
}
