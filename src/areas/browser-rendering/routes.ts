/** The eight REST actions under `/accounts/{account_id}/browser-rendering` and the pool status. */
import type { ZodType } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { ApiError } from '../../core/errors.ts';
import { raw } from '../../core/router.ts';
import { askModel } from './ai.ts';
import { collect, extract, fieldsOf } from './extract.ts';
import { links, markdown, pdf, RENDER_CODES, scrape, screenshot, toMarkdown, type PageMeta } from './render.ts';
import { JsonBody, LinksBody, PdfBody, Query, ScrapeBody, ScreenshotBody, SnapshotBody, Common } from './schemas.ts';
import type { RenderingService } from './service.ts';

export const BROWSER_PERMISSION = 'browser_rendering';
const MS_HEADER = 'X-Browser-Ms-Used';

function envelope(result: unknown, meta: PageMeta, ms: number): Response {
  const m: Record<string, unknown> = { status: meta.status, title: meta.title, finalUrl: meta.finalUrl };
  return raw(
    new Response(JSON.stringify({ success: true, errors: [], result, meta: m }), {
      headers: { 'content-type': 'application/json', [MS_HEADER]: String(ms) },
    }),
  );
}

export function mountBrowserRoutes(ctx: AreaContext, svc: RenderingService): void {
  const { router } = ctx;
  const base = '/accounts/:account_id/browser-rendering';
  const add = <B extends ZodType>(action: string, summary: string, body: B, handler: (accountId: string, body: any) => Promise<Response>) =>
    router.add(
      {
        method: 'POST',
        path: `${base}/${action}`,
        operationId: `brapi-post_${action[0].toUpperCase()}${action.slice(1)}`,
        summary,
        auth: { permission: BROWSER_PERMISSION, level: 'edit' },
        query: Query,
        body,
        tags: ['browser-rendering'],
      },
      async ({ params, body: b }) => handler(params.account_id, b),
    );

  add('content', 'Rendered HTML of a page', Common, async (a, o) => {
    const r = await svc.render(a, o, (page) => page.content());
    return envelope(r.value, r.meta, r.ms);
  });

  add('screenshot', 'Screenshot of a page', ScreenshotBody, async (a, o) => {
    const r = await svc.render(a, o, (page) => screenshot(page, o.screenshotOptions, o.selector, o.scrollPage));
    const { bytes, type, base64 } = r.value;
    if (base64) return raw(new Response(bytes.toString('base64'), { headers: { 'content-type': 'text/plain', [MS_HEADER]: String(r.ms) } }));
    return raw(new Response(new Uint8Array(bytes), { headers: { 'content-type': `image/${type}`, [MS_HEADER]: String(r.ms) } }));
  });

  add('pdf', 'PDF of a page', PdfBody, async (a, o) => {
    const r = await svc.render(a, o, (page) => pdf(page, o.pdfOptions));
    return raw(new Response(new Uint8Array(r.value), { headers: { 'content-type': 'application/pdf', [MS_HEADER]: String(r.ms) } }));
  });

  add('snapshot', 'HTML and a screenshot of a page', SnapshotBody, async (a, o) => {
    const r = await svc.render(a, o, async (page) => {
      const content = await page.content();
      const shot = await screenshot(page, { ...o.screenshotOptions, encoding: undefined });
      return { content, screenshot: shot.bytes.toString('base64') };
    });
    return envelope(r.value, r.meta, r.ms);
  });

  add('scrape', 'Elements of a page with their text, HTML, attributes and position', ScrapeBody, async (a, o) => {
    const selectors: string[] = o.elements?.map((e: { selector: string }) => e.selector) ?? o.selectors ?? [];
    if (selectors.length === 0) throw new ApiError(400, [{ code: RENDER_CODES.input, message: 'elements: give at least one {selector} (or selectors: [..])' }]);
    const r = await svc.render(a, o, (page) => scrape(page, selectors));
    return envelope(r.value, r.meta, r.ms);
  });

  add('links', 'Links of a page', LinksBody, async (a, o) => {
    const r = await svc.render(a, o, (page) => links(page, o.visibleLinksOnly === true, o.excludeExternalLinks === true));
    return envelope(r.value, r.meta, r.ms);
  });

  add('markdown', 'A page as Markdown', Common, async (a, o) => {
    const r = await svc.render(a, o, (page) => markdown(page));
    return envelope(r.value, r.meta, r.ms);
  });

  add('json', 'Structured data of a page', JsonBody, async (a, o) => {
    const rf = o.response_format as { json_schema?: Record<string, unknown>; schema?: Record<string, unknown> } | undefined;
    const fields = fieldsOf(o.schema, rf?.json_schema ?? rf?.schema);
    const useModel = o.prompt !== undefined;
    if (useModel && !svc.config.browserAiUrl) {
      // Answer before any page is loaded: nothing here can answer a prompt.
      await askModel({}, { markdown: '' }, 0).catch((err: unknown) => {
        throw svc.toApiError(err);
      });
    }
    if (!useModel && !fields) {
      throw new ApiError(400, [{ code: RENDER_CODES.input, message: 'json: give response_format (a JSON schema), schema (field → type) or a prompt' }]);
    }
    const r = await svc.render(a, o, async (page) => {
      if (!useModel) return extract(await collect(page), fields!);
      const md = toMarkdown(await page.content());
      return md;
    });
    if (!useModel) return envelope(r.value, r.meta, r.ms);
    let value: unknown;
    try {
      value = await askModel(
        { url: svc.config.browserAiUrl, model: svc.config.browserAiModel, key: svc.config.browserAiKey },
        { prompt: o.prompt, markdown: r.value as string, responseFormat: o.response_format, customAi: o.custom_ai },
        svc.config.browserTimeoutMs * 2,
      );
    } catch (err) {
      throw svc.toApiError(err);
    }
    return envelope(value, r.meta, r.ms);
  });

  router.add(
    {
      method: 'GET',
      path: '/_outpost/browser-rendering/pool',
      operationId: 'outpost_browser_pool',
      summary: 'Operator: the Chromium processes of the browser pool',
      auth: 'authenticated',
      tags: ['operator'],
    },
    async ({ principal }) => {
      if (!principal!.isRoot) throw new ApiError(403, [{ code: 9109, message: 'Operator endpoints need a root credential (the root API token or the global key)' }]);
      return { processes: svc.pool.status(), proxy: svc.proxy.address || null };
    },
  );
}
