/**
 * Alert policies and webhook destinations: the stored shapes and the checks of request bodies.
 * `alert_type` accepts the platform's API values and the spec's display-style DDoS names (stored
 * as the API value, answered in the spec's form); `filters` accept the spec's numbers and names
 * (`hostnames`, `protocols`, `ip_addresses`, `ip_prefixes`) and the real string arrays
 * (`target_hostname`, `protocol`, `target_ip`), stored and answered as the real string arrays.
 */
import { isIP } from 'node:net';
import { apiError } from '../../core/errors.ts';

/** Every `alert_type` of the platform's API. */
export const ALERT_TYPES = new Set([
  'abuse_report_alert', 'access_custom_certificate_expiration_type', 'advanced_ddos_attack_l4_alert', 'advanced_ddos_attack_l7_alert',
  'advanced_http_alert_error', 'bgp_hijack_notification', 'billing_usage_alert', 'block_notification_block_removed',
  'block_notification_new_block', 'block_notification_review_rejected', 'bot_traffic_basic_alert', 'brand_protection_alert',
  'brand_protection_digest', 'clickhouse_alert_fw_anomaly', 'clickhouse_alert_fw_ent_anomaly', 'cloudforce_one_request_notification',
  'cni_maintenance_notification', 'custom_analytics', 'custom_bot_detection_alert', 'custom_ssl_certificate_event_type',
  'dedicated_ssl_certificate_event_type', 'device_connectivity_anomaly_alert', 'dos_attack_l4', 'dos_attack_l7',
  'expiring_service_token_alert', 'failing_logpush_job_disabled_alert', 'fbm_auto_advertisement', 'fbm_dosd_attack',
  'fbm_volumetric_attack', 'health_check_status_notification', 'hostname_aop_custom_certificate_expiration_type',
  'http_alert_edge_error', 'http_alert_origin_error', 'image_notification', 'image_resizing_notification', 'incident_alert',
  'load_balancing_health_alert', 'load_balancing_pool_enablement_alert', 'logo_match_alert', 'magic_tunnel_health_check_event',
  'magic_wan_tunnel_health', 'maintenance_event_notification', 'mtls_certificate_store_certificate_expiration_type',
  'pages_event_alert', 'radar_notification', 'real_origin_monitoring', 'scriptmonitor_alert_new_code_change_detections',
  'scriptmonitor_alert_new_hosts', 'scriptmonitor_alert_new_malicious_hosts', 'scriptmonitor_alert_new_malicious_scripts',
  'scriptmonitor_alert_new_malicious_url', 'scriptmonitor_alert_new_max_length_resource_url', 'scriptmonitor_alert_new_resources',
  'secondary_dns_all_primaries_failing', 'secondary_dns_primaries_failing', 'secondary_dns_warning',
  'secondary_dns_zone_successfully_updated', 'secondary_dns_zone_validation_warning', 'security_insights_alert', 'sentinel_alert',
  'stream_live_notifications', 'synthetic_test_latency_alert', 'synthetic_test_low_availability_alert', 'traffic_anomalies_alert',
  'tunnel_health_event', 'tunnel_update_event', 'universal_ssl_event_type', 'web_analytics_metrics_update',
  'zone_aop_custom_certificate_expiration_type',
]);

/** The spec's DDoS alert names and the API values they stand for. */
export const SPEC_ALERT_TYPES: Record<string, string> = {
  http_ddos_attack_alert: 'dos_attack_l7',
  layer_3_4_ddos_attack_alert: 'dos_attack_l4',
  advanced_http_ddos_attack_alert: 'advanced_ddos_attack_l7_alert',
  advanced_layer_3_4_ddos_attack_alert: 'advanced_ddos_attack_l4_alert',
};
const API_TO_SPEC = Object.fromEntries(Object.entries(SPEC_ALERT_TYPES).map(([k, v]) => [v, k]));

/** API alert types that DDoS attacks of each layer trigger. */
export const DDOS_ALERT_TYPES = { l7: ['dos_attack_l7', 'advanced_ddos_attack_l7_alert'], l4: ['dos_attack_l4', 'advanced_ddos_attack_l4_alert'] };

export function specAlertType(apiValue: string): string {
  return API_TO_SPEC[apiValue] ?? apiValue;
}

