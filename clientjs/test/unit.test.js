// Unit tests: backoff bounds (fake clock), latestWins under shuffled and
// duplicated input, ChannelState de-duplication and gaps, close-code
// classification, and the SSE parser of FetchEventSource against a real
// local HTTP server that splits its output at awkward places.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import {
  Backoff,
  ChannelState,
  FetchEventSource,
  HeraldClient,
  HeraldError,
  closeAction,
  latestWins,
  reasonAction,
} from '../herald.js';
import { waitUntil } from '../testutil/helpers.js';

// A small seeded PRNG, so shuffles are reproducible.
function prng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function shuffle(a, rnd) {
  const out = a.slice();
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

test('Backoff: exponential, capped at maxMs, full jitter within [0, cap], reset', () => {
  const top = new Backoff({ initialMs: 500, maxMs: 30000, factor: 2, jitter: 'full', random: () => 1 });
  const caps = Array.from({ length: 10 }, () => top.next());
  assert.deepEqual(caps, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000]);
  top.reset();
  assert.equal(top.next(), 500);

  const rnd = prng(7);
  const b = new Backoff({ initialMs: 500, maxMs: 30000, random: rnd });
  const seen = [];
  for (let i = 0; i < 200; i++) {
    const cap = Math.min(30000, 500 * 2 ** Math.min(i, 20));
    const d = b.next();
    assert.ok(d >= 0 && d <= cap, `delay ${i} = ${d} outside [0, ${cap}]`);
    seen.push(d);
  }
  // Full jitter spreads delays: not all at the cap.
  assert.ok(seen.slice(10).some((d) => d < 15000));

  const half = new Backoff({ initialMs: 100, maxMs: 1000, jitter: 'half', random: () => 0 });
  assert.deepEqual([half.next(), half.next(), half.next(), half.next(), half.next()], [50, 100, 200, 400, 500]);
  const none = new Backoff({ initialMs: 100, maxMs: 250, factor: 3, jitter: 'none' });
  assert.deepEqual([none.next(), none.next(), none.next()], [100, 250, 250]);

  assert.throws(() => new Backoff({ initialMs: 0 }), (e) => e instanceof HeraldError && e.code === 'invalid_argument');
  assert.throws(() => new Backoff({ initialMs: 500, maxMs: 100 }), /maxMs/);
  assert.throws(() => new Backoff({ jitter: 'some' }), /jitter/);
});

test('HeraldClient reconnects with bounded backoff (fake clock, refused port)', async () => {
  // A port that refuses connections: listen, note it, close.
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const port = srv.address().port;
  await new Promise((r) => srv.close(r));

  const timers = [];
  const clock = {
    setTimeout: (fn, ms) => {
      const t = { fn, ms, cleared: false };
      timers.push(t);
      return t;
    },
    clearTimeout: (t) => {
      if (t) t.cleared = true;
    },
    now: () => Date.now(),
  };
  const states = [];
  let tokens = 0;
  const client = new HeraldClient({
    url: `http://127.0.0.1:${port}`,
    transport: 'ws',
    getToken: async () => {
      tokens++;
      return 'not-checked-the-server-is-down';
    },
    backoff: { initialMs: 500, maxMs: 30000, factor: 2, jitter: 'full', random: () => 0.999 },
    clock,
    requestTimeoutMs: 999_999, // the connect timers, told apart from the reconnect timers
    onStateChange: (s) => states.push(s),
  });
  client.connect().catch(() => {});
  const delays = [];
  const reconnectTimer = (t) => !t.cleared && !t.fired && t.ms !== 999_999;
  for (let i = 0; i < 12; i++) {
    await waitUntil(() => timers.some(reconnectTimer), `reconnect timer ${i}`);
    const t = timers.find(reconnectTimer);
    t.fired = true;
    delays.push(t.ms);
    t.fn();
  }
  client.close();
  assert.equal(tokens, 13, 'one token per attempt');
  const expected = [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000, 30000, 30000].map((c) => Math.round(c * 0.999));
  assert.deepEqual(delays, expected);
  const waits = states.filter((s) => s.state === 'reconnecting');
  assert.equal(waits.length, 12);
  for (const w of waits) {
    assert.equal(w.reason, 'network');
    assert.ok(w.delayMs <= 30000);
  }
  assert.equal(client.state, 'closed');
});

