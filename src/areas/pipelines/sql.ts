/**
 * The pipeline SQL: `INSERT INTO <sink> SELECT <expressions> FROM <stream> [WHERE <condition>]`,
 * parsed by a real SQL parser (sqlparser-rs through WebAssembly) and compiled, node by node, into
 * a JavaScript function applied to each event of a micro-batch. Compiling beats shipping each
 * batch through DuckDB for this row-at-a-time work (no copy into a table and back), and it lets
 * validation name the exact column, function or type that is wrong before a pipeline exists.
 *
 * Accepted (the spec's list): UPPER, LOWER, CONCAT, COALESCE, CASE WHEN … [ELSE] END, CAST(x AS
 * string|int32|int64|float32|float64|bool|timestamp) (and the usual SQL spellings of those
 * types), + - * / %, = <> != < <= > >=, [NOT] IN (…), AND, OR, NOT, IS [NOT] NULL, BETWEEN,
 * column aliases with AS, `stream.column` and nested `column.field` references, `SELECT *`.
 * Null semantics are SQL's: null in, null out; WHERE keeps rows whose condition is true. A CAST
 * that cannot convert its value gives null (like TRY_CAST) rather than failing the batch.
 */
import { init, parse } from '@guanmingchiu/sqlparser-ts';
import type { Field, FieldType } from './schemas.ts';

export class PipelineSqlError extends Error {}

/** What the SQL may refer to. */
export interface SqlCatalog {
  /** The stream named in FROM: its fields, or undefined fields for an unstructured stream. */
  stream(name: string): { id: string; name: string; version: number; fields?: Field[] } | undefined;
  sink(name: string): { id: string; name: string; fields?: Field[] } | undefined;
}

export type ValueType = FieldType | undefined;

export interface OutputColumn {
  name: string;
  type: ValueType;
}

export interface CompiledPipeline {
  streamName: string;
  sinkName: string;
  streamId: string;
  sinkId: string;
  streamVersion: number;
  /** Output columns in order; empty with `passthrough`. */
  columns: OutputColumn[];
  /** `SELECT *` over an unstructured stream: the event as it came. */
  passthrough: boolean;
  /** The row for one event, or undefined when WHERE drops it. */
  apply(event: Record<string, unknown>): Record<string, unknown> | undefined;
}

type Node = any;
type Eval = (ev: Record<string, unknown>) => unknown;
interface Compiled {
  fn: Eval;
  type: ValueType;
}

let ready: Promise<void> | undefined;
export function initSql(): Promise<void> {
  ready ??= init();
  return ready;
}

