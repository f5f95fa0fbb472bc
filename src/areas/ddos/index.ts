/**
 * @module ddos — DDoS detection and mitigation on live traffic (spec 001 "DDoS protection",
 * "Ruleset and rule (DDoS)"; docs/ddos.md). The managed rulesets `ddos_l7`
 * (4d21379b4f9f4bb088e0729962c8b3cf) and `ddos_l4` (3b64149bfa6e4220bbbc2bd6db589552) and their
 * entry points are served by the rulesets area; this area runs their rules (signatures.ts):
 * - L7: the edge phase `ddos_l7` (l7.ts) counts requests per zone and host and per client
 *   address against a learned baseline — floods from one source, from many sources, and floods
 *   of anomalous requests — and blocks, challenges or logs the mitigated sources;
 * - L4: proxied TCP/UDP applications ask `DdosL4Guard` (service `ddos.l4`, l4.ts) about every
 *   datagram and connection; floods are dropped (block) or logged.
 * Overrides (overrides.ts): first matching execute rule of the account's entry point, then the
 * zone's; rule > category > ruleset level; sensitivity default/medium/low/eoff scales thresholds.
 * Attack events (attacks.ts) are stored per account and served at `/accounts/{a}/ddos/attacks`
 * and `/zones/{z}/ddos/attacks` (Outpost's own paths: the platform shows attacks only in its
 * dashboard and analytics); each start and end is published as `ddos.attack` (alerting, and the
 * analytics area's `outpost_ddos_attacks` dataset for the SQL endpoint).
 * Permissions: "Account Rulesets" / "Zone WAF" read, as the rulesets they come from.
 * LIMITATIONS: one node's view (rates are not shared between several edge nodes); baselines are
 * in memory and adapt within seconds (a flood ramped up slowly enough raises its own thresholds);
 * reflection is recognised by source port alone; no packet-level
 * L3 detection — L4 sees what the proxy sees (datagrams, accepted connections), so a SYN flood is
 * measured by completed handshakes; the platform's `connection_close` actions are not modelled.
 */
import { defineArea } from '../../core/area.ts';
import { hexId } from '../../core/ids.ts';
import { EDGE, type EdgeService } from '../../edge/index.ts';
import { ZONE_INDEX, type ZoneIndex } from '../dns/index.ts';
import type { RulesetService } from '../rulesets/index.ts';
import { AttackRecorder } from './attacks.ts';
import { Detector } from './detector.ts';
import { DDOS_L4, L4Guard } from './l4.ts';
import { l7Phase } from './l7.ts';
import { mountDdosRoutes } from './routes.ts';
import { signaturesOf } from './signatures.ts';

export type { AttackEvent, AttackRecord } from './attacks.ts';
export { DDOS_L4, type DdosL4Guard, type L4Target } from './l4.ts';
export { SIGNATURES, SENSITIVITY_FACTOR, BASELINE_MULTIPLIER } from './signatures.ts';

export default defineArea({
  name: 'ddos',
  mount(ctx) {
    const { config } = ctx;
    const log = ctx.log.child({ area: 'ddos' });
    const recorder = new AttackRecorder(ctx.database, ctx.clock, ctx.events, log);
    const options = {
      windowMs: config.ddosWindowMs,
      cooldownWindows: config.ddosCooldownWindows,
      scale: config.ddosThresholdPercent / 100,
      newId: hexId,
      onStart: (a: Parameters<typeof recorder.started>[0]) => recorder.started(a),
      onEnd: (a: Parameters<typeof recorder.ended>[0]) => recorder.ended(a),
    };
    const l7 = signaturesOf('l7').map((s) => new Detector(s, options));
    const l4 = signaturesOf('l4').map((s) => new Detector(s, options));
    const index = ctx.services.optional<ZoneIndex>(ZONE_INDEX);
    const zoneName = (id: string) => index?.zoneById(id)?.name ?? '';
    const rulesets = () => ctx.services.optional<RulesetService>('rulesets');
    const guard = new L4Guard(l4, rulesets, zoneName, log);

    if (config.ddosDetection) {
      const edge = ctx.services.optional<EdgeService>(EDGE);
      const onRulesetsChanged = (listener: () => void) => {
        ctx.events.subscribe('rulesets.changed', listener);
        ctx.events.subscribe('zone.deleted', listener);
      };
      if (edge) edge.addPhase(l7Phase({ detectors: l7, rulesets, edge, zoneName, onRulesetsChanged }));
      ctx.services.provide(DDOS_L4, guard);
    }
    mountDdosRoutes(ctx, recorder, [...l7, ...l4]);

    let timer: NodeJS.Timeout | undefined;
    let unsubscribe: (() => void) | undefined;
    return {
      async start() {
        if (!config.ddosDetection) return;
        unsubscribe = ctx.events.subscribe('rulesets.changed', (p) => {
          if ((p as { phase?: string }).phase === 'ddos_l4') guard.invalidate();
        });
        timer = setInterval(() => {
          for (const d of l7) d.roll();
          for (const d of l4) d.roll();
          guard.roll();
        }, config.ddosWindowMs);
        timer.unref();
      },
      async stop() {
        clearInterval(timer);
        unsubscribe?.();
        for (const d of [...l7, ...l4]) d.endAll();
        await recorder.flush();
      },
    };
  },
});
