/**
 * The sensitivity levels scale the thresholds as documented (default ×1, medium ×2, low ×4, eoff
 * never). Counts are sent within one 10-second window, so the check sees them against one
 * window's worth of threshold traffic.
 */
import { describe, expect, it } from 'vitest';
import { Detector, type Attack, type TargetRef } from '../../../src/areas/ddos/detector.ts';
import { SIGNATURES, type Sensitivity } from '../../../src/areas/ddos/signatures.ts';

const REF: TargetRef = { zoneId: 'z', zoneName: 'example.test', accountId: 'a', hostname: 'www.example.test' };
// The single-source HTTP rule: 500 requests/s per source at sensitivity default.
const SOURCE = SIGNATURES.find((s) => s.stream === 'http' && Number.isFinite(s.sourceFloor))!;
const WINDOW_S = 10;

function detector(): { d: Detector; started: Attack[] } {
  const started: Attack[] = [];
  let n = 0;
  const d = new Detector(SOURCE, { windowMs: WINDOW_S * 1000, cooldownWindows: 1, scale: 1, newId: () => String(++n), onStart: (a) => started.push(a), onEnd: () => undefined });
  return { d, started };
}

/** Sends `count` hits from one source; answers whether an attack started. */
function send(count: number, sensitivity: Sensitivity, d = detector()): boolean {
  for (let i = 0; i < count; i++) d.d.hit('www', () => REF, '192.0.2.1', sensitivity, 'block', undefined);
  return d.started.length > 0;
}

describe('sensitivity levels', () => {
  it('scale the per-source threshold ×1, ×2, ×4, and eoff never fires', () => {
    const floor = SOURCE.sourceFloor * WINDOW_S;
    expect(send(floor - 1, 'default')).toBe(false);
    expect(send(floor, 'default')).toBe(true);
    expect(send(2 * floor - 1, 'medium')).toBe(false);
    expect(send(2 * floor, 'medium')).toBe(true);
    expect(send(4 * floor - 1, 'low')).toBe(false);
    expect(send(4 * floor, 'low')).toBe(true);
    expect(send(40 * floor, 'eoff')).toBe(false);
  });
});
