/**
 * Compiles a parsed expression into nested closures `(ctx) => boolean` and keeps compiled rules in
 * an LRU cache keyed by the expression text, so a ruleset parses each expression once.
 *
 * Evaluation rules (as on the platform): a comparison whose left side is missing (absent map key,
 * out-of-range index, failed function) is false — for every operator, `ne` included; `[*]` over a
 * missing value yields an empty list; element-wise logical operators on Array<Boolean> stop at the
 * shorter array.
 */

import { RequestContext, buildRequestContext, type RequestInput } from './context.ts';
import {
  parseRule,
  type ArgNode,
  type BoolNode,
  type CallBase,
  type ComparisonNode,
  type Index,
  type ParseOptions,
  type RuleAst,
  type ValueNode,
} from './parser.ts';
import type { ListResolver } from './scheme.ts';
import { compareIp, type IpAddr } from './types.ts';

type Fn = (ctx: RequestContext) => unknown;
type BoolFn = (ctx: RequestContext) => boolean;
type ListFn = (ctx: RequestContext) => unknown[];

export type CompiledRule = ((ctx: RequestContext) => boolean) & {
  readonly expression: string;
  /** Canonical names of the fields the rule reads. */
  readonly fields: readonly string[];
  readonly ast: RuleAst;
  /** Convenience: builds a context from a request description and evaluates the rule. */
  evaluate(input: RequestContext | RequestInput): boolean;
};

// ---------------------------------------------------------------------------------------------
// values

function toList(v: unknown): unknown[] {
  if (v === undefined) return [];
  if (v instanceof Map) return [...v.values()];
  return v as unknown[];
}

function indexStep(ix: Index): (v: unknown) => unknown {
  if (ix.kind === 'index') {
    const i = ix.index;
    return (v) => (v as unknown[])[i];
  }
  if (ix.kind === 'key') {
    const k = ix.key;
    return (v) => (v as Map<string, unknown>).get(k);
  }
  throw new Error('unreachable: [*] is not a plain step');
}

function compileBase(base: ValueNode['base']): Fn {
  if (base.kind === 'field') {
    const field = base.field;
    return (ctx) => ctx.get(field);
  }
  return compileCall(base);
}

/** Compiles a value: a plain value, or (when `node.each`) the list of element values. */
function compileValue(node: ValueNode): Fn {
  const base = compileBase(node.base);
  const ixs = node.indexes;
  if (ixs.length === 0) return base;
  const firstEach = ixs.findIndex((i) => i.kind === 'each');
  const pre = (firstEach < 0 ? ixs : ixs.slice(0, firstEach)).map(indexStep);
  let head: Fn;
  if (pre.length === 0) head = base;
  else if (pre.length === 1) {
    const s0 = pre[0];
    head = (ctx) => {
      const v = base(ctx);
      return v === undefined ? undefined : s0(v);
    };
  } else if (pre.length === 2) {
    const [s0, s1] = pre;
    head = (ctx) => {
      let v = base(ctx);
      if (v === undefined) return undefined;
      v = s0(v);
      return v === undefined ? undefined : s1(v);
    };
  } else {
    head = (ctx) => {
      let v = base(ctx);
      for (const s of pre) {
        if (v === undefined) return undefined;
        v = s(v);
      }
      return v;
    };
  }
  if (firstEach < 0) return head;
  const post = ixs.slice(firstEach + 1).map((ix) => (ix.kind === 'each' ? null : indexStep(ix)));
  if (post.length === 0) return (ctx) => toList(head(ctx));
  return (ctx) => {
    let list = toList(head(ctx));
    for (const step of post) {
      const next: unknown[] = [];
      if (step === null) for (const el of list) for (const x of toList(el)) next.push(x);
      else {
        for (const el of list) {
          const x = step(el);
          if (x !== undefined) next.push(x);
        }
      }
      list = next;
    }
    return list;
  };
}

function compileArg(arg: ArgNode): Fn {
  if (arg.kind === 'literal') {
    const v = arg.value;
    return () => v;
  }
  if (arg.kind === 'value') return compileValue(arg);
  return compileBool(arg) as Fn;
}

