/**
 * The gateway at the edge (phase `http_request_api_gateway_early`, before custom rules so they can
 * use its fields): session identifier, operation matching (`fallthrough_triggered`), JWT
 * verification per token configuration (`http.request.jwt.payload["<id>"][0]`, legacy
 * `jwt_claims_valid`), GraphQL measurement and limits, token validation rules (block or log),
 * and discovery counting. A zone's configuration is cached and rebuilt after each write.
 */
import type { Clock } from '../../core/clock.ts';
import type { Logger } from '../../core/log.ts';
import { PHASE_ORDER, ruleContext, sendErrorPage, type EdgeRequest, type Phase } from '../../edge/index.ts';
import { compileRule, type CompiledRule } from '../../edge/rules/index.ts';
import { bufferBody } from './body.ts';
import type { DiscoveryRecorder } from './discovery.ts';
import { compileTemplate, METHODS, normalisePath, type HttpMethod, type TemplateMatcher } from './endpoints.ts';
import { GRAPHQL_MAX_BODY, isGraphqlCandidate, measureGraphql } from './graphql.ts';
import { opKey, type GatewayStore, type Mitigation, type Operation, type Settings, type TokenRule, type UserSchema } from './store.ts';
import { BolaTracker, pollutes } from './bola.ts';
import { compileOpenApi, parseOpenApi, violates, type SchemaOperation } from './schemas.ts';
import { TokenVerifier } from './tokens.ts';

interface ZoneGateway {
  settings: Settings;
  verifiers: TokenVerifier[];
  rules: { rule: TokenRule; test: CompiledRule; hosts?: Set<string>; excludedOps: Set<string> }[];
  operations: { op: Operation; matcher: TemplateMatcher }[];
  hostsWithOperations: Set<string>;
  schemaOps: { schema: UserSchema; op: SchemaOperation }[];
  /** Per-operation schema validation actions, by `opKey` (operations without one are absent). */
  mitigations: Map<string, Mitigation>;
}

/** Bodies up to this size are read for schema validation; larger ones pass unread. */
const SCHEMA_MAX_BODY = 64 * 1024;

const METHOD_SET = new Set<string>(METHODS);

/** Sets a rule field for this request (also on a rule context an earlier phase already built). */
function setField(er: EdgeRequest, name: string, value: unknown): void {
  er.fields[name] = value;
  er.ruleContext?.set(name, value);
}

