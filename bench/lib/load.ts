/**
 * HTTP load generation over keep-alive `node:http` agents: closed-loop phases (N request loops,
 * each sending its next request when the previous answer is read in full) and open-loop phases
 * (requests scheduled at a fixed rate whatever the answers; latency counted from the scheduled
 * time, so a slow server cannot hide its queueing delay).
 *
 * Only 2xx answers that pass the phase's check count as throughput; every other answer and every
 * transport error is counted, by status, as an error.
 */
import http from 'node:http';
import { performance } from 'node:perf_hooks';

export interface Target {
  label: string;
  host: string;
  port: number;
  agent: http.Agent;
  headers: Record<string, string>;
}

export function makeTarget(
  label: string,
  baseUrl: string,
  headers: Record<string, string>,
  maxSockets: number,
): Target {
  const url = new URL(baseUrl);
  return {
    label,
    host: url.hostname,
    port: Number(url.port),
    agent: new http.Agent({ keepAlive: true, maxSockets }),
    headers,
  };
}

export interface Req {
  method: 'GET' | 'POST';
  path: string;
  body?: string;
  /** Operation label for mixed phases. */
  op?: string;
}

export interface Res {
  status: number;
  body: string;
}

const REQUEST_TIMEOUT_MS = 30_000;

/** Sends one request and reads the whole answer. Rejects on transport errors and timeouts. */
export function send(t: Target, r: Req): Promise<Res> {
  return new Promise((resolve, reject) => {
    const body = r.body === undefined ? undefined : Buffer.from(r.body);
    const headers: Record<string, string | number> = { ...t.headers };
    if (body) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = body.length;
    }
    const req = http.request(
      { host: t.host, port: t.port, method: r.method, path: r.path, agent: t.agent, headers },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.setTimeout(REQUEST_TIMEOUT_MS, () =>
      req.destroy(new Error(`timeout after ${REQUEST_TIMEOUT_MS} ms`)),
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** A growable list of latency samples (ms) with percentiles. */
export class Samples {
  private buf = new Float64Array(4096);
  private n = 0;
  private sorted: Float64Array | undefined;

  add(v: number): void {
    if (this.n === this.buf.length) {
      const next = new Float64Array(this.buf.length * 2);
      next.set(this.buf);
      this.buf = next;
    }
    this.buf[this.n++] = v;
    this.sorted = undefined;
  }

  get count(): number {
    return this.n;
  }

  /** Nearest-rank percentile, q in (0, 1]; NaN without samples. */
  percentile(q: number): number {
    if (this.n === 0) return NaN;
    this.sorted ??= this.buf.slice(0, this.n).sort();
    const rank = Math.min(this.n, Math.max(1, Math.ceil(q * this.n)));
    return this.sorted[rank - 1];
  }

  max(): number {
    return this.percentile(1);
  }
}

export class PhaseResult {
  ok = 0;
  errors = 0;
  /** Error counts by HTTP status or transport error name. */
  readonly errorKinds = new Map<string, number>();
  /** A few examples of error answers, for the report. */
  readonly errorSamples: string[] = [];
  readonly latency = new Samples();
  elapsedMs = 0;
  /** Open loop only: requests due while the in-flight limit was reached, so never sent. */
  notSent = 0;

  addError(kind: string, detail: string): void {
    this.errors++;
    this.errorKinds.set(kind, (this.errorKinds.get(kind) ?? 0) + 1);
    if (this.errorSamples.length < 3) this.errorSamples.push(`${kind}: ${detail.slice(0, 300)}`);
  }

  /** Successful requests per second. */
  get rate(): number {
    return this.elapsedMs > 0 ? (this.ok * 1000) / this.elapsedMs : 0;
  }

  /** `409×3, ECONNRESET×1` */
  errorSummary(): string {
    return [...this.errorKinds].map(([k, n]) => `${k}×${n}`).join(', ');
  }
}

/** Returns an error message when a 2xx answer is not what the phase expects. */
export type Check = (req: Req, res: Res) => string | undefined;

function record(
  result: PhaseResult,
  req: Req,
  res: Res | Error,
  ms: number,
  check?: Check,
  onOk?: (req: Req, res: Res) => void,
): void {
  if (res instanceof Error) {
    result.addError((res as NodeJS.ErrnoException).code ?? 'transport', res.message);
    return;
  }
  if (res.status < 200 || res.status > 299) {
    result.addError(String(res.status), res.body);
    return;
  }
  const problem = check?.(req, res);
  if (problem) {
    result.addError('bad answer', problem);
    return;
  }
  result.ok++;
  result.latency.add(ms);
  onOk?.(req, res);
}

export interface ClosedLoopOptions {
  target: Target;
  concurrency: number;
  durationMs: number;
  /** Stop issuing after this many requests (all loops together), even before the deadline. */
  maxRequests?: number;
  next: (loop: number) => Req;
  /** Checked on the first answer of every loop (keeps the client light), or on all with `checkAll`. */
  check?: Check;
  checkAll?: boolean;
  /** Polled before each request: true ends the phase early (interrupt, a server died). */
  stop?: () => boolean;
  /** Called on every successful answer (e.g. to collect created ids). */
  onOk?: (req: Req, res: Res) => void;
}

/** N loops, each with one request in flight at a time, until the deadline. */
export async function closedLoop(o: ClosedLoopOptions): Promise<PhaseResult> {
  const result = new PhaseResult();
  const start = performance.now();
  const deadline = start + o.durationMs;
  let issued = 0;
  let lastEnd = start;
  const loop = async (i: number) => {
    let first = true;
    while (
      performance.now() < deadline &&
      (o.maxRequests === undefined || issued < o.maxRequests) &&
      !o.stop?.()
    ) {
      issued++;
      const req = o.next(i);
      const t0 = performance.now();
      let res: Res | Error;
      try {
        res = await send(o.target, req);
      } catch (err) {
        res = err as Error;
      }
      const t1 = performance.now();
      if (t1 > lastEnd) lastEnd = t1;
      record(result, req, res, t1 - t0, first || o.checkAll ? o.check : undefined, o.onOk);
      first = false;
    }
  };
  await Promise.all(Array.from({ length: o.concurrency }, (_, i) => loop(i)));
  result.elapsedMs = lastEnd - start;
  return result;
}

export interface OpenLoopOptions {
  target: Target;
  rate: number;
  durationMs: number;
  next: (i: number) => Req;
  check?: Check;
  /** Requests due while this many are in flight are not sent; they are counted as `notSent`. */
  maxInFlight: number;
  /** Polled on every tick: true stops scheduling (interrupt, a server died). */
  stop?: () => boolean;
}

export interface OpenLoopResult {
  all: PhaseResult;
  byOp: Map<string, PhaseResult>;
  scheduled: number;
  /** Largest delay between a request's scheduled time and the moment it was handed to the agent. */
  maxSendLagMs: number;
}

/** Sends `rate` requests per second for the duration, regardless of how fast answers come. */
export function openLoop(o: OpenLoopOptions): Promise<OpenLoopResult> {
  const all = new PhaseResult();
  const byOp = new Map<string, PhaseResult>();
  let total = Math.round((o.rate * o.durationMs) / 1000);
  const interval = 1000 / o.rate;
  const start = performance.now();
  let sent = 0;
  let inFlight = 0;
  let lastEnd = start;
  let maxSendLagMs = 0;
  const checkedOps = new Set<string>();

  return new Promise((resolve) => {
    const finishIfDone = () => {
      if (sent < total || inFlight > 0) return;
      all.elapsedMs = lastEnd - start;
      for (const r of byOp.values()) r.elapsedMs = all.elapsedMs;
      resolve({ all, byOp, scheduled: total, maxSendLagMs });
    };
    const fire = (i: number, scheduledAt: number) => {
      const req = o.next(i);
      const op = req.op ?? 'all';
      let opResult = byOp.get(op);
      if (!opResult) byOp.set(op, (opResult = new PhaseResult()));
      if (inFlight >= o.maxInFlight) {
        all.notSent++;
        opResult.notSent++;
        return;
      }
      const check = checkedOps.has(op) ? undefined : o.check;
      checkedOps.add(op);
      maxSendLagMs = Math.max(maxSendLagMs, performance.now() - scheduledAt);
      inFlight++;
      send(o.target, req).then(
        (res) => done(res),
        (err: Error) => done(err),
      );
      function done(res: Res | Error) {
        const t = performance.now();
        if (t > lastEnd) lastEnd = t;
        inFlight--;
        record(all, req, res, t - scheduledAt, check);
        record(opResult!, req, res, t - scheduledAt, check);
        finishIfDone();
      }
    };
    const tick = () => {
      if (o.stop?.()) total = sent;
      const now = performance.now();
      const due = Math.min(total, Math.floor((now - start) / interval) + 1);
      while (sent < due) {
        fire(sent, start + sent * interval);
        sent++;
      }
      if (sent < total) {
        // Sleep until the next request is due (timers fire late by up to ~1 ms; that lag counts).
        const wait = Math.max(0, start + sent * interval - performance.now());
        setTimeout(tick, wait);
      } else {
        finishIfDone();
      }
    };
    tick();
  });
}
