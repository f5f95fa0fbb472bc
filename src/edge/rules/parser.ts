/**
 * Parser and type checker for rule expressions (the platform's dialect of the open-source
 * wirefilter grammar).
 *
 *   expr       := or
 *   or         := xor  (("or"  | "||") xor)*
 *   xor        := and  (("xor" | "^^") and)*
 *   and        := unary (("and" | "&&") unary)*
 *   unary      := ("not" | "!") unary | "(" expr ")" | comparison
 *   comparison := value [op rhs]            -- no operator for Boolean values
 *   value      := (field | name "(" args ")") ("[" (int | string | "*") "]")*
 *   op         := eq ne lt le gt ge == != < <= > >= contains matches ~ wildcard
 *                 "strict wildcard" in & bitwise_and
 *
 * Precedence (tightest first): not, and, xor, or. A value indexed with `[*]` maps the comparison
 * (or the function it is the first argument of) over every element and yields Array<Boolean>;
 * such arrays combine element-wise with logical operators and are reduced with `any()`/`all()`.
 * The whole expression must be Boolean. Every error is a `RuleSyntaxError` with its position.
 */

import { RuleSyntaxError } from './errors.ts';
import './fields.ts';
import { lookupFunction, type ArgInfo, type FunctionDef, type FunctionImpl } from './functions.ts';
import { Lexer } from './lexer.ts';
import { IntRangeSet, IpRangeSet } from './ranges.ts';
import { RegexError, compileRegex, type RegexProgram } from './regex.ts';
import {
  getListResolver,
  lookupField,
  type FieldDef,
  type ListResolver,
  type RuleList,
} from './scheme.ts';
import {
  BOOL,
  BYTES,
  INT,
  IP,
  arrayOf,
  cidrBounds,
  compareIp,
  displayType,
  parseIp,
  typeEquals,
  type IpAddr,
  type Type,
} from './types.ts';
import { WildcardError, compileWildcard, type WildcardPattern } from './wildcard.ts';

export const DEFAULT_MAX_EXPRESSION_LENGTH = 16_384;
const MAX_NESTING = 128;

// ---------------------------------------------------------------------------------------------
// AST

export type Index =
  { kind: 'index'; index: number } | { kind: 'key'; key: string } | { kind: 'each' };

export interface FieldBase {
  kind: 'field';
  field: FieldDef;
  start: number;
  end: number;
}

export interface CallBase {
  kind: 'call';
  name: string;
  fn: FunctionDef;
  args: ArgNode[];
  /** First argument uses `[*]`: the function is applied to each element. */
  mapped: boolean;
  impl: FunctionImpl;
  start: number;
  end: number;
}

export interface ValueNode {
  kind: 'value';
  base: FieldBase | CallBase;
  indexes: Index[];
  /** Type of the value, or of each element when `each` is set. */
  type: Type;
  /** The value is a list of elements produced by `[*]`. */
  each: boolean;
  start: number;
  end: number;
}

export interface LiteralNode {
  kind: 'literal';
  type: Type;
  value: unknown;
  start: number;
  end: number;
}

export type InSet =
  | { kind: 'bytes'; values: Set<string> }
  | { kind: 'int'; set: IntRangeSet }
  | { kind: 'ip'; set: IpRangeSet };

export type OrderingOp = 'eq' | 'ne' | 'lt' | 'le' | 'gt' | 'ge';

export type ComparisonNode = {
  kind: 'compare';
  lhs: ValueNode;
  type: Type;
  start: number;
  end: number;
} & (
  | { op: 'is_true' }
  | { op: OrderingOp; rhs: string | number | IpAddr }
  | { op: 'contains'; rhs: string }
  | { op: 'matches'; regex: RegexProgram }
  | { op: 'wildcard' | 'strict_wildcard'; pattern: WildcardPattern }
  | { op: 'in'; set: InSet }
  | { op: 'in_list'; name: string; list: RuleList }
  | { op: 'bitwise_and'; rhs: number }
);

