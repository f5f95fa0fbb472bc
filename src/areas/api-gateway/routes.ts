/** Thin handlers for `/zones/{zone_id}/api_gateway/…` and `/zones/{zone_id}/token_validation/…`. */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { apiError } from '../../core/errors.ts';
import { pageOf, pageQuery } from '../../core/pagination.ts';
import { parseMultipart } from '../../core/multipart.ts';
import { parseJson, raw, type Req } from '../../core/router.ts';
import { validate } from '../../core/validate.ts';
import { validateRule } from '../../edge/rules/index.ts';
import type { Zone } from '../zones/index.ts';
import type { DiscoveryRecorder } from './discovery.ts';
import { MAX_SCHEMA_BYTES } from './document.ts';
import { OperationInput } from './endpoints.ts';
import { LABEL_NAME, type Label, type LabelSource } from './labels.ts';
import { openapiOf, openapiOfOperations } from './openapi.ts';
import type { DiscoveryState, GatewayStore, Operation, Settings, TokenRule } from './store.ts';
import { compileOpenApi, parseOpenApi, schemaHosts } from './schemas.ts';
import type { UserSchema } from './store.ts';
import { checkKeys, checkSources, headerSource, parseJwksText, publicView } from './tokens.ts';

/** An operation as the API shows it (its schema validation action has its own endpoints). */
const opView = ({ mitigation_action: _m, labels: _l, ...op }: Operation) => op;
const zoneOf = (req: Req<unknown, unknown>) => req.resolved.zone_id as Zone;
const bare = (extra: Record<string, unknown> = {}) => raw(Response.json({ errors: [], messages: [], success: true, ...extra }));

const OpsPage = z.object({ ...pageQuery({ perPage: 20, min: 5, max: 50 }) });
const ListPage = z.object({ ...pageQuery({ perPage: 20, min: 1, max: 100 }) });
const BulkOps = z.union([z.array(OperationInput).min(1).max(1000), z.object({ operations: z.array(OperationInput).min(1).max(1000) })]);
const State = z.enum(['review', 'saved', 'ignored']);
// The official client's map allows an entry without a state (it leaves the state as it is).
const StateMap = z.record(z.string().uuid(), z.object({ state: State.optional() }));
const BulkStates = z.union([z.object({ operation_ids: StateMap }), StateMap]);
const MitigationAction = z.enum(['log', 'block', 'none']).nullable();
const MitigationMap = z.record(z.string(), z.object({ mitigation_action: MitigationAction.optional() }).strict());
// The official client sends the map itself; the documented form wraps it in settings_multiple_request.
const BulkMitigations = z.preprocess((v) => (v && typeof v === 'object' && 'settings_multiple_request' in v ? (v as { settings_multiple_request: unknown }).settings_multiple_request : v), MitigationMap);
const LabelName = z.string().regex(LABEL_NAME, 'must be 1 to 64 letters, digits, ".", "_", ":" or "-"');
const LabelNames = z.array(LabelName).max(100);
const LabelFields = { description: z.string().max(500).optional(), metadata: z.unknown().optional() };
const Counts = z.preprocess((v) => (Array.isArray(v) ? v[0] : v), z.enum(['true', 'false']).transform((v) => v === 'true')).optional();
const LabelsQuery = ListPage.extend({
  source: z.enum(['user', 'managed']).optional(),
  filter: z.string().max(200).optional(),
  order: z.enum(['name', 'description', 'created_at', 'last_updated', 'mapped_resources.operations']).optional(),
  direction: z.enum(['asc', 'desc']).optional(),
  with_mapped_resource_counts: Counts,
});
const OpSelector = z.object({ include: z.object({ operation_ids: z.array(z.string().uuid('must be operation ids (UUIDs)')).min(1).max(1000) }).strict() }).strict();
const OperationLabelsBody = z.object({ user: LabelNames.optional(), managed: LabelNames.optional() }).strict();
const BulkLabelsBody = z.object({ selector: OpSelector, user: z.object({ labels: LabelNames.optional() }).strict().optional(), managed: z.object({ labels: LabelNames.optional() }).strict().optional() }).strict();
const Characteristic = z.object({ type: z.enum(['header', 'cookie', 'jwt']), name: z.string().min(1).max(128) });
const ConfigurationBody = z.object({ auth_id_characteristics: z.array(Characteristic).max(10) });
const Limit = z.number().int().min(1, 'must be at least 1').max(1_000_000).nullable();
const GraphqlBody = z.object({ max_depth: Limit, max_size: Limit });
const Key = z.record(z.string(), z.unknown());
const TokenConfigBody = z.object({
  title: z.string().min(1).max(50),
  description: z.string().max(500).default(''),
  token_type: z.literal('JWT').default('JWT'),
  token_sources: z.array(z.string().max(512)).min(1).max(4),
  credentials: z.object({ keys: z.array(Key) }),
});
const TokenConfigEdit = z.object({ title: z.string().min(1).max(50).optional(), description: z.string().max(500).optional(), token_sources: z.array(z.string().max(512)).min(1).max(4).optional() });
const SpecTokenConfig = z.object({ name: z.string().min(1).max(50), location: z.object({ header: z.string().min(1).max(256) }), jwks: z.string().max(64 * 1024) });
const Selector = z.object({
  include: z.array(z.object({ host: z.array(z.string().min(1).max(253)).optional() })).nullable().optional(),
  exclude: z.array(z.object({ operation_ids: z.array(z.string()).optional() })).nullable().optional(),
});
const TokenRuleBody = z.object({
  title: z.string().min(1).max(50),
  description: z.string().max(500).default(''),
  action: z.enum(['log', 'block']),
  enabled: z.boolean().default(true),
  expression: z.string().min(1).max(4096),
  selector: Selector.default({}),
});
const TokenRuleEdit = TokenRuleBody.partial();
const SpecRule = z.object({ name: z.string().min(1).max(50), hostname: z.string().min(1).max(253), token_validation_id: z.string().min(1), action: z.enum(['log', 'block']) });

