/**
 * Configuration: command-line flags > environment (`OUTPOST_*`) > config file (JSON) > defaults.
 * Every port accepts 0 (pick a free one).
 */
import { readFileSync, existsSync } from 'node:fs';
import { join, resolve } from 'node:path';

export interface RateLimitConfig {
  /** Requests allowed per window and credential. */
  requests: number;
  windowSeconds: number;
}

export interface Config {
  host: string;
  apiPort: number;
  edgePort: number;
  /** Authoritative DNS server port, UDP and TCP (0 = any free port). */
  dnsPort: number;
  /** Addresses proxied DNS records answer with; empty = derived from `host` (loopback → 127.0.0.1 and ::1). */
  edgeAddresses: string[];
  dataDir: string;
  /** `postgres://…` for PostgreSQL; otherwise a SQLite file path (default `<dataDir>/outpost.db`). */
  database: string;
  /** PostgreSQL schema to use (created if missing). */
  databaseSchema?: string;
  logLevel: string;
  /** Seeded root token secret and account id (`OUTPOST_API_TOKEN`, `OUTPOST_ACCOUNT_ID`). */
  apiToken?: string;
  accountId?: string;
  /** Legacy global-key credentials (`X-Auth-Email` + `X-Auth-Key`). */
  apiEmail: string;
  apiKey?: string;
  /** Maximum accepted request body, bytes. */
  bodyLimit: number;
  /** Off unless set. */
  rateLimit?: RateLimitConfig;
  /** `immediate`: new zones are active at once; `manual`: pending until an activation check. */
  zoneActivation: 'immediate' | 'manual';
  nameServers: string[];
  /** Origin connect timeout at the edge (522 after it), ms. */
  originConnectTimeoutMs: number;
  /** Wait for the origin's response headers (524 after it), ms. */
  originResponseTimeoutMs: number;
  /**
   * Test mode: the edge takes the visitor's address, country and ASN from `x-outpost-client-ip`,
   * `x-outpost-country` and `x-outpost-asn` request headers. Never enable in production.
   */
  edgeTestHeaders: boolean;
  /** TURN/STUN listener (UDP and TCP), 0 = any free port. */
  turnPort: number;
  /** TURN over TLS port, used when relayTls is set. */
  turnsPort: number;
  /** `off`, `self-signed` (generated with openssl into the data directory) or `<cert.pem>,<key.pem>`. */
  relayTls: string;
  /** Host name or address put into generated ICE server URLs (default: the listen host). */
  relayHost?: string;
  /** Relayed-address port range `min-max`. */
  relayPorts: string;
  /** Allow loopback and private peers (tests on one machine); the platform refuses them. */
  relayAllowLoopback: boolean;
  /** Concurrent allocations per relay username. */
  relayQuota: number;
  /**
   * Alternative relay ports: `auto` (53/udp, 80/tcp, 443/tls unless --turn-port is 0), `off`,
   * or a mapping such as `udp53=10053,tcp80=8080,tls443=8443`.
   */
  relayAltPorts: string;
  /** Graceful-stop budget for in-flight requests, ms. */
  shutdownTimeoutMs: number;
  /** Seconds a new interconnect stays `pending` before it turns `active`. */
  cniProvisioningSeconds: number;
  /** JSON file replacing the built-in interconnect facilities catalog. */
  cniFacilities?: string;
  /** Tunnel health probe interval in ms for every rate (default: high 1 s, mid 10 s, low 60 s). */
  magicProbeIntervalMs?: number;
  /**
   * Where tunnel connectors reach this server, put into tunnel tokens (`e`): an http(s) URL of the
   * management API listener; default: the API address a token was requested on.
   */
  tunnelEndpoint?: string;
  /** Location name reported for tunnel connections (`colo_name`). */
  tunnelColo: string;
  /**
   * Addresses proxied TCP/UDP applications listen on (dynamic edge IPs); empty = derived from
   * `edgeAddresses`, else from `host` (a loopback host gives its address and ::1).
   */
  spectrumBindAddresses: string[];
  /** Ports below 1024 are bound at `port + spectrumPortOffset` when binding them is not permitted. */
  spectrumPortOffset: number;
  /** Always map ports below 1024 by `spectrumPortOffset`, even when binding them would be permitted. */
  spectrumMapLowPorts: boolean;
  /** A UDP flow of a proxied application ends after this long without a datagram either way, ms. */
  spectrumUdpIdleTimeoutMs: number;
  /** PEM file of extra CAs trusted for `tls: strict` origins (beside the system roots). */
  spectrumOriginCa?: string;
  /** Colo name proxied-application analytics report (`coloName`), up to 3 characters. */
  spectrumColo: string;
  /** Script runtime: CPU slack added to a script's limit before the watchdog acts, ms. */
  runtimeCpuSlackMs: number;
  /** Script runtime: smallest resident-set growth of an instance treated as a memory overrun, MB. */
  runtimeMemoryFloorMb: number;
  /** Script runtime: wall-clock budget per script request, ms. */
  runtimeWallTimeoutMs: number;
  /** Script runtime: running instances (workerd processes, one per tenant) kept at most. */
  runtimeMaxInstances: number;
  /** Snippets: subrequests per execution (the platform allows 2–5 by plan). */
  snippetSubrequests: number;
  /** Snippets: CPU time per execution, ms (the platform's is 5; the watchdog adds its slack). */
  snippetCpuMs: number;
  /** Snippets: memory per execution, MB (enforced as instance growth, at least the runtime floor). */
  snippetMemoryMb: number;
  /** Snippets per zone. */
  snippetsPerZone: number;
  /** Snippets: `request.cf` defaults as JSON (merged over the built-in loopback defaults). */
  snippetCf?: string;
  /** Workers: suffix of the workers.dev-style host names `<script>.<account subdomain>.<suffix>` on the edge port. */
  workersDevSuffix: string;
  /** Workflows: plan whose defaults apply (`free`: 3-day retention, 100 concurrent; `paid`: 30 days, 10,000). */
  workflowsPlan: 'free' | 'paid';
  /** Workflows: longest wait between scans for due timers, queued instances and expired instances, ms. */
  workflowsPollMs: number;
  /** Workflows: workflow attempts executing at once in this process (others wait their turn). */
  workflowsMaxInflight: number;
  /** Analytics: buffered data points are appended to the store this often, ms (the most a `kill -9` loses). */
  analyticsFlushMs: number;
  /** Analytics: data points older than this many days are deleted. */
  analyticsRetentionDays: number;
  /** Analytics: writes per minute and dataset kept unsampled; above it `_sample_interval` grows. */
  analyticsSampleRate: number;
  /** Analytics: SQL queries are interrupted after this long, ms. */
  analyticsQueryTimeoutMs: number;
  /** Images: base address put in `variants` URLs (default: the address the request came to). */
  imagesDeliveryUrl?: string;
  /** Images: let upload-by-URL fetch loopback and private addresses (tests on one machine). */
  imagesFetchAllowPrivate: boolean;
  /** Browser rendering: the Chromium binary (never downloaded). */
  browserExecutable: string;
  /** Browser rendering: Chromium processes kept warm for REST requests. */
  browserPoolSize: number;
  /** Browser rendering: REST requests rendering at once per account (more answer 429). */
  browserConcurrency: number;
  /** Browser rendering: REST requests per account and window (429 + retry-after beyond). */
  browserRate?: RateLimitConfig;
  /** Browser rendering: binding sessions (own Chromium each) open at once per account. */
  browserSessions: number;
  /** Browser rendering: default budget of each step (navigation, waits, capture), ms. */
  browserTimeoutMs: number;
  /** Browser rendering: private/loopback CIDRs pages may load anyway (default none). */
  browserAllow: string[];
  /** Browser rendering: OpenAI-compatible chat-completions base URL for prompt-based /json. */
  browserAiUrl?: string;
  browserAiModel?: string;
  browserAiKey?: string;
  /** Media forwarding: a published track that carries no media this long is collected, ms (platform: 30 s). */
  sfuTrackIdleMs: number;
  /** Media forwarding: operations wait this long for a peer connection to be connected, ms (platform: 5 s). */
  sfuConnectWaitMs: number;
  /** Media forwarding: the media host name; on it the API port serves only `/v1/apps/{appId}/…`. */
  sfuHost: string;
  /** Edge HTTPS port (TLS with SNI, HTTP/2, client certificates); unset = no HTTPS listener, 0 = any free port. */
  edgeTlsPort?: number;
  /** Pipelines: host suffix of the ingest endpoints `<stream id>.<suffix>` on the API port. */
  pipelinesIngestHost: string;
  /** Pipelines: accepted bytes per second and stream over HTTP and the binding (429 beyond). */
  pipelinesStreamRate: number;
  /** Pipelines: how often each pipeline checks its rolling policy, ms. */
  pipelinesTickMs: number;
  /** Pipelines: the stream log, `local` (files in the data directory) or `nats://host:port` (JetStream). */
  pipelinesLog: string;
  /** Meeting platform: caps each meeting's session keep-alive, seconds (unset = the meeting's own value). */
  meetingsKeepAliveCap?: number;
  /** Meeting platform: how long a livestream's HLS output is kept once it is off air, seconds (default 3600). */
  meetingsLivestreamRetention?: number;
  /** Meeting platform: first webhook retry delay in ms; each further retry doubles it. */
  meetingsWebhookBackoffMs: number;
  /** Meeting platform: lifetime of participant tokens, seconds. */
  meetingsTokenTtl: number;
  /** DDoS: detection on live traffic (edge and proxied apps); off keeps the rulesets API only. */
  ddosDetection: boolean;
  /** DDoS: length of one rate window in ms (rates are measured and baselines learned per window). */
  ddosWindowMs: number;
  /** DDoS: windows below threshold before an attack is over and mitigation ends. */
  ddosCooldownWindows: number;
  /** DDoS: scales every rate floor, in percent (100 = the documented thresholds). */
  ddosThresholdPercent: number;
  /** Alerting: first retry delay of a failed delivery in ms (doubles per attempt). */
  alertingRetryMs: number;
  /** Alerting: delivery attempts before an alert is given up. */
  alertingMaxAttempts: number;
  /** Alerting: SMTP server for email mechanisms (`smtp://host:port`); without it email is not deliverable. */
  alertingSmtp?: string;
  /** Alerting: sender address of alert emails. */
  alertingFrom: string;
  /** Meeting summaries: an OpenAI-compatible base URL (`…/v1`) used instead of the extractive summary. */
  meetingsSummaryUrl?: string;
  /** Meeting summaries: the model name sent to that endpoint. */
  meetingsSummaryModel?: string;
  /** Pipelines: size of a local stream log segment in bytes (delivered segments are deleted whole). */
  pipelinesSegmentBytes: number;
  /** Pipelines: an S3-compatible endpoint (`http://host:port`) `r2` sinks upload finished files to (path-style); unset = local bucket directories only. */
  pipelinesS3Endpoint?: string;
  /** Pipelines: the SigV4 region for that endpoint. */
  pipelinesS3Region: string;
}

