import { describe, expect, it } from 'vitest';
import { checkActionParameters, parseErrorMessage } from '../../../src/areas/rulesets/validate.ts';

describe('parse error messages', () => {
  it('count line and column from 1', () => {
    expect(parseErrorMessage('http.host eq', { message: 'expected a value', position: 12 })).toBe('Filter parsing error (1:13): expected a value');
    const formatted = 'Filter parsing error (1:13): expected a value\nhttp.host eq\n            ^';
    expect(parseErrorMessage('http.host eq', { message: formatted, position: 12 })).toBe(formatted);
    const multi = 'http.host eq "a"\nand @@';
    expect(parseErrorMessage(multi, { message: 'unexpected character', position: multi.indexOf('@') })).toMatch(/^Filter parsing error \(2:5\)/);
  });
});

describe('action parameters', () => {
  it('accept the documented forms', () => {
    expect(checkActionParameters('block', { response: { status_code: 418, content: '{"error":1}', content_type: 'application/json' } }, 'http_request_firewall_custom')).toEqual([]);
    expect(checkActionParameters('block', undefined, 'http_request_firewall_custom')).toEqual([]);
    expect(checkActionParameters('skip', { ruleset: 'current' }, 'http_request_firewall_custom')).toEqual([]);
    expect(checkActionParameters('skip', { phases: ['http_ratelimit'], products: ['waf', 'uaBlock'] }, 'http_request_firewall_custom')).toEqual([]);
    expect(checkActionParameters('skip', { rules: { ['a'.repeat(32)]: ['b'.repeat(32)] } }, 'http_request_firewall_custom')).toEqual([]);
    expect(checkActionParameters('route', { host_header: 'origin.example', origin: { host: '192.0.2.10', port: 8443 }, sni: { value: 'origin.example' } }, 'http_request_origin')).toEqual([]);
    expect(checkActionParameters('route', { origin: { port: 8080 } }, 'http_request_origin')).toEqual([]);
  });

  it('point at what is wrong', () => {
    const pointers = (problems: [string, string][]) => problems.map(([p]) => p);
    expect(pointers(checkActionParameters('block', { response: { status_code: 500, content: 'x' }, extra: 1 }, 'x'))).toEqual(['/extra', '/response/status_code']);
    expect(pointers(checkActionParameters('skip', { ruleset: 'current', rulesets: ['a'.repeat(32)] }, 'x'))).toEqual(['/rulesets']);
    expect(pointers(checkActionParameters('skip', { phase: 'current', phases: ['http_ratelimit'] }, 'x'))).toEqual(['/phase']);
    expect(pointers(checkActionParameters('route', { host_header: 'not a host' }, 'x'))).toEqual(['/host_header']);
    expect(pointers(checkActionParameters('route', { origin: {} }, 'x'))).toEqual(['/origin']);
    expect(pointers(checkActionParameters('execute', {}, 'ddos_l7'))).toEqual(['/id']);
    expect(pointers(checkActionParameters('log', { anything: true }, 'x'))).toEqual(['']);
  });
});
