/**
 * @module calls — relay (TURN) keys, short-lived relay credentials, Outpost's own STUN/TURN
 * server, and the media forwarding unit (spec 000 "Relay keys", "Relay credentials", "Media
 * forwarding").
 * Relay keys: `/accounts/{account_id}/calls/turn_keys` (Calls Read/Write). Credentials: on the API
 * port, `/v1/turn/keys/{key_id}/credentials/generate` (spec: `{iceServers: {urls, username,
 * credential}}`) and `…/generate-ice-servers` (official: 201, an `iceServers` array), revoke with
 * `{username}` (spec) or `…/credentials/{username}/revoke` (official), both 204. The URL list has
 * the seven platform forms; the 53/udp, 80/tcp and 443/tls alternatives are opened per
 * `--relay-alt-ports`, a form whose port is closed shows the main port of its transport.
 * Credentials use the TURN REST shared-secret scheme (`<expiry>:<label>`, base64 HMAC-SHA1), so a
 * coturn fleet configured with a key's secret accepts them too; our label is `<key uid>.<random>`.
 * Revocation and key deletion refuse new requests at once and tear live allocations down within
 * the relay's one-second sweep.
 * Media forwarding (sfu/): apps at `/accounts/{account_id}/calls/apps` (secret returned once);
 * the media host `/v1/apps/{appId}/…` on the API port (Host `--sfu-host`, default sfu.localhost,
 * serves only these; other host names have them at the root and under /client/v4), with a bearer
 * app secret and CORS: sessions,
 * tracks push/pull/close (by `mid` with `force`, or by `trackName`), renegotiate, tracks/update,
 * data channels; werift peer connections, ICE-lite, RTP forwarded without transcoding; simulcast
 * layers by `preferredRid` (sfu/layers.ts); operations wait `--sfu-connect-wait-ms` (5 s) for
 * `connected`, silent tracks are collected after `--sfu-track-idle-ms` (30 s).
 * LIMITATIONS: relay — no RFC 6062 TCP relaying and IPv4 relays only (as the platform); DTLS is not
 * served. Forwarder — VP8 and Opus only; sessions live in this process (not shared between nodes,
 * lost on restart); FIR is passed to publishers as PLI; publishers get a REMB from their
 * subscribers' loss-based estimates (sfu/bandwidth.ts; no TWCC, no delay-based estimate, the
 * ceiling until subscribers report); simulcast switching understands VP8 only; each
 * session has its own UDP port; WebSocket adapters are not implemented.
 */
import { isIP } from 'node:net';
import { defineArea, type AreaContext } from '../../core/area.ts';
import { RelayIndex } from './keys.ts';
import { mountRelayRoutes, type RelayState } from './routes.ts';
import { startTurnServer, type TurnServer } from './turn-server.ts';
import { relayTlsMaterial } from './tls.ts';
import { parseAltPorts } from './ice.ts';
import { mountAppRoutes } from './sfu/apps.ts';
import { Forwarder } from './sfu/engine.ts';
import { mountSfuRoutes } from './sfu/routes.ts';

const REFRESH_MS = 2_000;
/** Refresh ticks between two prunings of expired revocations (about a minute). */
const PRUNE_EVERY = 30;

function parseRange(text: string): [number, number] {
  const m = /^(\d+)-(\d+)$/.exec(text);
  if (!m || Number(m[1]) > Number(m[2]) || Number(m[2]) > 65535) {
    throw new Error(`relay port range must look like 49152-65535, got ${text}`);
  }
  return [Number(m[1]), Number(m[2])];
}

