/**
 * The scheme: which fields exist, their types, and how a request context computes them; plus the
 * extension points later areas use (extra fields, named lists, the JWT validity hook).
 *
 * Names. The spec writes `edge.` where the platform writes `cf.`; both spellings resolve to the same
 * field (and the label form `edge-risk-…` to `cf-risk-…`), e.g. `edge.api_gateway.auth_id_present`
 * ≡ `cf.api_gateway.auth_id_present`. Fields registered with an `edge.` name are stored under the
 * `cf.` spelling. Extra aliases (legacy names such as `ip.geoip.country`) can be given at
 * registration.
 *
 * Each field owns a slot number so a compiled rule reads a context with an array index.
 */

import type { RequestContext } from './context.ts';
import { parseType, typeEquals, typeName, type IpAddr, type Type } from './types.ts';

export interface FieldDef {
  /** Canonical name (`cf.` spelling). */
  readonly name: string;
  readonly type: Type;
  /** Index into a request context's value cache. */
  readonly slot: number;
  /** Computes the value from a request context; absent → the value given in the context input, or the type's default. */
  compute?: (ctx: RequestContext) => unknown;
  /** True for fields whose host strings come from the HTTP layer (one char per byte). */
  wire?: boolean;
}

export interface RegisterFieldOptions {
  compute?: (ctx: RequestContext) => unknown;
  aliases?: readonly string[];
  wire?: boolean;
}

const fieldsByName = new Map<string, FieldDef>();
const fieldsBySlot: FieldDef[] = [];

/** Maps the spec's neutral spelling onto the platform's (`edge.x` → `cf.x`, `edge-risk-` → `cf-risk-`). */
export function canonicalFieldName(name: string): string {
  let n = name;
  if (n.startsWith('edge.')) n = `cf.${n.slice(5)}`;
  else if (n.startsWith('raw.edge.')) n = `raw.cf.${n.slice(9)}`;
  if (n.includes('edge-risk-')) n = n.replace(/edge-risk-/g, 'cf-risk-');
  return n;
}

/**
 * Adds a field to the scheme (or returns the existing one when name and type agree, updating its
 * compute function if one is given). Type names may use either spelling: `Bool`/`Boolean`,
 * `Int`/`Integer`, `Bytes`/`String`, `Ip`/`IP address`, `Array<…>`, `Map<…>`.
 */
export function registerField(
  name: string,
  type: Type | string,
  options: RegisterFieldOptions = {},
): FieldDef {
  const t = typeof type === 'string' ? parseType(type) : type;
  const canonical = canonicalFieldName(name);
  if (!/^[A-Za-z_][A-Za-z0-9_.-]*[A-Za-z0-9_]$/.test(canonical) || canonical.includes('..')) {
    throw new Error(`invalid field name "${name}"`);
  }
  let def = fieldsByName.get(canonical);
  if (def) {
    if (!typeEquals(def.type, t)) {
      throw new Error(
        `field "${canonical}" is already registered with type ${typeName(def.type)}, not ${typeName(t)}`,
      );
    }
    if (options.compute) def.compute = options.compute;
    if (options.wire !== undefined) def.wire = options.wire;
  } else {
    def = {
      name: canonical,
      type: t,
      slot: fieldsBySlot.length,
      compute: options.compute,
      wire: options.wire,
    };
    fieldsBySlot.push(def);
    fieldsByName.set(canonical, def);
  }
  for (const alias of options.aliases ?? []) {
    const a = canonicalFieldName(alias);
    const existing = fieldsByName.get(a);
    if (existing && existing !== def) throw new Error(`field alias "${alias}" is already in use`);
    fieldsByName.set(a, def);
  }
  return def;
}

export function lookupField(name: string): FieldDef | undefined {
  return fieldsByName.get(name) ?? fieldsByName.get(canonicalFieldName(name));
}

/** Every registered field once (aliases excluded). */
export function listFields(): readonly FieldDef[] {
  return fieldsBySlot;
}

export function fieldCount(): number {
  return fieldsBySlot.length;
}

// ---------------------------------------------------------------------------------------------
// Named lists (`ip.src in $office_network`)

/** The runtime type of a list's items: IP lists, integer (ASN) lists, string (hostname) lists. */
export type ListItemType = 'Ip' | 'Int' | 'Bytes';

export interface RuleList {
  readonly type: ListItemType;
  /** Called with the runtime value (IpAddr, number, or binary string). */
  contains(value: IpAddr | number | string): boolean;
}

/** Resolves `$name` at parse time; returning undefined makes the expression invalid. */
export type ListResolver = (name: string) => RuleList | undefined;

let globalListResolver: ListResolver | undefined;

/** Installs the process-wide list resolver used when `parseRule`/`compileRule` get none. */
export function setListResolver(resolver: ListResolver | undefined): void {
  globalListResolver = resolver;
}

export function getListResolver(): ListResolver | undefined {
  return globalListResolver;
}

// ---------------------------------------------------------------------------------------------
// is_jwt_valid() hook

export interface JwtValidationRequest {
  /** Configuration id when the argument names one (`http.request.jwt.payload["<id>"][0]` or a literal). */
  configId?: string;
  /** The evaluated argument (binary string), or undefined when missing. */
  value?: string;
  ctx: RequestContext;
}

export type JwtValidator = (req: JwtValidationRequest) => boolean;

let globalJwtValidator: JwtValidator | undefined;

/** Installs the hook behind `is_jwt_valid()` (the API gateway area supplies it). */
export function setJwtValidator(validator: JwtValidator | undefined): void {
  globalJwtValidator = validator;
}

export function getJwtValidator(): JwtValidator | undefined {
  return globalJwtValidator;
}
