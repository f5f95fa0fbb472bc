/** Thin handlers for `/accounts/{account_id}/alerting/v3/{policies,destinations/webhooks,history}` (silences: silences.ts). */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { accounts, GLOBAL_SCOPE } from '../../core/accounts.ts';
import { apiError } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import { limitOffset, pageFrom, pageQuery } from '../../core/pagination.ts';
import type { Req } from '../../core/router.ts';
import { qString } from '../../core/validate.ts';
import { postWebhook } from './outbox.ts';
import { parsePolicy, parseWebhook, specAlertType, webhookType, type Policy, type Webhook } from './schemas.ts';
import { mountSilenceRoutes } from './silences.ts';
import { deliveries, policies, silences, webhooks, type Delivery } from './store.ts';

export const NOTIFICATIONS = 'notifications';
const AnyBody = z.unknown();
const BASE = '/accounts/:account_id/alerting/v3';
const HistoryQuery = z.object({
  ...pageQuery({ perPage: 25, min: 1, max: 1000 }),
  since: qString(z.iso.datetime({ offset: true })).optional(),
  before: qString(z.iso.datetime({ offset: true })).optional(),
});

function policyView(p: Policy) {
  return { ...p, alert_type: specAlertType(p.alert_type) };
}

function webhookView(w: Webhook) {
  const { secret: _secret, ...rest } = w;
  return rest;
}

function historyView(d: Delivery) {
  return { ...d, alert_type: specAlertType(d.alert_type) };
}

/** The platform's test message, sent when a destination is created or changed. */
function testBody(accountId: string, name: string) {
  return {
    name,
    text: `This is a test message from Outpost notifications for the webhook destination "${name}".`,
    data: {},
    ts: Math.floor(Date.now() / 1000),
    account_id: accountId,
    alert_type: 'webhook_test',
  };
}

/** The filter options of the DDoS alert types, in the platform's `{ComparisonOperator, Key, Optional}` form. */
const ddosFilters = (keys: string[]) => keys.map((Key) => ({ ComparisonOperator: '==', Key, Optional: true }));
const L7_FILTERS = ddosFilters(['zones', 'target_hostname', 'target_zone_name', 'requests_per_second']);
const TUNNEL_FILTERS = ddosFilters(['tunnel_id', 'tunnel_name', 'new_health']);
const L4_FILTERS = ddosFilters(['zones', 'target_hostname', 'target_zone_name', 'target_ip', 'protocol', 'packets_per_second', 'megabits_per_second']);
/** Only the alert types something in Outpost raises (DDoS attacks, tunnel health); others are accepted on policies but never sent. */
const AVAILABLE_ALERTS = {
  'DDoS Protection': [
    { type: 'dos_attack_l7', display_name: 'HTTP DDoS Attack Alerter', description: 'An HTTP DDoS attack against a zone started or ended.', filter_options: L7_FILTERS },
    { type: 'advanced_ddos_attack_l7_alert', display_name: 'Advanced HTTP DDoS Attack Alerter', description: 'An HTTP DDoS attack started or ended (filters on zones, hosts and rates).', filter_options: L7_FILTERS },
    { type: 'dos_attack_l4', display_name: 'Layer 3/4 DDoS Attack Alerter', description: 'A DDoS attack against a proxied TCP/UDP application started or ended.', filter_options: L4_FILTERS },
    { type: 'advanced_ddos_attack_l4_alert', display_name: 'Advanced Layer 3/4 DDoS Attack Alerter', description: 'A layer 3/4 DDoS attack started or ended (filters on addresses, protocols and rates).', filter_options: L4_FILTERS },
  ],
  'Magic Transit': [
    { type: 'magic_tunnel_health_check_event', display_name: 'Tunnel Health Alert', description: 'A GRE or IPsec tunnel turned degraded or down, or healthy again.', filter_options: TUNNEL_FILTERS },
    { type: 'magic_wan_tunnel_health', display_name: 'Magic WAN Tunnel Health Alert', description: 'A GRE or IPsec tunnel turned degraded or down, or healthy again.', filter_options: TUNNEL_FILTERS },
  ],
};