export async function compilePipeline(sql: string, catalog: SqlCatalog): Promise<CompiledPipeline> {
  await initSql();
  let statements: Node[];
  try {
    statements = parse(sql, 'generic') as Node[];
  } catch (err) {
    throw new PipelineSqlError(`SQL does not parse: ${String((err as Error).message ?? err).replace(/^sql parser error: /, '')}`);
  }
  if (statements.length !== 1) throw new PipelineSqlError('Send exactly one statement: INSERT INTO <sink> SELECT … FROM <stream> [WHERE …]');
  const insert = statements[0].Insert;
  if (!insert) throw new PipelineSqlError(`${Object.keys(statements[0])[0]} statements are not pipelines: write INSERT INTO <sink> SELECT … FROM <stream> [WHERE …]`);
  if (insert.columns?.length) throw new PipelineSqlError('A column list after the sink name is not supported; name the columns with AS in the SELECT');
  const sinkName = objectName(insert.table?.TableName ?? insert.table_name ?? insert.table);
  const sink = catalog.sink(sinkName);
  if (!sink) throw new PipelineSqlError(`Unknown sink ${sinkName}: create it with POST /pipelines/v1/sinks first`);
  const query = insert.source;
  if (!query?.body?.Select) throw new PipelineSqlError('INSERT INTO <sink> must be followed by one SELECT (no VALUES, UNION or subqueries)');
  if (query.with) throw new PipelineSqlError('WITH is not supported in pipeline SQL');
  if (query.order_by || query.limit || query.limit_clause || query.offset) throw new PipelineSqlError('ORDER BY, LIMIT and OFFSET are not supported on a stream');
  const select = query.body.Select;
  if (select.distinct) throw new PipelineSqlError('DISTINCT is not supported on a stream');
  if (select.having) throw new PipelineSqlError('HAVING is not supported on a stream');
  const groups = select.group_by?.Expressions?.[0];
  if (Array.isArray(groups) && groups.length > 0) throw new PipelineSqlError('GROUP BY is not supported on a stream');
  if (!Array.isArray(select.from) || select.from.length !== 1) throw new PipelineSqlError('Name exactly one stream in FROM');
  const from = select.from[0];
  if (from.joins?.length) throw new PipelineSqlError('JOIN is not supported in pipeline SQL');
  const table = from.relation?.Table;
  if (!table || table.args) throw new PipelineSqlError('FROM must name a stream (no subqueries or table functions)');
  const streamName = objectName(table.name);
  const stream = catalog.stream(streamName);
  if (!stream) throw new PipelineSqlError(`Unknown stream ${streamName}: create it with POST /pipelines/v1/streams first`);
  const alias: string | undefined = table.alias?.name?.value;

  const scope = new Scope(stream.name, alias, stream.fields);
  const columns: OutputColumn[] = [];
  const evals: Eval[] = [];
  let passthrough = false;
  for (const [i, item] of (select.projection as Node[]).entries()) {
    if (item === 'Wildcard' || item.Wildcard !== undefined || item.QualifiedWildcard !== undefined) {
      if (!stream.fields) {
        passthrough = true;
        continue;
      }
      for (const f of stream.fields) {
        const name = f.sql_name ?? f.name;
        columns.push({ name, type: f.type });
        evals.push((ev) => ev[f.name]);
      }
      continue;
    }
    let expr: Node;
    let name: string;
    if (item.ExprWithAlias) {
      expr = item.ExprWithAlias.expr;
      name = item.ExprWithAlias.alias.value;
    } else if (item.UnnamedExpr) {
      expr = item.UnnamedExpr;
      name = defaultName(expr, i);
    } else throw new PipelineSqlError(`Unsupported item in the SELECT list: ${Object.keys(item)[0]}`);
    const c = compile(expr, scope);
    columns.push({ name, type: c.type });
    evals.push(c.fn);
  }
  if (passthrough && columns.length > 0) throw new PipelineSqlError('SELECT * over an unstructured stream cannot be combined with other columns');
  const seen = new Set<string>();
  for (const c of columns) {
    if (seen.has(c.name)) throw new PipelineSqlError(`Duplicate output column ${c.name}: give each expression its own alias with AS`);
    seen.add(c.name);
  }
  if (sink.fields) {
    const known = new Map(sink.fields.map((f) => [f.sql_name ?? f.name, f]));
    for (const c of columns) {
      const f = known.get(c.name);
      if (!f) throw new PipelineSqlError(`Column ${c.name} is not in the schema of sink ${sink.name} (its columns: ${[...known.keys()].join(', ')})`);
      c.type = f.type;
    }
  }
  const where = select.selection ? compile(select.selection, scope) : undefined;
  if (where && where.type !== undefined && where.type !== 'bool') throw new PipelineSqlError(`WHERE must be a condition (boolean), not ${where.type}`);
  const cast = columns.map((c) => castTo(c.type));
  const names = columns.map((c) => c.name);
  const apply = (event: Record<string, unknown>) => {
    if (where && where.fn(event) !== true) return undefined;
    if (passthrough) return event;
    const row: Record<string, unknown> = {};
    for (let i = 0; i < names.length; i++) {
      const v = evals[i](event);
      row[names[i]] = v === undefined ? null : cast[i] ? cast[i]!(v) : v;
    }
    return row;
  };
  return { streamName: stream.name, sinkName: sink.name, streamId: stream.id, sinkId: sink.id, streamVersion: stream.version, columns, passthrough, apply };
}

function objectName(parts: Node): string {
  const list: Node[] = Array.isArray(parts) ? parts : parts?.[0] ? parts : [];
  const names = list.map((p) => p.Identifier?.value ?? p.value).filter((s) => typeof s === 'string');
  if (names.length !== 1) throw new PipelineSqlError(`Expected a single name, got ${names.join('.') || 'nothing'}`);
  return names[0];
}

