/**
 * Cron expressions (five fields: minute hour day-of-month month day-of-week, UTC) and a small
 * scheduler that fires entries when they fall due on the injectable clock. Fields accept `*`,
 * numbers, ranges `a-b`, steps `*\/n` and `a-b/n`, lists, month names (JAN–DEC) and day names
 * (SUN–SAT; 0 and 7 are Sunday). When both day fields are restricted, either may match (as in
 * classic cron). Missed firings while the process was down are not replayed: the next one is
 * computed from the current time.
 */

export interface Cron {
  source: string;
  minutes: Set<number>;
  hours: Set<number>;
  days: Set<number>;
  months: Set<number>;
  weekdays: Set<number>;
  dayRestricted: boolean;
  weekdayRestricted: boolean;
}

export class CronError extends Error {}

const MONTHS = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'];
const DAYS = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];

function field(
  text: string,
  min: number,
  max: number,
  names: string[] | undefined,
  base: number,
  what: string,
): Set<number> {
  const out = new Set<number>();
  const value = (s: string): number => {
    const upper = s.toUpperCase();
    if (names) {
      const i = names.indexOf(upper);
      if (i >= 0) return i + base;
    }
    if (!/^\d+$/.test(s)) throw new CronError(`${what}: ${JSON.stringify(s)} is not a number`);
    const n = Number(s);
    if (n < min || n > max) throw new CronError(`${what}: ${n} is outside ${min}-${max}`);
    return n;
  };
  for (const part of text.split(',')) {
    if (part === '') throw new CronError(`${what}: empty list item`);
    const [range, stepText] = part.split('/');
    const step = stepText === undefined ? 1 : Number(stepText);
    if (!Number.isInteger(step) || step < 1)
      throw new CronError(`${what}: invalid step ${JSON.stringify(stepText)}`);
    let lo: number;
    let hi: number;
    if (range === '*') {
      lo = min;
      hi = max;
    } else if (range.includes('-')) {
      const [a, b] = range.split('-');
      lo = value(a);
      hi = value(b);
      if (lo > hi) throw new CronError(`${what}: range ${range} is reversed`);
    } else {
      lo = value(range);
      hi = stepText === undefined ? lo : max;
    }
    for (let v = lo; v <= hi; v += step) out.add(v);
  }
  return out;
}

export function parseCron(source: string): Cron {
  const parts = source.trim().split(/\s+/);
  if (parts.length !== 5)
    throw new CronError(
      `cron ${JSON.stringify(source)}: expected 5 fields (minute hour day month weekday)`,
    );
  const weekdays = field(parts[4], 0, 7, DAYS, 0, 'day of week');
  if (weekdays.has(7)) {
    weekdays.delete(7);
    weekdays.add(0);
  }
  return {
    source: source.trim(),
    minutes: field(parts[0], 0, 59, undefined, 0, 'minute'),
    hours: field(parts[1], 0, 23, undefined, 0, 'hour'),
    days: field(parts[2], 1, 31, undefined, 0, 'day of month'),
    months: field(parts[3], 1, 12, MONTHS, 1, 'month'),
    weekdays,
    dayRestricted: parts[2] !== '*',
    weekdayRestricted: parts[4] !== '*',
  };
}

function dayMatches(c: Cron, d: Date): boolean {
  const dom = c.days.has(d.getUTCDate());
  const dow = c.weekdays.has(d.getUTCDay());
  if (c.dayRestricted && c.weekdayRestricted) return dom || dow;
  if (c.dayRestricted) return dom;
  if (c.weekdayRestricted) return dow;
  return true;
}

/** The first firing strictly after `after` (ms), or undefined within the next 5 years. */
export function nextFiring(c: Cron, after: number): number | undefined {
  const d = new Date(Math.floor(after / 60_000) * 60_000 + 60_000);
  const limit = after + 5 * 366 * 86_400_000;
  while (d.getTime() <= limit) {
    if (!c.months.has(d.getUTCMonth() + 1)) {
      d.setUTCMonth(d.getUTCMonth() + 1, 1);
      d.setUTCHours(0, 0, 0, 0);
      continue;
    }
    if (!dayMatches(c, d)) {
      d.setUTCDate(d.getUTCDate() + 1);
      d.setUTCHours(0, 0, 0, 0);
      continue;
    }
    if (!c.hours.has(d.getUTCHours())) {
      d.setUTCHours(d.getUTCHours() + 1, 0, 0, 0);
      continue;
    }
    if (!c.minutes.has(d.getUTCMinutes())) {
      d.setUTCMinutes(d.getUTCMinutes() + 1, 0, 0);
      continue;
    }
    return d.getTime();
  }
  return undefined;
}

export interface CronEntry {
  cron: Cron;
  fire(scheduledTime: number): Promise<void>;
}

/**
 * Fires entries at their next time on `now()`. Entries are replaced wholesale per owner key
 * (a script's or a workflow's schedules). Polls at most every `pollMs` so a clock moved by a test
 * is noticed.
 */
export class CronScheduler {
  private readonly owners = new Map<string, { entry: CronEntry; next: number | undefined }[]>();
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private stopped = false;

  constructor(
    private readonly now: () => number,
    private readonly pollMs: number,
    private readonly onError: (err: unknown, cron: string) => void,
  ) {}

  set(owner: string, entries: CronEntry[]): void {
    if (entries.length === 0) {
      this.owners.delete(owner);
      return;
    }
    const now = this.now();
    this.owners.set(
      owner,
      entries.map((entry) => ({ entry, next: nextFiring(entry.cron, now) })),
    );
    this.arm();
  }

  nextOf(owner: string): (number | undefined)[] {
    return (this.owners.get(owner) ?? []).map((e) => e.next);
  }

  start(): void {
    this.stopped = false;
    this.arm();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(): void {
    if (this.stopped || this.timer || this.owners.size === 0) return;
    let soonest = Infinity;
    for (const list of this.owners.values())
      for (const e of list) if (e.next !== undefined) soonest = Math.min(soonest, e.next);
    const wait = Math.max(0, Math.min(this.pollMs, soonest - this.now()));
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.tick();
    }, wait);
    this.timer.unref?.();
  }

  private async tick(): Promise<void> {
    if (this.running || this.stopped) return;
    this.running = true;
    try {
      const now = this.now();
      const due: { entry: CronEntry; at: number }[] = [];
      for (const list of this.owners.values()) {
        for (const e of list) {
          if (e.next !== undefined && e.next <= now) {
            due.push({ entry: e.entry, at: e.next });
            e.next = nextFiring(e.entry.cron, now);
          }
        }
      }
      await Promise.all(
        due.map(({ entry, at }) =>
          entry.fire(at).catch((err: unknown) => this.onError(err, entry.cron.source)),
        ),
      );
    } finally {
      this.running = false;
      this.arm();
    }
  }
}
