/**
 * Regular expressions for `matches` / `~` and `regex_replace()`.
 *
 * The platform evaluates these with the Rust `regex` crate, whose engines run in time linear in the
 * input and therefore lack backreferences and look-around. JavaScript's engine backtracks, so a
 * pattern such as `(a+)+$` can take exponential time on a hostile request. We approximate the linear
 * engine in two ways:
 *
 *  1. At parse time we read the pattern with the Rust syntax, reject what the linear engine does not
 *     have (backreferences, look-around, …), and reject the constructs that make a backtracking engine
 *     blow up: a repeated group that contains another variable-length repetition with no mandatory
 *     delimiter the inner repetition cannot consume (`(a+)+`, `(a*)*`, `(\w+\s?)*`, `(.*a){20}`),
 *     repeated alternations whose branches can start with the same character (`(a|a)*`, `(a|ab)+`),
 *     long chains of adjacent unbounded repetitions over overlapping characters (`.*a.*b.*c.*d`), very
 *     large counted repetitions, and patterns longer than `MAX_PATTERN_LENGTH`.
 *  2. The accepted pattern is re-emitted as a JavaScript pattern (never passed through verbatim), and
 *     V8 is asked to switch a regex to its own linear-time engine when it backtracks excessively. That
 *     engine does not support the `u` or `i` flags, so case-insensitivity is expanded into character
 *     classes and ASCII-only patterns run without `u` against the raw bytes.
 *
 * Patterns that need Unicode semantics (`\p{…}`, non-ASCII literals or escapes above U+007F) are
 * matched against the UTF-8-decoded subject with the `u` flag; they rely on step 1 only.
 *
 * Known differences from the Rust engine: `.`, `\w`, `\d`, `\b` are ASCII/byte based for ASCII-only
 * patterns (Rust's are Unicode aware); nested character classes are only supported when they are
 * plain unions; class set operations (`&&`, `--`, `~~`) are rejected; mixing multi-line and
 * single-line anchors in one pattern is rejected.
 */

import v8 from 'node:v8';
import { bytesToText, textToBytes } from './types.ts';

export const MAX_PATTERN_LENGTH = 2048;
const MAX_REPEAT = 1000;
const MAX_EXPANDED_SIZE = 100_000;
const MAX_ADJACENT_UNBOUNDED = 3;

let linearFallback = false;
try {
  // Process-wide, but transparent: a regex that backtracks past V8's threshold continues on the
  // linear engine with the same result instead of running for minutes.
  v8.setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');
  linearFallback = true;
} catch {
  linearFallback = false;
}

/** Whether V8's fallback to its linear-time engine could be enabled in this process. */
export const LINEAR_FALLBACK_ENABLED = linearFallback;

export class RegexError extends Error {
  /** `offset` is the index in the pattern the problem is at, or -1 for the pattern as a whole. */
  constructor(
    message: string,
    readonly offset: number,
  ) {
    super(message);
    this.name = 'RegexError';
  }
}

// ---------------------------------------------------------------------------------------------
// AST

interface Flags {
  i: boolean;
  m: boolean;
  s: boolean;
  U: boolean;
  x: boolean;
  R: boolean;
}

type Item =
  | { t: 'r'; lo: number; hi: number }
  | { t: 'perl'; k: 'd' | 'D' | 'w' | 'W' | 's' | 'S' }
  | { t: 'prop'; name: string; neg: boolean };

type Node =
  | { t: 'lit'; cp: number; ci: boolean }
  | { t: 'dot'; s: boolean; R: boolean }
  | { t: 'cls'; neg: boolean; items: Item[]; ci: boolean }
  | { t: 'as'; k: '^' | '$' | 'A' | 'z' | 'b' | 'B'; m: boolean }
  | { t: 'grp'; cap: number; body: Node }
  | { t: 'cat'; items: Node[] }
  | { t: 'alt'; items: Node[] }
  | { t: 'rep'; min: number; max: number; lazy: boolean; body: Node; at: number };

type EscapeResult =
  | { k: 'lit'; cp: number }
  | { k: 'perl'; v: 'd' | 'D' | 'w' | 'W' | 's' | 'S' }
  | { k: 'prop'; name: string; neg: boolean }
  | { k: 'as'; v: 'A' | 'z' | 'b' | 'B' };

