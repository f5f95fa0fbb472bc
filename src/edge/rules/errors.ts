/**
 * The one error type of the rules language. Every problem found while reading an expression
 * (lexing, unknown names, type checking, unsafe regular expressions) is a `RuleSyntaxError` that
 * carries the 0-based offset into the original text, a 1-based line and column, and a message whose
 * first line names the problem and whose next two lines show the offending line with carets under it,
 * in the same shape as the open-source engine's `Filter parsing error (line:col)` report.
 */

const EXCERPT_WIDTH = 96;

export class RuleSyntaxError extends Error {
  /** 0-based offset into the expression text. */
  readonly position: number;
  /** 1-based line of `position`. */
  readonly line: number;
  /** 1-based column of `position` (counted in UTF-16 code units, like JavaScript strings). */
  readonly column: number;
  /** Number of characters the caret run covers (at least 1). */
  readonly length: number;
  /** The problem alone, without position or excerpt. */
  readonly reason: string;
  /** The expression the error was found in. */
  readonly expression: string;

  constructor(expression: string, reason: string, position: number, length = 1) {
    const pos = Math.max(0, Math.min(position, expression.length));
    const lineStart = expression.lastIndexOf('\n', pos - 1) + 1;
    let lineEnd = expression.indexOf('\n', pos);
    if (lineEnd < 0) lineEnd = expression.length;
    let line = 1;
    for (let i = 0; i < lineStart; i++) if (expression.charCodeAt(i) === 10) line++;
    const column = pos - lineStart + 1;
    const span = Math.max(1, Math.min(length, Math.max(1, lineEnd - pos)));
    super(formatMessage(expression, reason, line, column, lineStart, lineEnd, pos, span));
    this.name = 'RuleSyntaxError';
    this.position = pos;
    this.line = line;
    this.column = column;
    this.length = span;
    this.reason = reason;
    this.expression = expression;
  }

  toJSON(): { message: string; position: number; line: number; column: number } {
    return { message: this.message, position: this.position, line: this.line, column: this.column };
  }
}

function formatMessage(
  expression: string,
  reason: string,
  line: number,
  column: number,
  lineStart: number,
  lineEnd: number,
  pos: number,
  span: number,
): string {
  let from = lineStart;
  let to = lineEnd;
  let prefix = '';
  let suffix = '';
  if (to - from > EXCERPT_WIDTH) {
    from = Math.max(lineStart, pos - Math.floor(EXCERPT_WIDTH / 2));
    to = Math.min(lineEnd, from + EXCERPT_WIDTH);
    if (from > lineStart) prefix = '…';
    if (to < lineEnd) suffix = '…';
  }
  const text = prefix + expression.slice(from, to).replace(/\t/g, ' ') + suffix;
  const caretAt = prefix.length + (pos - from);
  const carets = '^'.repeat(Math.max(1, Math.min(span, to - pos)));
  return `Filter parsing error (${line}:${column}): ${reason}\n${text}\n${' '.repeat(caretAt)}${carets}`;
}