test('latestWins keeps the highest version per key under shuffled, duplicated input', () => {
  const keys = 40;
  const versions = 12;
  const updates = [];
  for (let k = 0; k < keys; k++) {
    for (let v = 1; v <= versions; v++) updates.push({ id: `order-${k}`, version: v, status: `s${v}` });
  }
  for (let seed = 1; seed <= 25; seed++) {
    const rnd = prng(seed);
    // Every update once, a third of them again (duplicates), all shuffled.
    const input = shuffle(updates.concat(updates.filter(() => rnd() < 0.33)), rnd);
    const orders = latestWins((u) => u.id, (u) => u.version);
    const state = new Map();
    let accepted = 0;
    for (const u of input) {
      if (orders(u)) {
        accepted++;
        const cur = state.get(u.id);
        assert.ok(!cur || cur.version < u.version, 'an accepted update is never older than the applied one');
        state.set(u.id, u);
      }
    }
    assert.equal(orders.size, keys);
    assert.ok(accepted >= keys && accepted <= updates.length);
    for (let k = 0; k < keys; k++) {
      assert.equal(state.get(`order-${k}`).version, versions, `seed ${seed}: order-${k} converged`);
      assert.equal(orders.get(`order-${k}`).status, `s${versions}`);
      assert.equal(orders.version(`order-${k}`), versions);
    }
    // Replaying everything again changes nothing.
    assert.equal(input.filter((u) => orders(u)).length, 0);
  }

  // String versions that sort (RFC 3339 UTC times), and refused versions.
  const byTime = latestWins((p) => p.key, (p) => p.time);
  assert.equal(byTime({ key: 'a', time: '2025-03-01T10:15:30.5Z' }), true);
  assert.equal(byTime({ key: 'a', time: '2025-03-01T10:15:30.1Z' }), false);
  assert.equal(byTime({ key: 'a', time: '2025-03-01T10:15:31.0Z' }), true);
  assert.equal(byTime({ key: 'b', time: undefined }), false);
  assert.equal(byTime.has('b'), false);
  byTime.delete('a');
  assert.equal(byTime({ key: 'a', time: '2000-01-01T00:00:00Z' }), true);
  byTime.clear();
  assert.equal(byTime.size, 0);
  assert.throws(() => latestWins('id'), (e) => e.code === 'invalid_argument');
});

test('ChannelState drops replays and duplicates, reports gaps', () => {
  const s = new ChannelState(3);
  assert.equal(s.position, null);
  // A first subscription is no gap.
  assert.equal(s.subscribed({ recovered: false, offset: 4, epoch: 'e1' }), null);
  assert.deepEqual(s.position, { offset: 4, epoch: 'e1' });
  const pub = (id, offset, epoch = 'e1') => ({ id, channel: 'c', offset, epoch });
  assert.deepEqual(s.accept(pub('a', 5)), { deliver: true, gap: null });
  assert.deepEqual(s.accept(pub('a', 5)), { deliver: false, gap: null }, 'same offset: replay');
  assert.deepEqual(s.accept(pub('x', 3)), { deliver: false, gap: null }, 'older offset: replay');
  assert.deepEqual(s.accept(pub('a', 6)), { deliver: false, gap: null }, 'same id, new offset: duplicate');
  assert.deepEqual(s.position, { offset: 6, epoch: 'e1' }, 'a duplicate still advances the position');
  assert.deepEqual(s.accept(pub('b', 7)), { deliver: true, gap: null });
  assert.deepEqual(s.accept(pub('c', 9)), { deliver: true, gap: 'offset_gap' });
  // The id LRU is bounded (3): "a" was pushed out by b, c, d.
  assert.deepEqual(s.accept(pub('d', 10)), { deliver: true, gap: null });
  assert.deepEqual(s.accept(pub('a', 11)), { deliver: true, gap: null });
  // Resume results.
  assert.equal(s.subscribed({ recovered: true, offset: 15, epoch: 'e1' }), null);
  assert.deepEqual(s.position, { offset: 11, epoch: 'e1' }, 'recovered: the replay moves the position');
  assert.equal(s.subscribed({ recovered: false, offset: 30, epoch: 'e1' }), 'not_recovered');
  assert.equal(s.subscribed({ recovered: false, offset: 0, epoch: 'e2' }), 'epoch_changed');
  assert.deepEqual(s.position, { offset: 0, epoch: 'e2' });
  assert.deepEqual(s.accept(pub('z', 1, 'e3')), { deliver: true, gap: 'epoch_changed' });
  // A saved position counts as one.
  const saved = new ChannelState(10, { offset: 8, epoch: 'e9' });
  assert.equal(saved.subscribed({ recovered: false, offset: 2, epoch: 'e10' }), 'epoch_changed');
});

