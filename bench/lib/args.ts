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
