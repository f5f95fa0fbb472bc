/**
 * The request phases the edge runs itself, on the rules the rulesets and access-rules areas store:
 * - `ip_access_rules`: block / challenge / allow by address, range, ASN or country;
 * - `http_request_firewall_custom`: custom rules (block, challenge variants, log, skip);
 * - `http_request_origin`: origin rules (route to another host or port, Host header override).
 * Rules are compiled once per expression (the rules language caches them) and evaluated against a
 * lazily built request context, so a field nobody reads costs nothing.
 */
import type { Services } from '../../core/services.ts';
import type { AccessRuleService } from '../../areas/access-rules/index.ts';
import type { RuleForEdge, RulesetService } from '../../areas/rulesets/index.ts';
import { buildRequestContext, compileRule, type RequestContext } from '../rules/index.ts';
import { sendErrorPage } from '../error-pages.ts';
import type { Challenger } from '../challenge.ts';
import type { EdgeRequest, Phase } from '../types.ts';
import { PHASE_ORDER } from '../server.ts';

/** The rule context of a request, built on first use and shared by every phase. */
export function ruleContext(er: EdgeRequest): RequestContext {
  if (er.ruleContext) return er.ruleContext;
  const ctx = buildRequestContext({
    method: er.req.method,
    url: er.req.url,
    host: er.host,
    headers: er.req.headers,
    clientIp: er.clientIp,
    ssl: er.scheme === 'https',
    httpVersion: er.req.httpVersion,
    serverPort: er.req.socket.localPort,
    geo: { country: er.visitor.country, asnum: er.visitor.asn, continent: er.visitor.continent, city: er.visitor.city },
    fields: er.fields,
  });
  er.ruleContext = ctx;
  return ctx;
}

function matches(rule: RuleForEdge, er: EdgeRequest): boolean {
  return compileRule(rule.expression)(ruleContext(er));
}

const CHALLENGES = new Set(['challenge', 'js_challenge', 'managed_challenge']);

/** Answers a challenge unless the visitor already holds a clearance; returns true if answered. */
export function challenge(er: EdgeRequest, challenger: Challenger): boolean {
  if (challenger.hasClearance(er.req, er.clientIp)) return false;
  if (er.res) challenger.sendInterstitial(er.res, er.rayId, er.host, er.req.url ?? '/');
  else er.upgrade?.socket.end(`HTTP/1.1 403 Forbidden\r\ncf-mitigated: challenge\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`);
  return true;
}

function block(er: EdgeRequest, params: Record<string, unknown> | undefined): void {
  const response = params?.response as { status_code?: number; content?: string; content_type?: string } | undefined;
  if (er.res && response && (response.content !== undefined || response.status_code !== undefined)) {
    const body = response.content ?? '';
    er.res.writeHead(response.status_code ?? 403, {
      'content-type': response.content_type ?? 'text/plain',
      'content-length': Buffer.byteLength(body),
      'cf-ray': `${er.rayId}-OUT`,
    });
    er.res.end(body);
    return;
  }
  if (er.res) sendErrorPage(er.res, 1020, er.rayId, er.host);
  else er.upgrade?.socket.end(`HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`);
}

export function accessRulesPhase(services: Services, challenger: Challenger): Phase {
  return {
    name: 'ip_access_rules',
    order: PHASE_ORDER.ip_access_rules,
    async run(er) {
      const rules = services.optional<AccessRuleService>('access-rules');
      if (!rules) return 'continue';
      const decision = await rules.decide(er.route.zoneId, er.route.accountId, { ip: er.clientIp, asn: er.visitor.asn, country: er.visitor.country });
      if (!decision) return 'continue';
      er.matchedRules.push(decision.ruleId);
      if (decision.mode === 'block') {
        block(er, undefined);
        return 'handled';
      }
      if (CHALLENGES.has(decision.mode)) return challenge(er, challenger) ? 'handled' : 'continue';
      // An allowed (whitelisted) visitor bypasses the security phases after this one.
      er.skipPhases.add('http_request_firewall_custom');
      er.skipPhases.add('http_request_firewall_managed');
      return 'continue';
    },
  };
}

export function customRulesPhase(services: Services, challenger: Challenger): Phase {
  const phase = 'http_request_firewall_custom';
  return {
    name: phase,
    order: PHASE_ORDER[phase],
    async run(er) {
      const rulesets = services.optional<RulesetService>('rulesets');
      if (!rulesets) return 'continue';
      const rules = await rulesets.phaseRules(phase, er.route.zoneId, er.route.accountId);
      let skipped: string | undefined;
      for (const rule of rules) {
        if (rule.rulesetId === skipped || !matches(rule, er)) continue;
        er.matchedRules.push(rule.id);
        const params = rule.action_parameters;
        switch (rule.action) {
          case 'block':
            block(er, params);
            return 'handled';
          case 'challenge':
          case 'js_challenge':
          case 'managed_challenge':
            if (challenge(er, challenger)) return 'handled';
            continue;
          case 'skip': {
            for (const p of (params?.phases as string[] | undefined) ?? []) er.skipPhases.add(p);
            // `ruleset: "current"` skips the rest of this ruleset (the account's skip leaves the
            // zone's rules to run).
            if (params?.ruleset === 'current') skipped = rule.rulesetId;
            continue;
          }
          default:
            // `log` and actions other areas own: recorded in matchedRules, nothing else.
            continue;
        }
      }
      return 'continue';
    },
  };
}

export function originRulesPhase(services: Services): Phase {
  const phase = 'http_request_origin';
  return {
    name: phase,
    order: PHASE_ORDER[phase],
    async run(er) {
      const rulesets = services.optional<RulesetService>('rulesets');
      if (!rulesets) return 'continue';
      const rules = await rulesets.phaseRules(phase, er.route.zoneId, er.route.accountId);
      for (const rule of rules) {
        if (rule.action !== 'route' || !matches(rule, er)) continue;
        er.matchedRules.push(rule.id);
        const p = (rule.action_parameters ?? {}) as { host_header?: string; origin?: { host?: string; port?: number } };
        if (p.host_header) er.origin.hostHeader = p.host_header;
        if (p.origin?.host) er.origin.host = p.origin.host;
        if (p.origin?.port) er.origin.port = p.origin.port;
      }
      return 'continue';
    },
  };
}