export type BoolNode =
  | ComparisonNode
  | {
      kind: 'logical';
      op: 'and' | 'or' | 'xor';
      items: BoolNode[];
      type: Type;
      start: number;
      end: number;
    }
  | { kind: 'not'; arg: BoolNode; type: Type; start: number; end: number }
  | { kind: 'const'; value: boolean; type: Type; start: number; end: number };

export type ArgNode = LiteralNode | ValueNode | BoolNode;

export interface RuleAst {
  readonly expression: string;
  readonly root: BoolNode;
  /** Canonical names of the fields the expression reads. */
  readonly fields: readonly string[];
}

export interface ParseOptions {
  /** Resolves `$name` lists; defaults to the resolver installed with `setListResolver`. */
  lists?: ListResolver;
  /** Longest accepted expression (default 16384 characters). */
  maxLength?: number;
}

// ---------------------------------------------------------------------------------------------

const ORDERING_WORDS: Record<string, OrderingOp> = {
  eq: 'eq',
  ne: 'ne',
  lt: 'lt',
  le: 'le',
  gt: 'gt',
  ge: 'ge',
};
const ORDERING_SYMBOLS: Array<[string, OrderingOp]> = [
  ['==', 'eq'],
  ['!=', 'ne'],
  ['<=', 'le'],
  ['>=', 'ge'],
  ['<', 'lt'],
  ['>', 'gt'],
];

type OpToken =
  | { kind: 'ordering'; op: OrderingOp }
  | { kind: 'contains' | 'matches' | 'wildcard' | 'strict_wildcard' | 'in' | 'bitwise_and' };

const isBoolType = (t: Type) => t.kind === 'Bool';
const isBoolArray = (t: Type) => t.kind === 'Array' && t.of.kind === 'Bool';

class Parser {
  readonly lx: Lexer;
  private depth = 0;
  readonly fields = new Set<string>();

  constructor(
    readonly src: string,
    readonly lists: ListResolver | undefined,
  ) {
    this.lx = new Lexer(src);
  }

  fail(reason: string, pos = this.lx.pos, length = 1): never {
    throw new RuleSyntaxError(this.src, reason, pos, length);
  }

  parseRoot(): BoolNode {
    const lx = this.lx;
    lx.skipSpace();
    if (lx.eof()) this.fail('empty expression', 0);
    const root = this.parseOr();
    lx.skipSpace();
    if (!lx.eof()) {
      const rest = /^\S+/.exec(this.src.slice(lx.pos));
      this.fail(
        `unexpected input "${truncate(rest ? rest[0] : lx.peek())}"`,
        lx.pos,
        rest ? rest[0].length : 1,
      );
    }
    if (!isBoolType(root.type)) {
      this.fail(
        `the expression evaluates to ${displayType(root.type)}, not Boolean; wrap [*] comparisons in any() or all()`,
        root.start,
        root.end - root.start,
      );
    }
    return root;
  }

  private nest(pos: number): void {
    if (++this.depth > MAX_NESTING)
      this.fail(`expression nesting exceeds the limit of ${MAX_NESTING}`, pos);
  }

  // --- logical levels ------------------------------------------------------------------------

  private logicalOp(level: 'or' | 'xor' | 'and'): boolean {
    const lx = this.lx;
    const save = lx.pos;
    lx.skipSpace();
    const symbol = level === 'or' ? '||' : level === 'xor' ? '^^' : '&&';
    if (lx.tryWord(level) || lx.tryConsume(symbol)) return true;
    lx.pos = save;
    return false;
  }

  private combine(op: 'or' | 'xor' | 'and', items: BoolNode[], opPositions: number[]): BoolNode {
    if (items.length === 1) return items[0];
    const t = items[0].type;
    for (let i = 1; i < items.length; i++) {
      if (!typeEquals(items[i].type, t)) {
        this.fail(
          `cannot combine ${displayType(t)} with ${displayType(items[i].type)} using "${op}"`,
          opPositions[i - 1],
          op.length,
        );
      }
    }
    return {
      kind: 'logical',
      op,
      items,
      type: t,
      start: items[0].start,
      end: items[items.length - 1].end,
    };
  }

