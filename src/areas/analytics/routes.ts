/**
 * `POST|GET /accounts/{account_id}/analytics_engine/sql`: the SQL as the raw body (any content
 * type; a JSON-encoded string body is accepted too, as the official client sends one) or as
 * `?query=`. The answer is bare (no envelope): ClickHouse `FORMAT JSON` by default; errors of the
 * query are text/plain (400 parse or refused, 422 could not run, 504 time limit).
 */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { raw } from '../../core/router.ts';
import { qString } from '../../core/validate.ts';
import { MAX_QUERY_CHARS, type AnalyticsEngine } from './engine.ts';

export const ANALYTICS_PERMISSION = 'account_analytics';

const Query = z.object({ query: qString(z.string()).optional() });

function queryText(body: Buffer | undefined, fromQuery: string | undefined): string {
  let text = body && body.length > 0 ? body.toString('utf8') : (fromQuery ?? '');
  const trimmed = text.trim();
  if (trimmed.startsWith('"') && trimmed.endsWith('"')) {
    try {
      const decoded: unknown = JSON.parse(trimmed);
      if (typeof decoded === 'string') text = decoded;
    } catch {
      // not JSON: the SQL itself (a string literal that happens to be the whole query)
    }
  }
  return text;
}

export function mountAnalyticsRoutes(ctx: AreaContext, engine: () => AnalyticsEngine): void {
  const auth = { permission: ANALYTICS_PERMISSION, level: 'read' } as const;
  const tags = ['analytics_engine'];
  for (const method of ['POST', 'GET'] as const) {
    ctx.router.add(
      {
        method,
        path: '/accounts/:account_id/analytics_engine/sql',
        operationId: method === 'POST' ? 'analytics-engine-sql-query-post' : 'analytics-engine-sql-query-get',
        summary: 'Runs an SQL query over the account\'s analytics datasets',
        auth,
        query: Query,
        bodyType: 'raw',
        tags,
      },
      async ({ params, raw: body, query }) => {
        const text = queryText(body, query.query);
        if (text.length > MAX_QUERY_CHARS * 4)
          return raw(new Response(`Query too long; the limit is ${MAX_QUERY_CHARS} characters`, { status: 400, headers: { 'content-type': 'text/plain; charset=utf-8' } }));
        const answer = await engine().sql(params.account_id, text);
        return raw(new Response(answer.body, { status: answer.status, headers: { 'content-type': answer.contentType } }));
      },
    );
  }
}
