/** The official `cloudflare` client pointed at a test server (no retries: fail fast). */
import Cloudflare from 'cloudflare';
import type { TestServer } from './server.ts';

export function sdk(t: TestServer, auth: { apiToken?: string; apiEmail?: string; apiKey?: string } = {}): Cloudflare {
  const creds = auth.apiEmail ? { apiEmail: auth.apiEmail, apiKey: auth.apiKey, apiToken: null } : { apiToken: auth.apiToken ?? t.token };
  return new Cloudflare({ baseURL: t.api, maxRetries: 0, ...creds });
}

export { Cloudflare };
