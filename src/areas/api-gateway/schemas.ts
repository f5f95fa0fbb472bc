/**
 * User schemas: OpenAPI 3.x documents (JSON or YAML, read by document.ts) whose operations requests are validated against —
 * path parameters, query parameters (required ones and their schemas) and JSON bodies, with Ajv
 * (OpenAPI's own keywords such as `nullable`, `example`, `xml` are ignored). `$ref`s into
 * `#/components` are resolved within the document. The host of each operation is the host of
 * the document's `servers[].url`.
 */
import { Ajv, type ValidateFunction } from 'ajv';
import { apiError } from '../../core/errors.ts';
import { readDocument } from './document.ts';
import { compileTemplate, METHODS, type HttpMethod, type TemplateMatcher } from './endpoints.ts';

export interface SchemaOperation {
  method: HttpMethod;
  host: string;
  /** The path as written in the document (`/orders/{orderId}`). */
  path: string;
  /** Templated (`/orders/{var1}`), as stored in operations. */
  endpoint: string;
  paramNames: string[];
  matcher: TemplateMatcher;
  pathParams: { name: string; validate?: ValidateFunction }[];
  query: { name: string; required: boolean; validate?: ValidateFunction }[];
  body?: { required: boolean; validate: ValidateFunction };
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parses the uploaded text (JSON or YAML; `stored`: a stored schema's); 400 naming what is wrong. */
export function parseOpenApi(text: string, stored = false): Obj {
  const doc = readDocument(text, stored);
  if (!isObj(doc) || typeof doc.openapi !== 'string' || !doc.openapi.startsWith('3.')) {
    // YAML reads an unquoted `openapi: 3.1` as a number; the field is a string in either form.
    const hint = isObj(doc) && typeof doc.openapi === 'number' ? ' (a string: quote it, openapi: "3.1.0")' : '';
    throw apiError('api_gateway_invalid', `the schema must be an OpenAPI 3.x document ("openapi": "3.…")${hint}`);
  }
  if (!isObj(doc.paths)) throw apiError('api_gateway_invalid', 'the schema has no "paths" object');
  const servers = Array.isArray(doc.servers) ? doc.servers : [];
  if (!servers.some((s) => isObj(s) && typeof s.url === 'string' && hostOf(s.url))) throw apiError('api_gateway_invalid', 'the schema must name its host in servers[].url (https://api.example.com)');
  return doc;
}

function hostOf(url: string): string | undefined {
  try {
    return new URL(url).hostname.toLowerCase() || undefined;
  } catch {
    return undefined;
  }
}

/** Rewrites local `$ref`s so they resolve against the document registered as `openapi`. */
function rebase(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(rebase);
  if (!isObj(schema)) return schema;
  const out: Obj = {};
  for (const [k, v] of Object.entries(schema)) out[k] = k === '$ref' && typeof v === 'string' && v.startsWith('#/') ? `openapi${v}` : rebase(v);
  return out;
}

function resolve(doc: Obj, v: unknown): unknown {
  let cur = v;
  for (let i = 0; i < 8 && isObj(cur) && typeof cur.$ref === 'string' && cur.$ref.startsWith('#/'); i++) {
    let node: unknown = doc;
    for (const seg of cur.$ref.slice(2).split('/')) node = isObj(node) ? node[seg.replace(/~1/g, '/').replace(/~0/g, '~')] : undefined;
    cur = node;
  }
  return cur;
}

/** The hosts a document's `servers` name, lower-cased, each once. */
export function schemaHosts(doc: Obj): string[] {
  const servers = Array.isArray(doc.servers) ? (doc.servers as Obj[]) : [];
  return [...new Set(servers.map((s) => hostOf(String(s.url))).filter((h): h is string => h !== undefined))];
}

/** Compiles every operation of a document; 400 when a schema in it does not compile. */
export function compileOpenApi(doc: Obj): SchemaOperation[] {
  const ajv = new Ajv({ strict: false, allErrors: false, validateFormats: false });
  ajv.addSchema({ components: doc.components ?? {} }, 'openapi');
  const compile = (schema: unknown, where: string): ValidateFunction | undefined => {
    if (!isObj(schema)) return undefined;
    try {
      return ajv.compile(rebase(schema) as Obj);
    } catch (err) {
      throw apiError('api_gateway_invalid', `${where}: the schema does not compile: ${(err as Error).message}`);
    }
  };
  const hosts = (doc.servers as Obj[]).map((s) => hostOf(String(s.url))).filter((h): h is string => h !== undefined);
  const ops: SchemaOperation[] = [];
  for (const [path, item] of Object.entries(doc.paths as Obj)) {
    if (!path.startsWith('/') || !isObj(item)) throw apiError('api_gateway_invalid', `paths: ${JSON.stringify(path)} must start with "/"`);
    const shared = Array.isArray(item.parameters) ? item.parameters : [];
    for (const method of METHODS) {
      const op = resolve(doc, item[method.toLowerCase()]);
      if (!isObj(op)) continue;
      const where = `${method} ${path}`;
      const params = [...shared, ...(Array.isArray(op.parameters) ? op.parameters : [])].map((p) => resolve(doc, p)).filter(isObj);
      const paramNames = [...path.matchAll(/\{([^{}/]+)\}/g)].map((m) => m[1]);
      let n = 0;
      const endpoint = path.replace(/\{[^{}/]*\}/g, () => `{var${++n}}`);
      let body: SchemaOperation['body'];
      const rb = resolve(doc, op.requestBody);
      if (isObj(rb) && isObj(rb.content)) {
        const json = Object.entries(rb.content).find(([type]) => /^application\/([a-z.+-]*\+)?json/i.test(type));
        const validate = json && isObj(json[1]) ? compile(json[1].schema, `${where} requestBody`) : undefined;
        if (validate) body = { required: rb.required === true, validate };
      }
      for (const host of hosts) {
        ops.push({
          method,
          host,
          path,
          endpoint,
          paramNames,
          matcher: compileTemplate(endpoint),
          pathParams: params.filter((p) => p.in === 'path').map((p) => ({ name: String(p.name), validate: compile(p.schema, `${where} parameter ${String(p.name)}`) })),
          query: params.filter((p) => p.in === 'query').map((p) => ({ name: String(p.name), required: p.required === true, validate: compile(p.schema, `${where} parameter ${String(p.name)}`) })),
          body,
        });
      }
    }
  }
  if (ops.length === 0) throw apiError('api_gateway_invalid', 'the schema has no operations');
  return ops;
}

/** A query/path value as the schema expects it (numbers and booleans from their text). */
function coerce(value: string): unknown[] {
  const out: unknown[] = [value];
  if (/^-?\d+(\.\d+)?$/.test(value)) out.push(Number(value));
  if (value === 'true' || value === 'false') out.push(value === 'true');
  return out;
}

/** Whether a request breaks its operation's schema (`body` undefined = not read). */
export function violates(op: SchemaOperation, pathValues: string[], query: URLSearchParams, contentType: string, body: Buffer | undefined, declaredLength: number): boolean {
  for (const [i, p] of op.pathParams.entries()) {
    const idx = op.paramNames.indexOf(p.name);
    const value = idx >= 0 ? pathValues[idx] : pathValues[i];
    if (p.validate && value !== undefined && !coerce(decodeURIComponent(value)).some((v) => p.validate!(v))) return true;
  }
  for (const q of op.query) {
    const value = query.get(q.name);
    if (value === null) {
      if (q.required) return true;
      continue;
    }
    if (q.validate && !coerce(value).some((v) => q.validate!(v))) return true;
  }
  if (op.body) {
    if (!(declaredLength > 0)) return op.body.required;
    if (!/^application\/([a-z.+-]*\+)?json/i.test(contentType)) return true;
    if (body === undefined) return false;
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch {
      return true;
    }
    if (!op.body.validate(parsed)) return true;
  }
  return false;
}