export const DEFAULTS: Config = {
  host: '127.0.0.1',
  apiPort: 8787,
  edgePort: 8080,
  dnsPort: 5353,
  edgeAddresses: [],
  dataDir: '.outpost',
  database: '',
  logLevel: 'info',
  apiEmail: 'admin@outpost.local',
  bodyLimit: 10 * 1024 * 1024,
  zoneActivation: 'immediate',
  nameServers: ['ns1.outpost.local', 'ns2.outpost.local'],
  shutdownTimeoutMs: 10_000,
  cniProvisioningSeconds: 60,
  originConnectTimeoutMs: 15_000,
  originResponseTimeoutMs: 100_000,
  edgeTestHeaders: false,
  turnPort: 3478,
  turnsPort: 5349,
  relayTls: 'off',
  relayPorts: '49152-65535',
  relayAllowLoopback: false,
  relayQuota: 10,
  relayAltPorts: 'auto',
  tunnelColo: 'outpost',
  spectrumBindAddresses: [],
  spectrumPortOffset: 10000,
  spectrumMapLowPorts: false,
  spectrumUdpIdleTimeoutMs: 30_000,
  spectrumColo: 'LOC',
  runtimeCpuSlackMs: 250,
  runtimeMemoryFloorMb: 512,
  runtimeWallTimeoutMs: 30_000,
  runtimeMaxInstances: 64,
  snippetSubrequests: 5,
  snippetCpuMs: 5,
  snippetMemoryMb: 2,
  snippetsPerZone: 300,
  workersDevSuffix: 'workers.localhost',
  workflowsPlan: 'paid',
  workflowsPollMs: 1000,
  workflowsMaxInflight: 256,
  analyticsFlushMs: 1000,
  analyticsRetentionDays: 90,
  analyticsSampleRate: 1_000_000,
  analyticsQueryTimeoutMs: 30_000,
  imagesFetchAllowPrivate: false,
  browserExecutable: '/usr/bin/chromium',
  browserPoolSize: 2,
  browserConcurrency: 6,
  browserRate: { requests: 10, windowSeconds: 1 },
  browserSessions: 6,
  browserTimeoutMs: 30_000,
  browserAllow: [],
  sfuTrackIdleMs: 30_000,
  sfuConnectWaitMs: 5_000,
  sfuHost: 'sfu.localhost',
  pipelinesIngestHost: 'pipelines.localhost',
  pipelinesStreamRate: 5_000_000,
  pipelinesTickMs: 250,
  pipelinesLog: 'local',
  meetingsWebhookBackoffMs: 1000,
  meetingsTokenTtl: 86400,
  ddosDetection: true,
  ddosWindowMs: 1000,
  ddosCooldownWindows: 3,
  ddosThresholdPercent: 100,
  alertingRetryMs: 1000,
  alertingMaxAttempts: 6,
  alertingFrom: 'alerts@outpost.local',
  pipelinesSegmentBytes: 64 * 1024 * 1024,
  pipelinesS3Region: 'auto',
};