/** `a.b.c` where the parser made a field access chain (keywords such as USER inside it). */
function fieldPath(f: Node): string[] {
  const part = (n: Node): string => {
    if (n.Identifier) return n.Identifier.value;
    if (n.Function && n.Function.args === 'None') return objectName(n.Function.name);
    throw new PipelineSqlError('Only dotted field names are supported in a field access (no [index] or expressions)');
  };
  const path = f.root.CompoundIdentifier ? (f.root.CompoundIdentifier as Node[]).map((p) => p.value) : [part(f.root)];
  for (const step of f.access_chain as Node[]) {
    if (!step.Dot) throw new PipelineSqlError('Only dotted field names are supported in a field access (no [index])');
    path.push(part(step.Dot));
  }
  return path;
}

function defaultName(expr: Node, i: number): string {
  if (expr.Identifier) return expr.Identifier.value;
  if (expr.CompoundFieldAccess) return fieldPath(expr.CompoundFieldAccess).at(-1)!;
  if (expr.CompoundIdentifier) return expr.CompoundIdentifier[expr.CompoundIdentifier.length - 1].value;
  if (expr.Function) return `${String(expr.Function.name?.[0]?.Identifier?.value ?? 'expr').toLowerCase()}_${i + 1}`;
  return `col_${i + 1}`;
}

class Scope {
  private readonly byName = new Map<string, Field>();
  constructor(
    readonly stream: string,
    readonly alias: string | undefined,
    readonly fields: Field[] | undefined,
  ) {
    for (const f of fields ?? []) this.byName.set(f.sql_name ?? f.name, f);
  }

  column(path: string[]): Compiled {
    let parts = path;
    if (parts.length > 1 && (parts[0] === this.stream || parts[0] === this.alias)) parts = parts.slice(1);
    const [head, ...rest] = parts;
    if (!this.fields) {
      return { fn: getter([head, ...rest]), type: undefined };
    }
    const f = this.byName.get(head);
    if (!f) throw new PipelineSqlError(`Unknown column ${parts.join('.')} in stream ${this.stream} (its columns: ${[...this.byName.keys()].join(', ')})`);
    let type: ValueType = f.type;
    let cur: Field | undefined = f;
    for (const p of rest) {
      if (cur?.type !== 'struct' && cur?.type !== 'json') throw new PipelineSqlError(`Column ${parts.join('.')}: ${cur?.name} is ${cur?.type}, not a struct`);
      const next: Field | undefined = cur.type === 'struct' ? cur.fields?.find((x) => (x.sql_name ?? x.name) === p) : undefined;
      if (cur.type === 'struct' && !next) throw new PipelineSqlError(`Unknown field ${p} in struct ${cur.name}`);
      cur = next;
      type = next?.type;
    }
    return { fn: getter([f.name, ...rest]), type };
  }
}

function getter(path: string[]): Eval {
  if (path.length === 1) {
    const k = path[0];
    return (ev) => ev[k];
  }
  return (ev) => {
    let v: unknown = ev;
    for (const p of path) {
      if (v === null || typeof v !== 'object') return null;
      v = (v as Record<string, unknown>)[p];
    }
    return v;
  };
}

const NUMERIC = new Set<ValueType>(['int32', 'int64', 'float32', 'float64']);
const isNum = (t: ValueType) => t === undefined || NUMERIC.has(t);

