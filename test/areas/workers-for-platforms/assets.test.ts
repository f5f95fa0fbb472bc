/**
 * How a request path resolves against a customer's asset manifest: every `html_handling` mode,
 * `not_found_handling`, `run_worker_first` patterns, and the hash rule (no server needed).
 */
import { describe, expect, it } from 'vitest';
import {
  assetHash,
  checkConfig,
  notFound,
  resolvePath,
  workerFirst,
} from '../../../src/areas/workers/dispatch/assets.ts';
import {
  applyHeaders,
  matchRedirect,
  redirectLocation,
  rulesOf,
} from '../../../src/areas/workers/dispatch/rules.ts';
import type { ScriptAssets } from '../../../src/areas/workers/dispatch/store.ts';

const entry = (hash: string) => ({ hash: hash.padEnd(32, '0'), size: 1 });
const manifest = {
  '/index.html': entry('a'),
  '/about.html': entry('b'),
  '/docs/index.html': entry('c'),
  '/docs/404.html': entry('d'),
  '/404.html': entry('e'),
  '/app.js': entry('f'),
};
const site = (config: Record<string, unknown> = {}): ScriptAssets => ({
  manifest,
  config: checkConfig(config),
});
const where = (a: ScriptAssets, p: string) => {
  const r = resolvePath(a, p);
  return r.kind === 'asset' ? r.path : r.kind === 'redirect' ? `→ ${r.location}` : 'none';
};

describe('html_handling', () => {
  it('auto-trailing-slash (default)', () => {
    const a = site();
    expect(where(a, '/')).toBe('/index.html');
    expect(where(a, '/about')).toBe('/about.html');
    expect(where(a, '/about.html')).toBe('→ /about');
    expect(where(a, '/about/')).toBe('→ /about');
    expect(where(a, '/docs')).toBe('→ /docs/');
    expect(where(a, '/docs/')).toBe('/docs/index.html');
    expect(where(a, '/docs/index.html')).toBe('→ /docs/');
    expect(where(a, '/app.js')).toBe('/app.js');
    expect(where(a, '/missing')).toBe('none');
  });

  it('force-trailing-slash, drop-trailing-slash and none', () => {
    const force = site({ html_handling: 'force-trailing-slash' });
    expect(where(force, '/about')).toBe('→ /about/');
    expect(where(force, '/about/')).toBe('/about.html');
    const drop = site({ html_handling: 'drop-trailing-slash' });
    expect(where(drop, '/docs/')).toBe('→ /docs');
    expect(where(drop, '/docs')).toBe('/docs/index.html');
    const none = site({ html_handling: 'none' });
    expect(where(none, '/about')).toBe('none');
    expect(where(none, '/about.html')).toBe('/about.html');
  });
});

describe('not_found_handling and run_worker_first', () => {
  it('404-page takes the nearest 404.html; single-page-application takes /index.html', () => {
    expect(notFound(site({ not_found_handling: '404-page' }), '/docs/x/y')).toMatchObject({
      path: '/docs/404.html',
      status: 404,
    });
    expect(notFound(site({ not_found_handling: '404-page' }), '/x')).toMatchObject({
      path: '/404.html',
    });
    expect(
      notFound(site({ not_found_handling: 'single-page-application' }), '/deep/link'),
    ).toMatchObject({
      path: '/index.html',
      status: 200,
    });
    expect(notFound(site(), '/x')).toBeUndefined();
  });

  it('patterns with negation', () => {
    const c = checkConfig({ run_worker_first: ['/api/*', '!/api/docs'] });
    expect(workerFirst(c, '/api/users')).toBe(true);
    expect(workerFirst(c, '/api/docs')).toBe(false);
    expect(workerFirst(c, '/index.html')).toBe(false);
    expect(() => checkConfig({ run_worker_first: ['api/*'] })).toThrow(/run_worker_first/);
    expect(() => checkConfig({ html_handling: 'sometimes' })).toThrow(/html_handling/);
  });
});

describe('hash rule', () => {
  it('is the first 16 bytes of SHA-256; a customer id in front keeps customers apart', () => {
    expect(assetHash('hello')).toBe('2cf24dba5fb0a30e26e83b2ac5b9e29e');
    expect(assetHash('hello', 'bob')).not.toBe(assetHash('hello', 'carol'));
  });
});