const POSIX: Record<string, Array<[number, number]>> = {
  alnum: [
    [48, 57],
    [65, 90],
    [97, 122],
  ],
  alpha: [
    [65, 90],
    [97, 122],
  ],
  ascii: [[0, 127]],
  blank: [
    [9, 9],
    [32, 32],
  ],
  cntrl: [
    [0, 31],
    [127, 127],
  ],
  digit: [[48, 57]],
  graph: [[33, 126]],
  lower: [[97, 122]],
  print: [[32, 126]],
  punct: [
    [33, 47],
    [58, 64],
    [91, 96],
    [123, 126],
  ],
  space: [
    [9, 13],
    [32, 32],
  ],
  upper: [[65, 90]],
  word: [
    [48, 57],
    [65, 90],
    [95, 95],
    [97, 122],
  ],
  xdigit: [
    [48, 57],
    [65, 70],
    [97, 102],
  ],
};

class RegexParser {
  p = 0;
  groups = 0;
  names = new Map<string, number>();
  unicode = false;
  anchorsMulti = false;
  anchorsSingle = false;

  constructor(readonly src: string) {}

  fail(message: string, at = this.p): never {
    throw new RegexError(message, at);
  }

  parse(): Node {
    const flags: Flags = { i: false, m: false, s: false, U: false, x: false, R: false };
    const node = this.parseAlt(flags);
    if (this.p < this.src.length) {
      if (this.src[this.p] === ')') this.fail('unopened group: ")" without a matching "("');
      this.fail('unexpected character');
    }
    return node;
  }

  private peek(off = 0): string {
    return this.src.charAt(this.p + off);
  }