function compile(node: Node, scope: Scope): Compiled {
  if (node.Identifier) return scope.column([node.Identifier.value]);
  if (node.CompoundIdentifier) return scope.column((node.CompoundIdentifier as Node[]).map((p) => p.value));
  if (node.CompoundFieldAccess) return scope.column(fieldPath(node.CompoundFieldAccess));
  if (node.Nested) return compile(node.Nested, scope);
  if (node.Value) return literal(node.Value.value ?? node.Value);
  if (node.UnaryOp) {
    const inner = compile(node.UnaryOp.expr, scope);
    const op = node.UnaryOp.op;
    if (op === 'Not') return { fn: (ev) => not(inner.fn(ev)), type: 'bool' };
    if (op === 'Minus') {
      if (!isNum(inner.type)) throw new PipelineSqlError(`Unary minus needs a number, not ${inner.type}`);
      return { fn: (ev) => { const v = num(inner.fn(ev)); return v === null ? null : -v; }, type: inner.type };
    }
    if (op === 'Plus') return inner;
    throw new PipelineSqlError(`Operator ${op} is not supported`);
  }
  if (node.BinaryOp) return binary(node.BinaryOp, scope);
  if (node.IsNull) {
    const inner = compile(node.IsNull, scope);
    return { fn: (ev) => inner.fn(ev) === null || inner.fn(ev) === undefined, type: 'bool' };
  }
  if (node.IsNotNull) {
    const inner = compile(node.IsNotNull, scope);
    return { fn: (ev) => { const v = inner.fn(ev); return v !== null && v !== undefined; }, type: 'bool' };
  }
  if (node.InList) {
    const e = compile(node.InList.expr, scope);
    const list = (node.InList.list as Node[]).map((x) => compile(x, scope));
    const negated = !!node.InList.negated;
    return {
      fn: (ev) => {
        const v = e.fn(ev);
        if (v === null || v === undefined) return null;
        let sawNull = false;
        for (const item of list) {
          const w = item.fn(ev);
          if (w === null || w === undefined) sawNull = true;
          else if (compare(v, w) === 0) return !negated;
        }
        return sawNull ? null : negated;
      },
      type: 'bool',
    };
  }
  if (node.Between) {
    const e = compile(node.Between.expr, scope);
    const lo = compile(node.Between.low, scope);
    const hi = compile(node.Between.high, scope);
    const negated = !!node.Between.negated;
    return {
      fn: (ev) => {
        const v = e.fn(ev), a = lo.fn(ev), b = hi.fn(ev);
        if (v == null || a == null || b == null) return null;
        const inside = compare(v, a)! >= 0 && compare(v, b)! <= 0;
        return negated ? !inside : inside;
      },
      type: 'bool',
    };
  }
  if (node.Case) return caseExpr(node.Case, scope);
  if (node.Cast) {
    if (node.Cast.format) throw new PipelineSqlError('CAST … FORMAT is not supported');
    const target = castType(node.Cast.data_type);
    const inner = compile(node.Cast.expr, scope);
    const conv = castTo(target)!;
    return { fn: (ev) => conv(inner.fn(ev)), type: target };
  }
  if (node.Function) return fnCall(node.Function, scope);
  throw new PipelineSqlError(`${Object.keys(node)[0]} expressions are not supported in pipeline SQL`);
}

function literal(v: Node): Compiled {
  if (v === 'Null') return { fn: () => null, type: undefined };
  if (v.Number) {
    const text = String(v.Number[0]);
    const n = Number(text);
    return { fn: () => n, type: /^-?\d+$/.test(text) ? 'int64' : 'float64' };
  }
  if (v.SingleQuotedString !== undefined) {
    const s = String(v.SingleQuotedString);
    return { fn: () => s, type: 'string' };
  }
  if (v.Boolean !== undefined) {
    const b = !!v.Boolean;
    return { fn: () => b, type: 'bool' };
  }
  if (v.DoubleQuotedString !== undefined) throw new PipelineSqlError(`"${v.DoubleQuotedString}" is an identifier in double quotes; write string literals in single quotes`);
  throw new PipelineSqlError(`Literal ${Object.keys(v)[0]} is not supported`);
}

const ARITH: Record<string, (a: number, b: number) => number | null> = {
  Plus: (a, b) => a + b,
  Minus: (a, b) => a - b,
  Multiply: (a, b) => a * b,
  Divide: (a, b) => (b === 0 ? null : a / b),
  Modulo: (a, b) => (b === 0 ? null : a % b),
};
const CMP: Record<string, (c: number) => boolean> = {
  Eq: (c) => c === 0,
  NotEq: (c) => c !== 0,
  Lt: (c) => c < 0,
  LtEq: (c) => c <= 0,
  Gt: (c) => c > 0,
  GtEq: (c) => c >= 0,
};

