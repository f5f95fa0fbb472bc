/** Helpers shared by the pipelines tests. */

/** Polls `fn` until it gives a value (not undefined or false); throws naming `what` after `ms`. */
export async function until<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 30));
  }
}
