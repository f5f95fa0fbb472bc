/**
 * Alerting storage: policies and webhook destinations (documents scoped by account), and the
 * deliveries — one document per alert and mechanism target, which is both the durable outbox
 * (status `pending` with the next attempt's time, picked up again after a restart) and the
 * history (`/alerting/v3/history`).
 */
import { defineCollection } from '../../core/storage/collection.ts';
import type { Policy, Webhook } from './schemas.ts';

export const policies = defineCollection<Policy, 'alert_type'>({
  kind: 'alert_policy',
  indexes: { alert_type: (p) => p.alert_type },
});

export const webhooks = defineCollection<Webhook>({ kind: 'alert_webhook' });

export type DeliveryStatus = 'pending' | 'delivered' | 'failed' | 'not_deliverable';

export interface Delivery {
  id: string;
  /** The policy's name (history `name`). */
  name: string;
  description: string;
  policy_id: string;
  alert_type: string;
  /** The JSON body sent (webhooks) or the message text (email). */
  alert_body: string;
  /** The target: a webhook id, an email address or a PagerDuty id. */
  mechanism: string;
  mechanism_type: 'webhook' | 'email' | 'pagerduty';
  /** When the alert was raised. */
  sent: string;
  status: DeliveryStatus;
  attempts: number;
  next_attempt_at: string;
  delivered_at?: string;
  last_error?: string;
}

export const deliveries = defineCollection<Delivery, 'status' | 'next_attempt_at'>({
  kind: 'alert_delivery',
  indexes: { status: (d) => d.status, next_attempt_at: (d) => d.next_attempt_at },
});