function binary(b: Node, scope: Scope): Compiled {
  const l = compile(b.left, scope);
  const r = compile(b.right, scope);
  const op: string = b.op;
  const arith = ARITH[op];
  if (arith) {
    for (const side of [l, r]) if (!isNum(side.type)) throw new PipelineSqlError(`Operator ${op} needs numbers, not ${side.type}`);
    const isInt = (t: ValueType) => t === 'int32' || t === 'int64';
    // Untyped operands (columns of a stream without a schema) leave the type to the values.
    const type: ValueType = op === 'Divide' ? 'float64' : l.type === undefined || r.type === undefined ? undefined : isInt(l.type) && isInt(r.type) ? 'int64' : 'float64';
    return {
      fn: (ev) => {
        const a = num(l.fn(ev)), c = num(r.fn(ev));
        if (a === null || c === null) return null;
        return arith(a, c);
      },
      type,
    };
  }
  const cmp = CMP[op];
  if (cmp) {
    return {
      fn: (ev) => {
        const a = l.fn(ev), c = r.fn(ev);
        if (a === null || a === undefined || c === null || c === undefined) return null;
        const k = compare(a, c);
        return k === undefined ? null : cmp(k);
      },
      type: 'bool',
    };
  }
  if (op === 'And')
    return {
      fn: (ev) => {
        const a = truth(l.fn(ev));
        if (a === false) return false;
        const c = truth(r.fn(ev));
        if (c === false) return false;
        return a === null || c === null ? null : true;
      },
      type: 'bool',
    };
  if (op === 'Or')
    return {
      fn: (ev) => {
        const a = truth(l.fn(ev));
        if (a === true) return true;
        const c = truth(r.fn(ev));
        if (c === true) return true;
        return a === null || c === null ? null : false;
      },
      type: 'bool',
    };
  if (op === 'StringConcat') return concat([l, r]);
  throw new PipelineSqlError(`Operator ${op} is not supported in pipeline SQL`);
}

function caseExpr(c: Node, scope: Scope): Compiled {
  const operand = c.operand ? compile(c.operand, scope) : undefined;
  const arms = (c.conditions as Node[]).map((arm) => ({
    when: compile(arm.condition ?? arm.when, scope),
    then: compile(arm.result ?? arm.then, scope),
  }));
  // Older parser versions keep conditions and results in two lists.
  if (arms.length === 0 && Array.isArray(c.results)) throw new PipelineSqlError('CASE form not supported by this parser version');
  const otherwise = c.else_result ? compile(c.else_result, scope) : undefined;
  const type = [...arms.map((a) => a.then.type), otherwise?.type].find((t) => t !== undefined);
  return {
    fn: (ev) => {
      const v = operand?.fn(ev);
      for (const arm of arms) {
        const w = arm.when.fn(ev);
        const hit = operand ? v !== null && v !== undefined && w !== null && w !== undefined && compare(v, w) === 0 : w === true;
        if (hit) return arm.then.fn(ev);
      }
      return otherwise ? otherwise.fn(ev) : null;
    },
    type,
  };
}

function fnCall(f: Node, scope: Scope): Compiled {
  // Keywords such as USER parse as calls without parentheses: here they are column names.
  if (f.args === 'None') return scope.column([objectName(f.name)]);
  const name = String(objectName(f.name)).toUpperCase();
  const list = f.args?.List;
  if (f.over) throw new PipelineSqlError(`Window functions are not supported (${name} … OVER)`);
  const args: Compiled[] = ((list?.args ?? []) as Node[]).map((a) => {
    const e = a.Unnamed?.Expr;
    if (!e) throw new PipelineSqlError(`${name}: arguments must be plain expressions`);
    return compile(e, scope);
  });
  if (list?.duplicate_treatment) throw new PipelineSqlError(`${name}: DISTINCT arguments are not supported`);
  const arity = (n: number) => {
    if (args.length !== n) throw new PipelineSqlError(`${name} takes ${n} argument${n === 1 ? '' : 's'}, got ${args.length}`);
  };
  switch (name) {
    case 'UPPER':
    case 'LOWER': {
      arity(1);
      const a = args[0];
      const up = name === 'UPPER';
      return { fn: (ev) => { const v = a.fn(ev); if (v === null || v === undefined) return null; const s = text(v); return up ? s.toUpperCase() : s.toLowerCase(); }, type: 'string' };
    }
    case 'CONCAT':
      if (args.length === 0) throw new PipelineSqlError('CONCAT takes at least one argument');
      return concat(args, true);
    case 'COALESCE':
      if (args.length === 0) throw new PipelineSqlError('COALESCE takes at least one argument');
      return {
        fn: (ev) => {
          for (const a of args) {
            const v = a.fn(ev);
            if (v !== null && v !== undefined) return v;
          }
          return null;
        },
        type: args.map((a) => a.type).find((t) => t !== undefined),
      };
    default:
      throw new PipelineSqlError(`Function ${name} is not supported (UPPER, LOWER, CONCAT, COALESCE, CASE and CAST are)`);
  }
}

