/** Command-line options shared by the benchmarks. */

/** A bad option: the benchmark prints the message and its usage, and exits 2. */
export class UsageError extends Error {}

/** The integer value of option `name`, within [min, max]. */
export function intOption(name: string, value: string | undefined, min: number, max: number): number {
  const n = Number(value);
  if (value === undefined || !Number.isInteger(n) || n < min || n > max) {
    throw new UsageError(`${name} needs an integer from ${min} to ${max}`);
  }
  return n;
}

/**
 * The start of every benchmark's `main`: parses `argv`; `--help` prints the usage, a bad option
 * prints the message and the usage. Returns the options, or the exit code to return at once.
 */
export function parseOrExit<O extends object>(argv: string[], parse: (argv: string[]) => O | 'help', usage: string): O | number {
  let o: O | 'help';
  try {
    o = parse(argv);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n\n${usage}`);
    return 2;
  }
  if (o === 'help') {
    process.stdout.write(usage);
    return 0;
  }
  return o;
}