  parseOr(seed?: BoolNode): BoolNode {
    const items = [this.parseXor(seed)];
    const ops: number[] = [];
    for (;;) {
      const save = this.lx.pos;
      this.lx.skipSpace();
      const at = this.lx.pos;
      this.lx.pos = save;
      if (!this.logicalOp('or')) break;
      ops.push(at);
      items.push(this.parseXor());
    }
    return this.combine('or', items, ops);
  }

  private parseXor(seed?: BoolNode): BoolNode {
    const items = [this.parseAnd(seed)];
    const ops: number[] = [];
    for (;;) {
      const save = this.lx.pos;
      this.lx.skipSpace();
      const at = this.lx.pos;
      this.lx.pos = save;
      if (!this.logicalOp('xor')) break;
      ops.push(at);
      items.push(this.parseAnd());
    }
    return this.combine('xor', items, ops);
  }

  private parseAnd(seed?: BoolNode): BoolNode {
    const items = [seed ?? this.parseUnary()];
    const ops: number[] = [];
    for (;;) {
      const save = this.lx.pos;
      this.lx.skipSpace();
      const at = this.lx.pos;
      this.lx.pos = save;
      if (!this.logicalOp('and')) break;
      ops.push(at);
      items.push(this.parseUnary());
    }
    return this.combine('and', items, ops);
  }

  private atNot(): boolean {
    const lx = this.lx;
    return lx.isWordAhead('not') || (lx.peek() === '!' && lx.peek(1) !== '=');
  }

  private parseUnary(): BoolNode {
    const lx = this.lx;
    lx.skipSpace();
    const start = lx.pos;
    if (this.atNot()) {
      if (!lx.tryWord('not')) lx.pos++;
      this.nest(start);
      const arg = this.parseUnary();
      this.depth--;
      return { kind: 'not', arg, type: arg.type, start, end: arg.end };
    }
    if (lx.peek() === '(') {
      lx.pos++;
      this.nest(start);
      const inner = this.parseOr();
      this.depth--;
      lx.skipSpace();
      if (!lx.tryConsume(')')) {
        if (lx.eof()) this.fail('missing closing parenthesis for "("', start);
        this.fail('expected ")" or a logical operator (and, or, xor)');
      }
      return { ...inner, start, end: lx.pos } as BoolNode;
    }
    if (lx.eof()) this.fail('expected an expression after the operator');
    return this.parseComparison();
  }

  // --- comparisons ---------------------------------------------------------------------------

  private parseComparison(): BoolNode {
    const lx = this.lx;
    const start = lx.pos;
    const c = lx.peek();
    if (!/[A-Za-z_]/.test(c)) {
      if (c === ')') this.fail('unexpected ")"');
      if (c === '"' || /[0-9]/.test(c)) {
        this.fail(
          'expected a field or function on the left-hand side; literals go on the right of an operator',
        );
      }
      this.fail('expected a field, function call or parenthesised expression');
    }
    const constant = this.tryConstant();
    if (constant) return constant;
    const lhs = this.parseValue();
    return this.parseComparisonRest(lhs, start);
  }

  private tryConstant(): BoolNode | undefined {
    const lx = this.lx;
    for (const word of ['true', 'false']) {
      if (lx.isWordAhead(word) && !lookupField(word)) {
        const start = lx.pos;
        lx.pos += word.length;
        return { kind: 'const', value: word === 'true', type: BOOL, start, end: lx.pos };
      }
    }
    return undefined;
  }

