/**
 * Request validation for rulesets, reporting every problem in the rulesets failure shape:
 * `{code, message, source: {pointer: "/rules/0/expression"}}`. Bodies are read with zod for their
 * shape, then each rule is checked against its phase: allowed actions, the parameters of the
 * actions the edge runs (block, skip, route, execute), and the expression (parsed by the rules
 * language, so a bad expression is refused at save time with its position).
 */
import { z } from 'zod';
import { ApiError, CODES, type ErrorItem } from '../../core/errors.ts';
import { validateRule } from '../../edge/rules/index.ts';
import { managedRuleset, OVERRIDE_ACTIONS, SENSITIVITY_LEVELS } from './managed.ts';
import type { Kind } from './model.ts';
import type { Level, PhaseTable } from './phases.ts';

export type Problem = [pointer: string, message: string];

/** Throws the 400 answer for a list of problems (at most 20 reported). */
export function invalid(problems: Problem[]): ApiError {
  const items: ErrorItem[] = problems.slice(0, 20).map(([pointer, message]) => ({
    code: CODES.ruleset_invalid.code,
    message,
    source: { pointer },
  }));
  return new ApiError(CODES.ruleset_invalid.status, items);
}

function zodProblems(error: z.ZodError, base: string): Problem[] {
  return error.issues.map((issue) => {
    const pointer = base + issue.path.map((p) => `/${String(p)}`).join('');
    const field = issue.path.length > 0 ? String(issue.path[issue.path.length - 1]) : 'body';
    return [pointer, `${field}: ${issue.message}`];
  });
}

const Obj = z.record(z.string(), z.unknown());

const RuleShape = z.object({
  id: z.string().optional(),
  action: z.string().min(1, 'an action is required'),
  expression: z.string().min(1, 'an expression is required').max(4096, 'expressions are limited to 4096 characters'),
  description: z.string().max(500).optional(),
  enabled: z.boolean().optional(),
  action_parameters: Obj.optional(),
  logging: z.object({ enabled: z.boolean() }).optional(),
  ref: z.string().min(1).max(128).optional(),
  ratelimit: Obj.optional(),
});
export type RuleInput = z.infer<typeof RuleShape>;

/** The fields a PATCH of one rule may carry (all optional) plus where to move it. */
const RulePatchShape = RuleShape.partial();
export type RulePatch = z.infer<typeof RulePatchShape>;

const Position = z.union([
  z.strictObject({ before: z.string() }),
  z.strictObject({ after: z.string() }),
  z.strictObject({ index: z.number().int().min(1) }),
]);
export type Position = z.infer<typeof Position>;

const RulesetShape = z.object({
  name: z.string().max(256).optional(),
  description: z.string().max(500).optional(),
  kind: z.enum(['managed', 'custom', 'root', 'zone']).optional(),
  phase: z.string().optional(),
  rules: z.array(z.unknown()).optional(),
});

export interface RulesetInput {
  name?: string;
  description?: string;
  kind?: Kind;
  phase?: string;
  rules?: RuleInput[];
}

/** Reads a ruleset body (create, update or entry point PUT); rules are checked separately. */
export function parseRulesetBody(body: unknown): RulesetInput {
  if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw invalid([['', 'the request body must be a JSON object']]);
  }
  const parsed = RulesetShape.safeParse(body);
  if (!parsed.success) throw invalid(zodProblems(parsed.error, ''));
  const problems: Problem[] = [];
  const rules: RuleInput[] = [];
  (parsed.data.rules ?? []).forEach((r, i) => {
    const one = RuleShape.safeParse(r);
    if (one.success) rules.push(one.data);
    else problems.push(...zodProblems(one.error, `/rules/${i}`));
  });
  if (problems.length > 0) throw invalid(problems);
  return { ...parsed.data, rules: parsed.data.rules ? rules : undefined } as RulesetInput;
}

/** Reads the body of `POST …/rules`: a rule and an optional position. */
export function parseNewRule(body: unknown): { rule: RuleInput; position?: Position } {
  const obj = asObject(body);
  const problems: Problem[] = [];
  const rule = RuleShape.safeParse(obj);
  if (!rule.success) problems.push(...zodProblems(rule.error, ''));
  const position = obj.position === undefined ? undefined : Position.safeParse(obj.position);
  if (position && !position.success) problems.push(['/position', 'position: give exactly one of before (a rule id), after (a rule id) or index (from 1)']);
  if (problems.length > 0 || !rule.success) throw invalid(problems);
  return { rule: rule.data, position: position?.success ? position.data : undefined };
}