test('close codes and reasons map to reconnect, reauth or stop', () => {
  for (const c of [1000, 1001, 1006, 1011, 4000, 4001, 4002, 4003, 4004, 4005, 4006, 4007, 4099, 3000]) assert.equal(closeAction(c), 'reconnect', String(c));
  for (const c of [4100, 4150, 4199]) assert.equal(closeAction(c), 'reauth', String(c));
  for (const c of [4500, 4501, 4502, 4503, 4504, 4599]) assert.equal(closeAction(c), 'stop', String(c));
  for (const r of ['shutdown', 'slow', 'server_error', 'insufficient_state', 'write_timeout', 'timeout', 'too_many_connections', 'too_many_requests', 'new_reason']) {
    assert.equal(reasonAction(r, true), 'reconnect', r);
  }
  assert.equal(reasonAction('new_reason', false), 'stop');
  assert.equal(reasonAction('token_expired', true), 'reauth');
  for (const r of ['bad_request', 'unauthorized', 'forbidden', 'message_too_big', 'protocol_error']) assert.equal(reasonAction(r), 'stop', r);
});

test('FetchEventSource parses event streams split anywhere, reports refusals and silence', async () => {
  const body =
    'retry: 2000\r\n\r\n: comment\n' +
    'event: subscribed\nid: c1\ndata: {"channel":"a","recovered":false}\n\n' +
    'id: c2\r\ndata: line one\r\ndata:line two\r\n\r\n' +
    'data: no id keeps the last\r\r' +
    'event: custom\ndata\n\n' +
    'id\ndata: empty id\n\n';
  const server = http.createServer(async (req, res) => {
    if (req.url === '/silent') {
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      res.flushHeaders();
      return; // and never a byte more
    }
    if (req.url === '/refuse') {
      res.writeHead(403, { 'Content-Type': 'application/json', 'Retry-After': '3' });
      res.end('{"error":{"code":"forbidden","message":"no grant for channel \\"x\\""}}');
      return;
    }
    assert.equal(req.headers.authorization, 'Bearer t0k');
    res.writeHead(200, { 'Content-Type': 'text/event-stream' });
    // One byte at a time: CR and LF of a CRLF land in different chunks.
    for (const ch of Buffer.from(body)) {
      res.write(Buffer.from([ch]));
      await new Promise((r) => setImmediate(r));
    }
    res.end();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${server.address().port}`;
  try {
    const got = [];
    const es = new FetchEventSource(`${base}/stream`, { headers: { Authorization: 'Bearer t0k' } });
    let opened = false;
    es.onopen = () => (opened = true);
    es.onmessage = (ev) => got.push(['message', ev.data, ev.lastEventId]);
    es.addEventListener('subscribed', (ev) => got.push(['subscribed', ev.data, ev.lastEventId]));
    es.addEventListener('custom', (ev) => got.push(['custom', ev.data, ev.lastEventId]));
    const ended = new Promise((r) => (es.onerror = r));
    const err = await ended;
    assert.ok(opened);
    assert.equal(err.status, undefined, 'an ended stream is no refusal');
    assert.equal(es.readyState, FetchEventSource.CLOSED);
    assert.deepEqual(got, [
      ['subscribed', '{"channel":"a","recovered":false}', 'c1'],
      ['message', 'line one\nline two', 'c2'],
      ['message', 'no id keeps the last', 'c2'],
      ['custom', '', 'c2'],
      ['message', 'empty id', ''],
    ]);

    const refused = new FetchEventSource(`${base}/refuse`);
    const ev = await new Promise((r) => refused.addEventListener('error', r));
    assert.equal(ev.status, 403);
    assert.equal(ev.code, 'forbidden');
    assert.match(ev.message, /no grant/);
    assert.equal(ev.retryAfterMs, 3000);

    // A stream that goes silent (no event, no heartbeat) is given up.
    const silent = new FetchEventSource(`${base}/silent`, { idleTimeoutMs: 150 });
    const t0 = Date.now();
    let silentOpened = false;
    silent.onopen = () => (silentOpened = true);
    const idle = await new Promise((r) => (silent.onerror = r));
    assert.ok(silentOpened);
    assert.equal(idle.error.code, 'timeout');
    assert.ok(Date.now() - t0 >= 140);
    assert.equal(silent.readyState, FetchEventSource.CLOSED);
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
});
