/**
 * One error table for the whole management API. Every failure an area reports is an `ApiError`
 * built from an entry here, so codes, statuses and default messages live in one place.
 * Codes follow what the real platform answers (see shared/contract/conventions.md §5).
 */

export interface ErrorSpec {
  /** Platform error code carried in `errors[].code`. */
  code: number;
  /** HTTP status. */
  status: number;
  /** Default message; `{0}`, `{1}` … are replaced by `apiError` arguments. */
  message: string;
}

export const CODES = {
  // --- generic request handling -------------------------------------------------------------
  invalid_json: { code: 6007, status: 400, message: 'Malformed JSON in request body: {0}' },
  json_too_deep: {
    code: 6007,
    status: 400,
    // Well-formed but too deep: say so rather than call it malformed.
    message: 'JSON in {0} is nested deeper than {1} levels of arrays and objects (the limit): send it flatter',
  },
  validation: { code: 1004, status: 400, message: '{0}' },
  body_too_large: { code: 6012, status: 413, message: 'Request body exceeds the limit of {0} bytes' },
  no_route: { code: 7003, status: 404, message: 'No route for the URI' },
  method_not_allowed: { code: 7001, status: 405, message: 'Method {0} not allowed for this route' },
  invalid_identifier: {
    code: 7003,
    status: 400,
    message: 'Could not route to {0}, perhaps your object identifier is invalid?',
  },
  rate_limited: {
    code: 971,
    status: 429,
    message: 'Please wait and consider throttling your request speed',
  },
  internal: { code: 1000, status: 500, message: 'Internal server error; see the server log for {0}' },
  unsupported_media: { code: 6002, status: 415, message: 'Unsupported content type: {0}' },

  // --- authentication and authorisation -----------------------------------------------------
  auth_missing: {
    code: 10000,
    status: 401,
    message: 'Authentication error: missing X-Auth-Key, X-Auth-Email or Authorization headers',
  },
  auth_malformed: {
    code: 10000,
    status: 401,
    message: 'Authentication error: invalid format for Authorization header',
  },
  auth_invalid: { code: 10000, status: 401, message: 'Authentication error: invalid access token' },
  auth_expired: { code: 10000, status: 401, message: 'Authentication error: the token has expired' },
  forbidden: {
    code: 9109,
    status: 403,
    message: 'Unauthorized to access requested resource: the token lacks {0}',
  },
  token_location: { code: 9109, status: 403, message: 'Cannot use the access token from location: {0}' },
  forbidden_resource: {
    code: 10000,
    status: 403,
    message: 'Authentication error: the token is not authorised for {0}',
  },

  // --- accounts and tokens ------------------------------------------------------------------
  account_not_found: { code: 7003, status: 404, message: 'Account {0} not found' },
  token_not_found: { code: 1003, status: 404, message: 'Token {0} not found' },
  token_invalid_policy: { code: 1001, status: 400, message: '{0}' },

  // --- zones --------------------------------------------------------------------------------
  zone_not_found: { code: 1001, status: 404, message: 'Zone {0} not found' },
  zone_exists: { code: 1061, status: 409, message: '{0} already exists.' },
  zone_invalid_name: { code: 1099, status: 400, message: 'Invalid zone name {0}: {1}' },
  zone_patch_one: {
    code: 1005,
    status: 400,
    message: 'Only one of paused, type or vanity_name_servers may be changed per request',
  },

  // --- DNS records --------------------------------------------------------------------------
  dns_not_found: { code: 81044, status: 404, message: 'Record does not exist.' },
  dns_identical: { code: 81058, status: 400, message: 'An identical record already exists.' },
  dns_cname_conflict: {
    code: 81053,
    status: 400,
    message: 'An A, AAAA, or CNAME record with that host already exists: {0}',
  },
  dns_invalid: { code: 9000, status: 400, message: '{0}' },
  dns_invalid_ttl: {
    code: 9021,
    status: 400,
    message: 'Invalid TTL. Must be between 60 and 86400 seconds, or 1 for Automatic.',
  },
  dns_outside_zone: {
    code: 9000,
    status: 400,
    message: 'DNS name {0} is not inside zone {1}.',
  },
  dns_import_invalid: { code: 81045, status: 400, message: 'Zone file could not be parsed: {0}' },
  dns_validation: { code: 1004, status: 400, message: 'DNS Validation Error: {0}' },
  dns_invalid_name: { code: 9000, status: 400, message: 'DNS name is invalid: {0}' },
  dns_type_not_proxiable: {
    code: 9004,
    status: 400,
    message:
      'This record type cannot be proxied: proxied may only be true for A, AAAA and CNAME records.',
  },
  dns_invalid_ipv4: {
    code: 9005,
    status: 400,
    message: 'Content for A record must be a valid IPv4 address.',
  },
  dns_invalid_ipv6: {
    code: 9006,
    status: 400,
    message: 'Content for AAAA record must be a valid IPv6 address.',
  },
  dns_invalid_target: {
    code: 9007,
    status: 400,
    message: 'Content for {0} record is invalid: {1}',
  },
  dns_invalid_priority: {
    code: 9008,
    status: 400,
    message: 'Invalid priority, priority must be set and be between 0 and 65535.',
  },
  dns_priority_required: { code: 9100, status: 400, message: 'priority is a required field.' },
  dns_cname_exists: {
    code: 81054,
    status: 400,
    message: 'A CNAME record with that host already exists: {0}',
  },
  dns_ns_conflict: {
    code: 81056,
    status: 400,
    message: 'NS records cannot share a host with records of other types: {0}',
  },

  // --- relay (TURN) keys and credentials ----------------------------------------------------
  relay_key_not_found: { code: 7003, status: 404, message: 'Relay key {0} not found' },
  relay_unauthorized: { code: 10000, status: 401, message: 'Authentication error: {0}' },
  sfu_app_not_found: { code: 7003, status: 404, message: 'Media forwarding app {0} not found' },

  // --- network interconnects (CNI) ----------------------------------------------------------
  cni_invalid: { code: 1601, status: 400, message: '{0}' },
  cni_interconnect_not_found: { code: 1602, status: 404, message: 'Interconnect {0} not found' },
  cni_slot_not_found: { code: 1603, status: 404, message: 'Slot {0} not found' },
  cni_slot_occupied: { code: 1604, status: 409, message: 'Slot {0} is already occupied by an interconnect' },
  cni_interconnect_exists: { code: 1605, status: 409, message: 'An interconnect named {0} already exists in this account' },
  cni_interconnect_in_use: {
    code: 1606,
    status: 409,
    message: 'Interconnect {0} is used by {1} CNI object(s); delete them first',
  },
  cni_not_found: { code: 1607, status: 404, message: 'CNI {0} not found' },
  cni_conflict: { code: 1608, status: 409, message: '{0}' },
  cni_operator_only: {
    code: 1609,
    status: 403,
    message: 'Operator endpoints need a root credential (the root API token or the global key)',
  },

  magic_invalid: { code: 1610, status: 400, message: '{0}' },
  magic_tunnel_not_found: { code: 1611, status: 404, message: '{0} tunnel {1} not found' },
  magic_tunnel_exists: {
    code: 1612,
    status: 409,
    message: 'A tunnel named {0} already exists in this account (GRE and IPsec tunnel names share one namespace)',
  },

  // --- smart routing ------------------------------------------------------------------------
  smart_routing_no_billing: {
    code: 1651,
    status: 403,
    message: 'Smart routing cannot be changed: account {0} has no billing profile configured',
  },
  smart_routing_plan_forbids: {
    code: 1652,
    status: 403,
    message: 'Smart routing cannot be changed on this zone: its {0} plan does not allow it',
  },
  smart_routing_operator_only: {
    code: 1653,
    status: 403,
    message: 'Operator endpoints need a root credential (the root API token or the global key)',
  },

  // --- rulesets (failures carry source.pointer where a field is at fault) ---------------------
  ruleset_invalid: { code: 20021, status: 400, message: '{0}' },
  ruleset_not_found: { code: 10003, status: 404, message: 'could not find ruleset {0}' },
  ruleset_entrypoint_not_found: { code: 10003, status: 404, message: 'could not find entrypoint ruleset in the {0} phase' },
  ruleset_rule_not_found: { code: 10003, status: 404, message: 'could not find rule {0} in ruleset {1}' },
  ruleset_version_not_found: { code: 10003, status: 404, message: 'could not find version {0} of ruleset {1}' },
  ruleset_entrypoint_exists: {
    code: 20217,
    status: 400,
    message: "'{0}' is not a valid value for kind because exceeded maximum number of {0} rulesets for phase {1}",
  },
  ruleset_managed_read_only: { code: 20023, status: 403, message: 'managed ruleset {0} is read-only; override it with an execute rule in the {1} phase entry point' },
  ruleset_latest_version: { code: 20024, status: 400, message: 'version {0} is the current version of ruleset {1} and cannot be deleted' },

  // --- IP access rules ------------------------------------------------------------------------
  access_rule_invalid: { code: 10014, status: 400, message: '{0}' },
  access_rule_duplicate: { code: 10009, status: 400, message: 'firewallaccessrules.api.duplicate_of_existing' },
  access_rule_not_found: { code: 10006, status: 404, message: 'Access rule {0} not found' },
  access_rule_inherited: {
    code: 10015,
    status: 400,
    message: 'Access rule {0} belongs to account {1} and applies to all its zones; change it through /accounts/{1}/firewall/access_rules/rules',
  },

  // --- proxied TCP/UDP applications (spectrum) ------------------------------------------------
  spectrum_invalid: { code: 11001, status: 400, message: '{0}' },
  spectrum_app_not_found: { code: 11002, status: 404, message: 'Application {0} not found' },
  spectrum_conflict: { code: 11003, status: 409, message: '{0}' },
  spectrum_dns_conflict: {
    code: 11004,
    status: 409,
    message: 'A DNS record at {0} already exists and is not managed by a proxied application: {1}',
  },
  spectrum_edge_in_use: { code: 11005, status: 409, message: 'Edge address {0} is already in use{1}' },
  spectrum_analytics_invalid: { code: 11006, status: 400, message: '{0}' },

  // --- tunnels ------------------------------------------------------------------------------
  tunnel_invalid: { code: 1001, status: 400, message: '{0}' },
  tunnel_not_found: { code: 1003, status: 404, message: 'Tunnel {0} not found' },
  tunnel_name_exists: { code: 1013, status: 409, message: 'tunnel with name already exists' },
  tunnel_has_connections: {
    code: 1022,
    status: 400,
    message: 'Cannot delete tunnel because it has active connections; clean them up first (DELETE /accounts/{account_id}/cfd_tunnel/{tunnel_id}/connections)',
  },
  tunnel_ingress_invalid: { code: 1056, status: 400, message: '{0}' },
  tunnel_route_invalid: { code: 1001, status: 400, message: '{0}' },
  tunnel_route_not_found: { code: 1004, status: 404, message: 'Route {0} not found' },
  tunnel_route_overlap: {
    code: 1015,
    status: 409,
    message: 'The route {0} overlaps the existing route {1} (tunnel {2}) in the same virtual network',
  },
  tunnel_no_route_for_ip: { code: 1004, status: 404, message: 'No route covers {0}' },
  tunnel_dns_no_zone: { code: 1003, status: 400, message: 'Hostname {0} is not inside any zone of account {1}' },
  tunnel_dns_route_not_found: { code: 1004, status: 404, message: 'DNS route {0} not found' },
  tunnel_connector_unauthorized: { code: 1002, status: 401, message: 'Unauthorized: {0}' },
  // --- scripts (the minimal upload API workflows need) ------------------------------------------
  worker_not_found: { code: 10007, status: 404, message: 'This Worker does not exist on your account: {0}' },
  worker_invalid: { code: 10021, status: 400, message: '{0}' },
  worker_runtime_unavailable: { code: 10013, status: 503, message: 'The script runtime is not available: {0}' },
  worker_route_invalid: { code: 10022, status: 400, message: '{0}' },
  worker_route_not_found: { code: 10005, status: 404, message: 'Route not found: {0}' },
  worker_route_exists: { code: 10020, status: 409, message: 'A route with the same pattern already exists: {0}' },
  worker_domain_invalid: { code: 100116, status: 400, message: '{0}' },
  worker_domain_not_found: { code: 100114, status: 404, message: 'Custom domain not found: {0}' },
  worker_domain_conflict: { code: 100117, status: 409, message: '{0}' },
  worker_subdomain_not_found: { code: 10007, status: 404, message: 'This account has no workers subdomain yet: PUT /accounts/{0}/workers/subdomain with {"subdomain": "<name>"}' },
  worker_subdomain_invalid: { code: 10033, status: 400, message: '{0}' },
  worker_subdomain_taken: { code: 10032, status: 409, message: 'The subdomain {0} is already taken' },
  worker_version_not_found: { code: 10007, status: 404, message: 'Version not found: {0}' },
  worker_deployment_not_found: { code: 10007, status: 404, message: 'Deployment not found: {0}' },
  worker_secret_not_found: { code: 10056, status: 404, message: 'Secret not found: {0}' },
  kv_invalid: { code: 10026, status: 400, message: '{0}' },
  kv_namespace_not_found: { code: 10013, status: 404, message: 'namespace not found: {0}' },
  kv_namespace_exists: { code: 10014, status: 409, message: 'A namespace with this account ID and title already exists: {0}' },
  kv_key_not_found: { code: 10009, status: 404, message: "get: 'key not found'" },

  // --- workflows (binding errors carry the platform's `(code) message` form) --------------------
  workflow_invalid: { code: 10200, status: 400, message: '{0}' },
  workflow_not_found: { code: 10201, status: 404, message: '(workflow.not_found) Workflow {0} not found' },
  workflow_instance_not_found: { code: 10202, status: 404, message: '(instance.not_found) Instance not found' },
  workflow_instance_exists: { code: 10203, status: 409, message: '(instance.already_exists) Instance already exists' },
  workflow_invalid_id: {
    code: 10204,
    status: 400,
    message: '(instance.invalid_id) Instance id {0} is invalid: up to 100 characters matching ^[a-zA-Z0-9_][a-zA-Z0-9-_]*$, not cf_ followed by 64 hex characters',
  },
  workflow_cannot_terminate: { code: 10205, status: 409, message: '(instance.cannot_terminate) Cannot terminate instance since its on a finite state' },
  workflow_cannot_pause: { code: 10206, status: 409, message: '(instance.cannot_pause) Cannot pause instance since its on a finite state' },
  workflow_cannot_resume: { code: 10207, status: 409, message: '(instance.cannot_resume) Cannot resume instance since its on a finite state' },
  workflow_cannot_restart: { code: 10208, status: 409, message: '(instance.cannot_restart) {0}' },
  workflow_batch_too_large: { code: 10209, status: 400, message: '(instance.batch_too_large) A batch holds at most 100 instances, got {0}' },
  workflow_payload_too_large: { code: 10210, status: 413, message: '{0} is {1} bytes; the limit is 1048576 bytes (1 MiB)' },
  workflow_script_missing: { code: 10211, status: 400, message: 'Script {0} does not exist on this account; upload it first' },

  // --- snippets -------------------------------------------------------------------------------
  snippet_not_found: { code: 1100, status: 404, message: 'Snippet {0} not found' },
  snippet_invalid_name: {
    code: 1101,
    status: 400,
    message: 'Invalid snippet name {0}: use 1 to 50 characters a-z, 0-9 and _',
  },
  snippet_invalid: { code: 1102, status: 400, message: '{0}' },
  snippet_script_error: { code: 1103, status: 400, message: 'The snippet does not start: {0}' },
  snippet_limit: { code: 1104, status: 400, message: 'This zone already has {0} snippets, the most it may have' },
  snippet_in_use: { code: 1105, status: 409, message: 'Snippet {0} is used by a snippet rule; change the rules first' },
  snippet_rules_invalid: { code: 1106, status: 400, message: '{0}' },
  runtime_unavailable: { code: 1107, status: 503, message: 'The script runtime is not available: {0}' },
  // --- images (5400/5401/5403 as the spec's table; the others are Outpost's) ---------------------
  image_invalid_format: { code: 5400, status: 415, message: 'Invalid format: {0}' },
  image_too_large: { code: 5401, status: 413, message: 'Image too large: {0}' },
  image_invalid_transform: { code: 5403, status: 400, message: 'Invalid transform: {0}' },
  image_not_found: { code: 5404, status: 404, message: 'Image not found: {0}' },
  image_invalid: { code: 5455, status: 400, message: '{0}' },
  image_exists: { code: 5409, status: 409, message: 'An image with id {0} already exists' },
  image_variant_not_found: { code: 5406, status: 404, message: 'Variant not found: {0}' },
  image_key_not_found: { code: 5407, status: 404, message: 'Signing key not found: {0}' },
  image_upload_url_invalid: { code: 5410, status: 410, message: 'This upload URL {0}; request a new one with POST /accounts/{account_id}/images/v2/direct_upload' },
  image_source_failed: { code: 5452, status: 400, message: 'Could not fetch the image from url: {0}' },
  // --- dispatch namespaces (scripts hosted for platforms) ----------------------------------------
  dispatch_namespace_not_found: { code: 100119, status: 404, message: 'Dispatch namespace not found: {0}' },
  dispatch_namespace_exists: { code: 100118, status: 409, message: 'A dispatch namespace with this name already exists: {0}' },
  dispatch_script_not_found: { code: 10007, status: 404, message: 'This Worker does not exist in dispatch namespace {0}: {1}' },
  assets_token_invalid: { code: 10000, status: 401, message: 'Authentication error: {0}' },
  // --- API gateway and token validation (Outpost's codes) ---------------------------------------
  api_gateway_invalid: { code: 10400, status: 400, message: '{0}' },
  api_gateway_operation_not_found: { code: 10404, status: 404, message: 'Operation {0} not found in this zone' },
  api_gateway_discovery_not_found: { code: 10405, status: 404, message: 'Discovered operation {0} not found in this zone' },
  token_config_not_found: { code: 10406, status: 404, message: 'Token validation configuration {0} not found in this zone' },
  token_rule_not_found: { code: 10407, status: 404, message: 'Token validation rule {0} not found in this zone' },
  user_schema_not_found: { code: 10408, status: 404, message: 'Schema {0} not found in this zone' },
  api_gateway_label_not_found: { code: 10409, status: 404, message: 'Label {0} not found in this zone' },
  api_gateway_label_exists: { code: 10410, status: 409, message: 'A user label named {0} already exists in this zone' },
  // --- pipelines (streams, sinks, pipelines, ingestion) -----------------------------------------
  pipelines_invalid: { code: 1001, status: 400, message: '{0}' },
  pipelines_sql_invalid: { code: 1002, status: 400, message: 'Invalid pipeline SQL: {0}' },
  pipelines_stream_not_found: { code: 1003, status: 404, message: 'Stream {0} not found' },
  pipelines_sink_not_found: { code: 1004, status: 404, message: 'Sink {0} not found' },
  pipelines_pipeline_not_found: { code: 1005, status: 404, message: 'Pipeline {0} not found' },
  pipelines_name_exists: { code: 1006, status: 409, message: '{0}' },
  pipelines_in_use: { code: 1007, status: 409, message: '{0}' },
  pipelines_ingest_invalid: { code: 1008, status: 400, message: '{0}' },
  pipelines_ingest_too_large: { code: 1009, status: 413, message: 'Payload too large: {0} bytes; split it below 1 MB (1048576 bytes) per request' },
  pipelines_ingest_rate_limited: { code: 1010, status: 429, message: 'Rate limited: this stream accepts {0} bytes per second; back off and retry' },
  pipelines_ingest_disabled: { code: 1011, status: 404, message: '{0}' },
  pipelines_query_invalid: { code: 1012, status: 400, message: '{0}' },
  // --- meeting platform (bodies are {success:false, error:{code, message}}) ----------------------
  rtk_app_not_found: { code: 404, status: 404, message: 'App {0} not found' },
  rtk_not_found: { code: 404, status: 404, message: '{0} {1} not found' },
  rtk_no_active_session: { code: 404, status: 404, message: 'No active session for meeting {0}' },
  rtk_invalid: { code: 400, status: 400, message: '{0}' },
  rtk_conflict: { code: 409, status: 409, message: '{0}' },
  // --- DDoS attack events and alerting (Outpost's codes; the platform's alerting answers 17xxx) ---
  ddos_attack_not_found: { code: 10401, status: 404, message: 'Attack {0} not found' },
  alerting_invalid: { code: 17001, status: 400, message: '{0}' },
  alerting_policy_not_found: { code: 17002, status: 404, message: 'Policy {0} not found' },
  alerting_destination_not_found: { code: 17003, status: 404, message: 'Destination {0} not found' },
  alerting_webhook_test_failed: { code: 17004, status: 400, message: 'The webhook test message failed: {0}' },
  alerting_silence_not_found: { code: 17005, status: 404, message: 'Silence {0} not found' },
  rtk_forbidden: { code: 403, status: 403, message: '{0}' },
  rtk_unavailable: { code: 503, status: 503, message: '{0}' },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorName = keyof typeof CODES;

export interface ErrorItem {
  code: number;
  message: string;
  error_chain?: { code: number; message: string }[];
  source?: { pointer: string };
}

export class ApiError extends Error {
  readonly status: number;
  readonly errors: ErrorItem[];
  readonly headers: Record<string, string>;

  constructor(status: number, errors: ErrorItem[], headers: Record<string, string> = {}) {
    super(errors.map((e) => e.message).join('; '));
    this.status = status;
    this.errors = errors;
    // The official client retries 409 unless told not to; conflicts never heal by retrying.
    this.headers = status === 409 ? { 'x-should-retry': 'false', ...headers } : headers;
  }
}

function format(template: string, args: readonly (string | number)[]): string {
  return template.replace(/\{(\d+)\}/g, (_, i: string) => String(args[Number(i)] ?? ''));
}

/** Builds an ApiError from the table: `throw apiError('zone_not_found', zoneId)`. */
export function apiError(name: ErrorName, ...args: (string | number)[]): ApiError {
  const spec: ErrorSpec = CODES[name];
  return new ApiError(spec.status, [{ code: spec.code, message: format(spec.message, args) }]);
}
