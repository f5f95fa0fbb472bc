/**
 * Upload and rule checks that need no runtime: the snippet name, the multipart form (both the
 * spec's JSON `metadata` part and the official client's `metadata[main_module]` + `files[]`), the
 * 32 KB size limit, and the script shapes snippets refuse (`addEventListener`, `import`). Whether
 * the script parses and has a default export with `fetch` is checked by loading it.
 */
import { z } from 'zod';
import { ApiError, apiError, CODES } from '../../core/errors.ts';
import type { MultipartForm } from '../../core/multipart.ts';
import { compileRule, RuleSyntaxError } from '../../edge/rules/index.ts';
import type { SnippetFile } from './store.ts';

export const NAME = /^[a-z0-9_]{1,50}$/;
/** Path segment of the rules routes; never a snippet name. */
export const RESERVED_NAMES = new Set(['snippet_rules']);
export const MAX_BYTES = 32 * 1024;

export function checkName(name: string): void {
  if (!NAME.test(name) || RESERVED_NAMES.has(name))
    throw apiError('snippet_invalid_name', JSON.stringify(name));
}

function invalid(message: string): ApiError {
  return apiError('snippet_invalid', message);
}

/** Files and main module of an upload. */
export function filesOf(form: MultipartForm): { main_module: string; files: SnippetFile[] } {
  const byName = new Map<string, { type: string; data: Buffer }>();
  for (const f of form.files) {
    const name = f.filename || f.field;
    if (byName.has(name)) throw invalid(`file ${name} is uploaded twice`);
    byName.set(name, { type: f.type, data: f.data });
  }
  const declared = form.metadata.main_module;
  if (declared !== undefined && typeof declared !== 'string')
    throw invalid('metadata.main_module must be a string');
  let main: string | undefined = declared;
  // curl -F 'main.js=<file' sends the script as a plain field named after the file.
  const asField = main === undefined ? undefined : form.fields[main];
  if (main !== undefined && !byName.has(main) && typeof asField === 'string') {
    byName.set(main, { type: 'application/javascript+module', data: Buffer.from(asField) });
  }
  if (main === undefined) {
    if (byName.size !== 1)
      throw invalid('metadata.main_module is required: the name of the file holding the snippet');
    main = [...byName.keys()][0];
  }
  if (byName.size === 0)
    throw invalid(
      'the upload holds no file: send the script as a file part (files, or named by its file name)',
    );
  if (!byName.has(main))
    throw invalid(
      `metadata.main_module names ${main}, but no uploaded file has that name (files: ${[...byName.keys()].join(', ')})`,
    );
  let total = 0;
  const files: SnippetFile[] = [];
  for (const [name, f] of byName) {
    if (
      !/^[A-Za-z0-9_.-]{1,100}$/.test(name) ||
      name.startsWith('__snippet') ||
      name.startsWith('__outpost') ||
      name.includes('..')
    ) {
      throw invalid(`invalid file name ${JSON.stringify(name)}`);
    }
    total += f.data.length;
    files.push({
      name,
      type: f.type || 'application/javascript+module',
      content: f.data.toString('base64'),
    });
  }
  if (total > MAX_BYTES)
    throw invalid(`the snippet is ${total} bytes; the limit is ${MAX_BYTES} bytes (32 KB)`);
  checkSource(byName.get(main)!.data.toString('utf8'));
  return { main_module: main, files };
}

/** Shapes refused before the runtime sees the script. */
export function checkSource(source: string): void {
  const code = stripComments(source);
  const hasDefault =
    /\bexport\s+default\b/.test(code) || /\bexport\s*\{[^}]*\bas\s+default\b/.test(code);
  if (!hasDefault && /\baddEventListener\s*\(\s*['"`]fetch['"`]/.test(code)) {
    throw invalid(
      'addEventListener("fetch", …) scripts are not supported in snippets: use export default { async fetch(request) { … } }',
    );
  }
  if (
    /(^|[;}\n])\s*import\s*(?:[\w$*{][^;'"]*\bfrom\s*)?['"]/.test(code) ||
    /(^|[^.\w$])import\s*\(/.test(code) ||
    /(^|[;}\n])\s*export\s*(?:\*|\{[^}]*\})\s*from\s*['"]/.test(code)
  ) {
    throw invalid(
      'snippets cannot import modules (import declarations, import() and export … from are not supported)',
    );
  }
  if (!hasDefault)
    throw invalid(
      'a snippet needs a default export with a fetch(request) handler: export default { async fetch(request) { … } }',
    );
}

/** Removes comments (not strings), enough to keep commented-out code from tripping the checks. */
function stripComments(source: string): string {
  return source.replace(/\/\*[\s\S]*?\*\//g, ' ').replace(/(^|[^:'"\\])\/\/[^\n]*/g, '$1');
}

export const RuleInput = z.object({
  description: z.string().max(500).optional(),
  enabled: z.boolean().optional(),
  expression: z
    .string()
    .min(1, 'an expression is required')
    .max(4096, 'expressions are limited to 4096 characters'),
  snippet_name: z.string().min(1),
});
export const RulesBody = z.object({ rules: z.array(RuleInput).max(1000) });
export type RuleInput = z.infer<typeof RuleInput>;

/** Expression syntax, one rule per snippet; every problem reported with its pointer. */
export function checkRules(rules: RuleInput[]): void {
  const problems: { code: number; message: string; source: { pointer: string } }[] = [];
  const seen = new Set<string>();
  rules.forEach((r, i) => {
    try {
      compileRule(r.expression);
    } catch (err) {
      if (!(err instanceof RuleSyntaxError)) throw err;
      problems.push({
        code: CODES.snippet_rules_invalid.code,
        message: `rules[${i}].expression: ${err.message}`,
        source: { pointer: `/rules/${i}/expression` },
      });
    }
    if (seen.has(r.snippet_name)) {
      problems.push({
        code: CODES.snippet_rules_invalid.code,
        message: `rules[${i}].snippet_name: ${r.snippet_name} already has a rule (one rule per snippet)`,
        source: { pointer: `/rules/${i}/snippet_name` },
      });
    }
    seen.add(r.snippet_name);
  });
  if (problems.length > 0) throw new ApiError(CODES.snippet_rules_invalid.status, problems);
}
