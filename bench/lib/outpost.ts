/**
 * Starts `outpost serve` as a child process for a benchmark, on free ports with a fresh data
 * directory and a seeded token and account, and gives back what every benchmark then needs:
 * the edge and API addresses and a small JSON caller for the management API.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnNode, type Child } from './procs.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface BenchOutpost {
  child: Child;
  token: string;
  accountId: string;
  /** The management API base, `http://host:port/client/v4` without a trailing slash. */
  api: string;
  /** The plain HTTP edge listener. */
  edge: URL;
  /**
   * Calls the management API with the token; a string body is sent as JSON, FormData as it is.
   * Throws with the envelope when `success` is false.
   */
  call<T = { id: string } & Record<string, unknown>>(method: string, path: string, body?: unknown): Promise<T>;
}

const PLAIN_EDGE = /edge \(proxied HTTP\)\s+http\s+(http:\/\/\S+)/;

export async function startOutpost(
  dataDir: string,
  /** `ready`: the listener-table line to wait for; its match is `child.ready`. */
  opts: { args?: string[]; nodeArgs?: string[]; ready?: RegExp } = {},
): Promise<BenchOutpost> {
  const token = randomBytes(24).toString('hex');
  const accountId = randomBytes(16).toString('hex');
  const child = await spawnNode(
    'outpost',
    [
      ...(opts.nodeArgs ?? []),
      join(ROOT, 'bin', 'outpost.js'),
      'serve',
      ...['--api-port', '0', '--edge-port', '0', '--turn-port', '0', '--dns-port', '0'],
      ...['--data-dir', dataDir],
      ...(opts.args ?? []),
    ],
    {
      cwd: ROOT,
      // The load a throughput benchmark drives from one address is a flood by DDoS detection's
      // measure: it is switched off here (bench/ddos measures it on and off).
      env: { OUTPOST_API_TOKEN: token, OUTPOST_ACCOUNT_ID: accountId, OUTPOST_LOG_LEVEL: 'warn', OUTPOST_DDOS_DETECTION: 'false', NODE_OPTIONS: '' },
      ready: opts.ready ?? PLAIN_EDGE,
      timeoutMs: 60_000,
    },
  );
  const api = /management API\s+http\s+(http:\/\/\S+)/.exec(child.output())![1].replace(/\/$/, '');
  const call = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    const form = body instanceof FormData;
    const res = await fetch(`${api}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body !== undefined && !form ? { 'content-type': 'application/json' } : {}),
      },
      body: body === undefined ? undefined : form ? body : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const parsed = (await res.json()) as { success: boolean; result: T };
    if (!parsed.success) throw new Error(`${method} ${path}: ${JSON.stringify(parsed)}`);
    return parsed.result;
  };
  return { child, token, accountId, api, edge: new URL(PLAIN_EDGE.exec(child.output())![1]), call };
}