  private lexComparisonOp(): OpToken | undefined {
    const lx = this.lx;
    for (const [sym, op] of ORDERING_SYMBOLS)
      if (lx.tryConsume(sym)) return { kind: 'ordering', op };
    if (lx.tryConsume('~')) return { kind: 'matches' };
    if (lx.peek() === '&' && lx.peek(1) !== '&') {
      lx.pos++;
      return { kind: 'bitwise_and' };
    }
    for (const word of Object.keys(ORDERING_WORDS)) {
      if (lx.tryWord(word)) return { kind: 'ordering', op: ORDERING_WORDS[word] };
    }
    if (lx.tryWord('contains')) return { kind: 'contains' };
    if (lx.tryWord('matches')) return { kind: 'matches' };
    if (lx.tryWord('wildcard')) return { kind: 'wildcard' };
    if (lx.tryWord('in')) return { kind: 'in' };
    if (lx.tryWord('bitwise_and')) return { kind: 'bitwise_and' };
    const save = lx.pos;
    if (lx.tryWord('strict')) {
      const afterStrict = lx.pos;
      lx.skipSpace();
      if (lx.pos > afterStrict && lx.tryWord('wildcard')) return { kind: 'strict_wildcard' };
    }
    lx.pos = save;
    return undefined;
  }

  private comparisonOpAhead(): boolean {
    const lx = this.lx;
    const save = lx.pos;
    lx.skipSpace();
    const op = this.lexComparisonOp();
    lx.pos = save;
    return op !== undefined;
  }

  private parseComparisonRest(lhs: ValueNode, start: number): ComparisonNode {
    const lx = this.lx;
    const t = lhs.type;
    const resultType = lhs.each ? arrayOf(BOOL) : BOOL;
    if (isBoolType(t) || (!lhs.each && isBoolArray(t))) {
      if (this.comparisonOpAhead()) {
        lx.skipSpace();
        const name = describeValue(lhs, this.src);
        this.fail(
          `${name} is ${displayType(t)} and takes no comparison operator (write "${name}" or "not ${name}")`,
          lx.pos,
          wordLength(this.src, lx.pos),
        );
      }
      return {
        kind: 'compare',
        op: 'is_true',
        lhs,
        type: lhs.each ? arrayOf(BOOL) : t,
        start,
        end: lhs.end,
      };
    }
    lx.skipSpace();
    const opStart = lx.pos;
    const op = this.lexComparisonOp();
    if (!op) {
      if (lx.eof()) {
        this.fail(
          `expected a comparison operator after ${describeValue(lhs, this.src)} (${displayType(t)})`,
        );
      }
      this.fail(
        `expected a comparison operator after ${describeValue(lhs, this.src)} (${displayType(t)})`,
        lx.pos,
        wordLength(this.src, lx.pos),
      );
    }
    const opEnd = lx.pos;
    const opName = this.src.slice(opStart, opEnd).replace(/\s+/g, ' ');
    const unsupported = (): never =>
      this.fail(
        `operator "${opName}" is not supported for ${displayType(t)} (${describeValue(lhs, this.src)})`,
        opStart,
        opEnd - opStart,
      );
    if (t.kind === 'Array' || t.kind === 'Map') {
      this.fail(
        `${describeValue(lhs, this.src)} is ${lhs.each ? 'a list of ' : ''}${displayType(t)}; index it ([0], ["key"]) or use [*] inside any()/all() to compare its elements`,
        opStart,
        opEnd - opStart,
      );
    }
    lx.skipSpace();
    const rhsStart = lx.pos;
    const base = { kind: 'compare' as const, lhs, type: resultType, start };
    switch (op.kind) {
      case 'ordering': {
        if (t.kind !== 'Bytes' && t.kind !== 'Int' && t.kind !== 'Ip') unsupported();
        const rhs = this.parseScalar(t);
        return { ...base, op: op.op, rhs, end: lx.pos };
      }
      case 'bitwise_and': {
        if (t.kind !== 'Int') unsupported();
        const n = lx.readInt();
        if (!n) this.fail('expected an integer after "&"', rhsStart);
        return { ...base, op: 'bitwise_and', rhs: n.value, end: lx.pos };
      }
      case 'contains': {
        if (t.kind !== 'Bytes') unsupported();
        return { ...base, op: 'contains', rhs: this.parseBytesLiteral(), end: lx.pos };
      }
      case 'matches': {
        if (t.kind !== 'Bytes') unsupported();
        const src = lx.readRegexSource();
        try {
          const regex = compileRegex(src.value);
          return { ...base, op: 'matches', regex, end: lx.pos };
        } catch (err) {
          if (err instanceof RegexError) {
            const inside =
              err.offset >= 0
                ? src.offsets[Math.min(err.offset, src.offsets.length - 1)]
                : undefined;
            if (inside !== undefined)
              this.fail(`invalid regular expression: ${err.message}`, inside, 1);
            this.fail(`invalid regular expression: ${err.message}`, src.start, src.end - src.start);
          }
          throw err;
        }
      }
      case 'wildcard':
      case 'strict_wildcard': {
        if (t.kind !== 'Bytes') unsupported();
        if (!lx.atString())
          this.fail('expected a quoted or raw string after the wildcard operator');
        const lit = lx.readString();
        try {
          const pattern = compileWildcard(lit.value, op.kind === 'strict_wildcard');
          return { ...base, op: op.kind, pattern, end: lx.pos };
        } catch (err) {
          if (err instanceof WildcardError) this.fail(err.message, lit.start, lit.end - lit.start);
          throw err;
        }
      }
      case 'in': {
        if (t.kind !== 'Bytes' && t.kind !== 'Int' && t.kind !== 'Ip') unsupported();
        if (lx.peek() === '$') {
          const name = lx.readListName();
          if (!name) this.fail('expected a list name after "$"', rhsStart);
          const list = this.lists?.(name.value);
          if (!list) this.fail(`unknown list "$${name.value}"`, name.start, name.end - name.start);
          if (list.type !== t.kind) {
            this.fail(
              `list "$${name.value}" holds ${list.type === 'Ip' ? 'IP addresses' : list.type === 'Int' ? 'integers' : 'strings'} and cannot be matched against ${displayType(t)}`,
              name.start,
              name.end - name.start,
            );
          }
          return { ...base, op: 'in_list', name: name.value, list, end: lx.pos };
        }
        if (!lx.tryConsume('{')) this.fail('expected "{" or a $list after "in"', rhsStart);
        const set = this.parseSet(t, rhsStart);
        return { ...base, op: 'in', set, end: lx.pos };
      }
    }
  }

