/**
 * @module api-gateway — the API gateway of spec document 001 ("API gateway"; semantics §2.9):
 * operations (list, get, add one, add many, delete one, delete many; endpoints templated to
 * `{var1}`, `{var2}`… and de-duplicated on method + host + endpoint), discovery from real edge
 * traffic (paths normalised: numbers, UUIDs, hex hashes and long opaque ids become variables;
 * counted as `traffic_stats`; state `review` → `saved` | `ignored`, saving adds the operation;
 * `GET /discovery` exports OpenAPI 3.0 documents), session identifiers (`/configuration`),
 * authentication posture from traffic (missing-auth / mixed-auth), GraphQL protection
 * (`/settings/graphql_protection`, queries measured with `graphql`, over-limit requests blocked),
 * and token validation: configurations and rules in both forms, enforced at the edge with JWS
 * verification (`jose`), `exp` and `nbf`.
 * Edge fields set (phase `http_request_api_gateway_early`, so custom rules can use them):
 * `cf.api_gateway.auth_id_present`, `.fallthrough_detected` (≡ `fallthrough_triggered`),
 * `.jwt_claims_valid` (legacy), `.graphql.query_depth|query_size|parsed_successfully`,
 * `.cf-risk-missing-auth|mixed-auth` (from the traffic counted so far, with session identifiers),
 * `.request_violates_schema`, `.cf-risk-bola-enumeration|bola-pollution`,
 * `http.request.jwt.payload["<config id>"][0]` (the verified claims; `is_jwt_valid()` and
 * `lookup_json_string()` work on it); snippets see it as `request.edge.jwt.payload`.
 * Permissions: "API Gateway" (key `api_gateway`, zone scope).
 * Aliases (spec form ↔ official-client form, one store): bulk add `{operations: […]}` ↔ a bare
 * array; bulk delete `{operation_ids}` ↔ no body (which deletes every operation of the zone);
 * bulk state `{operation_ids: {id: {state}}}` ↔ the bare map; `/api_gateway/token_validation
 * {name, location.header, jwks}` ↔ `/token_validation/config {title, token_sources,
 * credentials.keys}` (records carry `name` and `location` too); `PATCH …/token_validation/{id}
 * {jwks}` ↔ `PUT …/config/{id}/credentials {keys}`; `/api_gateway/jwt_validation_rules {name,
 * hostname, token_validation_id, action}` ↔ `/token_validation/rules {title, selector, expression:
 * is_jwt_valid(…), action}`; `op_id` ↔ `operation_id`.
 * User schemas (OpenAPI 3 in JSON or YAML, read into one document by document.ts; `source` is
 * given back as uploaded) validate requests; BOLA is detected per schema (see bola.ts).
 * Also served as the official client sends them: `PATCH …/credentials` (symmetric keys without
 * `k` keep their stored material), token rules `/bulk` (POST, PATCH), `PATCH
 * settings/schema_validation` (its override `none` skips validation), `user_schemas/hosts`,
 * `user_schemas/{id}/operations`, `expression-template/fallthrough`, per-operation schema
 * validation settings (`operations/{id}/schema_validation` GET/PUT answered at the top level,
 * bulk PATCH `operations/schema_validation` bare or under `settings_multiple_request`; the
 * operation's `log`/`block` replaces the zone default, `none` skips it, null defers to the zone).
 * Labels (labels.ts): user labels stored per zone, managed labels a fixed built-in set
 * (`MANAGED_LABELS`), attached to operations singly, in bulk, or per label
 * (`labels/{source}/{name}/resources/operation`); they classify only, the edge ignores them.
 * The deprecated `GET /schemas` renders the saved operations as OpenAPI documents, one per host
 * (openapi.ts, shared with the discovery export); its `feature` and `include_schema_kind`
 * filters are accepted and add nothing (no thresholds or learned schemas are kept).
 * LIMITATIONS: discovery is heuristic path normalisation, not a learned model; sequence fields
 * are not set; request bodies are inspected only when their length is declared (GraphQL under
 * 20 KB); counts reach storage every `flushMs` (a crash loses at most that interval's counts);
 * error codes are Outpost's (the platform's are not published); YAML schemas are read with the
 * YAML 1.2 core schema and no explicit tags, with at most 1,000 alias expansions, 2 MB once
 * expanded and 128 levels of nesting (the platform's bounds are not published); the edge caches
 * each zone's gateway configuration per process and drops it on this process's writes (a second
 * node sharing the database sees changes after its own restart); BOLA baselines live in memory
 * per process.
 */
import { defineArea } from '../../core/area.ts';
import { EDGE, type EdgeService } from '../../edge/index.ts';
import { DiscoveryRecorder } from './discovery.ts';
import { GatewayPhase } from './phase.ts';
import { mountGatewayRoutes } from './routes.ts';
import { GatewayStore } from './store.ts';

export { measureGraphql } from './graphql.ts';
export { normalisePath, templateEndpoint } from './endpoints.ts';

/** How often discovery counts are written to storage, ms. */
const DISCOVERY_FLUSH_MS = 1000;

export default defineArea({
  name: 'api-gateway',
  mount(ctx) {
    ctx.permissions.define({ key: 'api_gateway', name: 'API Gateway', scope: 'zone' });
    const log = ctx.log.child({ area: 'api-gateway' });
    // Every write drops the zone's cached configuration at the edge.
    const invalidations: ((zoneId: string) => void)[] = [];
    const store = new GatewayStore(ctx.database, ctx.clock, (zoneId) => invalidations.forEach((f) => f(zoneId)));
    const flushed: ((zoneId: string) => void)[] = [];
    const discovery = new DiscoveryRecorder(store, log, DISCOVERY_FLUSH_MS, (zoneId) => flushed.forEach((f) => f(zoneId)));
    const phase = new GatewayPhase(store, ctx.clock, discovery, log);
    invalidations.push((zoneId) => phase.invalidate(zoneId));
    flushed.push((zoneId) => phase.refreshPosture(zoneId));
    ctx.services.optional<EdgeService>(EDGE)?.addPhase(phase.phase());
    mountGatewayRoutes(ctx, store, discovery);
    return {
      async start() {
        discovery.start();
      },
      stop: () => discovery.stop(),
    };
  },
});
