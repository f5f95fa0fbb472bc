/**
 * Cron expressions (five fields: minute hour day-of-month month day-of-week, UTC) read by the
 * `cron-parser` library, and a small scheduler that fires entries when they fall due on the
 * injectable clock. Fields accept `*` (and `?`), numbers, ranges `a-b`, steps `*\/n` and `a-b/n`,
 * lists, month names (JAN–DEC) and day names (SUN–SAT; 0 and 7 are Sunday), `L` (the last day of
 * the month; `5L` the last Friday) and `#` (`1#2`: the second Monday). When both day fields are
 * restricted, either may match (as in classic cron). Refused: six-field expressions (seconds),
 * `@daily`-style names and the library's `H` (random value), none of which the platform takes, and
 * dates that never occur (`0 0 30 2 *`). Missed firings while the process was down are not
 * replayed: the next one is computed from the current time.
 */
import { CronExpressionParser } from 'cron-parser';

export interface Cron {
  /** The expression as given, trimmed; the scheduler recomputes firings from it. */
  source: string;
}

export class CronError extends Error {}

/** How far ahead `nextFiring` looks before it calls an expression spent. */
const HORIZON_MS = 5 * 366 * 86_400_000;

function parseAt(source: string, currentDate: number, endDate?: number) {
  return CronExpressionParser.parse(source, {
    tz: 'UTC',
    currentDate: new Date(currentDate),
    ...(endDate === undefined ? {} : { endDate: new Date(endDate) }),
  });
}

const FIELD_NAMES = ['minute', 'hour', 'day of month', 'month', 'day of week'];

function libraryMessage(err: unknown): string {
  const message = (err as Error).message;
  const range = /got value (\S+) expected range (\d+-\d+)/.exec(message);
  return range ? `${range[1]} is outside ${range[2]}` : message;
}

export function parseCron(source: string): Cron {
  const text = source.trim();
  const fields = text.split(/\s+/);
  if (fields.length !== 5)
    throw new CronError(
      `cron ${JSON.stringify(source)}: expected 5 fields (minute hour day month weekday)`,
    );
  if (fields.some((f) => /h/i.test(f.replace(/thu/gi, ''))))
    throw new CronError(`cron ${JSON.stringify(source)}: H (a random value) is not supported`);
  // Each field alone first, so an error names its field; then the whole, for dates that never come.
  FIELD_NAMES.forEach((what, k) => {
    const alone = fields.map((f, i) => (i === k ? f : '*')).join(' ');
    try {
      parseAt(alone, 0);
    } catch (err) {
      throw new CronError(`${what}: ${libraryMessage(err)}`);
    }
  });
  try {
    parseAt(text, 0);
  } catch (err) {
    throw new CronError(`cron ${JSON.stringify(source)}: ${libraryMessage(err)}`);
  }
  return { source: text };
}

/** The first firing strictly after `after` (ms), or undefined within the next 5 years. */
export function nextFiring(c: Cron, after: number): number | undefined {
  try {
    const expression = parseAt(c.source, after, after + HORIZON_MS);
    return expression.next().getTime();
  } catch {
    // "Out of the time span range": nothing within the horizon.
    return undefined;
  }
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
