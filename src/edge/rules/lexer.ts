/**
 * Lexer for the rules language. The grammar is context dependent (after an IP field `10:20::1` is an
 * address, after a string field `10:20` is a byte string; a quoted string after `matches` keeps its
 * regex escapes), so instead of a token stream this is a cursor over the source that the parser asks
 * for the token kind it expects next. Every method leaves `pos` unchanged when it does not match.
 *
 * Literal syntax (from the open-source grammar):
 *   - quoted strings `"…"` with `\"`, `\\`, `\xHH` and `\OOO` (three octal digits) escapes;
 *   - raw strings `r"…"`, `r#"…"#` … up to 255 `#`, no escapes at all;
 *   - byte strings `01:02:ff` (two or more hex pairs separated by `:`, `-` or `.`);
 *   - integers: decimal, `0x` hex, leading-zero octal, optional `-`;
 *   - IPv4 / IPv6 addresses, `/bits` CIDR suffix, `a..b` ranges;
 *   - list references `$name`.
 * Whitespace is space, tab, CR and LF.
 */

import { RuleSyntaxError } from './errors.ts';
import { textToBytes } from './types.ts';

const IDENT = /[A-Za-z_][A-Za-z0-9_.]*/y;
const IDENT_DASHED = /[A-Za-z_][A-Za-z0-9_.-]*[A-Za-z0-9_]/y;
const INT = /-?(?:0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)(?![0-9A-Za-z_])/y;
const IPV4 = /\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?![0-9A-Za-z_:])/y;
const IPV6_WITH_V4 = /[0-9a-fA-F:]*:\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?![0-9A-Za-z_])/y;
const IPV6 = /[0-9a-fA-F]*:[0-9a-fA-F:]*(?![0-9A-Za-z_])/y;
const CIDR_BITS = /\/(\d{1,3})(?![0-9A-Za-z_])/y;
const HEX_BYTES = /[0-9a-fA-F]{2}(?:[:.-][0-9a-fA-F]{2})+(?![0-9A-Za-z_])/y;
const LIST_NAME = /\$([A-Za-z0-9_][A-Za-z0-9_.]*)/y;
const WORD_CHAR = /[A-Za-z0-9_]/;

export interface Spanned<T> {
  value: T;
  start: number;
  end: number;
}

export interface RegexSource extends Spanned<string> {
  /** Source offset of each character of `value` (for pointing errors inside the pattern). */
  offsets: number[];
}

export class Lexer {
  pos = 0;

  constructor(readonly src: string) {}

  error(reason: string, pos = this.pos, length = 1): never {
    throw new RuleSyntaxError(this.src, reason, pos, length);
  }

  eof(): boolean {
    return this.pos >= this.src.length;
  }

  peek(offset = 0): string {
    return this.src.charAt(this.pos + offset);
  }

  skipSpace(): void {
    const s = this.src;
    let p = this.pos;
    while (p < s.length) {
      const c = s.charCodeAt(p);
      if (c === 32 || c === 9 || c === 10 || c === 13) p++;
      else break;
    }
    this.pos = p;
  }

  startsWith(text: string): boolean {
    return this.src.startsWith(text, this.pos);
  }

  /** Consumes `text` if it comes next. */
  tryConsume(text: string): boolean {
    if (!this.src.startsWith(text, this.pos)) return false;
    this.pos += text.length;
    return true;
  }

  /** Consumes a keyword only when it is not the prefix of a longer word (`not` vs `notes`). */
  tryWord(word: string): boolean {
    if (!this.src.startsWith(word, this.pos)) return false;
    const after = this.src.charAt(this.pos + word.length);
    if (after && WORD_CHAR.test(after)) return false;
    this.pos += word.length;
    return true;
  }

  isWordAhead(word: string): boolean {
    if (!this.src.startsWith(word, this.pos)) return false;
    const after = this.src.charAt(this.pos + word.length);
    return !after || !WORD_CHAR.test(after);
  }

