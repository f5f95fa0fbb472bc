/**
 * The Node end of a script's `browser` binding: browser sessions for `@cloudflare/puppeteer`.
 *
 * The library talks to the binding with plain requests — `POST /v1/devtools/browser?keep_alive=`
 * (or `GET /v1/acquire`) → `{sessionId}`, `GET /v1/sessions`, `GET /v1/limits`, `GET /v1/history`,
 * `DELETE /v1/devtools/browser/{id}` — and opens a WebSocket to `/v1/devtools/browser/{id}` for the
 * DevTools protocol. Node bindings cannot carry a WebSocket, so the in-script shim (`shim.ts`)
 * hands the library a socket-like object whose traffic comes here as requests:
 * `POST /__outpost/connect?session=` → `{connectionId}`, `POST /__outpost/send?connection=` (a JSON
 * array of protocol messages), `GET /__outpost/recv?connection=` (waits up to `POLL_MS` for
 * messages: `{messages, closed}`), `POST /__outpost/disconnect?connection=`.
 *
 * Each session is its own Chromium process (fresh profile, traffic through the guard proxy). A
 * session is closed by `Browser.close`, by `DELETE`, or when no protocol message arrived for its
 * `keep_alive` (default 60 s, at most 600000 ms). A connection whose script stopped polling for
 * `STALE_MS` (its request ended) is dropped, and a new `connect` takes the session over from an
 * earlier connection; the session stays open for a later `connect` until its keep_alive runs out.
 */
import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';
import type { Logger } from '../../core/log.ts';
import { launchChromium, type LaunchedBrowser } from './pool.ts';
import type { RenderingService } from './service.ts';

export const DEFAULT_KEEP_ALIVE_MS = 60_000;
export const MAX_KEEP_ALIVE_MS = 600_000;
const POLL_MS = 10_000;
const STALE_MS = 15_000;
const HISTORY_KEPT = 100;
const DAY_MS = 86_400_000;

/** What the binding's `fetch` needs: a Node service binding for the script runtime. */
export interface BrowserBindings {
  binding(accountId: string): { type: 'service'; fetch(req: Request): Promise<Response> };
}

interface Connection {
  id: string;
  startTime: number;
  ws: WebSocket;
  queue: string[];
  waiter?: () => void;
  lastPoll: number;
  closed: boolean;
}

interface Session {
  id: string;
  accountId: string;
  startTime: number;
  keepAliveMs: number;
  lastActivity: number;
  browser: LaunchedBrowser;
  connection?: Connection;
  endTime?: number;
  closeReason?: string;
}

const json = (body: unknown, status = 200) => Response.json(body, { status });
const text = (body: string, status: number) => new Response(body, { status, headers: { 'content-type': 'text/plain' } });

export class BrowserSessions implements BrowserBindings {
  private readonly sessions = new Map<string, Session>();
  private readonly history = new Map<string, Session[]>();
  private readonly usedMs = new Map<string, { day: number; ms: number }>();
  private timer?: NodeJS.Timeout;
  private closing = false;

  constructor(
    private readonly svc: RenderingService,
    private readonly log: Logger,
  ) {}

  binding(accountId: string) {
    return { type: 'service' as const, fetch: (req: Request) => this.handle(accountId, req) };
  }

  async handle(accountId: string, req: Request): Promise<Response> {
    const url = new URL(req.url);
    const p = url.pathname;
    try {
      if (p === '/v1/acquire' || (p === '/v1/devtools/browser' && req.method === 'POST')) return await this.acquire(accountId, url);
      if (p === '/v1/sessions') return json({ sessions: this.list(accountId) });
      if (p === '/v1/limits') return json(this.limits(accountId));
      if (p === '/v1/history') return json({ history: this.historyOf(accountId) });
      const del = /^\/v1\/devtools\/browser\/([^/]+)$/.exec(p);
      if (del && req.method === 'DELETE') {
        const s = this.own(accountId, del[1]);
        if (!s) return text(`session ${del[1]} not found`, 404);
        await this.end(s, 'closed by DELETE');
        return json({ status: 'closed' });
      }
      if (p === '/__outpost/connect') return this.connect(accountId, url.searchParams.get('session') ?? '');
      const conn = this.connectionOf(accountId, url.searchParams.get('connection') ?? '');
      if (p === '/__outpost/send') {
        if (!conn) return text('this connection is closed', 410);
        return this.send(conn.session, conn.connection, (await req.json()) as unknown);
      }
      if (p === '/__outpost/recv') {
        if (!conn) return json({ messages: [], closed: true });
        return await this.recv(conn.connection);
      }
      if (p === '/__outpost/disconnect') {
        if (conn) this.detach(conn.session, 'disconnected by the script');
        return json({ ok: true });
      }
      return text(`the browser binding has no ${req.method} ${p}`, 404);
    } catch (err) {
      this.log.warn({ err: (err as Error).message, path: p }, 'browser binding call failed');
      return text((err as Error).message, 500);
    }
  }

