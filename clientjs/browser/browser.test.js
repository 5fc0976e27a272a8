// herald.js in a real browser: headless Chromium (Debian's /usr/bin/chromium,
// driven by playwright-core) against real `herald serve` processes.
// scripts/test-browser.sh installs both and runs this file; `make test-js`
// does not (it needs the browser).
//
// The page side is browser/harness.js. Same-origin tests inject it into
// Herald's own demo page (GET /, with its Content-Security-Policy), reached
// through a TCP proxy that can cut the network, and it imports Herald's
// /client/herald.js. Cross-origin tests load browser/page.html and
// harness.js from a small static server on another port, and herald.js
// from there or, across origins, from Herald.

import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Herald, HttpProxy, TcpProxy, fastBackoff, waitUntil, watch } from '../testutil/helpers.js';
import { staticServer, useChromium } from './lib.js';

const here = dirname(fileURLToPath(import.meta.url));

// The documented fields of every publication (docs/protocol.md).
const FIELDS = ['id', 'channel', 'offset', 'epoch', 'type', 'schema_version', 'time', 'freshness', 'data'];

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

const newPage = useChromium();
let harnessJs;

before(async () => {
  harnessJs = await readFile(join(here, 'harness.js'), 'utf8');
});

/** startHerald starts a `herald serve` that the test destroys when it ends. */
async function startHerald(t, args = []) {
  const h = await Herald.start({ args });
  t.after(() => h.destroy());
  return h;
}

/** startProxy starts a TcpProxy to h that the test closes when it ends. */
async function startProxy(t, h) {
  const p = await TcpProxy.start(h.port);
  t.after(() => p.close());
  return p;
}

/**
 * openPage opens a page in a fresh browser context: with served, that
 * server's page.html (which loads harness.js from there, and herald.js
 * from client, by default from there too);
 * else Herald's demo page at origin, with harness.js injected (it loads
 * /client/herald.js from Herald). It records the page's requests, console
 * messages and WebSocket frames sent.
 */
async function openPage(t, { origin, served, client }) {
  const page = await newPage(t, { timeout: 10_000 });
  const requests = [];
  const consoleLines = [];
  const framesSent = [];
  page.on('request', (r) => requests.push({ method: r.method(), url: r.url(), type: r.resourceType() }));
  page.on('console', (m) => consoleLines.push(m.text()));
  page.on('pageerror', (e) => consoleLines.push(`pageerror: ${e.message}`));
  page.on('websocket', (ws) => ws.on('framesent', (f) => framesSent.push(String(f.payload))));
  if (served) {
    await page.goto(`${served}/page.html${client ? `?client=${encodeURIComponent(client)}` : ''}`);
  } else {
    await page.goto(`${origin}/`);
    await page.addScriptTag({ content: harnessJs, type: 'module' });
  }
  await page.waitForFunction(() => document.documentElement.dataset.harness !== undefined);
  const state = await page.evaluate(() => document.documentElement.dataset.harness);
  if (state !== 'ready') throw new Error(`the page is not ready: ${state}\n${consoleLines.join('\n')}`);
  const pg = {
    page,
    requests,
    consoleLines,
    framesSent,
    info: () => page.evaluate(() => ({ origin: window.harness.origin, clientUrl: window.harness.clientUrl, nativeEventSource: window.harness.nativeEventSource })),
    start: (name, opts) => page.evaluate(([n, o]) => window.harness.start(n, o), [name, opts]),
    record: (name) => page.evaluate((n) => window.harness.record(n), name),
    close: (name) => page.evaluate((n) => window.harness.close(n), name),
    /** waitFor polls client name's record until pred holds, failing after ms with what it saw. */
    async waitFor(name, pred, what, ms = 5000) {
      const deadline = Date.now() + ms;
      for (;;) {
        const rec = await pg.record(name);
        if (rec && pred(rec)) return rec;
        if (Date.now() > deadline) {
          throw new Error(`timed out after ${ms} ms waiting for ${what}; client "${name}" recorded:\n${JSON.stringify(rec).slice(0, 3000)}\nconsole:\n${consoleLines.join('\n').slice(0, 2000)}`);
        }
        await sleep(20);
      }
    },
  };
  return pg;
}

