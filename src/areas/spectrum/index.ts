/**
 * @module spectrum — proxied TCP/UDP applications and their analytics (spec 000_c6f0ffba2ab6f7a4.txt,
 * "Proxied application (spectrum app)" and "Proxied applications"; docs/spectrum.md).
 *
 * API: `/zones/{zone_id}/spectrum/apps` list (page, per_page ≤ 100, order, direction), create,
 * get, PUT, delete (`{id}`); `/spectrum/protocols`; `/spectrum/analytics/aggregate/current`,
 * `/events/summary`, `/events/bytime`. Validation and conflicts: app-rules.ts (400), same name and
 * overlapping port or a clashing DNS record (409), an edge address and port already taken (409).
 * Creating an application writes its DNS record (proxied CNAME, or A/AAAA for `ADDRESS`) through
 * the DNS area's helpers; deleting the last application at a name removes it (dns-records.ts).
 *
 * Data plane: every application listens at once on its edge addresses (`--spectrum-bind-addresses`,
 * or static `edge_ips.ips`) and ports (proxy.ts): TCP with backpressure and half-close, TLS
 * termination (flexible/full/strict), PROXY v1/v2 (tcp.ts); UDP per-client flows with an idle
 * timeout, simple proxy protocol and PROXY v2 DGRAM headers (udp.ts); origins from
 * `origin_direct` or `origin_dns` (Outpost's own zones first, else the system resolver) with
 * round robin and failover (origins.ts); `ip_firewall` asks the access-rules service for each
 * connection (block drops it; allow and no rule pass; challenges do not apply at layer 4).
 * Analytics come from the proxy's own flow events (analytics.ts), kept in memory and persisted
 * per zone and minute; each event is also published as `spectrum.event`.
 *
 * Permissions: "Zone Settings" (key `zone_settings`) for applications, "Analytics" (key
 * `analytics`) for analytics reads, both zone-scoped.
 * Aliases: `origin_port` as an integer, `"start-end"` or `{start, end}` (answers use the spec's
 * `{start, end}` for ranges); analytics `metrics`/`dimensions`/`sort` comma-separated or repeated;
 * metric `duration` (spec, seconds) beside `durationAvg…duration99th` (ms); `aggregate/current`
 * takes `appID`/`app_id`/`colo_name` and the spec's `metrics`/`dimensions`.
 * `traffic_type` http/https connections are handed to the edge's HTTP pipeline (every request
 * phase runs) with the application's origin fixed; https is TLS-terminated here first.
 * LIMITATIONS: `argo_smart_routing` and `virtual_network_id` are stored only;
 * edge certificates are self-signed per host name; two applications cannot share an edge address
 * and port (the platform gives each its own anycast addresses); access rules match the client IP
 * only (no country or ASN data at layer 4); duration percentiles come from at most 256 samples per
 * second and dimension combination.
 */
import { networkInterfaces } from 'node:os';
import net from 'node:net';
import { EDGE, type EdgeService } from '../../edge/index.ts';
import { defineArea } from '../../core/area.ts';
import { ConfigError, type Config } from '../../core/config.ts';
import type { AccessRuleService } from '../access-rules/index.ts';
import { DDOS_L4, type DdosL4Guard } from '../ddos/index.ts';
import { ZONE_INDEX, type ZoneIndex } from '../dns/index.ts';
import { SpectrumAnalytics } from './analytics.ts';
import { ANALYTICS, mountAnalyticsRoutes } from './analytics-routes.ts';
import { canonicalIp, planOf } from './app-rules.ts';
import { OriginResolver } from './origins.ts';
import { SpectrumProxy } from './proxy.ts';
import { mountAppRoutes, ZONE_SETTINGS } from './routes.ts';
import { apps } from './store.ts';
import { EdgeCertificates, originCa } from './tls.ts';

export type { StoredApp as SpectrumApp } from './schemas.ts';
export type { PublishedFlowEvent as SpectrumFlowEvent } from './analytics.ts';

/**
 * Where applications with dynamic edge IPs listen: `--spectrum-bind-addresses`, else
 * `--edge-addresses`, else the API host — a loopback host adds `::1` when the machine has it, so
 * that the edge addresses proxied DNS names answer with are the ones listening.
 */
