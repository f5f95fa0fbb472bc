/**
 * The platform's own events as datasets of the account that owns the zone:
 *
 * - `outpost_http_requests`: one row per request through the edge (`edge.request` events):
 *   `timestamp`, `_sample_interval`, `zone_id`, `ray_id`, `host`, `method`, `path`, `status`,
 *   `client_ip`, `bytes_in`, `bytes_out`, `duration_ms`, `origin_ms` (NULL when no origin answered),
 *   `error` (NULL unless the edge failed the request).
 * - `outpost_spectrum_events`: one row per event of a proxied TCP/UDP application's flow
 *   (`spectrum.event`): `timestamp`, `_sample_interval`, `zone_id`, `app_id`, `event` (connect,
 *   progress, disconnect, originError, clientFiltered), `colo_name`, `ip_version`,
 *   `bytes_ingress`, `bytes_egress` (since the flow's previous event), `duration_ms` (on disconnect).
 *
 * Both carry `dataset` like the accounts' datasets, go through the same sampling and are kept as
 * long. Events of a zone whose owner cannot be found (deleted meanwhile) are dropped.
 */
import type { AreaContext } from '../../core/area.ts';
import type { Logger } from '../../core/log.ts';
import { zones } from '../zones/index.ts';
import type { AnalyticsEngine } from './engine.ts';
import type { TableSpec } from './store.ts';

export const HTTP_DATASET = 'outpost_http_requests';
export const SPECTRUM_DATASET = 'outpost_spectrum_events';

const HTTP_TABLE: TableSpec = {
  name: 'platform_http_requests',
  columns: [
    ['account_id', 'varchar'],
    ['timestamp', 'timestamp'],
    ['_sample_interval', 'uinteger'],
    ['zone_id', 'varchar'],
    ['ray_id', 'varchar'],
    ['host', 'varchar'],
    ['method', 'varchar'],
    ['path', 'varchar'],
    ['status', 'integer'],
    ['client_ip', 'varchar'],
    ['bytes_in', 'double'],
    ['bytes_out', 'double'],
    ['duration_ms', 'double'],
    ['origin_ms', 'double'],
    ['error', 'varchar'],
  ],
};

const SPECTRUM_TABLE: TableSpec = {
  name: 'platform_spectrum_events',
  columns: [
    ['account_id', 'varchar'],
    ['timestamp', 'timestamp'],
    ['_sample_interval', 'uinteger'],
    ['zone_id', 'varchar'],
    ['app_id', 'varchar'],
    ['event', 'varchar'],
    ['colo_name', 'varchar'],
    ['ip_version', 'integer'],
    ['bytes_ingress', 'double'],
    ['bytes_egress', 'double'],
    ['duration_ms', 'double'],
  ],
};

interface EdgeEvent {
  rayId: string;
  zoneId?: string;
  host: string;
  method: string;
  path: string;
  status: number;
  clientIp: string;
  bytesIn: number;
  bytesOut: number;
  durationMs: number;
  originMs?: number;
  error?: string;
  timestamp: string;
}

interface FlowEvent {
  zoneId: string;
  appId: string;
  event: string;
  ipVersion: number;
  bytesIngress: number;
  bytesEgress: number;
  durationMs?: number;
  coloName: string;
  timestamp: string;
}

const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const text = (v: unknown): string | null => (typeof v === 'string' ? v : null);

function relation(table: TableSpec, dataset: string) {
  return (accountId: string) =>
    `SELECT '${dataset}' AS dataset, * EXCLUDE (account_id) FROM "${table.name}" WHERE account_id = '${accountId.replace(/'/g, "''")}'`;
}

/** Registers the datasets and subscribes to the events; returns the unsubscriber. */
export async function attachPlatformDatasets(engine: AnalyticsEngine, ctx: AreaContext, log: Logger): Promise<() => void> {
  const store = engine.store;
  engine.registerPlatform({ name: HTTP_DATASET, relation: relation(HTTP_TABLE, HTTP_DATASET) });
  engine.registerPlatform({ name: SPECTRUM_DATASET, relation: relation(SPECTRUM_TABLE, SPECTRUM_DATASET) });
  await store.ensureTable(HTTP_TABLE);
  await store.ensureTable(SPECTRUM_TABLE);

  // zone id → owning account (null: unknown); refreshed when a zone is deleted.
  const owners = new Map<string, string | null>();
  const owner = async (zoneId: string): Promise<string | null> => {
    const known = owners.get(zoneId);
    if (known !== undefined) return known;
    const doc = await zones.findById(ctx.database.db, zoneId);
    const id = doc?.body.account.id ?? null;
    if (owners.size > 100_000) owners.clear();
    owners.set(zoneId, id);
    return id;
  };
  const record = (zoneId: string | undefined, dataset: string, table: TableSpec, row: (accountId: string) => unknown[]) => {
    if (!zoneId) return;
    const put = (accountId: string | null) => {
      if (!accountId) return;
      const interval = engine.sampler.take(`${accountId}/${dataset}`, ctx.clock.now().getTime());
      if (interval === 0) return;
      const r = row(accountId);
      r[2] = interval;
      store.append(table, r);
    };
    const known = owners.get(zoneId);
    if (known !== undefined) put(known);
    else owner(zoneId).then(put, (err) => log.warn({ err, zoneId }, 'could not find the owner of a zone for analytics'));
  };

  const unsubscribe = [
    ctx.events.subscribe('edge.request', (p) => {
      const e = p as EdgeEvent;
      record(e.zoneId, HTTP_DATASET, HTTP_TABLE, (accountId) => [
        accountId,
        Date.parse(e.timestamp) || ctx.clock.now().getTime(),
        1,
        e.zoneId,
        text(e.rayId),
        text(e.host),
        text(e.method),
        text(e.path),
        num(e.status),
        text(e.clientIp),
        num(e.bytesIn),
        num(e.bytesOut),
        num(e.durationMs),
        num(e.originMs),
        text(e.error),
      ]);
    }),
    ctx.events.subscribe('spectrum.event', (p) => {
      const e = p as FlowEvent;
      record(e.zoneId, SPECTRUM_DATASET, SPECTRUM_TABLE, (accountId) => [
        accountId,
        Date.parse(e.timestamp) || ctx.clock.now().getTime(),
        1,
        e.zoneId,
        text(e.appId),
        text(e.event),
        text(e.coloName),
        num(e.ipVersion),
        num(e.bytesIngress),
        num(e.bytesEgress),
        num(e.durationMs),
      ]);
    }),
    ctx.events.subscribe('zone.deleted', (p) => owners.delete((p as { id: string }).id)),
  ];
  return () => unsubscribe.forEach((u) => u());
}
