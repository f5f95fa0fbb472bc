/** Request contexts shared by the rules-language tests. */

import { createHmac } from 'node:crypto';
import { buildRequestContext, type RequestInput } from '../../../src/edge/rules/index.ts';

export const HMAC_KEY = 'mysecretkey';
export const NOW_SEC = 1_700_000_000;

/** Builds a MessageMAC `<message><separator><timestamp>-<url-encoded base64 mac>`. */
export function hmacToken(
  message: string,
  separator: string,
  issued: number,
  urlSafe = false,
): string {
  const mac = createHmac('sha256', HMAC_KEY).update(`${message}${issued}`).digest();
  const encoded = urlSafe ? mac.toString('base64url') : encodeURIComponent(mac.toString('base64'));
  return `${message}${separator}${issued}-${encoded}`;
}

export const BODY_JSON = JSON.stringify({
  company: 'cloudflare',
  product: 'rulesets',
  version: 2,
  ratio: 0.5,
  network: { name: 'cloudflare', id: 356 },
  networks: ['other_company', 'cloudflare'],
  network_ids: [123, 456],
  records: [{ product_id: 123 }, { product_id: 456 }],
});

/** A browser-like HTTPS GET over HTTP/2 with JSON body, cookies and geolocation. */
export const inputA: RequestInput = {
  method: 'GET',
  url: 'https://www.example.com/api/v1/users/42?filter=waf&filter=botm&filter=cdn&q=a%20b&empty=',
  httpVersion: '2',
  headers: [
    ['Host', 'www.example.com'],
    ['User-Agent', 'Mozilla/5.0 (X11; Linux x86_64) Firefox/115.0'],
    ['Accept', 'application/json'],
    ['Accept-Language', 'fr-CH, fr;q=0.9, en;q=0.8, de;q=0.7'],
    ['Content-Type', 'application/json'],
    ['Cookie', 'session=abc123; theme=dark'],
    ['Referer', 'https://ref.example.org/page'],
    ['X-Forwarded-For', '198.51.100.1, 10.0.0.1'],
    ['X-Categories', 'groceries,electronics,diy,auto'],
    ['X-Empty-Cats', 'groceries,,electronics'],
    ['client_id', 'MTIzYWJj'],
    ['X-Token', `/download/cat.jpg?verify=${NOW_SEC - 10}-placeholder`],
    ['X-Multi', 'one'],
    ['X-Multi', 'two'],
  ],
  clientIp: '203.0.113.7',
  ssl: true,
  body: BODY_JSON,
  timestamp: NOW_SEC * 1000 + 250,
  geo: { country: 'PT', continent: 'EU', asnum: 13335, city: 'Lisbon', is_in_european_union: true },
  cf: {
    threat_score: 5,
    bot_management: {
      score: 12,
      verified_bot: false,
      static_resource: false,
      ja3_hash: 'e7d705a3286e19ea42f587b344ee6865',
    },
    client: { bot: false },
    tls_client_auth: {
      cert_verified: true,
      cert_presented: true,
      cert_fingerprint_sha256: 'ab12cd34',
    },
    api_gateway: {
      auth_id_present: true,
      request_violates_schema: false,
      fallthrough_detected: true,
    },
    zone: { name: 'example.com' },
    ray_id: '8a1b2c3d4e5f6789',
    colo: { name: 'LIS' },
    sequence: { msec_since_op: { a1b2c3d4: 1500 } },
  },
  fields: {
    'http.request.jwt.payload': { cfg1: ['{"sub":"user-1","role":"admin"}'] },
  },
};

/** A plain-HTTP POST from an IPv6 client with a form body and a URL that needs normalising. */
export const inputB: RequestInput = {
  method: 'POST',
  url: '/a/./b/../%7Euser//docs/Index.HTML?x=1',
  headers: {
    Host: 'Shop.Example.NET:8080',
    'content-type': 'application/x-www-form-urlencoded',
    'x-path': '/Apps/calendar',
    'x-full': 'https://apps.example.com/calendar/admin?expand=true',
    'x-b64': 'aGVsbG8gd29ybGQ=',
  },
  body: 'name=John+Doe&tags=a&tags=b&comment=%3Cscript%3E',
  clientIp: '2001:db8::42',
  ssl: false,
  edge: {
    bot_management: { score: 90, verified_bot: true },
    'api_gateway.edge-risk-bola-enumeration': true,
    tls_client_auth: { cert_verified: false },
  },
};

export const contexts = {
  A: () => buildRequestContext(inputA),
  B: () => buildRequestContext(inputB),
  EMPTY: () => buildRequestContext({}),
};

export type ContextName = keyof typeof contexts;