/** Filter keys of the platform's API. */
const FILTER_KEYS = new Set([
  'actions', 'affected_asns', 'affected_components', 'affected_locations', 'airport_code', 'alert_trigger_preferences',
  'alert_trigger_preferences_value', 'enabled', 'environment', 'event', 'event_source', 'event_type', 'group_by',
  'health_check_id', 'incident_impact', 'input_id', 'insight_class', 'limit', 'logo_tag', 'megabits_per_second', 'new_health',
  'new_status', 'packets_per_second', 'pool_id', 'pop_names', 'product', 'project_id', 'protocol', 'query_tag',
  'requests_per_second', 'selectors', 'services', 'slo', 'status', 'target_hostname', 'target_ip', 'target_zone_name',
  'traffic_exclusions', 'tunnel_id', 'tunnel_name', 'type', 'where', 'zones',
]);
/** The spec's filter names. */
const FILTER_ALIASES: Record<string, string> = { hostnames: 'target_hostname', protocols: 'protocol', ip_addresses: 'target_ip', ip_prefixes: 'target_ip' };
const NUMERIC = new Set(['requests_per_second', 'packets_per_second', 'megabits_per_second']);

export type Filters = Record<string, string[]>;

export interface Mechanisms {
  email?: { id: string }[];
  webhooks?: { id: string }[];
  pagerduty?: { id: string }[];
}

export interface Policy {
  id: string;
  name: string;
  description: string;
  enabled: boolean;
  /** The API value. */
  alert_type: string;
  alert_interval?: string;
  filters: Filters;
  mechanisms: Mechanisms;
  created: string;
  modified: string;
}

