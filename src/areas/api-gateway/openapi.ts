/**
 * Operations as OpenAPI 3.0 documents, one per host: the discovery export (`GET /discovery`) and
 * the saved operations (`GET /schemas`).
 */
import type { HttpMethod } from './endpoints.ts';
import type { DiscoveredOperation, Operation } from './store.ts';

/** What one OpenAPI operation is made from. */
export interface ExportedOperation {
  id: string;
  method: HttpMethod;
  host: string;
  endpoint: string;
  summary: string;
  description: string;
}

export function openapiOf(ops: DiscoveredOperation[], zoneName: string): object[] {
  return documents(
    ops.map((o) => ({ id: o.id, method: o.method, host: o.host, endpoint: o.endpoint, summary: `${o.method} ${o.endpoint} (${o.state}, ${o.features.traffic_stats.requests} requests seen)`, description: 'Response as seen at the origin' })),
    (host) => `Discovered operations of ${host} (zone ${zoneName})`,
  );
}

/** The zone's saved operations (optionally only some hosts' ones) as OpenAPI documents. */
export function openapiOfOperations(ops: Operation[], zoneName: string): object[] {
  return documents(
    ops.map((o) => ({ id: o.operation_id, method: o.method, host: o.host, endpoint: o.endpoint, summary: `${o.method} ${o.endpoint}`, description: 'Response of the origin' })),
    (host) => `Operations of ${host} (zone ${zoneName})`,
  );
}

function documents(ops: ExportedOperation[], title: (host: string) => string): object[] {
  const byHost = new Map<string, ExportedOperation[]>();
  for (const o of ops) byHost.set(o.host, [...(byHost.get(o.host) ?? []), o]);
  return [...byHost.entries()].map(([host, list]) => {
    const paths: Record<string, Record<string, unknown>> = {};
    for (const o of list) {
      // OpenAPI has no CONNECT operation.
      if (o.method === 'CONNECT') continue;
      const params = [...o.endpoint.matchAll(/\{(var\d+)\}/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
      (paths[o.endpoint] ??= {})[o.method.toLowerCase()] = {
        operationId: o.id,
        summary: o.summary,
        ...(params.length > 0 ? { parameters: params } : {}),
        responses: { default: { description: o.description } },
      };
    }
    return {
      openapi: '3.0.0',
      info: { title: title(host), version: '1.0' },
      servers: [{ url: `https://${host}` }],
      paths,
    };
  });
}