  private parseBytesLiteral(): string {
    const lx = this.lx;
    if (lx.atString()) return lx.readString().value;
    const hex = lx.readHexBytes();
    if (hex) return hex.value;
    if (/[0-9a-fA-F]/.test(lx.peek())) {
      this.fail(
        'a byte string needs two or more hex pairs separated by ":", "-" or "." (e.g. 0a:ff)',
      );
    }
    return this.fail(
      'expected a string literal ("…" or r"…")',
      lx.pos,
      wordLength(this.src, lx.pos),
    );
  }

  private parseIpLiteral(): { ip: IpAddr; start: number; end: number } {
    const lx = this.lx;
    const tok = lx.peekIpText();
    const ip = tok ? parseIp(tok.value) : undefined;
    if (!tok || !ip) this.fail('expected an IP address', lx.pos, wordLength(this.src, lx.pos));
    lx.pos = tok.end;
    return { ip, start: tok.start, end: tok.end };
  }

  private parseScalar(t: Type): string | number | IpAddr {
    const lx = this.lx;
    if (t.kind === 'Bytes') return this.parseBytesLiteral();
    if (t.kind === 'Int') {
      const n = lx.readInt();
      if (!n) this.fail('expected an integer', lx.pos, wordLength(this.src, lx.pos));
      return n.value;
    }
    const { ip } = this.parseIpLiteral();
    if (lx.peek() === '/') {
      this.fail('a CIDR range can only be matched with "in {…}"', lx.pos);
    }
    return ip;
  }

