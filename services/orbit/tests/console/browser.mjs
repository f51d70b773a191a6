// The headless Chromium page both console scripts (console.mjs, nested.mjs) drive: Debian's
// Chromium through playwright-core, one page with a timeout per check, the page's script
// errors collected, screenshots into a folder, and `check` that throws with the reason.

import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const TIMEOUT = 30000; // one page check; the server is busy compiling on small machines

export async function open(shots) {
  mkdirSync(shots, { recursive: true });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const context = await browser.newContext({ viewport: { width: 1366, height: 860 } });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const shot = (name) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  const check = (ok, what) => { if (!ok) throw new Error(`check failed: ${what}`); };
  return { browser, page, errors, shot, check };
}
