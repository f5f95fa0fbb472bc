/**
 * Request bodies of the REST actions: the options every action shares (the platform's names) and
 * each action's own. Unknown keys are ignored, as the platform does.
 */
import { z } from 'zod';

export const WAIT_UNTIL = ['load', 'domcontentloaded', 'networkidle0', 'networkidle2'] as const;
const WaitUntil = z.enum(WAIT_UNTIL);

export const RESOURCE_TYPES = [
  'document', 'stylesheet', 'image', 'media', 'font', 'script', 'texttrack', 'xhr', 'fetch',
  'prefetch', 'eventsource', 'websocket', 'manifest', 'signedexchange', 'ping', 'cspviolationreport',
  'preflight', 'other',
] as const;
const ResourceType = z.enum(RESOURCE_TYPES);

const ms = (max: number) => z.number().int().min(0).max(max);

const Pattern = z.string().max(1000).refine((p) => {
  try {
    new RegExp(p);
    return true;
  } catch {
    return false;
  }
}, 'not a valid regular expression');

const Cookie = z.object({
  name: z.string().min(1),
  value: z.string(),
  url: z.string().optional(),
  domain: z.string().optional(),
  path: z.string().optional(),
  secure: z.boolean().optional(),
  httpOnly: z.boolean().optional(),
  sameSite: z.enum(['Strict', 'Lax', 'None']).optional(),
  expires: z.number().optional(),
  priority: z.enum(['Low', 'Medium', 'High']).optional(),
});

const ScriptTag = z.object({ url: z.string().optional(), content: z.string().optional(), type: z.string().optional(), id: z.string().optional() });
const StyleTag = z.object({ url: z.string().optional(), content: z.string().optional() });

export const Common = z.object({
  url: z
    .string()
    .max(8192)
    .refine((u) => URL.canParse(u) && /^https?:$/.test(new URL(u).protocol), 'must be an absolute http or https URL')
    .optional(),
  html: z.string().max(5 * 1024 * 1024).optional(),
  gotoOptions: z
    .object({
      waitUntil: z.union([WaitUntil, z.array(WaitUntil).min(1)]).optional(),
      timeout: ms(60_000).optional(),
      referer: z.string().optional(),
      referrerPolicy: z.string().optional(),
    })
    .optional(),
  /** The spec puts `waitUntil` at the top level of `/content`. */
  waitUntil: z.union([WaitUntil, z.array(WaitUntil).min(1)]).optional(),
  waitForSelector: z
    .union([
      z.string().min(1),
      z.object({ selector: z.string().min(1), timeout: ms(60_000).optional(), visible: z.boolean().optional(), hidden: z.boolean().optional() }),
    ])
    .optional(),
  waitForTimeout: ms(60_000).optional(),
  actionTimeout: ms(300_000).optional(),
  viewport: z
    .object({
      width: z.number().int().min(1).max(7680),
      height: z.number().int().min(1).max(7680),
      deviceScaleFactor: z.number().min(0.1).max(4).optional(),
      isMobile: z.boolean().optional(),
      hasTouch: z.boolean().optional(),
      isLandscape: z.boolean().optional(),
    })
    .optional(),
  userAgent: z.string().max(2048).optional(),
  setExtraHTTPHeaders: z.record(z.string(), z.string()).optional(),
  authenticate: z.object({ username: z.string(), password: z.string() }).optional(),
  cookies: z.array(Cookie).max(100).optional(),
  emulateMediaType: z.enum(['screen', 'print', '']).optional(),
  setJavaScriptEnabled: z.boolean().optional(),
  addScriptTag: z.array(ScriptTag).max(20).optional(),
  addStyleTag: z.array(StyleTag).max(20).optional(),
  rejectResourceTypes: z.array(ResourceType).optional(),
  allowResourceTypes: z.array(ResourceType).optional(),
  rejectRequestPattern: z.array(Pattern).max(100).optional(),
  allowRequestPattern: z.array(Pattern).max(100).optional(),
  bestAttempt: z.boolean().optional(),
});
export type CommonOptions = z.output<typeof Common>;

export const ScreenshotOptions = z.object({
  type: z.enum(['png', 'jpeg', 'webp']).optional(),
  fullPage: z.boolean().optional(),
  clip: z
    .object({ x: z.number().min(0), y: z.number().min(0), width: z.number().positive(), height: z.number().positive(), scale: z.number().positive().optional() })
    .optional(),
  quality: z.number().int().min(0).max(100).optional(),
  omitBackground: z.boolean().optional(),
  captureBeyondViewport: z.boolean().optional(),
  fromSurface: z.boolean().optional(),
  optimizeForSpeed: z.boolean().optional(),
  encoding: z.enum(['binary', 'base64']).optional(),
});

const Margin = z.union([z.string().max(20), z.number()]);
export const PdfOptions = z.object({
  format: z.enum(['A0', 'A1', 'A2', 'A3', 'A4', 'A5', 'A6', 'Letter', 'Legal', 'Tabloid', 'Ledger', 'a0', 'a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'letter', 'legal', 'tabloid', 'ledger']).optional(),
  landscape: z.boolean().optional(),
  margin: z.object({ top: Margin.optional(), right: Margin.optional(), bottom: Margin.optional(), left: Margin.optional() }).optional(),
  printBackground: z.boolean().optional(),
  scale: z.number().min(0.1).max(2).optional(),
  displayHeaderFooter: z.boolean().optional(),
  headerTemplate: z.string().max(100_000).optional(),
  footerTemplate: z.string().max(100_000).optional(),
  pageRanges: z.string().max(200).optional(),
  width: Margin.optional(),
  height: Margin.optional(),
  preferCSSPageSize: z.boolean().optional(),
  omitBackground: z.boolean().optional(),
  outline: z.boolean().optional(),
  tagged: z.boolean().optional(),
  timeout: ms(300_000).optional(),
});

export const ScreenshotBody = Common.extend({
  screenshotOptions: ScreenshotOptions.optional(),
  selector: z.string().min(1).optional(),
  scrollPage: z.boolean().optional(),
});
export const PdfBody = Common.extend({ pdfOptions: PdfOptions.optional() });
export const SnapshotBody = Common.extend({ screenshotOptions: ScreenshotOptions.optional() });
export const ScrapeBody = Common.extend({
  elements: z.array(z.object({ selector: z.string().min(1) })).min(1).max(100).optional(),
  /** The spec's form. */
  selectors: z.array(z.string().min(1)).min(1).max(100).optional(),
});
export const LinksBody = Common.extend({ visibleLinksOnly: z.boolean().optional(), excludeExternalLinks: z.boolean().optional() });
export const JsonBody = Common.extend({
  prompt: z.string().max(20_000).optional(),
  /** The spec's form: field name → type name. */
  schema: z.record(z.string(), z.string()).optional(),
  response_format: z
    .object({
      type: z.string(),
      json_schema: z.union([z.record(z.string(), z.unknown()), z.object({ schema: z.record(z.string(), z.unknown()) }).passthrough()]).optional(),
      schema: z.record(z.string(), z.unknown()).optional(),
    })
    .optional(),
  custom_ai: z.array(z.object({ model: z.string(), authorization: z.string() })).optional(),
});

export const Query = z.object({ cacheTTL: z.coerce.number().int().min(0).max(86_400).optional() });