  private parseSet(t: Type, start: number): InSet {
    const lx = this.lx;
    const bytes = new Set<string>();
    const ints: Array<[number, number]> = [];
    const ips: Array<[IpAddr, IpAddr]> = [];
    for (;;) {
      lx.skipSpace();
      if (lx.tryConsume('}')) break;
      if (lx.eof()) this.fail('missing "}" to close the set opened here', start);
      if (lx.peek() === ',') this.fail('set items are separated by spaces, not commas');
      if (t.kind === 'Bytes') {
        bytes.add(this.parseBytesLiteral());
      } else if (t.kind === 'Int') {
        const a = lx.readInt();
        if (!a)
          this.fail('expected an integer or a range (a..b)', lx.pos, wordLength(this.src, lx.pos));
        let hi = a.value;
        if (lx.tryConsume('..')) {
          const b = lx.readInt();
          if (!b) this.fail('expected the end of the integer range', lx.pos);
          if (b.value < a.value)
            this.fail('range start is greater than its end', a.start, b.end - a.start);
          hi = b.value;
        }
        ints.push([a.value, hi]);
      } else {
        const a = this.parseIpLiteral();
        const bits = lx.readCidrBits();
        if (bits) {
          const max = a.ip.v === 4 ? 32 : 128;
          if (bits.value > max)
            this.fail(
              `CIDR prefix length must be at most ${max}`,
              bits.start,
              bits.end - bits.start,
            );
          ips.push(cidrBounds(a.ip, bits.value));
        } else if (lx.tryConsume('..')) {
          const b = this.parseIpLiteral();
          const cmp = compareIp(a.ip, b.ip);
          if (cmp === undefined)
            this.fail('an IP range must not mix IPv4 and IPv6', a.start, b.end - a.start);
          if (cmp > 0) this.fail('range start is greater than its end', a.start, b.end - a.start);
          ips.push([a.ip, b.ip]);
        } else {
          ips.push([a.ip, a.ip]);
        }
      }
      const c = lx.peek();
      if (c === ',') this.fail('set items are separated by spaces, not commas');
      if (c && c !== '}' && !/\s/.test(c)) {
        this.fail('expected a space or "}" after a set item', lx.pos, wordLength(this.src, lx.pos));
      }
    }
    if (t.kind === 'Bytes') return { kind: 'bytes', values: bytes };
    if (t.kind === 'Int') return { kind: 'int', set: new IntRangeSet(ints) };
    return { kind: 'ip', set: new IpRangeSet(ips) };
  }

  // --- values --------------------------------------------------------------------------------

