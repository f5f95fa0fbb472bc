/**
 * One REST action on a page: set the page up from the request options, load the URL (or the
 * given HTML), wait as asked, then capture what the action returns. Failures the caller can fix
 * (a URL that does not load, a selector that never appears) are `RenderError`s with the reason.
 */
import type { HTTPRequest, Page, ScreenshotOptions as PptrScreenshot, PDFOptions } from 'puppeteer-core';
import TurndownService from 'turndown';
import type { z } from 'zod';
import type { AddressPolicy } from './guard.ts';
import { BlockedError, GUARD_HEADER } from './guard.ts';
import type { CommonOptions, PdfOptions, ScreenshotOptions } from './schemas.ts';

export class RenderError extends Error {
  constructor(
    readonly status: number,
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

export const RENDER_CODES = {
  blocked: 2003,
  navigation: 2005,
  timeout: 2006,
  selector: 2007,
  input: 2008,
} as const;

export interface PageMeta {
  status?: number;
  title?: string;
  finalUrl?: string;
  headers?: Record<string, string>;
}

const DEFAULT_VIEWPORT = { width: 1920, height: 1080 };
const DEFAULT_NAV_TIMEOUT = 30_000;

/** Refuses a request without exactly one of url/html, or whose URL the policy does not allow. */
export async function checkTarget(o: CommonOptions, policy: AddressPolicy): Promise<void> {
  if ((o.url === undefined) === (o.html === undefined)) {
    throw new RenderError(400, RENDER_CODES.input, 'give exactly one of url or html');
  }
  if (!o.url) return;
  const host = new URL(o.url).hostname;
  try {
    await policy.resolve(host);
  } catch (err) {
    if (err instanceof BlockedError) throw new RenderError(400, RENDER_CODES.blocked, `url: ${err.message}`);
    throw new RenderError(422, RENDER_CODES.navigation, `url: ${host} could not be resolved (${(err as Error).message})`);
  }
}

/** Prepares `page` and loads the target (checked by `checkTarget`); returns the main response's facts. */
export async function loadPage(page: Page, o: CommonOptions, actionMs: number): Promise<PageMeta> {
  page.setDefaultTimeout(o.actionTimeout ?? actionMs);
  await page.setViewport(o.viewport ?? DEFAULT_VIEWPORT);
  if (o.userAgent) await page.setUserAgent(o.userAgent);
  if (o.setExtraHTTPHeaders) await page.setExtraHTTPHeaders(o.setExtraHTTPHeaders);
  if (o.authenticate) await page.authenticate(o.authenticate);
  if (o.emulateMediaType !== undefined) await page.emulateMediaType(o.emulateMediaType || undefined);
  if (o.setJavaScriptEnabled === false) await page.setJavaScriptEnabled(false);
  if (o.cookies?.length) {
    const base = o.url;
    for (const c of o.cookies) {
      if (!c.url && !c.domain && !base) throw new RenderError(400, RENDER_CODES.input, `cookies: ${c.name} needs a url or domain when html is rendered`);
    }
    await page.browserContext().setCookie(...o.cookies.map((c) => ({ ...c, ...(c.url || c.domain ? {} : { url: base }) })) as never[]);
  }
  const filter = requestFilter(o);
  if (filter) {
    await page.setRequestInterception(true);
    page.on('request', (req: HTTPRequest) => {
      if (req.isInterceptResolutionHandled()) return;
      // The page itself is never blocked: the caller asked for it.
      const isMain = req.isNavigationRequest() && req.frame() === page.mainFrame();
      if (!isMain && !filter(req)) void req.abort('blockedbyclient', 0).catch(() => {});
      else void req.continue(undefined, 0).catch(() => {});
    });
  }

  const waitUntil = o.gotoOptions?.waitUntil ?? o.waitUntil ?? 'load';
  const timeout = o.gotoOptions?.timeout ?? DEFAULT_NAV_TIMEOUT;
  const meta: PageMeta = {};
  try {
    if (o.url) {
      const res = await page.goto(o.url, { waitUntil, timeout, referer: o.gotoOptions?.referer });
      const guard = res?.headers()[GUARD_HEADER];
      if (res && guard) {
        const why = await res.text().catch(() => '');
        if (guard === 'blocked') throw new RenderError(400, RENDER_CODES.blocked, `Navigation to ${o.url} was refused: ${why}`);
        throw new RenderError(422, RENDER_CODES.navigation, `Navigation to ${o.url} failed: ${why}`);
      }
      if (res) {
        meta.status = res.status();
        meta.headers = res.headers();
      }
    } else {
      const events = Array.isArray(waitUntil) ? waitUntil : [waitUntil];
      const basic = events.filter((e): e is 'load' | 'domcontentloaded' => e === 'load' || e === 'domcontentloaded');
      await page.setContent(o.html!, { waitUntil: basic.length ? basic : 'load', timeout });
      const idle = events.includes('networkidle0') ? 0 : events.includes('networkidle2') ? 2 : undefined;
      if (idle !== undefined) await page.waitForNetworkIdle({ idleTime: 500, concurrency: idle, timeout });
      meta.status = 200;
    }
  } catch (err) {
    const e = err as Error;
    if (e instanceof RenderError) throw e;
    // The browser went away: not the page's fault (the service answers it as a crash).
    if (!page.browser().connected || /disconnected|Target closed|Session closed/i.test(e.message)) throw e;
    if (e.name === 'TimeoutError') {
      if (!o.bestAttempt) throw new RenderError(422, RENDER_CODES.timeout, `Navigation timeout of ${timeout} ms exceeded waiting for ${String(waitUntil)}; raise gotoOptions.timeout or set bestAttempt`);
    } else {
      throw new RenderError(422, RENDER_CODES.navigation, `Navigation to ${o.url ?? 'the given html'} failed: ${e.message.split('\n')[0]}`);
    }
  }

  for (const tag of o.addScriptTag ?? []) await page.addScriptTag(tag);
  for (const tag of o.addStyleTag ?? []) await page.addStyleTag(tag);

  if (o.waitForSelector) {
    const w = typeof o.waitForSelector === 'string' ? { selector: o.waitForSelector } : o.waitForSelector;
    try {
      await page.waitForSelector(w.selector, { timeout: w.timeout ?? o.actionTimeout ?? actionMs, visible: w.visible, hidden: w.hidden });
    } catch (err) {
      if (!o.bestAttempt) {
        const e = err as Error;
        throw new RenderError(422, RENDER_CODES.selector, e.name === 'TimeoutError' ? `waitForSelector: ${w.selector} did not appear in time` : `waitForSelector: ${e.message.split('\n')[0]}`);
      }
    }
  }
  if (o.waitForTimeout) await new Promise((r) => setTimeout(r, o.waitForTimeout));
  meta.title = await page.title().catch(() => undefined);
  meta.finalUrl = page.url();
  return meta;
}

function requestFilter(o: CommonOptions): ((req: HTTPRequest) => boolean) | undefined {
  const reject = o.rejectResourceTypes?.length ? new Set<string>(o.rejectResourceTypes) : undefined;
  const allow = o.allowResourceTypes?.length ? new Set<string>(o.allowResourceTypes) : undefined;
  const rejectRe = o.rejectRequestPattern?.map((p) => new RegExp(p));
  const allowRe = o.allowRequestPattern?.map((p) => new RegExp(p));
  if (!reject && !allow && !rejectRe?.length && !allowRe?.length) return undefined;
  return (req) => {
    const type = req.resourceType();
    const url = req.url();
    if (allow && !allow.has(type)) return false;
    if (allowRe?.length && !allowRe.some((r) => r.test(url))) return false;
    if (reject?.has(type)) return false;
    if (rejectRe?.some((r) => r.test(url))) return false;
    return true;
  };
}

// ------------------------------------------------------------------------------ captures

export async function screenshot(
  page: Page,
  opts: z.output<typeof ScreenshotOptions> | undefined,
  selector?: string,
  scrollPage?: boolean,
): Promise<{ bytes: Buffer; type: string; base64: boolean }> {
  const type = opts?.type ?? 'png';
  if (opts?.quality !== undefined && type === 'png') throw new RenderError(400, RENDER_CODES.input, 'screenshotOptions.quality is not supported for png; use jpeg or webp');
  if (opts?.clip && opts.fullPage) throw new RenderError(400, RENDER_CODES.input, 'screenshotOptions: clip and fullPage cannot be combined');
  if (scrollPage) {
    await page.evaluate(async () => {
      for (let y = 0; y < document.body.scrollHeight && y < 50_000; y += window.innerHeight) {
        window.scrollTo(0, y);
        await new Promise((r) => setTimeout(r, 50));
      }
      window.scrollTo(0, 0);
    });
  }
  const options: PptrScreenshot = {
    type,
    fullPage: opts?.fullPage,
    clip: opts?.clip,
    quality: opts?.quality,
    omitBackground: opts?.omitBackground,
    // Capturing beyond the viewport resizes the page for every shot; only a full page needs it.
    captureBeyondViewport: opts?.captureBeyondViewport ?? opts?.fullPage === true,
    fromSurface: opts?.fromSurface,
    optimizeForSpeed: opts?.optimizeForSpeed,
  };
  let data: Uint8Array;
  if (selector) {
    const el = await page.$(selector);
    if (!el) throw new RenderError(422, RENDER_CODES.selector, `selector: ${selector} matches no element`);
    data = await el.screenshot({ ...options, fullPage: undefined });
  } else {
    data = await page.screenshot(options);
  }
  return { bytes: Buffer.from(data), type, base64: opts?.encoding === 'base64' };
}

export async function pdf(page: Page, opts: z.output<typeof PdfOptions> | undefined): Promise<Buffer> {
  const format = opts?.format ? (opts.format.toLowerCase() as PDFOptions['format']) : undefined;
  const data = await page.pdf({ ...opts, format, timeout: opts?.timeout ?? 30_000 });
  return Buffer.from(data);
}

export interface ScrapedElement {
  text: string;
  html: string;
  attributes: { name: string; value: string }[];
  height: number;
  width: number;
  top: number;
  left: number;
}

export async function scrape(page: Page, selectors: string[]): Promise<{ selector: string; results: ScrapedElement[] }[]> {
  const out: { selector: string; results: ScrapedElement[] }[] = [];
  for (const selector of selectors) {
    let results: ScrapedElement[];
    try {
      results = await page.$$eval(selector, (els) =>
        els.map((el) => {
          const r = el.getBoundingClientRect();
          return {
            text: (el as HTMLElement).innerText ?? el.textContent ?? '',
            html: el.innerHTML,
            attributes: Array.from(el.attributes).map((a) => ({ name: a.name, value: a.value })),
            height: r.height,
            width: r.width,
            top: r.top + window.scrollY,
            left: r.left + window.scrollX,
          };
        }),
      );
    } catch (err) {
      throw new RenderError(400, RENDER_CODES.input, `elements: ${selector} is not a valid selector (${(err as Error).message.split('\n')[0]})`);
    }
    out.push({ selector, results });
  }
  return out;
}

export async function links(page: Page, visibleOnly: boolean, excludeExternal: boolean): Promise<string[]> {
  const found = await page.$$eval('a[href]', (els) =>
    els.map((el) => {
      const a = el as HTMLAnchorElement;
      const r = a.getBoundingClientRect();
      const style = window.getComputedStyle(a);
      const visible = r.width > 0 && r.height > 0 && style.visibility !== 'hidden' && style.display !== 'none';
      return { href: a.href, visible };
    }),
  );
  const here = new URL(page.url());
  const seen = new Set<string>();
  const out: string[] = [];
  for (const l of found) {
    if (!/^https?:/.test(l.href)) continue;
    if (visibleOnly && !l.visible) continue;
    if (excludeExternal && (!URL.canParse(l.href) || new URL(l.href).hostname !== here.hostname)) continue;
    if (seen.has(l.href)) continue;
    seen.add(l.href);
    out.push(l.href);
  }
  return out;
}

let turndown: TurndownService | undefined;
export function toMarkdown(html: string): string {
  if (!turndown) {
    turndown = new TurndownService({ headingStyle: 'atx', codeBlockStyle: 'fenced', bulletListMarker: '-' });
    turndown.remove(['script', 'style', 'noscript', 'template', 'head' as keyof HTMLElementTagNameMap]);
  }
  return turndown.turndown(html).trim();
}

export async function markdown(page: Page): Promise<string> {
  return toMarkdown(await page.content());
}