/** CONCAT skips nulls (as most engines do); `||` gives null when either side is null. */
function concat(args: Compiled[], skipNulls = false): Compiled {
  return {
    fn: (ev) => {
      let out = '';
      for (const a of args) {
        const v = a.fn(ev);
        if (v === null || v === undefined) {
          if (skipNulls) continue;
          return null;
        }
        out += text(v);
      }
      return out;
    },
    type: 'string',
  };
}

const CAST_TYPES: Record<string, FieldType> = {
  string: 'string', varchar: 'string', text: 'string', char: 'string', charactervarying: 'string',
  int32: 'int32', int: 'int32', integer: 'int32', int4: 'int32',
  int64: 'int64', bigint: 'int64', int8: 'int64',
  float32: 'float32', float: 'float32', real: 'float32', float4: 'float32',
  float64: 'float64', double: 'float64', doubleprecision: 'float64', float8: 'float64',
  bool: 'bool', boolean: 'bool',
  timestamp: 'timestamp',
};

function castType(dt: Node): FieldType {
  const raw = typeof dt === 'string' ? dt : Object.keys(dt ?? {})[0];
  const custom = typeof dt === 'object' && dt?.Custom ? objectName(dt.Custom[0]) : undefined;
  const key = String(custom ?? raw ?? '').toLowerCase().replace(/[^a-z0-9]/g, '');
  const t = CAST_TYPES[key];
  if (!t) throw new PipelineSqlError(`CAST to ${custom ?? raw} is not supported; use string, int32, int64, float32, float64, bool or timestamp`);
  return t;
}

/** The converter a value goes through to become `type`; null when it cannot. */
export function castTo(type: ValueType): ((v: unknown) => unknown) | undefined {
  switch (type) {
    case 'string':
      return (v) => (v === null || v === undefined ? null : text(v));
    case 'int32':
    case 'int64': {
      const [min, max] = type === 'int32' ? [-2147483648, 2147483647] : [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER];
      return (v) => {
        const n = typeof v === 'boolean' ? Number(v) : num(v);
        if (n === null || !Number.isFinite(n)) return null;
        const t = Math.trunc(n);
        return t < min || t > max ? null : t;
      };
    }
    case 'float32':
      return (v) => { const n = num(v); return n === null ? null : Math.fround(n); };
    case 'float64':
      return (v) => num(v);
    case 'bool':
      return (v) => {
        if (typeof v === 'boolean') return v;
        if (typeof v === 'number') return v !== 0;
        if (typeof v === 'string') {
          const s = v.trim().toLowerCase();
          if (s === 'true' || s === 't' || s === '1') return true;
          if (s === 'false' || s === 'f' || s === '0') return false;
        }
        return null;
      };
    case 'timestamp':
      return (v) => {
        let ms: number;
        if (typeof v === 'number') ms = v;
        else if (typeof v === 'string') ms = /^-?\d+$/.test(v.trim()) ? Number(v) : RFC3339.test(v) ? Date.parse(v) : NaN;
        else return null;
        if (!Number.isFinite(ms)) return null;
        const d = new Date(ms);
        return Number.isNaN(d.getTime()) ? null : d.toISOString();
      };
    default:
      return undefined;
  }
}

/** Timestamps in text: an RFC 3339 date, optionally with a time (Date.parse alone takes "42.9"). */
export const RFC3339 = /^\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?)?$/;

function text(v: unknown): string {
  if (typeof v === 'string') return v;
  if (typeof v === 'object' && v !== null) return JSON.stringify(v);
  return String(v);
}

function num(v: unknown): number | null {
  if (typeof v === 'number') return Number.isFinite(v) ? v : null;
  if (typeof v === 'string' && v.trim() !== '') {
    const n = Number(v);
    return Number.isFinite(n) ? n : null;
  }
  return null;
}

function truth(v: unknown): boolean | null {
  if (v === null || v === undefined) return null;
  return v === true;
}

function not(v: unknown): boolean | null {
  const t = truth(v);
  return t === null ? null : !t;
}

/** Compares like values: numbers numerically, the rest as text; undefined when incomparable. */
function compare(a: unknown, b: unknown): number | undefined {
  if (typeof a === 'number' || typeof b === 'number') {
    const x = num(a), y = num(b);
    if (x === null || y === null) return undefined;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (typeof a === 'boolean' || typeof b === 'boolean') {
    if (typeof a !== typeof b) return undefined;
    return a === b ? 0 : a ? 1 : -1;
  }
  const s = text(a), t = text(b);
  return s < t ? -1 : s > t ? 1 : 0;
}
