/**
 * Webhook delivery through a durable outbox. An event is written to the outbox (one row per
 * subscribed webhook) before anything is sent, so a restart between the event and its delivery
 * loses nothing: the loop picks pending rows up again on start. Each POST carries the signed raw
 * body (`rtk-signature`), a per-delivery id for deduplication (`rtk-uuid`) and the webhook id
 * (`rtk-webhook-id`). 2xx is delivered; 5xx and network failures are retried with exponential
 * backoff up to a bound; any other status fails the delivery without retry, as the platform does.
 */
import type { Logger } from '../../core/log.ts';
import type { Clock } from '../../core/clock.ts';
import { uuid } from '../../core/ids.ts';
import type { Executor } from '../../core/storage/db.ts';
import type { Doc } from '../../core/storage/collection.ts';
import { signBody, type SigningKey } from './keys.ts';
import { dueKey, outbox, webhooks, OUTBOX_SCOPE, type OutboxItem, type WebhookEvent } from './store.ts';

const BATCH = 20;
const SEND_TIMEOUT_MS = 10_000;

export interface DeliveryOptions {
  db: Executor;
  clock: Clock;
  log: Logger;
  key: () => SigningKey;
  /** First retry delay; each further retry doubles it. */
  backoffMs: number;
  maxAttempts: number;
  pollMs: number;
}

export class Deliveries {
  private timer?: NodeJS.Timeout;
  private running = false;
  private again = false;
  private stopped = false;
  private readonly inflight = new Set<Promise<void>>();

  constructor(private readonly opts: DeliveryOptions) {}

  /** Writes one outbox row per enabled webhook of the app subscribed to `event`. */
  async enqueue(appId: string, event: WebhookEvent, payload: Record<string, unknown>): Promise<number> {
    const { db, clock } = this.opts;
    const hooks = (await webhooks.all(db, appId)).filter((w) => w.body.enabled && w.body.events.includes(event));
    const now = clock.now();
    for (const hook of hooks) {
      const id = uuid();
      const item: OutboxItem = {
        id,
        webhook_id: hook.id,
        url: hook.body.url,
        body: JSON.stringify({ event, ...payload }),
        event,
        attempts: 0,
        state: 'pending',
        due: dueKey(now.getTime()),
        created_at: now.toISOString(),
      };
      await outbox.insert(db, OUTBOX_SCOPE, id, item, now);
    }
    if (hooks.length > 0) this.kick();
    return hooks.length;
  }

  /** The first pass after a start retries every pending delivery, whatever its due time. */
  private catchUp = true;

  start(): void {
    this.stopped = false;
    this.catchUp = true;
    this.timer = setInterval(() => this.kick(), this.opts.pollMs);
    this.timer.unref();
    this.kick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await Promise.allSettled([...this.inflight]);
  }

  /** Runs one pass now (or right after the current one). */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    const pass = this.pass()
      .catch((err: unknown) => this.opts.log.warn({ err }, 'webhook delivery pass failed'))
      .finally(() => {
        this.running = false;
        this.inflight.delete(pass);
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
    this.inflight.add(pass);
  }

  private async pass(): Promise<void> {
    const { db, clock } = this.opts;
    const now = clock.now().getTime();
    if (this.catchUp) {
      this.catchUp = false;
      await this.catchUpAll();
      return;
    }
    const { items } = await outbox.list(db, OUTBOX_SCOPE, {
      filters: [{ field: 'state', op: 'eq', value: 'pending' }],
      order: 'due',
      direction: 'asc',
      limit: BATCH,
      withTotal: false,
    });
    // Ordered by due time: once one is in the future, so are the rest.
    const due = items.filter((d) => Number(d.body.due) <= now);
    await Promise.all(due.map((d) => this.deliver(d)));
  }

  /** After a restart nothing tells how long the previous process waited: retry what is owed now. */
  private async catchUpAll(): Promise<void> {
    const { db } = this.opts;
    for (let offset = 0; ; offset += BATCH) {
      const { items } = await outbox.list(db, OUTBOX_SCOPE, { filters: [{ field: 'state', op: 'eq', value: 'pending' }], order: 'due', direction: 'asc', limit: BATCH, offset, withTotal: false });
      if (items.length === 0) return;
      await Promise.all(items.map((d) => this.deliver(d)));
      if (this.stopped) return;
    }
  }

  private async deliver(doc: Doc<OutboxItem>): Promise<void> {
    const { db, clock, log } = this.opts;
    const item = doc.body;
    let status = 0;
    let error: string | undefined;
    try {
      const res = await fetch(item.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'rtk-signature': signBody(this.opts.key(), item.body),
          'rtk-uuid': item.id,
          'rtk-webhook-id': item.webhook_id,
          'user-agent': 'outpost-realtime-kit-webhooks',
        },
        body: item.body,
        signal: AbortSignal.timeout(SEND_TIMEOUT_MS),
      });
      status = res.status;
      await res.arrayBuffer().catch(() => undefined);
    } catch (err) {
      error = (err as Error).message;
    }
    const attempts = item.attempts + 1;
    let next: OutboxItem;
    if (status >= 200 && status < 300) {
      next = { ...item, attempts, state: 'delivered', last_status: status, last_error: undefined };
    } else if ((status >= 500 || status === 0) && attempts < this.opts.maxAttempts) {
      const delay = this.opts.backoffMs * 2 ** (attempts - 1);
      next = { ...item, attempts, due: dueKey(clock.now().getTime() + delay), last_status: status || undefined, last_error: error };
    } else {
      next = { ...item, attempts, state: 'failed', last_status: status || undefined, last_error: error ?? `answered ${status}` };
      log.warn({ webhook: item.webhook_id, delivery: item.id, status, error, attempts }, 'webhook delivery failed');
    }
    // Another node may have delivered it meanwhile: a version conflict means it is theirs now.
    await outbox.update(db, doc, next, clock.now()).catch(() => undefined);
  }
}
