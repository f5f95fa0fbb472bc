/** What the tunnels area's route modules share: the store, live connections, views and helpers. */
import type { Context } from 'hono';
import type { IncomingMessage } from 'node:http';
import type { AreaContext } from '../../core/area.ts';
import { accounts, GLOBAL_SCOPE } from '../../core/accounts.ts';
import { apiError } from '../../core/errors.ts';
import type { Doc } from '../../core/storage/collection.ts';
import type { Db, Executor } from '../../core/storage/db.ts';
import { lockScope } from '../../core/storage/locks.ts';
import { encodeToken } from '../../connector/token.ts';
import type { TunnelEndpoint } from './endpoint.ts';
import type { ConnectionRegistry, ConnectionView, TunnelStatus } from './registry.ts';
import type { StoredConfig, StoredTunnel } from './store.ts';

export interface TunnelView {
  id: string;
  account_tag: string;
  created_at: string;
  deleted_at: string | null;
  name: string;
  connections: ConnectionView[];
  conns_active_at: string | null;
  conns_inactive_at: string | null;
  tun_type: 'cfd_tunnel';
  status: TunnelStatus;
  metadata: Record<string, unknown>;
  remote_config: boolean;
  config_src: 'local' | 'cloudflare';
  token?: string;
}

export class TunnelsService {
  readonly db: Db;

  constructor(
    readonly ctx: AreaContext,
    readonly registry: ConnectionRegistry,
    readonly endpoint: TunnelEndpoint,
  ) {
    this.db = ctx.database.db;
  }

  /**
   * Where connectors reach this server (the token's `e`): `--tunnel-endpoint` if set, else the API
   * address this request came in on.
   */
  endpointUrl(c: Context): string {
    const { config } = this.ctx;
    if (config.tunnelEndpoint) return config.tunnelEndpoint.replace(/\/+$/, '');
    const socket = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming?.socket;
    const wildcard = ['', '0.0.0.0', '::', '[::]'].includes(config.host);
    let host = wildcard && socket?.localAddress ? socket.localAddress : config.host;
    if (host.startsWith('::ffff:')) host = host.slice(7);
    const port = socket?.localPort ?? config.apiPort;
    return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  }

  token(t: StoredTunnel, endpoint: string): string {
    return encodeToken({ a: t.account_tag, t: t.id, s: t.secret, e: endpoint });
  }

  view(doc: Doc<StoredTunnel> | StoredTunnel, endpoint?: string): TunnelView {
    const t = 'body' in doc ? doc.body : doc;
    const live = !t.deleted_at;
    const view: TunnelView = {
      id: t.id,
      account_tag: t.account_tag,
      created_at: t.created_at,
      deleted_at: t.deleted_at,
      name: t.name,
      connections: live ? this.registry.connections(t.id) : [],
      conns_active_at: t.conns_active_at,
      conns_inactive_at: t.conns_inactive_at,
      tun_type: 'cfd_tunnel',
      status: live
        ? this.registry.status(t.id, t.conns_active_at !== null)
        : t.conns_active_at
          ? 'down'
          : 'inactive',
      metadata: t.metadata,
      remote_config: t.config_src === 'cloudflare',
      config_src: t.config_src,
    };
    if (live && t.config_src === 'cloudflare' && endpoint) view.token = this.token(t, endpoint);
    return view;
  }

  configView(t: StoredTunnel, stored: StoredConfig | undefined) {
    if (stored)
      return {
        account_id: stored.account_id,
        tunnel_id: stored.tunnel_id,
        version: stored.version,
        config: stored.config,
        source: stored.source,
        created_at: stored.created_at,
      };
    return {
      account_id: t.account_tag,
      tunnel_id: t.id,
      version: 0,
      config: {},
      source: t.config_src,
      created_at: t.created_at,
    };
  }

  async requireAccount(accountId: string): Promise<void> {
    if (!(await accounts.get(this.db, GLOBAL_SCOPE, accountId)))
      throw apiError('account_not_found', accountId);
  }

  /** One transaction with the account's tunnel data locked against concurrent writers. */
  write<T>(accountId: string, fn: (tx: Executor) => Promise<T>): Promise<T> {
    return this.db.transaction().execute(async (tx) => {
      await lockScope(tx, this.ctx.database.dialect, `tunnels:${accountId}`);
      return fn(tx);
    });
  }
}