interface OptionSpec {
  key: keyof Config;
  flag: string;
  env: string;
  type: 'string' | 'port' | 'int' | 'list' | 'rate' | 'bool';
  help: string;
}

export const OPTIONS: OptionSpec[] = [
  {
    key: 'host',
    flag: 'host',
    env: 'OUTPOST_HOST',
    type: 'string',
    help: 'address to listen on (default 127.0.0.1)',
  },
  {
    key: 'apiPort',
    flag: 'api-port',
    env: 'OUTPOST_API_PORT',
    type: 'port',
    help: 'management API port (default 8787; 0 = any free port)',
  },
  {
    key: 'edgePort',
    flag: 'edge-port',
    env: 'OUTPOST_EDGE_PORT',
    type: 'port',
    help: 'proxied-traffic edge port (default 8080; 0 = any free port)',
  },
  {
    key: 'dnsPort',
    flag: 'dns-port',
    env: 'OUTPOST_DNS_PORT',
    type: 'port',
    help: 'authoritative DNS port, UDP and TCP (default 5353; 0 = any free port)',
  },
  {
    key: 'edgeAddresses',
    flag: 'edge-addresses',
    env: 'OUTPOST_EDGE_ADDRESSES',
    type: 'list',
    help: 'comma-separated IPs proxied DNS records answer with (default: from --host)',
  },
  {
    key: 'dataDir',
    flag: 'data-dir',
    env: 'OUTPOST_DATA_DIR',
    type: 'string',
    help: 'data directory (default ./.outpost)',
  },
  {
    key: 'database',
    flag: 'database',
    env: 'OUTPOST_DATABASE',
    type: 'string',
    help: 'postgres://… URL, or a SQLite file (default <data-dir>/outpost.db)',
  },
  {
    key: 'databaseSchema',
    flag: 'database-schema',
    env: 'OUTPOST_DATABASE_SCHEMA',
    type: 'string',
    help: 'PostgreSQL schema to use (created if missing)',
  },
  {
    key: 'logLevel',
    flag: 'log-level',
    env: 'OUTPOST_LOG_LEVEL',
    type: 'string',
    help: 'trace|debug|info|warn|error (default info)',
  },
  {
    key: 'apiToken',
    flag: 'api-token',
    env: 'OUTPOST_API_TOKEN',
    type: 'string',
    help: 'seed the root API token with this secret',
  },
  {
    key: 'accountId',
    flag: 'account-id',
    env: 'OUTPOST_ACCOUNT_ID',
    type: 'string',
    help: 'seed the first account with this id (32 hex)',
  },
  {
    key: 'apiEmail',
    flag: 'api-email',
    env: 'OUTPOST_API_EMAIL',
    type: 'string',
    help: 'legacy X-Auth-Email (default admin@outpost.local)',
  },
  {
    key: 'apiKey',
    flag: 'api-key',
    env: 'OUTPOST_API_KEY',
    type: 'string',
    help: 'legacy X-Auth-Key (generated on first start if unset)',
  },
  {
    key: 'bodyLimit',
    flag: 'body-limit',
    env: 'OUTPOST_BODY_LIMIT',
    type: 'int',
    help: 'largest request body in bytes (default 10485760)',
  },
  {
    key: 'rateLimit',
    flag: 'rate-limit',
    env: 'OUTPOST_RATE_LIMIT',
    type: 'rate',
    help: 'per-token limit as <requests>/<seconds>, e.g. 1200/300 (default off)',
  },
  {
    key: 'zoneActivation',
    flag: 'zone-activation',
    env: 'OUTPOST_ZONE_ACTIVATION',
    type: 'string',
    help: 'immediate|manual (default immediate)',
  },
  {
    key: 'originConnectTimeoutMs',
    flag: 'origin-connect-timeout',
    env: 'OUTPOST_ORIGIN_CONNECT_TIMEOUT',
    type: 'int',
    help: 'edge → origin connect timeout in ms; 522 after it (default 15000)',
  },
  {
    key: 'originResponseTimeoutMs',
    flag: 'origin-response-timeout',
    env: 'OUTPOST_ORIGIN_RESPONSE_TIMEOUT',
    type: 'int',
    help: 'wait for origin response headers in ms; 524 after it (default 100000)',
  },
  {
    key: 'edgeTestHeaders',
    flag: 'edge-test-headers',
    env: 'OUTPOST_EDGE_TEST_HEADERS',
    type: 'bool',
    help: 'trust x-outpost-client-ip/-country/-asn request headers (tests only; default false)',
  },
  {
    key: 'turnPort',
    flag: 'turn-port',
    env: 'OUTPOST_TURN_PORT',
    type: 'port',
    help: 'TURN/STUN port, UDP and TCP (default 3478; 0 = any free port)',
  },
  {
    key: 'turnsPort',
    flag: 'turns-port',
    env: 'OUTPOST_TURNS_PORT',
    type: 'port',
    help: 'TURN over TLS port when --relay-tls is set (default 5349)',
  },
  {
    key: 'relayTls',
    flag: 'relay-tls',
    env: 'OUTPOST_RELAY_TLS',
    type: 'string',
    help: 'off | self-signed | <cert.pem>,<key.pem> (default off)',
  },
  {
    key: 'relayHost',
    flag: 'relay-host',
    env: 'OUTPOST_RELAY_HOST',
    type: 'string',
    help: 'host put into generated ICE URLs (default: --host)',
  },
  {
    key: 'relayPorts',
    flag: 'relay-ports',
    env: 'OUTPOST_RELAY_PORTS',
    type: 'string',
    help: 'relayed-address port range min-max (default 49152-65535)',
  },
  {
    key: 'relayAllowLoopback',
    flag: 'relay-allow-loopback',
    env: 'OUTPOST_RELAY_ALLOW_LOOPBACK',
    type: 'bool',
    help: 'allow loopback/private relay peers (default false)',
  },
  {
    key: 'relayAltPorts',
    flag: 'relay-alt-ports',
    env: 'OUTPOST_RELAY_ALT_PORTS',
    type: 'string',
    help: 'alternative relay ports: auto | off | udp53=<port>,tcp80=<port>,tls443=<port> (default auto: 53, 80, 443 unless --turn-port is 0)',
  },
  {
    key: 'relayQuota',
    flag: 'relay-quota',
    env: 'OUTPOST_RELAY_QUOTA',
    type: 'int',
    help: 'allocations per relay username (default 10)',
  },
  {
    key: 'cniProvisioningSeconds',
    flag: 'cni-provisioning-seconds',
    env: 'OUTPOST_CNI_PROVISIONING_SECONDS',
    type: 'int',
    help: 'seconds a new interconnect stays pending (default 60)',
  },
  {
    key: 'cniFacilities',
    flag: 'cni-facilities',
    env: 'OUTPOST_CNI_FACILITIES',
    type: 'string',
    help: 'JSON file replacing the built-in interconnect facilities catalog',
  },
  {
    key: 'magicProbeIntervalMs',
    flag: 'magic-probe-interval-ms',
    env: 'OUTPOST_MAGIC_PROBE_INTERVAL_MS',
    type: 'int',
    help: 'tunnel health probe interval in ms, for every rate (default: high 1000, mid 10000, low 60000)',
  },
  {
    key: 'tunnelEndpoint',
    flag: 'tunnel-endpoint',
    env: 'OUTPOST_TUNNEL_ENDPOINT',
    type: 'string',
    help: 'URL tunnel connectors reach the API at, put into tunnel tokens (default: the API address)',
  },
  {
    key: 'tunnelColo',
    flag: 'tunnel-colo',
    env: 'OUTPOST_TUNNEL_COLO',
    type: 'string',
    help: 'colo_name reported for tunnel connections (default outpost)',
  },
  {
    key: 'spectrumBindAddresses',
    flag: 'spectrum-bind-addresses',
    env: 'OUTPOST_SPECTRUM_BIND_ADDRESSES',
    type: 'list',
    help: 'comma-separated addresses proxied TCP/UDP apps listen on (default: --edge-addresses, else from --host)',
  },
  {
    key: 'spectrumPortOffset',
    flag: 'spectrum-port-offset',
    env: 'OUTPOST_SPECTRUM_PORT_OFFSET',
    type: 'int',
    help: 'app ports below 1024 bind at port+offset when not permitted (default 10000)',
  },
  {
    key: 'spectrumMapLowPorts',
    flag: 'spectrum-map-low-ports',
    env: 'OUTPOST_SPECTRUM_MAP_LOW_PORTS',
    type: 'bool',
    help: 'always bind app ports below 1024 at port+offset (default false)',
  },
  {
    key: 'spectrumUdpIdleTimeoutMs',
    flag: 'spectrum-udp-idle-timeout',
    env: 'OUTPOST_SPECTRUM_UDP_IDLE_TIMEOUT',
    type: 'int',
    help: 'idle timeout of a proxied UDP flow in ms (default 30000)',
  },
  {
    key: 'spectrumOriginCa',
    flag: 'spectrum-origin-ca',
    env: 'OUTPOST_SPECTRUM_ORIGIN_CA',
    type: 'string',
    help: 'PEM file of extra CAs trusted by tls=strict apps',
  },
  {
    key: 'spectrumColo',
    flag: 'spectrum-colo',
    env: 'OUTPOST_SPECTRUM_COLO',
    type: 'string',
    help: 'colo name in proxied-app analytics, up to 3 characters (default LOC)',
  },
  {
    key: 'runtimeCpuSlackMs',
    flag: 'runtime-cpu-slack',
    env: 'OUTPOST_RUNTIME_CPU_SLACK',
    type: 'int',
    help: 'script CPU watchdog slack in ms added to each limit (default 250)',
  },
  {
    key: 'runtimeMemoryFloorMb',
    flag: 'runtime-memory-floor',
    env: 'OUTPOST_RUNTIME_MEMORY_FLOOR',
    type: 'int',
    help: 'smallest script-instance memory growth treated as overrun, MB (default 512)',
  },
  {
    key: 'runtimeWallTimeoutMs',
    flag: 'runtime-wall-timeout',
    env: 'OUTPOST_RUNTIME_WALL_TIMEOUT',
    type: 'int',
    help: 'wall-clock budget per script request in ms (default 30000)',
  },
  {
    key: 'runtimeMaxInstances',
    flag: 'runtime-max-instances',
    env: 'OUTPOST_RUNTIME_MAX_INSTANCES',
    type: 'int',
    help: 'running script instances (one workerd per tenant) kept at most (default 64)',
  },
  {
    key: 'snippetSubrequests',
    flag: 'snippet-subrequests',
    env: 'OUTPOST_SNIPPET_SUBREQUESTS',
    type: 'int',
    help: 'subrequests per snippet execution, 2-5 (default 5)',
  },
  {
    key: 'snippetCpuMs',
    flag: 'snippet-cpu-ms',
    env: 'OUTPOST_SNIPPET_CPU_MS',
    type: 'int',
    help: 'snippet CPU limit in ms before the runtime slack (default 5)',
  },
  {
    key: 'snippetMemoryMb',
    flag: 'snippet-memory-mb',
    env: 'OUTPOST_SNIPPET_MEMORY_MB',
    type: 'int',
    help: 'snippet memory limit in MB, at least the runtime floor is enforced (default 2)',
  },
  {
    key: 'snippetsPerZone',
    flag: 'snippets-per-zone',
    env: 'OUTPOST_SNIPPETS_PER_ZONE',
    type: 'int',
    help: 'snippets per zone (default 300)',
  },
  {
    key: 'snippetCf',
    flag: 'snippet-cf',
    env: 'OUTPOST_SNIPPET_CF',
    type: 'string',
    help: 'JSON object of request.cf defaults for snippets (colo, city, asn, ...)',
  },
  {
    key: 'workersDevSuffix',
    flag: 'workers-dev-suffix',
    env: 'OUTPOST_WORKERS_DEV_SUFFIX',
    type: 'string',
    help: 'suffix of <script>.<subdomain>.<suffix> script host names on the edge (default workers.localhost)',
  },
  {
    key: 'workflowsPlan',
    flag: 'workflows-plan',
    env: 'OUTPOST_WORKFLOWS_PLAN',
    type: 'string',
    help: 'free|paid: workflow retention and concurrency defaults (default paid)',
  },
  {
    key: 'workflowsPollMs',
    flag: 'workflows-poll-ms',
    env: 'OUTPOST_WORKFLOWS_POLL_MS',
    type: 'int',
    help: 'longest wait between workflow timer scans in ms (default 1000)',
  },
  {
    key: 'analyticsFlushMs',
    flag: 'analytics-flush-ms',
    env: 'OUTPOST_ANALYTICS_FLUSH_MS',
    type: 'int',
    help: 'analytics data points are stored in batches this often, ms (default 1000)',
  },
  {
    key: 'analyticsRetentionDays',
    flag: 'analytics-retention-days',
    env: 'OUTPOST_ANALYTICS_RETENTION_DAYS',
    type: 'int',
    help: 'analytics data points are kept this many days (default 90)',
  },
  {
    key: 'analyticsSampleRate',
    flag: 'analytics-sample-rate',
    env: 'OUTPOST_ANALYTICS_SAMPLE_RATE',
    type: 'int',
    help: 'analytics writes per minute and dataset before sampling starts (default 1000000)',
  },
  {
    key: 'analyticsQueryTimeoutMs',
    flag: 'analytics-query-timeout-ms',
    env: 'OUTPOST_ANALYTICS_QUERY_TIMEOUT_MS',
    type: 'int',
    help: 'analytics SQL query time limit, ms (default 30000)',
  },
  {
    key: 'workflowsMaxInflight',
    flag: 'workflows-max-inflight',
    env: 'OUTPOST_WORKFLOWS_MAX_INFLIGHT',
    type: 'int',
    help: 'workflow attempts executing at once (default 256)',
  },
  {
    key: 'imagesDeliveryUrl',
    flag: 'images-delivery-url',
    env: 'OUTPOST_IMAGES_DELIVERY_URL',
    type: 'string',
    help: "base URL of image delivery put in variants (default: the request's own address)",
  },
  {
    key: 'imagesFetchAllowPrivate',
    flag: 'images-fetch-allow-private',
    env: 'OUTPOST_IMAGES_FETCH_ALLOW_PRIVATE',
    type: 'bool',
    help: 'let image upload by URL reach loopback/private addresses (default false)',
  },
  {
    key: 'nameServers',
    flag: 'name-servers',
    env: 'OUTPOST_NAME_SERVERS',
    type: 'list',
    help: 'comma-separated name servers assigned to zones',
  },
  {
    key: 'browserExecutable',
    flag: 'browser-executable',
    env: 'OUTPOST_BROWSER_EXECUTABLE',
    type: 'string',
    help: 'Chromium binary for browser rendering (default /usr/bin/chromium)',
  },
  {
    key: 'browserPoolSize',
    flag: 'browser-pool-size',
    env: 'OUTPOST_BROWSER_POOL_SIZE',
    type: 'int',
    help: 'warm Chromium processes for browser rendering REST (default 2; 0 = browser rendering off)',
  },
  {
    key: 'browserConcurrency',
    flag: 'browser-concurrency',
    env: 'OUTPOST_BROWSER_CONCURRENCY',
    type: 'int',
    help: 'browser rendering requests at once per account, more answer 429 (default 6)',
  },
  {
    key: 'browserRate',
    flag: 'browser-rate',
    env: 'OUTPOST_BROWSER_RATE',
    type: 'rate',
    help: 'browser rendering requests per account as <requests>/<seconds> (default 10/1)',
  },
  {
    key: 'browserSessions',
    flag: 'browser-sessions',
    env: 'OUTPOST_BROWSER_SESSIONS',
    type: 'int',
    help: 'browser binding sessions open at once per account (default 6)',
  },
  {
    key: 'browserTimeoutMs',
    flag: 'browser-timeout',
    env: 'OUTPOST_BROWSER_TIMEOUT',
    type: 'int',
    help: 'default budget of each browser rendering step in ms (default 30000)',
  },
  {
    key: 'browserAllow',
    flag: 'browser-allow',
    env: 'OUTPOST_BROWSER_ALLOW',
    type: 'list',
    help: 'comma-separated private/loopback CIDRs rendered pages may load (default none)',
  },
  {
    key: 'browserAiUrl',
    flag: 'browser-ai-url',
    env: 'OUTPOST_BROWSER_AI_URL',
    type: 'string',
    help: 'OpenAI-compatible base URL (…/v1) for prompt-based browser rendering /json',
  },
  {
    key: 'browserAiModel',
    flag: 'browser-ai-model',
    env: 'OUTPOST_BROWSER_AI_MODEL',
    type: 'string',
    help: 'model name sent to --browser-ai-url',
  },
  {
    key: 'browserAiKey',
    flag: 'browser-ai-key',
    env: 'OUTPOST_BROWSER_AI_KEY',
    type: 'string',
    help: 'bearer key sent to --browser-ai-url',
  },
  {
    key: 'sfuTrackIdleMs',
    flag: 'sfu-track-idle-ms',
    env: 'OUTPOST_SFU_TRACK_IDLE_MS',
    type: 'int',
    help: 'media forwarding: collect a published track after this long without media, ms (default 30000)',
  },
  {
    key: 'sfuConnectWaitMs',
    flag: 'sfu-connect-wait-ms',
    env: 'OUTPOST_SFU_CONNECT_WAIT_MS',
    type: 'int',
    help: 'media forwarding: how long operations wait for a peer connection to connect, ms (default 5000)',
  },
  {
    key: 'sfuHost',
    flag: 'sfu-host',
    env: 'OUTPOST_SFU_HOST',
    type: 'string',
    help: 'media forwarding host name; on it the API port serves only /v1/apps/... (default sfu.localhost)',
  },
  {
    key: 'edgeTlsPort',
    flag: 'edge-tls-port',
    env: 'OUTPOST_EDGE_TLS_PORT',
    type: 'port',
    help: 'edge HTTPS port with certificates from the local CA (default off; 0 = any free port)',
  },
  {
    key: 'pipelinesIngestHost',
    flag: 'pipelines-ingest-host',
    env: 'OUTPOST_PIPELINES_INGEST_HOST',
    type: 'string',
    help: 'host suffix of pipeline ingest endpoints <stream id>.<suffix> (default pipelines.localhost)',
  },
  {
    key: 'pipelinesStreamRate',
    flag: 'pipelines-stream-rate',
    env: 'OUTPOST_PIPELINES_STREAM_RATE',
    type: 'int',
    help: 'bytes per second each pipeline stream accepts before 429 (default 5000000)',
  },
  {
    key: 'pipelinesTickMs',
    flag: 'pipelines-tick-ms',
    env: 'OUTPOST_PIPELINES_TICK_MS',
    type: 'int',
    help: 'how often pipelines check their rolling policy, ms (default 250)',
  },
  {
    key: 'pipelinesLog',
    flag: 'pipelines-log',
    env: 'OUTPOST_PIPELINES_LOG',
    type: 'string',
    help: 'pipeline stream log: local (default) or nats://host:port for NATS JetStream',
  },
  {
    key: 'meetingsKeepAliveCap',
    flag: 'meetings-keep-alive-cap',
    env: 'OUTPOST_MEETINGS_KEEP_ALIVE_CAP',
    type: 'int',
    help: 'longest session keep-alive after the last peer left, seconds (default: each meeting\'s own)',
  },
  { key: 'meetingsLivestreamRetention', flag: 'meetings-livestream-retention', env: 'OUTPOST_MEETINGS_LIVESTREAM_RETENTION', type: 'int', help: 'seconds a livestream\'s HLS segments stay playable once it is off air, then deleted (default 3600)' },
  {
    key: 'meetingsWebhookBackoffMs',
    flag: 'meetings-webhook-backoff',
    env: 'OUTPOST_MEETINGS_WEBHOOK_BACKOFF',
    type: 'int',
    help: 'first meeting webhook retry delay in ms, doubling per retry (default 1000)',
  },
  {
    key: 'meetingsTokenTtl',
    flag: 'meetings-token-ttl',
    env: 'OUTPOST_MEETINGS_TOKEN_TTL',
    type: 'int',
    help: 'lifetime of meeting participant tokens in seconds (default 86400)',
  },
  { key: 'ddosDetection', flag: 'ddos-detection', env: 'OUTPOST_DDOS_DETECTION', type: 'bool', help: 'detect and mitigate floods on live traffic (default true)' },
  { key: 'ddosWindowMs', flag: 'ddos-window-ms', env: 'OUTPOST_DDOS_WINDOW_MS', type: 'int', help: 'DDoS rate window in ms (default 1000)' },
  { key: 'ddosCooldownWindows', flag: 'ddos-cooldown-windows', env: 'OUTPOST_DDOS_COOLDOWN_WINDOWS', type: 'int', help: 'quiet windows before an attack ends (default 3)' },
  { key: 'ddosThresholdPercent', flag: 'ddos-threshold-percent', env: 'OUTPOST_DDOS_THRESHOLD_PERCENT', type: 'int', help: 'scales DDoS rate floors, in percent (default 100)' },
  { key: 'alertingRetryMs', flag: 'alerting-retry-ms', env: 'OUTPOST_ALERTING_RETRY_MS', type: 'int', help: 'first retry delay of a failed alert delivery in ms (default 1000)' },
  { key: 'alertingMaxAttempts', flag: 'alerting-max-attempts', env: 'OUTPOST_ALERTING_MAX_ATTEMPTS', type: 'int', help: 'alert delivery attempts before giving up (default 6)' },
  { key: 'alertingSmtp', flag: 'alerting-smtp', env: 'OUTPOST_ALERTING_SMTP', type: 'string', help: 'SMTP server for email alerts, smtp://host:port (default none)' },
  { key: 'alertingFrom', flag: 'alerting-from', env: 'OUTPOST_ALERTING_FROM', type: 'string', help: 'sender address of alert emails (default alerts@outpost.local)' },
  { key: 'meetingsSummaryUrl', flag: 'meetings-summary-url', env: 'OUTPOST_MEETINGS_SUMMARY_URL', type: 'string', help: 'OpenAI-compatible base URL (…/v1) for meeting summaries; bearer key from OUTPOST_MEETINGS_SUMMARY_KEY (default: extractive, no model)' },
  { key: 'meetingsSummaryModel', flag: 'meetings-summary-model', env: 'OUTPOST_MEETINGS_SUMMARY_MODEL', type: 'string', help: 'model name sent to the summary endpoint (default: default)' },
  { key: 'pipelinesSegmentBytes', flag: 'pipelines-segment-bytes', env: 'OUTPOST_PIPELINES_SEGMENT_BYTES', type: 'int', help: 'size of a local pipeline stream log segment; delivered segments are deleted (default 67108864)' },
  { key: 'pipelinesS3Endpoint', flag: 'pipelines-s3-endpoint', env: 'OUTPOST_PIPELINES_S3_ENDPOINT', type: 'string', help: 'S3-compatible endpoint (http://host:port) r2 sinks upload finished files to, path-style, signed with the sink credentials (default: off, local bucket directories)' },
  { key: 'pipelinesS3Region', flag: 'pipelines-s3-region', env: 'OUTPOST_PIPELINES_S3_REGION', type: 'string', help: 'SigV4 region for --pipelines-s3-endpoint (default auto)' },
];

