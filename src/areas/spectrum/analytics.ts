/**
 * Analytics of proxied applications, fed by the proxy's own flow events (connect, progress,
 * disconnect, originError, clientFiltered) with bytes each way, duration, client IP version, colo
 * and application id. Events are summed into rows per second and combination of dimensions (per
 * minute once older than an hour), kept in memory per server and written to the database as one
 * document per zone and minute every few seconds and on stop, so a restart keeps them. Rows older
 * than seven days are dropped. Durations keep up to 256 samples per row for the percentiles.
 */
import type { Clock } from '../../core/clock.ts';
import type { EventBus } from '../../core/events.ts';
import type { Logger } from '../../core/log.ts';
import type { Executor } from '../../core/storage/db.ts';
import { analyticsMinutes } from './store.ts';

export const EVENTS = ['connect', 'progress', 'disconnect', 'originError', 'clientFiltered'] as const;
export type EventName = (typeof EVENTS)[number];

/** One event of a flow; bytes are those since the flow's previous event. */
export interface FlowEvent {
  zoneId: string;
  appId: string;
  event: EventName;
  ipVersion: 4 | 6;
  bytesIngress: number;
  bytesEgress: number;
  /** The flow's whole duration, on `disconnect`. */
  durationMs?: number;
}

/** Published on the event bus as `spectrum.event`. */
export interface PublishedFlowEvent extends FlowEvent {
  coloName: string;
  timestamp: string;
}

export interface Row {
  /** Bucket start, epoch seconds. */
  t: number;
  /** Bucket length, seconds (1, or 60 once compacted). */
  g: number;
  appID: string;
  event: EventName;
  coloName: string;
  ipVersion: number;
  count: number;
  bytesIngress: number;
  bytesEgress: number;
  durSum: number;
  durCount: number;
  durSamples: number[];
}

export interface MinuteDoc {
  rows: Row[];
}

export const SAMPLE_CAP = 256;
const RETENTION_S = 7 * 24 * 3600;
const COMPACT_AFTER_S = 3600;
const FLUSH_MS = 5_000;

type Minutes = Map<number, Map<string, Row>>;