function compileCall(call: CallBase): Fn {
  const impl = call.impl.impl;
  const args = call.args.map(compileArg);
  if (call.mapped) {
    const [first, ...rest] = args;
    return (ctx) => {
      const list = first(ctx) as unknown[];
      const restVals = rest.map((a) => a(ctx));
      const out: unknown[] = [];
      for (const el of list) {
        const r = impl([el, ...restVals], ctx);
        if (r !== undefined) out.push(r);
      }
      return out;
    };
  }
  switch (args.length) {
    case 1: {
      const [a0] = args;
      return (ctx) => impl([a0(ctx)], ctx);
    }
    case 2: {
      const [a0, a1] = args;
      return (ctx) => impl([a0(ctx), a1(ctx)], ctx);
    }
    default:
      return (ctx) =>
        impl(
          args.map((a) => a(ctx)),
          ctx,
        );
  }
}

// ---------------------------------------------------------------------------------------------
// comparisons

function bitwiseAnd(a: number, b: number): boolean {
  if (Math.abs(a) < 2 ** 31 && Math.abs(b) < 2 ** 31) return (a & b) !== 0;
  return (BigInt.asIntN(64, BigInt(a)) & BigInt.asIntN(64, BigInt(b))) !== 0n;
}

function comparator(node: ComparisonNode): (v: unknown) => boolean {
  switch (node.op) {
    case 'is_true':
      return (v) => v === true;
    case 'eq':
    case 'ne':
    case 'lt':
    case 'le':
    case 'gt':
    case 'ge': {
      const rhs = node.rhs;
      if (typeof rhs === 'object') {
        const ip = rhs as IpAddr;
        const test = orderingTest(node.op);
        return (v) => test(compareIp(v as IpAddr, ip));
      }
      switch (node.op) {
        case 'eq':
          return (v) => v === rhs;
        case 'ne':
          return (v) => v !== rhs;
        case 'lt':
          return (v) => (v as string | number) < rhs;
        case 'le':
          return (v) => (v as string | number) <= rhs;
        case 'gt':
          return (v) => (v as string | number) > rhs;
        default:
          return (v) => (v as string | number) >= rhs;
      }
    }
    case 'contains': {
      const needle = node.rhs;
      return (v) => (v as string).includes(needle);
    }
    case 'matches': {
      const re = node.regex;
      return (v) => re.test(v as string);
    }
    case 'wildcard':
    case 'strict_wildcard': {
      const p = node.pattern;
      return (v) => p.match(v as string);
    }
    case 'in': {
      const set = node.set;
      if (set.kind === 'bytes') {
        const values = set.values;
        return (v) => values.has(v as string);
      }
      if (set.kind === 'int') {
        const s = set.set;
        return (v) => s.has(v as number);
      }
      const s = set.set;
      return (v) => s.has(v as IpAddr);
    }
    case 'in_list': {
      const list = node.list;
      return (v) => list.contains(v as IpAddr | number | string);
    }
    case 'bitwise_and': {
      const mask = node.rhs;
      return (v) => bitwiseAnd(v as number, mask);
    }
  }
}

function orderingTest(
  op: 'eq' | 'ne' | 'lt' | 'le' | 'gt' | 'ge',
): (c: number | undefined) => boolean {
  switch (op) {
    case 'eq':
      return (c) => c === 0;
    case 'ne':
      return (c) => c !== 0; // incomparable (IPv4 vs IPv6) counts as not equal
    case 'lt':
      return (c) => c !== undefined && c < 0;
    case 'le':
      return (c) => c !== undefined && c <= 0;
    case 'gt':
      return (c) => c !== undefined && c > 0;
    default:
      return (c) => c !== undefined && c >= 0;
  }
}

function compileComparison(node: ComparisonNode): BoolFn | ListFn {
  const get = compileValue(node.lhs);
  const cmp = comparator(node);
  if (node.lhs.each) {
    return (ctx) => {
      const list = get(ctx) as unknown[];
      const out = new Array<boolean>(list.length);
      for (let i = 0; i < list.length; i++) out[i] = cmp(list[i]);
      return out;
    };
  }
  if (node.op === 'is_true') {
    if (node.lhs.type.kind === 'Array') return (ctx) => (get(ctx) as boolean[] | undefined) ?? [];
    return (ctx) => get(ctx) === true;
  }
  return (ctx) => {
    const v = get(ctx);
    return v !== undefined && cmp(v);
  };
}

// ---------------------------------------------------------------------------------------------
// logic

function elementwise(items: ListFn[], op: (a: boolean, b: boolean) => boolean): ListFn {
  return (ctx) => {
    let out = items[0](ctx).slice() as boolean[];
    for (let i = 1; i < items.length; i++) {
      const next = items[i](ctx) as boolean[];
      if (next.length < out.length) out = out.slice(0, next.length);
      for (let j = 0; j < out.length; j++) out[j] = op(out[j], next[j]);
    }
    return out;
  };
}

