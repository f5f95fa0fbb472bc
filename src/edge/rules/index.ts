/**
 * @module edge/rules — the rules language (the platform's dialect of the open-source wirefilter
 * grammar), used by rulesets, snippets and token-validation rules. See `parser.ts` for the grammar,
 * `fields.ts` for the scheme, `functions.ts` for the functions, `regex.ts` for how regular
 * expressions are kept linear-ish.
 *
 * Aliases: the spec's `edge.` prefix is accepted everywhere the platform writes `cf.`
 * (`edge.api_gateway.auth_id_present` ≡ `cf.api_gateway.auth_id_present`), as is the label form
 * `edge-risk-…` for `cf-risk-…`, and the spec's `edge.api_gateway.fallthrough_triggered` for
 * `cf.api_gateway.fallthrough_detected`.
 *
 * Extension points: `registerField(name, type, {compute})` adds fields, `registerFunction()` adds
 * functions, `setListResolver()` resolves `$list` names, `setJwtValidator()` backs `is_jwt_valid()`,
 * and `RequestContext.set()` lets a later stage fill a field for one request.
 *
 * LIMITATIONS: see the module comments of `regex.ts` (regex dialect differences) and
 * `functions.ts` (lenient literal arguments, phase restrictions not enforced).
 */

import { clearRuleCache, compileRule } from './compile.ts';
import { RuleSyntaxError } from './errors.ts';
import type { ParseOptions } from './parser.ts';
import { setListResolver as setResolver, type ListResolver } from './scheme.ts';

export { RuleSyntaxError } from './errors.ts';
export {
  compileRule,
  compileAst,
  clearRuleCache,
  setRuleCacheSize,
  ruleCacheSize,
  type CompiledRule,
} from './compile.ts';
export {
  parseRule,
  type RuleAst,
  type ParseOptions,
  type BoolNode,
  type ValueNode,
} from './parser.ts';
export {
  buildRequestContext,
  RequestContext,
  type RequestInput,
  type HeaderInput,
} from './context.ts';
export {
  registerField,
  lookupField,
  listFields,
  canonicalFieldName,
  getListResolver,
  setJwtValidator,
  getJwtValidator,
  type FieldDef,
  type RegisterFieldOptions,
  type RuleList,
  type ListResolver,
  type ListItemType,
  type JwtValidator,
  type JwtValidationRequest,
} from './scheme.ts';
export {
  registerFunction,
  lookupFunction,
  listFunctions,
  type FunctionDef,
  type FunctionImpl,
  type ArgInfo,
} from './functions.ts';
export { createStaticList } from './ranges.ts';
export { normalizePath } from './fields.ts';
export {
  BOOL,
  INT,
  BYTES,
  IP,
  arrayOf,
  mapOf,
  parseType,
  typeName,
  displayType,
  parseIp,
  formatIp,
  textToBytes,
  bytesToText,
  type Type,
  type IpAddr,
} from './types.ts';
export { compileRegex, RegexError, LINEAR_FALLBACK_ENABLED, type RegexProgram } from './regex.ts';
export { compileWildcard, WildcardError, type WildcardPattern } from './wildcard.ts';

export type ValidationResult = { ok: true } | { ok: false; error: RuleSyntaxError };

/** Checks an expression without throwing (for 400 answers at save time). */
export function validateRule(expression: string, options: ParseOptions = {}): ValidationResult {
  try {
    compileRule(expression, options);
    return { ok: true };
  } catch (err) {
    if (err instanceof RuleSyntaxError) return { ok: false, error: err };
    throw err;
  }
}

/** Installs the process-wide `$list` resolver and drops rules compiled against the previous one. */
export function setListResolver(resolver: ListResolver | undefined): void {
  setResolver(resolver);
  clearRuleCache();
}