export interface Webhook {
  id: string;
  name: string;
  url: string;
  type: string;
  secret?: string;
  created_at: string;
  last_success: string | null;
  last_failure: string | null;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const bad = (message: string) => apiError('alerting_invalid', message);

function str(v: unknown, field: string, max = 256, min = 0): string {
  if (typeof v !== 'string') throw bad(`${field}: expected a string`);
  if (v.length < min) throw bad(`${field}: must not be empty`);
  if (v.length > max) throw bad(`${field}: at most ${max} characters`);
  return v;
}

export function parseAlertType(v: unknown): string {
  const s = str(v, 'alert_type', 128, 1);
  const api = SPEC_ALERT_TYPES[s] ?? s;
  if (!ALERT_TYPES.has(api)) throw bad(`alert_type: ${s} is not an alert type`);
  return api;
}

function isIpOrCidr(s: string): boolean {
  const [ip, bits, more] = s.split('/');
  const fam = isIP(ip);
  if (!fam || more !== undefined) return false;
  if (bits === undefined) return true;
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (fam === 4 ? 32 : 128);
}

export function parseFilters(v: unknown): Filters {
  if (v === undefined || v === null) return {};
  if (!isObj(v)) throw bad('filters: expected an object');
  const out: Filters = {};
  for (const [rawKey, value] of Object.entries(v)) {
    const key = FILTER_ALIASES[rawKey] ?? rawKey;
    if (!FILTER_KEYS.has(key)) throw bad(`filters.${rawKey}: unknown filter`);
    const list = Array.isArray(value) ? value : [value];
    if (list.length > 100) throw bad(`filters.${rawKey}: at most 100 values`);
    const values = list.map((item, i) => {
      if (typeof item === 'number' && Number.isFinite(item)) return String(item);
      if (typeof item !== 'string' || item.length === 0 || item.length > 256) throw bad(`filters.${rawKey}[${i}]: expected a non-empty string or a number`);
      return item;
    });
    if (NUMERIC.has(key)) {
      for (const s of values) if (!/^\d+(\.\d+)?$/.test(s)) throw bad(`filters.${rawKey}: ${s} is not a non-negative number`);
    }
    if (key === 'zones') for (const s of values) if (!/^[0-9a-f]{32}$/.test(s)) throw bad(`filters.${rawKey}: ${s} is not a zone id`);
    if (key === 'target_ip') for (const s of values) if (!isIpOrCidr(s)) throw bad(`filters.${rawKey}: ${s} is not an IP address or CIDR prefix`);
    out[key] = [...(out[key] ?? []), ...values];
  }
  return out;
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

export function parseMechanisms(v: unknown): Mechanisms {
  if (!isObj(v)) throw bad('mechanisms: expected an object with email, webhooks and/or pagerduty');
  const out: Mechanisms = {};
  for (const [key, list] of Object.entries(v)) {
    if (key !== 'email' && key !== 'webhooks' && key !== 'pagerduty') throw bad(`mechanisms.${key}: unknown mechanism; use email, webhooks or pagerduty`);
    if (!Array.isArray(list) || list.length > 50) throw bad(`mechanisms.${key}: expected an array of at most 50 {id}`);
    out[key] = list.map((m, i) => {
      if (!isObj(m) || typeof m.id !== 'string' || m.id.length === 0 || m.id.length > 256) throw bad(`mechanisms.${key}[${i}]: expected {id: string}`);
      if (key === 'email' && !EMAIL.test(m.id)) throw bad(`mechanisms.email[${i}]: ${m.id} is not an email address`);
      if (key === 'webhooks' && !/^[0-9a-f]{32}$/.test(m.id)) throw bad(`mechanisms.webhooks[${i}]: ${m.id} is not a webhook destination id`);
      return { id: m.id };
    });
  }
  return out;
}

export interface PolicyInput {
  name?: string;
  description?: string;
  enabled?: boolean;
  alert_type?: string;
  alert_interval?: string;
  filters?: Filters;
  mechanisms?: Mechanisms;
}

/** Reads a policy body; `create` requires name, alert_type, enabled and mechanisms. */
export function parsePolicy(body: unknown, create: boolean): PolicyInput {
  if (!isObj(body)) throw bad('the request body must be a JSON object');
  const known = new Set(['name', 'description', 'enabled', 'alert_type', 'alert_interval', 'filters', 'mechanisms']);
  for (const k of Object.keys(body)) if (!known.has(k)) throw bad(`${k}: unknown field`);
  const out: PolicyInput = {};
  if (create) {
    for (const k of ['name', 'alert_type', 'mechanisms']) if (body[k] === undefined) throw bad(`${k}: required`);
  }
  if (body.name !== undefined) out.name = str(body.name, 'name', 256, 1);
  if (body.description !== undefined) out.description = str(body.description, 'description', 1024);
  if (body.enabled !== undefined) {
    if (typeof body.enabled !== 'boolean') throw bad('enabled: expected a boolean');
    out.enabled = body.enabled;
  }
  if (body.alert_type !== undefined) out.alert_type = parseAlertType(body.alert_type);
  if (body.alert_interval !== undefined) {
    const s = str(body.alert_interval, 'alert_interval', 16);
    if (!/^\d+(\.\d+)?[smh]$/.test(s)) throw bad('alert_interval: a duration such as 30m, 1h or 300s');
    out.alert_interval = s;
  }
  if (body.filters !== undefined) out.filters = parseFilters(body.filters);
  if (body.mechanisms !== undefined) out.mechanisms = parseMechanisms(body.mechanisms);
  return out;
}

export function parseWebhook(body: unknown, create: boolean): { name?: string; url?: string; secret?: string } {
  if (!isObj(body)) throw bad('the request body must be a JSON object');
  for (const k of Object.keys(body)) if (!['name', 'url', 'secret'].includes(k)) throw bad(`${k}: unknown field`);
  if (create && (body.name === undefined || body.url === undefined)) throw bad(`${body.name === undefined ? 'name' : 'url'}: required`);
  const out: { name?: string; url?: string; secret?: string } = {};
  if (body.name !== undefined) out.name = str(body.name, 'name', 256, 1);
  if (body.url !== undefined) {
    const u = str(body.url, 'url', 2048, 1);
    let parsed: URL;
    try {
      parsed = new URL(u);
    } catch {
      throw bad(`url: ${u} is not a URL`);
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw bad('url: must be an http or https URL');
    out.url = u;
  }
  if (body.secret !== undefined) out.secret = str(body.secret, 'secret', 1024);
  return out;
}

/** The destination type the platform derives from the URL's host. */
export function webhookType(url: string): string {
  const host = new URL(url).hostname;
  if (host.endsWith('hooks.slack.com')) return 'slack';
  if (host.endsWith('discord.com')) return 'discord';
  if (host.endsWith('chat.googleapis.com')) return 'gchat';
  if (host.includes('datadoghq')) return 'datadog';
  if (host.includes('opsgenie')) return 'opsgenie';
  if (host.includes('splunk')) return 'splunk';
  if (host.includes('feishu')) return 'feishu';
  return 'generic';
}
