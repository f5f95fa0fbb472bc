/**
 * Wildcard patterns for the `wildcard` / `strict wildcard` operators and `wildcard_replace()`.
 *
 * `*` matches any run of bytes, including an empty one; `\*` is a literal star and `\\` a literal
 * backslash (any other escape is invalid); two unescaped stars in a row are rejected, as on the
 * platform. There is no `?` metacharacter. The whole value must match. `wildcard` compares ASCII
 * letters case-insensitively, `strict wildcard` exactly.
 *
 * Matching splits the pattern at its stars into literal segments L0 * L1 * … * Lk: the value must
 * start with L0 and end with Lk, and the middle segments are placed left-most in order inside what
 * remains. Left-most placement is optimal (a later placement never leaves more room), so this is
 * O(value × pattern) with no backtracking, and the gaps it leaves are exactly the lazy captures
 * `wildcard_replace()` substitutes for `${1}`, `${2}`, ….
 */

import { asciiLower } from './types.ts';

export class WildcardError extends Error {
  constructor(
    message: string,
    readonly offset: number,
  ) {
    super(message);
    this.name = 'WildcardError';
  }
}

export interface WildcardPattern {
  /** The pattern as written (bytes). */
  readonly source: string;
  /** Literal segments between stars; `stars + 1` entries. */
  readonly segments: readonly string[];
  readonly stars: number;
  readonly caseSensitive: boolean;
  match(value: string): boolean;
  /** Capture spans [start, end) for each star, or null when the value does not match. */
  captures(value: string): Array<[number, number]> | null;
}

export function compileWildcard(pattern: string, caseSensitive: boolean): WildcardPattern {
  const segments: string[] = [];
  let current = '';
  let lastWasStar = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '\\') {
      const next = pattern[i + 1];
      if (next === '*' || next === '\\') {
        current += next;
        i++;
        lastWasStar = false;
        continue;
      }
      throw new WildcardError(
        next === undefined
          ? 'invalid wildcard: trailing backslash'
          : `invalid wildcard: "\\${next}" is not a valid escape (use \\* or \\\\)`,
        i,
      );
    }
    if (c === '*') {
      if (lastWasStar) throw new WildcardError('wildcard contains a double star (**)', i - 1);
      segments.push(current);
      current = '';
      lastWasStar = true;
      continue;
    }
    current += c;
    lastWasStar = false;
  }
  segments.push(current);
  const segs = caseSensitive ? segments : segments.map(asciiLower);
  const stars = segs.length - 1;
  const fold = caseSensitive ? (s: string) => s : asciiLower;

  const locate = (raw: string): Array<[number, number]> | null => {
    const text = fold(raw);
    if (stars === 0) return text === segs[0] ? [] : null;
    const head = segs[0];
    const tail = segs[stars];
    const tailStart = text.length - tail.length;
    if (tailStart < head.length) return null;
    if (!text.startsWith(head) || !text.endsWith(tail)) return null;
    const spans: Array<[number, number]> = [];
    let pos = head.length;
    for (let i = 1; i < stars; i++) {
      const seg = segs[i];
      const at = seg === '' ? pos : text.indexOf(seg, pos);
      if (at < 0 || at + seg.length > tailStart) return null;
      spans.push([pos, at]);
      pos = at + seg.length;
    }
    spans.push([pos, tailStart]);
    return spans;
  };

  return {
    source: pattern,
    segments: segs,
    stars,
    caseSensitive,
    match: (value) => locate(value) !== null,
    captures: locate,
  };
}

/**
 * `wildcard_replace(source, pattern, replacement, flags)`: when the whole source matches, returns the
 * replacement with `${n}` / `$n` replaced by the n-th star's capture (1-based, up to 8) and `$$` by
 * `$`; otherwise the source unchanged.
 */
export function wildcardReplace(
  pattern: WildcardPattern,
  source: string,
  replacement: string,
): string {
  const spans = pattern.captures(source);
  if (!spans) return source;
  let out = '';
  for (let i = 0; i < replacement.length;) {
    const c = replacement[i];
    if (c !== '$') {
      out += c;
      i++;
      continue;
    }
    if (replacement[i + 1] === '$') {
      out += '$';
      i += 2;
      continue;
    }
    const m = /^(?:\{(\d+)\}|(\d+))/.exec(replacement.slice(i + 1));
    if (!m) {
      out += '$';
      i++;
      continue;
    }
    const n = Number(m[1] ?? m[2]);
    const span = spans[n - 1];
    if (span) out += source.slice(span[0], span[1]);
    i += 1 + m[0].length;
  }
  return out;
}