  parseValue(): ValueNode {
    const lx = this.lx;
    const start = lx.pos;
    let name = lx.peekIdentifier();
    if (!name) this.fail('expected a field or function name');
    const dashed = lx.peekDashedIdentifier();
    if (dashed && dashed !== name && lookupField(dashed)) name = dashed;
    lx.pos += name.length;
    const afterName = lx.pos;
    lx.skipSpace();
    let base: FieldBase | CallBase;
    if (lx.peek() === '(') {
      const fn = lookupFunction(name);
      if (!fn) {
        this.fail(
          lookupField(name) ? `"${name}" is a field, not a function` : `unknown function "${name}"`,
          start,
          name.length,
        );
      }
      base = this.parseCall(name, fn, start);
    } else {
      lx.pos = afterName;
      const field = lookupField(name);
      if (!field) {
        const fn = lookupFunction(name);
        this.fail(
          fn
            ? `function "${name}" must be called with arguments: ${name}(…)`
            : `unknown field "${name}"`,
          start,
          name.length,
        );
      }
      this.fields.add(field.name);
      base = { kind: 'field', field, start, end: afterName };
    }
    let type = base.kind === 'field' ? base.field.type : base.impl.returns;
    const indexes: Index[] = [];
    let each = false;
    for (;;) {
      const save = lx.pos;
      lx.skipSpace();
      if (lx.peek() !== '[') {
        lx.pos = save;
        break;
      }
      const open = lx.pos;
      lx.pos++;
      lx.skipSpace();
      if (lx.tryConsume('*')) {
        if (type.kind !== 'Array' && type.kind !== 'Map') {
          this.fail(`[*] needs an Array or Map, but this value is ${displayType(type)}`, open);
        }
        indexes.push({ kind: 'each' });
        type = type.of;
        each = true;
      } else if (lx.atString()) {
        const key = lx.readString();
        if (type.kind !== 'Map') {
          this.fail(
            `cannot use a string key on ${displayType(type)}${type.kind === 'Array' ? ' (use an integer index)' : ''}`,
            key.start,
            key.end - key.start,
          );
        }
        indexes.push({ kind: 'key', key: key.value });
        type = type.of;
      } else {
        const n = lx.readInt();
        if (!n) this.fail('expected an integer index, a quoted key or * inside [ ]');
        if (type.kind !== 'Array') {
          this.fail(
            `cannot use an integer index on ${displayType(type)}${type.kind === 'Map' ? ' (use a quoted key)' : ''}`,
            n.start,
            n.end - n.start,
          );
        }
        if (n.value < 0) this.fail('array indexes cannot be negative', n.start, n.end - n.start);
        indexes.push({ kind: 'index', index: n.value });
        type = type.of;
      }
      lx.skipSpace();
      if (!lx.tryConsume(']')) this.fail('expected "]"');
    }
    return { kind: 'value', base, indexes, type, each, start, end: lx.pos };
  }

  private parseCall(name: string, fn: FunctionDef, start: number): CallBase {
    const lx = this.lx;
    const open = lx.pos;
    lx.pos++; // (
    this.nest(start);
    const args: ArgNode[] = [];
    for (;;) {
      lx.skipSpace();
      if (lx.tryConsume(')')) break;
      if (lx.eof()) this.fail(`missing ")" to close the call to ${name}()`, open);
      if (args.length > 0) {
        if (!lx.tryConsume(',')) this.fail(`expected "," or ")" in the call to ${name}()`);
        lx.skipSpace();
      }
      const argStart = lx.pos;
      if (args.length >= fn.maxArgs) {
        this.fail(
          `${name}() takes at most ${fn.maxArgs} argument${fn.maxArgs === 1 ? '' : 's'}`,
          argStart,
          wordLength(this.src, argStart),
        );
      }
      const arg = this.parseArg();
      if (arg.kind === 'value' && arg.each && args.length > 0) {
        this.fail(
          '[*] can only be used in the first argument of a function',
          arg.start,
          arg.end - arg.start,
        );
      }
      args.push(arg);
    }
    this.depth--;
    const end = lx.pos;
    if (args.length < fn.minArgs) {
      this.fail(
        `${name}() expects ${fn.minArgs === fn.maxArgs ? '' : 'at least '}${fn.minArgs} argument${fn.minArgs === 1 ? '' : 's'}, got ${args.length}`,
        end - 1,
      );
    }
    const mapped = args.length > 0 && args[0].kind === 'value' && (args[0] as ValueNode).each;
    const infos: ArgInfo[] = args.map((a) => argInfo(a));
    const impl = fn.resolve(infos, (i, message) => {
      const a = args[i] ?? args[args.length - 1];
      return this.fail(message, a ? a.start : start, a ? a.end - a.start : 1);
    });
    if (mapped)
      return {
        kind: 'call',
        name,
        fn,
        args,
        mapped,
        impl: { returns: arrayOf(impl.returns), impl: impl.impl },
        start,
        end,
      };
    return { kind: 'call', name, fn, args, mapped, impl, start, end };
  }