  private sticky(re: RegExp): RegExpExecArray | null {
    re.lastIndex = this.pos;
    return re.exec(this.src);
  }

  /** A dotted identifier (`http.request.uri.path`, `lower`). */
  peekIdentifier(): string | undefined {
    const m = this.sticky(IDENT);
    return m ? m[0] : undefined;
  }

  /** A dotted identifier that may contain `-` (`cf.api_gateway.cf-risk-mixed-auth`). */
  peekDashedIdentifier(): string | undefined {
    const m = this.sticky(IDENT_DASHED);
    return m ? m[0] : undefined;
  }

  peekInt(): Spanned<number> | undefined {
    const m = this.sticky(INT);
    if (!m) return undefined;
    const text = m[0];
    const neg = text.startsWith('-');
    const digits = neg ? text.slice(1) : text;
    let n: number;
    if (/^0[xX]/.test(digits)) n = parseInt(digits.slice(2), 16);
    else if (digits.length > 1 && digits.startsWith('0')) n = parseInt(digits.slice(1), 8);
    else n = Number(digits);
    if (neg) n = -n;
    if (!Number.isSafeInteger(n) && Math.abs(n) > 9223372036854775807) {
      this.error(`integer ${text} does not fit in a signed 64-bit integer`, this.pos, text.length);
    }
    return { value: n, start: this.pos, end: this.pos + text.length };
  }

  readInt(): Spanned<number> | undefined {
    const r = this.peekInt();
    if (r) this.pos = r.end;
    return r;
  }

  /** An IPv4 or IPv6 address token (without CIDR suffix), unparsed. */
  peekIpText(): Spanned<string> | undefined {
    const m = this.sticky(IPV4) ?? this.sticky(IPV6_WITH_V4) ?? this.sticky(IPV6);
    if (!m) return undefined;
    return { value: m[0], start: this.pos, end: this.pos + m[0].length };
  }

  /** A `/bits` suffix right at the cursor. */
  readCidrBits(): Spanned<number> | undefined {
    const m = this.sticky(CIDR_BITS);
    if (!m) return undefined;
    const r = { value: Number(m[1]), start: this.pos, end: this.pos + m[0].length };
    this.pos = r.end;
    return r;
  }

  /** `01:02:ff` → binary string. */
  readHexBytes(): Spanned<string> | undefined {
    const m = this.sticky(HEX_BYTES);
    if (!m) return undefined;
    const start = this.pos;
    this.pos += m[0].length;
    let out = '';
    for (let i = 0; i < m[0].length; i += 3) {
      out += String.fromCharCode(parseInt(m[0].slice(i, i + 2), 16));
    }
    return { value: out, start, end: this.pos };
  }

  readListName(): Spanned<string> | undefined {
    const m = this.sticky(LIST_NAME);
    if (!m) return undefined;
    const start = this.pos;
    this.pos += m[0].length;
    return { value: m[1], start, end: this.pos };
  }

  /** True when a quoted or raw string starts at the cursor. */
  atString(): boolean {
    const c = this.peek();
    if (c === '"') return true;
    if (c !== 'r') return false;
    const c2 = this.peek(1);
    return c2 === '"' || c2 === '#';
  }

  /** A quoted or raw string literal, as bytes (binary string). */
  readString(): Spanned<string> {
    const start = this.pos;
    if (this.peek() === '"') {
      this.pos++;
      return { value: this.readQuotedBody(start), start, end: this.pos };
    }
    if (this.peek() === 'r') {
      this.pos++;
      const text = this.readRawBody(start);
      return { value: textToBytes(text), start, end: this.pos };
    }
    return this.error('expected a string literal ("…" or r"…")');
  }

