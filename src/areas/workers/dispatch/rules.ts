/**
 * The `_redirects` and `_headers` files of a customer's static assets (sent by deploy tools as the
 * strings `assets.config._redirects` and `assets.config._headers`).
 *
 * `_redirects`: one rule a line, `<from> <to> [status]` (status 301, 302 (default), 303, 307, 308,
 * or 200 to serve `<to>` in place of `<from>` without a redirect). `<from>` is a path (or an
 * `https://host/path` URL) that may hold one `*` (the splat) and `:name` placeholders (one path
 * segment; one host label in a host); `<to>` may use `:splat` and `:name`. Rules without splat or
 * placeholder match first (the earliest line wins), then the first matching pattern in file order.
 * Limits: 2,000 static and 100 pattern rules, 2,000 characters a line.
 *
 * `_headers`: a path pattern on its own line (same syntax), then indented `Name: value` lines (a
 * value may use `:splat`/`:name`) and `! Name` lines that remove a header. Every matching rule
 * applies in file order; a header set by two rules gets both values. Limit 100 rules.
 *
 * A line that breaks these rules is refused at upload with its line number (the server does not
 * drop rules silently); `#` starts a comment.
 */
import { apiError } from '../../../core/errors.ts';

export const MAX_LINE = 2000;
export const MAX_STATIC_REDIRECTS = 2000;
export const MAX_DYNAMIC_REDIRECTS = 100;
export const MAX_HEADER_RULES = 100;
const STATUSES = new Set([200, 301, 302, 303, 307, 308]);
const PLACEHOLDER = /:([A-Za-z]\w*)/g;

interface Pattern {
  /** Matches `https://host/path` when the rule names a host, else the path. */
  withHost: boolean;
  re: RegExp;
}

export interface RedirectRule {
  from: string;
  to: string;
  status: number;
  line: number;
}

export interface HeaderRule {
  path: string;
  set: [string, string][];
  unset: string[];
}

export interface CompiledRules {
  staticRedirects: Map<string, RedirectRule>;
  dynamicRedirects: { rule: RedirectRule; pattern: Pattern }[];
  headers: { rule: HeaderRule; pattern: Pattern }[];
}

const fail = (file: string, line: number, message: string) =>
  apiError('worker_invalid', `metadata.assets.config.${file} line ${line}: ${message}`);

/** A path (`/…`) or an `https://host/…` URL, normalised; a reason string when it is neither. */
function checkUrl(
  token: string,
  allowHost: boolean,
  keepQuery: boolean,
): string | { error: string } {
  const m = /^https:\/\/([^/]+)(\/.*)?$/.exec(token);
  if (m) {
    if (!allowHost) return { error: `only paths starting with / are allowed here, got ${token}` };
    if (/:\d+$/.test(m[1])) return { error: `a port is not allowed in ${token}` };
    return `https://${m[1]}${m[2] ?? '/'}`;
  }
  if (!token.startsWith('/'))
    return {
      error: allowHost
        ? `expected a path starting with / or an https:// URL, got ${token}`
        : `expected a path starting with /, got ${token}`,
    };
  if (keepQuery) return token;
  return token.replace(/[?#].*$/, '');
}

/** A `from`/path pattern as a regular expression (named groups `splat` and each placeholder). */
function compilePattern(file: string, line: number, pattern: string): Pattern {
  const withHost = pattern.startsWith('https://');
  const stars = pattern.split('*').length - 1;
  if (stars > 1) throw fail(file, line, `at most one * (splat) in ${pattern}`);
  const names = new Set<string>();
  let hostEnd = withHost ? pattern.indexOf('/', 'https://'.length) : 0;
  if (hostEnd < 0) hostEnd = pattern.length;
  let src = '';
  let i = 0;
  while (i < pattern.length) {
    const ch = pattern[i];
    if (ch === '*') {
      src += '(?<splat>.*)';
      i++;
      continue;
    }
    PLACEHOLDER.lastIndex = i;
    const ph = ch === ':' ? PLACEHOLDER.exec(pattern) : null;
    if (ph && ph.index === i) {
      const name = ph[1];
      if (name === 'splat' || names.has(name))
        throw fail(file, line, `placeholder :${name} is used twice in ${pattern}`);
      names.add(name);
      src += i < hostEnd ? `(?<${name}>[^/.]+)` : `(?<${name}>[^/]+)`;
      i += ph[0].length;
      continue;
    }
    src += ch.replace(/[-/\\^$+?.()|[\]{}]/g, '\\$&');
    i++;
  }
  return { withHost, re: new RegExp(`^${src}$`) };
}

const isPattern = (p: string): boolean =>
  p.includes('*') || /:[A-Za-z]/.test(p.replace(/^https:/, ''));

/** The non-blank, non-comment lines of a rules file with their line numbers; over-long lines are refused. */
function* ruleLines(file: string, text: string): Generator<[number, string]> {
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line === '' || line.startsWith('#')) continue;
    if (line.length > MAX_LINE) throw fail(file, i + 1, `longer than ${MAX_LINE} characters`);
    yield [i + 1, line];
  }
}

