/**
 * Declarative routes. Each route states its method, path (as written in the spec), the permission
 * it needs and the zod schemas of its query and body; the router does the rest in one place, in
 * this order: authentication, rate limiting, identifier checks, authorisation against the resource in the path,
 * query and body parsing (JSON, size limit), validation, and the envelope. The same declarations
 * produce the OpenAPI document served at `/client/v4/openapi.json`.
 */
import type { Context, Hono } from 'hono';
import { z, type ZodType } from 'zod';
import { ApiError, apiError, CODES } from './errors.ts';
import { ok, Page } from './envelope.ts';
import { parseQuery, validate, validationError, type Query } from './validate.ts';
import { parseMultipart, type MultipartForm } from './multipart.ts';
import type { AuthService, Principal, Target } from './auth.ts';
import type { Level } from './permissions.ts';
import type { RateLimiter } from './ratelimit.ts';
import { HEX32, UUID } from './ids.ts';
import { parseJsonBody } from './json.ts';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'OPTIONS';

export type RouteAuth =
  /** A permission key, or several of which any one suffices (CNI: Magic WAN or Magic Transit). */
  | { permission: string | string[]; level: Level }
  /** No credentials needed. */
  | 'public'
  /** Any valid credential; the handler decides. */
  | 'authenticated'
  /** The handler authenticates by itself (relay key secrets, app secrets…). */
  | 'custom';

export type ParamFormat = 'hex32' | 'uuid' | 'any';

export interface RouteSpec<B extends ZodType | undefined, Q extends ZodType | undefined> {
  method: Method;
  path: string;
  operationId: string;
  summary: string;
  auth: RouteAuth;
  query?: Q;
  /** JSON body schema. With `bodyType: 'multipart'` the handler gets `form` instead. */
  body?: B;
  bodyType?: 'json' | 'multipart' | 'raw';
  /** Formats of path parameters; `account_id` and `zone_id` are 32-hex unless stated. */
  params?: Record<string, ParamFormat>;
  /**
   * With `auth: 'custom'`: authenticates the request (throwing 401) before anything else about it
   * is checked; what it returns reaches the handler as `req.authenticated`.
   */
  authenticate?: (c: Context, params: Record<string, string>) => Promise<unknown>;
  /** HTTP status of a success (default 200). */
  status?: number;
  tags?: string[];
}

export interface Req<B, Q> {
  c: Context;
  params: Record<string, string>;
  query: Q;
  body: B;
  form?: MultipartForm;
  raw?: Buffer;
  principal?: Principal;
  /** What the route's own `authenticate` returned (custom-auth routes). */
  authenticated?: unknown;
  /** Resources resolved from path parameters (e.g. the zone for `zone_id`). */
  resolved: Record<string, unknown>;
  rayId: string;
}

type Infer<S> = S extends ZodType ? z.output<S> : undefined;

export type Handler<B extends ZodType | undefined, Q extends ZodType | undefined> = (
  req: Req<Infer<B>, Infer<Q>>,
) => Promise<unknown>;

/**
 * Resolves a path parameter to the resource it names and the account/zone it belongs to; throws
 * a 404 ApiError when it does not exist. Registered by the area that owns the resource.
 */
export type ParamResolver = (id: string) => Promise<{ target: Target; value: unknown }>;

interface Registered {
  spec: RouteSpec<ZodType | undefined, ZodType | undefined>;
  pattern: RegExp;
}

const DEFAULT_FORMATS: Record<string, ParamFormat> = { account_id: 'hex32', zone_id: 'hex32' };

/** Marks a handler result that must be sent as-is (non-envelope bodies, binary, 204). */
export function raw(response: Response): Response {
  return response;
}

export class Router {
  readonly routes: Registered[] = [];
  private readonly resolvers = new Map<string, ParamResolver>();

  constructor(
    private readonly app: Hono,
    private readonly auth: AuthService,
    private readonly opts: { bodyLimit: number; rateLimiter?: RateLimiter; apiPrefix: string },
  ) {}

  /** Registers how a path parameter (`zone_id`, …) maps to its resource and scope. */
  resolveParam(name: string, resolver: ParamResolver): void {
    this.resolvers.set(name, resolver);
  }

