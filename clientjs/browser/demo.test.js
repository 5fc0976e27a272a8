// Herald's demo page (GET /) in headless Chromium against a real `herald
// serve`: the token comes from the link the serve banner prints (or after
// #), a page opened without one says how to get one in the README's words
// (bin/herald token), and the Publish form shows only in WebSocket mode
// with a token that grants publish. scripts/test-browser.sh runs it.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Herald } from '../testutil/helpers.js';
import { useChromium } from './lib.js';

const newPage = useChromium();

/** demo opens the demo page of h at path (after the origin) in a fresh context. */
async function demo(t, h, path) {
  const page = await newPage(t, { timeout: 10_000 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${h.url}${path}`);
  t.after(() => assert.deepEqual(errors, [], 'no script errors on the page'));
  return page;
}

const visible = (page, sel) => page.isVisible(sel);

test('demo page: no token in the address says how to get one, in the README\'s words', async (t) => {
  const h = await Herald.start();
  t.after(() => h.destroy());
  const page = await demo(t, h, '/');
  await page.waitForSelector('#notoken', { state: 'visible' });
  const hint = await page.textContent('#notoken');
  assert.match(hint, /demo page/);
  assert.match(hint, /make run/);
  assert.match(hint, /bin\/herald token --tenant acme --sub u1 --subscribe 'orders\/\*'/);
  assert.equal(await page.inputValue('#token'), '');
  const body = await page.textContent('body');
  assert.doesNotMatch(body.replaceAll('bin/herald', ''), /herald (token|publish)/, 'every command is spelt bin/herald, as in the README');
  assert.equal(await visible(page, '#publish'), false);
});

test('demo page: the banner\'s link fills the token and connects; SSE shows no Publish form', async (t) => {
  const h = await Herald.start();
  t.after(() => h.destroy());
  const token = await h.token({ subscribe: ['orders/*'], publish: ['rooms/*'] });
  const page = await demo(t, h, `/?channel=orders/1&token=${token}`);
  assert.equal(await page.inputValue('#token'), token);
  assert.equal(await page.inputValue('#channels'), 'orders/1');
  await page.waitForSelector('#state.state-connected');
  assert.equal(await visible(page, '#notoken'), false);
  assert.equal(await visible(page, '#publish'), false, 'publish is a WebSocket command');
  await h.publish('orders/1', { status: 'paid' });
  await page.waitForFunction(() => document.querySelector('#events').textContent.includes('"status":"paid"'));
});

test('demo page: WebSocket mode shows Publish only for a token that grants it', async (t) => {
  const h = await Herald.start();
  t.after(() => h.destroy());
  for (const [grants, shown] of [[[], false], [['rooms/*'], true]]) {
    const token = await h.token({ subscribe: ['rooms/*'], publish: grants });
    // The token after # (a fragment reaches no server log) works the same.
    const page = await demo(t, h, `/#transport=ws&channel=rooms/lobby&token=${token}`);
    await page.waitForSelector('#state.state-connected');
    assert.equal(await visible(page, '#publish'), shown, `publish grants ${JSON.stringify(grants)}`);
    assert.equal(await visible(page, '#nopublish'), !shown);
    if (shown) {
      await page.fill('#pubChannel', 'rooms/lobby');
      await page.click('#publish button[type=submit]');
      await page.waitForFunction(() => document.querySelector('#events').textContent.includes('"text":"hello"'));
    }
  }
});
