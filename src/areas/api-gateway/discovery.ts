/**
 * Discovery from traffic: each request to a zone is normalised into a templated operation
 * (`endpoints.ts`) and counted in memory; counts are written to storage every `flushMs` (and
 * before any discovery read), where a new operation starts in state `review`. Memory is bounded
 * per zone; beyond the bound new endpoints wait for the next flush.
 */
import type { Logger } from '../../core/log.ts';
import { normalisePath, type HttpMethod } from './endpoints.ts';
import type { GatewayStore } from './store.ts';

const MAX_KEYS_PER_ZONE = 5_000;

interface Counter {
  method: HttpMethod;
  host: string;
  endpoint: string;
  requests: number;
  withSession: number;
  withoutSession: number;
  sessionIdentified: boolean;
}

export class DiscoveryRecorder {
  private pending = new Map<string, Map<string, Counter>>();
  private lastFlush = Date.now();
  private timer?: NodeJS.Timeout;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: GatewayStore,
    private readonly log: Logger,
    private readonly flushMs: number,
    /** Told which zones' counts were just stored (the edge refreshes their posture labels). */
    private readonly flushed: (zoneId: string) => void = () => undefined,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.flush(), this.flushMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }

  count(zoneId: string, method: HttpMethod, host: string, path: string, session: string | undefined): void {
    const { endpoint } = normalisePath(path);
    const key = `${method} ${host} ${endpoint}`;
    let zone = this.pending.get(zoneId);
    if (!zone) this.pending.set(zoneId, (zone = new Map()));
    let c = zone.get(key);
    if (!c) {
      if (zone.size >= MAX_KEYS_PER_ZONE) return;
      zone.set(key, (c = { method, host, endpoint, requests: 0, withSession: 0, withoutSession: 0, sessionIdentified: false }));
    }
    c.requests++;
    if (session) {
      c.withSession++;
      c.sessionIdentified = true;
    } else c.withoutSession++;
  }

  /** Writes what was counted since the last flush (one flush at a time). */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      const batch = this.pending;
      if (batch.size === 0) return;
      this.pending = new Map();
      const now = Date.now();
      const period = Math.max(1, Math.round((now - this.lastFlush) / 1000));
      this.lastFlush = now;
      for (const [zoneId, counters] of batch) {
        try {
          await this.store.recordTraffic(zoneId, [...counters.values()], period);
          this.flushed(zoneId);
        } catch (err) {
          // A zone deleted meanwhile, or a database hiccup: the counts of this interval are dropped.
          this.log.warn({ zone: zoneId, err: (err as Error).message }, 'discovery counts not stored');
        }
      }
    });
    return this.flushing;
  }
}