function compileBool(node: BoolNode): BoolFn | ListFn {
  switch (node.kind) {
    case 'const': {
      const v = node.value;
      return () => v;
    }
    case 'compare':
      return compileComparison(node);
    case 'not': {
      const arg = compileBool(node.arg);
      if (node.type.kind === 'Array') {
        const list = arg as ListFn;
        return (ctx) => (list(ctx) as boolean[]).map((b) => !b);
      }
      const f = arg as BoolFn;
      return (ctx) => !f(ctx);
    }
    case 'logical': {
      const items = node.items.map(compileBool);
      if (node.type.kind === 'Array') {
        const op =
          node.op === 'and'
            ? (a: boolean, b: boolean) => a && b
            : node.op === 'or'
              ? (a: boolean, b: boolean) => a || b
              : (a: boolean, b: boolean) => a !== b;
        return elementwise(items as ListFn[], op);
      }
      const fs = items as BoolFn[];
      if (node.op === 'xor') {
        return (ctx) => {
          let acc = false;
          for (const f of fs) acc = acc !== f(ctx);
          return acc;
        };
      }
      if (node.op === 'and') {
        if (fs.length === 2) {
          const [a, b] = fs;
          return (ctx) => a(ctx) && b(ctx);
        }
        if (fs.length === 3) {
          const [a, b, c] = fs;
          return (ctx) => a(ctx) && b(ctx) && c(ctx);
        }
        return (ctx) => {
          for (const f of fs) if (!f(ctx)) return false;
          return true;
        };
      }
      if (fs.length === 2) {
        const [a, b] = fs;
        return (ctx) => a(ctx) || b(ctx);
      }
      return (ctx) => {
        for (const f of fs) if (f(ctx)) return true;
        return false;
      };
    }
  }
}

/** Compiles an already parsed expression (no caching). */
export function compileAst(ast: RuleAst): CompiledRule {
  const f = compileBool(ast.root) as BoolFn;
  const rule = ((ctx: RequestContext) => f(ctx) === true) as CompiledRule;
  Object.defineProperties(rule, {
    expression: { value: ast.expression, enumerable: true },
    fields: { value: Object.freeze([...ast.fields]), enumerable: true },
    ast: { value: ast },
    evaluate: {
      value: (input: RequestContext | RequestInput) =>
        f(input instanceof RequestContext ? input : buildRequestContext(input)) === true,
    },
  });
  return rule;
}

// ---------------------------------------------------------------------------------------------
// cache

class Lru<V> {
  private readonly map = new Map<string, V>();

  constructor(public capacity: number) {}

  get(key: string): V | undefined {
    const v = this.map.get(key);
    if (v !== undefined) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }

  set(key: string, value: V): void {
    this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.capacity) {
      const oldest = this.map.keys().next().value as string;
      this.map.delete(oldest);
    }
  }

  clear(): void {
    this.map.clear();
  }

  get size(): number {
    return this.map.size;
  }
}

let cacheCapacity = 4096;
let defaultCache = new Lru<CompiledRule>(cacheCapacity);
let perResolver = new WeakMap<ListResolver, Lru<CompiledRule>>();

/**
 * Parses (once) and compiles an expression; later calls with the same text return the same
 * compiled rule. Throws `RuleSyntaxError` for an invalid expression.
 */
export function compileRule(expression: string, options: ParseOptions = {}): CompiledRule {
  let cache = defaultCache;
  if (options.lists) {
    let c = perResolver.get(options.lists);
    if (!c) {
      c = new Lru<CompiledRule>(cacheCapacity);
      perResolver.set(options.lists, c);
    }
    cache = c;
  }
  const key =
    options.maxLength === undefined ? expression : `${options.maxLength}\u0000${expression}`;
  const hit = cache.get(key);
  if (hit) return hit;
  const rule = compileAst(parseRule(expression, options));
  cache.set(key, rule);
  return rule;
}

/** Drops every cached compiled rule (e.g. after lists or fields were redefined). */
export function clearRuleCache(): void {
  defaultCache.clear();
  perResolver = new WeakMap();
}

/** Sets how many compiled expressions the cache keeps (default 4096). */
export function setRuleCacheSize(capacity: number): void {
  cacheCapacity = Math.max(1, Math.floor(capacity));
  defaultCache = new Lru<CompiledRule>(cacheCapacity);
  perResolver = new WeakMap();
}

export function ruleCacheSize(): number {
  return defaultCache.size;
}
