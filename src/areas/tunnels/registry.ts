/**
 * Live connector connections of one server, in memory: which HTTP/2 sessions serve which tunnel,
 * round-robin choice among them, connections lost recently (`is_pending_reconnect`), and the
 * tunnel status that follows from them in real time:
 * - `inactive`: never connected; `down`: connected once, no live connection now;
 * - `degraded`: live, but a connector lost one of its connections and has not re-established it;
 * - `healthy`: otherwise.
 * A connection counts once it has received the tunnel's configuration (or immediately when the
 * tunnel has none).
 */
import type { ClientHttp2Session } from 'node:http2';
import type { Socket } from 'node:net';

export interface LiveConnection {
  id: string;
  tunnelId: string;
  accountId: string;
  clientId: string;
  clientVersion: string;
  arch: string;
  features: string[];
  connIndex: number;
  haConnections: number;
  originIp: string;
  openedAt: string;
  coloName: string;
  session: ClientHttp2Session;
  socket: Socket;
  ready: boolean;
  configVersion: number;
  /** Set once the connection left the registry. */
  gone: boolean;
}

interface Lost {
  id: string;
  clientId: string;
  clientVersion: string;
  connIndex: number;
  originIp: string;
  openedAt: string;
  coloName: string;
  lostAt: number;
}

interface TunnelState {
  live: Map<string, LiveConnection>;
  lost: Map<string, Lost>;
  rr: number;
  /** A connection of this tunnel was ready at some point since the server started. */
  everReady: boolean;
}

export interface ConnectionView {
  id: string;
  uuid: string;
  colo_name: string;
  is_pending_reconnect: boolean;
  origin_ip: string;
  opened_at: string;
  client_id: string;
  client_version: string;
}

export interface ClientView {
  id: string;
  arch: string;
  config_version: number;
  conns: ConnectionView[];
  features: string[];
  run_at: string;
  version: string;
}

export type TunnelStatus = 'inactive' | 'degraded' | 'healthy' | 'down';

export interface RegistryHooks {
  /** The tunnel went from no ready connection to one (`active`) or back (`inactive`). */
  transition(tunnelId: string, accountId: string, to: 'active' | 'inactive'): void;
  now(): number;
  /** How long a lost connection is listed as pending reconnect. */
  pendingMs: number;
}

export class ConnectionRegistry {
  private readonly tunnels = new Map<string, TunnelState>();

  constructor(private readonly hooks: RegistryHooks) {}

  private state(tunnelId: string): TunnelState {
    let s = this.tunnels.get(tunnelId);
    if (!s) {
      s = { live: new Map(), lost: new Map(), rr: 0, everReady: false };
      this.tunnels.set(tunnelId, s);
    }
    return s;
  }

  private readyCount(s: TunnelState): number {
    let n = 0;
    for (const c of s.live.values()) if (c.ready) n++;
    return n;
  }

  private prune(s: TunnelState): void {
    const limit = this.hooks.now() - this.hooks.pendingMs;
    for (const [id, l] of s.lost) if (l.lostAt < limit) s.lost.delete(id);
  }

  add(conn: LiveConnection): void {
    const s = this.state(conn.tunnelId);
    s.live.set(conn.id, conn);
    // The connector re-established this slot: the lost one is no longer pending.
    for (const [id, l] of s.lost)
      if (l.clientId === conn.clientId && l.connIndex === conn.connIndex) s.lost.delete(id);
  }

  markReady(conn: LiveConnection): void {
    if (conn.gone || conn.ready) return;
    const s = this.state(conn.tunnelId);
    const before = this.readyCount(s);
    conn.ready = true;
    s.everReady = true;
    if (before === 0) this.hooks.transition(conn.tunnelId, conn.accountId, 'active');
  }

  /** Takes a connection out; `pendingReconnect` keeps it listed as a lost one for a while. */
  remove(conn: LiveConnection, pendingReconnect: boolean): void {
    if (conn.gone) return;
    conn.gone = true;
    const s = this.state(conn.tunnelId);
    const wasReady = conn.ready;
    conn.ready = false;
    s.live.delete(conn.id);
    if (pendingReconnect && wasReady) {
      s.lost.set(conn.id, {
        id: conn.id,
        clientId: conn.clientId,
        clientVersion: conn.clientVersion,
        connIndex: conn.connIndex,
        originIp: conn.originIp,
        openedAt: conn.openedAt,
        coloName: conn.coloName,
        lostAt: this.hooks.now(),
      });
    }
    if (wasReady && this.readyCount(s) === 0)
      this.hooks.transition(conn.tunnelId, conn.accountId, 'inactive');
  }

