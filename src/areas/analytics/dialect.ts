/**
 * The analytics SQL dialect: ClickHouse-flavoured SQL parsed by a real SQL parser (sqlparser-rs,
 * ClickHouse dialect, through WebAssembly) and translated node by node from its syntax tree to
 * DuckDB SQL. Only what is listed here is translated; every other node, function or clause is
 * refused with a message naming it, so a query can reach nothing but the relations the caller's
 * datasets resolve to (no table functions, no files, no other accounts' tables).
 *
 * Statements: `SHOW TABLES`, `SHOW TIMEZONE(S)`, and one SELECT (subqueries in FROM allowed; no
 * JOIN, UNION or CTE), with an optional trailing `FORMAT JSON|JSONEachRow|TabSeparated`.
 */
import { init, parse } from '@guanmingchiu/sqlparser-ts';

export type OutputFormat = 'JSON' | 'JSONEachRow' | 'TabSeparated';

export type Translated =
  | { kind: 'select'; sql: string; format: OutputFormat; totalColumn?: string }
  | { kind: 'show_tables' | 'show_timezone' | 'show_timezones'; format: OutputFormat };

/** A query the dialect refuses; `line`/`column` point into the query text when known. */
export class SqlError extends Error {
  constructor(
    message: string,
    readonly line?: number,
    readonly column?: number,
  ) {
    super(message);
  }
}

/** Resolves a dataset name in FROM to the DuckDB relation (a SELECT) that holds it. */
export type DatasetResolver = (name: string) => string | undefined;

export interface TranslateOptions {
  resolve: DatasetResolver;
  /** `now()` as seen by the store's clock. */
  now: Date;
}

/** Name of the column added to a limited query to learn `rows_before_limit_at_least`. */
export const TOTAL_COLUMN = '__outpost_rows_before_limit';

let ready: Promise<void> | undefined;
/** Loads the parser (WebAssembly); called once before the first query. */
export function initDialect(): Promise<void> {
  ready ??= init();
  return ready;
}

/** The parser's syntax tree, walked as untyped JSON. */
type Node = any;

const FORMATS: Record<string, OutputFormat> = {
  json: 'JSON',
  jsoneachrow: 'JSONEachRow',
  tabseparated: 'TabSeparated',
  tsv: 'TabSeparated',
};

export async function translate(sql: string, opts: TranslateOptions): Promise<Translated> {
  await initDialect();
  let statements: Node[];
  try {
    statements = parse(sql, 'clickhouse') as Node[];
  } catch (err) {
    const message = String((err as Error).message ?? err).replace(/^sql parser error: /, '');
    const pos = /at Line: (\d+), Column: (\d+)/.exec(message);
    throw new SqlError(message, pos ? Number(pos[1]) : undefined, pos ? Number(pos[2]) : undefined);
  }
  if (statements.length !== 1) throw new SqlError('Send exactly one statement per request');
  const st = statements[0];
  const kind = Object.keys(st)[0];
  if (kind === 'ShowTables') return { kind: 'show_tables', format: 'JSON' };
  if (kind === 'ShowVariable') {
    const name = (st.ShowVariable.variable as Node[]).map((i) => String(i.value).toUpperCase()).join(' ');
    if (name === 'TIMEZONE') return { kind: 'show_timezone', format: 'JSON' };
    if (name === 'TIMEZONES') return { kind: 'show_timezones', format: 'JSON' };
    throw new SqlError(`SHOW ${name} is not supported (SHOW TABLES, SHOW TIMEZONE and SHOW TIMEZONES are)`);
  }
  if (kind !== 'Query') {
    throw new SqlError(`${kind} statements are not allowed: only SELECT and SHOW queries are accepted`);
  }
  const t = new Translator(opts);
  const q = st.Query;
  const format = formatOf(q.format_clause);
  const top = t.query(q, true);
  return { kind: 'select', sql: top.sql, format, ...(top.total ? { totalColumn: TOTAL_COLUMN } : {}) };
}

function formatOf(clause: Node): OutputFormat {
  if (!clause || clause === 'Null') return 'JSON';
  const name = clause.Identifier?.value as string | undefined;
  const f = name ? FORMATS[name.toLowerCase()] : undefined;
  if (!f) throw new SqlError(`FORMAT ${name ?? '?'} is not supported (JSON, JSONEachRow and TabSeparated are)`);
  return f;
}