export class SpectrumAnalytics {
  /** zone id → minute (epoch seconds) → row key → row. */
  private readonly zones = new Map<string, Minutes>();
  private readonly dirty = new Set<string>();
  private timer?: NodeJS.Timeout;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly db: Executor,
    private readonly clock: Clock,
    private readonly events: EventBus,
    private readonly coloName: string,
    private readonly log: Logger,
  ) {}

  record(e: FlowEvent): void {
    const now = this.clock.now();
    const t = Math.floor(now.getTime() / 1000);
    const minute = t - (t % 60);
    let minutes = this.zones.get(e.zoneId);
    if (!minutes) this.zones.set(e.zoneId, (minutes = new Map()));
    let rows = minutes.get(minute);
    if (!rows) minutes.set(minute, (rows = new Map()));
    const k = rowKey(t, 1, e.appId, e.event, this.coloName, e.ipVersion);
    let row = rows.get(k);
    if (!row) {
      row = { t, g: 1, appID: e.appId, event: e.event, coloName: this.coloName, ipVersion: e.ipVersion, count: 0, bytesIngress: 0, bytesEgress: 0, durSum: 0, durCount: 0, durSamples: [] };
      rows.set(k, row);
    }
    row.count += 1;
    row.bytesIngress += e.bytesIngress;
    row.bytesEgress += e.bytesEgress;
    if (e.durationMs !== undefined) addSample(row, e.durationMs);
    this.dirty.add(`${e.zoneId}|${minute}`);
    this.events.publish('spectrum.event', { ...e, coloName: this.coloName, timestamp: now.toISOString() } satisfies PublishedFlowEvent);
  }

  /** Rows of a zone whose bucket overlaps [since, until] (epoch ms). */
  rows(zoneId: string, sinceMs: number, untilMs: number): Row[] {
    const minutes = this.zones.get(zoneId);
    if (!minutes) return [];
    const out: Row[] = [];
    for (const [minute, rows] of minutes) {
      if ((minute + 60) * 1000 <= sinceMs || minute * 1000 > untilMs) continue;
      for (const row of rows.values()) {
        if ((row.t + row.g) * 1000 > sinceMs && row.t * 1000 <= untilMs) out.push(row);
      }
    }
    return out;
  }

  dropZone(zoneId: string): void {
    this.zones.delete(zoneId);
    for (const k of this.dirty) if (k.startsWith(`${zoneId}|`)) this.dirty.delete(k);
  }

  async load(): Promise<void> {
    const oldest = Math.floor(this.clock.now().getTime() / 1000) - RETENTION_S;
    for (const doc of await analyticsMinutes.all(this.db, null)) {
      const minute = Number(doc.id);
      if (minute < oldest) {
        await analyticsMinutes.delete(this.db, doc.scopeId, doc.id);
        continue;
      }
      let minutes = this.zones.get(doc.scopeId);
      if (!minutes) this.zones.set(doc.scopeId, (minutes = new Map()));
      const rows = new Map<string, Row>();
      for (const r of doc.body.rows) rows.set(rowKey(r.t, r.g, r.appID, r.event, r.coloName, r.ipVersion), r);
      minutes.set(minute, rows);
    }
    this.compact();
  }

  start(): void {
    this.timer = setInterval(() => void this.flush(), FLUSH_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.flush();
  }

  /** Writes the minutes that changed since the last flush; one flush at a time. */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(() => this.write()).catch((err) => this.log.warn({ err }, 'spectrum analytics flush failed'));
    return this.flushing;
  }

  private async write(): Promise<void> {
    const expired = this.compact();
    for (const [zoneId, minute] of expired) await analyticsMinutes.delete(this.db, zoneId, String(minute));
    const batch = [...this.dirty];
    this.dirty.clear();
    const at = this.clock.now();
    for (const item of batch) {
      const [zoneId, m] = item.split('|');
      const rows = this.zones.get(zoneId)?.get(Number(m));
      if (!rows) continue;
      const body: MinuteDoc = { rows: [...rows.values()] };
      try {
        const doc = await analyticsMinutes.get(this.db, zoneId, m);
        if (doc) await analyticsMinutes.update(this.db, doc, body, at);
        else await analyticsMinutes.insert(this.db, zoneId, m, body, at);
      } catch (err) {
        // The zone may have gone meanwhile, or another writer raced us: keep it for the next flush.
        if (this.zones.get(zoneId)?.has(Number(m))) this.dirty.add(item);
        throw err;
      }
    }
  }

  /** Merges per-second rows older than an hour into per-minute rows; drops expired minutes. */
  private compact(): [string, number][] {
    const now = Math.floor(this.clock.now().getTime() / 1000);
    const expired: [string, number][] = [];
    for (const [zoneId, minutes] of this.zones) {
      for (const [minute, rows] of minutes) {
        if (minute < now - RETENTION_S) {
          minutes.delete(minute);
          expired.push([zoneId, minute]);
          continue;
        }
        if (minute >= now - COMPACT_AFTER_S) continue;
        let merged: Map<string, Row> | undefined;
        for (const row of rows.values()) {
          if (row.g !== 1) continue;
          merged ??= new Map([...rows].filter(([, r]) => r.g !== 1));
          const k = rowKey(minute, 60, row.appID, row.event, row.coloName, row.ipVersion);
          const into = merged.get(k);
          if (into) mergeRow(into, row);
          else merged.set(k, { ...row, t: minute, g: 60, durSamples: [...row.durSamples] });
        }
        if (merged) minutes.set(minute, merged);
      }
      if (minutes.size === 0) this.zones.delete(zoneId);
    }
    return expired;
  }
}

function rowKey(t: number, g: number, appId: string, event: string, colo: string, ipVersion: number): string {
  return `${t}|${g}|${appId}|${event}|${colo}|${ipVersion}`;
}

/** Reservoir sampling keeps an even sample of at most SAMPLE_CAP durations per row. */
function addSample(row: Row, ms: number): void {
  row.durSum += ms;
  row.durCount += 1;
  if (row.durSamples.length < SAMPLE_CAP) row.durSamples.push(ms);
  else {
    const i = Math.floor(Math.random() * row.durCount);
    if (i < SAMPLE_CAP) row.durSamples[i] = ms;
  }
}

export function mergeRow(into: Row, row: Row): void {
  into.count += row.count;
  into.bytesIngress += row.bytesIngress;
  into.bytesEgress += row.bytesEgress;
  into.durSum += row.durSum;
  into.durCount += row.durCount;
  for (const s of row.durSamples) {
    if (into.durSamples.length < SAMPLE_CAP) into.durSamples.push(s);
    else into.durSamples[Math.floor(Math.random() * SAMPLE_CAP)] = s;
  }
}
