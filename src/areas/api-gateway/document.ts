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
import { Composer, Lexer, LineCounter, Parser, type CST } from 'yaml';
import { apiError } from '../../core/errors.ts';

/** The largest schema text, and the largest document once YAML aliases are expanded. */
export const MAX_SCHEMA_BYTES = 2 * 1024 * 1024;
/** Levels of nesting a document may have; real OpenAPI documents stay far below it. */
export const MAX_DEPTH = 128;
/** Alias expansions (weighted by the aliases inside each anchor) that building a YAML document may do. */
const MAX_ALIASES = 1000;

const invalid = (message: string) => apiError('api_gateway_invalid', message);

/**
 * The text as a plain document; 400 naming what is wrong (with line and column for YAML).
 * `stored`: the text is a stored schema's, so the document read from it may be kept (see below).
 */
export function readDocument(text: string, stored = false): unknown {
  const body = text.replace(/^\uFEFF/, '');
  if (!/^\s*[{[]/.test(body)) return readYaml(body, stored);
  let doc: unknown;
  try {
    doc = JSON.parse(body);
  } catch (err) {
    // A flow-style YAML document (`{openapi: 3.0.0, …}`) starts the same way.
    try {
      return readYaml(body, stored);
    } catch {
      throw invalid(`the schema is not valid JSON: ${(err as Error).message}`);
    }
  }
  checkShape(doc);
  return doc;
}

/**
 * Reading YAML costs some fifty times what JSON.parse does (about a second for a 1 MB document),
 * and a stored schema is read again at each edge configuration load and each hosts or operations
 * listing; a stored text never changes, so the documents read from the stored texts used last are
 * kept, up to this many characters of text (uploads are not kept: they may be refused). Callers
 * only read the documents.
 */
const YAML_MEMO_CHARS = 8 * 1024 * 1024;
const yamlMemo = new Map<string, unknown>();
let yamlMemoChars = 0;

function readYaml(text: string, stored: boolean): unknown {
  const known = yamlMemo.get(text);
  if (known !== undefined) {
    // Most recently used last.
    yamlMemo.delete(text);
    yamlMemo.set(text, known);
    return known;
  }
  const doc = composeYaml(text);
  checkShape(doc);
  if (stored && text.length <= YAML_MEMO_CHARS) {
    yamlMemo.set(text, doc);
    yamlMemoChars += text.length;
    for (const old of yamlMemo.keys()) {
      if (yamlMemoChars <= YAML_MEMO_CHARS) break;
      yamlMemo.delete(old);
      yamlMemoChars -= old.length;
    }
  }
  return doc;
}

function composeYaml(text: string): unknown {
  const lines = new LineCounter();
  const fault = (pos: number, what: string) => {
    const at = lines.linePos(pos);
    return invalid(`the schema is not valid YAML: line ${at.line}, column ${at.col}: ${what}`);
  };
  // The parser keeps an explicit stack, so any depth is safe while it reads; it is stopped as soon
  // as the stack is deeper than a document may nest, because composing the document recurses.
  // The stack holds the document, then one entry per level of nesting; the margin leaves the
  // exact verdict to checkShape, which counts the same levels for JSON and YAML alike.
  const parser = new Parser(lines.addNewLine);
  const limit = MAX_DEPTH + 8;
  const tokens: CST.Token[] = [];
  lines.addNewLine(0);
  for (const lexeme of new Lexer().lex(text)) {
    for (const token of parser.next(lexeme)) tokens.push(token);
    if (parser.stack.length > limit) throw invalid(`the schema nests deeper than ${MAX_DEPTH} levels`);
  }
  for (const token of parser.end()) tokens.push(token);
  const docs = [...new Composer({ schema: 'core', merge: true, resolveKnownTags: false, uniqueKeys: true, logLevel: 'error' }).compose(tokens, true, text.length)];
  const doc = docs[0];
  if (!doc) return null;
  if (docs.length > 1) throw fault(docs[1].range[0], 'the schema must be one YAML document');
  // Unresolved tags are only warnings to the library; here they are refused.
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem) throw fault(problem.pos[0], problem.code === 'TAG_RESOLVE_FAILED' ? `${problem.message} (only plain YAML is read: no explicit tags)` : problem.message);
  try {
    return doc.toJS({ maxAliasCount: MAX_ALIASES });
  } catch (err) {
    if (err instanceof ReferenceError) throw invalid(`the schema expands YAML aliases too often (more than ${MAX_ALIASES} expansions)`);
    throw invalid(`the schema is not valid YAML: ${(err as Error).message}`);
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
