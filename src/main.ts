/** The `outpost` command line: `outpost serve`, `outpost tunnel run|access`, `outpost --help`. */
import { ConfigError, helpText, loadConfig, parseFlags } from './core/config.ts';
import { createLogger } from './core/log.ts';
import { startServer, API_PREFIX } from './server.ts';

async function main(argv: string[]): Promise<number> {
  const { flags, rest } = parseFlags(argv);
  const command = rest[0] ?? (flags.help ? 'help' : undefined);
  if (command === 'tunnel') {
    // `outpost tunnel run|access …`: the connector side, loaded only when asked for.
    const { runTunnelCommand } = await import('./connector/index.ts');
    return runTunnelCommand(argv.slice(argv.indexOf('tunnel') + 1));
  }
  if (command === undefined || command === 'help' || flags.help) {
    process.stdout.write(helpText());
    return command === undefined && !flags.help ? 1 : 0;
  }
  if (command !== 'serve') {
    process.stderr.write(`outpost: unknown command ${command}; try outpost --help\n`);
    return 2;
  }
  const config = loadConfig(flags);
  const log = createLogger(config.logLevel);
  const server = await startServer(config, { logger: log });

  const rows = server.listeners.map((l) => [l.name, l.protocol, l.address]);
  rows.push(['data', config.database.startsWith('postgres') ? 'postgresql' : 'sqlite', server.database.location]);
  const widths = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i].length), 8));
  const line = (r: string[]) => r.map((cell, i) => cell.padEnd(widths[i])).join('  ');
  process.stdout.write(`\nOutpost is running.\n\n${line(['LISTENER', 'PROTOCOL', 'ADDRESS'])}\n${rows.map(line).join('\n')}\n\n`);
  process.stdout.write(`Account id: ${server.seeded.accountId}\n`);
  if (server.seeded.newToken) {
    process.stdout.write(`Root API token (shown once, keep it): ${server.seeded.newToken}\n`);
  }
  if (server.seeded.newApiKey) {
    process.stdout.write(`Legacy X-Auth-Email: ${config.apiEmail}  X-Auth-Key (shown once): ${server.seeded.newApiKey}\n`);
  }
  process.stdout.write(`Official client: new Cloudflare({ baseURL: '${server.apiUrl}${API_PREFIX}', apiToken })\n\n`);
  log.info({ listeners: server.listeners }, 'outpost started');

  await new Promise<void>((resolve) => {
    const onSignal = (signal: string) => {
      log.info({ signal }, 'stopping: finishing in-flight requests');
      resolve();
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  });
  await server.stop();
  log.info('stopped');
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    if (err instanceof ConfigError) process.stderr.write(`outpost: ${err.message}\n`);
    else process.stderr.write(`outpost: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