  private skipExtended(flags: Flags): void {
    if (!flags.x) return;
    for (;;) {
      const c = this.peek();
      if (c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f' || c === '\v') this.p++;
      else if (c === '#') {
        while (this.p < this.src.length && this.src[this.p] !== '\n') this.p++;
      } else return;
    }
  }

  private parseAlt(flags: Flags): Node {
    const branches = [this.parseConcat(flags)];
    while (this.peek() === '|') {
      this.p++;
      branches.push(this.parseConcat(flags));
    }
    return branches.length === 1 ? branches[0] : { t: 'alt', items: branches };
  }

  private parseConcat(flags: Flags): Node {
    const items: Node[] = [];
    for (;;) {
      this.skipExtended(flags);
      if (this.p >= this.src.length) break;
      const c = this.peek();
      if (c === '|' || c === ')') break;
      const atom = this.parseAtom(flags);
      if (atom === null) continue;
      items.push(this.parseQuantifiers(atom, flags));
    }
    return items.length === 1 ? items[0] : { t: 'cat', items };
  }

  private readCount(): { min: number; max: number; end: number } | undefined {
    // {n} {n,} {n,m} {,m}
    const m = /^\{\s*(\d*)\s*(?:(,)\s*(\d*)\s*)?\}/.exec(this.src.slice(this.p, this.p + 32));
    if (!m) return undefined;
    if (m[1] === '' && (m[2] === undefined || m[3] === '')) return undefined;
    const min = m[1] === '' ? 0 : Number(m[1]);
    const max = m[2] === undefined ? min : m[3] === '' ? Infinity : Number(m[3]);
    return { min, max, end: this.p + m[0].length };
  }

  private parseQuantifiers(atom: Node, flags: Flags): Node {
    this.skipExtended(flags);
    const at = this.p;
    const c = this.peek();
    let min: number;
    let max: number;
    if (c === '*') {
      min = 0;
      max = Infinity;
      this.p++;
    } else if (c === '+') {
      min = 1;
      max = Infinity;
      this.p++;
    } else if (c === '?') {
      min = 0;
      max = 1;
      this.p++;
    } else if (c === '{') {
      const count = this.readCount();
      if (!count) {
        if (/^\{\s*[\d,]/.test(this.src.slice(this.p, this.p + 4))) {
          this.fail('invalid counted repetition');
        }
        return atom;
      }
      min = count.min;
      max = count.max;
      if (min > MAX_REPEAT || (max !== Infinity && max > MAX_REPEAT)) {
        this.fail(`counted repetition exceeds the limit of ${MAX_REPEAT}`, at);
      }
      if (max < min) this.fail('invalid counted repetition: minimum is greater than maximum', at);
      this.p = count.end;
    } else {
      return atom;
    }
    let lazy = false;
    if (this.peek() === '?') {
      lazy = true;
      this.p++;
    }
    if (flags.U) lazy = !lazy;
    this.skipExtended(flags);
    const n = this.peek();
    if (n === '*' || n === '+' || n === '?' || (n === '{' && this.readCount())) {
      this.fail('nested repetition operators are not supported (possessive or stacked quantifier)');
    }
    return { t: 'rep', min, max, lazy, body: atom, at };
  }

  private parseAtom(flags: Flags): Node | null {
    const start = this.p;
    const c = this.peek();
    switch (c) {
      case '(':
        return this.parseGroup(flags);
      case '[':
        this.p++;
        return this.parseClass(flags, start);
      case '.':
        this.p++;
        return { t: 'dot', s: flags.s, R: flags.R };
      case '^':
      case '$':
        this.p++;
        if (flags.m) this.anchorsMulti = true;
        else this.anchorsSingle = true;
        return { t: 'as', k: c, m: flags.m };
      case '*':
      case '+':
      case '?':
        this.fail('repetition operator missing expression');
        break;
      case '{':
        if (this.readCount()) this.fail('repetition operator missing expression');
        this.p++;
        return { t: 'lit', cp: 123, ci: false };
      case '\\': {
        const e = this.parseEscape(false);
        switch (e.k) {
          case 'lit':
            return this.lit(e.cp, flags);
          case 'perl':
            return { t: 'cls', neg: false, items: [{ t: 'perl', k: e.v }], ci: false };
          case 'prop':
            return {
              t: 'cls',
              neg: false,
              items: [{ t: 'prop', name: e.name, neg: e.neg }],
              ci: false,
            };
          case 'as':
            if (e.v === 'A' || e.v === 'z') this.anchorsSingle = true;
            return { t: 'as', k: e.v, m: false };
        }
        break;
      }
    }
    const cp = this.src.codePointAt(this.p) as number;
    this.p += cp > 0xffff ? 2 : 1;
    return this.lit(cp, flags);
  }

  private lit(cp: number, flags: Flags): Node {
    if (cp > 0x7f) this.unicode = true;
    return { t: 'lit', cp, ci: flags.i && hasCaseVariants(cp) };
  }

  private parseGroup(flags: Flags): Node | null {
    const start = this.p;
    this.p++; // (
    let cap = 0;
    let inner: Flags = { ...flags };
    if (this.peek() === '?') {
      const rest = this.src.slice(this.p, this.p + 4);
      if (rest.startsWith('?=') || rest.startsWith('?!')) {
        this.fail('look-around is not supported', start);
      }
      if (rest.startsWith('?<=') || rest.startsWith('?<!')) {
        this.fail('look-around is not supported', start);
      }
      if (rest.startsWith('?P=') || rest.startsWith('?P>')) {
        this.fail('backreferences are not supported', start);
      }
      if (rest.startsWith('?P<') || rest.startsWith('?<')) {
        this.p += rest.startsWith('?P<') ? 3 : 2;
        const m = /^([A-Za-z_][A-Za-z0-9_.[\]]*)>/.exec(this.src.slice(this.p));
        if (!m) this.fail('invalid capture group name');
        if (this.names.has(m[1])) this.fail(`duplicate capture group name "${m[1]}"`);
        cap = ++this.groups;
        this.names.set(m[1], cap);
        this.p += m[0].length;
      } else {
        // flags: (?imsUxR-imsUxR) or (?flags:…)
        this.p++;
        let negate = false;
        const target: Flags = { ...flags };
        let any = false;
        for (;;) {
          const f = this.peek();
          if (f === '-') {
            if (negate) this.fail('repeated negation in flag group');
            negate = true;
            this.p++;
          } else if (f === 'i' || f === 'm' || f === 's' || f === 'U' || f === 'x' || f === 'R') {
            target[f] = !negate;
            any = true;
            this.p++;
          } else if (f === 'u') {
            any = true;
            this.p++;
          } else break;
        }
        const end = this.peek();
        if (end === ')') {
          if (!any && !negate) this.fail('empty flag group');
          this.p++;
          Object.assign(flags, target);
          return null;
        }
        if (end !== ':') {
          if (end === '#') this.fail('inline comments (?#…) are not supported');
          this.fail('unrecognized group or flag');
        }
        this.p++;
        inner = target;
      }
    } else {
      cap = ++this.groups;
    }
    const body = this.parseAlt(inner);
    if (this.peek() !== ')') this.fail('unclosed group', start);
    this.p++;
    return { t: 'grp', cap, body };
  }

  private parseEscape(inClass: boolean): EscapeResult {
    const start = this.p;
    this.p++; // backslash
    if (this.p >= this.src.length) this.fail('incomplete escape sequence', start);
    const c = this.src[this.p++];
    const hexEscape = (fixed: number): EscapeResult => {
      let digits: string;
      if (this.peek() === '{') {
        const close = this.src.indexOf('}', this.p);
        if (close < 0) this.fail('unclosed hexadecimal escape', start);
        digits = this.src.slice(this.p + 1, close);
        if (!/^[0-9a-fA-F]{1,8}$/.test(digits)) this.fail('invalid hexadecimal escape', start);
        this.p = close + 1;
      } else {
        digits = this.src.slice(this.p, this.p + fixed);
        if (!new RegExp(`^[0-9a-fA-F]{${fixed}}$`).test(digits)) {
          this.fail('invalid hexadecimal escape', start);
        }
        this.p += fixed;
      }
      const cp = parseInt(digits, 16);
      if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        this.fail('hexadecimal escape is not a Unicode scalar value', start);
      }
      return { k: 'lit', cp };
    };
    switch (c) {
      case 'a':
        return { k: 'lit', cp: 7 };
      case 'f':
        return { k: 'lit', cp: 12 };
      case 't':
        return { k: 'lit', cp: 9 };
      case 'n':
        return { k: 'lit', cp: 10 };
      case 'r':
        return { k: 'lit', cp: 13 };
      case 'v':
        return { k: 'lit', cp: 11 };
      case 'x':
        return hexEscape(2);
      case 'u':
        return hexEscape(4);
      case 'U':
        return hexEscape(8);
      case 'd':
      case 'D':
      case 'w':
      case 'W':
      case 's':
      case 'S':
        return { k: 'perl', v: c };
      case 'p':
      case 'P': {
        let name: string;
        if (this.peek() === '{') {
          const close = this.src.indexOf('}', this.p);
          if (close < 0) this.fail('unclosed Unicode class', start);
          name = this.src.slice(this.p + 1, close).trim();
          this.p = close + 1;
        } else {
          name = this.src.charAt(this.p);
          if (!/^[A-Za-z]$/.test(name)) this.fail('invalid Unicode class', start);
          this.p++;
        }
        let neg = c === 'P';
        if (name.startsWith('^')) {
          neg = !neg;
          name = name.slice(1);
        }
        this.unicode = true;
        return {
          k: 'prop',
          name: resolveProperty(name, () => this.fail(`unknown Unicode class "${name}"`, start)),
          neg,
        };
      }
      case 'A':
      case 'z':
      case 'b':
      case 'B':
        if (inClass) this.fail('assertions are not allowed in a character class', start);
        if ((c === 'b' || c === 'B') && this.peek() === '{') {
          this.fail('word boundary variants \\b{…} are not supported', start);
        }
        return { k: 'as', v: c };
      case 'k':
        return this.fail('backreferences are not supported', start);
      case '0':
        return this.fail('octal escapes are not supported', start);
      default:
        if (c >= '1' && c <= '9') this.fail('backreferences are not supported', start);
        if (/^[\x21-\x2f\x3a-\x40\x5b-\x60\x7b-\x7e ]$/.test(c) && c !== '<' && c !== '>') {
          return { k: 'lit', cp: c.charCodeAt(0) };
        }
        return this.fail(`unrecognized escape sequence \\${c}`, start);
    }
  }

  private classAtom(): EscapeResult {
    if (this.peek() === '\\') return this.parseEscape(true);
    const cp = this.src.codePointAt(this.p) as number;
    this.p += cp > 0xffff ? 2 : 1;
    return { k: 'lit', cp };
  }

  private parseClass(flags: Flags, start: number): Node {
    const neg = this.peek() === '^';
    if (neg) this.p++;
    const items = this.parseClassItems(flags, start);
    return { t: 'cls', neg, items, ci: flags.i };
  }

  private parseClassItems(flags: Flags, start: number): Item[] {
    const items: Item[] = [];
    let first = true;
    for (;;) {
      if (flags.x) while (/^[ \t\n\r\f\v]$/.test(this.peek())) this.p++;
      if (this.p >= this.src.length) this.fail('unclosed character class', start);
      const c = this.peek();
      if (c === ']' && !first) {
        this.p++;
        return items;
      }
      first = false;
      if (c === '[') {
        const posix = /^\[:(\^?)([a-z]+):\]/.exec(this.src.slice(this.p, this.p + 12));
        if (posix) {
          const ranges = POSIX[posix[2]];
          if (!ranges) this.fail(`unknown POSIX class "${posix[2]}"`);
          this.p += posix[0].length;
          for (const [lo, hi] of posix[1] ? complementRanges(ranges) : ranges) {
            items.push({ t: 'r', lo, hi });
          }
          continue;
        }
        const nestedStart = this.p;
        this.p++;
        if (this.peek() === '^')
          this.fail('negated nested character classes are not supported', nestedStart);
        items.push(...this.parseClassItems(flags, nestedStart));
        continue;
      }
      const two = this.src.slice(this.p, this.p + 2);
      if (two === '&&' || two === '--' || two === '~~') {
        this.fail('character class set operations (&&, --, ~~) are not supported');
      }
      const atomAt = this.p;
      const a = this.classAtom();
      if (a.k === 'perl') {
        items.push({ t: 'perl', k: a.v });
        continue;
      }
      if (a.k === 'prop') {
        items.push({ t: 'prop', name: a.name, neg: a.neg });
        continue;
      }
      if (a.k !== 'lit') this.fail('invalid item in character class', atomAt);
      let hi = a.cp;
      if (this.peek() === '-' && this.peek(1) !== ']' && this.p + 1 < this.src.length) {
        this.p++;
        const b = this.classAtom();
        if (b.k !== 'lit') this.fail('invalid range end in character class', atomAt);
        if (b.cp < a.cp) this.fail('invalid character class range: start is after end', atomAt);
        hi = b.cp;
      }
      if (hi > 0x7f) this.unicode = true;
      items.push({ t: 'r', lo: a.cp, hi });
    }
  }
}

function hasCaseVariants(cp: number): boolean {
  const s = String.fromCodePoint(cp);
  return s.toLowerCase() !== s || s.toUpperCase() !== s;
}

function complementRanges(ranges: Array<[number, number]>): Array<[number, number]> {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const out: Array<[number, number]> = [];
  let next = 0;
  for (const [lo, hi] of sorted) {
    if (lo > next) out.push([next, lo - 1]);
    next = Math.max(next, hi + 1);
  }
  if (next <= 0x10ffff) out.push([next, 0x10ffff]);
  return out;
}

const propertyCache = new Map<string, string | null>();

/** Maps a Rust Unicode class name to a form JavaScript accepts (`Greek` → `Script=Greek`). */
function resolveProperty(name: string, fail: () => never): string {
  const cached = propertyCache.get(name);
  if (cached) return cached;
  if (cached === null) fail();
  const cleaned = name.replace(/[\s_-]/g, '');
  const titled = cleaned.charAt(0).toUpperCase() + cleaned.slice(1).toLowerCase();
  const candidates = [
    name,
    name.replace(/\s+/g, '_'),
    `Script=${name}`,
    `Script=${titled}`,
    titled,
    name.replace(/:/, '='),
  ];
  for (const c of candidates) {
    try {
      new RegExp(`\\p{${c}}`, 'u');
      propertyCache.set(name, c);
      return c;
    } catch {
      // try the next spelling
    }
  }
  propertyCache.set(name, null);
  return fail();
}

// ---------------------------------------------------------------------------------------------
// Safety analysis over an approximate character-set domain: bytes/code points 0–255 are tracked
// exactly, everything above collapses into one "high" bucket.

class CharSet {
  bits = new Uint32Array(8);
  high = false;