export default defineArea({
  name: 'calls',
  mount(ctx: AreaContext) {
    const { config, database, log } = ctx;
    const db = database.db;
    let turn: TurnServer | undefined;
    let refreshTimer: NodeJS.Timeout | undefined;
    const state: RelayState = {
      index: new RelayIndex(),
      ports: {},
      host: config.relayHost ?? config.host,
      drop: (username) => turn?.dropUsername(username),
    };
    ctx.permissions.define({ key: 'calls', name: 'Calls', scope: 'account' });
    mountRelayRoutes(ctx, state);
    const sfuLog = log.child({ area: 'sfu' });
    // Peer connections gather on the API listen address when it is one IPv4 address.
    const sfuAddress = isIP(config.host) === 4 && config.host !== '0.0.0.0' ? config.host : undefined;
    const sfu = new Forwarder({ address: sfuAddress, trackIdleMs: config.sfuTrackIdleMs, connectWaitMs: config.sfuConnectWaitMs, log: (level, msg, fields) => sfuLog[level](fields ?? {}, msg) });
    mountAppRoutes(ctx, (appId) => void sfu.closeApp(appId));
    mountSfuRoutes(ctx, sfu);

    return {
      async start() {
        await state.index.refresh(db);
        const tls = relayTlsMaterial(config.relayTls, config.dataDir, state.host);
        const relayLog = log.child({ area: 'relay' });
        turn = await startTurnServer({
          host: config.host,
          udpPort: config.turnPort,
          tcpPort: config.turnPort,
          tls: tls ? { port: config.turnsPort, ...tls } : undefined,
          alternates: parseAltPorts(config.relayAltPorts, config.turnPort, !!tls),
          realm: 'outpost',
          // Relayed addresses are advertised to peers: a wildcard listen address cannot be one.
          relayAddress: config.relayHost && isIP(config.relayHost) ? config.relayHost : config.host,
          relayPortRange: parseRange(config.relayPorts),
          allowLoopbackPeers: config.relayAllowLoopback,
          maxAllocationsPerUsername: config.relayQuota,
          now: () => ctx.clock.now().getTime(),
          secretsFor: (username) => state.index.secretsFor(username),
          log: (level, msg, fields) => relayLog[level](fields ?? {}, msg),
        });
        const alt = turn.alternatePorts;
        state.ports = { udp: turn.udpPort, tcp: turn.tcpPort, tls: turn.tlsPort, altUdp53: alt.udp53, altTcp80: alt.tcp80, altTls443: alt.tls443 };
        for (const f of turn.alternateFailures) {
          relayLog.warn(
            { form: f.form, port: f.port, error: f.error },
            `relay alternative port ${f.port} (${f.form}) could not be opened; the ICE list shows that form on the main port instead (set --relay-alt-ports to map it to a port Outpost may open, or off)`,
          );
        }
        let ticks = 0;
        refreshTimer = setInterval(() => {
          state.index.refresh(db).catch((err: unknown) => relayLog.warn({ err }, 'relay key refresh failed'));
          // Revocations of expired usernames only cost memory and refresh time: drop them now and then.
          if (++ticks % PRUNE_EVERY === 0) {
            state.index
              .pruneExpired(db, Math.floor(ctx.clock.now().getTime() / 1000))
              .catch((err: unknown) => relayLog.warn({ err }, 'relay revocation pruning failed'));
          }
        }, REFRESH_MS);
        refreshTimer.unref();
        // With port 0 the TCP listener takes the UDP port number when it can, but not always.
        const listeners =
          turn.tcpPort === turn.udpPort
            ? [{ name: 'TURN/STUN relay', protocol: 'udp+tcp', address: `${config.host}:${turn.udpPort}` }]
            : [
                { name: 'TURN/STUN relay', protocol: 'udp', address: `${config.host}:${turn.udpPort}` },
                { name: 'TURN/STUN relay', protocol: 'tcp', address: `${config.host}:${turn.tcpPort}` },
              ];
        if (turn.tlsPort) listeners.push({ name: 'TURN over TLS', protocol: 'tls', address: `${config.host}:${turn.tlsPort}` });
        if (alt.udp53) listeners.push({ name: 'TURN (alt 53)', protocol: 'udp', address: `${config.host}:${alt.udp53}` });
        if (alt.tcp80) listeners.push({ name: 'TURN (alt 80)', protocol: 'tcp', address: `${config.host}:${alt.tcp80}` });
        if (alt.tls443) listeners.push({ name: 'TURN over TLS (alt 443)', protocol: 'tls', address: `${config.host}:${alt.tls443}` });
        return listeners;
      },
      async stop() {
        if (refreshTimer) clearInterval(refreshTimer);
        await turn?.close();
        turn = undefined;
        await sfu.close();
      },
    };
  },
});
