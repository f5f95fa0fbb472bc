/**
 * The in-script side of the `browser` binding (plain JavaScript that runs inside the script
 * runtime). `__outpostBrowser(service)` wraps the Node service binding so `@cloudflare/puppeteer`
 * works unchanged: ordinary requests pass through; the library's WebSocket upgrade to
 * `/v1/devtools/browser/{sessionId}` answers a socket-like object (`accept`, `send`,
 * `addEventListener`, `close`) whose messages travel as requests to the Node side (see
 * `binding.ts`): a batch per send, a long poll for what the browser says.
 */
export const BROWSER_SHIM_NAME = '__outpostBrowser';

export const BROWSER_SHIM = String.raw`
class __OutpostDevtoolsSocket {
  constructor(call, id) {
    this.call = call;
    this.id = id;
    this.listeners = { message: [], close: [], error: [], open: [] };
    this.closed = false;
    this.outbox = [];
    this.flushing = false;
    this.readyState = 1;
  }
  accept() {
    this.poll();
  }
  addEventListener(type, fn) {
    (this.listeners[type] = this.listeners[type] || []).push(fn);
  }
  removeEventListener(type, fn) {
    this.listeners[type] = (this.listeners[type] || []).filter((f) => f !== fn);
  }
  emit(type, ev) {
    for (const fn of this.listeners[type] || []) {
      try { fn(ev); } catch (e) { console.error(e); }
    }
  }
  send(data) {
    if (this.closed) throw new Error('The browser connection is closed');
    this.outbox.push(typeof data === 'string' ? data : new TextDecoder().decode(data));
    if (!this.flushing) {
      this.flushing = true;
      Promise.resolve().then(() => this.flush());
    }
  }
  async flush() {
    try {
      while (this.outbox.length > 0 && !this.closed) {
        const batch = this.outbox.splice(0);
        const res = await this.call('/__outpost/send?connection=' + this.id, { method: 'POST', body: JSON.stringify(batch) });
        if (!res.ok) return this.fail('send failed: ' + (await res.text()));
        await res.arrayBuffer();
      }
    } catch (e) {
      this.fail(String(e && e.message || e));
    } finally {
      this.flushing = false;
    }
  }
  async poll() {
    while (!this.closed) {
      let body;
      try {
        const res = await this.call('/__outpost/recv?connection=' + this.id);
        if (!res.ok) return this.fail('receive failed: ' + (await res.text()));
        body = await res.json();
      } catch (e) {
        return this.fail(String(e && e.message || e));
      }
      for (const m of body.messages) {
        if (this.closed) break;
        this.emit('message', { data: m });
      }
      if (body.closed) return this.finish(1000, 'session closed');
    }
  }
  fail(message) {
    if (this.closed) return;
    this.emit('error', { message });
    this.finish(1011, message);
  }
  finish(code, reason) {
    if (this.closed) return;
    this.closed = true;
    this.readyState = 3;
    this.emit('close', { code, reason, wasClean: code === 1000 });
  }
  close() {
    if (this.closed) return;
    this.call('/__outpost/disconnect?connection=' + this.id, { method: 'POST' }).then((r) => r.arrayBuffer(), () => {});
    this.finish(1000, 'closed by the script');
  }
}

function __outpostBrowser(service) {
  const base = 'http://browser.binding';
  const call = (path, init) => service.fetch(base + path, init);
  return {
    async fetch(input, init) {
      const req = input instanceof Request ? new Request(input, init) : new Request(new URL(String(input), base).toString(), init);
      const url = new URL(req.url);
      const upgrade = (req.headers.get('upgrade') || '').toLowerCase() === 'websocket';
      const m = /^\/v1\/devtools\/browser\/([^/]+)$/.exec(url.pathname);
      if (upgrade && m) {
        const res = await call('/__outpost/connect?session=' + encodeURIComponent(m[1]), { method: 'POST' });
        if (!res.ok) return new Response(await res.text(), { status: res.status });
        const { connectionId } = await res.json();
        const ws = new __OutpostDevtoolsSocket(call, connectionId);
        return { ok: true, status: 101, statusText: 'Switching Protocols', headers: new Headers(), webSocket: ws, text: async () => '', json: async () => ({}) };
      }
      if (upgrade) return new Response('this server supports the DevTools connection at /v1/devtools/browser/{sessionId} only', { status: 400 });
      return service.fetch(base + url.pathname + url.search, { method: req.method, headers: req.headers, body: req.method === 'GET' || req.method === 'HEAD' ? undefined : await req.arrayBuffer() });
    },
  };
}
`;