/** Reads the body of `PATCH …/rules/{rule_id}`. */
export function parseRulePatch(body: unknown): { patch: RulePatch; position?: Position } {
  const obj = asObject(body);
  const problems: Problem[] = [];
  const patch = RulePatchShape.safeParse(obj);
  if (!patch.success) problems.push(...zodProblems(patch.error, ''));
  const position = obj.position === undefined ? undefined : Position.safeParse(obj.position);
  if (position && !position.success) problems.push(['/position', 'position: give exactly one of before (a rule id), after (a rule id) or index (from 1)']);
  if (problems.length > 0 || !patch.success) throw invalid(problems);
  return { patch: patch.data, position: position?.success ? position.data : undefined };
}

function asObject(body: unknown): Record<string, unknown> {
  if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw invalid([['', 'the request body must be a JSON object']]);
  }
  return body as Record<string, unknown>;
}

// --- rule checks against the phase ------------------------------------------------------------

export interface RuleContext {
  phases: PhaseTable;
  phase: string;
  level: Level;
}

/** Problems of one rule in its phase; `at` is the rule's pointer (`/rules/3` or ``). */
export function checkRule(rule: RuleInput, ctx: RuleContext, at: string): Problem[] {
  const spec = ctx.phases.get(ctx.phase);
  if (!spec) return [[at || '/', `unknown phase ${ctx.phase}`]];
  const problems: Problem[] = [];
  if (!spec.actions.has(rule.action)) {
    problems.push([`${at}/action`, `'${rule.action}' is not a valid action for phase ${ctx.phase}; use one of: ${[...spec.actions].join(', ')}`]);
  } else {
    for (const [suffix, message] of checkActionParameters(rule.action, rule.action_parameters, ctx.phase)) {
      problems.push([`${at}/action_parameters${suffix}`, message]);
    }
  }
  if (rule.ratelimit !== undefined && ctx.phase !== 'http_ratelimit') {
    problems.push([`${at}/ratelimit`, 'ratelimit is only allowed in the http_ratelimit phase']);
  }
  if (spec.httpExpressions) {
    const parsed = validateRule(rule.expression);
    if (!parsed.ok) problems.push([`${at}/expression`, parseErrorMessage(rule.expression, parsed.error)]);
  }
  return problems;
}

/**
 * `Filter parsing error (line:column): message`, the column counted from 1 as the platform does.
 * A message the rules language already wrote in that form (with its excerpt and carets) is kept.
 */
export function parseErrorMessage(expression: string, error: { message: string; position: number }): string {
  if (/^Filter parsing error \(\d+:\d+\)/.test(error.message)) return error.message;
  const before = expression.slice(0, Math.max(0, Math.min(error.position, expression.length)));
  const lines = before.split('\n');
  return `Filter parsing error (${lines.length}:${lines[lines.length - 1].length + 1}): ${error.message}`;
}

