/** The snippet rules seen as the `http_request_snippets` phase entry point ruleset. */
import { stableId } from '../../core/ids.ts';
import type { SnippetRule } from './store.ts';

export const SNIPPETS_PHASE = 'http_request_snippets';

/** The rules as a ruleset document of the snippets phase. */
export function entrypointView(zoneId: string, rules: SnippetRule[]): Record<string, unknown> {
  const lastUpdated = rules.reduce((a, r) => (r.last_updated > a ? r.last_updated : a), '');
  return {
    id: stableId(`snippets-entrypoint:${zoneId}`),
    name: 'default',
    description: '',
    kind: 'zone',
    phase: SNIPPETS_PHASE,
    version: '1',
    last_updated: lastUpdated,
    rules: rules.map((r) => ({
      id: r.id,
      version: '1',
      action: 'execute',
      action_parameters: { id: r.snippet_name },
      expression: r.expression,
      description: r.description,
      enabled: r.enabled,
      last_updated: r.last_updated,
      ref: r.id,
    })),
  };
}
