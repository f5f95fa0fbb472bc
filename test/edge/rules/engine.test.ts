/**
 * Compilation, caching, request contexts and the extension points later areas use
 * (extra fields, lists, the JWT hook), plus a throughput print-out.
 */

import { afterEach, describe, expect, it } from 'vitest';
import {
  BYTES,
  buildRequestContext,
  compileRegex,
  compileRule,
  createStaticList,
  listFunctions,
  parseRule,
  registerField,
  setJwtValidator,
  setListResolver,
  type JwtValidationRequest,
} from '../../../src/edge/rules/index.ts';
import { contexts, inputA } from './contexts.ts';

describe('compileRule', () => {
  it('returns the cached closure for the same text', () => {
    const a = compileRule('http.host eq "www.example.com" and ssl');
    const b = compileRule('http.host eq "www.example.com" and ssl');
    const c = compileRule('http.host eq "www.example.com"  and ssl');
    expect(b).toBe(a);
    expect(c).not.toBe(a);
    expect(a(contexts.A())).toBe(true);
    expect(a.expression).toBe('http.host eq "www.example.com" and ssl');
    expect([...a.fields].sort()).toEqual(['http.host', 'ssl']);
  });

  it('evaluates request descriptions directly', () => {
    const rule = compileRule('http.request.uri.path eq "/x" and http.request.method eq "DELETE"');
    expect(rule.evaluate({ method: 'DELETE', url: 'http://h/x' })).toBe(true);
    expect(rule.evaluate(buildRequestContext({ method: 'GET', url: '/x' }))).toBe(false);
  });

  it('reports the canonical (cf.) names of fields written with edge.', () => {
    expect(parseRule('edge.bot_management.score gt 1').fields).toEqual(['cf.bot_management.score']);
  });

  it('implements at least the documented function list', () => {
    const required =
      'lower upper len starts_with ends_with concat any all lookup_json_string lookup_json_integer is_jwt_valid url_decode remove_bytes to_string regex_replace wildcard_replace uuidv4 bit_slice substring encode_base64 decode_base64 split has_key has_value cidr'.split(
        ' ',
      );
    const have = new Set(listFunctions());
    expect(required.filter((f) => !have.has(f))).toEqual([]);
  });
});

describe('request context', () => {
  it('computes fields lazily and caches them', () => {
    let calls = 0;
    registerField('cf.test.lazy_counter', 'Integer', {
      compute: () => {
        calls++;
        return 7;
      },
    });
    const ctx = buildRequestContext({});
    const rule = compileRule('edge.test.lazy_counter eq 7 and cf.test.lazy_counter lt 8');
    expect(calls).toBe(0);
    expect(rule(ctx)).toBe(true);
    expect(rule(ctx)).toBe(true);
    expect(calls).toBe(1);
  });

  it('lets a later stage set a field for one request', () => {
    const ctx = contexts.A();
    const rule = compileRule('edge.api_gateway.request_violates_schema');
    expect(rule(ctx)).toBe(false);
    ctx.set('edge.api_gateway.request_violates_schema', true);
    expect(rule(ctx)).toBe(true);
    expect(rule(contexts.A())).toBe(false);
  });

  it('accepts Node-style header objects and WHATWG Headers', () => {
    const rule = compileRule(
      'len(http.request.headers["x-a"]) == 2 and http.request.headers["x-b"][0] eq "1"',
    );
    expect(rule(buildRequestContext({ headers: { 'x-a': ['p', 'q'], 'x-b': '1' } }))).toBe(true);
    const h = new Headers();
    h.append('X-A', 'p');
    h.append('X-A', 'q');
    h.append('X-B', '1');
    // WHATWG Headers joins repeated values into one
    expect(buildRequestContext({ headers: h }).getField('http.request.headers')).toEqual(
      new Map([
        ['x-a', ['p, q']],
        ['x-b', ['1']],
      ]),
    );
  });

  it('prefers rawHeaders, keeping the client spelling of names', () => {
    const ctx = buildRequestContext({
      headers: { 'x-a': '1', 'content-type': 'text/plain' },
      rawHeaders: ['X-A', '1', 'Content-Type', 'text/plain', 'X-A', '2'],
    });
    expect(compileRule('any(http.request.headers.names[*] == "Content-Type")')(ctx)).toBe(true);
    expect(compileRule('http.request.headers["x-a"][1] eq "2"')(ctx)).toBe(true);
  });

  it('treats wire strings as bytes and other text as UTF-8', () => {
    // Node hands header bytes over as latin1: "café" in UTF-8 arrives as "cafÃ©"
    const wire = buildRequestContext({
      headers: { 'x-name': 'caf\u00c3\u00a9' },
      geo: { city: 'Zürich' },
    });
    expect(compileRule('http.request.headers["x-name"][0] eq "café"')(wire)).toBe(true);
    expect(compileRule('len(http.request.headers["x-name"][0]) == 5')(wire)).toBe(true);
    expect(compileRule('ip.src.city eq "Zürich"')(wire)).toBe(true);
    expect(compileRule('http.request.headers["x-name"][0] matches "^caf.+$"')(wire)).toBe(true);
    expect(compileRule('http.request.headers["x-name"][0] matches "^café$"')(wire)).toBe(true);
  });

  it('reads cf values given nested, dotted, or under edge', () => {
    const rule = compileRule('cf.bot_management.js_detection.passed and edge.waf.score eq 42');
    expect(
      rule(
        buildRequestContext({
          cf: { 'bot_management.js_detection.passed': true, waf: { score: 42 } },
        }),
      ),
    ).toBe(true);
    expect(
      rule(
        buildRequestContext({
          edge: { bot_management: { js_detection: { passed: true } }, 'waf.score': 42 },
        }),
      ),
    ).toBe(true);
    expect(
      rule(
        buildRequestContext({
          fields: { 'edge.bot_management.js_detection.passed': true, 'cf.waf.score': 42 },
        }),
      ),
    ).toBe(true);
  });

  it('normalises the path but keeps raw fields untouched', () => {
    const ctx = buildRequestContext({ url: '/a\\b/%41%2f/./c/../d' });
    expect(ctx.getField('http.request.uri.path')).toBe('/a/b/A%2F/d');
    expect(ctx.getField('raw.http.request.uri.path')).toBe('/a\\b/%41%2f/./c/../d');
  });
});