function cookieOf(er: EdgeRequest, name: string): string | undefined {
  const raw = er.req.headers.cookie;
  if (!raw) return undefined;
  for (const part of raw.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

function headerOf(er: EdgeRequest, name: string): string | undefined {
  const v = er.req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function block(er: EdgeRequest): void {
  if (er.res) sendErrorPage(er.res, 1020, er.rayId, er.host);
  else er.upgrade?.socket.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
}

export class GatewayPhase {
  private readonly zones = new Map<string, Promise<ZoneGateway>>();
  private readonly bola = new BolaTracker();
  /** Authentication posture per zone: discovered endpoint key → label, from the stored counts. */
  private readonly posture = new Map<string, Promise<Map<string, 'missing-auth' | 'mixed-auth'>>>();

  constructor(
    private readonly store: GatewayStore,
    private readonly clock: Clock,
    private readonly discovery: DiscoveryRecorder,
    private readonly log: Logger,
  ) {}

  /** Drops a zone's cached configuration (after a write). */
  invalidate(zoneId: string): void {
    this.zones.delete(zoneId);
    this.posture.delete(zoneId);
  }

  /** Drops a zone's posture labels (after new traffic counts were stored). */
  refreshPosture(zoneId: string): void {
    this.posture.delete(zoneId);
  }

  private postureOf(zoneId: string): Promise<Map<string, 'missing-auth' | 'mixed-auth'>> {
    let p = this.posture.get(zoneId);
    if (!p) {
      p = this.store.listDiscovered(zoneId).then((ops) => {
        const labels = new Map<string, 'missing-auth' | 'mixed-auth'>();
        for (const o of ops) {
          if (o.features.auth.without_session === 0) continue;
          labels.set(`${o.method} ${o.host} ${o.endpoint}`, o.features.auth.with_session === 0 ? 'missing-auth' : 'mixed-auth');
        }
        return labels;
      });
      this.posture.set(zoneId, p);
      p.catch(() => this.posture.delete(zoneId));
    }
    return p;
  }

  private zone(zoneId: string): Promise<ZoneGateway> {
    let z = this.zones.get(zoneId);
    if (!z) {
      z = this.load(zoneId);
      this.zones.set(zoneId, z);
      z.catch(() => this.zones.delete(zoneId));
    }
    return z;
  }

  private async load(zoneId: string): Promise<ZoneGateway> {
    const [settings, configs, rules, operations, schemas] = await Promise.all([
      this.store.settings(zoneId),
      this.store.listTokenConfigs(zoneId),
      this.store.listTokenRules(zoneId),
      this.store.listOperations(zoneId),
      this.store.listSchemas(zoneId),
    ]);
    const schemaOps: ZoneGateway['schemaOps'] = [];
    for (const schema of schemas) {
      if (!schema.validation_enabled && !schema.bola.enabled) continue;
      try {
        for (const op of compileOpenApi(parseOpenApi(schema.source, true))) schemaOps.push({ schema, op });
      } catch (err) {
        // Checked at upload; a schema that no longer compiles (a newer validator) is skipped, not fatal.
        this.log.warn({ zone: zoneId, schema: schema.schema_id, err: (err as Error).message }, 'user schema skipped');
      }
    }
    return {
      schemaOps,
      settings,
      verifiers: configs.map((c) => new TokenVerifier(c)),
      rules: rules
        .filter((r) => r.enabled)
        .map((rule) => {
          const hosts = rule.selector.include?.flatMap((i) => i.host ?? []);
          return {
            rule,
            test: compileRule(rule.expression),
            hosts: hosts && hosts.length > 0 ? new Set(hosts.map((h) => h.toLowerCase())) : undefined,
            excludedOps: new Set(rule.selector.exclude?.flatMap((e) => e.operation_ids ?? []) ?? []),
          };
        }),
      operations: operations.map((op) => ({ op, matcher: compileTemplate(op.endpoint) })),
      hostsWithOperations: new Set(operations.map((o) => o.host)),
      mitigations: new Map(operations.flatMap((o) => (o.mitigation_action ? [[opKey(o), o.mitigation_action] as const] : []))),
    };
  }

  phase(): Phase {
    const name = 'http_request_api_gateway_early';
    return { name, order: PHASE_ORDER[name], run: (er) => this.run(er) };
  }

  private async run(er: EdgeRequest): Promise<'continue' | 'handled'> {
    const z = await this.zone(er.route.zoneId);
    const method = (er.req.method ?? 'GET').toUpperCase();
    const url = er.req.url ?? '/';
    const q = url.indexOf('?');
    const path = q >= 0 ? url.slice(0, q) : url;

    // Session identifier.
    const ids = z.settings.auth_id_characteristics;
    let session: string | undefined;
    if (ids.length > 0) {
      const parts: string[] = [];
      for (const c of ids) {
        const v = c.type === 'header' ? headerOf(er, c.name.toLowerCase()) : c.type === 'cookie' ? cookieOf(er, c.name) : undefined;
        if (v) parts.push(`${c.type}:${c.name}=${v}`);
      }
      if (parts.length > 0) session = parts.join('&');
      setField(er, 'cf.api_gateway.auth_id_present', session !== undefined);
      // Posture of the endpoint, from the traffic seen so far.
      const label = (await this.postureOf(er.route.zoneId)).get(`${method} ${er.host} ${normalisePath(path).endpoint}`);
      if (label) setField(er, `cf.api_gateway.cf-risk-${label}`, true);
    }

    // Operation matching.
    let operation: Operation | undefined;
    if (z.operations.length > 0) {
      for (const { op, matcher } of z.operations) {
        if (op.method === method && op.host === er.host && matcher.match(path)) {
          operation = op;
          break;
        }
      }
      if (!operation && z.hostsWithOperations.has(er.host)) setField(er, 'cf.api_gateway.fallthrough_detected', true);
    }

    // JWT verification.
    if (z.verifiers.length > 0) {
      const payloads: Record<string, string[]> = {};
      let presented = 0;
      let valid = 0;
      const now = this.clock.now().getTime();
      for (const v of z.verifiers) {
        const token = v.tokenOf((n) => headerOf(er, n), (n) => cookieOf(er, n));
        const verdict = await v.verify(token, now);
        if (verdict.status !== 'missing') presented++;
        if (verdict.status === 'valid') {
          valid++;
          payloads[v.config.id] = [verdict.payload];
        }
      }
      setField(er, 'http.request.jwt.payload', payloads);
      setField(er, 'http.request.jwt.claims', payloads);
      setField(er, 'cf.api_gateway.jwt_claims_valid', presented > 0 && valid === presented);
    }

    const contentType = String(er.req.headers['content-type'] ?? '');

    // User schemas: validation and BOLA.
    if (z.schemaOps.length > 0) {
      for (const { schema, op } of z.schemaOps) {
        if (op.method !== method || op.host !== er.host) continue;
        const values = op.matcher.match(path);
        if (!values) continue;
        const query = new URLSearchParams(q >= 0 ? url.slice(q + 1) : '');
        // The operation's own action (when set) replaces the zone default; `none` skips validation.
        const action = z.mitigations.get(opKey(op)) ?? z.settings.schema_validation.validation_default_mitigation_action;
        const skip = z.settings.schema_validation.validation_override_mitigation_action === 'none' || z.mitigations.get(opKey(op)) === 'none';
        if (schema.validation_enabled && !skip) {
          const declared = Number(er.req.headers['content-length']);
          const body = op.body && /json/i.test(contentType) ? await bufferBody(er, SCHEMA_MAX_BODY) : undefined;
          const bad = violates(op, values, query, contentType, body, declared);
          setField(er, 'cf.api_gateway.request_violates_schema', bad);
          if (bad && action !== 'none') {
            er.matchedRules.push(`api_gateway:schema:${schema.schema_id}`);
            if (action === 'block') {
              block(er);
              this.count(er, method, path, session);
              return 'handled';
            }
          }
        }
        if (schema.bola.enabled) {
          if (pollutes(op.paramNames, query)) setField(er, 'cf.api_gateway.cf-risk-bola-pollution', true);
          if (session && values.length > 0 && this.bola.record(`${er.route.zoneId} ${method} ${op.host} ${op.endpoint}`, session, values.join('/'), schema.bola.min_sessions)) {
            setField(er, 'cf.api_gateway.cf-risk-bola-enumeration', true);
          }
        }
        break;
      }
    }

    // GraphQL.
    if (isGraphqlCandidate(method, path, contentType, Number(er.req.headers['content-length']))) {
      const body = await bufferBody(er, GRAPHQL_MAX_BODY);
      if (body) {
        const m = measureGraphql(contentType, body.toString('utf8'));
        setField(er, 'cf.api_gateway.graphql.parsed_successfully', m.parsed);
        setField(er, 'cf.api_gateway.graphql.query_depth', m.depth);
        setField(er, 'cf.api_gateway.graphql.query_size', m.size);
        const { max_depth, max_size } = z.settings.graphql;
        if (m.parsed && ((max_depth !== null && m.depth > max_depth) || (max_size !== null && m.size > max_size))) {
          er.matchedRules.push('api_gateway:graphql_protection');
          this.log.debug({ ray: er.rayId, depth: m.depth, size: m.size }, 'GraphQL query over the zone limits');
          block(er);
          return 'handled';
        }
      }
    }

    // Token validation rules: a request that does not meet the rule's expression gets its action.
    for (const r of z.rules) {
      if (r.hosts && !r.hosts.has(er.host)) continue;
      if (operation && r.excludedOps.has(operation.operation_id)) continue;
      if (r.test(ruleContext(er))) continue;
      er.matchedRules.push(r.rule.id);
      if (r.rule.action === 'block') {
        block(er);
        this.count(er, method, path, session);
        return 'handled';
      }
    }

    this.count(er, method, path, session);
    return 'continue';
  }

  private count(er: EdgeRequest, method: string, path: string, session: string | undefined): void {
    if (!METHOD_SET.has(method)) return;
    this.discovery.count(er.route.zoneId, method as HttpMethod, er.host, path, session);
  }
}