  /**
   * The right-hand side of `matches`: the regex source text. In a quoted string only `\"` (outside a
   * character class) loses its backslash — every other escape is handed to the regex engine as
   * written, and a `"` inside `[…]` does not end the string. Raw strings are taken verbatim.
   */
  readRegexSource(): RegexSource {
    const start = this.pos;
    if (this.peek() === 'r' && (this.peek(1) === '"' || this.peek(1) === '#')) {
      let hashes = 0;
      while (this.src[this.pos + 1 + hashes] === '#') hashes++;
      this.pos++;
      const text = this.readRawBody(start);
      const bodyStart = start + 2 + hashes;
      return {
        value: text,
        start,
        end: this.pos,
        offsets: Array.from({ length: text.length }, (_, i) => bodyStart + i),
      };
    }
    if (this.peek() !== '"')
      return this.error('expected a regular expression string ("…" or r"…")');
    const s = this.src;
    let p = this.pos + 1;
    let out = '';
    const offsets: number[] = [];
    let inClass = false;
    for (;;) {
      if (p >= s.length) this.error('could not find an ending quote', start);
      const c = s[p];
      if (c === '\\') {
        if (p + 1 >= s.length) this.error('could not find an ending quote', start);
        const next = s[p + 1];
        if (inClass || next !== '"') {
          out += '\\';
          offsets.push(p);
        }
        out += next;
        offsets.push(p + 1);
        p += 2;
        continue;
      }
      if (c === '"' && !inClass) break;
      if (c === '[' && !inClass) inClass = true;
      else if (c === ']' && inClass) inClass = false;
      out += c;
      offsets.push(p);
      p++;
    }
    this.pos = p + 1;
    return { value: out, start, end: this.pos, offsets };
  }

  private readQuotedBody(start: number): string {
    const s = this.src;
    let p = this.pos;
    let out = '';
    let runStart = p;
    const flush = (to: number) => {
      if (to > runStart) out += textToBytes(s.slice(runStart, to));
    };
    for (;;) {
      if (p >= s.length) this.error('could not find an ending quote', start);
      const c = s.charCodeAt(p);
      if (c === 34 /* " */) {
        flush(p);
        this.pos = p + 1;
        return out;
      }
      if (c !== 92 /* \ */) {
        p++;
        continue;
      }
      flush(p);
      const escPos = p;
      if (p + 1 >= s.length) this.error('could not find an ending quote', start);
      const e = s[p + 1];
      if (e === '"' || e === '\\') {
        out += e;
        p += 2;
      } else if (e === 'x') {
        const hex = s.slice(p + 2, p + 4);
        if (!/^[0-9a-fA-F]{2}$/.test(hex)) {
          this.error('invalid \\x escape: expected two hexadecimal digits', escPos, 2 + hex.length);
        }
        out += String.fromCharCode(parseInt(hex, 16));
        p += 4;
      } else if (e >= '0' && e <= '7') {
        const oct = s.slice(p + 1, p + 4);
        if (!/^[0-7]{3}$/.test(oct) || parseInt(oct, 8) > 255) {
          this.error(
            'invalid octal escape: expected three octal digits (\\000 to \\377)',
            escPos,
            4,
          );
        }
        out += String.fromCharCode(parseInt(oct, 8));
        p += 4;
      } else {
        this.error('invalid escape: expected \\", \\\\, \\xHH or \\OOO after \\', escPos, 2);
      }
      runStart = p;
    }
  }

  /** After the `r`: `#…#"…"#…#`, returns the text between the delimiters. */
  private readRawBody(start: number): string {
    const s = this.src;
    let p = this.pos;
    let hashes = 0;
    while (s[p] === '#') {
      hashes++;
      p++;
    }
    if (hashes > 255)
      this.error('a raw string may use at most 255 # characters', start, hashes + 1);
    if (s[p] !== '"') this.error('expected " or # after r', p);
    const bodyStart = p + 1;
    const closing = '"' + '#'.repeat(hashes);
    const end = s.indexOf(closing, bodyStart);
    if (end < 0) this.error('could not find an ending quote', start);
    this.pos = end + closing.length;
    return s.slice(bodyStart, end);
  }
}
