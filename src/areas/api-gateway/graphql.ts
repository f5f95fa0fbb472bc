/**
 * GraphQL query measurement as the platform defines it: size = number of terminal fields (leaves),
 * depth = the deepest level at which a leaf appears (`{a b(x){c d{e f}}}` → size 4, depth 3).
 * Only POST requests to a path ending in `/graphql`, with an `application/json` (`{"query": …}`)
 * or `application/graphql` body under 20 KB, holding one operation and no fragment spreads, are
 * measured; inline fragments (`... on T { }`) add no level.
 */
import { Kind, parse, type SelectionSetNode } from 'graphql';

export const GRAPHQL_MAX_BODY = 20 * 1024;

export interface GraphqlMeasure {
  parsed: boolean;
  depth: number;
  size: number;
}

/** Whether a request is one the platform parses (the body is checked by `measureGraphql`). */
export function isGraphqlCandidate(method: string, path: string, contentType: string, length: number): boolean {
  if (method !== 'POST' || !/\/graphql\/?$/.test(path)) return false;
  if (!(length > 0 && length < GRAPHQL_MAX_BODY)) return false;
  const type = contentType.split(';')[0].trim().toLowerCase();
  return type === 'application/json' || type === 'application/graphql';
}

export function measureGraphql(contentType: string, body: string): GraphqlMeasure {
  const none = { parsed: false, depth: 0, size: 0 };
  let query: unknown = body;
  if (contentType.split(';')[0].trim().toLowerCase() === 'application/json') {
    try {
      query = (JSON.parse(body) as { query?: unknown })?.query;
    } catch {
      return none;
    }
  }
  if (typeof query !== 'string') return none;
  let doc;
  try {
    doc = parse(query, { noLocation: true, maxTokens: 10_000 });
  } catch {
    return none;
  }
  const ops = doc.definitions.filter((d) => d.kind === Kind.OPERATION_DEFINITION);
  if (ops.length !== 1 || doc.definitions.length !== 1) return none;
  const m = { depth: 0, size: 0, fragments: false };
  walk(ops[0].selectionSet, 1, m);
  if (m.fragments) return none;
  return { parsed: true, depth: m.depth, size: m.size };
}

function walk(set: SelectionSetNode, level: number, m: { depth: number; size: number; fragments: boolean }): void {
  for (const sel of set.selections) {
    if (sel.kind === Kind.FRAGMENT_SPREAD) m.fragments = true;
    else if (sel.kind === Kind.INLINE_FRAGMENT) walk(sel.selectionSet, level, m);
    else if (sel.selectionSet && sel.selectionSet.selections.length > 0) walk(sel.selectionSet, level + 1, m);
    else {
      m.size++;
      if (level > m.depth) m.depth = level;
    }
  }
}
