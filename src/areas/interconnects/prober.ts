/**
 * Tunnel health prober: sends ICMP echo requests to each GRE/IPsec tunnel's health-check target
 * with the system `ping` binary (iputils-ping: `-n -c 1 -W 1`, one packet, 1 s timeout) and keeps
 * a health state per tunnel, in memory.
 *
 * Rounds follow the platform's documented probe behaviour: one echo per interval; when it fails,
 * up to two more at once, so a single lost packet does not mark a tunnel down.
 * - `down`: the last round failed all its attempts;
 * - `degraded`: the last round succeeded, but at least two of the last twenty attempts failed;
 * - `healthy`: otherwise; `unknown` until the first round ends.
 *
 * Resources are bounded: one timer per prober, at most `MAX_CONCURRENT` rounds at once (the others
 * wait for a later tick, longest-overdue first), every child killed and awaited by `stop()`.
 */
import { execFile } from 'node:child_process';

export type ProbeStatus = 'unknown' | 'healthy' | 'degraded' | 'down';

export interface ProbeSpec {
  account: string;
  kind: 'gre' | 'ipsec';
  id: string;
  name: string;
  /** An IPv4 address (validated before it gets here), or null when there is nothing to probe. */
  target: string | null;
  intervalMs: number;
}

export interface ProbeState {
  status: ProbeStatus;
  checked_at: string | null;
}

export interface Transition {
  account: string;
  kind: 'gre' | 'ipsec';
  id: string;
  name: string;
  target: string;
  previous: ProbeStatus;
  status: ProbeStatus;
  at: string;
}

/** One echo; true when a reply came back in time. */
export type Ping = (address: string, signal: AbortSignal) => Promise<boolean>;

const MAX_CONCURRENT = 16;
const WINDOW = 20;
const ATTEMPTS_PER_ROUND = 3;

export const pingOnce: Ping = (address, signal) =>
  new Promise((resolve, reject) => {
    // `-W 1`: wait one second for the reply; the outer timeout only guards a hung child.
    execFile(
      'ping',
      ['-n', '-q', '-c', '1', '-W', '1', address],
      { timeout: 5000, signal, windowsHide: true },
      (err) => {
        // A missing tool is not a down tunnel: the state stays as it was and the error is logged.
        if ((err as NodeJS.ErrnoException | null)?.code === 'ENOENT') reject(new Error('health checks need the ping command: install iputils-ping'));
        else resolve(!err);
      },
    );
  });

interface Entry {
  spec: ProbeSpec;
  nextAt: number;
  running: boolean;
  attempts: boolean[];
  state: ProbeState;
}

export class TunnelProber {
  private readonly entries = new Map<string, Entry>();
  private timer: NodeJS.Timeout | undefined;
  private readonly inFlight = new Set<Promise<void>>();
  private abort = new AbortController();
  private stopped = true;

  constructor(
    private readonly opts: {
      tickMs: number;
      now: () => Date;
      onTransition: (t: Transition) => void;
      onError: (err: unknown) => void;
      ping?: Ping;
    },
  ) {}

  private static key(kind: string, id: string): string {
    return `${kind}:${id}`;
  }

  /** Starts (or updates, or with `undefined` stops) probing one tunnel. */
  set(kind: 'gre' | 'ipsec', id: string, spec: ProbeSpec | undefined): void {
    const key = TunnelProber.key(kind, id);
    const current = this.entries.get(key);
    if (!spec) {
      this.entries.delete(key);
      return;
    }
    if (current && current.spec.target === spec.target) {
      // Same target: keep the history, take the new interval from now on.
      if (current.spec.intervalMs !== spec.intervalMs) current.nextAt = Date.now();
      current.spec = spec;
      return;
    }
    this.entries.set(key, {
      spec,
      nextAt: Date.now(),
      running: false,
      attempts: [],
      state: { status: 'unknown', checked_at: null },
    });
  }

  state(kind: 'gre' | 'ipsec', id: string): ProbeState | undefined {
    return this.entries.get(TunnelProber.key(kind, id))?.state;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.abort = new AbortController();
    this.timer = setInterval(() => this.tick(), this.opts.tickMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.timer = undefined;
    this.abort.abort();
    await Promise.allSettled([...this.inFlight]);
    this.entries.clear();
  }

  private tick(): void {
    const now = Date.now();
    const free = MAX_CONCURRENT - this.inFlight.size;
    if (free <= 0) return;
    // The longest-overdue first, so that no tunnel waits behind others when slots are short.
    const due = [...this.entries.values()]
      .filter((e) => !e.running && e.nextAt <= now && e.spec.target !== null)
      .sort((a, b) => a.nextAt - b.nextAt)
      .slice(0, free);
    for (const entry of due) {
      entry.running = true;
      const p = this.round(entry)
        .catch((err) => this.opts.onError(err))
        .finally(() => {
          entry.running = false;
          entry.nextAt = Date.now() + entry.spec.intervalMs;
          this.inFlight.delete(p);
        });
      this.inFlight.add(p);
    }
  }

  private async round(entry: Entry): Promise<void> {
    const ping = this.opts.ping ?? pingOnce;
    const target = entry.spec.target!;
    let ok = false;
    for (let i = 0; i < ATTEMPTS_PER_ROUND && !ok; i++) {
      if (this.abort.signal.aborted) return;
      ok = await ping(target, this.abort.signal);
      if (this.abort.signal.aborted) return;
      entry.attempts.push(ok);
    }
    if (entry.attempts.length > WINDOW) entry.attempts.splice(0, entry.attempts.length - WINDOW);
    // The tunnel may have been deleted or retargeted while the round ran.
    if (this.entries.get(TunnelProber.key(entry.spec.kind, entry.spec.id)) !== entry) return;
    const failures = entry.attempts.filter((a) => !a).length;
    const status: ProbeStatus = !ok ? 'down' : failures >= 2 ? 'degraded' : 'healthy';
    const previous = entry.state.status;
    const at = this.opts.now().toISOString();
    entry.state = { status, checked_at: at };
    if (status !== previous) {
      const { account, kind, id, name } = entry.spec;
      this.opts.onTransition({ account, kind, id, name, target, previous, status, at });
    }
  }
}