  private parseArg(): ArgNode {
    const lx = this.lx;
    const start = lx.pos;
    if (lx.atString()) {
      const s = lx.readString();
      return { kind: 'literal', type: BYTES, value: s.value, start: s.start, end: s.end };
    }
    if (lx.peek() === '(' || this.atNot()) return this.parseOr();
    const ident = lx.peekIdentifier();
    if (ident) {
      const dashed = lx.peekDashedIdentifier();
      const known =
        lookupField(ident) ||
        (dashed && lookupField(dashed)) ||
        lookupFunction(ident) ||
        ident === 'true' ||
        ident === 'false';
      const looksLiteral = !known && (lx.peekIpText() || lx.readHexBytes() !== undefined);
      if (looksLiteral) lx.pos = start;
      if (!looksLiteral) {
        const constant = this.tryConstant();
        if (constant) return this.continueLogical(constant);
        const value = this.parseValue();
        if (this.comparisonOpAhead()) {
          return this.continueLogical(this.parseComparisonRest(value, start));
        }
        if (
          (isBoolType(value.type) || (isBoolArray(value.type) && !value.each)) &&
          this.logicalAhead()
        ) {
          return this.continueLogical(this.parseComparisonRest(value, start));
        }
        return value;
      }
    }
    const ipTok = lx.peekIpText();
    if (ipTok) {
      const ip = parseIp(ipTok.value);
      if (ip) {
        lx.pos = ipTok.end;
        return { kind: 'literal', type: IP, value: ip, start, end: lx.pos };
      }
    }
    const n = lx.readInt();
    if (n) return { kind: 'literal', type: INT, value: n.value, start, end: lx.pos };
    const hex = lx.readHexBytes();
    if (hex) return { kind: 'literal', type: BYTES, value: hex.value, start, end: lx.pos };
    return this.fail(
      'expected a function argument (field, function call, string, number or IP address)',
      start,
      wordLength(this.src, start),
    );
  }

  private logicalAhead(): boolean {
    const lx = this.lx;
    const save = lx.pos;
    lx.skipSpace();
    const yes =
      lx.isWordAhead('and') ||
      lx.isWordAhead('or') ||
      lx.isWordAhead('xor') ||
      lx.startsWith('&&') ||
      lx.startsWith('||') ||
      lx.startsWith('^^');
    lx.pos = save;
    return yes;
  }

  private continueLogical(first: BoolNode): BoolNode {
    return this.logicalAhead() ? this.parseOr(first) : first;
  }
}

function argInfo(a: ArgNode): ArgInfo {
  if (a.kind === 'literal') return { type: a.type, literal: true, value: a.value };
  if (a.kind === 'value') {
    const firstKey =
      a.indexes[0]?.kind === 'key' ? (a.indexes[0] as { key: string }).key : undefined;
    return {
      type: a.type,
      literal: false,
      field: a.base.kind === 'field' ? a.base.field : undefined,
      mapKey: firstKey,
    };
  }
  return { type: a.type, literal: false };
}

function describeValue(v: ValueNode, src: string): string {
  return truncate(src.slice(v.start, v.end));
}

function truncate(s: string): string {
  return s.length > 60 ? `${s.slice(0, 57)}…` : s;
}

function wordLength(src: string, pos: number): number {
  const m = /^[^\s(){}[\],]+/.exec(src.slice(pos, pos + 200));
  return m ? m[0].length : 1;
}

/** Parses and type-checks an expression. Throws `RuleSyntaxError`. */
export function parseRule(expression: string, options: ParseOptions = {}): RuleAst {
  if (typeof expression !== 'string') {
    throw new RuleSyntaxError(String(expression), 'the expression must be a string', 0);
  }
  const max = options.maxLength ?? DEFAULT_MAX_EXPRESSION_LENGTH;
  if (expression.length > max) {
    throw new RuleSyntaxError(expression, `the expression is longer than ${max} characters`, max);
  }
  const parser = new Parser(expression, options.lists ?? getListResolver());
  const root = parser.parseRoot();
  return { expression, root, fields: [...parser.fields] };
}
