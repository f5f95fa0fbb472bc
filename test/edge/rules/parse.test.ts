/**
 * Parse errors: each bad expression must throw a RuleSyntaxError whose position (0-based offset),
 * line and column point at the offending input, with a caret excerpt in the message.
 */

import { describe, expect, it } from 'vitest';
import {
  RuleSyntaxError,
  createStaticList,
  parseRule,
  validateRule,
  type ListResolver,
} from '../../../src/edge/rules/index.ts';

function errorOf(expr: string, options: Parameters<typeof parseRule>[1] = {}): RuleSyntaxError {
  try {
    parseRule(expr, options);
  } catch (err) {
    expect(err).toBeInstanceOf(RuleSyntaxError);
    return err as RuleSyntaxError;
  }
  throw new Error(`expected "${expr}" to be rejected`);
}

/** [expression, expected position, fragment of the reason] */
const CASES: Array<[string, string, number, RegExp]> = [
  // unterminated strings
  ['unterminated string', 'http.host eq "abc', 13, /could not find an ending quote/],
  ['unterminated raw string', 'http.host eq r#"abc"', 13, /could not find an ending quote/],
  ['unterminated regex string', 'http.host matches "^abc', 18, /could not find an ending quote/],
  ['invalid escape in a string', 'http.host eq "\\n"', 14, /invalid escape/],
  ['bad hex escape', 'http.host eq "\\xZZ"', 14, /\\x escape/],
  // unknown names
  ['unknown field', 'http.hots eq "a"', 0, /unknown field "http\.hots"/],
  ['unknown field after and', 'ssl and foo.bar eq 1', 8, /unknown field "foo\.bar"/],
  ['unknown function', 'lowr(http.host) eq "a"', 0, /unknown function "lowr"/],
  ['function used as a field', 'lower eq "x"', 0, /must be called/],
  ['field called as a function', 'http.host("x") eq "a"', 0, /is a field, not a function/],
  ['unknown list without a resolver', 'ip.src in $office', 10, /unknown list "\$office"/],
  // function arguments
  [
    'wrong argument type',
    'lower(ip.src) eq "a"',
    6,
    /lower\(\) argument 1 must be String, found IP address/,
  ],
  [
    'wrong second argument type',
    'substring(http.host, "a") eq "b"',
    21,
    /argument 2 must be Integer/,
  ],
  ['too many arguments', 'lower(http.host, "x") eq "a"', 17, /at most 1 argument/],
  ['too few arguments', 'starts_with(http.host)', 21, /expects 2 arguments, got 1/],
  ['literal required', 'split(http.host, http.host, 2)[0] eq "a"', 17, /must be a literal/],
  ['literal out of range', 'cidr(ip.src, 24, 200) == 10.0.0.0', 17, /between 1 and 128/],
  ['split limit out of range', 'split(http.host, ",", 0)[0] eq "a"', 22, /between 1 and 128/],
  ['any() of a non-array', 'any(ssl)', 4, /any\(\) expects Array<Boolean>/],
  [
    '[*] outside the first argument',
    'concat("a", http.request.headers.names[*])[0] eq "a"',
    12,
    /first argument/,
  ],
  [
    'bad wildcard_replace pattern',
    'wildcard_replace(http.host, "a**", "b") eq "c"',
    28,
    /double star/,
  ],
  // operator / type mismatches
  [
    'contains on an IP',
    'ip.src contains "x"',
    7,
    /operator "contains" is not supported for IP address/,
  ],
  [
    'matches on an integer',
    'cf.threat_score matches "x"',
    16,
    /operator "matches" is not supported for Integer/,
  ],
  ['bitwise and on a string', 'http.host & 1', 10, /operator "&" is not supported for String/],
  ['comparison on a boolean', 'ssl eq true', 4, /takes no comparison operator/],
  ['string against an integer field', 'cf.threat_score eq "5"', 19, /expected an integer/],
  ['string against an IP field', 'ip.src eq "1.2.3.4"', 10, /expected an IP address/],
  ['CIDR prefix too long', 'ip.src in {10.0.0.0/33}', 19, /at most 32/],
  ['CIDR with eq', 'ip.src eq 10.0.0.0/8', 18, /only be matched with "in/],
  ['reversed IP range', 'ip.src in {10.0.0.9..10.0.0.1}', 11, /greater than its end/],
  ['mixed IP range', 'ip.src in {10.0.0.1..::1}', 11, /must not mix IPv4 and IPv6/],
  ['reversed int range', 'cf.threat_score in {9..1}', 20, /greater than its end/],
  ['comma in a set', 'http.host in {"a", "b"}', 17, /separated by spaces/],
  ['unclosed set', 'http.host in {"a" "b"', 13, /missing "}"/],
  ['map compared directly', 'http.request.headers eq "x"', 21, /index it/],
  [
    'string key on an array',
    'http.request.headers.names["x"] eq "a"',
    27,
    /cannot use a string key/,
  ],
  ['index on a string', 'http.host[0] eq "a"', 10, /cannot use an integer index on String/],
  [
    '[*] at the top level',
    'http.request.headers.names[*] == "a"',
    0,
    /wrap \[\*\] comparisons in any\(\) or all\(\)/,
  ],
  [
    'mixing Boolean and Array<Boolean>',
    'ssl and http.request.headers.names[*] == "a"',
    4,
    /cannot combine Boolean with Array<Boolean>/,
  ],
  ['missing operator', 'http.host "a"', 10, /expected a comparison operator/],
  ['wildcard double star', 'http.host wildcard "a**b"', 19, /double star/],
  ['wildcard bad escape', 'http.host wildcard r"*foo\\bar*"', 19, /not a valid escape/],
  // unsafe or unsupported regular expressions (position inside the pattern)
  ['nested quantifier', 'http.request.uri.path matches "(a+)+$"', 35, /nested quantifier/],
  ['nested star', 'http.request.uri.path matches "(a*)*"', 35, /nested quantifier/],
  [
    'overlapping repeated alternation',
    'http.request.uri.path matches r"(a|a)*"',
    37,
    /repeated alternation/,
  ],
  [
    'backreference',
    'http.request.uri.path matches "(a)\\1"',
    34,
    /backreferences are not supported/,
  ],
  ['look-ahead', 'http.request.uri.path matches "foo(?=bar)"', 34, /look-around is not supported/],
  ['look-behind', 'http.request.uri.path ~ r"(?<!x)y"', 26, /look-around is not supported/],
  ['regex syntax error', 'http.request.uri.path ~ "a{1,2"', 26, /invalid counted repetition/],
  [
    'polynomial chain',
    'http.request.uri.path ~ ".*a.*b.*c.*d"',
    26,
    /adjacent unbounded repetitions/,
  ],
  [
    'unsafe regex in regex_replace',
    'regex_replace(http.host, "(x+)+y", "z") eq "a"',
    25,
    /nested quantifier/,
  ],
  // structure
  ['trailing garbage', 'http.host eq "a" foo', 17, /unexpected input "foo"/],
  ['stray parenthesis', 'ssl )', 4, /unexpected input "\)"/],
  ['two literals', 'http.host eq "a" "b"', 17, /unexpected input/],
  ['unclosed parenthesis', '(ssl and true', 0, /missing closing parenthesis/],
  ['dangling not', 'ssl and not', 11, /expected an expression/],
  ['dangling and', 'ssl and', 7, /expected an expression/],
  ['empty expression', '', 0, /empty expression/],
  ['blank expression', '   ', 0, /empty expression/],
  ['literal on the left', '"a" eq http.host', 0, /left-hand side/],
];

describe('parse errors report their position', () => {
  for (const [name, expr, position, reason] of CASES) {
    it(`${name}: ${JSON.stringify(expr)} → offset ${position}`, () => {
      const err = errorOf(expr);
      expect(err.reason).toMatch(reason);
      expect(err.position).toBe(position);
      expect(err.line).toBe(1);
      expect(err.column).toBe(position + 1);
      // the message carries the location, the source line and a caret under the offset
      const [head, line, carets] = err.message.split('\n');
      expect(head).toContain(`(1:${position + 1})`);
      expect(line).toBe(expr.replace(/\t/g, ' '));
      expect(carets.indexOf('^')).toBe(position);
    });
  }

  it('counts lines and columns in multi-line expressions', () => {
    const expr = 'ssl and\n  foo eq 1';
    const err = errorOf(expr);
    expect(err.position).toBe(10);
    expect(err.line).toBe(2);
    expect(err.column).toBe(3);
    expect(err.message.split('\n').slice(1)).toEqual(['  foo eq 1', '  ^^^']);
  });

  it('spans the whole offending token', () => {
    const err = errorOf('http.hots eq "a"');
    expect(err.length).toBe('http.hots'.length);
    expect(err.message.split('\n')[2]).toBe('^^^^^^^^^');
  });

  it('rejects excessive nesting', () => {
    const expr = `${'('.repeat(200)}ssl${')'.repeat(200)}`;
    expect(errorOf(expr).reason).toMatch(/nesting exceeds/);
  });

  it('rejects expressions over the length limit', () => {
    const expr = `http.host eq "${'a'.repeat(100)}"`;
    expect(errorOf(expr, { maxLength: 50 }).reason).toMatch(/longer than 50/);
  });

  it('serialises to {message, position, line, column}', () => {
    const json = JSON.parse(JSON.stringify(errorOf('http.host eq "abc')));
    expect(json).toEqual({
      message: expect.stringContaining('could not find an ending quote'),
      position: 13,
      line: 1,
      column: 14,
    });
  });
});

describe('validateRule', () => {
  it('accepts a valid expression', () => {
    expect(validateRule('http.host eq "example.com" and not ssl')).toEqual({ ok: true });
  });

  it('returns the error for an invalid one', () => {
    const result = validateRule('ip.src contains "x"');
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.error).toBeInstanceOf(RuleSyntaxError);
      expect(result.error.position).toBe(7);
    }
  });
});

