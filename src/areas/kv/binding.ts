/**
 * The Node end of a `kv_namespace` binding. The script's binding object (generated in the
 * workers wrapper) calls it over a service binding with a small protocol:
 *
 * - `GET /value?key=` → 200 with the bytes, `x-kv-metadata` (URI-encoded JSON) and
 *   `x-kv-expiration`; 404 when the key is absent or expired;
 * - `PUT /value?key=&expiration=&expiration_ttl=` with the bytes and `x-kv-metadata`;
 * - `DELETE /value?key=`;
 * - `GET /keys?prefix=&cursor=&limit=` → `{keys, list_complete, cursor?}`.
 *
 * Errors (bad key, oversize value, bad expiration) answer 400 with the message, which the binding
 * throws as an `Error` in the script.
 */
import type { NodeBinding } from '../../runtime/index.ts';
import { KvInputError, MAX_VALUE_BYTES, expirationOf, checkKey, type KvStore } from './store.ts';

function fail(status: number, message: string): Response {
  return new Response(message, {
    status,
    headers: { 'content-type': 'text/plain; charset=utf-8' },
  });
}

export function kvBinding(store: KvStore, namespaceId: string): NodeBinding {
  return {
    type: 'service',
    async fetch(req) {
      const url = new URL(req.url);
      const key = url.searchParams.get('key') ?? '';
      try {
        if (url.pathname === '/keys' && req.method === 'GET') {
          const limitText = url.searchParams.get('limit');
          const limit = limitText ? Number(limitText) : 1000;
          if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
            throw new KvInputError('list: limit must be an integer between 1 and 1000');
          const out = await store.list(namespaceId, {
            prefix: url.searchParams.get('prefix') ?? undefined,
            cursor: url.searchParams.get('cursor') || undefined,
            limit,
          });
          return Response.json(out);
        }
        if (url.pathname !== '/value')
          return fail(404, `unknown KV operation ${req.method} ${url.pathname}`);
        checkKey(key);
        if (req.method === 'GET') {
          const entry = await store.get(namespaceId, key);
          if (!entry) return new Response(null, { status: 404 });
          const headers: Record<string, string> = { 'content-type': 'application/octet-stream' };
          if (entry.metadata !== null)
            headers['x-kv-metadata'] = encodeURIComponent(JSON.stringify(entry.metadata));
          if (entry.expiration !== null) headers['x-kv-expiration'] = String(entry.expiration);
          return new Response(entry.value as Uint8Array<ArrayBuffer>, { headers });
        }
        if (req.method === 'PUT') {
          const value = new Uint8Array(await req.arrayBuffer());
          if (value.byteLength > MAX_VALUE_BYTES)
            throw new KvInputError(
              `put: the value is ${value.byteLength} bytes; the limit is ${MAX_VALUE_BYTES} bytes`,
            );
          const metaText = req.headers.get('x-kv-metadata');
          const metadata = metaText
            ? (JSON.parse(decodeURIComponent(metaText)) as unknown)
            : undefined;
          const expiration = expirationOf(
            store.nowSeconds(),
            url.searchParams.get('expiration') ?? undefined,
            url.searchParams.get('expiration_ttl') ?? undefined,
          );
          await store.put(namespaceId, [{ key, value, metadata, expiration }]);
          return new Response(null, { status: 204 });
        }
        if (req.method === 'DELETE') {
          await store.delete(namespaceId, [key]);
          return new Response(null, { status: 204 });
        }
        return fail(405, `unknown KV operation ${req.method}`);
      } catch (err) {
        if (err instanceof KvInputError) return fail(400, err.message);
        throw err;
      }
    },
  };
}
