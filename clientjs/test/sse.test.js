// The SSE transport against a real `herald serve`: what only it does
// (FetchEventSource with the Authorization header, Node's default; the
// browser path, an EventSource class: ticket, else access_token in the
// URL; refusals read with or without the status). The behaviours both
// transports share are testutil/scenarios.js (behaviours.test.js).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { HeraldClient, FetchEventSource } from '../herald.js';
import { Herald, fastBackoff, recorder, stateLog, waitUntil } from '../testutil/helpers.js';

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

test('sse: an EventSource gets a ticket, or access_token when tickets answer 404', async () => {
  const token = await herald.token({ subscribe: ['orders/*'] });
  const f = spyFetch();
  const c = client({ url: herald.url, getToken: async () => token, fetch: f, EventSource: BrowserEventSource });
  const r = recorder();
  await c.subscribe('orders/12', r.handlers).ready;
  const id = await herald.publish('orders/12', { n: 1 });
  await waitUntil(() => r.pubs.some((p) => p.id === id), 'publication');

  const tickets = f.calls.filter((x) => x.url.endsWith('/v1/tickets'));
  assert.equal(tickets.length, 1);
  assert.equal(tickets[0].method, 'POST');
  assert.equal(tickets[0].auth, `Bearer ${token}`);
  const res = await fetch(`${herald.url}/v1/tickets`, { method: 'POST', headers: { Authorization: `Bearer ${token}` } });
  await res.body?.cancel();
  const ticketsServed = res.status !== 404;
  // The stream itself was opened by the EventSource, not through f: check
  // the client's choice by opening a second client and watching its URL.
  const urls = [];
  class Recording extends BrowserEventSource {
    constructor(url) {
      urls.push(url);
      super(url);
    }
  }
  const c2 = client({ url: herald.url, getToken: async () => token, EventSource: Recording });
  await c2.subscribe('orders/12', recorder().handlers).ready;
  assert.equal(urls.length, 1);
  if (ticketsServed) {
    assert.match(urls[0], /[?&]ticket=/);
    assert.ok(!urls[0].includes('access_token'));
  } else {
    assert.ok(urls[0].includes(`access_token=${encodeURIComponent(token)}`) || urls[0].includes(`access_token=${token}`));
  }
  c.close();
  c2.close();
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