/** metric returns the value of one sample of Herald's /metrics (0 when absent). */
async function metric(h, name, labels) {
  const text = await (await fetch(`${h.url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const ls = line.slice(name.length + 1, line.indexOf('}'));
    if (Object.entries(labels).every(([k, v]) => ls.split(',').includes(`${k}="${v}"`))) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** publishAll publishes n notifications {n: from…} on channel, in order, and returns their ids. */
async function publishAll(h, channel, from, n) {
  const ids = [];
  for (let i = 0; i < n; i++) ids.push(await h.publish(channel, { n: from + i }));
  return ids;
}

/** checkPublications asserts the documented fields and the order of pubs: offsets first…, epoch shared. */
function checkPublications(pubs, channel, ids) {
  assert.deepEqual(pubs.map((p) => p.id), ids, 'every publication exactly once, in order');
  assert.equal(new Set(pubs.map((p) => p.id)).size, ids.length);
  assert.deepEqual(pubs.map((p) => p.offset), ids.map((_, i) => i + 1), 'offsets 1…n');
  for (const [i, p] of pubs.entries()) {
    for (const f of FIELDS) assert.ok(f in p, `publication ${i + 1} has ${f}: ${JSON.stringify(p)}`);
    assert.equal(p.push, undefined);
    assert.equal(p.channel, channel);
    assert.equal(p.epoch, pubs[0].epoch);
    assert.equal(typeof p.epoch, 'string');
    assert.ok(p.epoch !== '');
    assert.equal(p.type, 'order.updated');
    assert.equal(p.schema_version, 1);
    assert.ok(Number.isFinite(Date.parse(p.time)), `time ${p.time} is a timestamp`);
    assert.deepEqual(p.freshness, { mode: 'immediate' });
    assert.deepEqual(p.data, { n: i + 1 });
  }
}

/**
 * cutAndResume cuts every connection through proxy and refuses new ones,
 * publishes 4 notifications while the page's client is cut off (waiting
 * until a direct watcher has them, so they are in the history), lets the
 * client back in and publishes one more. Returns the 5 ids.
 */
async function cutAndResume(pg, name, proxy, h, watcher, channel, from) {
  const seen = watcher.pubs.length;
  proxy.hold(true);
  proxy.cut();
  await pg.waitFor(name, (r) => r.state === 'reconnecting', 'the client to notice the cut');
  const during = await publishAll(h, channel, from, 4);
  await waitUntil(() => watcher.pubs.length === seen + 4, 'the publications made during the cut', 5000);
  const rec = await pg.record(name);
  assert.equal(rec.pubs[channel].length, from - 1, 'nothing reached the page during the cut');
  proxy.hold(false);
  const last = await h.publish(channel, { n: from + 4 });
  return [...during, last];
}

/**
 * receiveCutResume checks the page's client "c", subscribing to channel:
 * it receives 3 publications in order, then the network is cut, 4 more are
 * published and one after; every id arrives once, in order, with one
 * resume and no gap. It returns the client's record.
 */
async function receiveCutResume(t, pg, h, proxy, token, channel) {
  let rec = await pg.waitFor('c', (r) => r.ready[channel], 'the subscription');
  assert.equal(rec.ready[channel].recovered, false);
  assert.equal(rec.state, 'connected');
  const watcher = await watch(t, h, token, channel);

  const ids = await publishAll(h, channel, 1, 3);
  rec = await pg.waitFor('c', (r) => r.pubs[channel].length >= 3, 'the first 3 publications');
  checkPublications(rec.pubs[channel], channel, ids);

  ids.push(...(await cutAndResume(pg, 'c', proxy, h, watcher, channel, 4)));
  await pg.waitFor('c', (r) => r.pubs[channel].length >= 8, 'all 8 publications after the cut');
  await sleep(200); // a duplicate would come right behind
  rec = await pg.record('c');
  checkPublications(rec.pubs[channel], channel, ids);
  assert.deepEqual(rec.gaps, []);
  assert.equal(rec.recovered.length, 1, 'resumed once, nothing missed');
  assert.equal(rec.recovered[0].channel, channel);
  assert.equal(rec.state, 'connected');
  return rec;
}

test('ws: publications in offset order with every documented field; a network cut resumes with nothing lost', async (t) => {
  const h = await startHerald(t);
  const proxy = await startProxy(t, h);
  const token = await h.token({ subscribe: ['orders/*'] });
  const pg = await openPage(t, { origin: proxy.url });
  assert.deepEqual(await pg.info(), { origin: proxy.url, clientUrl: `${proxy.url}/client/herald.js`, nativeEventSource: true });

  // No url: the client defaults to the page's origin (Herald, through the proxy).
  await pg.start('c', { transport: 'ws', token, channels: ['orders/1'], backoff: fastBackoff });
  const rec = await receiveCutResume(t, pg, h, proxy, token, 'orders/1');
  const waits = rec.states.filter((s) => s.state === 'reconnecting');
  assert.ok(waits.length >= 1);
  assert.equal(waits[0].reason, 'network');
  for (const s of waits) assert.ok(s.delayMs <= fastBackoff.maxMs, `delay ${s.delayMs} within the bound`);
  assert.deepEqual(rec.errors, []);

  // The browser resubscribed from its position: offset 3, the same epoch.
  const subs = pg.framesSent.map((f) => JSON.parse(f)).filter((f) => f.op === 'subscribe');
  assert.equal(subs[0].since, undefined);
  assert.deepEqual(subs.at(-1).since, { offset: 3, epoch: rec.pubs['orders/1'][0].epoch });
  assert.ok(pg.framesSent.every((f) => !f.includes('access_token')));
});

test('sse: the browser EventSource receives in order and resumes after a network cut with nothing lost', async (t) => {
  const h = await startHerald(t);
  const proxy = await startProxy(t, h);
  const token = await h.token({ subscribe: ['orders/*'] });
  const pg = await openPage(t, { origin: proxy.url });
  assert.equal((await pg.info()).nativeEventSource, true);

  await pg.start('c', { transport: 'sse', url: proxy.url, token, channels: ['orders/2'], backoff: fastBackoff });
  const rec = await receiveCutResume(t, pg, h, proxy, token, 'orders/2');
  for (const s of rec.states.filter((x) => x.state === 'reconnecting')) assert.ok(s.delayMs <= fastBackoff.maxMs);
  assert.deepEqual(rec.errors, []);

  // The streams were the browser's own EventSource, each with a fresh
  // single-use ticket (never the token) in the URL; the one after the cut
  // resumed from the cursor.
  const streams = pg.requests.filter((r) => r.url.includes('/v1/sse'));
  const tickets = pg.requests.filter((r) => r.url.endsWith('/v1/tickets'));
  assert.ok(streams.length >= 2, JSON.stringify(streams));
  for (const s of streams) {
    assert.equal(s.type, 'eventsource');
    assert.match(s.url, /[?&]ticket=/);
    assert.ok(!s.url.includes('access_token') && !s.url.includes(encodeURIComponent(token)));
  }
  assert.equal(new Set(streams.map((s) => new URL(s.url).searchParams.get('ticket'))).size, streams.length, 'a new ticket per stream');
  assert.ok(tickets.length >= streams.length && tickets.every((r) => r.method === 'POST' && r.type === 'fetch'));
  assert.equal(new URL(streams[0].url).searchParams.get('last_event_id'), null);
  assert.ok(new URL(streams.at(-1).url).searchParams.get('last_event_id'), 'the stream after the cut resumes from the cursor');
});

test('sse: tickets switched off: the EventSource gets the token in its URL and "fallback" says so; a proxy\'s 404 never puts it there', async (t) => {
  // A Herald with tickets switched off answers POST /v1/tickets with 404
  // tickets_disabled: the one answer after which the token goes in the URL.
  const off = await startHerald(t, ['--tickets=false']);
  const token = await off.token({ subscribe: ['orders/*'] });
  let pg = await openPage(t, { origin: off.url });
  await pg.start('c', { transport: 'sse', url: off.url, token, channels: ['orders/1'], backoff: fastBackoff });
  let rec = await pg.waitFor('c', (r) => r.ready['orders/1'], 'the subscription');
  assert.deepEqual(rec.fallbacks, [{ reason: 'tickets_disabled', credential: 'access_token' }]);
  const id = await off.publish('orders/1', { n: 1 });
  await pg.waitFor('c', (r) => r.pubs['orders/1'].some((p) => p.id === id), 'the publication');
  let streams = pg.requests.filter((r) => r.url.includes('/v1/sse'));
  assert.equal(streams.length, 1);
  assert.equal(streams[0].type, 'eventsource');
  assert.equal(new URL(streams[0].url).searchParams.get('access_token'), token);

  // A proxy in front of a Herald with tickets on, that does not route
  // POST /v1/tickets (its own 404 page): no stream, no token in a URL, a
  // failure retried with backoff until the path is routed again.
  const h = await startHerald(t);
  const proxy = await HttpProxy.start(h);
  t.after(() => proxy.close());
  proxy.notFound = (path) => path === '/v1/tickets';
  pg = await openPage(t, { origin: proxy.url });
  await pg.start('c', { transport: 'sse', url: proxy.url, token, channels: ['orders/2'], backoff: fastBackoff });
  rec = await pg.waitFor('c', (r) => r.states.filter((s) => s.state === 'reconnecting').length >= 3, 'a few refused attempts');
  assert.deepEqual(rec.fallbacks, []);
  assert.equal(rec.lastError.status, 404);
  for (const s of rec.states.filter((x) => x.state === 'reconnecting')) assert.ok(s.delayMs <= fastBackoff.maxMs, `delay ${s.delayMs} within the bound`);
  assert.deepEqual(pg.requests.filter((r) => r.url.includes('/v1/sse')), [], 'no stream while tickets are not routed');
  proxy.notFound = () => false;
  rec = await pg.waitFor('c', (r) => r.ready['orders/2'], 'the subscription once tickets are routed');
  assert.equal(rec.state, 'connected');
  streams = pg.requests.filter((r) => r.url.includes('/v1/sse'));
  assert.ok(streams.length >= 1);
  for (const s of streams) {
    assert.match(s.url, /[?&]ticket=/);
    assert.ok(!s.url.includes('access_token'));
  }
  assert.deepEqual(rec.fallbacks, []);
});

test('refused token and forbidden channel: closed for good, no reconnect loop (ws and sse)', async (t) => {
  const h = await startHerald(t);
  const good = await h.token({ subscribe: ['orders/*'] });
  const pg = await openPage(t, { origin: h.url });
  const opts = { url: h.url, backoff: fastBackoff };

  await pg.start('wsBadToken', { ...opts, transport: 'ws', token: 'not.a.jwt', channels: ['orders/1'] });
  await pg.start('sseBadToken', { ...opts, transport: 'sse', token: 'not.a.jwt', channels: ['orders/1'] });
  await pg.start('sseForbidden', { ...opts, transport: 'sse', token: good, channels: ['secret/1'] });
  await pg.start('wsForbidden', { ...opts, transport: 'ws', token: good, channels: ['secret/1'] });

  let rec = await pg.waitFor('wsBadToken', (r) => r.connect, 'ws: connect() to settle');
  assert.equal(rec.connect.error?.code, 'unauthorized', JSON.stringify(rec.connect));
  assert.equal(rec.connect.error.closeCode, 4501);
  rec = await pg.waitFor('sseBadToken', (r) => r.connect, 'sse: connect() to settle');
  assert.equal(rec.connect.error?.code, 'unauthorized', JSON.stringify(rec.connect));
  assert.equal(rec.connect.error.status, 401);
  rec = await pg.waitFor('sseForbidden', (r) => r.connect, 'sse: connect() to settle');
  assert.equal(rec.connect.error?.code, 'forbidden', JSON.stringify(rec.connect));
  assert.equal(rec.connect.error.status, 403, 'the client probed why the EventSource was refused');
  rec = await pg.waitFor('wsForbidden', (r) => r.ready['secret/1'], 'ws: the refused subscription');
  assert.equal(rec.ready['secret/1'].error?.code, 'forbidden');
  assert.equal(rec.ready['secret/1'].error.op, 'subscribe');

  // A wrong reconnect would come within fastBackoff.maxMs (400 ms).
  await sleep(1000);
  for (const name of ['wsBadToken', 'sseBadToken', 'sseForbidden']) {
    rec = await pg.record(name);
    assert.equal(rec.state, 'closed', name);
    assert.deepEqual(rec.tokenCalls, ['connect'], `${name}: one attempt only`);
    assert.deepEqual(rec.states.map((s) => s.state), ['connecting', 'closed'], name);
    assert.ok(rec.lastError && !rec.lastError.temporary, name);
  }
  assert.equal(pg.requests.filter((r) => r.url.includes('/v1/sse?') && r.type === 'eventsource').length, 1, 'one EventSource stream (sseForbidden)');
  assert.equal(pg.requests.filter((r) => r.url.endsWith('/v1/tickets')).length, 2, 'one ticket request per SSE client');

  // A refused subscription leaves the WebSocket up, and is not retried.
  rec = await pg.record('wsForbidden');
  assert.equal(rec.state, 'connected');
  assert.deepEqual(rec.tokenCalls, ['connect']);
  assert.equal(rec.subErrors.length, 1);
  const subFrames = pg.framesSent.map((f) => JSON.parse(f)).filter((f) => f.op === 'subscribe' && f.channel === 'secret/1');
  assert.equal(subFrames.length, 1, 'the forbidden subscribe was sent once');
});

test('cross-origin: a page on an origin named by --allowed-origins works over ws and sse', async (t) => {
  const site = await staticServer(t);
  const h = await startHerald(t, ['--allowed-origins', site.url]);
  const token = await h.token({ subscribe: ['orders/*'] });
  // The page imports the client from Herald itself, across origins.
  const pg = await openPage(t, { served: site.url, client: `${h.url}/client/herald.js` });
  const info = await pg.info();
  assert.equal(info.origin, site.url);
  assert.equal(info.clientUrl, `${h.url}/client/herald.js`);
  assert.notEqual(new URL(h.url).origin, info.origin);

  await pg.start('ws', { transport: 'ws', url: h.url, token, channels: ['orders/5'], backoff: fastBackoff });
  await pg.start('sse', { transport: 'sse', url: h.url, token, channels: ['orders/5'], backoff: fastBackoff });
  await pg.waitFor('ws', (r) => r.ready['orders/5'], 'ws: the subscription');
  await pg.waitFor('sse', (r) => r.ready['orders/5'], 'sse: the subscription');
  const ids = await publishAll(h, 'orders/5', 1, 2);
  for (const name of ['ws', 'sse']) {
    const rec = await pg.waitFor(name, (r) => r.pubs['orders/5'].length >= 2, `${name}: the publications`);
    checkPublications(rec.pubs['orders/5'], 'orders/5', ids);
    assert.equal(rec.state, 'connected');
    assert.deepEqual(rec.states.map((s) => s.state), ['connecting', 'connected'], `${name}: no failed attempt`);
  }
  assert.ok(pg.requests.some((r) => r.url.startsWith(`${h.url}/v1/sse?`) && r.type === 'eventsource'));
  assert.equal(await metric(h, 'herald_http_requests_total', { path: '/v1/ws', code: '101' }), 1);
  assert.equal(await metric(h, 'herald_http_requests_total', { path: '/v1/tickets', code: '204' }), 1, 'the ticket preflight was answered');
});

test('cross-origin: a page on an origin not allowed is refused (ws handshake, sse ticket and stream)', async (t) => {
  const site = await staticServer(t);
  const h = await startHerald(t, ['--allowed-origins', 'http://app.example.com']);
  const token = await h.token({ subscribe: ['orders/*'] });
  const pg = await openPage(t, { served: site.url });

  await pg.start('ws', { transport: 'ws', url: h.url, token, channels: ['orders/6'], backoff: fastBackoff });
  await pg.start('sse', { transport: 'sse', url: h.url, token, channels: ['orders/6'], backoff: fastBackoff });
  // A browser hides why: both look like network failures and are retried
  // with backoff, but never connect.
  for (const name of ['ws', 'sse']) {
    await pg.waitFor(name, (r) => r.states.filter((s) => s.state === 'reconnecting').length >= 2, `${name}: refused attempts`);
  }
  await h.publish('orders/6', { n: 1 });
  await sleep(500);
  for (const name of ['ws', 'sse']) {
    const rec = await pg.record(name);
    assert.ok(!rec.states.some((s) => s.state === 'connected'), `${name} never connected: ${JSON.stringify(rec.states)}`);
    assert.deepEqual(rec.pubs['orders/6'], []);
    assert.equal(rec.ready['orders/6'], undefined);
    for (const s of rec.states.filter((x) => x.state === 'reconnecting')) {
      assert.equal(s.reason, 'network');
      assert.ok(s.delayMs <= fastBackoff.maxMs);
    }
    pg.close(name);
  }
  // Herald refused the WebSocket handshakes (403) and the ticket preflights
  // (403), so no stream was opened and no ticket issued.
  assert.ok((await metric(h, 'herald_http_requests_total', { path: '/v1/ws', code: '403' })) >= 2);
  assert.equal(await metric(h, 'herald_http_requests_total', { path: '/v1/ws', code: '101' }), 0);
  assert.ok((await metric(h, 'herald_http_requests_total', { path: '/v1/tickets', code: '403' })) >= 2);
  assert.equal(await metric(h, 'herald_http_requests_total', { path: '/v1/tickets', code: '200' }), 0);
  assert.equal(await metric(h, 'herald_http_requests_total', { path: '/v1/sse', code: '200' }), 0);

  // An EventSource the page opens itself, with a valid ticket: Herald
  // serves the stream without CORS headers, so the browser keeps it from
  // the page.
  const ticket = await (await fetch(`${h.url}/v1/tickets`, { method: 'POST', headers: { Authorization: `Bearer ${token}` } })).json();
  const streamUrl = `${h.url}/v1/sse?channel=orders%2F6&ticket=${encodeURIComponent(ticket.ticket)}`;
  const seen = await pg.page.evaluate(
    (u) =>
      new Promise((resolve) => {
        const es = new EventSource(u);
        const got = [];
        es.onopen = () => got.push('open');
        es.onmessage = (e) => got.push(`message ${e.data}`);
        es.addEventListener('subscribed', () => got.push('subscribed'));
        es.onerror = () => {
          got.push(`error readyState=${es.readyState}`);
          es.close();
          resolve(got);
        };
        setTimeout(() => {
          es.close();
          resolve(got);
        }, 3000);
      }),
    streamUrl,
  );
  assert.deepEqual(seen, ['error readyState=2'], 'the stream never reached the page');
  assert.equal(await metric(h, 'herald_http_requests_total', { path: '/v1/sse', code: '200' }), 1, 'Herald did serve it');
});