  private own(accountId: string, id: string): Session | undefined {
    const s = this.sessions.get(id);
    return s && s.accountId === accountId ? s : undefined;
  }

  private list(accountId: string) {
    return [...this.sessions.values()]
      .filter((s) => s.accountId === accountId)
      .map((s) => ({
        sessionId: s.id,
        startTime: s.startTime,
        ...(s.connection ? { connectionId: s.connection.id, connectionStartTime: s.connection.startTime } : {}),
      }));
  }

  private limits(accountId: string) {
    const open = this.list(accountId);
    const max = this.svc.config.browserSessions;
    const used = this.browserMs(accountId);
    return {
      activeSessions: open.map((s) => ({ id: s.sessionId })),
      maxConcurrentSessions: max,
      allowedBrowserAcquisitions: Math.max(0, max - open.length),
      timeUntilNextAllowedBrowserAcquisition: open.length >= max ? 1000 : 0,
      // The spec's view: browser time left today and in total (ms), sessions open now.
      remaining: Math.max(0, DAY_MS - used),
      total: DAY_MS,
      concurrent: open.length,
    };
  }

  private browserMs(accountId: string): number {
    const day = Math.floor(Date.now() / DAY_MS);
    const u = this.usedMs.get(accountId);
    let ms = u && u.day === day ? u.ms : 0;
    for (const s of this.sessions.values()) if (s.accountId === accountId) ms += Date.now() - Math.max(s.startTime, day * DAY_MS);
    return ms;
  }

  private historyOf(accountId: string) {
    const view = (s: Session) => ({
      sessionId: s.id,
      startTime: s.startTime,
      ...(s.endTime ? { endTime: s.endTime, closeReason: s.closeReason === 'closed by Browser.close' ? 1 : 2, closeReasonText: s.closeReason } : {}),
    });
    const open = [...this.sessions.values()].filter((s) => s.accountId === accountId);
    return [...open, ...(this.history.get(accountId) ?? [])].map(view);
  }

  private async acquire(accountId: string, url: URL): Promise<Response> {
    if (this.closing) return text('the server is stopping', 503);
    const raw = url.searchParams.get('keep_alive');
    const keepAliveMs = raw === null ? DEFAULT_KEEP_ALIVE_MS : Number(raw);
    if (!Number.isInteger(keepAliveMs) || keepAliveMs < 0 || keepAliveMs > MAX_KEEP_ALIVE_MS) {
      return text(`keep_alive must be an integer from 0 to ${MAX_KEEP_ALIVE_MS} milliseconds, got ${raw}`, 400);
    }
    const open = this.list(accountId).length;
    if (open >= this.svc.config.browserSessions) {
      return text(`Browser session limit reached: ${open} of ${this.svc.config.browserSessions} sessions are open for this account; close one or retry later`, 429);
    }
    const browser = await launchChromium(this.svc.config.browserExecutable, await this.svc.proxy.start(), 30_000);
    const now = Date.now();
    const s: Session = { id: randomUUID(), accountId, startTime: now, keepAliveMs: keepAliveMs || DEFAULT_KEEP_ALIVE_MS, lastActivity: now, browser };
    this.sessions.set(s.id, s);
    browser.browser.on('disconnected', () => void this.end(s, 'browser exited'));
    this.log.info({ sessionId: s.id, accountId, pid: browser.pid, keepAliveMs: s.keepAliveMs }, 'browser session opened');
    this.startSweeper();
    return json({ sessionId: s.id });
  }

