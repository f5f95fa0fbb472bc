/**
 * Endpoint templates: renaming path variables to `{var1}`, `{var2}`… as the platform stores them,
 * normalising observed paths (ids, numbers, UUIDs, hashes → variables) for discovery, and matching
 * a request path against the stored templates.
 */
import { z } from 'zod';
import { apiError } from '../../core/errors.ts';

export const METHODS = ['GET', 'POST', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'CONNECT', 'PATCH', 'TRACE'] as const;
export type HttpMethod = (typeof METHODS)[number];

const HOSTNAME = /^(?=.{1,253}$)(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/i;

export const OperationInput = z.object({
  endpoint: z.string().max(4096),
  host: z.string().regex(HOSTNAME, 'host must be a host name'),
  method: z.enum(METHODS),
});
export type OperationInput = z.infer<typeof OperationInput>;

/** Renames path variables left to right to `{var1}`, `{var2}`…; 400 when the endpoint is not a path. */
export function templateEndpoint(endpoint: string): string {
  if (!endpoint.startsWith('/')) throw apiError('api_gateway_invalid', `endpoint must start with "/": ${JSON.stringify(endpoint.slice(0, 100))}`);
  if (/[{}]/.test(endpoint.replace(/\{[^{}/]*\}/g, ''))) throw apiError('api_gateway_invalid', `endpoint has an unbalanced "{" or "}": ${JSON.stringify(endpoint.slice(0, 100))}`);
  let n = 0;
  return endpoint.replace(/\{[^{}/]*\}/g, () => `{var${++n}}`);
}

const UUID_SEG = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const NUMBER_SEG = /^-?\d+(\.\d+)?$/;
const HEX_SEG = /^[0-9a-f]{16,128}$/i;
/** Opaque identifiers: long tokens that mix letters and digits (`a1B2c3D4e5F6`, base64url ids). */
const OPAQUE_SEG = /^(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{12,}$/;

/** Whether a path segment looks like an object identifier rather than a fixed name. */
export function isVariableSegment(seg: string): boolean {
  return NUMBER_SEG.test(seg) || UUID_SEG.test(seg) || HEX_SEG.test(seg) || OPAQUE_SEG.test(seg);
}

/** The templated form of an observed path (`/users/42/cards/7f…` → `/users/{var1}/cards/{var2}`), and the values. */
export function normalisePath(path: string): { endpoint: string; values: string[] } {
  const values: string[] = [];
  const segs = path.split('/').map((seg) => {
    let decoded = seg;
    try {
      decoded = decodeURIComponent(seg);
    } catch {
      /* keep as sent */
    }
    if (decoded !== '' && isVariableSegment(decoded)) {
      values.push(decoded);
      return `{var${values.length}}`;
    }
    return seg;
  });
  return { endpoint: segs.join('/') || '/', values };
}

/** A compiled template: matches a request path and returns the variable values. */
export interface TemplateMatcher {
  endpoint: string;
  match(path: string): string[] | undefined;
}

export function compileTemplate(endpoint: string): TemplateMatcher {
  const parts = endpoint.split(/(\{var\d+\})/);
  const source = parts.map((p) => (/^\{var\d+\}$/.test(p) ? '([^/]+)' : p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))).join('');
  const re = new RegExp(`^${source}/?$`);
  return {
    endpoint,
    match(path) {
      const m = re.exec(path);
      return m ? m.slice(1) : undefined;
    },
  };
}
