/**
 * Shared pieces of the browser rendering tests: the Chromium check and a loopback origin serving
 * pages whose content is produced by their own script, recording what each request carried.
 */
import http from 'node:http';
import { existsSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { sqlitePassOnly } from '../../support/server.ts';

export const CHROMIUM = '/usr/bin/chromium';

/** Browser tests need Chromium; without it they fail with the reason (never skip silently). */
export function requireChromium(): void {
  if (!existsSync(CHROMIUM)) {
    const reason = `${CHROMIUM} is missing: install the Debian package 'chromium' (apt-get install -y chromium; scripts/test.sh does this)`;
    console.error(reason);
    throw new Error(reason);
  }
}

/**
 * These tests render pages and touch storage only to authenticate, so they run on one backend:
 * on PostgreSQL runs they print why and skip.
 */
export function oneBackendOnly(): boolean {
  return sqlitePassOnly('browser rendering uses storage for nothing but authentication');
}

export interface Seen {
  path: string;
  userAgent?: string;
  cookie?: string;
  headers: http.IncomingHttpHeaders;
}

export const PAGE = `<!doctype html>
<html><head><title>Fixture page</title>
<meta name="description" content="A page served by the test origin">
<meta property="og:site_name" content="Outpost fixtures">
<style>body{margin:0;background:#fff;font-family:sans-serif} #box{position:absolute;left:0;top:0;width:50px;height:50px;background:rgb(255,0,0)}</style>
<script type="application/ld+json">{"@context":"https://schema.org","@type":"Product","name":"Blue Widget","sku":"BW-1","offers":{"@type":"Offer","price":"19.99","priceCurrency":"EUR","availability":"https://schema.org/InStock"}}</script>
</head><body>
<div id="box"></div>
<div style="padding-top:80px">
<h1>Widgets</h1>
<p id="out">waiting</p>
<ul class="items"><li class="item" data-n="1">one</li><li class="item" data-n="2">two</li></ul>
<a href="/about">About us</a>
<a href="https://example.org/elsewhere">Elsewhere</a>
<a href="/hidden" style="display:none">Hidden</a>
<table><tr><th>Colour</th><td>Blue</td></tr><tr><th>Weight</th><td>1.5 kg</td></tr></table>
<img src="/img.png" width="1" height="1">
</div>
<script>document.getElementById('out').textContent = 'rendered by script ' + (6 * 7);</script>
</body></html>`;

export interface Origin {
  url: string;
  seen: Seen[];
  close(): Promise<void>;
}

export async function startOrigin(): Promise<Origin> {
  const seen: Seen[] = [];
  const pending = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    const path = req.url ?? '/';
    seen.push({ path, userAgent: req.headers['user-agent'], cookie: req.headers.cookie, headers: req.headers });
    if (path === '/' || path.startsWith('/?')) {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(PAGE);
    } else if (path === '/img.png') {
      // A 1×1 transparent PNG.
      res.writeHead(200, { 'content-type': 'image/png' }).end(Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABpfZFQAAAAABJRU5ErkJggg==', 'base64'));
    } else if (path.startsWith('/slow')) {
      // Answers after 4 s: long enough to kill the browser or fill the concurrency limit meanwhile.
      pending.add(res);
      const t = setTimeout(() => {
        pending.delete(res);
        res.writeHead(200, { 'content-type': 'text/html' }).end('<title>slow</title><p>finally</p>');
      }, 4000);
      res.on('close', () => clearTimeout(t));
    } else if (path === '/form') {
      res.writeHead(200, { 'content-type': 'text/html' }).end(
        '<title>Form</title><input id="name"><button id="go" onclick="document.getElementById(\'greeting\').textContent = \'Hello, \' + document.getElementById(\'name\').value">Go</button><p id="greeting"></p>',
      );
    } else if (path === '/to-private') {
      res.writeHead(302, { location: 'http://10.9.9.9/inside' }).end();
    } else if (path === '/about') {
      res.writeHead(200, { 'content-type': 'text/html' }).end('<title>About</title><h1>About</h1>');
    } else {
      res.writeHead(404).end('not found');
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: async () => {
      for (const r of pending) r.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
