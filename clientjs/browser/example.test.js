// The example page (example/: index.html, orders.js, served by the
// example app, app.mjs) in headless Chromium against a real Herald: it
// renders the order list from the application's state, applies live
// updates, and reloads the state after a gap (a Herald restart, with an
// update lost while it was down). The page only reads, so it runs on
// Server-Sent Events with the SSE-only client: it never opens a WebSocket
// and never loads the WebSocket code.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Herald, SECRET } from '../testutil/helpers.js';
import { startApp } from '../example/app.mjs';
import { useChromium } from './lib.js';

const newPage = useChromium();

const post = (app, id, status) =>
  fetch(`${app.url}/api/orders/${id}`, { method: 'POST', body: JSON.stringify({ status }) }).then((r) => r.json());

test('example: the order list from state, live updates, a reload after a gap', async (t) => {
  const app = await startApp({ secret: SECRET });
  t.after(() => app.close());
  // Without its history log, a restarted Herald has lost the history:
  // the page must reload after the gap.
  const h = await Herald.start({ args: ['--allowed-origins', app.url, '--history-log=false'] });
  t.after(() => h.destroy());
  app.use(h.url);

  const page = await newPage(t);
  const problems = [];
  page.on('pageerror', (e) => problems.push(e.message));
  const sockets = [];
  page.on('websocket', (ws) => sockets.push(ws.url()));
  const streams = [];
  const modules = new Set();
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.origin !== h.url) return;
    if (u.pathname === '/v1/sse') streams.push(r.resourceType());
    if (u.pathname.startsWith('/client/')) modules.add(u.pathname.slice('/client/'.length));
  });
  await page.goto(`${app.url}/`);
  const shows = (id, status) =>
    page.waitForFunction(([i, s]) => document.querySelector(`#order-${i} span`)?.textContent === s, [id, status], { timeout: 120_000 });

  // The state, rendered.
  await page.waitForFunction(() => document.getElementById('status').textContent === 'live', null, { timeout: 120_000 });
  assert.deepEqual(await page.$$eval('#orders li', (lis) => lis.map((li) => li.textContent)), ['A-1 tea: paid', 'A-2 coffee: paid', 'A-3 cocoa: packed']);
  assert.equal(await page.evaluate(() => document.body.dataset.reloads), '1');

  // A live update, applied once.
  assert.equal((await post(app, 'A-2', 'shipped')).published, true);
  await shows('A-2', 'shipped');
  assert.equal(await page.getAttribute('#order-A-2', 'data-version'), '2');

  // Herald restarts (its in-memory history is lost: a new epoch), and an
  // update made while it is down is never published.
  await h.stop();
  await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('reconnecting'), null, { timeout: 120_000 });
  assert.equal((await post(app, 'A-3', 'delivered')).published, false);
  await h.restart();
  // The page reloads the state after the gap and shows the lost update.
  await shows('A-3', 'delivered');
  assert.equal(await page.evaluate(() => document.body.dataset.reloads), '2');
  await page.waitForFunction(() => document.getElementById('status').textContent === 'live', null, { timeout: 120_000 });

  // And live updates go on, once the application's own publisher has
  // reconnected too: until then its publish fails and the app says so
  // (published: false), and the update is lost to live subscribers, as it
  // was while Herald was down; the app's state keeps it.
  for (let tries = 0; !(await post(app, 'A-1', 'refunded')).published; tries++) {
    assert.ok(tries < 600, 'the app publishes again after the restart');
    await new Promise((r) => setTimeout(r, 200));
  }
  await shows('A-1', 'refunded');
  assert.deepEqual(problems, [], 'no script error in the page');

  // All of it over SSE: the browser's own EventSource, a stream before
  // the restart and one after; no WebSocket, no WebSocket code.
  assert.deepEqual(sockets, [], 'the page opens no WebSocket');
  assert.ok(streams.length >= 2 && streams.every((t) => t === 'eventsource'), `the page's streams: ${streams.join(', ')}`);
  assert.ok(modules.has('sse.js') && modules.has('latest.js'), `modules loaded: ${[...modules].join(', ')}`);
  for (const m of ['herald.js', 'ws.js', 'eventsource.js']) assert.ok(!modules.has(m), `the page loads ${m}: ${[...modules].join(', ')}`);
});
