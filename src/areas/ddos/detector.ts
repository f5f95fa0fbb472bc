/**
 * Rate detection for one signature: counts per target (a host, a proxied application) and per
 * source address in fixed windows (`--ddos-window-ms`). The check runs on every hit against the
 * window's count so far, so a flood is caught as soon as it has sent one window's worth of
 * threshold traffic — within one window, usually much sooner. At the end of each window the
 * target's baseline learns from the window's rate (only while no attack runs), and a running
 * attack counts a quiet window when its rates fell below threshold; after
 * `--ddos-cooldown-windows` quiet windows it ends and mitigation stops.
 *
 * Mitigated sources: in a single-source detection, the sources over the per-source threshold; in
 * a many-source detection, every source sending more than its fair share (the larger of twice
 * the target's baseline and 1/10 of the target threshold) — a legitimate client at ordinary rates
 * stays served. A fingerprinted stream (reflection) is mitigated whole while its attack runs.
 * Memory is bounded: sources per window and targets are capped, idle targets dropped.
 */
import { BASELINE_MULTIPLIER, SENSITIVITY_FACTOR, type Sensitivity, type Signature } from './signatures.ts';

/** Weight of the newest window in the learned baseline. */
const BASELINE_ALPHA = 0.2;
const MAX_SOURCES_PER_WINDOW = 50_000;
const MAX_TARGETS = 100_000;
/** Windows without traffic after which a target's state (and baseline) is dropped. */
const IDLE_WINDOWS = 600;

/** What an attack is about; filled by the caller at the first hit of a target. */
export interface TargetRef {
  zoneId: string;
  zoneName: string;
  accountId: string;
  /** Host name (L7) or the application's host name (L4). */
  hostname: string;
  /** L4: the application id, edge address, port and transport. */
  appId?: string;
  targetIp?: string;
  targetPort?: number;
  protocol?: string;
}

export interface Attack {
  id: string;
  signature: Signature;
  target: TargetRef;
  startedAt: number;
  /** Highest rate of the target (per second) seen during the attack. */
  peakRate: number;
  /** Highest bits per second (L4 with byte counts). */
  peakBps: number;
  mitigated: number;
  logged: number;
  sources: Set<string>;
  action: string;
  sensitivity: Sensitivity;
  overrideRuleId?: string;
  /** How it was detected: one source over its threshold, or the target's total. */
  mode: 'source' | 'target';
  quiet: number;
}

interface TargetState {
  ref: TargetRef;
  count: number;
  bytes: number;
  sources: Map<string, number>;
  baseline: number;
  idle: number;
  attack?: Attack;
}

export interface DetectorOptions {
  windowMs: number;
  cooldownWindows: number;
  /** Multiplies every floor (the `--ddos-threshold-percent` / 100). */
  scale: number;
  newId(): string;
  /** Monotonic milliseconds for the windows (default `performance.now`); tests step it by hand. */
  now?: () => number;
  onStart(attack: Attack): void;
  onEnd(attack: Attack): void;
}

/** In a many-source flood, a source above this rate (per second) is one of the attackers. */
function fairShare(baseline: number, targetThreshold: number): number {
  return Math.max(2 * baseline, targetThreshold / 10);
}

export class Detector {
  private readonly targets = new Map<string, TargetState>();
  private readonly now: () => number;
  private windowStart: number;
  private readonly windowSec: number;

  constructor(
    readonly signature: Signature,
    private readonly opts: DetectorOptions,
  ) {
    this.windowSec = opts.windowMs / 1000;
    this.now = opts.now ?? (() => performance.now());
    this.windowStart = this.now();
  }

  /** Seconds the current window has run, at least its nominal length. */
  private elapsed(): number {
    return Math.max(this.windowSec, (this.now() - this.windowStart) / 1000);
  }

  private thresholds(baseline: number, sensitivity: Sensitivity): { source: number; target: number } {
    const f = SENSITIVITY_FACTOR[sensitivity];
    const learned = BASELINE_MULTIPLIER * baseline;
    return {
      source: Math.max(this.signature.sourceFloor * this.opts.scale, learned) * f,
      target: Math.max(this.signature.targetFloor * this.opts.scale, learned) * f,
    };
  }