  add<B extends ZodType | undefined = undefined, Q extends ZodType | undefined = undefined>(
    spec: RouteSpec<B, Q>,
    handler: Handler<B, Q>,
  ): void {
    const pattern = new RegExp('^' + spec.path.replace(/:[a-z_]+/gi, '[^/]+') + '/?$');
    this.routes.push({ spec: spec as RouteSpec<ZodType | undefined, ZodType | undefined>, pattern });
    this.app.on(spec.method, spec.path, async (c) => this.handle(c, spec, handler));
  }

  /** Methods registered for a path, for 405 answers. */
  methodsFor(path: string): Method[] {
    return this.routes.filter((r) => r.pattern.test(path)).map((r) => r.spec.method);
  }

  private async handle<B extends ZodType | undefined, Q extends ZodType | undefined>(
    c: Context,
    spec: RouteSpec<B, Q>,
    handler: Handler<B, Q>,
  ): Promise<Response> {
    const params = c.req.param() as Record<string, string>;

    // Credentials first: a request without valid ones gets 401 whatever its path and body.
    let principal: Principal | undefined;
    let authenticated: unknown;
    if (spec.auth === 'custom') {
      if (spec.authenticate) authenticated = await spec.authenticate(c, params);
    } else if (spec.auth !== 'public') {
      principal = await this.auth.authenticate(c.req.raw.headers, clientIp(c));
      const wait = this.opts.rateLimiter?.take(principal.id) ?? 0;
      if (wait > 0) {
        const err = apiError('rate_limited');
        throw new ApiError(err.status, err.errors, { 'retry-after': String(wait) });
      }
    }
    this.checkParams(c, spec, params);

    const resolved: Record<string, unknown> = {};
    if (typeof spec.auth === 'object' && principal) {
      const { level } = spec.auth;
      const keys = Array.isArray(spec.auth.permission) ? spec.auth.permission : [spec.auth.permission];
      // Without the permission anywhere, say so before revealing whether the resource exists.
      const held = keys.filter((k) => principal!.allows(k, level));
      if (held.length === 0) principal.require(keys[0], level);
      let target: Target | undefined;
      for (const [name, value] of Object.entries(params)) {
        const resolver = this.resolvers.get(name);
        if (name === 'account_id') target = { ...target, accountId: value };
        if (!resolver) continue;
        const r = await resolver(value);
        resolved[name] = r.value;
        target = { ...target, ...r.target };
      }
      if (!held.some((k) => principal!.allows(k, level, target))) principal.require(held[0], level, target);
    }

    const query = spec.query ? validate(spec.query, parseQuery(new URL(c.req.url).search), 'query') : undefined;
    const req: Req<Infer<B>, Infer<Q>> = {
      c,
      params,
      query: query as Infer<Q>,
      body: undefined as Infer<B>,
      principal,
      authenticated,
      resolved,
      rayId: c.get('rayId') as string,
    };
    if (spec.bodyType === 'multipart' || spec.bodyType === 'raw' || spec.body) {
      const buf = await readBody(c, this.opts.bodyLimit);
      if (spec.bodyType === 'multipart') req.form = parseMultipart(c.req.header('content-type'), buf);
      else if (spec.bodyType === 'raw') req.raw = buf;
      else req.body = validate(spec.body as ZodType, parseJson(buf), 'body') as Infer<B>;
    }

    const result = await handler(req);
    if (result instanceof Response) return result;
    const status = (spec.status ?? 200) as 200;
    if (result instanceof Page) return c.json(ok(result.items, result.info), status);
    return c.json(ok(result ?? null), status);
  }

  private checkParams(c: Context, spec: RouteSpec<ZodType | undefined, ZodType | undefined>, params: Record<string, string>): void {
    for (const [name, value] of Object.entries(params)) {
      const format = spec.params?.[name] ?? DEFAULT_FORMATS[name] ?? 'any';
      const okFormat = format === 'any' || (format === 'hex32' ? HEX32.test(value) : UUID.test(value));
      if (!okFormat) {
        const path = new URL(c.req.url).pathname;
        throw new ApiError(400, [
          { code: CODES.invalid_identifier.code, message: `Could not route to ${path}, perhaps your object identifier is invalid?` },
          { code: 7000, message: 'No route for that URI' },
        ]);
      }
    }
  }

