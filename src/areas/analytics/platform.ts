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
 * - `outpost_ddos_attacks`: one row per DDoS attack start and end (`ddos.attack`), in the account
 *   the event names: `timestamp` (the start or end time), `_sample_interval` (always 1: attack
 *   events are never sampled), `zone_id`, `attack_id`, `event` (start, end), `layer` (l7, l4),
 *   `attack_type`, `category`, `detection`, `zone_name`, `target_hostname`, `app_id`, `target_ip`,
 *   `target_port`, `protocol`, `ruleset_id`, `rule_id`, `rule_description`, `ruleset_override_id`,
 *   `action`, `sensitivity_level`, `start_time`, `end_time` (NULL on start), `peak_rate`,
 *   `peak_mbps`, `mitigated`, `logged`, `source_count` (counters as of the event).
 *
 * All carry `dataset` like the accounts' datasets and are kept as long; the first two go through
 * the same sampling. Events of a zone whose owner cannot be found (deleted meanwhile) are dropped.
 */
import type { AreaContext } from '../../core/area.ts';
import type { Logger } from '../../core/log.ts';
import type { AttackEvent } from '../ddos/index.ts';
import { zones } from '../zones/index.ts';
import type { AnalyticsEngine } from './engine.ts';
import type { TableSpec } from './store.ts';

export const HTTP_DATASET = 'outpost_http_requests';
export const SPECTRUM_DATASET = 'outpost_spectrum_events';
export const DDOS_DATASET = 'outpost_ddos_attacks';

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

const DDOS_TABLE: TableSpec = {
  name: 'platform_ddos_attacks',
  columns: [
    ['account_id', 'varchar'],
    ['timestamp', 'timestamp'],
    ['_sample_interval', 'uinteger'],
    ['zone_id', 'varchar'],
    ['attack_id', 'varchar'],
    ['event', 'varchar'],
    ['layer', 'varchar'],
    ['attack_type', 'varchar'],
    ['category', 'varchar'],
    ['detection', 'varchar'],
    ['zone_name', 'varchar'],
    ['target_hostname', 'varchar'],
    ['app_id', 'varchar'],
    ['target_ip', 'varchar'],
    ['target_port', 'integer'],
    ['protocol', 'varchar'],
    ['ruleset_id', 'varchar'],
    ['rule_id', 'varchar'],
    ['rule_description', 'varchar'],
    ['ruleset_override_id', 'varchar'],
    ['action', 'varchar'],
    ['sensitivity_level', 'varchar'],
    ['start_time', 'timestamp'],
    ['end_time', 'timestamp'],
    ['peak_rate', 'double'],
    ['peak_mbps', 'double'],
    ['mitigated', 'double'],
    ['logged', 'double'],
    ['source_count', 'double'],
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
const int = (v: unknown): number | null => (typeof v === 'number' && Number.isInteger(v) && Math.abs(v) < 2 ** 31 ? v : null);
const ms = (v: unknown): number | null => (typeof v === 'string' && Number.isFinite(Date.parse(v)) ? Date.parse(v) : null);

function relation(table: TableSpec, dataset: string) {
  return (accountId: string) =>
    `SELECT '${dataset}' AS dataset, * EXCLUDE (account_id) FROM "${table.name}" WHERE account_id = '${accountId.replace(/'/g, "''")}'`;
}

/** Registers the datasets and subscribes to the events; returns the unsubscriber. */
export async function attachPlatformDatasets(engine: AnalyticsEngine, ctx: AreaContext, log: Logger): Promise<() => void> {
  const store = engine.store;
  engine.registerPlatform({ name: HTTP_DATASET, relation: relation(HTTP_TABLE, HTTP_DATASET) });
  engine.registerPlatform({ name: SPECTRUM_DATASET, relation: relation(SPECTRUM_TABLE, SPECTRUM_DATASET) });
  engine.registerPlatform({ name: DDOS_DATASET, relation: relation(DDOS_TABLE, DDOS_DATASET) });
  await store.ensureTable(HTTP_TABLE);
  await store.ensureTable(SPECTRUM_TABLE);
  await store.ensureTable(DDOS_TABLE);

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
    ctx.events.subscribe('ddos.attack', (p) => {
      const { state, accountId, attack: a } = p as AttackEvent;
      if (typeof accountId !== 'string' || !a) return;
      const at = (state === 'end' ? ms(a.end_time) : ms(a.start_time)) ?? ctx.clock.now().getTime();
      store.append(DDOS_TABLE, [
        accountId,
        at,
        1,
        text(a.zone_id),
        text(a.id),
        state === 'end' ? 'end' : 'start',
        text(a.layer),
        text(a.attack_type),
        text(a.category),
        text(a.detection),
        text(a.zone_name),
        text(a.target_hostname),
        text(a.app_id),
        text(a.target_ip),
        int(a.target_port),
        text(a.protocol),
        text(a.ruleset_id),
        text(a.rule_id),
        text(a.rule_description),
        text(a.ruleset_override_id),
        text(a.action),
        text(a.sensitivity_level),
        ms(a.start_time),
        state === 'end' ? ms(a.end_time) : null,
        num(a.peak_rate),
        num(a.peak_mbps),
        num(a.mitigated),
        num(a.logged),
        num(a.source_count),
      ]);
    }),
    ctx.events.subscribe('zone.deleted', (p) => owners.delete((p as { id: string }).id)),
  ];
  return () => unsubscribe.forEach((u) => u());
}
