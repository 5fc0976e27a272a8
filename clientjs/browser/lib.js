// Shared by the browser tests: headless Chromium (Debian's, driven by
// playwright-core, both installed by scripts/test-browser.sh), a page per
// test, and a static
// server for pages on an origin other than Herald's.
import { createRequire } from 'node:module';
import { readFile, readdir } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import http from 'node:http';
import { before, after } from 'node:test';

const here = dirname(fileURLToPath(import.meta.url));
const chromiumPath = process.env.HERALD_CHROMIUM || '/usr/bin/chromium';
const playwrightDir = process.env.HERALD_PLAYWRIGHT_DIR || join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'herald-playwright');

/** launchChromium starts headless Chromium. */
export async function launchChromium() {
  let playwright;
  try {
    playwright = createRequire(join(playwrightDir, 'package.json'))('playwright-core');
  } catch (e) {
    throw new Error(`playwright-core is not installed in ${playwrightDir} (${e.message}): run scripts/test-browser.sh, which installs it`);
  }
  return playwright.chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'], timeout: 30_000 });
}

/**
 * useChromium launches headless Chromium before the calling file's tests
 * and closes it after them. It returns newPage(t, {timeout}): a page in a
 * fresh browser context, closed when test t ends; with timeout, the page's
 * default timeout (ms) for its actions.
 */
export function useChromium() {
  let browser;
  before(async () => {
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
  });
  return async (t, { timeout } = {}) => {
    const context = await browser.newContext();
    t.after(() => context.close());
    const page = await context.newPage();
    if (timeout !== undefined) page.setDefaultTimeout(timeout);
    return page;
  };
}

const JS = 'text/javascript; charset=utf-8';

/**
 * staticServer serves, on 127.0.0.1 (an origin other than Herald's),
 * browser/page.html and harness.js, testutil/probe.js, this repository's
 * client as Herald serves it (clientjs/dist: /herald.js and the modules it
 * imports), and extra: {path: [content type, body]}. The test closes it.
 */
export async function staticServer(t, extra = {}) {
  const files = {
    '/page.html': ['text/html; charset=utf-8', await readFile(join(here, 'page.html'))],
    '/harness.js': [JS, await readFile(join(here, 'harness.js'))],
    '/probe.js': [JS, await readFile(join(here, '..', 'testutil', 'probe.js'))],
    ...extra,
  };
  for (const f of await readdir(join(here, '..', 'dist'))) files[`/${f}`] = [JS, await readFile(join(here, '..', 'dist', f))];
  const server = http.createServer((req, res) => {
    const f = files[new URL(req.url, 'http://x').pathname];
    if (typeof f === 'function') return f(req, res);
    if (f) {
      res.writeHead(200, { 'Content-Type': f[0], 'Cache-Control': 'no-store' });
      res.end(f[1]);
    } else {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end('not found');
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${server.address().port}` };
}
