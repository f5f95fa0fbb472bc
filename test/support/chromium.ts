/**
 * Debian's Chromium for the browser and media tests, driven with puppeteer-core: one set of flags
 * (headless, no network beyond what the page asks for, fake camera and microphone) and a launcher
 * that fails with the install hint when the browser is missing.
 */
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser } from 'puppeteer-core';

export const CHROMIUM = '/usr/bin/chromium';

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--autoplay-policy=no-user-gesture-required',
  '--use-fake-ui-for-media-stream',
  '--use-fake-device-for-media-stream',
];

export interface LaunchedChromium {
  browser: Browser;
  /** The fresh profile directory; the caller removes it after closing the browser. */
  profile: string;
}

export async function launchMediaChromium(profilePrefix: string, extraFlags: string[] = []): Promise<LaunchedChromium> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install the Debian package 'chromium' (scripts/test.sh does this)`);
  const profile = mkdtempSync(join(tmpdir(), profilePrefix));
  const browser = await puppeteer.launch({ executablePath: CHROMIUM, args: [...FLAGS, ...extraFlags], userDataDir: profile, headless: true, timeout: 30_000 });
  return { browser, profile };
}