  /** The OpenAPI 3.1 document generated from the registered routes. */
  openapi(info: { title: string; version: string; serverUrl: string }): unknown {
    const paths: Record<string, Record<string, unknown>> = {};
    for (const { spec } of this.routes) {
      const path = spec.path.replace(/:([a-z_]+)/gi, '{$1}');
      const parameters: unknown[] = [...spec.path.matchAll(/:([a-z_]+)/gi)].map((m) => ({
        name: m[1],
        in: 'path',
        required: true,
        schema: { type: 'string', ...(formatPattern(spec.params?.[m[1]] ?? DEFAULT_FORMATS[m[1]])) },
      }));
      if (spec.query) {
        const js = toJsonSchema(spec.query, 'input') as { properties?: Record<string, unknown>; required?: string[] };
        for (const [name, schema] of Object.entries(js.properties ?? {})) {
          parameters.push({ name, in: 'query', required: js.required?.includes(name) ?? false, schema });
        }
      }
      const op: Record<string, unknown> = {
        operationId: spec.operationId,
        summary: spec.summary,
        tags: spec.tags,
        parameters,
        security: spec.auth === 'public' ? [] : [{ api_token: [] }, { api_email: [], api_key: [] }],
        responses: {
          [String(spec.status ?? 200)]: { description: 'Success', content: { 'application/json': { schema: { $ref: '#/components/schemas/envelope' } } } },
          '4XX': { description: 'Failure envelope', content: { 'application/json': { schema: { $ref: '#/components/schemas/failure' } } } },
        },
      };
      if (typeof spec.auth === 'object') {
        const keys = Array.isArray(spec.auth.permission) ? spec.auth.permission : [spec.auth.permission];
        op['x-permission'] = keys.map((k) => `${k}:${(spec.auth as { level: Level }).level}`).join(' | ');
      }
      if (spec.body) op.requestBody = { required: true, content: { 'application/json': { schema: toJsonSchema(spec.body, 'input') } } };
      if (spec.bodyType === 'multipart') op.requestBody = { required: true, content: { 'multipart/form-data': { schema: { type: 'object' } } } };
      (paths[path] ??= {})[spec.method.toLowerCase()] = op;
    }
    return {
      openapi: '3.1.0',
      info: { title: info.title, version: info.version },
      servers: [{ url: info.serverUrl }],
      paths,
      components: {
        securitySchemes: {
          api_token: { type: 'http', scheme: 'bearer' },
          api_email: { type: 'apiKey', in: 'header', name: 'X-Auth-Email' },
          api_key: { type: 'apiKey', in: 'header', name: 'X-Auth-Key' },
        },
        schemas: {
          message: { type: 'object', required: ['code', 'message'], properties: { code: { type: 'integer', minimum: 1000 }, message: { type: 'string' } } },
          envelope: {
            type: 'object',
            required: ['success', 'errors', 'messages', 'result'],
            properties: {
              success: { const: true },
              errors: { type: 'array', items: { $ref: '#/components/schemas/message' } },
              messages: { type: 'array' },
              result: {},
              result_info: { type: 'object' },
            },
          },
          failure: {
            type: 'object',
            required: ['success', 'errors', 'messages', 'result'],
            properties: {
              success: { const: false },
              errors: { type: 'array', minItems: 1, items: { $ref: '#/components/schemas/message' } },
              messages: { type: 'array' },
              result: { type: 'null' },
            },
          },
        },
      },
    };
  }
}

/** The peer address of the request (the node-server binding's socket). */
function clientIp(c: Context): string | undefined {
  const env = c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined;
  return env?.incoming?.socket?.remoteAddress;
}

function formatPattern(format: ParamFormat | undefined): Record<string, string> {
  if (format === 'hex32') return { pattern: '^[0-9a-f]{32}$' };
  if (format === 'uuid') return { format: 'uuid' };
  return {};
}

function toJsonSchema(schema: ZodType, io: 'input' | 'output'): unknown {
  try {
    return z.toJSONSchema(schema, { io, unrepresentable: 'any' });
  } catch {
    return {};
  }
}

/** Reads the body, enforcing the size limit before and while reading. */
export async function readBody(c: Context, limit: number): Promise<Buffer> {
  const declared = Number(c.req.header('content-length') ?? NaN);
  if (Number.isFinite(declared) && declared > limit) throw apiError('body_too_large', limit);
  const stream = c.req.raw.body;
  if (!stream) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  let size = 0;
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      throw apiError('body_too_large', limit);
    }
    chunks.push(Buffer.from(value));
  }
  return Buffer.concat(chunks);
}

export function parseJson(buf: Buffer): unknown {
  if (buf.length === 0) return undefined;
  return parseJsonBody(buf);
}

export { validationError };
export type { Query };