  static of(lo: number, hi: number): CharSet {
    const s = new CharSet();
    s.addRange(lo, hi);
    return s;
  }

  static all(): CharSet {
    const s = CharSet.of(0, 255);
    s.high = true;
    return s;
  }

  addRange(lo: number, hi: number): void {
    if (hi > 255) this.high = true;
    for (let c = lo; c <= Math.min(hi, 255); c++) this.bits[c >> 5] |= 1 << (c & 31);
  }

  add(other: CharSet): void {
    for (let i = 0; i < 8; i++) this.bits[i] |= other.bits[i];
    this.high ||= other.high;
  }

  remove(c: number): void {
    this.bits[c >> 5] &= ~(1 << (c & 31));
  }

  complement(): CharSet {
    const s = new CharSet();
    for (let i = 0; i < 8; i++) s.bits[i] = ~this.bits[i];
    s.high = true;
    return s;
  }

  overlaps(other: CharSet): boolean {
    if (this.high && other.high) return true;
    for (let i = 0; i < 8; i++) if (this.bits[i] & other.bits[i]) return true;
    return false;
  }

  isEmpty(): boolean {
    return !this.high && this.bits.every((b) => b === 0);
  }
}

function perlSet(k: string): CharSet {
  let s: CharSet;
  switch (k.toLowerCase()) {
    case 'd':
      s = CharSet.of(48, 57);
      break;
    case 'w':
      s = CharSet.of(48, 57);
      s.addRange(65, 90);
      s.addRange(95, 95);
      s.addRange(97, 122);
      break;
    default:
      s = CharSet.of(9, 13);
      s.addRange(32, 32);
      break;
  }
  return k === k.toUpperCase() ? s.complement() : s;
}

function atomSet(n: Node): CharSet | undefined {
  switch (n.t) {
    case 'lit': {
      const s = CharSet.of(n.cp, n.cp);
      if (n.ci) {
        const ch = String.fromCodePoint(n.cp);
        for (const v of [ch.toLowerCase(), ch.toUpperCase()]) {
          const cp = v.codePointAt(0) as number;
          s.addRange(cp, cp);
        }
      }
      return s;
    }
    case 'dot': {
      const s = CharSet.all();
      if (!n.s) s.remove(10);
      return s;
    }
    case 'cls': {
      let s = new CharSet();
      for (const it of n.items) {
        if (it.t === 'r') s.addRange(it.lo, it.hi);
        else if (it.t === 'perl') s.add(perlSet(it.k));
        else s.add(CharSet.all());
      }
      if (n.ci) {
        for (let c = 65; c <= 90; c++) {
          const bitU = (s.bits[c >> 5] >>> (c & 31)) & 1;
          const l = c + 32;
          const bitL = (s.bits[l >> 5] >>> (l & 31)) & 1;
          if (bitU || bitL) {
            s.addRange(c, c);
            s.addRange(l, l);
          }
        }
      }
      if (n.neg) s = s.complement();
      return s;
    }
    default:
      return undefined;
  }
}

function allChars(n: Node): CharSet {
  const s = new CharSet();
  walk(n, (m) => {
    const a = atomSet(m);
    if (a) s.add(a);
  });
  return s;
}

function walk(n: Node, f: (n: Node) => void): void {
  f(n);
  if (n.t === 'grp' || n.t === 'rep') walk(n.body, f);
  else if (n.t === 'cat' || n.t === 'alt') for (const c of n.items) walk(c, f);
}

function nullable(n: Node): boolean {
  switch (n.t) {
    case 'lit':
    case 'dot':
    case 'cls':
      return false;
    case 'as':
      return true;
    case 'grp':
      return nullable(n.body);
    case 'rep':
      return n.min === 0 || nullable(n.body);
    case 'cat':
      return n.items.every(nullable);
    case 'alt':
      return n.items.some(nullable);
  }
}

function firstSet(n: Node): CharSet {
  const a = atomSet(n);
  if (a) return a;
  switch (n.t) {
    case 'grp':
    case 'rep':
      return firstSet(n.body);
    case 'cat': {
      const s = new CharSet();
      for (const it of n.items) {
        s.add(firstSet(it));
        if (!nullable(it)) break;
      }
      return s;
    }
    case 'alt': {
      const s = new CharSet();
      for (const it of n.items) s.add(firstSet(it));
      return s;
    }
    default:
      return new CharSet();
  }
}

/** Single-character atoms every match of `n` must consume, outside any optional or variable part. */
function mandatoryAtoms(n: Node, out: CharSet[] = []): CharSet[] {
  const a = atomSet(n);
  if (a) {
    out.push(a);
    return out;
  }
  if (n.t === 'grp') mandatoryAtoms(n.body, out);
  else if (n.t === 'cat') for (const it of n.items) mandatoryAtoms(it, out);
  else if (n.t === 'rep' && n.min >= 1 && n.min === n.max) mandatoryAtoms(n.body, out);
  return out;
}

/** The text a branch matches when it is a plain case-sensitive literal, else undefined. */
function literalText(n: Node): string | undefined {
  if (n.t === 'lit') return n.ci ? undefined : String.fromCodePoint(n.cp);
  if (n.t === 'grp') return literalText(n.body);
  if (n.t === 'cat') {
    let out = '';
    for (const it of n.items) {
      const t = literalText(it);
      if (t === undefined) return undefined;
      out += t;
    }
    return out;
  }
  return undefined;
}

function containsUnbounded(n: Node): boolean {
  let found = false;
  walk(n, (m) => {
    if (m.t === 'rep' && m.max === Infinity) found = true;
  });
  return found;
}

function expandedSize(n: Node): number {
  switch (n.t) {
    case 'grp':
      return expandedSize(n.body);
    case 'rep': {
      const times = n.max === Infinity ? n.min + 1 : n.max;
      return Math.max(1, times) * expandedSize(n.body);
    }
    case 'cat':
    case 'alt':
      return n.items.reduce((acc, it) => acc + expandedSize(it), 0);
    default:
      return 1;
  }
}

function checkSafety(root: Node): void {
  if (expandedSize(root) > MAX_EXPANDED_SIZE) {
    throw new RegexError('regular expression is too large once repetitions are expanded', -1);
  }
  walk(root, (n) => {
    if (n.t === 'rep' && n.max > 1) {
      // 1. variable-length repetition nested in a repetition, without a delimiter it cannot eat
      const inner: Node[] = [];
      walk(n.body, (m) => {
        if (m.t === 'rep' && m.max > m.min) inner.push(m);
      });
      if (inner.length) {
        const innerSet = new CharSet();
        for (const r of inner) innerSet.add(allChars((r as Extract<Node, { t: 'rep' }>).body));
        const delimited = mandatoryAtoms(n.body).some((a) => !a.overlaps(innerSet));
        if (!delimited) {
          throw new RegexError(
            'nested quantifier: a repeated group contains another variable-length repetition ' +
              'and can backtrack exponentially (the platform uses a linear-time regex engine)',
            n.at,
          );
        }
      }
      // 2. repeated alternation whose branches can start alike
      walk(n.body, (m) => {
        if (m.t !== 'alt') return;
        const firsts = m.items.map(firstSet);
        const literals = m.items.map(literalText);
        const empties = m.items.filter(nullable).length;
        if (empties > 1) {
          throw new RegexError('repeated alternation with more than one empty branch', n.at);
        }
        for (let i = 0; i < firsts.length; i++) {
          for (let j = i + 1; j < firsts.length; j++) {
            const a = literals[i];
            const b = literals[j];
            // Plain literal branches are unambiguous unless one is a prefix of the other.
            const ambiguous =
              a !== undefined && b !== undefined
                ? a.startsWith(b) || b.startsWith(a)
                : firsts[i].overlaps(firsts[j]);
            if (ambiguous) {
              throw new RegexError(
                'repeated alternation whose branches can match the same text can backtrack ' +
                  'exponentially (e.g. (a|a)*); make the branches start differently',
                n.at,
              );
            }
          }
        }
      });
    }
    // 3. chains of adjacent unbounded repetitions over overlapping characters
    if (n.t === 'cat') {
      let open: CharSet[] = [];
      let firstAt = 0;
      for (const it of n.items) {
        if (containsUnbounded(it)) {
          const set = allChars(it);
          if (open.length === 0 || open.some((o) => o.overlaps(set))) {
            if (open.length === 0) firstAt = it.t === 'rep' ? it.at : -1;
            open.push(set);
          } else {
            open = [set];
            firstAt = it.t === 'rep' ? it.at : -1;
          }
          if (open.length > MAX_ADJACENT_UNBOUNDED) {
            throw new RegexError(
              `more than ${MAX_ADJACENT_UNBOUNDED} adjacent unbounded repetitions over ` +
                'overlapping characters (polynomial backtracking)',
              firstAt,
            );
          }
        } else {
          const atoms = mandatoryAtoms(it);
          if (atoms.some((a) => open.every((o) => !a.overlaps(o)))) open = [];
        }
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Emission

class Emitter {
  constructor(
    readonly unicode: boolean,
    readonly multiline: boolean,
  ) {}

  cp(cp: number): string {
    if ((cp >= 48 && cp <= 57) || (cp >= 65 && cp <= 90) || (cp >= 97 && cp <= 122)) {
      return String.fromCharCode(cp);
    }
    if (this.unicode) return `\\u{${cp.toString(16)}}`;
    if (cp <= 0xff) return `\\x${cp.toString(16).padStart(2, '0')}`;
    return `\\u${Math.min(cp, 0xffff).toString(16).padStart(4, '0')}`;
  }

  caseVariants(cp: number): number[] {
    const ch = String.fromCodePoint(cp);
    const out = new Set<number>([cp]);
    for (const v of [ch.toLowerCase(), ch.toUpperCase()]) {
      if ([...v].length === 1) out.add(v.codePointAt(0) as number);
    }
    return [...out];
  }

  range(lo: number, hi: number): string {
    if (!this.unicode) {
      if (lo > 0xffff) return '';
      hi = Math.min(hi, 0xffff);
    }
    return lo === hi ? this.cp(lo) : `${this.cp(lo)}-${this.cp(hi)}`;
  }

  item(it: Item): string {
    if (it.t === 'r') return this.range(it.lo, it.hi);
    if (it.t === 'perl') return `\\${it.k}`;
    return `\\${it.neg ? 'P' : 'p'}{${it.name}}`;
  }

  emit(n: Node): string {
    switch (n.t) {
      case 'lit': {
        if (!n.ci) return this.cp(n.cp);
        const vs = this.caseVariants(n.cp);
        return vs.length === 1 ? this.cp(vs[0]) : `[${vs.map((v) => this.cp(v)).join('')}]`;
      }
      case 'dot':
        return n.s ? '[\\s\\S]' : n.R ? '[^\\r\\n]' : '[^\\n]';
      case 'cls': {
        const parts = n.items.map((it) => this.item(it));
        if (n.ci) {
          for (const it of n.items) {
            if (it.t !== 'r') continue;
            const lo = Math.max(it.lo, 97);
            const hi = Math.min(it.hi, 122);
            if (lo <= hi) parts.push(this.range(lo - 32, hi - 32));
            const lo2 = Math.max(it.lo, 65);
            const hi2 = Math.min(it.hi, 90);
            if (lo2 <= hi2) parts.push(this.range(lo2 + 32, hi2 + 32));
            if (it.lo === it.hi && it.lo > 0x7f) {
              for (const v of this.caseVariants(it.lo)) if (v !== it.lo) parts.push(this.cp(v));
            }
          }
        }
        return `[${n.neg ? '^' : ''}${parts.join('')}]`;
      }
      case 'as':
        switch (n.k) {
          case 'A':
            return '^';
          case 'z':
            return '$';
          default:
            return n.k === 'b' ? '\\b' : n.k === 'B' ? '\\B' : n.k;
        }
      case 'grp':
        return n.cap ? `(${this.emit(n.body)})` : `(?:${this.emit(n.body)})`;
      case 'cat':
        return n.items.map((it) => this.emit(it)).join('');
      case 'alt':
        return n.items.map((it) => this.emit(it)).join('|');
      case 'rep': {
        const body = this.emit(n.body);
        const atomic =
          n.body.t === 'grp' || n.body.t === 'cls' || n.body.t === 'dot' || n.body.t === 'lit';
        const b = atomic ? body : `(?:${body})`;
        let q: string;
        if (n.min === 0 && n.max === Infinity) q = '*';
        else if (n.min === 1 && n.max === Infinity) q = '+';
        else if (n.min === 0 && n.max === 1) q = '?';
        else if (n.max === Infinity) q = `{${n.min},}`;
        else if (n.min === n.max) q = `{${n.min}}`;
        else q = `{${n.min},${n.max}}`;
        return b + q + (n.lazy ? '?' : '');
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Public API

export interface RegexProgram {
  /** The pattern as written in the rule. */
  readonly source: string;
  /** The JavaScript pattern it was translated to. */
  readonly jsSource: string;
  /** True when the subject is decoded from UTF-8 and matched with the `u` flag. */
  readonly unicode: boolean;
  /** Tests a Bytes value (binary string). */
  test(subject: string): boolean;
  /** Replaces the first match, expanding `${1}`, `$1`, `${name}`, `$$` in the replacement. */
  replaceFirst(subject: string, replacement: string): string;
}

type ReplacementPart = string | { group: number | string };

function parseReplacement(template: string): ReplacementPart[] {
  const parts: ReplacementPart[] = [];
  let lit = '';
  for (let i = 0; i < template.length;) {
    const c = template[i];
    if (c !== '$') {
      lit += c;
      i++;
      continue;
    }
    if (template[i + 1] === '$') {
      lit += '$';
      i += 2;
      continue;
    }
    let name: string | undefined;
    let end = i + 1;
    if (template[i + 1] === '{') {
      const close = template.indexOf('}', i + 2);
      if (close > i + 2) {
        name = template.slice(i + 2, close);
        end = close + 1;
      }
    } else {
      const m = /^[A-Za-z0-9_]+/.exec(template.slice(i + 1));
      if (m) {
        name = m[0];
        end = i + 1 + m[0].length;
      }
    }
    if (name === undefined) {
      lit += '$';
      i++;
      continue;
    }
    if (lit) parts.push(lit);
    lit = '';
    parts.push({ group: /^\d+$/.test(name) ? Number(name) : name });
    i = end;
  }
  if (lit) parts.push(lit);
  return parts;
}

/**
 * Parses a Rust-syntax pattern, checks it for catastrophic backtracking, and compiles it.
 * Throws `RegexError` (with an offset into `pattern`) when it is invalid, unsupported or unsafe.
 */
export function compileRegex(pattern: string): RegexProgram {
  if (pattern.length > MAX_PATTERN_LENGTH) {
    throw new RegexError(`regular expression is longer than ${MAX_PATTERN_LENGTH} characters`, -1);
  }
  const parser = new RegexParser(pattern);
  const ast = parser.parse();
  checkSafety(ast);
  if (parser.anchorsMulti && parser.anchorsSingle) {
    throw new RegexError('mixing multi-line and single-line anchors is not supported', -1);
  }
  const unicode = parser.unicode;
  const multiline = parser.anchorsMulti;
  const jsSource = new Emitter(unicode, multiline).emit(ast);
  let re: RegExp;
  try {
    re = new RegExp(jsSource, (unicode ? 'u' : '') + (multiline ? 'm' : ''));
  } catch (err) {
    throw new RegexError(`unsupported regular expression (${(err as Error).message})`, -1);
  }
  const names = parser.names;
  const toSubject = unicode ? bytesToText : (b: string) => b;
  return {
    source: pattern,
    jsSource,
    unicode,
    test(subject: string): boolean {
      return re.test(toSubject(subject));
    },
    replaceFirst(subject: string, replacement: string): string {
      const text = toSubject(subject);
      const m = re.exec(text);
      if (!m) return subject;
      const tpl = parseReplacement(unicode ? bytesToText(replacement) : replacement);
      let out = '';
      for (const part of tpl) {
        if (typeof part === 'string') out += part;
        else {
          const idx = typeof part.group === 'number' ? part.group : names.get(part.group);
          if (idx !== undefined && idx < m.length) out += m[idx] ?? '';
        }
      }
      const result = text.slice(0, m.index) + out + text.slice(m.index + m[0].length);
      return unicode ? textToBytes(result) : result;
    },
  };
}
