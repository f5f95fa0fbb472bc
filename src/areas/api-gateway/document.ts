/**
 * Reading an uploaded OpenAPI text, JSON or YAML, into one plain document (objects, arrays,
 * strings, numbers, booleans, null) so that everything after it — validation at the edge, the
 * schema's operations and hosts — cannot tell which form was uploaded.
 *
 * YAML is read by the `yaml` library with the YAML 1.2 core schema (the JSON-compatible one: no
 * timestamps, no `yes`/`no` booleans) and `<<` merge keys. It is untrusted, so: explicit tags
 * other than the core ones (`!!binary`, `!!python/…`, `!custom`) are refused rather than read
 * as strings; one document per text; duplicate keys are refused; nesting is measured on the
 * parser's stack as it reads, so a deeply nested text is refused before anything recursive sees
 * it; aliases are bounded by count while the document is built (a "billion laughs" stops there)
 * and by the size of the expanded document afterwards (an anchor may not multiply a document
 * past the size a JSON upload may have); an alias inside its own anchor is refused.
 */
import { Lexer, parseDocument, Parser } from 'yaml';
import { apiError } from '../../core/errors.ts';

/** The largest schema text, and the largest document once YAML aliases are expanded. */
export const MAX_SCHEMA_BYTES = 2 * 1024 * 1024;
/** Levels of nesting a document may have; real OpenAPI documents stay far below it. */
export const MAX_DEPTH = 128;
/** Alias expansions (weighted by the aliases inside each anchor) that building a YAML document may do. */
const MAX_ALIASES = 1000;

const invalid = (message: string) => apiError('api_gateway_invalid', message);

/** The text as a plain document; 400 naming what is wrong (with line and column for YAML). */
export function readDocument(text: string): unknown {
  const body = text.replace(/^\uFEFF/, '');
  let doc: unknown;
  if (/^\s*[{[]/.test(body)) {
    try {
      doc = JSON.parse(body);
    } catch (err) {
      // A flow-style YAML document (`{openapi: 3.0.0, …}`) starts the same way.
      try {
        doc = readYaml(body);
      } catch {
        throw invalid(`the schema is not valid JSON: ${(err as Error).message}`);
      }
    }
  } else {
    doc = readYaml(body);
  }
  checkShape(doc);
  return doc;
}

function readYaml(text: string): unknown {
  checkYamlNesting(text);
  const doc = parseDocument(text, { schema: 'core', merge: true, resolveKnownTags: false, uniqueKeys: true, prettyErrors: true, logLevel: 'error' });
  // Unresolved tags are only warnings to the library; here they are refused.
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem) {
    const at = problem.linePos?.[0];
    const what = problem.code === 'MULTIPLE_DOCS' ? 'the schema must be one YAML document' : problem.code === 'TAG_RESOLVE_FAILED' ? `${problem.message.split(' at line ')[0]} (only plain YAML is read: no explicit tags)` : problem.message.split(' at line ')[0];
    throw invalid(`the schema is not valid YAML: ${at ? `line ${at.line}, column ${at.col}: ` : ''}${what}`);
  }
  try {
    return doc.toJS({ maxAliasCount: MAX_ALIASES });
  } catch (err) {
    if (err instanceof ReferenceError) throw invalid(`the schema expands YAML aliases too often (more than ${MAX_ALIASES} expansions)`);
    throw invalid(`the schema is not valid YAML: ${(err as Error).message}`);
  }
}

/**
 * Runs the YAML parser (which keeps an explicit stack, so any depth is safe here) and stops as
 * soon as its stack is deeper than a document may nest: the library's later passes recurse.
 */
function checkYamlNesting(text: string): void {
  const parser = new Parser();
  // The stack holds the document, then one entry per level of nesting; the margin leaves the
  // exact verdict to checkShape, which counts the same levels for JSON and YAML alike.
  const limit = MAX_DEPTH + 8;
  for (const lexeme of new Lexer().lex(text)) {
    for (const _ of parser.next(lexeme));
    if (parser.stack.length > limit) throw invalid(`the schema nests deeper than ${MAX_DEPTH} levels`);
  }
}

/**
 * Walks the document without recursion: its depth, its size as JSON with every alias expanded,
 * and no value inside itself.
 */
function checkShape(doc: unknown): void {
  type Entry = { value: unknown; depth: number; leave?: true };
  const onPath = new Set<object>();
  const stack: Entry[] = [{ value: doc, depth: 0 }];
  let size = 0;
  while (stack.length > 0) {
    const { value, depth, leave } = stack.pop()!;
    if (leave) {
      onPath.delete(value as object);
      continue;
    }
    if (typeof value === 'string') size += value.length + 3;
    else if (typeof value !== 'object' || value === null) size += String(value).length + 1;
    else {
      if (depth >= MAX_DEPTH) throw invalid(`the schema nests deeper than ${MAX_DEPTH} levels`);
      if (onPath.has(value)) throw invalid('the schema contains itself (a YAML alias inside its own anchor)');
      onPath.add(value);
      stack.push({ value, depth, leave: true });
      size += 2;
      if (Array.isArray(value)) for (const v of value) stack.push({ value: v, depth: depth + 1 });
      else {
        for (const [k, v] of Object.entries(value)) {
          size += k.length + 3;
          stack.push({ value: v, depth: depth + 1 });
        }
      }
    }
    if (size > MAX_SCHEMA_BYTES) throw invalid(`the schema is larger than 2 MB once its YAML aliases are expanded`);
  }
}
