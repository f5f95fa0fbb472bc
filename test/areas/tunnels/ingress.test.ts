import { describe, expect, it } from 'vitest';
import {
  compileIngress,
  durationMs,
  ERR_BAD_WILDCARD,
  ERR_HOSTNAME_PORT,
  ERR_LAST_RULE_NOT_CATCH_ALL,
  ERR_NO_RULES,
  matchRule,
  type IngressRuleInput,
} from '../../../src/connector/ingress.ts';
import { parseYaml, YamlError } from '../../../src/connector/yaml.ts';
import { decodeToken, encodeToken, secretBytes } from '../../../src/connector/token.ts';
import {
  parseCidr,
  overlaps,
  within,
  containsIp,
  ipToBig,
} from '../../../src/areas/tunnels/cidr.ts';

const errorOf = (ingress: IngressRuleInput[]) => {
  try {
    compileIngress({ ingress });
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
};

describe('ingress validation: the connector messages', () => {
  it('the last rule must be a catch-all', () => {
    expect(errorOf([{ hostname: 'a.example.com', service: 'http://localhost:8000' }])).toBe(
      ERR_LAST_RULE_NOT_CATCH_ALL,
    );
    expect(errorOf([{ path: '^/x', service: 'http://localhost:8000' }])).toBe(
      ERR_LAST_RULE_NOT_CATCH_ALL,
    );
    expect(ERR_LAST_RULE_NOT_CATCH_ALL).toBe(
      'The last ingress rule must match all URLs (i.e. it should not have a hostname or path filter)',
    );
  });

  it('only the last rule may match everything', () => {
    expect(
      errorOf([{ hostname: '*', service: 'http_status:404' }, { service: 'http_status:503' }]),
    ).toBe(
      "Rule #1 is matching the hostname '*', but this will match every hostname, meaning the rules which follow it will never be triggered.",
    );
    expect(errorOf([{ service: 'http_status:404' }, { service: 'http_status:503' }])).toMatch(
      /^Rule #1 is matching the hostname ''/,
    );
  });

  it('one wildcard, only in front', () => {
    expect(
      errorOf([
        { hostname: 'a.*.example.com', service: 'http_status:200' },
        { service: 'http_status:404' },
      ]),
    ).toBe(ERR_BAD_WILDCARD);
    expect(
      errorOf([
        { hostname: '**.example.com', service: 'http_status:200' },
        { service: 'http_status:404' },
      ]),
    ).toBe(ERR_BAD_WILDCARD);
    expect(ERR_BAD_WILDCARD).toBe(
      'Hostname patterns can have at most one wildcard character ("*") and it can only be used for subdomains, e.g. "*.example.com"',
    );
    expect(
      errorOf([
        { hostname: '*.example.com', service: 'http_status:200' },
        { service: 'http_status:404' },
      ]),
    ).toBeUndefined();
  });

  it('no port in a hostname', () => {
    expect(
      errorOf([
        { hostname: 'example.com:8080', service: 'http_status:200' },
        { service: 'http_status:404' },
      ]),
    ).toBe(ERR_HOSTNAME_PORT);
    expect(ERR_HOSTNAME_PORT).toBe('Hostname cannot contain a port');
  });

  it('invalid regex names the rule', () => {
    expect(
      errorOf([
        { hostname: 'a.com', path: '(abc', service: 'http_status:200' },
        { service: 'http_status:404' },
      ]),
    ).toMatch(/^Rule #1 has an invalid regex: /);
  });

  it('services: scheme and host, no path, valid status codes', () => {
    expect(errorOf([{ service: 'localhost:8000' }])).toBe(
      'localhost:8000 is an invalid address, please make sure it has a scheme and a hostname',
    );
    expect(errorOf([{ service: 'http://' }])).toBe(
      'http:// is an invalid address, please make sure it has a scheme and a hostname',
    );
    expect(errorOf([{ service: 'http://localhost:8000/app' }])).toBe(
      "http://localhost:8000/app is an invalid address, ingress rules don't support proxying to a different path on the origin service. The path will be the same as the eyeball request's path",
    );
    expect(errorOf([{ service: 'http_status:abc' }])).toBe(
      'invalid HTTP status code: strconv.Atoi: parsing "abc": invalid syntax',
    );
    expect(errorOf([{ service: 'http_status:1000' }])).toBe('invalid HTTP status code: 1000');
    expect(errorOf([{ service: 'http_status:99' }])).toBe('invalid HTTP status code: 99');
    for (const ok of [
      'http://127.0.0.1:8080',
      'https://origin.internal',
      'ws://[::1]:9000',
      'unix:/tmp/app.sock',
      'hello_world',
      'tcp://10.0.0.1:22',
      'ssh://host:22',
      'http_status:503',
    ]) {
      expect(errorOf([{ service: ok }])).toBeUndefined();
    }
  });

  it('the service is checked before the hostname, rules in order', () => {
    expect(errorOf([{ hostname: 'a:1', service: 'nope' }, { service: 'http_status:404' }])).toMatch(
      /nope is an invalid address/,
    );
    expect(
      errorOf([
        { hostname: 'a.com', service: 'http_status:200' },
        { hostname: 'b:1', service: 'http_status:200' },
        { service: 'http_status:404' },
      ]),
    ).toBe(ERR_HOSTNAME_PORT);
  });

  it('an explicit empty rule list is refused; no list at all answers 503', () => {
    expect(errorOf([])).toBe(ERR_NO_RULES);
    const none = compileIngress({});
    expect(matchRule(none, 'x.com', '/').service).toEqual({ kind: 'status', code: 503 });
  });
});

describe('ingress matching', () => {
  const ingress = compileIngress({
    ingress: [
      { hostname: 'app.example.com', path: '/api', service: 'http://127.0.0.1:1' },
      { hostname: 'app.example.com', service: 'http://127.0.0.1:2' },
      { hostname: '*.example.com', service: 'http://127.0.0.1:3' },
      { hostname: 'bücher.example.org', service: 'http://127.0.0.1:4' },
      { hostname: 'case.example.net', path: '(?i)^/admin', service: 'http_status:403' },
      { service: 'http_status:404' },
    ],
  });
  const which = (host: string, path: string) => matchRule(ingress, host, path).number;

  it('first match wins; path is an unanchored regex tested on the path only', () => {
    expect(which('app.example.com', '/api/users')).toBe(1);
    expect(which('app.example.com', '/v2/api')).toBe(1);
    expect(which('app.example.com', '/other?q=/api')).toBe(2);
  });

  it('ports are ignored, host case too', () => {
    expect(which('APP.example.com:8443', '/')).toBe(2);
  });

  it('wildcards match subdomains at any depth but not the bare name', () => {
    expect(which('a.example.com', '/')).toBe(3);
    expect(which('a.b.example.com', '/')).toBe(3);
    expect(which('example.com', '/')).toBe(6);
  });

  it('IDN rules match the punycode form', () => {
    expect(which('xn--bcher-kva.example.org', '/')).toBe(4);
  });

  it('RE2 flag prefixes work', () => {
    expect(which('case.example.net', '/ADMIN/x')).toBe(5);
  });

  it('originRequest numbers are seconds, strings Go durations', () => {
    const c = compileIngress({
      originRequest: { connectTimeout: 5 },
      ingress: [
        {
          service: 'http://x:1',
          originRequest: { httpHostHeader: 'h', noTLSVerify: true, tlsTimeout: '1m30s' },
        },
      ],
    });
    expect(c.rules[0].options).toMatchObject({
      connectTimeoutMs: 5000,
      tlsTimeoutMs: 90_000,
      httpHostHeader: 'h',
      noTLSVerify: true,
    });
    expect(durationMs('250ms', 0)).toBe(250);
    expect(durationMs('bogus', 7)).toBe(7);
  });
});

describe('configuration files (YAML)', () => {
  it('reads the usual connector file', () => {
    const doc = parseYaml(`# a comment
tunnel: 6ff42ae2-765d-4adf-8112-31c55c1551ef
credentials-file: /root/.cloudflared/x.json
originRequest:
  connectTimeout: 10s
ingress:
  - hostname: app.example.com   # trailing comment
    path: "^/api"
    service: http://localhost:8000
    originRequest:
      noTLSVerify: true
      audTag: [a, "b c"]
  - hostname: '*.example.com'
    service: http_status:418
  - service: http_status:404
warp-routing:
  enabled: true
`);
    expect(doc).toEqual({
      tunnel: '6ff42ae2-765d-4adf-8112-31c55c1551ef',
      'credentials-file': '/root/.cloudflared/x.json',
      originRequest: { connectTimeout: '10s' },
      ingress: [
        {
          hostname: 'app.example.com',
          path: '^/api',
          service: 'http://localhost:8000',
          originRequest: { noTLSVerify: true, audTag: ['a', 'b c'] },
        },
        { hostname: '*.example.com', service: 'http_status:418' },
        { service: 'http_status:404' },
      ],
      'warp-routing': { enabled: true },
    });
  });

  it('sequences at the key indentation, JSON files, and refusals with line numbers', () => {
    expect(parseYaml('ingress:\n- service: http_status:404\n')).toEqual({
      ingress: [{ service: 'http_status:404' }],
    });
    expect(parseYaml('{"ingress": []}')).toEqual({ ingress: [] });
    expect(() => parseYaml('a: 1\n   b: 2\n')).toThrow(YamlError);
    expect(() => parseYaml('a: 1\n   b: 2\n')).toThrow(/^line \d+, column \d+: /);
  });

  it('reads the whole language: block scalars, flow mappings, anchors, switch words', () => {
    expect(
      parseYaml(`ingress:
  - hostname: a.example.com
    service: &origin http://localhost:8000
    originRequest: { noTLSVerify: yes, http2Origin: off, httpHostHeader: "no" }
  - service: *origin
note: |
  two
  lines
empty:
`),
    ).toEqual({
      ingress: [
        {
          hostname: 'a.example.com',
          service: 'http://localhost:8000',
          originRequest: { noTLSVerify: true, http2Origin: false, httpHostHeader: 'no' },
        },
        { service: 'http://localhost:8000' },
      ],
      note: 'two\nlines\n',
      empty: null,
    });
    expect(parseYaml('')).toEqual({});
    expect(parseYaml('# nothing but a comment\n')).toEqual({});
  });

  it('refuses duplicate keys, several documents, tab indentation and alias bombs', () => {
    expect(() => parseYaml('tunnel: a\ntunnel: b\n')).toThrow(/^line 2, column 1: .*unique/);
    expect(() => parseYaml('a: 1\n---\nb: 2\n')).toThrow(/^line 2, column 1: .*one YAML document/);
    expect(() => parseYaml('a:\n\t- b\n')).toThrow(/^line 2, column 1: .*[Tt]ab/);
    const bomb = ['a: &a [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 1; i < 8; i++) {
      const prev = String.fromCharCode(96 + i);
      const name = String.fromCharCode(97 + i);
      bomb.push(`${name}: &${name} [${Array(10).fill(`*${prev}`).join(', ')}]`);
    }
    expect(() => parseYaml(bomb.join('\n'))).toThrow(YamlError);
  });
});

describe('tokens', () => {
  it('standard base64 of {a, t, s, e}', () => {
    const text = encodeToken({ a: 'acc', t: 'tun', s: 'c2VjcmV0', e: 'http://127.0.0.1:8787' });
    expect(JSON.parse(Buffer.from(text, 'base64').toString())).toEqual({
      a: 'acc',
      t: 'tun',
      s: 'c2VjcmV0',
      e: 'http://127.0.0.1:8787',
    });
    expect(decodeToken(text)).toEqual({
      a: 'acc',
      t: 'tun',
      s: 'c2VjcmV0',
      e: 'http://127.0.0.1:8787',
    });
    expect(() => decodeToken('not a token!')).toThrow(/base64/);
    expect(() => decodeToken(Buffer.from('{"a":1}').toString('base64'))).toThrow(/lacks/);
    expect(secretBytes(Buffer.alloc(40).toString('base64'))?.length).toBe(40);
  });
});

describe('CIDR arithmetic', () => {
  it('normalises and compares networks', () => {
    expect(parseCidr('10.1.2.3/8')?.text).toBe('10.0.0.0/8');
    expect(parseCidr('192.168.1.7')?.text).toBe('192.168.1.7/32');
    expect(parseCidr('fd00:0:0:0:1::5/64')?.text).toBe('fd00::/64');
    expect(parseCidr('10.0.0.0/33')).toBeUndefined();
    expect(parseCidr('nope/8')).toBeUndefined();
    const a = parseCidr('10.0.0.0/8')!;
    const b = parseCidr('10.20.0.0/16')!;
    expect(overlaps(a, b)).toBe(true);
    expect(within(b, a)).toBe(true);
    expect(within(a, b)).toBe(false);
    expect(overlaps(a, parseCidr('11.0.0.0/8')!)).toBe(false);
    expect(overlaps(a, parseCidr('::/0')!)).toBe(false);
    expect(containsIp(b, ipToBig('10.20.99.1')!)).toBe(true);
    expect(containsIp(parseCidr('fd00::/64')!, ipToBig('fd00::abcd')!)).toBe(true);
  });
});