/** Problems of `action_parameters` for an action, as `[pointer suffix, message]`. */
export function checkActionParameters(action: string, params: Record<string, unknown> | undefined, phase: string): Problem[] {
  switch (action) {
    case 'block':
      return checkBlock(params);
    case 'skip':
      return checkSkip(params);
    case 'route':
      return checkRoute(params);
    case 'execute':
      return checkExecute(params, phase);
    case 'challenge':
    case 'js_challenge':
    case 'managed_challenge':
    case 'log':
      return params && Object.keys(params).length > 0 ? [['', `the ${action} action takes no action_parameters`]] : [];
    default:
      // Actions of phases Outpost does not run are stored as given.
      return [];
  }
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function unknownKeys(obj: Record<string, unknown>, allowed: string[], at = ''): Problem[] {
  return Object.keys(obj)
    .filter((k) => !allowed.includes(k))
    .map((k): Problem => [`${at}/${k}`, `unknown parameter ${k}; allowed: ${allowed.join(', ')}`]);
}

const CONTENT_TYPES = ['text/html', 'text/plain', 'application/json', 'text/xml'];

function checkBlock(params: Record<string, unknown> | undefined): Problem[] {
  if (!params) return [];
  const problems = unknownKeys(params, ['response']);
  const response = params.response;
  if (response === undefined) return problems;
  if (!isObj(response)) return [...problems, ['/response', 'response must be an object {status_code, content, content_type}']];
  problems.push(...unknownKeys(response, ['status_code', 'content', 'content_type'], '/response'));
  const code = response.status_code;
  if (typeof code !== 'number' || !Number.isInteger(code) || code < 400 || code > 499) {
    problems.push(['/response/status_code', 'status_code must be an integer between 400 and 499']);
  }
  if (typeof response.content !== 'string') problems.push(['/response/content', 'content must be a string']);
  else if (Buffer.byteLength(response.content) > 10_240) problems.push(['/response/content', 'content is limited to 10240 bytes']);
  if (response.content_type !== undefined && (typeof response.content_type !== 'string' || !CONTENT_TYPES.includes(response.content_type))) {
    problems.push(['/response/content_type', `content_type must be one of: ${CONTENT_TYPES.join(', ')}`]);
  }
  return problems;
}

export const SKIP_PRODUCTS = ['bic', 'hot', 'rateLimit', 'securityLevel', 'uaBlock', 'waf', 'zoneLockdown'];
const HEX32 = /^[0-9a-f]{32}$/;

function checkSkip(params: Record<string, unknown> | undefined): Problem[] {
  if (!params || Object.keys(params).length === 0) {
    return [['', 'the skip action needs action_parameters: ruleset "current", phases, products, rulesets or rules']];
  }
  const problems = unknownKeys(params, ['ruleset', 'rulesets', 'phases', 'phase', 'products', 'rules']);
  const has = (k: string) => params[k] !== undefined;
  if (has('ruleset') && params.ruleset !== 'current') problems.push(['/ruleset', 'ruleset must be "current"']);
  if (has('phase') && params.phase !== 'current') problems.push(['/phase', 'phase must be "current"']);
  const stringList = (key: string, ok: (s: string) => boolean, what: string) => {
    const v = params[key];
    if (v === undefined) return;
    if (!Array.isArray(v) || v.length === 0) {
      problems.push([`/${key}`, `${key} must be a non-empty array`]);
      return;
    }
    v.forEach((item, i) => {
      if (typeof item !== 'string' || !ok(item)) problems.push([`/${key}/${i}`, `${String(item)} is not ${what}`]);
    });
  };
  stringList('phases', (s) => /^[a-z0-9_]+$/.test(s), 'a phase name');
  stringList('products', (s) => SKIP_PRODUCTS.includes(s), `a product (${SKIP_PRODUCTS.join(', ')})`);
  stringList('rulesets', (s) => HEX32.test(s), 'a ruleset id');
  if (has('rules')) {
    if (!isObj(params.rules) || Object.keys(params.rules).length === 0) {
      problems.push(['/rules', 'rules must map ruleset ids to lists of rule ids']);
    } else {
      for (const [rs, ids] of Object.entries(params.rules)) {
        if (!HEX32.test(rs)) problems.push([`/rules/${rs}`, `${rs} is not a ruleset id`]);
        if (!Array.isArray(ids) || ids.length === 0 || ids.some((x) => typeof x !== 'string')) {
          problems.push([`/rules/${rs}`, 'each entry must be a non-empty list of rule ids']);
        }
      }
    }
  }
  const conflicts: [string, string][] = [
    ['ruleset', 'rulesets'],
    ['phases', 'rulesets'],
    ['ruleset', 'rules'],
  ];
  for (const [a, b] of conflicts) if (has(a) && has(b)) problems.push([`/${b}`, `${b} cannot be combined with ${a}`]);
  if (has('phase') && Object.keys(params).some((k) => k !== 'phase' && k !== 'products')) {
    problems.push(['/phase', 'phase can only be combined with products']);
  }
  return problems;
}

const HOST = /^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$/i;
const isHost = (s: string) => HOST.test(s) || /^[0-9a-f:.]+$/i.test(s);

function checkRoute(params: Record<string, unknown> | undefined): Problem[] {
  if (!params || Object.keys(params).length === 0) {
    return [['', 'the route action needs action_parameters: host_header, origin {host, port} or sni {value}']];
  }
  const problems = unknownKeys(params, ['host_header', 'origin', 'sni']);
  if (params.host_header !== undefined && (typeof params.host_header !== 'string' || !HOST.test(params.host_header))) {
    problems.push(['/host_header', 'host_header must be a host name']);
  }
  if (params.origin !== undefined) {
    const o = params.origin;
    if (!isObj(o) || (o.host === undefined && o.port === undefined)) {
      problems.push(['/origin', 'origin must be an object with host and/or port']);
    } else {
      problems.push(...unknownKeys(o, ['host', 'port'], '/origin'));
      if (o.host !== undefined && (typeof o.host !== 'string' || !isHost(o.host))) problems.push(['/origin/host', 'host must be a host name or an IP address']);
      if (o.port !== undefined && (typeof o.port !== 'number' || !Number.isInteger(o.port) || o.port < 1 || o.port > 65535)) {
        problems.push(['/origin/port', 'port must be an integer between 1 and 65535']);
      }
    }
  }
  if (params.sni !== undefined) {
    const s = params.sni;
    if (!isObj(s) || typeof s.value !== 'string' || !HOST.test(s.value)) problems.push(['/sni', 'sni must be {value: <host name>}']);
    else problems.push(...unknownKeys(s, ['value'], '/sni'));
  }
  return problems;
}

function checkExecute(params: Record<string, unknown> | undefined, phase: string): Problem[] {
  if (!params || typeof params.id !== 'string') return [['/id', 'the execute action needs action_parameters.id, the id of a managed ruleset']];
  const problems = unknownKeys(params, ['id', 'overrides', 'matched_data', 'version']);
  const target = managedRuleset(params.id);
  if (!target) return [...problems, ['/id', `${params.id} is not a managed ruleset`]];
  if (target.phase !== phase) return [...problems, ['/id', `ruleset ${params.id} belongs to phase ${target.phase}, not ${phase}`]];
  const overrides = params.overrides;
  if (overrides === undefined) return problems;
  if (!isObj(overrides)) return [...problems, ['/overrides', 'overrides must be an object']];
  problems.push(...unknownKeys(overrides, ['action', 'enabled', 'sensitivity_level', 'categories', 'rules'], '/overrides'));
  const actions = OVERRIDE_ACTIONS[target.id] ?? [];
  const checkCommon = (o: Record<string, unknown>, at: string) => {
    if (o.action !== undefined && (typeof o.action !== 'string' || !actions.includes(o.action))) {
      problems.push([`${at}/action`, `action must be one of: ${actions.join(', ')}`]);
    }
    if (o.enabled !== undefined && typeof o.enabled !== 'boolean') problems.push([`${at}/enabled`, 'enabled must be a boolean']);
    if (o.sensitivity_level !== undefined && !(SENSITIVITY_LEVELS as readonly unknown[]).includes(o.sensitivity_level)) {
      problems.push([`${at}/sensitivity_level`, `sensitivity_level must be one of: ${SENSITIVITY_LEVELS.join(', ')}`]);
    }
  };
  checkCommon(overrides, '/overrides');
  const categories = new Set(target.rules.flatMap((r) => r.categories ?? []));
  if (overrides.categories !== undefined) {
    if (!Array.isArray(overrides.categories)) problems.push(['/overrides/categories', 'categories must be an array']);
    else {
      overrides.categories.forEach((c, i) => {
        const at = `/overrides/categories/${i}`;
        if (!isObj(c) || typeof c.category !== 'string') return void problems.push([at, 'each category override needs a category']);
        if (!categories.has(c.category)) problems.push([`${at}/category`, `${c.category} is not a category of ruleset ${target.id}; known: ${[...categories].join(', ')}`]);
        problems.push(...unknownKeys(c, ['category', 'action', 'enabled', 'sensitivity_level'], at));
        checkCommon(c, at);
      });
    }
  }
  if (overrides.rules !== undefined) {
    if (!Array.isArray(overrides.rules)) problems.push(['/overrides/rules', 'rules must be an array']);
    else {
      const ids = new Set(target.rules.map((r) => r.id));
      overrides.rules.forEach((r, i) => {
        const at = `/overrides/rules/${i}`;
        if (!isObj(r) || typeof r.id !== 'string') return void problems.push([at, 'each rule override needs an id']);
        if (!ids.has(r.id)) problems.push([`${at}/id`, `${r.id} is not a rule of ruleset ${target.id}`]);
        problems.push(...unknownKeys(r, ['id', 'action', 'enabled', 'sensitivity_level', 'score_threshold'], at));
        checkCommon(r, at);
        if (r.score_threshold !== undefined && (typeof r.score_threshold !== 'number' || !Number.isInteger(r.score_threshold))) {
          problems.push([`${at}/score_threshold`, 'score_threshold must be an integer']);
        }
      });
    }
  }
  return problems;
}

/** Checks kind and phase of a ruleset against the level it is created at. */
export function checkKindAndPhase(kind: Kind | undefined, phase: string | undefined, level: Level, phases: PhaseTable): Problem[] {
  const problems: Problem[] = [];
  if (!kind) problems.push(['/kind', 'kind is required: custom, root or zone']);
  else if (kind === 'managed') problems.push(['/kind', 'managed rulesets cannot be created']);
  else if (kind === 'root' && level !== 'account') problems.push(['/kind', "'root' rulesets exist only at account level; use 'zone' at zone level"]);
  else if (kind === 'zone' && level !== 'zone') problems.push(['/kind', "'zone' rulesets exist only at zone level; use 'root' at account level"]);
  if (!phase) problems.push(['/phase', 'phase is required']);
  else problems.push(...checkPhase(phase, level, phases, '/phase'));
  return problems;
}

export function checkPhase(phase: string, level: Level, phases: PhaseTable, at: string): Problem[] {
  const spec = phases.get(phase);
  if (!spec) return [[at, `'${phase}' is not a valid phase`]];
  if (!spec.levels.has(level)) return [[at, `phase ${phase} is not available at ${level} level`]];
  return [];
}
