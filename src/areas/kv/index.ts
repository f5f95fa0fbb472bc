/**
 * @module kv — key-value namespaces (spec 002 names `kv_namespace` bindings with `namespace_id`;
 * the rest follows the platform's REST API and the official client's `kv.namespaces.*`).
 *
 * Routes (`/accounts/{account_id}/storage/kv/namespaces`): list (page/per_page, order id|title,
 * direction), create `{title}` (unique per account, 409), get, rename (`PUT {title}`), delete (with
 * its keys); `…/{id}/keys?prefix&cursor&limit` (byte order, limit 10–1000, opaque cursor in
 * `result_info.cursor`, empty when complete); `…/{id}/values/{key}` GET (raw bytes), PUT (raw body,
 * or multipart `value` + `metadata` parts; `?expiration=` epoch seconds or `?expiration_ttl=`
 * seconds, at least 60), DELETE; `…/{id}/metadata/{key}`; bulk write `PUT …/{id}/bulk`
 * (`[{key, value, base64?, expiration?, expiration_ttl?, metadata?}]`), bulk delete
 * `POST …/{id}/bulk/delete` (and the older `DELETE …/{id}/bulk`), bulk read `POST …/{id}/bulk/get`.
 *
 * Storage: the SQL database (both backends), table `kv_values`; writes are visible to every
 * reader at once (stronger than the platform's eventual consistency). Scripts reach a namespace
 * through a `kv_namespace` binding served by `kvBinding` (service `kv`, used by the workers area).
 *
 * Permissions: Workers KV Storage Read / Write (account).
 *
 * LIMITATIONS: values through the API are bounded by the server's body limit (`--body-limit`,
 * default 10 MiB) below the platform's 25 MiB; `cacheTtl` is accepted and ignored; expired
 * entries are purged once a minute (they are invisible from their expiration on).
 */
import { defineArea } from '../../core/area.ts';
import type { NodeBinding } from '../../runtime/index.ts';
import { kvBinding } from './binding.ts';
import { KV_PERMISSION, mountKvRoutes } from './routes.ts';
import { KvStore, namespaces } from './store.ts';

export const KV_SERVICE = 'kv';

/** What other areas get from `ctx.services.optional<KvService>(KV_SERVICE)`. */
export interface KvService {
  /** Whether the namespace exists in the account. */
  exists(accountId: string, namespaceId: string): Promise<boolean>;
  /** The Node end of a script's binding to the namespace. */
  binding(namespaceId: string): NodeBinding;
}

const PURGE_MS = 60_000;

export default defineArea({
  name: 'kv',
  mount(ctx) {
    ctx.permissions.define({ key: KV_PERMISSION, name: 'Workers KV Storage', scope: 'account' });
    const store = new KvStore(ctx.database, ctx.clock);
    const log = ctx.log.child({ area: 'kv' });
    mountKvRoutes(ctx, store);
    ctx.services.provide<KvService>(KV_SERVICE, {
      exists: async (accountId, namespaceId) =>
        !!(await namespaces.get(ctx.database.db, accountId, namespaceId)),
      binding: (namespaceId) => kvBinding(store, namespaceId),
    });
    let timer: NodeJS.Timeout | undefined;
    return {
      async start() {
        timer = setInterval(() => {
          store
            .purgeExpired()
            .catch((err: unknown) => log.warn({ err }, 'could not purge expired keys'));
        }, PURGE_MS);
        timer.unref();
      },
      async stop() {
        clearInterval(timer);
      },
    };
  },
});
