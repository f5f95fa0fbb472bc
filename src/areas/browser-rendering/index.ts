/**
 * @module browser-rendering — spec 002 "Browser rendering" (request options, endpoints, limits,
 * script binding).
 *
 * REST (`POST /accounts/{account_id}/browser-rendering/<action>`, Browser Rendering Write):
 * `content` (HTML after the page's scripts ran), `screenshot` (image bytes, or base64 text with
 * `screenshotOptions.encoding: base64`), `pdf` (PDF bytes), `snapshot` (`{content, screenshot}`),
 * `scrape` (`elements: [{selector}]` or the spec's `selectors: []` → `[{selector, results: [{text,
 * html, attributes, height, width, top, left}]}]`), `links` (`visibleLinksOnly`,
 * `excludeExternalLinks`), `markdown` (turndown) and `json` (structured data of the page by
 * `response_format`/`schema`; a `prompt` goes to an operator-configured OpenAI-compatible model).
 * Every action takes `url` or `html` and the platform's options (gotoOptions, waitForSelector,
 * waitForTimeout, actionTimeout, viewport, userAgent, setExtraHTTPHeaders, authenticate, cookies,
 * emulateMediaType, setJavaScriptEnabled, addScriptTag, addStyleTag, reject/allow resource types
 * and request patterns, bestAttempt). JSON answers are `{success, errors, result, meta: {status,
 * title, finalUrl}}`; every answer carries `X-Browser-Ms-Used`.
 *
 * Pages render in a pool of Debian Chromium processes driven by puppeteer-core (`pool.ts`), a
 * fresh context per request; per-account concurrency and rate limits answer 429 with
 * `retry-after`; pages reach only public addresses unless `--browser-allow` lists a range
 * (`guard.ts`). Operator view: `GET /_outpost/browser-rendering/pool`.
 *
 * Service `browser-rendering` (`BrowserBindings`): the Node end of a script's `browser` binding
 * (`binding.ts`), which `@cloudflare/puppeteer` drives unchanged through the in-script shim
 * `BROWSER_SHIM` (sessions, connect, keep_alive, limits, history).
 *
 * LIMITATIONS: `cacheTTL` is accepted but nothing is cached; `/crawl`, `snapshot.accessibilityTree`
 * and the `formats` option are not implemented; error codes 2001–2011 are Outpost's. Each binding
 * session is its own Chromium process (not a pool context).
 */
import { defineArea } from '../../core/area.ts';
import { BrowserSessions } from './binding.ts';
import { BROWSER_PERMISSION, mountBrowserRoutes } from './routes.ts';
import { RenderingService } from './service.ts';

export const BROWSER_SERVICE = 'browser-rendering';
export { BROWSER_SHIM, BROWSER_SHIM_NAME } from './shim.ts';
export type { BrowserBindings } from './binding.ts';

export default defineArea({
  name: 'browser-rendering',
  mount(ctx) {
    ctx.permissions.define({ key: BROWSER_PERMISSION, name: 'Browser Rendering', scope: 'account' });
    const log = ctx.log.child({ area: 'browser-rendering' });
    const svc = new RenderingService(ctx.config, log, () => ctx.clock.now().getTime());
    const sessions = new BrowserSessions(svc, log);
    ctx.services.provide(BROWSER_SERVICE, sessions);
    mountBrowserRoutes(ctx, svc);
    return {
      async stop() {
        await sessions.close();
        await svc.close();
      },
    };
  },
});
