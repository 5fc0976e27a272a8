// The SSE transport against a real `herald serve`: what only it does
// (FetchEventSource with the Authorization header, Node's default; the
// browser path, an EventSource class: ticket, else access_token in the
// URL; refusals read with or without the status). The behaviours both
// transports share are testutil/scenarios.js (behaviours.test.js).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { HeraldClient, FetchEventSource } from '../herald.js';
import { Herald, HttpProxy, fastBackoff, recorder, stateLog, waitUntil } from '../testutil/helpers.js';

let herald;
const clients = [];

before(async () => {
  herald = await Herald.start();
});

after(async () => {
  for (const c of clients) c.close();
  await herald?.destroy();
});

function client(opts) {
  const c = new HeraldClient({ transport: 'sse', backoff: fastBackoff, ...opts });
  clients.push(c);
  return c;
}

// A browser-like EventSource: the constructor takes only the URL, and a
// refused request's error event tells nothing (no status), as in browsers.
class BrowserEventSource extends FetchEventSource {
  constructor(url) {
    super(url);
  }

  _fail(extra) {
    super._fail(extra.error ? { error: extra.error } : {});
  }
}

// spyFetch is the real fetch, recording each request's method and URL.
function spyFetch() {
  const calls = [];
  const f = (url, init = {}) => {
    calls.push({ method: init.method || 'GET', url: String(url), auth: init.headers?.Authorization });
    return fetch(url, init);
  };
  f.calls = calls;
  return f;
}

test('sse: receives publications; adding a channel reopens the stream without loss or repeat', async () => {
  const token = await herald.token({ subscribe: ['orders/*'] });
  const f = spyFetch();
  const c = client({ url: herald.url, getToken: async () => token, fetch: f });
  const a = recorder();
  const sa = c.subscribe('orders/10', a.handlers);
  assert.equal((await sa.ready).recovered, false);
  const p1 = await herald.publish('orders/10', { n: 1 });
  await waitUntil(() => a.pubs.length === 1, 'first publication');

  const b = recorder();
  const sb = c.subscribe('orders/11', b.handlers);
  await sb.ready;
  const p2 = await herald.publish('orders/10', { n: 2 });
  const p3 = await herald.publish('orders/11', { n: 1 });
  await waitUntil(() => a.pubs.length === 2 && b.pubs.length === 1, 'publications on both channels');
  assert.deepEqual(a.pubs.map((p) => p.id), [p1, p2]);
  assert.deepEqual(a.pubs.map((p) => p.offset), [1, 2]);
  assert.deepEqual(b.pubs.map((p) => p.id), [p3]);
  assert.deepEqual(a.gaps, []);
  assert.equal(a.recovered.length, 1, 'orders/10 resumed over the reopened stream');
  assert.deepEqual(a.pubs[0].data, { n: 1 });
  assert.deepEqual(a.pubs[0].freshness, { mode: 'immediate' });

  // Node's default: the token goes in the Authorization header, never the URL.
  const streams = f.calls.filter((x) => x.url.includes('/v1/sse'));
  assert.equal(streams.length, 2);
  for (const s of streams) {
    assert.equal(s.auth, `Bearer ${token}`);
    assert.ok(!s.url.includes('access_token') && !s.url.includes('ticket='));
  }
  assert.ok(streams[1].url.includes('channel=orders%2F10') && streams[1].url.includes('channel=orders%2F11'));

  sa.unsubscribe();
  const p4 = await herald.publish('orders/11', { n: 2 });
  await waitUntil(() => b.pubs.length === 2, 'orders/11 after unsubscribing orders/10');
  assert.equal(b.pubs[1].id, p4);

  // A subscription token (sub_token) opens a channel no grant covers.
  const d = recorder();
  const subTok = await herald.token({ channel: 'docs/9' });
  await c.subscribe('docs/9', { ...d.handlers, token: subTok }).ready;
  const doc = await herald.publish('docs/9', { rev: 1 });
  await waitUntil(() => d.pubs.some((p) => p.id === doc), 'publication on the subscription-token channel');
  assert.ok(f.calls.at(-1).url.includes('sub_token='));
  c.close();
});

// recordingEventSource returns a BrowserEventSource class that records
// the URL of every stream it opens in urls.
function recordingEventSource(urls) {
  return class extends BrowserEventSource {
    constructor(url) {
      urls.push(url);
      super(url);
    }
  };
}

test('sse: an EventSource gets a single-use ticket, never the token, in its URL', async () => {
  const token = await herald.token({ subscribe: ['orders/*'] });
  const f = spyFetch();
  const urls = [];
  const c = client({ url: herald.url, getToken: async () => token, fetch: f, EventSource: recordingEventSource(urls) });
  const fallbacks = [];
  c.on('fallback', (e) => fallbacks.push(e));
  const r = recorder();
  await c.subscribe('orders/12', r.handlers).ready;
  const id = await herald.publish('orders/12', { n: 1 });
  await waitUntil(() => r.pubs.some((p) => p.id === id), 'publication');

  const tickets = f.calls.filter((x) => x.url.endsWith('/v1/tickets'));
  assert.equal(tickets.length, 1);
  assert.equal(tickets[0].method, 'POST');
  assert.equal(tickets[0].auth, `Bearer ${token}`);
  // The stream was opened by the EventSource, with the ticket.
  assert.equal(urls.length, 1);
  assert.match(urls[0], /[?&]ticket=/);
  assert.ok(!urls[0].includes('access_token') && !urls[0].includes(token));
  assert.deepEqual(fallbacks, []);
  c.close();
});

