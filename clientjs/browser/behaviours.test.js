// The client's behaviours (testutil/scenarios.js) in headless Chromium,
// over the WebSocket and the browser's own EventSource, against real
// `herald serve` processes; test/behaviours.test.js runs the same
// scenarios in Node. The page (browser/page.html, on its own origin,
// allowed by --allowed-origins) loads the client as Herald serves it
// (dist/) and drives it through testutil/probe.js. Offline and online are
// Chromium's network emulation; hiding the tab is document.visibilityState
// and a visibilitychange event.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { waitUntil } from '../testutil/helpers.js';
import { scenarios, servers } from '../testutil/scenarios.js';
import { staticServer, useChromium } from './lib.js';

const newPage = useChromium();

async function browserEnv(t) {
  const site = await staticServer(t);
  const page = await newPage(t);
  const context = page.context();
  const consoleLines = [];
  page.on('console', (m) => consoleLines.push(m.text()));
  page.on('pageerror', (e) => consoleLines.push(`pageerror: ${e.message}`));
  await page.goto(`${site.url}/page.html`);
  await page.waitForFunction(() => document.documentElement.dataset.harness !== undefined);
  const state = await page.evaluate(() => document.documentElement.dataset.harness);
  if (state !== 'ready') throw new Error(`the page is not ready: ${state}\n${consoleLines.join('\n')}`);
  t.after(() => {
    const problems = consoleLines.filter((l) => l.startsWith('pageerror'));
    assert.deepEqual(problems, [], 'no script error in the page');
  });
  return {
    ...servers(t, ['--allowed-origins', site.url]),
    async open(opts) {
      await page.evaluate((o) => window.harness.probe('c', o), opts);
      t.after(() => page.evaluate(() => window.harness.probeClose('c')).catch(() => {}));
      return {
        record: () => page.evaluate(() => window.harness.probeRecord('c')),
        subscribe: (ch) => page.evaluate((c) => window.harness.probeSubscribe('c', c), ch),
        close: () => page.evaluate(() => window.harness.probeClose('c')),
        offline: async () => {
          await context.setOffline(true);
          assert.equal(await page.evaluate(() => navigator.onLine), false);
        },
        online: async () => {
          const before = await page.evaluate(() => window.harness.onlineEvents);
          await context.setOffline(false);
          await waitUntil(() => page.evaluate((n) => window.harness.onlineEvents > n, before), 'the page\'s "online" event');
        },
        hide: () => page.evaluate(() => window.harness.setVisibility('hidden')),
        show: () => page.evaluate(() => window.harness.setVisibility('visible')),
      };
    },
  };
}

for (const transport of ['ws', 'sse']) {
  for (const s of scenarios) {
    if (s.where && !s.where({ browser: true, transport })) continue;
    test(`${transport}: ${s.name}`, async (t) => s.run(t, { env: await browserEnv(t), transport }));
  }
}
