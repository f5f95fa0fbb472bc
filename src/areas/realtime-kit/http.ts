/**
 * The meeting platform's REST shape on top of the shared router: `{success, data, paging?}` and
 * errors as `{success: false, error: {code, message}}` (the real API's form, not the v4 envelope).
 * The router still authenticates and checks the permission (its 401/403 answers keep the v4
 * envelope); everything after that — query, body, handler errors — is answered here.
 */
import type { Context } from 'hono';
import { z, type ZodType } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { ApiError, apiError } from '../../core/errors.ts';
import { parseJsonBody } from '../../core/json.ts';
import { parseQuery, validate, qInt } from '../../core/validate.ts';
import type { Method, ParamFormat } from '../../core/router.ts';
import type { Principal } from '../../core/auth.ts';

export const PERMISSION = 'realtime_kit';

export interface Paged<T> {
  items: T[];
  total: number;
  page: number;
  perPage: number;
}

export class Out {
  constructor(
    readonly data: unknown,
    readonly paging?: { total_count: number; start_offset: number; end_offset: number },
  ) {}
}

export function paged<T>(p: Paged<T>, wrap?: (items: T[]) => unknown): Out {
  const start = (p.page - 1) * p.perPage;
  return new Out(wrap ? wrap(p.items) : p.items, {
    total_count: p.total,
    start_offset: p.items.length ? start + 1 : start,
    end_offset: start + p.items.length,
  });
}

export const PageQuery = {
  page_no: qInt(z.number().int().min(1).max(100_000)).optional(),
  per_page: qInt(z.number().int().min(1).max(100)).optional(),
};

export function pageOf(q: { page_no?: number; per_page?: number }): { page: number; perPage: number; offset: number } {
  const page = q.page_no ?? 1;
  const perPage = q.per_page ?? 20;
  return { page, perPage, offset: (page - 1) * perPage };
}

export interface RtkReq<B, Q> {
  c: Context;
  params: Record<string, string>;
  body: B;
  query: Q;
  principal?: Principal;
}

export interface RtkSpec<B extends ZodType | undefined, Q extends ZodType | undefined> {
  method: Method;
  path: string;
  operationId: string;
  summary: string;
  level: 'read' | 'edit' | 'public';
  body?: B;
  /** The body may be empty (kick-all, token refresh…). */
  bodyOptional?: boolean;
  query?: Q;
  status?: number;
}

type Infer<S> = S extends ZodType ? z.output<S> : undefined;

export function reply(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...headers } });
}

function failure(err: ApiError): Response {
  const first = err.errors[0] ?? { code: err.status, message: err.message };
  // Validation failures list every issue; the real shape has one message, so they are joined.
  const message = err.errors.map((e) => e.message).join('; ') || first.message;
  return reply(err.status, { success: false, error: { code: err.status, message } }, err.headers);
}

const ANY: Record<string, ParamFormat> = { app_id: 'any', meeting_id: 'any', participant_id: 'any', session_id: 'any', webhook_id: 'any', preset_id: 'any', peer_id: 'any' };

export function route<B extends ZodType | undefined = undefined, Q extends ZodType | undefined = undefined>(
  ctx: AreaContext,
  spec: RtkSpec<B, Q>,
  handler: (req: RtkReq<Infer<B>, Infer<Q>>) => Promise<unknown>,
): void {
  ctx.router.add(
    {
      method: spec.method,
      path: spec.path,
      operationId: spec.operationId,
      summary: spec.summary,
      auth: spec.level === 'public' ? 'public' : { permission: PERMISSION, level: spec.level },
      bodyType: spec.body ? 'raw' : undefined,
      params: ANY,
      tags: ['realtime-kit'],
    },
    async (req) => {
      try {
        for (const [name, value] of Object.entries(req.params)) {
          if (name !== 'account_id' && !/^[A-Za-z0-9_.-]{1,128}$/.test(value)) throw apiError('rtk_invalid', `${name} is not a valid identifier`);
        }
        const query = spec.query ? validate(spec.query, parseQuery(new URL(req.c.req.url).search), 'query') : undefined;
        let body: unknown;
        if (spec.body) {
          const raw = req.raw ?? Buffer.alloc(0);
          const value = raw.length === 0 ? undefined : parseJsonBody(raw);
          body = value === undefined && spec.bodyOptional ? undefined : validate(spec.body, value ?? null, 'body');
          if (value === undefined && !spec.bodyOptional) throw apiError('rtk_invalid', 'body: a JSON object is required');
        }
        const out = await handler({ c: req.c, params: req.params, body: body as Infer<B>, query: query as Infer<Q>, principal: req.principal });
        if (out instanceof Response) return out;
        const status = spec.status ?? 200;
        if (out instanceof Out) return reply(status, { success: true, data: out.data, ...(out.paging ? { paging: out.paging } : {}) });
        return reply(status, { success: true, data: out });
      } catch (err) {
        if (err instanceof ApiError) return failure(err);
        throw err;
      }
    },
  );
}
