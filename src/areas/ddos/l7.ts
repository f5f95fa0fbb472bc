/**
 * The `ddos_l7` request phase, first of the edge's phases: every request to a proxied host is
 * counted by each enabled HTTP signature (per zone and host, and per client address), with the
 * profile the zone's and account's `ddos_l7` overrides give this request. A request from a source
 * an attack mitigates gets the effective action: `block` (403, `cf-mitigated: block`), one of the
 * challenges (the edge's interstitial; a visitor holding a clearance passes) or `log` (counted in
 * the attack, served).
 */
import { compileRule } from '../../edge/rules/index.ts';
import {
  PHASE_ORDER,
  ruleContext,
  type EdgeRequest,
  type EdgeService,
  type Phase,
} from '../../edge/index.ts';
import { DDOS_L7_ID, type RuleForEdge, type RulesetService } from '../rulesets/index.ts';
import type { Attack, Detector, TargetRef } from './detector.ts';
import { ProfileCache } from './overrides.ts';

const CHALLENGES = new Set(['challenge', 'js_challenge', 'managed_challenge']);

/** Requests whose framing contradicts itself or their method. */
function malformed(er: EdgeRequest): boolean {
  const h = er.req.headers;
  const te = h['transfer-encoding'];
  const cl = h['content-length'];
  if (te !== undefined && cl !== undefined) return true;
  const m = er.req.method;
  return (m === 'GET' || m === 'HEAD') && (te !== undefined || (cl !== undefined && cl !== '0'));
}

function block(er: EdgeRequest, a: Attack): void {
  const body = `Access denied: this request was part of a DDoS attack (rule ${a.signature.ruleId}). Ray ID: ${er.rayId}\n`;
  if (er.res) {
    er.res.writeHead(403, {
      'content-type': 'text/plain; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      'cf-ray': `${er.rayId}-OUT`,
      'cf-mitigated': 'block',
    });
    er.res.end(body);
  } else
    er.upgrade?.socket.end(
      'HTTP/1.1 403 Forbidden\r\ncf-mitigated: block\r\ncontent-length: 0\r\nconnection: close\r\n\r\n',
    );
}

export function l7Phase(deps: {
  detectors: Detector[];
  rulesets: () => RulesetService | undefined;
  edge: EdgeService;
  zoneName: (zoneId: string) => string;
  onRulesetsChanged: (listener: () => void) => void;
}): Phase {
  const profiles = new ProfileCache(
    DDOS_L7_ID,
    deps.detectors.map((d) => d.signature),
  );
  const { detectors } = deps;
  /**
   * The entry point rules last answered per zone and account, so a request usually needs no
   * promise at all; dropped whenever rulesets change (the service's cache is dropped then too).
   */
  const known = new Map<string, readonly RuleForEdge[]>();
  let generation = 0;
  deps.onRulesetsChanged(() => {
    generation++;
    known.clear();
  });
  const run = (er: EdgeRequest, rules: readonly RuleForEdge[]): 'continue' | 'handled' => {
    const route = er.route;
    const profile = profiles.pick(rules, (expression) => {
      try {
        return compileRule(expression)(ruleContext(er));
      } catch {
        return false;
      }
    });
    const key = `${route.zoneId}|${er.host}`;
    const ref = (): TargetRef => ({
      zoneId: route.zoneId,
      zoneName: route.zoneName || deps.zoneName(route.zoneId),
      accountId: route.accountId,
      hostname: er.host,
    });
    let hit: Attack | undefined;
    let action = '';
    for (let i = 0; i < detectors.length; i++) {
      const e = profile[i];
      if (!e.enabled) continue;
      const stream = detectors[i].signature.stream;
      if (stream === 'http-no-ua' && er.req.headers['user-agent']) continue;
      if (stream === 'http-malformed' && !malformed(er)) continue;
      const a = detectors[i].hit(key, ref, er.clientIp, e.sensitivity, e.action, e.overrideRuleId);
      if (!a) continue;
      er.matchedRules.push(a.signature.ruleId);
      // Every attack this request belongs to counts it; the first mitigating one acts.
      if (e.action === 'log') a.logged++;
      else if (!hit) {
        hit = a;
        action = e.action;
      }
    }
    if (!hit) return 'continue';
    if (CHALLENGES.has(action)) {
      if (!deps.edge.challenge(er)) return 'continue';
      hit.mitigated++;
      return 'handled';
    }
    block(er, hit);
    hit.mitigated++;
    return 'handled';
  };
  return {
    name: 'ddos_l7',
    order: PHASE_ORDER.ddos_l7,
    run(er) {
      const cacheKey = `${er.route.zoneId}|${er.route.accountId}`;
      const rules = known.get(cacheKey);
      if (rules) return Promise.resolve(run(er, rules));
      const rulesets = deps.rulesets();
      if (!rulesets) return Promise.resolve(run(er, []));
      const asked = generation;
      return rulesets.phaseRules('ddos_l7', er.route.zoneId, er.route.accountId).then((loaded) => {
        if (known.size > 10_000) known.clear();
        // A load that started before a change must not be remembered after it.
        if (asked === generation) known.set(cacheKey, loaded);
        return run(er, loaded);
      });
    },
  };
}
