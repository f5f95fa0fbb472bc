/**
 * Load against one virtual host of an HTTP listener (the edge), for benchmarks that compare two
 * hosts of the same zone side by side: `wrk -t1` when it is on PATH, else a Node keep-alive loop
 * (bench/lib/load.ts). Also a one-off GET for checks before the load starts.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants as fsConstants } from 'node:fs';
import http from 'node:http';
import { delimiter, join } from 'node:path';
import { closedLoop, makeTarget } from './load.ts';

export interface Measured {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  /** CPU time of the measured server's processes per request, µs (when the caller measured it). */
  cpuUs?: number;
}

/** The path of an executable on PATH, or undefined. */
export function which(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter).filter(Boolean)) {
    try {
      accessSync(join(dir, name), fsConstants.X_OK);
      return join(dir, name);
    } catch {
      // not here
    }
  }
  return undefined;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0
    ? NaN
    : s.length % 2
      ? s[(s.length - 1) / 2]
      : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000 };

/** `seconds` of closed-loop GETs of `/` on `url` with `Host: host`, over `connections`. */
export function loadHost(
  url: string,
  host: string,
  seconds: number,
  connections: number,
): Promise<Measured> {
  const wrk = which('wrk');
  return wrk
    ? runWrk(wrk, url, host, seconds, connections)
    : runNode(url, host, seconds, connections);
}

/** What `loadHost` drives the load with, for the benchmark's header line. */
export function loadDescription(connections: number): string {
  return which('wrk')
    ? `wrk -t1 -c${connections}`
    : `Node keep-alive loop, ${connections} connections (wrk not found)`;
}

function runWrk(
  wrk: string,
  url: string,
  host: string,
  seconds: number,
  connections: number,
): Promise<Measured> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      wrk,
      ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-H', `Host: ${host}`, url],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => {
      if (code !== 0) return reject(new Error(`wrk exited with ${code}: ${out}`));
      const rps = /^Requests\/sec:\s+([\d.]+)/m.exec(out);
      const pct = (p: string) => {
        const m = new RegExp(`^\\s*${p}%\\s+([\\d.]+)(us|ms|s)\\s*$`, 'm').exec(out);
        return m ? Number(m[1]) * UNIT_MS[m[2]] : NaN;
      };
      const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0);
      const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
      const socketErrors = sock ? sock.slice(1).reduce((a, b) => a + Number(b), 0) : 0;
      if (!rps) return reject(new Error(`could not parse wrk's output: ${out}`));
      if (non2xx + socketErrors > 0)
        process.stderr.write(
          `${host}: ${non2xx} non-2xx/3xx answers; ${sock?.[0] ?? 'no socket errors'}\n`,
        );
      resolve({
        rps: Number(rps[1]),
        p50: pct('50'),
        p99: pct('99'),
        errors: non2xx + socketErrors,
      });
    });
  });
}

async function runNode(
  url: string,
  host: string,
  seconds: number,
  connections: number,
): Promise<Measured> {
  const target = makeTarget(host, url, { host }, connections);
  const r = await closedLoop({
    target,
    concurrency: connections,
    durationMs: seconds * 1000,
    next: () => ({ method: 'GET', path: '/' }),
  });
  target.agent.destroy();
  return {
    rps: r.rate,
    p50: r.latency.percentile(0.5),
    p99: r.latency.percentile(0.99),
    errors: r.errors,
  };
}

/** One GET of `/` with `Host: host`, on a fresh connection. */
export function getOnce(
  edge: URL,
  host: string,
): Promise<{ status: number; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      {
        host: edge.hostname,
        port: edge.port,
        path: '/',
        headers: { host },
        agent: false,
        timeout: 10_000,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}
