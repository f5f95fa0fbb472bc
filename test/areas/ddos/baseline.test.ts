/**
 * Baseline learning and the UDP-reflection rule, at the detector and the L4 guard, with a clock
 * stepped by hand (one window = 1 s, floors unscaled), so every rate is exact:
 * - a target's baseline is the exponential average (weight 0.2) of its ordinary windows; the
 *   thresholds become max(floor, 10 × baseline) — traffic within that is not flagged, the first hit
 *   at 10 × baseline is; windows at or above half of the attack threshold, windows of a running
 *   attack and long windows counted at their true length are handled as documented; idle windows
 *   let the baseline (and the allowance it gives) decay;
 * - the reflection rule counts only datagrams from the reflection source ports, so a datagram rate
 *   that the generic UDP rule lets pass is dropped when it comes from port 53, 123, 1900, 11211,
 *   389 or 19, and a source's other ports keep passing; once an attack runs, every datagram from
 *   those ports to the application is dropped (the fingerprint), and the attack lasts while either
 *   one reflector or all of them together stay over threshold.
 */
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/core/log.ts';
import { Detector, type Attack, type TargetRef } from '../../../src/areas/ddos/detector.ts';
import { L4Guard, type L4Target } from '../../../src/areas/ddos/l4.ts';
import { AMPLIFICATION_PORTS, SIGNATURES, signaturesOf, type Sensitivity } from '../../../src/areas/ddos/signatures.ts';
import { managedRuleId } from '../../../src/areas/rulesets/index.ts';
import { sqlitePassOnly } from '../../support/server.ts';

const REF: TargetRef = { zoneId: 'z', zoneName: 'example.test', accountId: 'a', hostname: 'www.example.test' };
// The HTTP host rule (target floor 1000/s, no per-source check) and the single-source rule (500/s).
const HOST = SIGNATURES.find((s) => s.stream === 'http' && !Number.isFinite(s.sourceFloor))!;
const SOURCE = SIGNATURES.find((s) => s.stream === 'http' && Number.isFinite(s.sourceFloor))!;
const WINDOW_MS = 1000;

interface Rig {
  d: Detector;
  started: Attack[];
  ended: Attack[];
  /** Sends `count` hits to `key`, spread over `sources` addresses; answers the hits that were flagged. */
  send(count: number, opts?: { key?: string; sources?: number; from?: string; sensitivity?: Sensitivity }): number;
  /** Ends the window after `ms` (default one window). */
  roll(ms?: number): void;
  baseline(key?: string): number;
}

function rig(signature = HOST, cooldownWindows = 2): Rig {
  let clock = 0;
  let ids = 0;
  const started: Attack[] = [];
  const ended: Attack[] = [];
  const d = new Detector(signature, {
    windowMs: WINDOW_MS,
    cooldownWindows,
    scale: 1,
    now: () => clock,
    newId: () => String(++ids),
    onStart: (a) => started.push(a),
    onEnd: (a) => ended.push(a),
  });
  return {
    d,
    started,
    ended,
    send(count, o = {}) {
      let flagged = 0;
      const sources = o.sources ?? 100;
      for (let i = 0; i < count; i++) {
        const from = o.from ?? `198.51.100.${i % sources}`;
        if (d.hit(o.key ?? 'www', () => REF, from, o.sensitivity ?? 'default', 'block', undefined)) flagged++;
      }
      return flagged;
    },
    roll(ms = WINDOW_MS) {
      clock += ms;
      d.roll();
    },
    baseline(key = 'www') {
      return d.baselines().find((b) => b.key === key)?.baseline ?? 0;
    },
  };
}

/** `windows` windows of `rate` hits each. */
function learn(r: Rig, rate: number, windows: number, key = 'www'): void {
  for (let i = 0; i < windows; i++) {
    r.send(rate, { key });
    r.roll();
  }
}