export function mountAlertingRoutes(ctx: AreaContext, kick: () => void): void {
  const { router, clock } = ctx;
  const db = ctx.database.db;
  const read = { permission: NOTIFICATIONS, level: 'read' } as const;
  const edit = { permission: NOTIFICATIONS, level: 'edit' } as const;
  const tags = ['alerting'];
  const account = async (req: Req<unknown, unknown>) => {
    const id = req.params.account_id;
    if (!(await accounts.get(db, GLOBAL_SCOPE, id))) throw apiError('account_not_found', id);
    return id;
  };
  const bare = (req: Req<unknown, unknown>) => req.c.json({ success: true, errors: [], messages: [] });

  async function checkWebhooks(accountId: string, p: { mechanisms?: Policy['mechanisms'] }): Promise<void> {
    for (const [i, m] of (p.mechanisms?.webhooks ?? []).entries()) {
      if (!(await webhooks.get(db, accountId, m.id))) throw apiError('alerting_invalid', `mechanisms.webhooks[${i}]: webhook destination ${m.id} does not exist`);
    }
  }

  // --- policies ------------------------------------------------------------------------------
  router.add(
    { method: 'POST', path: `${BASE}/policies`, operationId: 'createAlertingPolicy', summary: 'Create a notification policy (answers {id})', auth: edit, body: AnyBody, tags },
    async (req) => {
      const accountId = await account(req);
      const input = parsePolicy(req.body, true);
      await checkWebhooks(accountId, input);
      const now = clock.now();
      const id = hexId();
      const p: Policy = {
        id,
        name: input.name!,
        description: input.description ?? '',
        enabled: input.enabled ?? true,
        alert_type: input.alert_type!,
        filters: input.filters ?? {},
        mechanisms: input.mechanisms!,
        created: now.toISOString(),
        modified: now.toISOString(),
      };
      if (input.alert_interval) p.alert_interval = input.alert_interval;
      await policies.insert(db, accountId, id, p, now);
      return { id };
    },
  );

  router.add(
    { method: 'GET', path: `${BASE}/policies`, operationId: 'listAlertingPolicies', summary: 'List notification policies (unpaginated)', auth: read, tags },
    async (req) => {
      const accountId = await account(req);
      const { items } = await policies.list(db, accountId, { order: 'created_on', direction: 'asc' });
      return items.map((d) => policyView(d.body));
    },
  );

  const policyOf = async (req: Req<unknown, unknown>) => {
    const accountId = await account(req);
    const doc = await policies.get(db, accountId, req.params.policy_id);
    if (!doc) throw apiError('alerting_policy_not_found', req.params.policy_id);
    return { accountId, doc };
  };

  router.add(
    { method: 'GET', path: `${BASE}/policies/:policy_id`, operationId: 'getAlertingPolicy', summary: 'Get a notification policy', auth: read, params: { policy_id: 'any' }, tags },
    async (req) => policyView((await policyOf(req)).doc.body),
  );

  router.add(
    { method: 'PUT', path: `${BASE}/policies/:policy_id`, operationId: 'updateAlertingPolicy', summary: 'Update a notification policy (fields given replace the stored ones; answers {id})', auth: edit, params: { policy_id: 'any' }, body: AnyBody, tags },
    async (req) => {
      const { accountId, doc } = await policyOf(req);
      const input = parsePolicy(req.body, false);
      await checkWebhooks(accountId, input);
      const now = clock.now();
      const next: Policy = { ...doc.body, ...input, modified: now.toISOString() } as Policy;
      await policies.update(db, doc, next, now);
      return { id: doc.id };
    },
  );

  router.add(
    { method: 'DELETE', path: `${BASE}/policies/:policy_id`, operationId: 'deleteAlertingPolicy', summary: 'Delete a notification policy (envelope without result)', auth: edit, params: { policy_id: 'any' }, tags },
    async (req) => {
      const { accountId, doc } = await policyOf(req);
      // The policy's silences go with it.
      await db.transaction().execute(async (tx) => {
        const { items } = await silences.list(tx, accountId, { filters: [{ field: 'policy_id', op: 'eq', value: doc.id }] });
        for (const s of items) await silences.delete(tx, accountId, s.id);
        await policies.delete(tx, accountId, doc.id);
      });
      return bare(req);
    },
  );

  // --- webhook destinations ------------------------------------------------------------------
  router.add(
    { method: 'POST', path: `${BASE}/destinations/webhooks`, operationId: 'createAlertingWebhook', summary: 'Create a webhook destination; a test message must be answered with 2xx (answers {id})', auth: edit, body: AnyBody, tags },
    async (req) => {
      const accountId = await account(req);
      const input = parseWebhook(req.body, true);
      const failure = await postWebhook(input.url!, input.secret, testBody(accountId, input.name!));
      if (failure) throw apiError('alerting_webhook_test_failed', failure);
      const now = clock.now();
      const id = hexId();
      const w: Webhook = { id, name: input.name!, url: input.url!, type: webhookType(input.url!), created_at: now.toISOString(), last_success: now.toISOString(), last_failure: null };
      if (input.secret) w.secret = input.secret;
      await webhooks.insert(db, accountId, id, w, now);
      return { id };
    },
  );

  router.add(
    { method: 'GET', path: `${BASE}/destinations/webhooks`, operationId: 'listAlertingWebhooks', summary: 'List webhook destinations', auth: read, tags },
    async (req) => {
      const accountId = await account(req);
      const { items } = await webhooks.list(db, accountId, { order: 'created_on', direction: 'asc' });
      return items.map((d) => webhookView(d.body));
    },
  );

  const webhookOf = async (req: Req<unknown, unknown>) => {
    const accountId = await account(req);
    const doc = await webhooks.get(db, accountId, req.params.webhook_id);
    if (!doc) throw apiError('alerting_destination_not_found', req.params.webhook_id);
    return { accountId, doc };
  };

  router.add(
    { method: 'GET', path: `${BASE}/destinations/webhooks/:webhook_id`, operationId: 'getAlertingWebhook', summary: 'Get a webhook destination', auth: read, params: { webhook_id: 'any' }, tags },
    async (req) => webhookView((await webhookOf(req)).doc.body),
  );

  router.add(
    { method: 'PUT', path: `${BASE}/destinations/webhooks/:webhook_id`, operationId: 'updateAlertingWebhook', summary: 'Update a webhook destination (tested again; answers {id})', auth: edit, params: { webhook_id: 'any' }, body: AnyBody, tags },
    async (req) => {
      const { accountId, doc } = await webhookOf(req);
      const input = parseWebhook(req.body, false);
      const next: Webhook = { ...doc.body, ...input };
      if (input.url) next.type = webhookType(input.url);
      const failure = await postWebhook(next.url, next.secret, testBody(accountId, next.name));
      if (failure) throw apiError('alerting_webhook_test_failed', failure);
      const now = clock.now();
      await webhooks.update(db, doc, { ...next, last_success: now.toISOString() }, now);
      return { id: doc.id };
    },
  );

  router.add(
    { method: 'DELETE', path: `${BASE}/destinations/webhooks/:webhook_id`, operationId: 'deleteAlertingWebhook', summary: 'Delete a webhook destination (envelope without result)', auth: edit, params: { webhook_id: 'any' }, tags },
    async (req) => {
      const { accountId, doc } = await webhookOf(req);
      await webhooks.delete(db, accountId, doc.id);
      return bare(req);
    },
  );

  // --- what can be alerted, and where --------------------------------------------------------
  router.add(
    { method: 'GET', path: `${BASE}/available_alerts`, operationId: 'listAlertingAvailableAlerts', summary: 'Alert types Outpost raises, grouped by product, with the filters each accepts', auth: read, tags },
    async (req) => {
      await account(req);
      return AVAILABLE_ALERTS;
    },
  );

  router.add(
    { method: 'GET', path: `${BASE}/destinations/eligible`, operationId: 'getAlertingEligibleDestinations', summary: 'Delivery mechanisms: whether each can be used and is ready to deliver', auth: read, tags },
    async (req) => {
      const accountId = await account(req);
      const hooks = await webhooks.all(db, accountId);
      return {
        email: [{ type: 'email', eligible: true, ready: ctx.config.alertingSmtp !== undefined }],
        pagerduty: [{ type: 'pagerduty', eligible: false, ready: false }],
        webhooks: [{ type: 'webhook', eligible: true, ready: hooks.length > 0 }],
      };
    },
  );

  // PagerDuty services are connected through the platform's own OAuth hand-off, which Outpost
  // cannot take part in: none is ever connected, a connection is refused with the reason, and
  // policies naming a PagerDuty target keep it as `not_deliverable` in the history.
  router.add(
    { method: 'GET', path: `${BASE}/destinations/pagerduty`, operationId: 'listAlertingPagerduty', summary: 'Connected PagerDuty services (none: Outpost cannot connect PagerDuty)', auth: read, tags },
    async (req) => {
      await account(req);
      return [];
    },
  );
  router.add(
    { method: 'POST', path: `${BASE}/destinations/pagerduty/connect`, operationId: 'connectAlertingPagerduty', summary: 'Start a PagerDuty connection (refused: not available in Outpost)', auth: edit, tags },
    async (req) => {
      await account(req);
      throw apiError('alerting_invalid', 'PagerDuty cannot be connected to Outpost (it needs the OAuth hand-off of the platform); use a webhook destination or email');
    },
  );
  router.add(
    { method: 'GET', path: `${BASE}/destinations/pagerduty/connect/:token_id`, operationId: 'linkAlertingPagerduty', summary: 'Finish a PagerDuty connection (no connection was started)', auth: edit, params: { token_id: 'any' }, tags },
    async (req) => {
      await account(req);
      throw apiError('alerting_destination_not_found', req.params.token_id);
    },
  );
  router.add(
    { method: 'DELETE', path: `${BASE}/destinations/pagerduty`, operationId: 'deleteAlertingPagerduty', summary: 'Remove every PagerDuty service (there is none)', auth: edit, tags },
    async (req) => {
      await account(req);
      return bare(req);
    },
  );

  // --- silences ------------------------------------------------------------------------------
  mountSilenceRoutes(ctx, BASE, account, { read, edit });

  // --- history -------------------------------------------------------------------------------
  router.add(
    { method: 'GET', path: `${BASE}/history`, operationId: 'listAlertingHistory', summary: 'Alerts sent (and pending) with their delivery status, newest first', auth: read, query: HistoryQuery, tags },
    async (req) => {
      const accountId = await account(req);
      kick();
      const q = req.query;
      const all = (await deliveries.all(db, accountId))
        .map((d) => d.body)
        .filter((d) => (!q.since || d.sent >= new Date(q.since).toISOString()) && (!q.before || d.sent < new Date(q.before).toISOString()))
        .sort((a, b) => (a.sent < b.sent ? 1 : a.sent > b.sent ? -1 : 0));
      const { limit, offset } = limitOffset(q);
      return pageFrom(all.slice(offset, offset + limit).map(historyView), all.length, q);
    },
  );
}