export function parseRedirects(text: string): {
  staticRedirects: Map<string, RedirectRule>;
  dynamicRedirects: CompiledRules['dynamicRedirects'];
} {
  const F = '_redirects';
  const staticRedirects = new Map<string, RedirectRule>();
  const dynamicRedirects: CompiledRules['dynamicRedirects'] = [];
  const seen = new Set<string>();
  for (const [n, line] of ruleLines(F, text)) {
    const tokens = line.replace(/\s+#.*$/, '').split(/\s+/);
    if (tokens.length < 2 || tokens.length > 3)
      throw fail(F, n, `expected <from> <to> [status], got ${tokens.length} fields`);
    const from = checkUrl(tokens[0], true, false);
    if (typeof from !== 'string') throw fail(F, n, from.error);
    const to = checkUrl(tokens[1], true, true);
    if (typeof to !== 'string') throw fail(F, n, to.error);
    const status = Number(tokens[2] ?? '302');
    if (!STATUSES.has(status))
      throw fail(F, n, `status must be 200, 301, 302, 303, 307 or 308, got ${tokens[2]}`);
    if (status === 200 && to.startsWith('https://'))
      throw fail(F, n, `a 200 rule serves another path of the site; ${to} is not a path`);
    if (seen.has(from)) throw fail(F, n, `a second rule for ${from}`);
    seen.add(from);
    const rule: RedirectRule = { from, to, status, line: n };
    if (isPattern(from)) {
      if (dynamicRedirects.length >= MAX_DYNAMIC_REDIRECTS)
        throw fail(F, n, `more than ${MAX_DYNAMIC_REDIRECTS} rules with * or :placeholders`);
      dynamicRedirects.push({ rule, pattern: compilePattern(F, n, from) });
    } else {
      if (staticRedirects.size >= MAX_STATIC_REDIRECTS)
        throw fail(F, n, `more than ${MAX_STATIC_REDIRECTS} rules without * or :placeholders`);
      staticRedirects.set(from, rule);
    }
  }
  return { staticRedirects, dynamicRedirects };
}

export function parseHeaders(text: string): CompiledRules['headers'] {
  const F = '_headers';
  const out: CompiledRules['headers'] = [];
  let current: { rule: HeaderRule; pattern: Pattern; line: number } | undefined;
  const close = () => {
    if (!current) return;
    if (current.rule.set.length === 0 && current.rule.unset.length === 0)
      throw fail(F, current.line, `no headers follow ${current.rule.path}`);
    out.push({ rule: current.rule, pattern: current.pattern });
  };
  for (const [n, line] of ruleLines(F, text)) {
    if (/^(\/|[^\s]+:\/\/)/.test(line)) {
      close();
      if (out.length >= MAX_HEADER_RULES) throw fail(F, n, `more than ${MAX_HEADER_RULES} rules`);
      const path = checkUrl(line, true, false);
      if (typeof path !== 'string') throw fail(F, n, path.error);
      current = {
        rule: { path, set: [], unset: [] },
        pattern: compilePattern(F, n, path),
        line: n,
      };
      continue;
    }
    if (!current) throw fail(F, n, 'a path (starting with /) must come before its headers');
    if (line.startsWith('! ')) {
      const name = line.slice(2).trim().toLowerCase();
      if (!/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(name))
        throw fail(F, n, `${JSON.stringify(name)} is not a header name`);
      current.rule.unset.push(name);
      continue;
    }
    const colon = line.indexOf(':');
    if (colon < 0) throw fail(F, n, 'expected "Name: value" or "! Name"');
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (!/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(name))
      throw fail(F, n, `${JSON.stringify(name)} is not a header name`);
    if (value === '') throw fail(F, n, `no value for ${name}`);
    if (/[\r\n\0]/.test(value)) throw fail(F, n, `the value of ${name} holds a control character`);
    const prev = current.rule.set.find(([k]) => k === name);
    if (prev) prev[1] = `${prev[1]}, ${value}`;
    else current.rule.set.push([name, value]);
  }
  close();
  return out;
}

const cache = new WeakMap<object, CompiledRules>();

/** The compiled rules of a config (parsed once per stored config object). */
export function rulesOf(config: { _redirects?: string; _headers?: string }): CompiledRules {
  let r = cache.get(config);
  if (!r) {
    r = {
      ...parseRedirects(config._redirects ?? ''),
      headers: parseHeaders(config._headers ?? ''),
    };
    cache.set(config, r);
  }
  return r;
}

function substitute(text: string, groups: Record<string, string | undefined>): string {
  let out = text;
  for (const [k, v] of Object.entries(groups))
    if (v !== undefined) out = out.replaceAll(`:${k}`, v);
  return out;
}

const subject = (p: Pattern, url: URL): string =>
  p.withHost ? `https://${url.hostname}${url.pathname}` : url.pathname;

/** The redirect rule a request matches: `{status, to}` with placeholders filled in. */
export function matchRedirect(
  rules: CompiledRules,
  url: URL,
): { status: number; to: string } | undefined {
  const a = rules.staticRedirects.get(`https://${url.hostname}${url.pathname}`);
  const b = rules.staticRedirects.get(url.pathname);
  const hit = a && b ? (a.line < b.line ? a : b) : (a ?? b);
  if (hit) return { status: hit.status, to: hit.to };
  for (const { rule, pattern } of rules.dynamicRedirects) {
    const m = pattern.re.exec(subject(pattern, url));
    if (!m) continue;
    let to = substitute(rule.to, m.groups ?? {}).trim();
    if (!/^\w+:\/\//.test(to)) to = to.replace(/\/+/g, '/');
    return { status: rule.status, to };
  }
  return undefined;
}

/** The `Location` of a redirect: same-origin targets as a path; the request's query carried over. */
export function redirectLocation(to: string, requestUrl: URL): string {
  const dest = new URL(to, requestUrl);
  const search = dest.search || requestUrl.search;
  if (dest.origin === requestUrl.origin) return `${dest.pathname}${search}${dest.hash}`;
  return `${dest.origin}${dest.pathname}${search}${dest.hash}`;
}

/** Applies every matching `_headers` rule to a response's headers, in file order. */
export function applyHeaders(rules: CompiledRules, url: URL, headers: Headers): void {
  const set = new Set<string>();
  for (const { rule, pattern } of rules.headers) {
    const m = pattern.re.exec(subject(pattern, url));
    if (!m) continue;
    for (const name of rule.unset) headers.delete(name);
    for (const [name, value] of rule.set) {
      const v = substitute(value, m.groups ?? {});
      if (set.has(name)) headers.append(name, v);
      else {
        headers.set(name, v);
        set.add(name);
      }
    }
  }
}