describe.skipIf(sqlitePassOnly('detector and guard without storage'))('baseline learning', () => {
  it('is the exponential average of ordinary windows', () => {
    const r = rig();
    learn(r, 400, 1);
    expect(r.baseline()).toBe(80);
    learn(r, 400, 1);
    expect(r.baseline()).toBe(144);
    learn(r, 0, 1);
    expect(r.baseline()).toBe(115.2);
    learn(r, 400, 60);
    expect(r.baseline()).toBe(400);
    expect(r.started).toEqual([]);
  });

  it('raises the thresholds to 10 × the baseline: within it nothing is flagged, the first hit at 10 × is', () => {
    const learned = rig();
    learn(learned, 400, 60);
    const fresh = rig();
    learn(fresh, 0, 60);
    // Twice the floor: an attack on a host that normally sees nothing…
    fresh.send(2000);
    expect(fresh.started).toHaveLength(1);
    expect(fresh.started[0]).toMatchObject({ mode: 'target' });
    // …but within ten times the learned 400/s on the other. The baseline is 400 × (1 − 0.8^60),
    // a hair under 400, so the threshold is reached at the 4000th hit of the window.
    learned.send(3999);
    expect(learned.started).toEqual([]);
    learned.send(1);
    expect(learned.started).toHaveLength(1);
    expect(learned.started[0]).toMatchObject({ mode: 'target' });
  });

  it('raises the per-source threshold with the baseline too', () => {
    const r = rig(SOURCE);
    // The single-source rule learns windows under half its threshold: 200/s from many clients.
    learn(r, 200, 60);
    expect(r.baseline()).toBe(200);
    expect(r.send(1999, { from: '192.0.2.1' })).toBe(0);
    expect(r.started).toEqual([]);
    expect(r.send(1, { from: '192.0.2.1' })).toBe(1);
    expect(r.started[0]).toMatchObject({ mode: 'source' });
    expect([...r.started[0].sources]).toEqual(['192.0.2.1']);
  });

  it('learns only windows under half of the attack threshold, whatever the sensitivity let pass', () => {
    const r = rig();
    // 499/s: under half of the 1000/s floor, learned.
    learn(r, 499, 1);
    expect(r.baseline()).toBe(99.8);
    // 500/s and a flood that eoff let through are not.
    learn(r, 500, 1);
    expect(r.baseline()).toBe(99.8);
    r.send(50_000, { sensitivity: 'eoff' });
    r.roll();
    expect(r.started).toEqual([]);
    expect(r.baseline()).toBe(99.8);
  });

  it('counts a window the timer let run long at its true length', () => {
    const r = rig();
    // 800 hits in two seconds is 400/s: learned as 400, not refused as 800.
    r.send(800);
    r.roll(2 * WINDOW_MS);
    expect(r.baseline()).toBe(80);
  });

  it('learns nothing while an attack runs, and again once it ended', () => {
    const r = rig();
    learn(r, 100, 60);
    const before = r.baseline();
    expect(before).toBe(100);
    r.send(1000);
    expect(r.started).toHaveLength(1);
    r.roll();
    // Two quiet windows end it (cooldown 2); neither is learned, though ordinary.
    learn(r, 400, 2);
    expect(r.ended).toHaveLength(1);
    expect(r.baseline()).toBe(before);
    learn(r, 400, 1);
    expect(r.baseline()).toBe(160);
  });

  it('decays over idle windows, so the allowance of a quiet target shrinks back to the floor', () => {
    const r = rig();
    learn(r, 400, 60);
    learn(r, 0, 5);
    // 400 × 0.8^5 = 131.07: the threshold is max(1000, 1310.7).
    expect(r.baseline()).toBe(131.07);
    r.send(1310);
    expect(r.started).toEqual([]);
    r.roll();
    learn(r, 0, 10);
    r.send(1000);
    expect(r.started).toHaveLength(1);
  });

  it('keeps a baseline per target', () => {
    const r = rig();
    learn(r, 400, 60, 'busy');
    r.send(1000, { key: 'busy' });
    expect(r.started).toEqual([]);
    r.send(1000, { key: 'quiet' });
    expect(r.started).toHaveLength(1);
    expect(r.baseline('busy')).toBe(400);
    expect(r.baseline('quiet')).toBe(0);
  });

  it('sets the fair share of a many-source flood at twice the baseline', () => {
    const r = rig();
    learn(r, 400, 60);
    // A flood of 10 × 400/s from 40 sources at 100/s each, then two sources at 790 and 810/s:
    // the fair share is max(2 × 400, 4000 / 10) = 800/s, so only the second is mitigated.
    for (let i = 0; i < 100; i++) for (let s = 0; s < 40; s++) r.d.hit('www', () => REF, `203.0.113.${s}`, 'default', 'block', undefined);
    expect(r.started).toHaveLength(1);
    expect(r.started[0].sources.size).toBe(0);
    expect(r.send(790, { from: '192.0.2.7' })).toBe(0);
    expect(r.send(810, { from: '192.0.2.8' })).toBe(11);
    expect([...r.started[0].sources]).toEqual(['192.0.2.8']);
  });
});