export class ConfigError extends Error {}

function convert(spec: OptionSpec, raw: unknown, source: string): unknown {
  const where = `${source} ${spec.type === 'port' ? 'port ' : ''}${source === 'flag' ? '--' + spec.flag : spec.env}`;
  if (spec.type === 'string') return String(raw);
  if (spec.type === 'bool') {
    if (raw === true || raw === 'true' || raw === '1') return true;
    if (raw === false || raw === 'false' || raw === '0') return false;
    throw new ConfigError(`${where}: expected true or false, got ${String(raw)}`);
  }
  if (spec.type === 'list')
    return Array.isArray(raw)
      ? raw.map(String)
      : String(raw)
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
  if (spec.type === 'rate') {
    if (typeof raw === 'object' && raw !== null) return raw;
    const m = /^(\d+)\/(\d+)$/.exec(String(raw));
    if (!m) throw new ConfigError(`${where}: expected <requests>/<seconds>, got ${String(raw)}`);
    return { requests: Number(m[1]), windowSeconds: Number(m[2]) };
  }
  // Only digits: Number('') and Number(null) would silently be 0 (a random port).
  const n =
    typeof raw === 'number'
      ? raw
      : typeof raw === 'string' && /^\s*\d+\s*$/.test(raw)
        ? Number(raw)
        : NaN;
  if (!Number.isInteger(n) || n < 0 || (spec.type === 'port' && n > 65535)) {
    throw new ConfigError(
      `${where}: expected ${spec.type === 'port' ? 'a port 0–65535' : 'a non-negative integer'}, got ${String(raw)}`,
    );
  }
  return n;
}

