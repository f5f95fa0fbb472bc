/**
 * `outpost tunnel …`: the client side of tunnels.
 * - `outpost tunnel run --token <token>` (or `TUNNEL_TOKEN`): runs a connector; the token says
 *   where Outpost is (`--edge <url>` overrides); `--config <file>` (YAML or JSON with `ingress:`)
 *   or `--url <origin>` give local rules for tunnels without a remote configuration.
 * - `outpost tunnel access --socks5 <host:port>`: a local SOCKS5 proxy into routed private networks.
 */
import { readFileSync } from 'node:fs';
import { parseFlags } from '../core/config.ts';
import { SocksProxy } from './access.ts';
import { compileIngress, durationMs, IngressError, type TunnelConfig } from './ingress.ts';
import { createLog, TunnelConnector, type LogLevel } from './run.ts';
import { decodeToken, TokenError } from './token.ts';
import { parseYaml, YamlError } from './yaml.ts';

const USAGE = `Usage:
  outpost tunnel run [--token <token>] [options]
      --token <token>          tunnel token (default: $TUNNEL_TOKEN)
      --edge <url>             where Outpost is (default: the token's endpoint)
      --ha-connections <n>     connections to keep (default 4)
      --config <file>          local configuration (YAML or JSON with ingress:)
      --url <origin>           one local catch-all rule, e.g. http://localhost:8000
      --grace-period <dur>     time given to requests in flight on stop (default 30s)
      --retry-base <dur>       first reconnect delay (default 1s), doubled per failure
      --retry-max <dur>        longest reconnect delay (default 30s)
      --log-level <level>      debug|info|warn|error (default info)
  outpost tunnel access --socks5 <host:port> [options]
      --api <url>              management API (default: $OUTPOST_API_URL or http://127.0.0.1:8787)
      --api-token <token>      API token (default: $OUTPOST_API_TOKEN or $CLOUDFLARE_API_TOKEN)
      --account <id>           only routes of this account
      --virtual-network <id>   only routes of this virtual network
      --log-level <level>      debug|info|warn|error (default info)
`;

class UsageError extends Error {}

function level(flags: Record<string, string>): LogLevel {
  const l = (
    flags['log-level'] ??
    flags.loglevel ??
    process.env.TUNNEL_LOGLEVEL ??
    'info'
  ).toLowerCase();
  if (l === 'debug' || l === 'info' || l === 'warn' || l === 'error') return l;
  throw new UsageError(`--log-level must be debug, info, warn or error, got ${l}`);
}

function checkFlags(flags: Record<string, string>, known: string[]): void {
  for (const name of Object.keys(flags)) {
    if (!known.includes(name)) throw new UsageError(`unknown flag --${name}`);
  }
}

function localConfig(flags: Record<string, string>): TunnelConfig | undefined {
  if (flags.url) return { ingress: [{ service: flags.url }] };
  if (!flags.config) return undefined;
  let parsed: unknown;
  try {
    parsed = parseYaml(readFileSync(flags.config, 'utf8'));
  } catch (err) {
    if (err instanceof YamlError || err instanceof SyntaxError)
      throw new UsageError(`${flags.config}: ${err.message}`);
    throw new UsageError(`${flags.config}: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new UsageError(`${flags.config}: expected a mapping at the top level`);
  const config = parsed as TunnelConfig;
  try {
    compileIngress(config);
  } catch (err) {
    if (err instanceof IngressError) throw new UsageError(`${flags.config}: ${err.message}`);
    throw err;
  }
  return config;
}

function waitForSignal(): Promise<string> {
  return new Promise((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
  });
}

async function run(flags: Record<string, string>): Promise<number> {
  checkFlags(flags, [
    'token',
    'edge',
    'ha-connections',
    'config',
    'url',
    'grace-period',
    'retry-base',
    'retry-max',
    'log-level',
    'loglevel',
    // Accepted for command lines written for the platform's connector; HTTP/2 is the only protocol.
    'no-autoupdate',
    'protocol',
  ]);
  const log = createLog(level(flags));
  const tokenText = flags.token ?? process.env.TUNNEL_TOKEN;
  if (!tokenText)
    throw new UsageError('a tunnel token is required: --token <token> or TUNNEL_TOKEN');
  let token;
  try {
    token = decodeToken(tokenText);
  } catch (err) {
    throw new UsageError(
      `invalid tunnel token: ${err instanceof TokenError ? err.message : String(err)}`,
    );
  }
  const edge = flags.edge ?? process.env.TUNNEL_EDGE ?? token.e;
  if (!edge) throw new UsageError('the token names no endpoint (e): pass --edge <url>');
  if (!/^https?:\/\//.test(edge))
    throw new UsageError(`--edge must be an http:// or https:// URL, got ${edge}`);
  const ha = Number(flags['ha-connections'] ?? 4);
  if (!Number.isInteger(ha) || ha < 1 || ha > 64)
    throw new UsageError('--ha-connections must be an integer from 1 to 64');
  const connector = new TunnelConnector({
    token,
    tokenText: tokenText.trim(),
    edge,
    haConnections: ha,
    localConfig: localConfig(flags),
    backoffBaseMs: durationMs(flags['retry-base'], 1000),
    backoffMaxMs: durationMs(flags['retry-max'], 30_000),
    gracePeriodMs: durationMs(flags['grace-period'], 30_000),
    log,
  });
  connector.start();
  const signal = await waitForSignal();
  log('info', `Received ${signal}: shutting down`);
  await connector.stop();
  return 0;
}

async function access(flags: Record<string, string>): Promise<number> {
  checkFlags(flags, [
    'socks5',
    'api',
    'api-token',
    'account',
    'virtual-network',
    'log-level',
    'loglevel',
  ]);
  const log = createLog(level(flags));
  const listen = flags.socks5;
  const m = listen ? /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(listen) : null;
  if (!m) throw new UsageError('--socks5 <host:port> is required, e.g. --socks5 127.0.0.1:1080');
  const apiToken =
    flags['api-token'] ?? process.env.OUTPOST_API_TOKEN ?? process.env.CLOUDFLARE_API_TOKEN;
  if (!apiToken) throw new UsageError('an API token is required: --api-token or OUTPOST_API_TOKEN');
  const api = flags.api ?? process.env.OUTPOST_API_URL ?? 'http://127.0.0.1:8787';
  const proxy = new SocksProxy({
    listenHost: m[1] ?? m[2],
    listenPort: Number(m[3]),
    api,
    apiToken,
    account: flags.account,
    virtualNetwork: flags['virtual-network'],
    log,
  });
  const address = await proxy.listen();
  const shown =
    address.family === 'IPv6'
      ? `[${address.address}]:${address.port}`
      : `${address.address}:${address.port}`;
  process.stdout.write(`SOCKS5 proxy listening on ${shown} (via ${api})\n`);
  const signal = await waitForSignal();
  log('info', `Received ${signal}: shutting down`);
  await proxy.close();
  return 0;
}

/** Runs `outpost tunnel <argv…>`; returns the exit code. */
export async function runTunnelCommand(argv: string[]): Promise<number> {
  const { flags, rest } = parseFlags(argv);
  const sub = rest[0];
  if (sub === undefined || sub === 'help' || flags.help) {
    process.stdout.write(USAGE);
    return sub === undefined && !flags.help ? 1 : 0;
  }
  delete flags.help;
  try {
    if (sub === 'run') return await run(flags);
    if (sub === 'access') return await access(flags);
    throw new UsageError(`unknown tunnel command ${sub}`);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`outpost tunnel: ${err.message}\n${USAGE}`);
      return 2;
    }
    throw err;
  }
}
