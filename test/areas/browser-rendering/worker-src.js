// A hosted script driving the browser binding with @cloudflare/puppeteer, unchanged.
import puppeteer from '@cloudflare/puppeteer';

export default {
  async fetch(request, env) {
    const u = new URL(request.url);
    const op = u.pathname.split('/').pop();
    if (op === 'launch') {
      const browser = await puppeteer.launch(env.MYBROWSER, { keep_alive: 120000 });
      const page = await browser.newPage();
      await page.setViewport({ width: 300, height: 200 });
      await page.setUserAgent('ScriptAgent/2.0');
      await page.goto(u.searchParams.get('url'), { waitUntil: 'load' });
      const title = await page.title();
      const text = await page.evaluate(() => document.getElementById('out').textContent);
      const html = await page.content();
      const shot = await page.screenshot();
      const pdf = await page.pdf();
      const sessionId = browser.sessionId();
      browser.disconnect();
      return Response.json({ title, text, hasScript: html.includes('rendered by script'), shot: btoa(String.fromCharCode(...shot.subarray(0, 24))), pdf: new TextDecoder().decode(pdf.subarray(0, 5)), sessionId });
    }
    if (op === 'info') {
      return Response.json({
        sessions: await puppeteer.sessions(env.MYBROWSER),
        limits: await puppeteer.limits(env.MYBROWSER),
        history: await puppeteer.history(env.MYBROWSER),
      });
    }
    if (op === 'reconnect') {
      const browser = await puppeteer.connect(env.MYBROWSER, u.searchParams.get('session'));
      const pages = await browser.pages();
      // The page the first request drove (the browser's own about:blank tab is hidden behind
      // it, and a hidden page never reports an element visible, so a click there waits forever).
      const page = pages.find((p) => p.url().startsWith('http')) ?? pages[0];
      await page.bringToFront();
      await page.goto(u.searchParams.get('url'), { waitUntil: 'load' });
      await page.type('#name', 'Ada');
      await page.click('#go');
      const greeting = await page.evaluate(() => document.getElementById('greeting').textContent);
      await browser.close();
      return Response.json({ greeting, url: page.url() });
    }
    if (op === 'acquire') {
      try {
        const { sessionId } = await puppeteer.acquire(env.MYBROWSER, { keep_alive: Number(u.searchParams.get('keep_alive')) });
        return Response.json({ sessionId });
      } catch (e) {
        return Response.json({ error: String(e.message) });
      }
    }
    return new Response('unknown op', { status: 404 });
  },
};