/** Parses `--name value` / `--name=value` flags; returns the remaining positional arguments. */
export function parseFlags(argv: string[]): { flags: Record<string, string>; rest: string[] } {
  const flags: Record<string, string> = {};
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) {
      rest.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    if (eq > 0) flags[arg.slice(2, eq)] = arg.slice(eq + 1);
    else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) flags[arg.slice(2)] = argv[++i];
    else flags[arg.slice(2)] = 'true';
  }
  return { flags, rest };
}

export function loadConfig(
  flags: Record<string, string>,
  env: NodeJS.ProcessEnv = process.env,
  overrides: Partial<Config> = {},
): Config {
  const config: Config = {
    ...DEFAULTS,
    nameServers: [...DEFAULTS.nameServers],
    edgeAddresses: [...DEFAULTS.edgeAddresses],
  };
  const known = new Set([...OPTIONS.map((o) => o.flag), 'config', 'help']);
  for (const name of Object.keys(flags)) {
    if (!known.has(name)) throw new ConfigError(`unknown flag --${name}; see outpost --help`);
  }
  const file = flags.config ?? env.OUTPOST_CONFIG;
  const fromFile: Record<string, unknown> = file ? readConfigFile(file) : {};
  const target = config as unknown as Record<string, unknown>;
  for (const spec of OPTIONS) {
    if (fromFile[spec.key] !== undefined)
      target[spec.key] = convert(spec, fromFile[spec.key], `config file ${file}:`);
    if (env[spec.env] !== undefined && env[spec.env] !== '')
      target[spec.key] = convert(spec, env[spec.env], 'environment');
    if (flags[spec.flag] !== undefined) target[spec.key] = convert(spec, flags[spec.flag], 'flag');
  }
  Object.assign(config, overrides);
  if (config.zoneActivation !== 'immediate' && config.zoneActivation !== 'manual') {
    throw new ConfigError(
      `zone activation must be immediate or manual, got ${String(config.zoneActivation)}`,
    );
  }
  if (config.accountId !== undefined && !/^[0-9a-f]{32}$/.test(config.accountId)) {
    throw new ConfigError('OUTPOST_ACCOUNT_ID / --account-id must be 32 lowercase hex characters');
  }
  if (!/^[A-Za-z0-9]{1,3}$/.test(config.spectrumColo)) {
    throw new ConfigError(
      `--spectrum-colo must be 1 to 3 letters or digits, got ${config.spectrumColo}`,
    );
  }
  if (config.spectrumPortOffset < 1024 || config.spectrumPortOffset > 64512) {
    throw new ConfigError(
      `--spectrum-port-offset must be from 1024 to 64512, got ${config.spectrumPortOffset}`,
    );
  }
  if (config.workflowsPlan !== 'free' && config.workflowsPlan !== 'paid') {
    throw new ConfigError(
      `--workflows-plan must be free or paid, got ${String(config.workflowsPlan)}`,
    );
  }
  if (config.workflowsPollMs < 10) throw new ConfigError('--workflows-poll-ms must be at least 10');
  if (config.analyticsFlushMs < 10)
    throw new ConfigError('--analytics-flush-ms must be at least 10');
  if (config.analyticsRetentionDays < 1)
    throw new ConfigError('--analytics-retention-days must be at least 1');
  if (config.analyticsSampleRate < 1)
    throw new ConfigError('--analytics-sample-rate must be at least 1');
  if (config.analyticsQueryTimeoutMs < 1)
    throw new ConfigError('--analytics-query-timeout-ms must be at least 1');
  if (config.workflowsMaxInflight < 1)
    throw new ConfigError('--workflows-max-inflight must be at least 1');
  if (config.ddosWindowMs < 50) throw new ConfigError('--ddos-window-ms must be at least 50');
  if (config.ddosCooldownWindows < 1) throw new ConfigError('--ddos-cooldown-windows must be at least 1');
  if (config.ddosThresholdPercent < 1) throw new ConfigError('--ddos-threshold-percent must be at least 1');
  if (config.alertingRetryMs < 10) throw new ConfigError('--alerting-retry-ms must be at least 10');
  if (config.alertingMaxAttempts < 1) throw new ConfigError('--alerting-max-attempts must be at least 1');
  config.dataDir = resolve(config.dataDir);
  if (!config.database) config.database = join(config.dataDir, 'outpost.db');
  return config;
}

function readConfigFile(path: string): Record<string, unknown> {
  if (!existsSync(path)) throw new ConfigError(`config file ${path} does not exist`);
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch (err) {
    throw new ConfigError(`config file ${path} is not valid JSON: ${(err as Error).message}`);
  }
}

export function helpText(): string {
  const lines = OPTIONS.map((o) => `  --${o.flag.padEnd(18)} ${o.help} [${o.env}]`);
  return [
    'outpost — a self-hostable edge platform: management API and data planes',
    '',
    'Usage:',
    '  outpost serve [options]   start every listener (prints a table of what listens where)',
    '  outpost tunnel run --token <token>           run a tunnel connector (see outpost tunnel --help)',
    '  outpost tunnel access --socks5 127.0.0.1:<port>  a local SOCKS5 proxy into private network routes',
    '  outpost --help            this text',
    '',
    'Options (flags > environment > config file > defaults):',
    ...lines,
    `  --${'config'.padEnd(18)} JSON config file with the same keys in camelCase [OUTPOST_CONFIG]`,
    '',
  ].join('\n');
}
