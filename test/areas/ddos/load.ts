/** Bounded HTTP load loops from chosen loopback source addresses (127/8), for DDoS tests and the bench. */
import http from 'node:http';

export interface FloodResult {
  sent: number;
  statuses: Record<number, number>;
  /** Milliseconds from the flood's start to its first answer other than 200 (undefined: none). */
  firstMitigatedMs?: number;
  /** Answers per second of status 200. */
  okPerSecond: number;
}

export interface FloodOptions {
  url: URL;
  host: string;
  from: string;
  durationMs: number;
  concurrency?: number;
  path?: string;
  headers?: Record<string, string>;
  /** Pause between requests of each worker (ms); 0 = as fast as answers come. */
  intervalMs?: number;
  /** Stops early once a request was mitigated and this many ms passed after it. */
  stopAfterMitigatedMs?: number;
  /** Stops early once this answers true (checked before each request). */
  stop?: () => boolean;
}

export async function flood(o: FloodOptions): Promise<FloodResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: o.concurrency ?? 4, localAddress: o.from });
  const started = performance.now();
  const deadline = started + o.durationMs;
  const result: FloodResult = { sent: 0, statuses: {}, okPerSecond: 0 };
  const one = () =>
    new Promise<number>((resolve) => {
      const req = http.request({ host: o.url.hostname, port: o.url.port, path: o.path ?? '/', agent, headers: { host: o.host, ...o.headers } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', () => resolve(0));
      req.end();
    });
  const worker = async () => {
    while (performance.now() < deadline && !o.stop?.()) {
      const status = await one();
      result.sent++;
      result.statuses[status] = (result.statuses[status] ?? 0) + 1;
      if (status !== 200 && result.firstMitigatedMs === undefined) result.firstMitigatedMs = performance.now() - started;
      if (o.stopAfterMitigatedMs !== undefined && result.firstMitigatedMs !== undefined && performance.now() - started > result.firstMitigatedMs + o.stopAfterMitigatedMs) break;
      if (o.intervalMs) await new Promise((r) => setTimeout(r, o.intervalMs));
    }
  };
  await Promise.all(Array.from({ length: o.concurrency ?? 4 }, worker));
  agent.destroy();
  result.okPerSecond = ((result.statuses[200] ?? 0) * 1000) / (performance.now() - started);
  return result;
}

/** One request from a source address. */
export function request(url: URL, host: string, from: string, path = '/', headers: Record<string, string> = {}, method = 'GET', body?: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, path, method, localAddress: from, headers: { host, ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}
