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