describe.skipIf(sqlitePassOnly('detector and guard without storage'))('UDP reflection (L4 guard and detector)', () => {
  const APP: L4Target = { appId: 'app1', zoneId: 'z', hostname: 'udp.example.test', accountId: 'a', address: '127.0.0.1', port: 5353 };
  const REFLECTION = managedRuleId('l4', 2);

  function guard(): { g: L4Guard; started: Attack[]; ended: Attack[]; roll(): void } {
    const started: Attack[] = [];
    const ended: Attack[] = [];
    let ids = 0;
    let clock = 0;
    const detectors = signaturesOf('l4').map(
      (s) =>
        new Detector(s, { windowMs: WINDOW_MS, cooldownWindows: 2, scale: 1, now: () => clock, newId: () => String(++ids), onStart: (a) => started.push(a), onEnd: (a) => ended.push(a) }),
    );
    // No rulesets service: the default profile (reflection rule enabled, action block).
    const g = new L4Guard(detectors, () => undefined, () => 'example.test', createLogger('silent', new Writable({ write: (_c, _e, done) => done() })));
    const roll = () => {
      clock += WINDOW_MS;
      for (const d of detectors) d.roll();
      g.roll();
    };
    return { g, started, ended, roll };
  }

  /** Sends `count` datagrams; answers how many were dropped. */
  function datagrams(g: L4Guard, count: number, ip: string, port: number, app = APP): number {
    let dropped = 0;
    for (let i = 0; i < count; i++) if (g.datagram(app, ip, port, 512)) dropped++;
    return dropped;
  }

  it('names the documented ports', () => {
    expect([...AMPLIFICATION_PORTS].sort((a, b) => a - b)).toEqual([19, 53, 123, 389, 1900, 11211]);
  });

  it.each([...AMPLIFICATION_PORTS])('drops a reflector at source port %i from its 200th datagram of the window', (port) => {
    const { g, started } = guard();
    // 199/s is under the rule's per-source floor (200/s); the generic UDP rule needs 2000/s.
    expect(datagrams(g, 199, '192.0.2.53', port)).toBe(0);
    expect(started).toEqual([]);
    expect(datagrams(g, 101, '192.0.2.53', port)).toBe(101);
    expect(started).toHaveLength(1);
    expect(started[0]).toMatchObject({ mode: 'source', action: 'block', mitigated: 101 });
    expect(started[0].signature).toMatchObject({ ruleId: REFLECTION, attackType: 'UDP reflection', stream: 'udp-amplification' });
    expect(started[0].target).toMatchObject({ appId: 'app1', protocol: 'UDP', targetPort: 5353 });
  });

  it('lets the same rate from other source ports pass', () => {
    const { g, started } = guard();
    for (const port of [1024, 5353, 54, 52, 124, 33000]) expect(datagrams(g, 1000, `192.0.2.${port % 250}`, port)).toBe(0);
    expect(started).toEqual([]);
  });

  it("keeps serving a reflector's address from other ports, and counts IPv4-mapped addresses as IPv4", () => {
    const { g, started } = guard();
    expect(datagrams(g, 300, '::ffff:192.0.2.53', 123)).toBe(101);
    expect([...started[0].sources]).toEqual(['192.0.2.53']);
    expect(datagrams(g, 50, '192.0.2.53', 40000)).toBe(0);
    expect(datagrams(g, 5, '192.0.2.53', 123)).toBe(5);
  });

  it('catches many reflectors together at the application threshold and then drops every reflected datagram', () => {
    const { g, started } = guard();
    // 2000/s from 20 reflectors at port 53, 100 each: the application threshold (2000/s) with no
    // single source over 200/s. Reflection is dropped by its fingerprint: every reflector seen,
    // and every new one, however little it sends — other ports of the same addresses pass.
    let dropped = 0;
    for (let i = 0; i < 100; i++) for (let s = 0; s < 20; s++) dropped += datagrams(g, 1, `198.51.100.${s}`, 53);
    expect(started).toHaveLength(1);
    expect(started[0]).toMatchObject({ mode: 'target' });
    expect(started[0].signature.ruleId).toBe(REFLECTION);
    expect(started[0].sources.size).toBe(20);
    expect(dropped).toBe(1);
    expect(datagrams(g, 1, '198.51.100.1', 53)).toBe(1);
    expect(datagrams(g, 1, '198.51.100.200', 123)).toBe(1);
    expect(started[0].sources.size).toBe(21);
    expect(datagrams(g, 10, '198.51.100.1', 40000)).toBe(0);
  });

  it('lasts while many small reflectors go on after the one that was detected stopped', () => {
    const { g, started, ended, roll } = guard();
    expect(datagrams(g, 300, '192.0.2.53', 53)).toBe(101);
    expect(started[0]).toMatchObject({ mode: 'source' });
    roll();
    // Three windows of 2000/s from 20 reflectors at 100/s each: no single one over 200/s.
    for (let w = 0; w < 3; w++) {
      let dropped = 0;
      for (let i = 0; i < 100; i++) for (let s = 0; s < 20; s++) dropped += datagrams(g, 1, `198.51.100.${s}`, 1900);
      expect(dropped).toBe(2000);
      roll();
    }
    expect(ended).toEqual([]);
    roll();
    roll();
    expect(ended).toHaveLength(1);
    expect(started).toHaveLength(1);
    expect(datagrams(g, 10, '198.51.100.1', 1900)).toBe(0);
  });

  it('lasts while one large reflector goes on after many were detected together', () => {
    const { g, started, ended, roll } = guard();
    for (let i = 0; i < 100; i++) for (let s = 0; s < 20; s++) datagrams(g, 1, `198.51.100.${s}`, 11211);
    expect(started[0]).toMatchObject({ mode: 'target' });
    roll();
    // Three windows of 300/s from one reflector: over the per-source 200/s, under 2000/s in all.
    for (let w = 0; w < 3; w++) {
      expect(datagrams(g, 300, '192.0.2.99', 11211)).toBe(300);
      roll();
    }
    expect(ended).toEqual([]);
    roll();
    roll();
    expect(ended).toHaveLength(1);
  });

  it('spares the sources an override set to eoff while the fingerprint is dropped', () => {
    const reflection = SIGNATURES.find((s) => s.fingerprint)!;
    const r = rig(reflection);
    expect(r.send(300, { from: '192.0.2.53' })).toBe(101);
    expect(r.send(10, { from: '192.0.2.54' })).toBe(10);
    expect(r.send(10, { from: '192.0.2.55', sensitivity: 'eoff' })).toBe(0);
  });
});
