/**
 * Direct upload from a real browser: Debian Chromium (headless, through puppeteer-core) loads a
 * plain HTML form whose action is the one-time upload URL, picks a file and submits. The record
 * is then finished, its delivery URL renders in an <img> in the same browser, and the URL does
 * not take a second upload.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
import { solid } from './helpers.ts';

const CHROMIUM = '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'];

let t: TestServer;
let browser: Browser | undefined;
let dir: string;
let page: http.Server;
let pageUrl: string;
let html = '';

const pgPass = sqlitePassOnly('a browser test: the upload path is covered on both backends by the API tests');

beforeAll(async () => {
  if (pgPass) return;
  if (!existsSync(CHROMIUM)) {
    const reason = `${CHROMIUM} is missing: install the Debian package 'chromium' (apt-get install -y chromium; scripts/test.sh does this)`;
    console.error(reason);
    throw new Error(reason);
  }
  t = await startTestServer();
  dir = mkdtempSync(join(tmpdir(), 'outpost-images-browser-'));
  page = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(html);
  });
  await new Promise<void>((r) => page.listen(0, '127.0.0.1', r));
  pageUrl = `http://127.0.0.1:${(page.address() as AddressInfo).port}/`;
  browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, userDataDir: join(dir, 'profile'), args: FLAGS, timeout: 30_000 });
}, 60_000);

afterAll(async () => {
  const proc = browser?.process();
  await browser?.close().catch(() => {});
  if (proc && proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  page?.close();
  await t?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(pgPass)('direct upload from Chromium', () => {
  it('a plain form posts the file to the one-time URL', async () => {
    const created = await t.call('POST', `/accounts/${t.accountId}/images/v2/direct_upload`, { metadata: { from: 'browser' } });
    expect(created.status).toBe(200);
    const { id, uploadURL } = created.body.result as { id: string; uploadURL: string };
    const file = join(dir, 'photo.png');
    writeFileSync(file, await solid(90, 60, [200, 30, 30]));
    html = `<!doctype html><form method="post" enctype="multipart/form-data" action="${uploadURL}"><input type="file" name="file" id="f"><button id="go" type="submit">Upload</button></form>`;

    const tab = await browser!.newPage();
    await tab.goto(pageUrl);
    const input = await tab.$('#f');
    await (input as unknown as { uploadFile(p: string): Promise<void> }).uploadFile(file);
    await Promise.all([tab.waitForNavigation({ timeout: 20_000 }), tab.click('#go')]);
    const answer = JSON.parse((await tab.evaluate(() => document.body.innerText)) as string) as { success: boolean; result: { id: string; filename: string; meta: unknown; variants: string[] } };
    expect(answer.success).toBe(true);
    expect(answer.result).toMatchObject({ id, filename: 'photo.png', meta: { from: 'browser' } });

    const record = await t.call('GET', `/accounts/${t.accountId}/images/v1/${id}`);
    expect(record.body.result.draft).toBeUndefined();
    const variant = `${record.body.result.variants[0].replace(/\/public$/, '')}/w=45`;
    html = `<!doctype html><img id="i" src="${variant}">`;
    await tab.goto(pageUrl);
    await tab.waitForFunction(() => (document.getElementById('i') as HTMLImageElement).complete, { timeout: 20_000 });
    const width = await tab.evaluate(() => (document.getElementById('i') as HTMLImageElement).naturalWidth);
    expect(width).toBe(45);

    html = `<!doctype html><form method="post" enctype="multipart/form-data" action="${uploadURL}"><input type="file" name="file" id="f"><button id="go" type="submit">Upload</button></form>`;
    await tab.goto(pageUrl);
    await ((await tab.$('#f')) as unknown as { uploadFile(p: string): Promise<void> }).uploadFile(file);
    const [response] = await Promise.all([tab.waitForNavigation({ timeout: 20_000 }), tab.click('#go')]);
    expect(response?.status()).toBe(410);
    await tab.close();
  }, 60_000);
});
