/** Thin handlers for attack events: `/accounts/{a}/ddos/attacks…`, `/zones/{z}/ddos/attacks`, `/zones/{z}/ddos/status`. */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { accounts, GLOBAL_SCOPE } from '../../core/accounts.ts';
import { apiError } from '../../core/errors.ts';
import { limitOffset, pageFrom, pageQuery } from '../../core/pagination.ts';
import { qString } from '../../core/validate.ts';
import type { Zone } from '../zones/index.ts';
import type { AttackRecorder } from './attacks.ts';
import type { Detector } from './detector.ts';

const ListQuery = z.object({
  ...pageQuery({ perPage: 25, min: 1, max: 100 }),
  zone_id: qString(z.string().regex(/^[0-9a-f]{32}$/, 'zone_id must be 32 hex characters')).optional(),
  layer: qString(z.enum(['l7', 'l4'])).optional(),
  status: qString(z.enum(['active', 'ended'])).optional(),
});

export function mountDdosRoutes(ctx: AreaContext, recorder: AttackRecorder, detectors: Detector[]): void {
  const { router } = ctx;
  const db = ctx.database.db;
  const tags = ['ddos'];
  const account = async (id: string) => {
    if (!(await accounts.get(db, GLOBAL_SCOPE, id))) throw apiError('account_not_found', id);
  };

  router.add(
    { method: 'GET', path: '/accounts/:account_id/ddos/attacks', operationId: 'listAccountDdosAttacks', summary: 'List DDoS attack events of an account (newest first)', auth: { permission: 'account_rulesets', level: 'read' }, query: ListQuery, tags },
    async (req) => {
      await account(req.params.account_id);
      const q = req.query;
      const { limit, offset } = limitOffset(q);
      const { items, total } = await recorder.list(req.params.account_id, { zoneId: q.zone_id, layer: q.layer, status: q.status, limit, offset });
      return pageFrom(items, total, q);
    },
  );

  router.add(
    { method: 'GET', path: '/accounts/:account_id/ddos/attacks/:attack_id', operationId: 'getAccountDdosAttack', summary: 'Get one DDoS attack event', auth: { permission: 'account_rulesets', level: 'read' }, params: { attack_id: 'hex32' }, tags },
    async (req) => {
      await account(req.params.account_id);
      const found = await recorder.get(req.params.account_id, req.params.attack_id);
      if (!found) throw apiError('ddos_attack_not_found', req.params.attack_id);
      return found;
    },
  );

  router.add(
    { method: 'GET', path: '/zones/:zone_id/ddos/attacks', operationId: 'listZoneDdosAttacks', summary: 'List DDoS attack events of a zone (newest first)', auth: { permission: 'zone_waf', level: 'read' }, query: ListQuery.omit({ zone_id: true }), tags },
    async (req) => {
      const zone = req.resolved.zone_id as Zone;
      const q = req.query;
      const { limit, offset } = limitOffset(q);
      const { items, total } = await recorder.list(zone.account.id, { zoneId: zone.id, layer: q.layer, status: q.status, limit, offset });
      return pageFrom(items, total, q);
    },
  );

  router.add(
    { method: 'GET', path: '/zones/:zone_id/ddos/status', operationId: 'getZoneDdosStatus', summary: "The zone's learned request-rate baselines per host and its running attacks", auth: { permission: 'zone_waf', level: 'read' }, tags },
    async (req) => {
      const zone = req.resolved.zone_id as Zone;
      const hosts = new Map<string, number>();
      // Both HTTP flood rules learn the host's rate, each only from the windows under half of its
      // own lowest threshold: the host rule learns rates the single-source rule must refuse, so
      // the host's learned rate is the larger of the two.
      for (const d of detectors) {
        if (d.signature.stream !== 'http') continue;
        for (const b of d.baselines()) if (b.ref.zoneId === zone.id) hosts.set(b.ref.hostname, Math.max(hosts.get(b.ref.hostname) ?? 0, b.baseline));
      }
      const running = detectors.flatMap((d) => d.running()).filter((a) => a.target.zoneId === zone.id);
      return {
        hosts: [...hosts].map(([hostname, rps]) => ({ hostname, baseline_requests_per_second: rps })),
        active_attacks: running.map((a) => recorder.record(a, false)),
      };
    },
  );
}
