/** Helpers shared by the pipelines tests. */
import { readFileSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

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

/**
 * icebird reads tables through fetch; the table's locations are file:// URLs of this machine
 * (what local engines open), so for the duration of a read, file URLs are answered from disk,
 * with the Range requests the Parquet reader makes. Everything else goes to the real fetch.
 */
export async function withFileFetch<T>(fn: () => Promise<T>): Promise<T> {
  const real = globalThis.fetch;
  globalThis.fetch = (async (input: string | URL | Request, init?: RequestInit) => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    if (!url.startsWith('file:')) return real(input, init);
    const path = fileURLToPath(url);
    let bytes: Buffer;
    try {
      bytes = readFileSync(path);
    } catch {
      return new Response('not found', { status: 404 });
    }
    if (init?.method === 'HEAD') return new Response(null, { status: 200, headers: { 'content-length': String(statSync(path).size) } });
    const range = new Headers(init?.headers).get('range');
    const m = range && /^bytes=(\d+)-(\d*)$/.exec(range);
    if (m) {
      const end = m[2] ? Number(m[2]) + 1 : bytes.length;
      return new Response(new Uint8Array(bytes.subarray(Number(m[1]), end)), { status: 206 });
    }
    return new Response(new Uint8Array(bytes), { status: 200 });
  }) as typeof fetch;
  try {
    return await fn();
  } finally {
    globalThis.fetch = real;
  }
}
