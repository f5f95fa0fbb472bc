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
  /** Graceful-stop budget for in-flight requests, ms. */
  shutdownTimeoutMs: number;
  /** Seconds a new interconnect stays `pending` before it turns `active`. */
  cniProvisioningSeconds: number;
  /** JSON file replacing the built-in interconnect facilities catalog. */
  cniFacilities?: string;
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
};

interface OptionSpec {
  key: keyof Config;
  flag: string;
  env: string;
  type: 'string' | 'port' | 'int' | 'list' | 'rate' | 'bool';
  help: string;
}

export const OPTIONS: OptionSpec[] = [
  { key: 'host', flag: 'host', env: 'OUTPOST_HOST', type: 'string', help: 'address to listen on (default 127.0.0.1)' },
  { key: 'apiPort', flag: 'api-port', env: 'OUTPOST_API_PORT', type: 'port', help: 'management API port (default 8787; 0 = any free port)' },
  { key: 'edgePort', flag: 'edge-port', env: 'OUTPOST_EDGE_PORT', type: 'port', help: 'proxied-traffic edge port (default 8080; 0 = any free port)' },
  { key: 'dnsPort', flag: 'dns-port', env: 'OUTPOST_DNS_PORT', type: 'port', help: 'authoritative DNS port, UDP and TCP (default 5353; 0 = any free port)' },
  { key: 'edgeAddresses', flag: 'edge-addresses', env: 'OUTPOST_EDGE_ADDRESSES', type: 'list', help: 'comma-separated IPs proxied DNS records answer with (default: from --host)' },
  { key: 'dataDir', flag: 'data-dir', env: 'OUTPOST_DATA_DIR', type: 'string', help: 'data directory (default ./.outpost)' },
  { key: 'database', flag: 'database', env: 'OUTPOST_DATABASE', type: 'string', help: 'postgres://… URL, or a SQLite file (default <data-dir>/outpost.db)' },
  { key: 'databaseSchema', flag: 'database-schema', env: 'OUTPOST_DATABASE_SCHEMA', type: 'string', help: 'PostgreSQL schema to use (created if missing)' },
  { key: 'logLevel', flag: 'log-level', env: 'OUTPOST_LOG_LEVEL', type: 'string', help: 'trace|debug|info|warn|error (default info)' },
  { key: 'apiToken', flag: 'api-token', env: 'OUTPOST_API_TOKEN', type: 'string', help: 'seed the root API token with this secret' },
  { key: 'accountId', flag: 'account-id', env: 'OUTPOST_ACCOUNT_ID', type: 'string', help: 'seed the first account with this id (32 hex)' },
  { key: 'apiEmail', flag: 'api-email', env: 'OUTPOST_API_EMAIL', type: 'string', help: 'legacy X-Auth-Email (default admin@outpost.local)' },
  { key: 'apiKey', flag: 'api-key', env: 'OUTPOST_API_KEY', type: 'string', help: 'legacy X-Auth-Key (generated on first start if unset)' },
  { key: 'bodyLimit', flag: 'body-limit', env: 'OUTPOST_BODY_LIMIT', type: 'int', help: 'largest request body in bytes (default 10485760)' },
  { key: 'rateLimit', flag: 'rate-limit', env: 'OUTPOST_RATE_LIMIT', type: 'rate', help: 'per-token limit as <requests>/<seconds>, e.g. 1200/300 (default off)' },
  { key: 'zoneActivation', flag: 'zone-activation', env: 'OUTPOST_ZONE_ACTIVATION', type: 'string', help: 'immediate|manual (default immediate)' },
  { key: 'originConnectTimeoutMs', flag: 'origin-connect-timeout', env: 'OUTPOST_ORIGIN_CONNECT_TIMEOUT', type: 'int', help: 'edge → origin connect timeout in ms; 522 after it (default 15000)' },
  { key: 'originResponseTimeoutMs', flag: 'origin-response-timeout', env: 'OUTPOST_ORIGIN_RESPONSE_TIMEOUT', type: 'int', help: 'wait for origin response headers in ms; 524 after it (default 100000)' },
  { key: 'edgeTestHeaders', flag: 'edge-test-headers', env: 'OUTPOST_EDGE_TEST_HEADERS', type: 'bool', help: 'trust x-outpost-client-ip/-country/-asn request headers (tests only; default false)' },
  { key: 'turnPort', flag: 'turn-port', env: 'OUTPOST_TURN_PORT', type: 'port', help: 'TURN/STUN port, UDP and TCP (default 3478; 0 = any free port)' },
  { key: 'turnsPort', flag: 'turns-port', env: 'OUTPOST_TURNS_PORT', type: 'port', help: 'TURN over TLS port when --relay-tls is set (default 5349)' },
  { key: 'relayTls', flag: 'relay-tls', env: 'OUTPOST_RELAY_TLS', type: 'string', help: 'off | self-signed | <cert.pem>,<key.pem> (default off)' },
  { key: 'relayHost', flag: 'relay-host', env: 'OUTPOST_RELAY_HOST', type: 'string', help: 'host put into generated ICE URLs (default: --host)' },
  { key: 'relayPorts', flag: 'relay-ports', env: 'OUTPOST_RELAY_PORTS', type: 'string', help: 'relayed-address port range min-max (default 49152-65535)' },
  { key: 'relayAllowLoopback', flag: 'relay-allow-loopback', env: 'OUTPOST_RELAY_ALLOW_LOOPBACK', type: 'bool', help: 'allow loopback/private relay peers (default false)' },
  { key: 'relayQuota', flag: 'relay-quota', env: 'OUTPOST_RELAY_QUOTA', type: 'int', help: 'allocations per relay username (default 10)' },
  { key: 'cniProvisioningSeconds', flag: 'cni-provisioning-seconds', env: 'OUTPOST_CNI_PROVISIONING_SECONDS', type: 'int', help: 'seconds a new interconnect stays pending (default 60)' },
  { key: 'cniFacilities', flag: 'cni-facilities', env: 'OUTPOST_CNI_FACILITIES', type: 'string', help: 'JSON file replacing the built-in interconnect facilities catalog' },
  { key: 'nameServers', flag: 'name-servers', env: 'OUTPOST_NAME_SERVERS', type: 'list', help: 'comma-separated name servers assigned to zones' },
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
  if (spec.type === 'list') return Array.isArray(raw) ? raw.map(String) : String(raw).split(',').map((s) => s.trim()).filter(Boolean);
  if (spec.type === 'rate') {
    if (typeof raw === 'object' && raw !== null) return raw;
    const m = /^(\d+)\/(\d+)$/.exec(String(raw));
    if (!m) throw new ConfigError(`${where}: expected <requests>/<seconds>, got ${String(raw)}`);
    return { requests: Number(m[1]), windowSeconds: Number(m[2]) };
  }
  // Only digits: Number('') and Number(null) would silently be 0 (a random port).
  const n = typeof raw === 'number' ? raw : typeof raw === 'string' && /^\s*\d+\s*$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isInteger(n) || n < 0 || (spec.type === 'port' && n > 65535)) {
    throw new ConfigError(`${where}: expected ${spec.type === 'port' ? 'a port 0–65535' : 'a non-negative integer'}, got ${String(raw)}`);
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
  const config: Config = { ...DEFAULTS, nameServers: [...DEFAULTS.nameServers], edgeAddresses: [...DEFAULTS.edgeAddresses] };
  const known = new Set([...OPTIONS.map((o) => o.flag), 'config', 'help']);
  for (const name of Object.keys(flags)) {
    if (!known.has(name)) throw new ConfigError(`unknown flag --${name}; see outpost --help`);
  }
  const file = flags.config ?? env.OUTPOST_CONFIG;
  const fromFile: Record<string, unknown> = file ? readConfigFile(file) : {};
  const target = config as unknown as Record<string, unknown>;
  for (const spec of OPTIONS) {
    if (fromFile[spec.key] !== undefined) target[spec.key] = convert(spec, fromFile[spec.key], `config file ${file}:`);
    if (env[spec.env] !== undefined && env[spec.env] !== '') target[spec.key] = convert(spec, env[spec.env], 'environment');
    if (flags[spec.flag] !== undefined) target[spec.key] = convert(spec, flags[spec.flag], 'flag');
  }
  Object.assign(config, overrides);
  if (config.zoneActivation !== 'immediate' && config.zoneActivation !== 'manual') {
    throw new ConfigError(`zone activation must be immediate or manual, got ${String(config.zoneActivation)}`);
  }
  if (config.accountId !== undefined && !/^[0-9a-f]{32}$/.test(config.accountId)) {
    throw new ConfigError('OUTPOST_ACCOUNT_ID / --account-id must be 32 lowercase hex characters');
  }
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
    '  outpost --help            this text',
    '',
    'Options (flags > environment > config file > defaults):',
    ...lines,
    `  --${'config'.padEnd(18)} JSON config file with the same keys in camelCase [OUTPOST_CONFIG]`,
    '',
  ].join('\n');
}