test('sse: tickets switched off (404 tickets_disabled): the token goes in the URL, once the "fallback" event said so', async (t) => {
  const h = await Herald.start({ args: ['--tickets=false'] });
  t.after(() => h.destroy());
  const token = await h.token({ subscribe: ['orders/*'] });
  const f = spyFetch();
  const urls = [];
  const c = client({ url: h.url, getToken: async () => token, fetch: f, EventSource: recordingEventSource(urls) });
  const fallbacks = [];
  c.on('fallback', (e) => fallbacks.push({ ...e, streams: urls.length }));
  const r = recorder();
  await c.subscribe('orders/1', r.handlers).ready;
  assert.deepEqual(fallbacks, [{ reason: 'tickets_disabled', credential: 'access_token', streams: 0 }], 'told before the first stream opened');
  assert.equal(urls.length, 1);
  assert.equal(new URL(urls[0]).searchParams.get('access_token'), token);
  const id = await h.publish('orders/1', { n: 1 });
  await waitUntil(() => r.pubs.some((p) => p.id === id), 'publication');

  // A new stream (another channel) asks for no ticket again and tells nothing new.
  await c.subscribe('orders/2', recorder().handlers).ready;
  assert.equal(urls.length, 2);
  assert.equal(new URL(urls[1]).searchParams.get('access_token'), token);
  assert.equal(f.calls.filter((x) => x.url.endsWith('/v1/tickets')).length, 1);
  assert.equal(fallbacks.length, 1);
  c.close();
});

test('sse: a 404 from a proxy that does not route POST /v1/tickets is a failure: backoff, never the token in the URL', async (t) => {
  const proxy = await HttpProxy.start(herald);
  t.after(() => proxy.close());
  proxy.notFound = (path) => path === '/v1/tickets';
  const token = await herald.token({ subscribe: ['orders/*'] });
  const urls = [];
  const states = stateLog();
  const c = client({ url: proxy.url, getToken: async () => token, EventSource: recordingEventSource(urls), onStateChange: states.onStateChange });
  const fallbacks = [];
  c.on('fallback', (e) => fallbacks.push(e));
  const r = recorder();
  const sub = c.subscribe('orders/17', r.handlers);
  await waitUntil(() => states.filter((s) => s.state === 'reconnecting').length >= 3 || urls.length > 0, 'a few refused attempts, or a stream');
  assert.deepEqual(urls, [], 'no stream opened: the token never went in a URL');
  const waits = states.filter((s) => s.state === 'reconnecting');
  for (const s of waits) {
    assert.equal(s.reason, 'server_error');
    assert.equal(s.error.status, 404);
    assert.match(s.error.message, /POST \/v1\/tickets/);
    assert.ok(s.delayMs <= fastBackoff.maxMs, `delay ${s.delayMs} within the bound`);
  }
  assert.deepEqual(fallbacks, []);
  // The proxy routes the path again: a ticket, and the stream.
  proxy.notFound = () => false;
  await sub.ready;
  assert.equal(c.state, 'connected');
  assert.ok(urls.length >= 1 && urls.every((u) => /[?&]ticket=/.test(u) && !u.includes('access_token')), JSON.stringify(urls));
  assert.deepEqual(fallbacks, []);
  c.close();
});

test('sse: a refused stream (forbidden channel) closes for good, with or without the status', async () => {
  const token = await herald.token({ subscribe: ['orders/*'] });
  for (const EventSource of [undefined, BrowserEventSource]) {
    let calls = 0;
    const c = client({
      url: herald.url,
      EventSource,
      getToken: async () => {
        calls++;
        return token;
      },
    });
    const r = recorder();
    const connected = c.connect();
    c.subscribe('secret/1', r.handlers);
    await assert.rejects(connected, (e) => {
      assert.equal(e.code, 'forbidden');
      assert.equal(e.status, 403);
      return true;
    });
    assert.equal(c.state, 'closed');
    await new Promise((res) => setTimeout(res, 500)); // a wrong reconnect would happen within 400 ms
    assert.equal(calls, 1, `one attempt (${EventSource ? 'EventSource + probe' : 'FetchEventSource'})`);
  }
});

test('sse: an idle timeout past 2^31−1 ms (setTimeout\'s limit) does not end the stream at once', async () => {
  const token = await herald.token({ subscribe: ['orders/*'] });
  const states = stateLog();
  const c = client({ url: herald.url, getToken: async () => token, sseIdleTimeoutMs: 2 ** 31, onStateChange: states.onStateChange });
  const r = recorder();
  await c.subscribe('orders/16', r.handlers).ready;
  for (let n = 1; n <= 3; n++) {
    const id = await herald.publish('orders/16', { n });
    await waitUntil(() => r.pubs.some((p) => p.id === id), `publication ${n}`);
  }
  assert.deepEqual(states.map((s) => s.state), ['connecting', 'connected']);
  c.close();
});