describe('extension points', () => {
  afterEach(() => {
    setJwtValidator(undefined);
    setListResolver(undefined);
  });

  it('registerField adds typed fields reachable under both prefixes', () => {
    registerField('edge.test.labels', 'Array<String>');
    const rule = compileRule('any(cf.test.labels[*] == "beta")');
    expect(rule(buildRequestContext({ edge: { test: { labels: ['alpha', 'beta'] } } }))).toBe(true);
    expect(rule(buildRequestContext({}))).toBe(false);
    expect(() => registerField('cf.test.labels', BYTES)).toThrow(/already registered/);
    expect(() => parseRule('cf.test.labels contains "x"')).toThrow(/index it/);
  });

  it('is_jwt_valid() calls the installed hook with the configuration id', () => {
    const seen: JwtValidationRequest[] = [];
    setJwtValidator((req) => {
      seen.push(req);
      return req.configId === 'cfg1' && req.value !== undefined;
    });
    const rule = compileRule('is_jwt_valid(http.request.jwt.payload["cfg1"][0])');
    expect(rule(contexts.A())).toBe(true);
    expect(seen[0].configId).toBe('cfg1');
    expect(compileRule('is_jwt_valid("cfg2")')(contexts.A())).toBe(false);
    expect(seen[1].configId).toBe('cfg2');
  });

  it('a per-request validator wins over the global one', () => {
    setJwtValidator(() => false);
    const ctx = buildRequestContext({ jwtValidator: ({ configId }) => configId === 'x' });
    expect(compileRule('is_jwt_valid("x")')(ctx)).toBe(true);
  });

  it('a global list resolver serves $lists', () => {
    setListResolver((name) =>
      name === 'blocked_asns'
        ? createStaticList('Int', ['13335'])
        : name === 'hosts'
          ? createStaticList('Bytes', ['WWW.example.com'])
          : name === 'office'
            ? createStaticList('Ip', ['203.0.113.0..203.0.113.9'])
            : undefined,
    );
    expect(compileRule('ip.src.asnum in $blocked_asns')(contexts.A())).toBe(true);
    expect(compileRule('http.host in $hosts')(contexts.A())).toBe(true);
    expect(compileRule('ip.src in $office and not ip.src in $office and true')(contexts.A())).toBe(
      false,
    );
    expect(compileRule('ip.src in $office')(contexts.B())).toBe(false);
  });
});

describe('regular expression safety', () => {
  it('accepted patterns stay fast on adversarial input', () => {
    const cases: Array<[string, string]> = [
      ['^(\\d+\\.){3}\\d+$', '1.'.repeat(20000)],
      ['^[a-z0-9-]+(\\.[a-z0-9-]+)*\\.example\\.com$', 'a.'.repeat(20000) + '!'],
      ['^(?:GET|POST|PUT)+$', 'GET'.repeat(20000) + 'X'],
      ['^.*a.*b.*c$', 'ab'.repeat(5000)],
    ];
    for (const [pattern, input] of cases) {
      expect(compileRegex(pattern).test(input)).toBe(false);
    }
  });

  it('patterns that need Unicode run against the decoded subject', () => {
    const re = compileRegex('(?u)\\p{Hangul}+');
    expect(re.unicode).toBe(true);
    expect(re.test(Buffer.from('x한국어', 'utf8').toString('latin1'))).toBe(true);
    expect(re.test('abc')).toBe(false);
  });
});

describe('throughput', () => {
  it('prints throughput', () => {
    const expr = [
      'http.host eq "www.example.com"',
      'http.request.method in {"GET" "HEAD"}',
      'not ip.src in {10.0.0.0/8 192.168.0.0/16}',
      'ssl',
      'cf.bot_management.score gt 5',
      'starts_with(http.request.uri.path, "/api/")',
      'http.user_agent contains "Mozilla"',
      'not http.request.uri.path matches "\\.php$"',
      'ip.src.country in {"PT" "ES"}',
      'len(http.request.headers["x-multi"]) == 2',
    ].join(' and ');
    const rule = compileRule(expr);
    const warm = buildRequestContext(inputA);
    expect(rule(warm)).toBe(true);

    const n = 200_000;
    let hits = 0;
    let t = process.hrtime.bigint();
    for (let i = 0; i < n; i++) if (rule(warm)) hits++;
    const warmNs = Number(process.hrtime.bigint() - t);

    const m = 50_000;
    t = process.hrtime.bigint();
    for (let i = 0; i < m; i++) if (rule(buildRequestContext(inputA))) hits++;
    const coldNs = Number(process.hrtime.bigint() - t);

    expect(hits).toBe(n + m);
    const fmt = (count: number, ns: number) =>
      Math.round((count / ns) * 1e9).toLocaleString('en-US');
    console.log(
      `rules throughput (10 conditions): ${fmt(n, warmNs)} evaluations/s on a warm context ` +
        `(${(warmNs / n).toFixed(0)} ns each); ${fmt(m, coldNs)} evaluations/s with a fresh context per request ` +
        `(${(coldNs / m).toFixed(0)} ns each, fields computed lazily)`,
    );
  });
});
