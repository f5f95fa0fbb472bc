/**
 * The browser pool: a fixed number of Chromium processes (Debian's binary, driven by
 * puppeteer-core), started on first use and kept warm. Each request gets a fresh browser context
 * (own cookies, storage and cache) in the least busy process and closes it afterwards. Every step
 * has a budget; a process that exits is replaced at once and a process that stops answering (a
 * context that cannot be opened or closed within its budget) is killed and replaced, so only the
 * requests that were on it fail.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'puppeteer-core';
import type { Logger } from '../../core/log.ts';

/** Flags known to work for headless Chromium on a server without a display or sandbox. */
export const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-dev-shm-usage',
  '--hide-scrollbars',
  '--mute-audio',
];

export class BrowserUnavailable extends Error {}
export class StepTimeout extends Error {}

export interface LaunchedBrowser {
  browser: Browser;
  pid: number | undefined;
  dir: string;
  close(): Promise<void>;
}

/** Starts one Chromium with a fresh profile directory, its traffic through `proxy`. */
export async function launchChromium(executable: string, proxy: string, timeoutMs: number): Promise<LaunchedBrowser> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-chromium-'));
  let browser: Browser;
  try {
    // Loaded on first use so that processes which never render do not pay for it.
    const { default: puppeteer } = await import('puppeteer-core');
    browser = await puppeteer.launch({
      executablePath: executable,
      headless: true,
      userDataDir: dir,
      args: [...CHROMIUM_FLAGS, `--proxy-server=http://${proxy}`, '--proxy-bypass-list=<-loopback>'],
      defaultViewport: null,
      timeout: timeoutMs,
      handleSIGINT: false,
      handleSIGTERM: false,
      handleSIGHUP: false,
    });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw new BrowserUnavailable(`could not start Chromium (${executable}): ${(err as Error).message.split('\n')[0]}`);
  }
  const proc = browser.process();
  const pid = proc?.pid;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    try {
      await withTimeout(browser.close(), 3000, 'close');
    } catch {
      /* killed below */
    }
    if (proc && proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  return { browser, pid, dir, close };
}

export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new StepTimeout(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

interface Fresh {
  owner: LaunchedBrowser;
  context: BrowserContext;
  page: Page;
}

interface Slot {
  index: number;
  current?: LaunchedBrowser;
  /** A context with a page opened ahead of time (opening one costs a renderer process start). */
  spare?: Promise<Fresh | undefined>;
  starting?: Promise<LaunchedBrowser>;
  active: number;
  restarts: number;
}

export interface PoolOptions {
  executable: string;
  size: number;
  /** Budget of opening/closing a context and of starting a process, ms. */
  stepMs: number;
  proxy: () => Promise<string>;
  log: Logger;
}

export interface PoolStatus {
  index: number;
  pid?: number;
  active: number;
  restarts: number;
}

export class BrowserPool {
  private readonly slots: Slot[];
  private closed = false;

  constructor(private readonly opts: PoolOptions) {
    this.slots = Array.from({ length: Math.max(1, opts.size) }, (_, index) => ({ index, active: 0, restarts: 0 }));
  }

  status(): PoolStatus[] {
    return this.slots.map((s) => ({ index: s.index, pid: s.current?.pid, active: s.active, restarts: s.restarts }));
  }

  /** Starts every process now (otherwise they start on first use). */
  async warm(): Promise<void> {
    await Promise.all(this.slots.map((s) => this.browserOf(s)));
    for (const s of this.slots) this.prepareSpare(s);
    await Promise.all(this.slots.map((s) => s.spare));
  }

  /**
   * Runs `fn` with a new page in a fresh context; the context is closed afterwards whatever
   * happens. `deadlineMs` bounds the whole call.
   */
  async withPage<T>(deadlineMs: number, fn: (page: Page, context: BrowserContext) => Promise<T>): Promise<T> {
    if (this.closed) throw new BrowserUnavailable('the browser pool is stopping');
    const slot = this.slots.reduce((a, b) => (b.active < a.active ? b : a));
    slot.active++;
    let fresh: Fresh | undefined;
    try {
      fresh = await this.take(slot);
      return await withTimeout(fn(fresh.page, fresh.context), deadlineMs, 'rendering');
    } finally {
      slot.active--;
      if (fresh) {
        const { context, owner } = fresh;
        withTimeout(context.close(), this.opts.stepMs, 'closing a browser context').catch((err: unknown) => {
          if (owner.browser.connected) this.replace(slot, owner, `context did not close: ${(err as Error).message}`);
        });
      }
    }
  }

  /** The slot's spare context if it is ready and alive, else a new one; starts the next spare. */
  private async take(slot: Slot): Promise<Fresh> {
    const spare = slot.spare;
    slot.spare = undefined;
    let fresh = spare ? await spare : undefined;
    if (fresh && (fresh.owner !== slot.current || !fresh.owner.browser.connected || fresh.page.isClosed())) {
      void fresh.context.close().catch(() => {});
      fresh = undefined;
    }
    fresh ??= await this.open(slot);
    this.prepareSpare(slot);
    return fresh;
  }

  private prepareSpare(slot: Slot): void {
    if (this.closed || slot.spare) return;
    slot.spare = this.open(slot).catch(() => undefined);
  }

  private async open(slot: Slot): Promise<Fresh> {
    const owner = await this.browserOf(slot);
    let context: BrowserContext;
    try {
      context = await withTimeout(owner.browser.createBrowserContext(), this.opts.stepMs, 'opening a browser context');
    } catch (err) {
      this.replace(slot, owner, `context did not open: ${(err as Error).message}`);
      throw new BrowserUnavailable('the browser did not answer; it is being replaced, retry the request');
    }
    try {
      const page = await withTimeout(context.newPage(), this.opts.stepMs, 'opening a page');
      return { owner, context, page };
    } catch (err) {
      void context.close().catch(() => {});
      throw err;
    }
  }

  private async browserOf(slot: Slot): Promise<LaunchedBrowser> {
    if (slot.current?.browser.connected) return slot.current;
    if (!slot.starting) {
      slot.starting = (async () => {
        const proxy = await this.opts.proxy();
        const launched = await launchChromium(this.opts.executable, proxy, this.opts.stepMs);
        launched.browser.on('disconnected', () => {
          if (slot.current === launched) {
            slot.current = undefined;
            slot.spare = undefined;
            slot.restarts++;
            this.opts.log.warn({ slot: slot.index, pid: launched.pid }, 'Chromium exited; the next request starts a new one');
            void launched.close();
          }
        });
        if (this.closed) {
          await launched.close();
          throw new BrowserUnavailable('the browser pool is stopping');
        }
        slot.current = launched;
        this.opts.log.info({ slot: slot.index, pid: launched.pid }, 'Chromium started');
        return launched;
      })().finally(() => {
        slot.starting = undefined;
      });
    }
    return slot.starting;
  }

  private replace(slot: Slot, launched: LaunchedBrowser, reason: string): void {
    if (slot.current !== launched) return;
    slot.current = undefined;
    slot.spare = undefined;
    slot.restarts++;
    this.opts.log.warn({ slot: slot.index, pid: launched.pid, reason }, 'Chromium hung; killing and replacing it');
    void launched.close();
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(
      this.slots.map(async (s) => {
        const pending = s.starting?.catch(() => undefined);
        const cur = s.current ?? (await pending);
        s.current = undefined;
        s.spare = undefined;
        await cur?.close();
      }),
    );
  }
}