export function bindAddressesFor(config: Config): string[] {
  const canonical = (list: string[], flag: string) =>
    list.map((a) => {
      const c = canonicalIp(a);
      if (!c) throw new ConfigError(`${flag}: "${a}" is not an IPv4 or IPv6 address`);
      return c;
    });
  if (config.spectrumBindAddresses.length > 0) return canonical(config.spectrumBindAddresses, '--spectrum-bind-addresses');
  if (config.edgeAddresses.length > 0) return canonical(config.edgeAddresses, '--edge-addresses');
  const host = config.host.replace(/^\[|\]$/g, '');
  const loopback6 = Object.values(networkInterfaces()).some((list) => list?.some((i) => i.address === '::1'));
  if (host === 'localhost' || host.startsWith('127.') || host === '::1') {
    const out = [host.startsWith('127.') ? host : '127.0.0.1'];
    if (loopback6) out.push('::1');
    return out;
  }
  return net.isIP(host) ? [canonicalIp(host)!] : ['127.0.0.1'];
}

export default defineArea({
  name: 'spectrum',
  mount(ctx) {
    ctx.permissions.define({ key: ZONE_SETTINGS, name: 'Zone Settings', scope: 'zone' });
    ctx.permissions.define({ key: ANALYTICS, name: 'Analytics', scope: 'zone' });
    const { config } = ctx;
    const log = ctx.log.child({ area: 'spectrum' });
    const bindAddresses = bindAddressesFor(config);
    let ca: string[] | undefined;
    try {
      ca = originCa(config.spectrumOriginCa);
    } catch (err) {
      throw new ConfigError(`--spectrum-origin-ca: ${(err as Error).message}`);
    }
    const index = ctx.services.optional<ZoneIndex>(ZONE_INDEX);
    const analytics = new SpectrumAnalytics(ctx.database.db, ctx.clock, ctx.events, config.spectrumColo, log);
    const certs = new EdgeCertificates(config.dataDir);
    const proxy = new SpectrumProxy({
      config,
      log,
      analytics,
      resolver: new OriginResolver(index),
      certs,
      accessRules: () => ctx.services.optional<AccessRuleService>('access-rules'),
      accountOf: (zoneId) => index?.zoneById(zoneId)?.accountId,
      originCa: ca,
      edge: () => ctx.services.optional<EdgeService>(EDGE),
      ddos: () => ctx.services.optional<DdosL4Guard>(DDOS_L4),
    });
    mountAppRoutes({ ctx, proxy, certs, bindAddresses });
    mountAnalyticsRoutes(ctx, analytics);

    let unsubscribe: (() => void) | undefined;
    return {
      async start() {
        await analytics.load();
        analytics.start();
        proxy.start();
        unsubscribe = ctx.events.subscribe('zone.deleted', (payload) => {
          const zoneId = (payload as { id?: string } | undefined)?.id;
          if (!zoneId) return;
          analytics.dropZone(zoneId);
          for (const id of proxy.appsOfZone(zoneId)) void proxy.close(id);
        });
        const failed: { name: string; protocol: string; address: string }[] = [];
        for (const doc of await apps.all(ctx.database.db, null)) {
          const app = doc.body;
          try {
            if (app.tls !== 'off') await certs.ensure(app.dns.name);
            await proxy.open(planOf(app, doc.scopeId, bindAddresses));
          } catch (err) {
            log.warn({ err, app: app.id, protocol: app.protocol }, 'proxied application not listening');
            failed.push({ name: `proxied app ${app.dns.name} (${app.protocol})`, protocol: app.protocol.split('/')[0], address: `not listening: ${(err as Error).message}` });
          }
        }
        return [
          { name: 'proxied TCP/UDP apps', protocol: 'tcp+udp', address: `edge addresses ${bindAddresses.join(', ')}` },
          ...proxy.listeners(),
          ...failed,
        ];
      },
      async stop() {
        unsubscribe?.();
        await proxy.stop();
        await analytics.stop();
      },
    };
  },
});