describe('named lists', () => {
  const lists: ListResolver = (name) =>
    name === 'office'
      ? createStaticList('Ip', ['192.0.2.0/24', '2001:db8::/32'])
      : name === 'asns'
        ? createStaticList('Int', [13335, '64512..65534'])
        : undefined;

  it('resolve through the provided callback', () => {
    expect(() => parseRule('ip.src in $office or ip.src.asnum in $asns', { lists })).not.toThrow();
  });

  it('reject a list of the wrong type', () => {
    const err = errorOf('http.host in $office', { lists });
    expect(err.position).toBe(13);
    expect(err.reason).toMatch(/holds IP addresses and cannot be matched against String/);
  });

  it('report unknown names at the $', () => {
    const err = errorOf('ip.src in $nope', { lists });
    expect(err.position).toBe(10);
    expect(err.reason).toMatch(/unknown list "\$nope"/);
  });
});

describe('accepted syntax', () => {
  const ok = [
    'http.host eq "a"',
    'http.host==r"a"',
    'http.request.headers["x"][0]  ==  "a"',
    'http.request.headers [ "x" ] [ 0 ] eq "a"',
    'ip.src in{10.0.0.0/8}',
    '(ssl)',
    '((ssl) and (not ssl))',
    'ssl\r\n\tand\tnot ssl',
    'http.host strict   wildcard "a*"',
    'lower( http.host ) eq "a"',
    'any( http.request.headers.names[*] == "a" or http.request.headers.names[*] == "b" )',
    'any((http.request.headers.names[*] == "a"))',
    'true',
    'cf.api_gateway.cf-risk-mixed-auth or edge.api_gateway.edge-risk-missing-auth',
    'http.request.uri.path matches "[a-z\\"]+"',
    'http.request.uri.path matches r#"^/a"b$"#',
    'http.request.uri.path matches "^/(?P<ver>v[0-9]+)/(?:users|groups)/[^/]+$"',
    'http.request.uri.path matches "^(\\d+\\.){3}\\d+$"',
    'ip.src in {::ffff:192.0.2.1 fe80::/10}',
    'cf.threat_score in {-10..-1 0x10 017}',
  ];
  for (const expr of ok) {
    it(JSON.stringify(expr), () => {
      expect(() => parseRule(expr)).not.toThrow();
    });
  }
});