  /**
   * Counts one hit (a request, a datagram, a connection) and answers the running attack when this
   * source is one it mitigates; `ref` is called only for a target seen for the first time.
   */
  hit(key: string, ref: () => TargetRef, source: string, sensitivity: Sensitivity, action: string, overrideRuleId: string | undefined, bytes = 0): Attack | undefined {
    let t = this.targets.get(key);
    if (!t) {
      if (this.targets.size >= MAX_TARGETS) return undefined;
      t = { ref: ref(), count: 0, bytes: 0, sources: new Map(), baseline: 0, idle: 0 };
      this.targets.set(key, t);
    }
    t.count++;
    t.bytes += bytes;
    let n = t.sources.get(source);
    if (n === undefined) {
      if (t.sources.size < MAX_SOURCES_PER_WINDOW) t.sources.set(source, (n = 1));
      else n = 1;
    } else t.sources.set(source, ++n);
    const attack = t.attack;
    if (attack) {
      if (attack.sources.has(source)) return attack;
      if (this.signature.fingerprint) {
        // Traffic an override turned the rule off for (eoff, scoped by its expression) is not
        // part of the attack, fingerprint or not.
        if (sensitivity === 'eoff') return undefined;
        if (attack.sources.size < MAX_SOURCES_PER_WINDOW) attack.sources.add(source);
        return attack;
      }
      const thr = this.thresholds(t.baseline, attack.sensitivity);
      const cut = attack.mode === 'source' ? thr.source : fairShare(t.baseline, thr.target);
      if (n >= cut * this.windowSec && n >= cut * this.elapsed()) {
        attack.sources.add(source);
        return attack;
      }
      return undefined;
    }
    if (sensitivity === 'eoff') return undefined;
    const thr = this.thresholds(t.baseline, sensitivity);
    let overSource = n >= thr.source * this.windowSec;
    let overTarget = t.count >= thr.target * this.windowSec;
    if (!overSource && !overTarget) return undefined;
    // A window the event loop let run long holds more hits at the same rate.
    const seconds = this.elapsed();
    overSource &&= n >= thr.source * seconds;
    overTarget &&= t.count >= thr.target * seconds;
    if (!overSource && !overTarget) return undefined;
    const elapsed = Math.max((this.now() - this.windowStart) / 1000, this.windowSec / 10);
    const started: Attack = {
      id: this.opts.newId(),
      signature: this.signature,
      target: t.ref,
      startedAt: Date.now(),
      peakRate: Math.round(t.count / elapsed),
      peakBps: Math.round((t.bytes * 8) / elapsed),
      mitigated: 0,
      logged: 0,
      sources: new Set(),
      action,
      sensitivity,
      overrideRuleId,
      mode: overSource ? 'source' : 'target',
      quiet: 0,
    };
    if (overSource) started.sources.add(source);
    else {
      const cut = this.signature.fingerprint ? 0 : fairShare(t.baseline, thr.target) * seconds;
      for (const [s, c] of t.sources) if (c >= cut) started.sources.add(s);
    }
    t.attack = started;
    this.opts.onStart(started);
    return started.sources.has(source) ? started : undefined;
  }

  /** Ends the current window: learn baselines, update running attacks, drop idle targets. */
  roll(): void {
    const now = this.now();
    const seconds = Math.max((now - this.windowStart) / 1000, 0.001);
    this.windowStart = now;
    for (const [key, t] of this.targets) {
      const rate = t.count / seconds;
      const attack = t.attack;
      if (attack) {
        attack.peakRate = Math.max(attack.peakRate, Math.round(rate));
        attack.peakBps = Math.max(attack.peakBps, Math.round((t.bytes * 8) / seconds));
        const thr = this.thresholds(t.baseline, attack.sensitivity);
        let still = false;
        // A fingerprinted attack (reflection) runs on while either measure is over: many small
        // reflectors keep a single-source detection going, one large one a many-source detection.
        const fp = this.signature.fingerprint === true;
        if (attack.mode === 'target' || fp) still = rate >= thr.target;
        if (attack.mode === 'source' || fp) for (const c of t.sources.values()) if (c / seconds >= thr.source) still = true;
        attack.quiet = still ? 0 : attack.quiet + 1;
        if (attack.quiet >= this.opts.cooldownWindows) {
          t.attack = undefined;
          this.opts.onEnd(attack);
        }
      } else {
        // Only ordinary windows are learned — under half of what would be an attack at the
        // default sensitivity, even when an override (eoff, a disabled rule) let a flood pass:
        // neither a flood nor its first and last partial windows may become the baseline.
        const d = this.thresholds(t.baseline, 'default');
        if (rate < Math.min(d.source, d.target) / 2) t.baseline += BASELINE_ALPHA * (rate - t.baseline);
      }
      t.idle = t.count === 0 ? t.idle + 1 : 0;
      t.count = 0;
      t.bytes = 0;
      if (t.sources.size > 0) t.sources = new Map();
      if (!t.attack && t.idle >= IDLE_WINDOWS) this.targets.delete(key);
    }
  }

  /** Attacks running now. */
  running(): Attack[] {
    const out: Attack[] = [];
    for (const t of this.targets.values()) if (t.attack) out.push(t.attack);
    return out;
  }

  /** Learned baselines, for the status API. */
  baselines(): { key: string; ref: TargetRef; baseline: number }[] {
    return [...this.targets].map(([key, t]) => ({ key, ref: t.ref, baseline: Math.round(t.baseline * 100) / 100 }));
  }

  /** Ends every running attack (server stop). */
  endAll(): void {
    for (const t of this.targets.values()) {
      if (!t.attack) continue;
      const a = t.attack;
      t.attack = undefined;
      this.opts.onEnd(a);
    }
  }
}
