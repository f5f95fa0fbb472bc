/** Discovered operations as OpenAPI 3.0 documents, one per host (the `GET /discovery` export). */
import type { DiscoveredOperation } from './store.ts';

export function openapiOf(ops: DiscoveredOperation[], zoneName: string): object[] {
  const byHost = new Map<string, DiscoveredOperation[]>();
  for (const o of ops) byHost.set(o.host, [...(byHost.get(o.host) ?? []), o]);
  return [...byHost.entries()].map(([host, list]) => {
    const paths: Record<string, Record<string, unknown>> = {};
    for (const o of list) {
      // OpenAPI has no CONNECT operation.
      if (o.method === 'CONNECT') continue;
      const params = [...o.endpoint.matchAll(/\{(var\d+)\}/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
      (paths[o.endpoint] ??= {})[o.method.toLowerCase()] = {
        operationId: o.id,
        summary: `${o.method} ${o.endpoint} (${o.state}, ${o.features.traffic_stats.requests} requests seen)`,
        ...(params.length > 0 ? { parameters: params } : {}),
        responses: { default: { description: 'Response as seen at the origin' } },
      };
    }
    return {
      openapi: '3.0.0',
      info: { title: `Discovered operations of ${host} (zone ${zoneName})`, version: '1.0' },
      servers: [{ url: `https://${host}` }],
      paths,
    };
  });
}