function ident(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

function str(value: string): string {
  return `'${value.replace(/'/g, "''")}'`;
}

function spanOf(n: Node): { line: number; column: number } | undefined {
  const s = n?.span?.start ?? n?.Identifier?.span?.start;
  return s && s.line > 0 ? s : undefined;
}

function fail(message: string, n?: Node): never {
  const s = spanOf(n);
  throw new SqlError(message, s?.line, s?.column);
}

function single(n: Node): [string, Node] {
  if (n === null || typeof n !== 'object') return [String(n), undefined];
  const keys = Object.keys(n);
  return [keys[0], n[keys[0]]];
}

const BINARY: Record<string, string> = {
  Plus: '+',
  Minus: '-',
  Multiply: '*',
  Divide: '/',
  Modulo: '%',
  Gt: '>',
  Lt: '<',
  GtEq: '>=',
  LtEq: '<=',
  Eq: '=',
  NotEq: '<>',
  And: 'AND',
  Or: 'OR',
  StringConcat: '||',
};

/** ClickHouse's own names for operators, used in column names of unaliased expressions. */
const CH_OPERATOR: Record<string, string> = {
  Plus: 'plus',
  Minus: 'minus',
  Multiply: 'multiply',
  Divide: 'divide',
  Modulo: 'modulo',
  Gt: 'greater',
  Lt: 'less',
  GtEq: 'greaterOrEquals',
  LtEq: 'lessOrEquals',
  Eq: 'equals',
  NotEq: 'notEquals',
  And: 'and',
  Or: 'or',
  StringConcat: 'concat',
};

const UNITS: Record<string, string> = {
  Second: 'SECOND',
  Seconds: 'SECOND',
  Minute: 'MINUTE',
  Minutes: 'MINUTE',
  Hour: 'HOUR',
  Hours: 'HOUR',
  Day: 'DAY',
  Days: 'DAY',
  Week: 'WEEK',
  Weeks: 'WEEK',
  Month: 'MONTH',
  Months: 'MONTH',
  Quarter: 'QUARTER',
  Year: 'YEAR',
  Years: 'YEAR',
};

const TYPES: Record<string, string> = {
  string: 'VARCHAR',
  float64: 'DOUBLE',
  float32: 'FLOAT',
  int8: 'TINYINT',
  int16: 'SMALLINT',
  int32: 'INTEGER',
  int64: 'BIGINT',
  uint8: 'UTINYINT',
  uint16: 'USMALLINT',
  uint32: 'UINTEGER',
  uint64: 'UBIGINT',
  datetime: 'TIMESTAMP',
  date: 'DATE',
  bool: 'BOOLEAN',
  boolean: 'BOOLEAN',
};

interface Call {
  name: string;
  args: string[];
  params: string[];
  distinct: boolean;
  raw: Node[];
  node: Node;
  /** The translator, for functions that need more than an expression (weighted quantiles). */
  t: Translator;
}

type FnImpl = (c: Call) => string;
interface Fn {
  /** Allowed argument counts [min, max]. */
  arity: [number, number];
  /** Parameter counts for parametric aggregates `f(params)(args)`; default none. */
  params?: [number, number];
  /** Whether `f(DISTINCT x)` is accepted. */
  distinct?: boolean;
  impl: FnImpl;
}

const simple = (duck: string, min: number, max = min): Fn => ({
  arity: [min, max],
  impl: (c) => `${duck}(${c.args.join(', ')})`,
});
const cast = (type: string): Fn => ({ arity: [1, 1], impl: (c) => `CAST(${c.args[0]} AS ${type})` });
const op = (o: string): Fn => ({ arity: [2, 2], impl: (c) => `(${c.args[0]} ${o} ${c.args[1]})` });
const aggregate = (duck: string): Fn => ({
  arity: [1, 1],
  distinct: true,
  impl: (c) => `${duck}(${c.distinct ? 'DISTINCT ' : ''}${c.args[0]})`,
});
const filtered = (duck: string): Fn => ({
  arity: [2, 2],
  impl: (c) => `${duck}(${c.args[0]}) FILTER (WHERE ${c.args[1]})`,
});
const extract = (part: string): Fn => ({ arity: [1, 1], impl: (c) => `CAST(date_part('${part}', ${c.args[0]}) AS UINTEGER)` });
const trunc = (unit: string): Fn => ({ arity: [1, 1], impl: (c) => `date_trunc('${unit}', CAST(${c.args[0]} AS TIMESTAMP))` });
const bucket = (interval: string): Fn => ({
  arity: [1, 1],
  impl: (c) => `time_bucket(INTERVAL '${interval}', CAST(${c.args[0]} AS TIMESTAMP), TIMESTAMP '1970-01-01')`,
});

function checkLevel(c: Call, i: number): string {
  const lit = c.raw[i];
  const v = lit?.Value?.value?.Number?.[0];
  if (v === undefined || !(Number(v) >= 0 && Number(v) <= 1)) fail(`${c.name}: the level must be a number between 0 and 1`, c.node);
  return String(Number(v));
}

const FUNCTIONS: Record<string, Fn> = {
  // aggregates
  count: {
    arity: [0, 1],
    distinct: true,
    impl: (c) =>
      c.args.length === 0 ? 'CAST(count(*) AS UBIGINT)' : `CAST(count(${c.distinct ? 'DISTINCT ' : ''}${c.args[0]}) AS UBIGINT)`,
  },
  sum: aggregate('sum'),
  avg: aggregate('avg'),
  min: aggregate('min'),
  max: aggregate('max'),
  any: simple('any_value', 1),
  uniq: { arity: [1, 1], impl: (c) => `CAST(count(DISTINCT ${c.args[0]}) AS UBIGINT)` },
  uniqexact: { arity: [1, 1], impl: (c) => `CAST(count(DISTINCT ${c.args[0]}) AS UBIGINT)` },
  median: simple('median', 1),
  quantile: {
    arity: [1, 1],
    params: [0, 1],
    impl: (c) => `quantile_cont(${c.args[0]}, ${c.params.length ? levelParam(c) : '0.5'})`,
  },
  quantileexact: {
    arity: [1, 1],
    params: [0, 1],
    impl: (c) => `quantile_disc(${c.args[0]}, ${c.params.length ? levelParam(c) : '0.5'})`,
  },
  quantileexactweighted: {
    arity: [2, 2],
    params: [0, 1],
    impl: (c) => c.t.weighted(c.params.length ? levelParam(c) : '0.5', c.args[0], c.args[1], c.node),
  },
  quantileweighted: {
    arity: [2, 3],
    params: [0, 1],
    impl: (c) =>
      c.args.length === 3
        ? c.t.weighted(checkLevel(c, 0), c.args[1], c.args[2], c.node)
        : c.t.weighted(c.params.length ? levelParam(c) : '0.5', c.args[0], c.args[1], c.node),
  },
  argmax: simple('arg_max', 2),
  argmin: simple('arg_min', 2),
  first_value: simple('first', 1),
  last_value: simple('last', 1),
  topk: {
    arity: [1, 1],
    params: [0, 1],
    impl: (c) => {
      const n = c.params.length ? Number(c.params[0]) : 10;
      if (!Number.isInteger(n) || n < 1 || n > 10_000) fail('topK: N must be an integer between 1 and 10000', c.node);
      return `list_transform(list_slice(list_reverse_sort(list_transform(map_entries(histogram(${c.args[0]})), e -> {'c': e.value, 'k': e.key})), 1, ${n}), e -> e.k)`;
    },
  },
  countif: { arity: [1, 1], impl: (c) => `CAST(count(*) FILTER (WHERE ${c.args[0]}) AS UBIGINT)` },
  sumif: filtered('sum'),
  avgif: filtered('avg'),
  minif: filtered('min'),
  maxif: filtered('max'),
  stddevpop: simple('stddev_pop', 1),
  stddevsamp: simple('stddev_samp', 1),
  varpop: simple('var_pop', 1),
  varsamp: simple('var_samp', 1),
  corr: simple('corr', 2),
  covarpop: simple('covar_pop', 2),
  covarsamp: simple('covar_samp', 2),
  groupbitand: simple('bit_and', 1),
  groupbitor: simple('bit_or', 1),
  groupbitxor: simple('bit_xor', 1),
  // conditional
  if: { arity: [3, 3], impl: (c) => `(CASE WHEN ${c.args[0]} THEN ${c.args[1]} ELSE ${c.args[2]} END)` },
  multiif: {
    arity: [3, 255],
    impl: (c) => {
      if (c.args.length % 2 === 0) fail('multiIf: expects pairs of condition and value, then an else value', c.node);
      const parts: string[] = [];
      for (let i = 0; i + 1 < c.args.length; i += 2) parts.push(`WHEN ${c.args[i]} THEN ${c.args[i + 1]}`);
      return `(CASE ${parts.join(' ')} ELSE ${c.args[c.args.length - 1]} END)`;
    },
  },
  coalesce: simple('coalesce', 1, 255),
  ifnull: simple('coalesce', 2),
  nullif: simple('nullif', 2),
  isnull: { arity: [1, 1], impl: (c) => `(${c.args[0]} IS NULL)` },
  isnotnull: { arity: [1, 1], impl: (c) => `(${c.args[0]} IS NOT NULL)` },
  // date and time
  tostartofinterval: {
    arity: [2, 2],
    impl: (c) => {
      if (!c.raw[1]?.Interval) fail("toStartOfInterval: the second argument must be an interval, e.g. INTERVAL '5' MINUTE", c.node);
      return `time_bucket(${c.args[1]}, CAST(${c.args[0]} AS TIMESTAMP), TIMESTAMP '1970-01-01')`;
    },
  },
  tostartofminute: trunc('minute'),
  tostartoffiveminutes: bucket('5 minutes'),
  tostartoffifteenminutes: bucket('15 minutes'),
  tostartofhour: trunc('hour'),
  tostartofday: trunc('day'),
  tostartofmonth: { arity: [1, 1], impl: (c) => `CAST(date_trunc('month', CAST(${c.args[0]} AS TIMESTAMP)) AS DATE)` },
  tostartofyear: { arity: [1, 1], impl: (c) => `CAST(date_trunc('year', CAST(${c.args[0]} AS TIMESTAMP)) AS DATE)` },
  todatetime: {
    arity: [1, 1],
    impl: (c) =>
      c.raw[0]?.Value?.value?.Number ? `CAST(to_timestamp(${c.args[0]}) AS TIMESTAMP)` : `CAST(${c.args[0]} AS TIMESTAMP)`,
  },
  todate: cast('DATE'),
  tounixtimestamp: { arity: [1, 1], impl: (c) => `CAST(floor(epoch(CAST(${c.args[0]} AS TIMESTAMP))) AS UINTEGER)` },
  toyear: extract('year'),
  tomonth: extract('month'),
  todayofmonth: extract('day'),
  todayofweek: extract('isodow'),
  tohour: extract('hour'),
  tominute: extract('minute'),
  tosecond: extract('second'),
  formatdatetime: { arity: [2, 2], impl: (c) => `strftime(CAST(${c.args[0]} AS TIMESTAMP), ${c.args[1]})` },
  datediff: simple('date_diff', 3),
  // strings
  length: simple('strlen', 1),
  lengthutf8: simple('length', 1),
  lower: simple('lower', 1),
  upper: simple('upper', 1),
  lowerutf8: simple('lower', 1),
  upperutf8: simple('upper', 1),
  concat: simple('concat', 1, 255),
  substring: simple('substring', 2, 3),
  substr: simple('substring', 2, 3),
  position: simple('instr', 2),
  startswith: simple('starts_with', 2),
  endswith: simple('ends_with', 2),
  trimboth: simple('trim', 1),
  trim: simple('trim', 1),
  trimleft: simple('ltrim', 1),
  trimright: simple('rtrim', 1),
  replaceall: simple('replace', 3),
  replace: simple('replace', 3),
  reverse: simple('reverse', 1),
  leftpad: simple('lpad', 3),
  rightpad: simple('rpad', 3),
  empty: { arity: [1, 1], impl: (c) => `(strlen(${c.args[0]}) = 0)` },
  notempty: { arity: [1, 1], impl: (c) => `(strlen(${c.args[0]}) > 0)` },
  // encoding
  hex: simple('hex', 1),
  unhex: { arity: [1, 1], impl: (c) => `CAST(unhex(${c.args[0]}) AS VARCHAR)` },
  base64encode: { arity: [1, 1], impl: (c) => `to_base64(CAST(${c.args[0]} AS BLOB))` },
  base64decode: { arity: [1, 1], impl: (c) => `CAST(from_base64(${c.args[0]}) AS VARCHAR)` },
  // math and rounding
  abs: simple('abs', 1),
  round: simple('round', 1, 2),
  floor: simple('floor', 1),
  ceil: simple('ceil', 1),
  ceiling: simple('ceil', 1),
  trunc: simple('trunc', 1),
  sqrt: simple('sqrt', 1),
  cbrt: simple('cbrt', 1),
  exp: simple('exp', 1),
  log: simple('ln', 1),
  ln: simple('ln', 1),
  log2: simple('log2', 1),
  log10: simple('log10', 1),
  pow: simple('pow', 2),
  power: simple('pow', 2),
  sign: simple('sign', 1),
  greatest: simple('greatest', 2, 255),
  least: simple('least', 2, 255),
  intdiv: op('//'),
  modulo: op('%'),
  pi: simple('pi', 0),
  // bits
  bitand: op('&'),
  bitor: op('|'),
  bitxor: simple('xor', 2),
  bitnot: { arity: [1, 1], impl: (c) => `(~${c.args[0]})` },
  bitshiftleft: op('<<'),
  bitshiftright: op('>>'),
  bitcount: simple('bit_count', 1),
  // type conversion
  tostring: cast('VARCHAR'),
  tofloat64: cast('DOUBLE'),
  tofloat32: cast('FLOAT'),
  toint8: cast('TINYINT'),
  toint16: cast('SMALLINT'),
  toint32: cast('INTEGER'),
  toint64: cast('BIGINT'),
  touint8: cast('UTINYINT'),
  touint16: cast('USMALLINT'),
  touint32: cast('UINTEGER'),
  touint64: cast('UBIGINT'),
};

function levelParam(c: Call): string {
  const v = c.node.parameters?.List?.args?.[0]?.Unnamed?.Expr?.Value?.value?.Number?.[0];
  if (v === undefined || !(Number(v) >= 0 && Number(v) <= 1)) fail(`${c.name}: the level must be a number between 0 and 1`, c.node);
  return String(Number(v));
}

/** A weighted quantile of one SELECT: computed from running weights over the rows of its group. */
interface WeightedNeed {
  x: string;
  w: string;
  n: number;
}

class Translator {
  /** Weighted quantiles of the SELECTs being translated, innermost last. */
  private readonly scopes: WeightedNeed[][] = [];
  private counter = 0;

  constructor(private readonly opts: TranslateOptions) {}

  /**
   * `quantileExactWeighted(q)(x, w)`: the smallest x whose running weight, in x order, reaches
   * ⌈q·Σw⌉ (ClickHouse's definition). The running and total weights are window sums over the
   * query's group, added to the FROM relation; the aggregate is then a filtered `min`.
   */
  weighted(q: string, x: string, w: string, at: Node): string {
    const scope = this.scopes[this.scopes.length - 1];
    if (!scope) fail('weighted quantiles need a FROM clause', at);
    const n = this.counter++;
    scope.push({ x, w, n });
    return `min(${x}) FILTER (WHERE "__cw${n}" >= ceil("__tw${n}" * ${q}))`;
  }

  /** A query; `top` adds the window column that counts rows before LIMIT. */
  query(q: Node, top = false): { sql: string; total: boolean } {
    if (q.with) fail('WITH is not supported');
    if (q.fetch || (q.settings && q.settings.length) || (q.for_clause && q.for_clause !== 'Null'))
      fail('FETCH, SETTINGS and FOR clauses are not supported');
    if (q.pipe_operators?.length) fail('pipe operators are not supported');
    if (q.locks?.length) fail('locking clauses are not supported');
    if (!top && q.format_clause) fail('FORMAT is only allowed at the end of the outer query');
    const [bodyKind, body] = single(q.body);
    if (bodyKind !== 'Select') {
      if (bodyKind === 'SetOperation') fail('UNION, INTERSECT and EXCEPT are not supported (one table per query)');
      if (bodyKind === 'Query') return { sql: `(${this.query(body).sql})`, total: false };
      fail(`${bodyKind} is not supported`);
    }
    const limit = this.limit(q.limit_clause);
    const countTotal = top && limit !== '' && !body.distinct;
    let sql = this.select(body, countTotal, q.order_by);
    sql += limit;
    return { sql, total: countTotal };
  }

  private limit(clause: Node): string {
    if (!clause) return '';
    const [kind, l] = single(clause);
    let limit: Node;
    let offset: Node;
    if (kind === 'LimitOffset') {
      if (l.limit_by?.length) fail('LIMIT … BY is not supported');
      limit = l.limit;
      offset = l.offset?.value;
    } else if (kind === 'OffsetCommaLimit') {
      limit = l.limit;
      offset = l.offset;
    } else fail(`${kind} is not supported`);
    let out = '';
    if (limit !== undefined && limit !== null) out += ` LIMIT ${this.count(limit, 'LIMIT')}`;
    if (offset !== undefined && offset !== null) out += ` OFFSET ${this.count(offset, 'OFFSET')}`;
    return out;
  }

  private count(n: Node, what: string): string {
    if (n?.Value?.value === 'Null') return 'ALL';
    const v = n?.Value?.value?.Number?.[0];
    if (v === undefined || !/^\d+$/.test(v)) fail(`${what} takes a non-negative integer`, n);
    return v;
  }

  private select(s: Node, countTotal: boolean, orderBy?: Node): string {
    const unsupported: [string, boolean][] = [
      ['TOP', !!s.top],
      ['INTO', !!s.into],
      ['LATERAL VIEW', s.lateral_views?.length > 0],
      ['PREWHERE', !!s.prewhere],
      ['QUALIFY', !!s.qualify],
      ['WINDOW', s.named_window?.length > 0],
      ['CLUSTER BY', s.cluster_by?.length > 0],
      ['DISTRIBUTE BY', s.distribute_by?.length > 0],
      ['SORT BY', s.sort_by?.length > 0],
      ['CONNECT BY', s.connect_by?.length > 0 || (!!s.connect_by && !Array.isArray(s.connect_by))],
      ['VALUE/STRUCT', s.value_table_mode !== undefined && s.value_table_mode !== null],
    ];
    for (const [what, present] of unsupported) if (present) fail(`${what} is not supported`);
    let distinct = '';
    if (s.distinct) {
      if (s.distinct !== 'Distinct') fail('DISTINCT ON is not supported');
      distinct = 'DISTINCT ';
    }
    const scope: WeightedNeed[] = [];
    this.scopes.push(scope);
    const items = (s.projection as Node[]).map((p) => this.selectItem(p));
    if (countTotal) items.push(`count(*) OVER () AS ${ident(TOTAL_COLUMN)}`);
    const from = s.from as Node[];
    if (from.length > 1) fail('one table per query: JOIN and comma-separated FROM lists are not supported');
    let relation = '';
    let alias = '';
    if (from.length === 1) {
      if (from[0].joins?.length) fail('JOIN is not supported (one table per query)');
      ({ sql: relation, alias } = this.relation(from[0].relation));
    }
    const where = s.selection ? this.expr(s.selection) : '';
    let groupBy = '';
    let partition: string[] = [];
    const g = s.group_by;
    if (g) {
      const [gk, gv] = single(g);
      if (gk === 'All') groupBy = ' GROUP BY ALL';
      else if (gk === 'Expressions') {
        const [exprs, modifiers] = gv as [Node[], Node[]];
        if (modifiers?.length) fail('GROUP BY modifiers (WITH ROLLUP, CUBE, TOTALS) are not supported');
        const grouped = exprs.map((e) => this.expr(e));
        if (grouped.length) groupBy = ` GROUP BY ${grouped.join(', ')}`;
        // A GROUP BY naming a SELECT alias partitions the running weights by the aliased expression.
        const aliases = new Map<string, Node>();
        for (const p of s.projection as Node[]) if (p.ExprWithAlias) aliases.set(p.ExprWithAlias.alias.value, p.ExprWithAlias.expr);
        partition = exprs.map((e, i) => {
          const name = e.Identifier?.value as string | undefined;
          const target = name !== undefined && !e.Identifier.quote_style ? aliases.get(name) : undefined;
          return target ? this.expr(target) : grouped[i];
        });
      } else fail(`GROUP BY ${gk} is not supported`);
    }
    const having = s.having ? ` HAVING ${this.expr(s.having)}` : '';
    this.scopes.pop();
    let sql = `SELECT ${distinct}${items.join(', ')}`;
    if (scope.length > 0) {
      if (!relation) fail('weighted quantiles need a FROM clause');
      if (groupBy === ' GROUP BY ALL') fail('weighted quantiles with GROUP BY ALL are not supported; name the groups');
      const by = partition.length ? `PARTITION BY ${partition.join(', ')} ` : '';
      const windows = scope.map(({ x, w, n }) => {
        const weight = `CASE WHEN ${x} IS NOT NULL THEN CAST(${w} AS DOUBLE) END`;
        return `sum(${weight}) OVER (${by}ORDER BY ${x} ROWS UNBOUNDED PRECEDING) AS "__cw${n}", sum(${weight}) OVER (${by.trim()}) AS "__tw${n}"`;
      });
      sql += ` FROM (SELECT *, ${windows.join(', ')} FROM ${relation}${where ? ` WHERE ${where}` : ''}) AS ${alias}`;
    } else {
      if (relation) sql += ` FROM ${relation}`;
      if (where) sql += ` WHERE ${where}`;
    }
    sql += groupBy + having;
    if (orderBy) sql += ` ORDER BY ${this.orderBy(orderBy)}`;
    return sql;
  }

  private selectItem(p: Node): string {
    const [kind, v] = single(p);
    if (kind === 'UnnamedExpr') return `${this.expr(v)} AS ${ident(label(v))}`;
    if (kind === 'ExprWithAlias') return `${this.expr(v.expr)} AS ${ident(v.alias.value)}`;
    if (kind === 'Wildcard') {
      if (v.opt_exclude || v.opt_except || v.opt_replace || v.opt_rename || v.opt_ilike) fail('wildcard options are not supported');
      return '*';
    }
    if (kind === 'QualifiedWildcard') fail('qualified wildcards (t.*) are not supported; use *');
    return fail(`${kind} is not supported in SELECT`);
  }

  private relation(r: Node): { sql: string; alias: string } {
    const [kind, v] = single(r);
    if (kind === 'Table') {
      if (v.args || v.with_hints?.length || v.version || v.partitions?.length || v.sample || v.index_hints?.length)
        fail('table functions, hints and samples are not supported: FROM takes a dataset name');
      const name = v.name as Node[];
      if (name.length !== 1) fail(`FROM takes a plain dataset name, not ${name.map((n) => n.Identifier?.value).join('.')}`, name[0]);
      const ds = name[0].Identifier?.value as string | undefined;
      if (ds === undefined) fail('FROM takes a dataset name');
      const relation = this.opts.resolve(ds);
      if (relation === undefined) fail(`Unknown dataset '${ds}': no data has been written to it in this account`, name[0]);
      const alias = ident(v.alias ? v.alias.name.value : ds);
      return { sql: `(${relation}) AS ${alias}`, alias };
    }
    if (kind === 'Derived') {
      if (v.lateral) fail('LATERAL is not supported');
      const alias = ident(v.alias ? v.alias.name.value : '__subquery');
      return { sql: `(${this.query(v.subquery).sql}) AS ${alias}`, alias };
    }
    if (kind === 'NestedJoin') fail('JOIN is not supported (one table per query)');
    return fail(`${kind} is not supported in FROM: FROM takes a dataset name or a subquery`);
  }

  private orderBy(o: Node): string {
    const [kind, v] = single(o.kind);
    if (kind !== 'Expressions') fail(`ORDER BY ${kind} is not supported`);
    if (o.interpolate) fail('INTERPOLATE is not supported');
    return (v as Node[])
      .map((e) => {
        if (e.with_fill) fail('WITH FILL is not supported');
        let s = this.expr(e.expr);
        if (e.options?.asc === false) s += ' DESC';
        else if (e.options?.asc === true) s += ' ASC';
        if (e.options?.nulls_first === true) s += ' NULLS FIRST';
        else if (e.options?.nulls_first === false) s += ' NULLS LAST';
        return s;
      })
      .join(', ');
  }

  expr(n: Node): string {
    const [kind, v] = single(n);
    switch (kind) {
      case 'Identifier':
        return ident(v.value);
      case 'CompoundIdentifier':
        return (v as Node[]).map((i) => ident(i.value)).join('.');
      case 'Value':
        return this.value(v.value, n);
      case 'Nested':
        return `(${this.expr(v)})`;
      case 'BinaryOp': {
        const o = BINARY[typeof v.op === 'string' ? v.op : Object.keys(v.op)[0]];
        if (!o) fail(`operator ${JSON.stringify(v.op)} is not supported`);
        return `(${this.expr(v.left)} ${o} ${this.expr(v.right)})`;
      }
      case 'UnaryOp': {
        const o = ({ Minus: '-', Plus: '+', Not: 'NOT ' } as Record<string, string>)[v.op];
        if (!o) fail(`operator ${v.op} is not supported`);
        return `(${o}${this.expr(v.expr)})`;
      }
      case 'Like':
      case 'ILike': {
        if (v.any) fail(`${kind.toUpperCase()} ANY is not supported`);
        const esc = v.escape_char ? ` ESCAPE ${this.value(v.escape_char, n)}` : '';
        return `(${this.expr(v.expr)} ${v.negated ? 'NOT ' : ''}${kind === 'Like' ? 'LIKE' : 'ILIKE'} ${this.expr(v.pattern)}${esc})`;
      }
      case 'Between':
        return `(${this.expr(v.expr)} ${v.negated ? 'NOT ' : ''}BETWEEN ${this.expr(v.low)} AND ${this.expr(v.high)})`;
      case 'InList':
        return `(${this.expr(v.expr)} ${v.negated ? 'NOT ' : ''}IN (${(v.list as Node[]).map((e) => this.expr(e)).join(', ')}))`;
      case 'IsNull':
        return `(${this.expr(v)} IS NULL)`;
      case 'IsNotNull':
        return `(${this.expr(v)} IS NOT NULL)`;
      case 'IsTrue':
        return `(${this.expr(v)} IS TRUE)`;
      case 'IsFalse':
        return `(${this.expr(v)} IS FALSE)`;
      case 'Case': {
        let s = 'CASE';
        if (v.operand) s += ` ${this.expr(v.operand)}`;
        for (const c of v.conditions as Node[]) s += ` WHEN ${this.expr(c.condition)} THEN ${this.expr(c.result)}`;
        if (v.else_result) s += ` ELSE ${this.expr(v.else_result)}`;
        return `(${s} END)`;
      }
      case 'Cast': {
        if (v.format) fail('CAST … FORMAT is not supported');
        return `${v.kind === 'TryCast' || v.kind === 'SafeCast' ? 'TRY_CAST' : 'CAST'}(${this.expr(v.expr)} AS ${this.type(v.data_type, n)})`;
      }
      case 'Interval':
        return this.interval(v, n);
      case 'Function':
        return this.call(v);
      case 'Tuple':
        return `(${(v as Node[]).map((e) => this.expr(e)).join(', ')})`;
      case 'Substring': {
        const len = v.substring_for ? `, ${this.expr(v.substring_for)}` : '';
        return `substring(${this.expr(v.expr)}, ${v.substring_from ? this.expr(v.substring_from) : '1'}${len})`;
      }
      case 'Position':
        return `instr(${this.expr(v.in)}, ${this.expr(v.expr)})`;
      case 'Trim': {
        if (v.trim_where || v.trim_what || v.trim_characters) fail('TRIM takes one argument here; use trimLeft/trimRight', v);
        return `trim(${this.expr(v.expr)})`;
      }
      case 'Ceil':
      case 'Floor': {
        const field = v.field?.DateTimeField;
        if (field !== 'NoDateTime') {
          const scale = v.field?.Scale ? `, ${this.value(v.field.Scale.value, v)}` : undefined;
          if (scale === undefined) fail(`${kind.toUpperCase()} … TO is not supported`, v);
          return kind === 'Ceil'
            ? `(ceil(${this.expr(v.expr)} * pow(10${scale})) / pow(10${scale}))`
            : `(floor(${this.expr(v.expr)} * pow(10${scale})) / pow(10${scale}))`;
        }
        return `${kind.toLowerCase()}(${this.expr(v.expr)})`;
      }
      case 'Extract': {
        const part = String(v.field).toLowerCase();
        if (!['year', 'quarter', 'month', 'week', 'day', 'hour', 'minute', 'second'].includes(part)) fail(`EXTRACT(${v.field}) is not supported`, v);
        return `CAST(date_part('${part}', ${this.expr(v.expr)}) AS UINTEGER)`;
      }
      default:
        return fail(`${kind} expressions are not supported`, v);
    }
  }

  private value(v: Node, at: Node): string {
    if (v === 'Null') return 'NULL';
    const [kind, x] = single(v);
    if (kind === 'Number') {
      const text = x[0] as string;
      if (!/^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/.test(text)) fail(`invalid number ${text}`, at);
      return text;
    }
    if (kind === 'SingleQuotedString' || kind === 'DoubleQuotedString') return str(x as string);
    if (kind === 'Boolean') return x ? 'TRUE' : 'FALSE';
    return fail(`${kind} literals are not supported`, at);
  }

  private type(t: Node, at: Node): string {
    const name = typeof t === 'string' ? t : Object.keys(t)[0] === 'Custom' ? t.Custom?.[0]?.[0]?.Identifier?.value : Object.keys(t)[0];
    const duck = typeof name === 'string' ? TYPES[name.toLowerCase()] : undefined;
    if (!duck) fail(`type ${JSON.stringify(name ?? t)} is not supported (String, Float64, Int64, UInt32, DateTime, Date, …)`, at);
    return duck;
  }

  private interval(v: Node, at: Node): string {
    const unit = UNITS[v.leading_field as string];
    if (!unit || v.last_field || v.fractional_seconds_precision) fail(`INTERVAL takes one unit (SECOND … YEAR), e.g. INTERVAL '1' DAY`, at);
    const value = v.value?.Value?.value;
    const raw = value?.SingleQuotedString ?? value?.Number?.[0];
    if (typeof raw !== 'string' || !/^\s*\d+\s*$/.test(raw)) fail(`INTERVAL takes a whole number, e.g. INTERVAL '1' DAY`, at);
    return `INTERVAL '${raw.trim()}' ${unit}`;
  }

  private call(f: Node): string {
    const nameParts = f.name as Node[];
    if (nameParts.length !== 1) fail(`unknown function ${nameParts.map((p) => p.Identifier?.value).join('.')}`, nameParts[0]);
    const name = nameParts[0].Identifier?.value as string;
    if (f.over) fail(`window functions (${name} OVER …) are not supported`, nameParts[0]);
    if (f.filter) fail(`FILTER clauses are not supported; use ${name}If`, nameParts[0]);
    if (f.null_treatment) fail('IGNORE/RESPECT NULLS is not supported', nameParts[0]);
    if (f.within_group?.length) fail('WITHIN GROUP is not supported', nameParts[0]);
    if (name.toLowerCase() === 'now' || name.toLowerCase() === 'today') {
      if (this.argList(f.args).args.length) fail(`${name}() takes no arguments`, nameParts[0]);
      const ts = `TIMESTAMP '${this.opts.now.toISOString().replace('T', ' ').replace('Z', '')}'`;
      return name.toLowerCase() === 'now' ? ts : `CAST(${ts} AS DATE)`;
    }
    const fn = FUNCTIONS[name.toLowerCase()];
    if (!fn) fail(`Unknown function ${name}`, nameParts[0]);
    const { args: rawArgs, distinct } = this.argList(f.args);
    const params = f.parameters && f.parameters !== 'None' ? this.argList(f.parameters).args : [];
    const [pmin, pmax] = fn.params ?? [0, 0];
    if (params.length < pmin || params.length > pmax)
      fail(pmax === 0 ? `${name} takes no parameters` : `${name} takes at most ${pmax} parameter(s)`, nameParts[0]);
    if (rawArgs.length < fn.arity[0] || rawArgs.length > fn.arity[1])
      fail(
        `${name} takes ${fn.arity[0] === fn.arity[1] ? fn.arity[0] : `${fn.arity[0]} to ${fn.arity[1]}`} argument(s), got ${rawArgs.length}`,
        nameParts[0],
      );
    if (distinct && !fn.distinct) fail(`${name}(DISTINCT …) is not supported`, nameParts[0]);
    const paramText = params.map((p) => {
      const num = p?.Value?.value?.Number?.[0];
      if (num === undefined) fail(`${name}: parameters must be numbers`, nameParts[0]);
      return num as string;
    });
    return fn.impl({
      name,
      args: rawArgs.map((a) => this.expr(a)),
      params: paramText,
      distinct,
      raw: rawArgs,
      node: f,
      t: this,
    });
  }

  private argList(a: Node): { args: Node[]; distinct: boolean } {
    if (!a || a === 'None') return { args: [], distinct: false };
    const [kind, v] = single(a);
    if (kind !== 'List') fail(`${kind} arguments are not supported`);
    if (v.clauses?.length) fail('clauses inside function arguments are not supported');
    const distinct = v.duplicate_treatment === 'Distinct';
    const args = (v.args as Node[]).map((arg) => {
      const [k, x] = single(arg);
      if (k !== 'Unnamed') fail('named function arguments are not supported');
      const [ek, ev] = single(x);
      if (ek === 'Wildcard') return { Value: { value: { Number: ['1', false] } } };
      if (ek !== 'Expr') fail(`${ek} arguments are not supported`);
      return ev;
    });
    return { args, distinct };
  }
}

/** The column name ClickHouse gives an unaliased expression (`count()`, `sum(double1)`, `plus(a, 1)`). */
export function label(n: Node): string {
  const [kind, v] = single(n);
  switch (kind) {
    case 'Identifier':
      return v.value;
    case 'CompoundIdentifier':
      return (v as Node[]).map((i) => i.value).join('.');
    case 'Value': {
      if (v.value === 'Null') return 'NULL';
      const [k, x] = single(v.value);
      if (k === 'Number') return x[0];
      if (k === 'Boolean') return x ? 'true' : 'false';
      return `'${String(x).replace(/'/g, "\\'")}'`;
    }
    case 'Nested':
      return label(v);
    case 'BinaryOp': {
      const o = typeof v.op === 'string' ? v.op : Object.keys(v.op)[0];
      return `${CH_OPERATOR[o] ?? o}(${label(v.left)}, ${label(v.right)})`;
    }
    case 'UnaryOp':
      return `${v.op === 'Minus' ? 'negate' : v.op === 'Not' ? 'not' : ''}(${label(v.expr)})`;
    case 'Function': {
      const name = (v.name as Node[]).map((p) => p.Identifier?.value).join('.');
      const list = (a: Node) => {
        const l = a?.List;
        if (!l) return '';
        const items = (l.args as Node[]).map((arg) => {
          const e = arg.Unnamed?.Expr;
          return e ? label(e) : '*';
        });
        return `${l.duplicate_treatment === 'Distinct' ? 'DISTINCT ' : ''}${items.join(', ')}`;
      };
      const params = v.parameters && v.parameters !== 'None' ? `(${list(v.parameters)})` : '';
      return `${name}${params}(${list(v.args)})`;
    }
    case 'Interval': {
      const value = v.value?.Value?.value;
      return `toInterval${v.leading_field}(${value?.SingleQuotedString ?? value?.Number?.[0] ?? ''})`;
    }
    case 'Like':
    case 'ILike':
      return `${v.negated ? 'not' : ''}${kind === 'Like' ? 'like' : 'ilike'}(${label(v.expr)}, ${label(v.pattern)})`;
    case 'Cast':
      return `CAST(${label(v.expr)}, '${typeof v.data_type === 'string' ? v.data_type : Object.keys(v.data_type)[0]}')`;
    case 'Case':
      return 'multiIf(…)';
    case 'Substring':
      return `substring(${label(v.expr)}, ${v.substring_from ? label(v.substring_from) : '1'}${v.substring_for ? `, ${label(v.substring_for)}` : ''})`;
    case 'Position':
      return `position(${label(v.in)}, ${label(v.expr)})`;
    case 'Trim':
      return `trimBoth(${label(v.expr)})`;
    case 'Ceil':
    case 'Floor':
      return `${kind.toLowerCase()}(${label(v.expr)})`;
    default:
      return kind;
  }
}