  /** Ready connections of a tunnel, rotating the start so requests spread over them. */
  pick(tunnelId: string, accountId: string): LiveConnection | undefined {
    const s = this.tunnels.get(tunnelId);
    if (!s) return undefined;
    const ready = [...s.live.values()].filter(
      (c) => c.ready && c.accountId === accountId && !c.session.closed && !c.session.destroyed,
    );
    if (ready.length === 0) return undefined;
    s.rr = (s.rr + 1) % 1_000_000;
    return ready[s.rr % ready.length];
  }

  /** Every registered connection (ready or not) of a tunnel, for configuration pushes. */
  all(tunnelId: string): LiveConnection[] {
    return [...(this.tunnels.get(tunnelId)?.live.values() ?? [])];
  }

  hasLive(tunnelId: string): boolean {
    const s = this.tunnels.get(tunnelId);
    return !!s && this.readyCount(s) > 0;
  }

  status(tunnelId: string, everActive: boolean): TunnelStatus {
    const s = this.tunnels.get(tunnelId);
    if (!s || this.readyCount(s) === 0) return everActive || s?.everReady ? 'down' : 'inactive';
    this.prune(s);
    const connected = new Set([...s.live.values()].filter((c) => c.ready).map((c) => c.clientId));
    for (const l of s.lost.values()) if (connected.has(l.clientId)) return 'degraded';
    return 'healthy';
  }

  connections(tunnelId: string): ConnectionView[] {
    const s = this.tunnels.get(tunnelId);
    if (!s) return [];
    this.prune(s);
    const out: ConnectionView[] = [];
    for (const c of s.live.values()) {
      if (!c.ready) continue;
      out.push({
        id: c.id,
        uuid: c.id,
        colo_name: c.coloName,
        is_pending_reconnect: false,
        origin_ip: c.originIp,
        opened_at: c.openedAt,
        client_id: c.clientId,
        client_version: c.clientVersion,
      });
    }
    for (const l of s.lost.values()) {
      out.push({
        id: l.id,
        uuid: l.id,
        colo_name: l.coloName,
        is_pending_reconnect: true,
        origin_ip: l.originIp,
        opened_at: l.openedAt,
        client_id: l.clientId,
        client_version: l.clientVersion,
      });
    }
    return out.sort((a, b) => a.opened_at.localeCompare(b.opened_at) || a.id.localeCompare(b.id));
  }

  /** Connections grouped by connector process (the official "connections" list). */
  clients(tunnelId: string): ClientView[] {
    const s = this.tunnels.get(tunnelId);
    if (!s) return [];
    const views = this.connections(tunnelId);
    const byClient = new Map<string, ClientView>();
    for (const v of views) {
      let client = byClient.get(v.client_id);
      if (!client) {
        client = {
          id: v.client_id,
          arch: '',
          config_version: 0,
          conns: [],
          features: [],
          run_at: v.opened_at,
          version: v.client_version,
        };
        byClient.set(v.client_id, client);
      }
      client.conns.push(v);
      if (v.opened_at < client.run_at) client.run_at = v.opened_at;
    }
    for (const c of s.live.values()) {
      const client = byClient.get(c.clientId);
      if (!client) continue;
      client.arch = c.arch;
      client.features = c.features;
      client.config_version = Math.max(client.config_version, c.configVersion);
    }
    return [...byClient.values()].sort((a, b) => a.run_at.localeCompare(b.run_at));
  }

  /** Closes live connections (of one connector, or all) and forgets the lost ones; returns how many closed. */
  disconnect(tunnelId: string, clientId?: string): number {
    const s = this.tunnels.get(tunnelId);
    if (!s) return 0;
    let n = 0;
    for (const c of [...s.live.values()]) {
      if (clientId && c.clientId !== clientId) continue;
      this.remove(c, false);
      c.session.destroy();
      c.socket.destroy();
      n++;
    }
    for (const [id, l] of s.lost) if (!clientId || l.clientId === clientId) s.lost.delete(id);
    return n;
  }

  closeAll(): void {
    for (const tunnelId of [...this.tunnels.keys()]) this.disconnect(tunnelId);
    this.tunnels.clear();
  }
}
