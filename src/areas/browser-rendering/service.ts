/**
 * The rendering service of one server: address policy, guard proxy, the warm pool, per-account
 * admission (concurrent requests and a request rate, 429 with `retry-after` beyond either) and the
 * mapping of failures to API errors.
 */
import type { Page } from 'puppeteer-core';
import type { Config } from '../../core/config.ts';
import type { Logger } from '../../core/log.ts';
import { ApiError } from '../../core/errors.ts';
import { RateLimiter } from '../../core/ratelimit.ts';
import { AddressPolicy, GuardProxy } from './guard.ts';
import { BrowserPool, BrowserUnavailable, StepTimeout } from './pool.ts';
import { checkTarget, loadPage, RenderError, type PageMeta } from './render.ts';
import type { CommonOptions } from './schemas.ts';

export const BUSY_CODE = 2001;
export const UNAVAILABLE_CODE = 2002;
export const CRASHED_CODE = 2004;

export class RenderingService {
  readonly policy: AddressPolicy;
  readonly proxy: GuardProxy;
  readonly pool: BrowserPool;
  private readonly rate?: RateLimiter;
  private readonly inflight = new Map<string, number>();

  constructor(
    readonly config: Config,
    private readonly log: Logger,
    now: () => number,
  ) {
    this.policy = new AddressPolicy(config.browserAllow);
    this.proxy = new GuardProxy(this.policy, log);
    this.pool = new BrowserPool({
      executable: config.browserExecutable,
      size: config.browserPoolSize,
      stepMs: Math.max(5000, Math.min(config.browserTimeoutMs, 30_000)),
      proxy: () => this.proxy.start(),
      log,
    });
    if (config.browserRate && config.browserRate.requests > 0) this.rate = new RateLimiter(config.browserRate, now);
  }

  /** Counts a request against the account's rate and concurrency; returns its release. */
  admit(accountId: string): () => void {
    if (this.config.browserPoolSize === 0) {
      throw new ApiError(503, [{ code: UNAVAILABLE_CODE, message: 'browser rendering is switched off on this server (--browser-pool-size 0)' }]);
    }
    const wait = this.rate?.take(accountId) ?? 0;
    if (wait > 0) {
      throw new ApiError(429, [{ code: BUSY_CODE, message: `Rate limit exceeded: ${this.config.browserRate!.requests} requests per ${this.config.browserRate!.windowSeconds} s for this account; retry after ${wait} s` }], { 'retry-after': String(wait) });
    }
    const n = this.inflight.get(accountId) ?? 0;
    if (n >= this.config.browserConcurrency) {
      throw new ApiError(429, [{ code: BUSY_CODE, message: `Too many concurrent requests: this account may render ${this.config.browserConcurrency} pages at once; retry when one finishes` }], { 'retry-after': '1' });
    }
    this.inflight.set(accountId, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.inflight.get(accountId) ?? 1) - 1;
      if (left <= 0) this.inflight.delete(accountId);
      else this.inflight.set(accountId, left);
    };
  }

  /**
   * Loads the request's page in a fresh context and runs `capture` on it. Returns the capture's
   * value, the page facts and the browser time used.
   */
  async render<T>(accountId: string, o: CommonOptions, capture: (page: Page, meta: PageMeta) => Promise<T>): Promise<{ value: T; meta: PageMeta; ms: number }> {
    const release = this.admit(accountId);
    const started = performance.now();
    const step = o.actionTimeout ?? this.config.browserTimeoutMs;
    const wait = typeof o.waitForSelector === 'object' ? (o.waitForSelector.timeout ?? step) : o.waitForSelector ? step : 0;
    const deadline = (o.gotoOptions?.timeout ?? 30_000) + (o.waitForTimeout ?? 0) + wait + step + 5000;
    try {
      await checkTarget(o, this.policy);
      const { value, meta } = await this.pool.withPage(deadline, async (page) => {
        const meta = await loadPage(page, o, step);
        return { value: await capture(page, meta), meta };
      });
      return { value, meta, ms: Math.round(performance.now() - started) };
    } catch (err) {
      throw this.toApiError(err);
    } finally {
      release();
    }
  }

  toApiError(err: unknown): unknown {
    if (err instanceof ApiError) return err;
    if (err instanceof RenderError) return new ApiError(err.status, [{ code: err.code, message: err.message }]);
    if (err instanceof BrowserUnavailable) return new ApiError(503, [{ code: UNAVAILABLE_CODE, message: err.message }], { 'retry-after': '1' });
    if (err instanceof StepTimeout) return new ApiError(504, [{ code: 2006, message: `${err.message}; the page was abandoned` }]);
    const message = (err as Error)?.message ?? String(err);
    if (/Target closed|Session closed|Connection closed|Protocol error|detached|crash/i.test(message)) {
      this.log.warn({ err: message }, 'the browser went away while rendering');
      return new ApiError(500, [{ code: CRASHED_CODE, message: 'The browser exited while rendering this page; it has been replaced, retry the request' }]);
    }
    if ((err as Error)?.name === 'TimeoutError') return new ApiError(422, [{ code: 2006, message: message.split('\n')[0] }]);
    this.log.error({ err }, 'browser rendering failed');
    return new ApiError(500, [{ code: 1000, message: `Browser rendering failed: ${message.split('\n')[0]}` }]);
  }

  async close(): Promise<void> {
    await this.pool.close();
    await this.proxy.stop();
  }
}
