/** Helpers shared by the alerting tests. */

/** Polls `get` every 50 ms until it gives a truthy value; throws naming `what` after `ms`. */
export async function waitFor<T>(what: string, get: () => Promise<T | undefined> | T | undefined, ms = 8000): Promise<T> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const v = await get();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}