function checkExpression(expression: string, where = 'expression'): void {
  const v = validateRule(expression);
  if (!v.ok) throw apiError('api_gateway_invalid', `${where}: ${v.error.message}`);
}

export function mountGatewayRoutes(ctx: AreaContext, store: GatewayStore, discovery: DiscoveryRecorder): void {
  const { router } = ctx;
  const read = { permission: 'api_gateway', level: 'read' } as const;
  const edit = { permission: 'api_gateway', level: 'edit' } as const;
  const tags = ['api-gateway'];
  const gw = '/zones/:zone_id/api_gateway';
  const tv = '/zones/:zone_id/token_validation';
  const OP = { operation_id: 'uuid' } as const;
  const DISC = { discovery_id: 'uuid' } as const;
  const CFG = { config_id: 'uuid' } as const;
  const RULE = { rule_id: 'uuid' } as const;

  // --- labels (registered before `operations/:operation_id`, whose segment they share) ---------
  const LABEL = { name: 'any' } as const;
  const labelName = (name: string) => {
    if (!LABEL_NAME.test(name)) throw apiError('api_gateway_invalid', `name: ${JSON.stringify(name)} is not a label name (1 to 64 letters, digits, ".", "_", ":" or "-")`);
    return name;
  };
  type Counted = Label & { mapped_resources?: { operations: number } };
  const sortLabels = (list: Counted[], order: string | undefined, direction: 'asc' | 'desc' | undefined) => {
    if (!order) return list;
    const key = (l: Counted) => (order === 'mapped_resources.operations' ? (l.mapped_resources?.operations ?? 0) : String(l[order as keyof Label]));
    const sign = direction === 'desc' ? -1 : 1;
    return [...list].sort((a, b) => (key(a) < key(b) ? -sign : key(a) > key(b) ? sign : 0));
  };
  router.add({ method: 'GET', path: `${gw}/labels`, operationId: 'api-shield-labels-list', summary: 'List managed and user labels (filter: substring of name or description)', auth: read, query: LabelsQuery, tags }, async (req) => {
    const q = req.query;
    const order = q.order === 'mapped_resources.operations' || q.with_mapped_resource_counts;
    let list: Counted[] = await store.listLabels(zoneOf(req).id, Boolean(order));
    if (q.source) list = list.filter((l) => l.source === q.source);
    if (q.filter) list = list.filter((l) => l.name.includes(q.filter!) || l.description.includes(q.filter!));
    list = sortLabels(list, q.order, q.direction);
    if (!q.with_mapped_resource_counts) list = list.map(({ mapped_resources: _r, ...l }) => l);
    return pageOf(list, q);
  });
  const getLabel = (source: LabelSource) => async (req: Req<undefined, { with_mapped_resource_counts?: boolean }>) => {
    const label: Counted = await store.getLabel(zoneOf(req).id, source, labelName(req.params.name), req.query.with_mapped_resource_counts ?? false);
    return label;
  };
  router.add({ method: 'GET', path: `${gw}/labels/managed/:name`, operationId: 'api-shield-labels-managed-get', summary: 'Get a managed label', auth: read, params: LABEL, query: z.object({ with_mapped_resource_counts: Counts }), tags }, getLabel('managed'));
  router.add({ method: 'GET', path: `${gw}/labels/user/:name`, operationId: 'api-shield-labels-user-get', summary: 'Get a user label', auth: read, params: LABEL, query: z.object({ with_mapped_resource_counts: Counts }), tags }, getLabel('user'));
  router.add({ method: 'POST', path: `${gw}/labels/user`, operationId: 'api-shield-labels-user-create', summary: 'Create user labels ([{name, description?, metadata?}], all or none)', auth: edit, body: z.array(z.object({ name: LabelName, ...LabelFields }).strict()).min(1).max(100), tags }, async (req) =>
    store.createUserLabels(zoneOf(req).id, req.body),
  );
  router.add({ method: 'PUT', path: `${gw}/labels/user/:name`, operationId: 'api-shield-labels-user-update', summary: "Replace a user label's description and metadata", auth: edit, params: LABEL, body: z.object(LabelFields).strict(), tags }, async (req) =>
    store.editUserLabel(zoneOf(req).id, labelName(req.params.name), req.body, true),
  );
  router.add({ method: 'PATCH', path: `${gw}/labels/user/:name`, operationId: 'api-shield-labels-user-edit', summary: "Change a user label's description or metadata", auth: edit, params: LABEL, body: z.object(LabelFields).strict(), tags }, async (req) =>
    store.editUserLabel(zoneOf(req).id, labelName(req.params.name), req.body, false),
  );
  router.add({ method: 'DELETE', path: `${gw}/labels/user/:name`, operationId: 'api-shield-labels-user-delete', summary: 'Delete a user label (it leaves every operation)', auth: edit, params: LABEL, tags }, async (req) =>
    (await store.deleteUserLabels(zoneOf(req).id, labelName(req.params.name)))[0],
  );
  router.add({ method: 'DELETE', path: `${gw}/labels/user`, operationId: 'api-shield-labels-user-delete-all', summary: 'Delete every user label of the zone', auth: edit, tags }, async (req) => store.deleteUserLabels(zoneOf(req).id));
  for (const source of ['user', 'managed'] as const) {
    router.add({ method: 'PUT', path: `${gw}/labels/${source}/:name/resources/operation`, operationId: `api-shield-labels-${source}-operations-replace`, summary: `Set exactly which operations carry a ${source} label`, auth: edit, params: LABEL, body: z.object({ selector: OpSelector }).strict(), tags }, async (req) =>
      store.setLabelOperations(zoneOf(req).id, source, labelName(req.params.name), req.body.selector.include.operation_ids),
    );
  }
  const bulkLabels = (mode: 'add' | 'replace') => async (req: Req<z.infer<typeof BulkLabelsBody>, unknown>) =>
    store.labelOperations(zoneOf(req).id, req.body.selector.include.operation_ids, { user: req.body.user?.labels, managed: req.body.managed?.labels }, mode);
  router.add({ method: 'POST', path: `${gw}/operations/labels`, operationId: 'api-shield-operations-labels-bulk-add', summary: 'Attach labels to several operations', auth: edit, body: BulkLabelsBody, tags }, bulkLabels('add'));
  router.add({ method: 'PUT', path: `${gw}/operations/labels`, operationId: 'api-shield-operations-labels-bulk-replace', summary: 'Replace the labels of several operations', auth: edit, body: BulkLabelsBody, tags }, bulkLabels('replace'));
  router.add({ method: 'DELETE', path: `${gw}/operations/labels`, operationId: 'api-shield-operations-labels-bulk-remove', summary: 'Remove every label from every operation of the zone', auth: edit, tags }, async (req) =>
    store.labelOperations(zoneOf(req).id, undefined, {}, 'remove_all'),
  );
  const opLabels = (mode: 'add' | 'replace') => async (req: Req<z.infer<typeof OperationLabelsBody>, unknown>) =>
    (await store.labelOperations(zoneOf(req).id, [req.params.operation_id], req.body, mode))[0];
  router.add({ method: 'POST', path: `${gw}/operations/:operation_id/labels`, operationId: 'api-shield-operation-labels-add', summary: 'Attach labels ({user, managed} names) to an operation', auth: edit, params: OP, body: OperationLabelsBody, tags }, opLabels('add'));
  router.add({ method: 'PUT', path: `${gw}/operations/:operation_id/labels`, operationId: 'api-shield-operation-labels-replace', summary: 'Replace the labels of an operation', auth: edit, params: OP, body: OperationLabelsBody, tags }, opLabels('replace'));
  router.add({ method: 'DELETE', path: `${gw}/operations/:operation_id/labels`, operationId: 'api-shield-operation-labels-remove', summary: 'Remove every label from an operation', auth: edit, params: OP, tags }, async (req) =>
    (await store.labelOperations(zoneOf(req).id, [req.params.operation_id], {}, 'remove_all'))[0],
  );

  // --- operations ----------------------------------------------------------------------------
  router.add({ method: 'GET', path: `${gw}/operations`, operationId: 'api-shield-endpoint-management-retrieve-information-about-all-operations-on-a-zone', summary: 'List operations', auth: read, query: OpsPage, tags }, async (req) =>
    pageOf((await store.listOperations(zoneOf(req).id)).map(opView), req.query),
  );
  router.add({ method: 'GET', path: `${gw}/operations/:operation_id`, operationId: 'api-shield-endpoint-management-retrieve-information-about-an-operation', summary: 'Get an operation', auth: read, params: OP, tags }, async (req) =>
    opView(await store.getOperation(zoneOf(req).id, req.params.operation_id)),
  );
  router.add({ method: 'POST', path: `${gw}/operations/item`, operationId: 'api-shield-endpoint-management-add-operation-to-a-zone', summary: 'Add one operation', auth: edit, body: OperationInput, tags }, async (req) =>
    opView((await store.addOperations(zoneOf(req).id, [req.body]))[0]),
  );
  router.add({ method: 'POST', path: `${gw}/operations`, operationId: 'api-shield-endpoint-management-add-operations-to-a-zone', summary: 'Add operations (a bare array, or {operations})', auth: edit, body: BulkOps, tags }, async (req) =>
    (await store.addOperations(zoneOf(req).id, Array.isArray(req.body) ? req.body : req.body.operations)).map(opView),
  );
  // The deprecated export of the saved operations as OpenAPI (one document per host). Features
  // and learned schemas are accepted and not rendered: Outpost keeps neither thresholds nor
  // learned parameter schemas.
  const many = (v: unknown) => (v === undefined ? undefined : Array.isArray(v) ? v : [v]);
  const SchemasQuery = z.object({
    host: z.preprocess(many, z.array(z.string().min(1).max(253)).max(50)).optional(),
    feature: z.preprocess(many, z.array(z.enum(['thresholds', 'parameter_schemas', 'schema_info', 'confidence_intervals'])).max(4)).optional(),
    include_schema_kind: z.preprocess(many, z.array(z.literal('learned')).max(1)).optional(),
  });
  router.add({ method: 'GET', path: `${gw}/schemas`, operationId: 'api-shield-endpoint-management-retrieve-operations-and-features-as-open-api-schemas', summary: 'The saved operations as OpenAPI documents, one per host (optionally only the given hosts)', auth: read, query: SchemasQuery, tags }, async (req) => {
    const hosts = req.query.host?.map((h) => h.toLowerCase());
    const ops = (await store.listOperations(zoneOf(req).id)).filter((o) => !hosts || hosts.includes(o.host));
    return { schemas: openapiOfOperations(ops, zoneOf(req).name), timestamp: ctx.clock.now().toISOString() };
  });
  // Per-operation schema validation (the deprecated form): GET and PUT answer at the top level, as
  // the official client reads them; the bulk PATCH answers the map under `result`.
  router.add({ method: 'GET', path: `${gw}/operations/:operation_id/schema_validation`, operationId: 'api-shield-schema-validation-retrieve-operation-level-settings', summary: "An operation's schema validation action (null: the zone default applies)", auth: read, params: OP, tags }, async (req) =>
    bare(await store.operationMitigation(zoneOf(req).id, req.params.operation_id)),
  );
  router.add({ method: 'PUT', path: `${gw}/operations/:operation_id/schema_validation`, operationId: 'api-shield-schema-validation-update-operation-level-settings', summary: "Set an operation's schema validation action (log, block, none skips validation, null defers to the zone)", auth: edit, params: OP, body: z.object({ mitigation_action: MitigationAction.optional() }).strict(), tags }, async (req) => {
    const zoneId = zoneOf(req).id;
    await store.setOperationMitigations(zoneId, { [req.params.operation_id]: req.body.mitigation_action ?? null });
    return bare(await store.operationMitigation(zoneId, req.params.operation_id));
  });
  router.add({ method: 'PATCH', path: `${gw}/operations/schema_validation`, operationId: 'api-shield-schema-validation-update-multiple-operation-level-settings', summary: 'Set the schema validation action of several operations ({operation_id: {mitigation_action}}, bare or under settings_multiple_request; all or none)', auth: edit, body: BulkMitigations, tags }, async (req) => {
    const map = req.body;
    if (Object.keys(map).length === 0) throw apiError('api_gateway_invalid', 'settings_multiple_request: name at least one operation');
    for (const id of Object.keys(map)) if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(id)) throw apiError('api_gateway_invalid', `settings_multiple_request: ${JSON.stringify(id)} is not an operation id (a UUID)`);
    return store.setOperationMitigations(zoneOf(req).id, Object.fromEntries(Object.entries(map).map(([id, v]) => [id, v.mitigation_action ?? null])));
  });
  router.add({ method: 'DELETE', path: `${gw}/operations/:operation_id`, operationId: 'api-shield-endpoint-management-delete-an-operation', summary: 'Delete an operation', auth: edit, params: OP, tags }, async (req) => {
    await store.deleteOperation(zoneOf(req).id, req.params.operation_id);
    return bare();
  });
  router.add({ method: 'DELETE', path: `${gw}/operations`, operationId: 'api-shield-endpoint-management-delete-multiple-operations', summary: 'Delete the operations named in {operation_ids}, or all of the zone without a body', auth: edit, bodyType: 'raw', tags }, async (req) => {
    const text = req.raw?.toString('utf8').trim() ?? '';
    const ids = text === '' ? undefined : validate(z.object({ operation_ids: z.array(z.string().uuid()).min(1).max(1000) }), parseJson(req.raw!), 'body').operation_ids;
    await store.deleteOperations(zoneOf(req).id, ids);
    return bare();
  });

  // --- discovery -------------------------------------------------------------------------------
  router.add({ method: 'GET', path: `${gw}/discovery/operations`, operationId: 'api-shield-api-discovery-retrieve-discovered-operations-on-a-zone', summary: 'List operations discovered from traffic', auth: read, query: OpsPage.extend({ state: z.preprocess((v) => (Array.isArray(v) ? v[0] : v), State).optional() }), tags }, async (req) => {
    await discovery.flush();
    const all = await store.listDiscovered(zoneOf(req).id);
    return pageOf(req.query.state ? all.filter((o) => o.state === req.query.state) : all, req.query);
  });
  router.add({ method: 'GET', path: `${gw}/discovery/operations/:discovery_id`, operationId: 'api-shield-api-discovery-retrieve-discovered-operation-by-id', summary: 'Get a discovered operation', auth: read, params: DISC, tags }, async (req) => {
    await discovery.flush();
    return store.getDiscovered(zoneOf(req).id, req.params.discovery_id);
  });
  router.add({ method: 'PATCH', path: `${gw}/discovery/operations/:discovery_id`, operationId: 'api-shield-api-patch-discovered-operation', summary: 'Set the state of a discovered operation (saving adds it to the operations)', auth: edit, params: DISC, body: z.object({ state: State }), tags }, async (req) => {
    const out = await store.setDiscoveryStates(zoneOf(req).id, { [req.params.discovery_id]: req.body.state });
    return out[req.params.discovery_id];
  });
  router.add({ method: 'PATCH', path: `${gw}/discovery/operations`, operationId: 'api-shield-api-patch-discovered-operations', summary: 'Set states of several discovered operations ({id: {state}}, or under operation_ids)', auth: edit, body: BulkStates, tags }, async (req) => {
    const map = ('operation_ids' in req.body && typeof req.body.operation_ids === 'object' && !('state' in (req.body.operation_ids as object)) ? req.body.operation_ids : req.body) as Record<string, { state?: DiscoveryState }>;
    if (Object.keys(map).length === 0) throw apiError('api_gateway_invalid', 'name at least one discovered operation');
    return store.setDiscoveryStates(zoneOf(req).id, Object.fromEntries(Object.entries(map).map(([id, v]) => [id, v.state])));
  });
  router.add({ method: 'GET', path: `${gw}/discovery`, operationId: 'api-shield-api-discovery-retrieve-discovered-operations-on-a-zone-as-openapi', summary: 'Discovered operations as OpenAPI documents (one per host)', auth: read, tags }, async (req) => {
    await discovery.flush();
    const ops = (await store.listDiscovered(zoneOf(req).id)).filter((o) => o.state !== 'ignored');
    return { schemas: openapiOf(ops, zoneOf(req).name), timestamp: new Date().toISOString() };
  });
  router.add({ method: 'GET', path: `${gw}/discovery/authentication_posture`, operationId: 'outpost-api-gateway-authentication-posture', summary: 'Endpoints seen without the session identifier (missing-auth) or with and without it (mixed-auth)', auth: read, tags }, async (req) => {
    await discovery.flush();
    const settings = await store.settings(zoneOf(req).id);
    if (settings.auth_id_characteristics.length === 0) return [];
    const ops = await store.listDiscovered(zoneOf(req).id);
    return ops
      .filter((o) => o.features.auth.without_session > 0 && o.state !== 'ignored')
      .map((o) => ({
        id: o.id,
        method: o.method,
        host: o.host,
        endpoint: o.endpoint,
        risk_labels: [o.features.auth.with_session === 0 ? 'cf-risk-missing-auth' : 'cf-risk-mixed-auth'],
        requests_with_session: o.features.auth.with_session,
        requests_without_session: o.features.auth.without_session,
        last_updated: o.last_updated,
      }));
  });

  // --- settings ------------------------------------------------------------------------------
  router.add({ method: 'GET', path: `${gw}/configuration`, operationId: 'api-shield-settings-retrieve-information-about-specific-configuration-properties', summary: 'Session identifiers', auth: read, tags }, async (req) => ({
    auth_id_characteristics: (await store.settings(zoneOf(req).id)).auth_id_characteristics,
  }));
  router.add({ method: 'PUT', path: `${gw}/configuration`, operationId: 'api-shield-settings-set-configuration-properties', summary: 'Set the session identifiers', auth: edit, body: ConfigurationBody, tags }, async (req) => ({
    auth_id_characteristics: (await store.updateSettings(zoneOf(req).id, (s) => ({ ...s, auth_id_characteristics: req.body.auth_id_characteristics }))).auth_id_characteristics,
  }));
  router.add({ method: 'GET', path: `${gw}/settings/graphql_protection`, operationId: 'outpost-api-gateway-graphql-protection-get', summary: 'GraphQL query limits', auth: read, tags }, async (req) => (await store.settings(zoneOf(req).id)).graphql);
  router.add({ method: 'PUT', path: `${gw}/settings/graphql_protection`, operationId: 'outpost-api-gateway-graphql-protection-put', summary: 'Set the GraphQL query limits (null = no limit)', auth: edit, body: GraphqlBody, tags }, async (req) =>
    (await store.updateSettings(zoneOf(req).id, (s) => ({ ...s, graphql: { max_depth: req.body.max_depth, max_size: req.body.max_size } }))).graphql,
  );

  // --- user schemas ----------------------------------------------------------------------------
  const SCHEMA = { schema_id: 'uuid' } as const;
  const schemaView = (s: UserSchema, omitSource = false) => {
    const { bola: _bola, ...rest } = s;
    return omitSource ? { ...rest, source: undefined } : rest;
  };
  router.add({ method: 'GET', path: `${gw}/user_schemas`, operationId: 'api-shield-schema-validation-retrieve-information-about-all-schemas', summary: 'List user schemas', auth: read, query: ListPage.extend({ omit_source: z.preprocess((v) => v === 'true' || v === true, z.boolean()).optional() }), tags }, async (req) =>
    pageOf((await store.listSchemas(zoneOf(req).id)).map((s) => schemaView(s, req.query.omit_source)), req.query),
  );
  router.add({ method: 'POST', path: `${gw}/user_schemas`, operationId: 'api-shield-schema-validation-post-schema', summary: 'Upload an OpenAPI schema, JSON or YAML (multipart file, or JSON {name, source})', auth: edit, bodyType: 'raw', tags }, async (req) => {
    const type = req.c.req.header('content-type') ?? '';
    let name: unknown;
    let source: unknown;
    let enabled: unknown;
    let kind: unknown = 'openapi_v3';
    if (/multipart\//i.test(type)) {
      const form = parseMultipart(type, req.raw!);
      const file = form.files.find((f) => f.field === 'file') ?? form.files[0];
      source = file?.data.toString('utf8');
      name = form.fields.name ?? file?.filename;
      enabled = form.fields.validation_enabled;
      kind = form.fields.kind ?? kind;
    } else {
      const body = parseJson(req.raw!) as Record<string, unknown> | null;
      if (typeof body !== 'object' || body === null) throw apiError('api_gateway_invalid', 'the body must be a JSON object or a multipart form');
      name = body.name;
      source = typeof body.source === 'object' && body.source !== null ? JSON.stringify(body.source) : body.source;
      enabled = body.validation_enabled;
      kind = body.kind ?? kind;
    }
    if (kind !== 'openapi_v3') throw apiError('api_gateway_invalid', 'kind must be openapi_v3');
    if (typeof source !== 'string' || source.length === 0) throw apiError('api_gateway_invalid', 'the schema is missing (a multipart part "file", or "source")');
    if (source.length > MAX_SCHEMA_BYTES) throw apiError('api_gateway_invalid', 'the schema is larger than 2 MB');
    if (typeof name !== 'string' || name.length === 0 || name.length > 200) throw apiError('api_gateway_invalid', 'name must be 1 to 200 characters');
    const doc = parseOpenApi(source);
    const ops = compileOpenApi(doc);
    const zoneId = zoneOf(req).id;
    const schema = await store.createSchema(zoneId, { name, kind: 'openapi_v3', source, validation_enabled: enabled === true || enabled === 'true', bola: { enabled: false, min_sessions: 10_000 } });
    // The schema's operations join the zone's operations, as on the platform.
    await store.addOperations(zoneId, ops.map((o) => ({ method: o.method, host: o.host, endpoint: o.path })));
    return { schema: schemaView(schema), upload_details: { warnings: [] } };
  });
  router.add({ method: 'POST', path: `${gw}/expression-template/fallthrough`, operationId: 'api-shield-expression-templates-fallthrough', summary: 'A custom rule expression that matches requests to the hosts that no operation matches', auth: edit, body: z.object({ hosts: z.array(z.string().regex(/^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/i, 'must be a hostname').max(253)).min(1).max(100) }), tags }, async (req) => {
    const hosts = [...new Set(req.body.hosts.map((h) => h.toLowerCase()))];
    const wild = hosts.filter((h) => h.startsWith('*.'));
    const exact = hosts.filter((h) => !h.startsWith('*.'));
    const parts = [
      ...(exact.length > 0 ? [`http.host in {${exact.map((h) => JSON.stringify(h)).join(' ')}}`] : []),
      ...wild.map((h) => `ends_with(http.host, ${JSON.stringify(h.slice(1))})`),
    ];
    return { expression: `(cf.api_gateway.fallthrough_detected and (${parts.join(' or ')}))`, title: `Fallthrough detection for ${hosts.join(', ')}` };
  });
  router.add({ method: 'GET', path: `${gw}/user_schemas/hosts`, operationId: 'api-shield-schema-validation-retrieve-user-schema-hosts', summary: 'The hosts each user schema covers', auth: read, query: ListPage, tags }, async (req) =>
    pageOf((await store.listSchemas(zoneOf(req).id)).map((s) => ({ schema_id: s.schema_id, name: s.name, hosts: schemaHosts(parseOpenApi(s.source, true)), created_at: s.created_at })), req.query),
  );
  const listOf = (v: unknown) => (v === undefined ? undefined : Array.isArray(v) ? v : [v]);
  const SchemaOpsQuery = ListPage.extend({
    host: z.preprocess(listOf, z.array(z.string().max(253)).max(50)).optional(),
    method: z.preprocess(listOf, z.array(z.string().toUpperCase()).max(10)).optional(),
    endpoint: z.string().max(4096).optional(),
    operation_status: z.enum(['new', 'existing']).optional(),
  });
  router.add({ method: 'GET', path: `${gw}/user_schemas/:schema_id/operations`, operationId: 'api-shield-schema-validation-extract-operations-from-schema', summary: 'The operations a user schema describes: saved ones in full, the others as {method, host, endpoint}', auth: read, params: SCHEMA, query: SchemaOpsQuery, tags }, async (req) => {
    const zoneId = zoneOf(req).id;
    const schema = await store.getSchema(zoneId, req.params.schema_id);
    const saved = new Map((await store.listOperations(zoneId)).map((o) => [`${o.method} ${o.host} ${o.endpoint}`, o]));
    const q = req.query;
    const seen = new Set<string>();
    const out: unknown[] = [];
    for (const op of compileOpenApi(parseOpenApi(schema.source, true))) {
      const key = `${op.method} ${op.host} ${op.endpoint}`;
      if (seen.has(key)) continue;
      seen.add(key);
      if (q.host && !q.host.includes(op.host)) continue;
      if (q.method && !q.method.includes(op.method)) continue;
      if (q.endpoint !== undefined && !op.endpoint.includes(q.endpoint)) continue;
      const existing = saved.get(key);
      if (q.operation_status === 'new' ? existing : q.operation_status === 'existing' ? !existing : false) continue;
      out.push(existing ?? { method: op.method, host: op.host, endpoint: op.endpoint });
    }
    return pageOf(out, q);
  });
  router.add({ method: 'GET', path: `${gw}/user_schemas/:schema_id`, operationId: 'api-shield-schema-validation-retrieve-information-about-specific-schema', summary: 'Get a user schema', auth: read, params: SCHEMA, query: z.object({ omit_source: z.preprocess((v) => v === 'true' || v === true, z.boolean()).optional() }), tags }, async (req) =>
    schemaView(await store.getSchema(zoneOf(req).id, req.params.schema_id), req.query.omit_source),
  );
  router.add({ method: 'PATCH', path: `${gw}/user_schemas/:schema_id`, operationId: 'api-shield-schema-validation-enable-validation-for-a-schema', summary: 'Turn validation on or off', auth: edit, params: SCHEMA, body: z.object({ validation_enabled: z.boolean() }), tags }, async (req) =>
    schemaView(await store.editSchema(zoneOf(req).id, req.params.schema_id, (s) => ({ ...s, validation_enabled: req.body.validation_enabled }))),
  );
  router.add({ method: 'DELETE', path: `${gw}/user_schemas/:schema_id`, operationId: 'api-shield-schema-delete-a-schema', summary: 'Delete a user schema', auth: edit, params: SCHEMA, tags }, async (req) => {
    await store.deleteSchema(zoneOf(req).id, req.params.schema_id);
    return bare();
  });
  router.add({ method: 'GET', path: `${gw}/user_schemas/:schema_id/bola`, operationId: 'outpost-api-gateway-bola-get', summary: 'BOLA detection on the schema operations', auth: read, params: SCHEMA, tags }, async (req) =>
    (await store.getSchema(zoneOf(req).id, req.params.schema_id)).bola,
  );
  router.add({ method: 'PATCH', path: `${gw}/user_schemas/:schema_id/bola`, operationId: 'outpost-api-gateway-bola-patch', summary: 'Turn BOLA detection on or off ({enabled}, optional min_sessions)', auth: edit, params: SCHEMA, body: z.object({ enabled: z.boolean(), min_sessions: z.number().int().min(1).max(1_000_000).optional() }), tags }, async (req) =>
    (await store.editSchema(zoneOf(req).id, req.params.schema_id, (s) => ({ ...s, bola: { enabled: req.body.enabled, min_sessions: req.body.min_sessions ?? s.bola.min_sessions } }))).bola,
  );
  // Answered without a result wrapper: the official client reads these fields at the top level.
  const schemaValidationView = (s: Settings) =>
    bare({
      validation_default_mitigation_action: s.schema_validation.validation_default_mitigation_action,
      validation_override_mitigation_action: s.schema_validation.validation_override_mitigation_action ?? null,
    });
  const Override = z.enum(['none', 'disable_override']).nullable();
  router.add({ method: 'GET', path: `${gw}/settings/schema_validation`, operationId: 'api-shield-settings-retrieve-information-about-specific-configuration-properties-schema-validation', summary: 'What happens to requests that break their schema', auth: read, tags }, async (req) => schemaValidationView(await store.settings(zoneOf(req).id)));
  router.add({ method: 'PUT', path: `${gw}/settings/schema_validation`, operationId: 'api-shield-settings-set-schema-validation', summary: 'Set the action for requests that break their schema (none, log, block) and the zone override (none skips validation)', auth: edit, body: z.object({ validation_default_mitigation_action: z.enum(['none', 'log', 'block']), validation_override_mitigation_action: Override.optional() }), tags }, async (req) =>
    schemaValidationView(await store.updateSettings(zoneOf(req).id, (s) => ({ ...s, schema_validation: { validation_default_mitigation_action: req.body.validation_default_mitigation_action, validation_override_mitigation_action: req.body.validation_override_mitigation_action === 'none' ? 'none' : null } }))),
  );
  router.add({ method: 'PATCH', path: `${gw}/settings/schema_validation`, operationId: 'api-shield-settings-edit-schema-validation', summary: 'Change the default action or the zone override; a field that is absent or null is left as it is, disable_override clears the override', auth: edit, body: z.object({ validation_default_mitigation_action: z.enum(['none', 'log', 'block']).nullable().optional(), validation_override_mitigation_action: Override.optional() }), tags }, async (req) =>
    schemaValidationView(await store.updateSettings(zoneOf(req).id, (s) => {
      const { validation_default_mitigation_action: action, validation_override_mitigation_action: override } = req.body;
      const current = s.schema_validation;
      return {
        ...s,
        schema_validation: {
          validation_default_mitigation_action: action ?? current.validation_default_mitigation_action,
          validation_override_mitigation_action: override === 'none' ? 'none' : override === 'disable_override' ? null : (current.validation_override_mitigation_action ?? null),
        },
      };
    })),
  );

  // --- token validation: configurations --------------------------------------------------------
  const createConfig = async (zoneId: string, b: z.infer<typeof TokenConfigBody>) =>
    publicView(await store.createTokenConfig(zoneId, { title: b.title, description: b.description, token_type: 'JWT', token_sources: checkSources(b.token_sources), credentials: { keys: await checkKeys(b.credentials.keys) } }));
  router.add({ method: 'GET', path: `${tv}/config`, operationId: 'token-validation-config-list', summary: 'List token validation configurations', auth: read, query: ListPage, tags }, async (req) =>
    pageOf((await store.listTokenConfigs(zoneOf(req).id)).map(publicView), req.query),
  );
  router.add({ method: 'POST', path: `${tv}/config`, operationId: 'token-validation-config-create', summary: 'Create a token validation configuration', auth: edit, body: TokenConfigBody, tags }, async (req) => createConfig(zoneOf(req).id, req.body));
  router.add({ method: 'GET', path: `${tv}/config/:config_id`, operationId: 'token-validation-config-get', summary: 'Get a token validation configuration', auth: read, params: CFG, tags }, async (req) =>
    publicView(await store.getTokenConfig(zoneOf(req).id, req.params.config_id)),
  );
  router.add({ method: 'PATCH', path: `${tv}/config/:config_id`, operationId: 'token-validation-config-edit', summary: 'Edit title, description or token sources', auth: edit, params: CFG, body: TokenConfigEdit, tags }, async (req) => {
    const b = req.body;
    const cfg = await store.editTokenConfig(zoneOf(req).id, req.params.config_id, { title: b.title, description: b.description, token_sources: b.token_sources ? checkSources(b.token_sources) : undefined });
    return { id: cfg.id, title: cfg.title, description: cfg.description, token_sources: cfg.token_sources };
  });
  router.add({ method: 'PUT', path: `${tv}/config/:config_id/credentials`, operationId: 'token-validation-config-credentials-update', summary: 'Replace the key set', auth: edit, params: CFG, body: z.object({ keys: z.array(Key) }), tags }, async (req) => {
    const cfg = await store.editTokenConfig(zoneOf(req).id, req.params.config_id, { credentials: { keys: await checkKeys(req.body.keys) } });
    return bare({ keys: publicView(cfg).credentials.keys });
  });
  router.add({ method: 'PATCH', path: `${tv}/config/:config_id/credentials`, operationId: 'token-validation-config-credentials-edit', summary: 'Replace the key set; a symmetric key sent without k keeps the material stored under its kid', auth: edit, params: CFG, body: z.object({ keys: z.array(Key) }), tags }, async (req) => {
    const zoneId = zoneOf(req).id;
    const stored = await store.getTokenConfig(zoneId, req.params.config_id);
    const keys = req.body.keys.map((key, i) => {
      if (key.kty !== 'oct' || key.k !== undefined) return key;
      const old = stored.credentials.keys.find((s) => s.kty === 'oct' && s.kid !== undefined && s.kid === key.kid && s.alg === key.alg);
      if (!old) throw apiError('api_gateway_invalid', `keys[${i}].k is required: the configuration holds no ${String(key.alg)} key with kid ${JSON.stringify(key.kid ?? null)}`);
      return { ...key, k: old.k };
    });
    const cfg = await store.editTokenConfig(zoneId, req.params.config_id, { credentials: { keys: await checkKeys(keys) } });
    return bare({ keys: publicView(cfg).credentials.keys });
  });
  router.add({ method: 'DELETE', path: `${tv}/config/:config_id`, operationId: 'token-validation-config-delete', summary: 'Delete a token validation configuration', auth: edit, params: CFG, tags }, async (req) => {
    await store.deleteTokenConfig(zoneOf(req).id, req.params.config_id);
    return { id: req.params.config_id };
  });
  // The spec's form of the same store.
  router.add({ method: 'GET', path: `${gw}/token_validation`, operationId: 'outpost-api-gateway-token-validation-list', summary: 'List token validation configurations (spec form)', auth: read, query: ListPage, tags }, async (req) =>
    pageOf((await store.listTokenConfigs(zoneOf(req).id)).map(publicView), req.query),
  );
  router.add({ method: 'POST', path: `${gw}/token_validation`, operationId: 'outpost-api-gateway-token-validation-create', summary: 'Create a token validation configuration from {name, location, jwks}', auth: edit, body: SpecTokenConfig, tags }, async (req) =>
    createConfig(zoneOf(req).id, { title: req.body.name, description: '', token_type: 'JWT', token_sources: [headerSource(req.body.location.header)], credentials: { keys: parseJwksText(req.body.jwks) } }),
  );
  router.add({ method: 'PATCH', path: `${gw}/token_validation/:config_id`, operationId: 'outpost-api-gateway-token-validation-edit', summary: 'Replace the key set from {jwks}', auth: edit, params: CFG, body: z.object({ jwks: z.string().max(64 * 1024) }), tags }, async (req) =>
    publicView(await store.editTokenConfig(zoneOf(req).id, req.params.config_id, { credentials: { keys: await checkKeys(parseJwksText(req.body.jwks)) } })),
  );

  // --- token validation: rules -------------------------------------------------------------------
  const createRule = (zoneId: string, b: z.infer<typeof TokenRuleBody>): Promise<TokenRule> => {
    checkExpression(b.expression);
    return store.createTokenRule(zoneId, { ...b, selector: { include: b.selector.include ?? undefined, exclude: b.selector.exclude ?? undefined } });
  };
  router.add({ method: 'GET', path: `${tv}/rules`, operationId: 'token-validation-rules-list', summary: 'List token validation rules', auth: read, query: ListPage, tags }, async (req) => pageOf(await store.listTokenRules(zoneOf(req).id), req.query));
  router.add({ method: 'POST', path: `${tv}/rules`, operationId: 'token-validation-rules-create', summary: 'Create a token validation rule', auth: edit, body: TokenRuleBody, tags }, async (req) => createRule(zoneOf(req).id, req.body));
  const selectorOf = (selector: z.infer<typeof Selector>) => ({ include: selector.include ?? undefined, exclude: selector.exclude ?? undefined });
  router.add({ method: 'POST', path: `${tv}/rules/bulk`, operationId: 'token-validation-rules-bulk-create', summary: 'Create several token validation rules (all or none)', auth: edit, body: z.array(TokenRuleBody).min(1).max(100), tags }, async (req) => {
    for (const [i, b] of req.body.entries()) checkExpression(b.expression, `[${i}].expression`);
    return store.createTokenRules(zoneOf(req).id, req.body.map((b) => ({ ...b, selector: selectorOf(b.selector) })));
  });
  router.add({ method: 'PATCH', path: `${tv}/rules/bulk`, operationId: 'token-validation-rules-bulk-edit', summary: 'Edit several token validation rules by id (all or none)', auth: edit, body: z.array(TokenRuleEdit.extend({ id: z.uuid() })).min(1).max(100), tags }, async (req) => {
    for (const [i, b] of req.body.entries()) if (b.expression) checkExpression(b.expression, `[${i}].expression`);
    return store.editTokenRules(zoneOf(req).id, req.body.map(({ id, selector, ...rest }) => ({ id, patch: { ...rest, selector: selector ? selectorOf(selector) : undefined } })));
  });
  router.add({ method: 'GET', path: `${tv}/rules/:rule_id`, operationId: 'token-validation-rules-get', summary: 'Get a token validation rule', auth: read, params: RULE, tags }, async (req) => store.getTokenRule(zoneOf(req).id, req.params.rule_id));
  router.add({ method: 'PATCH', path: `${tv}/rules/:rule_id`, operationId: 'token-validation-rules-edit', summary: 'Edit a token validation rule', auth: edit, params: RULE, body: TokenRuleEdit, tags }, async (req) => {
    if (req.body.expression) checkExpression(req.body.expression);
    const { selector, ...rest } = req.body;
    return store.editTokenRule(zoneOf(req).id, req.params.rule_id, { ...rest, selector: selector ? { include: selector.include ?? undefined, exclude: selector.exclude ?? undefined } : undefined });
  });
  router.add({ method: 'DELETE', path: `${tv}/rules/:rule_id`, operationId: 'token-validation-rules-delete', summary: 'Delete a token validation rule', auth: edit, params: RULE, tags }, async (req) => {
    await store.deleteTokenRule(zoneOf(req).id, req.params.rule_id);
    return { id: req.params.rule_id };
  });
  router.add({ method: 'GET', path: `${gw}/jwt_validation_rules`, operationId: 'outpost-api-gateway-jwt-validation-rules-list', summary: 'List JWT validation rules (spec form)', auth: read, query: ListPage, tags }, async (req) => pageOf(await store.listTokenRules(zoneOf(req).id), req.query));
  router.add({ method: 'POST', path: `${gw}/jwt_validation_rules`, operationId: 'outpost-api-gateway-jwt-validation-rules-create', summary: 'Create a JWT validation rule from {name, hostname, token_validation_id, action}', auth: edit, body: SpecRule, tags }, async (req) => {
    const b = req.body;
    if (!/^[0-9a-f-]{36}$/.test(b.token_validation_id)) throw apiError('token_config_not_found', b.token_validation_id);
    await store.getTokenConfig(zoneOf(req).id, b.token_validation_id);
    const rule = await createRule(zoneOf(req).id, {
      title: b.name,
      description: '',
      action: b.action,
      enabled: true,
      expression: `is_jwt_valid(http.request.jwt.payload["${b.token_validation_id}"][0])`,
      selector: { include: [{ host: [b.hostname.toLowerCase()] }] },
    });
    return { ...rule, name: rule.title, hostname: b.hostname.toLowerCase(), token_validation_id: b.token_validation_id };
  });
}