describe('_redirects', () => {
  const rules = (text: string) => rulesOf(checkConfig({ _redirects: text }));
  const go = (text: string, url: string) => {
    const u = new URL(url);
    const m = matchRedirect(rules(text), u);
    return m && { status: m.status, location: redirectLocation(m.to, u) };
  };

  it('static rules, splats and placeholders, status codes, the query carried over', () => {
    const file = `# moved pages
/old /new 301
/blog/:year/:slug /posts/:year-:slug
/docs/* /guide/:splat 308
/app/* /app.html 200
/ext https://other.example/landing?from=ext
`;
    expect(go(file, 'https://a.test/old?x=1')).toEqual({ status: 301, location: '/new?x=1' });
    expect(go(file, 'https://a.test/blog/2024/hello')).toEqual({
      status: 302,
      location: '/posts/2024-hello',
    });
    expect(go(file, 'https://a.test/blog/2024')).toBeUndefined();
    expect(go(file, 'https://a.test/docs/a/b')).toEqual({ status: 308, location: '/guide/a/b' });
    expect(go(file, 'https://a.test/app/x/y')).toEqual({ status: 200, location: '/app.html' });
    expect(go(file, 'https://a.test/ext?q=1')).toEqual({
      status: 302,
      location: 'https://other.example/landing?from=ext',
    });
    expect(go(file, 'https://a.test/other')).toBeUndefined();
  });

  it('a static rule wins over an earlier pattern; host rules match the host', () => {
    const file = `/shop/* /store/:splat\n/shop/special /sale 307\nhttps://:sub.a.test/* /sites/:sub/:splat\n`;
    expect(go(file, 'https://a.test/shop/special')).toEqual({ status: 307, location: '/sale' });
    expect(go(file, 'https://a.test/shop/x')).toEqual({ status: 302, location: '/store/x' });
    expect(go(file, 'https://bob.a.test/p')).toEqual({ status: 302, location: '/sites/bob/p' });
  });

  it('refuses a bad line naming it', () => {
    expect(() => checkConfig({ _redirects: '/a /b\n/c /d 404' })).toThrow(
      /_redirects line 2: status/,
    );
    expect(() => checkConfig({ _redirects: '/a' })).toThrow(/line 1: expected <from> <to>/);
    expect(() => checkConfig({ _redirects: 'a /b' })).toThrow(/line 1: expected a path/);
    expect(() => checkConfig({ _redirects: '/a /b\n/a /c' })).toThrow(/line 2: a second rule/);
    expect(() => checkConfig({ _redirects: '/a/* /b 200\n/x https://e.test/ 200' })).toThrow(
      /line 2: a 200 rule/,
    );
    expect(() => checkConfig({ _redirects: '/*/* /b' })).toThrow(/at most one \*/);
    expect(() => checkConfig({ _redirects: 42 })).toThrow(/_redirects: expected the file's text/);
  });
});

describe('_headers', () => {
  const apply = (text: string, url: string, start: Record<string, string> = {}) => {
    const h = new Headers(start);
    applyHeaders(rulesOf(checkConfig({ _headers: text })), new URL(url), h);
    return Object.fromEntries(h);
  };

  it('sets, joins and removes headers of every matching rule, with placeholders', () => {
    const file = `/*
  X-Frame-Options: DENY
  ! Cache-Control
/assets/*
  Cache-Control: public, max-age=31536000, immutable
  X-Frame-Options: SAMEORIGIN
/u/:name
  X-User: :name
`;
    expect(apply(file, 'https://a.test/index.html', { 'cache-control': 'no-store' })).toEqual({
      'x-frame-options': 'DENY',
    });
    expect(apply(file, 'https://a.test/assets/app.js', { 'cache-control': 'no-store' })).toEqual({
      'cache-control': 'public, max-age=31536000, immutable',
      'x-frame-options': 'DENY, SAMEORIGIN',
    });
    expect(apply(file, 'https://a.test/u/bob')['x-user']).toBe('bob');
  });

  it('refuses a bad line naming it', () => {
    expect(() => checkConfig({ _headers: 'X-A: b' })).toThrow(/_headers line 1: a path/);
    expect(() => checkConfig({ _headers: '/a\n  nonsense' })).toThrow(
      /line 2: expected "Name: value"/,
    );
    expect(() => checkConfig({ _headers: '/a\n/b\n  X-A: 1' })).toThrow(
      /line 1: no headers follow \/a/,
    );
    expect(() => checkConfig({ _headers: '/a\n  X-A:' })).toThrow(/line 2: no value/);
  });
});
