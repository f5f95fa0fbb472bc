/**
 * The durable outbox: alerts are written as `pending` deliveries (committed before any attempt),
 * then sent by this worker — webhooks as a JSON POST with the `cf-webhook-auth` header (the
 * destination's secret), email through the configured SMTP server. A failed attempt is retried
 * after `--alerting-retry-ms`, doubling each time, up to `--alerting-max-attempts`; then `failed`.
 * Email without an SMTP server and PagerDuty (whose service this installation cannot reach) are
 * `not_deliverable` at once. Pending deliveries left by a stopped process are sent after the
 * next start. Webhook destinations record `last_success` / `last_failure`.
 */
import type { Clock } from '../../core/clock.ts';
import type { Config } from '../../core/config.ts';
import type { Logger } from '../../core/log.ts';
import type { Database } from '../../core/storage/db.ts';
import { sendMail } from './smtp.ts';
import { deliveries, webhooks, type Delivery } from './store.ts';

/** Sends a webhook test or alert body; resolves with the failure reason, or undefined on success. */
export async function postWebhook(url: string, secret: string | undefined, body: unknown, timeoutMs = 10_000): Promise<string | undefined> {
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'user-agent': 'Outpost-Notifications', ...(secret ? { 'cf-webhook-auth': secret } : {}) },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
      redirect: 'manual',
    });
    const text = await res.text().catch(() => '');
    if (res.status >= 200 && res.status < 300) return undefined;
    return `the endpoint answered ${res.status}${res.statusText ? ` ${res.statusText}` : ''}${text ? `: ${text.slice(0, 200)}` : ''}`;
  } catch (err) {
    const e = err as Error & { cause?: { code?: string; message?: string } };
    return `the endpoint could not be reached: ${e.cause?.code ?? e.cause?.message ?? e.message}`;
  }
}

export class Outbox {
  private timer?: NodeJS.Timeout;
  private readonly inFlight = new Set<string>();
  private running?: Promise<void>;
  private again = false;
  private stopped = false;

  constructor(
    private readonly database: Database,
    private readonly clock: Clock,
    private readonly config: Config,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.stopped = false;
    const every = Math.max(20, Math.min(1000, this.config.alertingRetryMs));
    this.timer = setInterval(() => this.kick(), every);
    this.timer.unref();
    this.kick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running;
  }

  /** Runs a pass now (after new deliveries were committed); passes never overlap. */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.pass()
      .catch((err) => this.log.error({ err }, 'alert outbox pass failed'))
      .finally(() => {
        this.running = undefined;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  private async pass(): Promise<void> {
    const now = this.clock.now().toISOString();
    const { items } = await deliveries.list(this.database.db, null, {
      filters: [{ field: 'status', op: 'eq', value: 'pending' }],
      order: 'next_attempt_at',
      direction: 'asc',
      limit: 100,
    });
    const due = items.filter((d) => d.body.next_attempt_at <= now && !this.inFlight.has(d.id));
    await Promise.all(
      due.map(async (doc) => {
        this.inFlight.add(doc.id);
        try {
          const outcome = await this.attempt(doc.scopeId, doc.body);
          const fresh = await deliveries.get(this.database.db, doc.scopeId, doc.id);
          if (!fresh) return;
          const d: Delivery = { ...fresh.body, attempts: fresh.body.attempts + 1 };
          const at = this.clock.now();
          if (outcome.status === 'delivered') {
            d.status = 'delivered';
            d.delivered_at = at.toISOString();
            delete d.last_error;
          } else if (outcome.status === 'not_deliverable' || d.attempts >= this.config.alertingMaxAttempts) {
            d.status = outcome.status === 'not_deliverable' ? 'not_deliverable' : 'failed';
            d.last_error = outcome.error;
          } else {
            d.last_error = outcome.error;
            d.next_attempt_at = new Date(at.getTime() + this.config.alertingRetryMs * 2 ** (d.attempts - 1)).toISOString();
          }
          await deliveries.update(this.database.db, fresh, d, at);
          if (d.status !== 'pending') this.log.info({ delivery: d.id, status: d.status, attempts: d.attempts, error: d.last_error }, 'alert delivery');
        } finally {
          this.inFlight.delete(doc.id);
        }
      }),
    );
  }

  private async attempt(accountId: string, d: Delivery): Promise<{ status: 'delivered' | 'retry' | 'not_deliverable'; error?: string }> {
    if (d.mechanism_type === 'pagerduty') {
      return { status: 'not_deliverable', error: 'PagerDuty delivery needs the PagerDuty service, which this installation does not reach' };
    }
    if (d.mechanism_type === 'email') {
      if (!this.config.alertingSmtp) return { status: 'not_deliverable', error: 'no SMTP server is configured (--alerting-smtp)' };
      try {
        const body = JSON.parse(d.alert_body) as { name?: string; text?: string };
        await sendMail(this.config.alertingSmtp, this.config.alertingFrom, d.mechanism, `[Outpost] ${body.name ?? d.name}`, `${body.text ?? ''}\n\n${d.alert_body}`);
        return { status: 'delivered' };
      } catch (err) {
        return { status: 'retry', error: (err as Error).message };
      }
    }
    const hook = await webhooks.get(this.database.db, accountId, d.mechanism);
    if (!hook) return { status: 'not_deliverable', error: `webhook destination ${d.mechanism} no longer exists` };
    const error = await postWebhook(hook.body.url, hook.body.secret, JSON.parse(d.alert_body));
    const at = this.clock.now();
    await webhooks.update(this.database.db, hook, { ...hook.body, [error ? 'last_failure' : 'last_success']: at.toISOString() }, at).catch(() => undefined);
    return error ? { status: 'retry', error } : { status: 'delivered' };
  }
}
