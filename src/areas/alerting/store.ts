/**
 * Alerting storage: policies, webhook destinations and silences (documents scoped by account), and the
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

/** A window during which one policy's alerts are not sent (`start_time` ≤ t < `end_time`). */
export interface Silence {
  id: string;
  policy_id: string;
  /** ISO 8601, UTC. */
  start_time: string;
  end_time: string;
  created_at: string;
  updated_at: string;
}

export const silences = defineCollection<Silence, 'policy_id'>({
  kind: 'alert_silence',
  indexes: { policy_id: (s) => s.policy_id },
});

/** `silenced`: raised while a silence of the policy was in force; kept in the history, never sent. */
export type DeliveryStatus = 'pending' | 'delivered' | 'failed' | 'not_deliverable' | 'silenced';

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
  /** The silence in force when the alert was raised (status `silenced`). */
  silence_id?: string;
}

export const deliveries = defineCollection<Delivery, 'status' | 'next_attempt_at'>({
  kind: 'alert_delivery',
  indexes: { status: (d) => d.status, next_attempt_at: (d) => d.next_attempt_at },
});
