/**
 * Labels for operations: user labels (stored per zone) and a fixed built-in set of managed
 * labels. An operation keeps the names of its labels (`Operation.labels`); deleting a user label
 * removes it from every operation.
 */

export type LabelSource = 'user' | 'managed';

export interface Label {
  name: string;
  description: string;
  metadata: unknown;
  source: LabelSource;
  created_at: string;
  last_updated: string;
}

/** The labels attached to an operation, by source. */
export interface OperationLabels {
  user: string[];
  managed: string[];
}

const BUILT_IN_AT = '2024-01-01T00:00:00.000Z';
const managed = (name: string, description: string): Label => ({ name, description, metadata: {}, source: 'managed', created_at: BUILT_IN_AT, last_updated: BUILT_IN_AT });

/** The managed labels Outpost knows (names as the platform uses them for common flows). */
export const MANAGED_LABELS: readonly Label[] = [
  managed('cf-log-in', 'Operations that sign a user in'),
  managed('cf-sign-up', 'Operations that create an account'),
  managed('cf-password-reset', 'Operations that reset a password'),
  managed('cf-add-cart', 'Operations that add an item to a cart'),
  managed('cf-add-payment', 'Operations that add a payment method'),
  managed('cf-check-out', 'Operations that complete a purchase'),
  managed('cf-contact-us', 'Operations that send a contact form'),
  managed('cf-rss-feed', 'Operations that serve a feed'),
];

/** Label names: 1–64 characters of letters, digits, `.`, `_`, `:` and `-`. */
export const LABEL_NAME = /^[A-Za-z0-9._:-]{1,64}$/;