  private connect(accountId: string, id: string): Response {
    const s = this.own(accountId, id);
    if (!s) return text(`session ${id} not found (closed, or never opened by this account)`, 404);
    // A new connection takes over: the previous one belongs to a request that may have ended
    // without a word (the runtime drops its pending calls).
    if (s.connection) this.detach(s, 'replaced by a new connection');
    const ws = new WebSocket(s.browser.browser.wsEndpoint(), { perMessageDeflate: false, maxPayload: 512 * 1024 * 1024 });
    const c: Connection = { id: randomUUID(), startTime: Date.now(), ws, queue: [], lastPoll: Date.now(), closed: false };
    const opened = new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    // Messages sent before the socket is open wait for it.
    (c as Connection & { opened?: Promise<void> }).opened = opened;
    opened.catch(() => {});
    ws.on('message', (data) => {
      c.queue.push(data.toString());
      this.wake(c);
    });
    ws.on('close', () => {
      c.closed = true;
      this.wake(c);
    });
    ws.on('error', () => {});
    s.connection = c;
    s.lastActivity = Date.now();
    return json({ connectionId: c.id });
  }

  private connectionOf(accountId: string, id: string): { session: Session; connection: Connection } | undefined {
    for (const s of this.sessions.values()) {
      if (s.accountId === accountId && s.connection?.id === id && !s.connection.closed) return { session: s, connection: s.connection };
    }
    return undefined;
  }

  private async send(s: Session, c: Connection, body: unknown): Promise<Response> {
    if (!Array.isArray(body) || !body.every((m) => typeof m === 'string')) return text('expected a JSON array of protocol messages', 400);
    s.lastActivity = Date.now();
    await (c as Connection & { opened?: Promise<void> }).opened;
    for (const m of body) {
      let parsed: { id?: number; method?: string; sessionId?: string } | undefined;
      try {
        parsed = JSON.parse(m) as typeof parsed;
      } catch {
        return text('a protocol message is not JSON', 400);
      }
      if (parsed?.method === 'Browser.close' && !parsed.sessionId) {
        c.queue.push(JSON.stringify({ id: parsed.id, result: {} }));
        this.wake(c);
        setTimeout(() => void this.end(s, 'closed by Browser.close'), 50);
        continue;
      }
      c.ws.send(m);
    }
    return json({ ok: true });
  }

  private async recv(c: Connection): Promise<Response> {
    c.lastPoll = Date.now();
    if (c.queue.length === 0 && !c.closed) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, POLL_MS);
        c.waiter = () => {
          clearTimeout(t);
          resolve();
        };
      });
      c.waiter = undefined;
    }
    c.lastPoll = Date.now();
    const messages = c.queue.splice(0);
    return json({ messages, closed: c.closed && c.queue.length === 0 });
  }

  private wake(c: Connection): void {
    c.waiter?.();
  }

  private detach(s: Session, reason: string): void {
    const c = s.connection;
    if (!c) return;
    s.connection = undefined;
    c.closed = true;
    c.ws.close();
    this.wake(c);
    this.log.debug({ sessionId: s.id, connectionId: c.id, reason }, 'browser session connection closed');
  }

  private async end(s: Session, reason: string): Promise<void> {
    if (!this.sessions.has(s.id)) return;
    this.sessions.delete(s.id);
    s.endTime = Date.now();
    s.closeReason = reason;
    if (s.connection) {
      s.connection.closed = true;
      this.wake(s.connection);
    }
    const day = Math.floor(Date.now() / DAY_MS);
    const u = this.usedMs.get(s.accountId);
    const before = u && u.day === day ? u.ms : 0;
    this.usedMs.set(s.accountId, { day, ms: before + (s.endTime - Math.max(s.startTime, day * DAY_MS)) });
    const h = this.history.get(s.accountId) ?? [];
    h.unshift(s);
    this.history.set(s.accountId, h.slice(0, HISTORY_KEPT));
    this.log.info({ sessionId: s.id, reason }, 'browser session closed');
    await s.browser.close();
  }

  private startSweeper(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      const now = Date.now();
      for (const s of this.sessions.values()) {
        if (s.connection && now - s.connection.lastPoll > STALE_MS && !s.connection.waiter) this.detach(s, 'the script stopped polling');
        if (now - s.lastActivity > s.keepAliveMs) void this.end(s, `idle for more than keep_alive (${s.keepAliveMs} ms)`);
      }
      if (this.sessions.size === 0) {
        clearInterval(this.timer);
        this.timer = undefined;
      }
    }, 1000);
    this.timer.unref();
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await Promise.all([...this.sessions.values()].map((s) => this.end(s, 'server stopping')));
  }
}
