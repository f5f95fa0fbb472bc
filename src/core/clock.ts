/** Injectable time source: tests pass a fixed or steppable clock; production uses the wall clock. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** A clock tests can move by hand. */
export function manualClock(start = new Date('2026-01-01T00:00:00.000Z')): Clock & {
  advance(ms: number): void;
  set(at: Date): void;
} {
  let t = start.getTime();
  return {
    now: () => new Date(t),
    advance: (ms) => {
      t += ms;
    },
    set: (at) => {
      t = at.getTime();
    },
  };
}

/** RFC 3339 with fractional seconds and `Z`, as the platform writes timestamps. */
export function iso(d: Date): string {
  return d.toISOString();
}
