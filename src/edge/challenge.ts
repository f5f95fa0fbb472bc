/**
 * Challenges (`challenge`, `js_challenge`, `managed_challenge` actions): the visitor gets an
 * interstitial page whose script solves a small proof of work and posts it to
 * `/cdn-cgi/challenge-platform/verify`; a correct answer earns a `cf_clearance` cookie (an HMAC of
 * the client address and expiry) and a redirect back. Requests that carry a valid clearance pass
 * challenge rules. Clients without JavaScript stay at the interstitial, as on the platform.
 */
import { createHmac, randomBytes, createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';

export const VERIFY_PATH = '/cdn-cgi/challenge-platform/verify';
const CLEARANCE_COOKIE = 'cf_clearance';
/** Leading zero hex digits the proof of work needs: about 4,096 hashes in a browser. */
const DIFFICULTY = 3;
const CLEARANCE_SECONDS = 30 * 60;

export class Challenger {
  private readonly secret = randomBytes(32);

  constructor(private readonly now: () => number) {}

  private sign(text: string): string {
    return createHmac('sha256', this.secret).update(text).digest('base64url');
  }

  /** True if the request carries a clearance issued to this client address that has not expired. */
  hasClearance(req: IncomingMessage, clientIp: string): boolean {
    const cookie = req.headers.cookie;
    if (!cookie) return false;
    const m = new RegExp(`(?:^|;\\s*)${CLEARANCE_COOKIE}=([^;]+)`).exec(cookie);
    if (!m) return false;
    const [expiry, mac] = m[1].split('.');
    if (!expiry || !mac || Number(expiry) * 1000 < this.now()) return false;
    const want = Buffer.from(this.sign(`${clientIp}|${expiry}`));
    const got = Buffer.from(mac);
    return want.length === got.length && timingSafeEqual(want, got);
  }

  /** Answers the interstitial page (403, as the platform does for challenges). */
  sendInterstitial(res: ServerResponse, rayId: string, host: string, returnTo: string): void {
    const issued = Math.floor(this.now() / 1000);
    const nonce = randomBytes(12).toString('hex');
    const token = `${issued}.${nonce}.${this.sign(`${issued}|${nonce}`)}`;
    const body = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Just a moment...</title></head>
<body>
<h1>${host}</h1>
<p>Checking your browser before accessing the site. Ray ID: <code>${rayId}</code></p>
<noscript><p>Enable JavaScript and cookies to continue.</p></noscript>
<script>
(async () => {
  const token = ${JSON.stringify(token)};
  const enc = new TextEncoder();
  for (let n = 0; n < 10000000; n++) {
    const d = new Uint8Array(await crypto.subtle.digest('SHA-256', enc.encode(token + ':' + n)));
    const hex = Array.from(d.slice(0, 2), (b) => b.toString(16).padStart(2, '0')).join('');
    if (hex.startsWith(${JSON.stringify('0'.repeat(DIFFICULTY))})) {
      const r = await fetch(${JSON.stringify(VERIFY_PATH)}, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'token=' + encodeURIComponent(token) + '&answer=' + n, credentials: 'same-origin' });
      if (r.ok) location.replace(${JSON.stringify(returnTo)});
      return;
    }
  }
})();
</script>
</body></html>
`;
    res.writeHead(403, {
      'content-type': 'text/html; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      'cf-ray': `${rayId}-OUT`,
      'cf-mitigated': 'challenge',
      'cache-control': 'private, max-age=0, no-store, no-cache, must-revalidate',
    });
    res.end(body);
  }

  /** Checks a solved challenge; returns the Set-Cookie value for a good answer. */
  verify(form: URLSearchParams, clientIp: string): string | undefined {
    const token = form.get('token') ?? '';
    const answer = form.get('answer') ?? '';
    const [issued, nonce, mac] = token.split('.');
    if (!issued || !nonce || !mac || !/^\d{1,9}$/.test(answer)) return undefined;
    const want = Buffer.from(this.sign(`${issued}|${nonce}`));
    if (want.length !== mac.length || !timingSafeEqual(want, Buffer.from(mac))) return undefined;
    // A page older than ten minutes must be reloaded.
    if (Number(issued) * 1000 < this.now() - 600_000) return undefined;
    const digest = createHash('sha256').update(`${token}:${answer}`).digest('hex');
    if (!digest.startsWith('0'.repeat(DIFFICULTY))) return undefined;
    const expiry = Math.floor(this.now() / 1000) + CLEARANCE_SECONDS;
    return `${CLEARANCE_COOKIE}=${expiry}.${this.sign(`${clientIp}|${expiry}`)}; Path=/; Max-Age=${CLEARANCE_SECONDS}; HttpOnly; SameSite=Lax`;
  }
}

/** Solves a challenge token the way the interstitial's script does (tests, non-browser clients). */
export function solveChallenge(token: string): number {
  for (let n = 0; n < 10_000_000; n++) {
    if (
      createHash('sha256').update(`${token}:${n}`).digest('hex').startsWith('0'.repeat(DIFFICULTY))
    )
      return n;
  }
  throw new Error('no solution found');
}
