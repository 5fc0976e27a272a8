// The WebSocket transport (herald.v1) against a real `herald serve`.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { HeraldClient, HeraldError } from '../herald.js';
import { Herald, TcpProxy, fastBackoff, mintToken, recorder, republish, stateLog, waitUntil } from '../testutil/helpers.js';

let herald;
let proxy;
const clients = [];

before(async () => {
  herald = await Herald.start();
  proxy = await TcpProxy.start(herald.port);
});

after(async () => {
  for (const c of clients) c.close();
  await proxy?.close();
  await herald?.destroy();
});

function client(opts) {
  const c = new HeraldClient({ transport: 'ws', backoff: fastBackoff, ...opts });
  clients.push(c);
  return c;
}

test('ws: receives publications in offset order, drops a duplicate message id', async () => {
  const token = await herald.token({ subscribe: ['orders/*'] });
  const c = client({ url: herald.url, getToken: async () => token });
  const r = recorder();
  const sub = c.subscribe('orders/1', r.handlers);
  const first = await sub.ready;
  assert.equal(first.recovered, false);
  assert.equal(c.state, 'connected');

  const dup = randomUUID();
  await herald.publish('orders/1', { status: 'paid' }, { id: dup });
  await waitUntil(() => r.pubs.length === 1, 'the first publication');
  await republish(herald, 'orders/1', { status: 'paid' }, dup); // the same record again: new offset, same id
  const last = await herald.publish('orders/1', { status: 'shipped' });
  await waitUntil(() => r.pubs.some((p) => p.id === last), 'the last publication');

  assert.deepEqual(r.pubs.map((p) => p.id), [dup, last]);
  assert.deepEqual(r.pubs.map((p) => p.offset), [1, 3]);
  const p = r.pubs[0];
  assert.equal(p.channel, 'orders/1');
  assert.equal(p.type, 'order.updated');
  assert.equal(p.schema_version, 1);
  assert.deepEqual(p.data, { status: 'paid' });
  assert.deepEqual(p.freshness, { mode: 'immediate' });
  assert.equal(p.push, undefined);
  assert.deepEqual(r.gaps, [], 'the duplicate advanced the position: no false gap');
  assert.deepEqual(c.positions()['orders/1'], { offset: 3, epoch: p.epoch });
  c.close();
  assert.equal(c.state, 'closed');
});

test('ws: publish on a granted channel, typed errors on refused publish and subscribe', async () => {
  const token = await herald.token({ subscribe: ['rooms/*'], publish: ['rooms/*'] });
  const c = client({ url: herald.url, getToken: async () => token });
  const r = recorder();
  await c.subscribe('rooms/lobby', r.handlers).ready;

  const res = await c.publish('rooms/lobby', 'chat.message', { text: 'hi' });
  assert.equal(typeof res.id, 'string');
  assert.ok(res.offset >= 1);
  await waitUntil(() => r.pubs.some((p) => p.id === res.id), 'our own publication');
  assert.deepEqual(r.pubs.find((p) => p.id === res.id).data, { text: 'hi' });

  await assert.rejects(c.publish('orders/1', 'chat.message', { text: 'no' }), (e) => {
    assert.ok(e instanceof HeraldError);
    assert.equal(e.code, 'forbidden');
    assert.equal(e.temporary, false);
    assert.equal(e.op, 'publish');
    return true;
  });
  await assert.rejects(c.publish('rooms/lobby', 'Bad Type!', 1), (e) => e.code === 'bad_request');

  const denied = recorder();
  const sub = c.subscribe('secret/1', denied.handlers);
  await assert.rejects(sub.ready, (e) => e.code === 'forbidden' && e.op === 'subscribe');
  assert.equal(sub.closed, true);
  assert.equal(denied.errors.length, 1);
  assert.equal(c.state, 'connected', 'a refused subscription leaves the connection up');

  // A subscription token opens a channel no grant covers.
  const viaToken = recorder();
  const subTok = await herald.token({ channel: 'docs/9' });
  await c.subscribe('docs/9', { ...viaToken.handlers, token: async () => subTok }).ready;
  const doc = await herald.publish('docs/9', { rev: 1 });
  await waitUntil(() => viaToken.pubs.some((p) => p.id === doc), 'publication on the subscription-token channel');

  // Unsubscribe, then subscribe again: publications stop, then resume live.
  const s2 = c.subscribe('rooms/other', recorder().handlers);
  await s2.ready;
  s2.unsubscribe();
  const again = recorder();
  await c.subscribe('rooms/other', again.handlers).ready;
  const res2 = await c.publish('rooms/other', 'chat.message', { text: 'again' });
  await waitUntil(() => again.pubs.some((p) => p.id === res2.id), 'publication after resubscribe');
  c.close();
});

test('ws: resumes after the network drops, recovered with nothing lost', async () => {
  const token = await herald.token({ subscribe: ['orders/*'] });
  const states = stateLog();
  const c = client({ url: proxy.url, getToken: async () => token, onStateChange: states.onStateChange });
  const r = recorder();
  await c.subscribe('orders/2', r.handlers).ready;
  const a = await herald.publish('orders/2', { n: 1 });
  await waitUntil(() => r.pubs.length === 1, 'first publication');

  // A second client, straight to the server, sees what is published while
  // the first is cut off.
  const watcher = client({ url: herald.url, getToken: async () => token });
  const w = recorder();
  await watcher.subscribe('orders/2', w.handlers).ready;

  proxy.hold(true);
  proxy.cut();
  await waitUntil(() => c.state === 'reconnecting', 'the client to notice the drop');
  const b = await herald.publish('orders/2', { n: 2 });
  const d = await herald.publish('orders/2', { n: 3 });
  await waitUntil(() => w.pubs.length === 2, 'publications during the gap');
  proxy.hold(false);

  await waitUntil(() => r.pubs.length === 3, 'the missed publications');
  assert.deepEqual(r.pubs.map((p) => p.id), [a, b, d]);
  assert.deepEqual(r.pubs.map((p) => p.offset), [1, 2, 3]);
  assert.deepEqual(r.gaps, []);
  assert.equal(r.recovered.length, 1);
  assert.equal(r.recovered[0].channel, 'orders/2');
  const waits = states.filter((s) => s.state === 'reconnecting');
  assert.ok(waits.length >= 1);
  for (const s of waits) assert.ok(s.delayMs <= fastBackoff.maxMs, `delay ${s.delayMs} within the bound`);
  c.close();
  watcher.close();
});

test('ws: the token is refreshed on the server\'s clock (the connect reply\'s expires_in), however wrong the device\'s clock is', async () => {
  // A device clock an hour fast would take every token for long expired,
  // one an hour slow would wait 50 minutes: each refreshes at refreshRatio
  // of the token's life as the server counts it, well before the server's
  // own refresh push (refresh-ahead, 1 s before exp). The refresh reply's
  // expires_at is read against the server's clock too.
  const run = async (skewMs) => {
    const calls = [];
    let expires = 0; // the current token's exp, by this machine's clock
    const states = stateLog();
    const c = client({
      url: herald.url,
      refreshRatio: 0.2,
      onStateChange: states.onStateChange,
      clock: { setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (h) => clearTimeout(h), now: () => Date.now() + skewMs },
      getToken: async ({ reason }) => {
        calls.push({ reason, leftMs: expires - Date.now() });
        const ttl = 10 + calls.length; // a new exp, so never the same token twice
        expires = Date.now() + ttl * 1000;
        return herald.token({ subscribe: ['orders/*'], ttl: `${ttl}s` });
      },
    });
    await c.subscribe('orders/20').ready;
    assert.ok(Math.abs(c.server.clockOffsetMs + skewMs) < 5000, `the clock offset ${c.server.clockOffsetMs} ms mirrors the skew ${skewMs} ms`);
    await waitUntil(() => calls.length === 3, 'two in-band refreshes', 60_000);
    assert.deepEqual(calls.map((x) => x.reason), ['connect', 'refresh', 'refresh']);
    for (const x of calls.slice(1)) assert.ok(x.leftMs > 4000, `refreshed with ${x.leftMs} ms left: the server's push, not the client's schedule`);
    assert.deepEqual(states.filter((s) => s.state === 'reconnecting'), [], 'no reconnect');
    c.close();
  };
  await Promise.all([run(3_600_000), run(-3_600_000)]);
});

test('ws: an expired token is replaced and the connection resumes; refresh keeps it up', async () => {
  // An app that cannot refresh in time: asked for a token to refresh with,
  // it has only the current one, so the server closes the connection with
  // token_expired (4100) at expiry; the client then asks for a fresh token
  // ({reason: "token_expired"}) and reconnects at once, resuming.
  const reasons = [];
  const states = stateLog();
  let current = null;
  const c = client({
    url: herald.url,
    refreshRatio: 0,
    onStateChange: states.onStateChange,
    getToken: async ({ reason }) => {
      reasons.push(reason);
      if (reason === 'refresh') return current;
      current = await herald.token({ subscribe: ['orders/*'], ttl: reason === 'connect' ? '2s' : '1h' });
      return current;
    },
  });
  const r = recorder();
  await c.subscribe('orders/3', r.handlers).ready;

  // An app that refreshes: in-band at half the lifetime (or when the
  // server asks), no reconnect.
  const refreshReasons = [];
  const rs = stateLog();
  const c2 = client({
    url: herald.url,
    refreshRatio: 0.5,
    onStateChange: rs.onStateChange,
    getToken: async ({ reason }) => {
      refreshReasons.push(reason);
      return herald.token({ subscribe: ['orders/*'], ttl: refreshReasons.length === 1 ? '3s' : '1h' });
    },
  });
  const r2 = recorder();
  await c2.subscribe('orders/3', r2.handlers).ready;
  const started = Date.now();

  await waitUntil(() => reasons.includes('token_expired') && c.state === 'connected' && r.recovered.length === 1, 'reconnect with a fresh token', 20_000);
  const expired = states.find((s) => s.state === 'reconnecting');
  assert.equal(expired.closeCode, 4100);
  assert.equal(expired.reason, 'token_expired');
  assert.equal(expired.delayMs, 0, 'the first token_expired reconnects at once');
  assert.equal(states.filter((s) => s.state === 'reconnecting').length, 1);

  await waitUntil(() => refreshReasons.includes('refresh'), 'in-band refresh', 5000);
  // Past the first token's expiry (3 s) the refreshed connection still delivers.
  const wait = 3500 - (Date.now() - started);
  if (wait > 0) await new Promise((res) => setTimeout(res, wait));
  const id = await herald.publish('orders/3', { after: 'expiry' });
  await waitUntil(() => r2.pubs.some((p) => p.id === id) && r.pubs.some((p) => p.id === id), 'publication after expiry');
  assert.deepEqual(rs.filter((s) => s.state === 'reconnecting'), [], 'refresh needed no reconnect');
  assert.equal(refreshReasons[0], 'connect');
  assert.ok(refreshReasons.slice(1).every((x) => x === 'refresh'), JSON.stringify(refreshReasons));
  c.close();
  c2.close();
});

test('ws: a refused token closes for good (4501), no reconnect loop', async () => {
  let calls = 0;
  const states = stateLog();
  const c = client({
    url: herald.url,
    onStateChange: states.onStateChange,
    getToken: async () => {
      calls++;
      return 'not.a.jwt';
    },
  });
  await assert.rejects(c.connect(), (e) => {
    assert.ok(e instanceof HeraldError);
    assert.equal(e.code, 'unauthorized');
    assert.equal(e.closeCode, 4501);
    return true;
  });
  assert.equal(c.state, 'closed');
  assert.equal(c.lastError.code, 'unauthorized');
  // Give a (wrong) reconnect time to happen: the backoff is at most 400 ms.
  await new Promise((res) => setTimeout(res, 500));
  assert.equal(calls, 1);
  assert.deepEqual(states.map((s) => s.state), ['connecting', 'closed']);
});

test('ws: server restart: bounded reconnects, then onGap (new epoch) and live delivery', async () => {
  const h = await Herald.start();
  try {
    const token = await h.token({ subscribe: ['orders/*'] });
    const states = stateLog();
    const c = client({ url: h.url, getToken: async () => token, onStateChange: states.onStateChange });
    const r = recorder();
    await c.subscribe('orders/4', r.handlers).ready;
    await h.publish('orders/4', { n: 1 });
    await waitUntil(() => r.pubs.length === 1, 'first publication');
    const epoch1 = r.pubs[0].epoch;

    await h.stop(); // graceful: disconnect push "shutdown" with a delay, close 4000
    await waitUntil(() => states.filter((s) => s.state === 'reconnecting').length >= 3, 'a few refused reconnects');
    await h.restart();
    await waitUntil(() => r.gaps.length === 1, 'onGap after the restart');
    assert.equal(r.gaps[0].channel, 'orders/4');
    assert.equal(r.gaps[0].reason, 'epoch_changed');
    assert.notEqual(r.gaps[0].epoch, epoch1);
    assert.equal(c.state, 'connected');

    const id = await h.publish('orders/4', { n: 2 });
    await waitUntil(() => r.pubs.some((p) => p.id === id), 'live publication after the gap');

    const waits = states.filter((s) => s.state === 'reconnecting');
    assert.equal(waits[0].reason, 'shutdown');
    assert.equal(waits[0].closeCode, 4000);
    assert.ok(waits[0].delayMs <= Math.max(200, fastBackoff.maxMs));
    for (const s of waits) assert.ok(s.delayMs <= fastBackoff.maxMs, `delay ${s.delayMs} within the bound`);
    c.close();
  } finally {
    await h.destroy();
  }
});

test('ws: on() returns the function that removes its listener; for await ends when unsubscribed', async () => {
  const token = await herald.token({ subscribe: ['orders/*'] });
  const c = client({ url: herald.url, getToken: async () => token });
  const sub = c.subscribe('orders/8');
  const all = [];
  const some = [];
  sub.on('publication', (p) => all.push(p.id));
  const off = sub.on('publication', (p) => some.push(p.id));
  const iterated = [];
  const iteration = (async () => {
    for await (const p of sub) iterated.push(p.id);
    return 'ended';
  })();
  await sub.ready;
  const a = await herald.publish('orders/8', { n: 1 });
  await waitUntil(() => all.length === 1 && iterated.length === 1, 'the first publication');
  off();
  const b = await herald.publish('orders/8', { n: 2 });
  await waitUntil(() => all.length === 2 && iterated.length === 2, 'the second publication');
  assert.deepEqual(some, [a], 'the removed listener saw only the first');
  assert.deepEqual(all, [a, b]);
  sub.unsubscribe();
  assert.equal(await iteration, 'ended');
  assert.deepEqual(iterated, [a, b]);
  assert.equal(sub.state, 'unsubscribed');
  c.close();
});

test('ws: a publish whose reply never comes rejects with timeout when its timer fires (fake clock); the late reply is ignored', async () => {
  const timers = [];
  const clock = {
    setTimeout: (fn, ms) => {
      const t = { fn, ms, cleared: false, fired: false };
      timers.push(t);
      return t;
    },
    clearTimeout: (t) => {
      if (t) t.cleared = true;
    },
    now: () => Date.now(),
  };
  const live = (pred) => timers.find((t) => !t.cleared && !t.fired && pred(t));
  const fire = (t) => {
    t.fired = true;
    t.fn();
  };
  const token = await herald.token({ subscribe: ['rooms/*'], publish: ['rooms/*'] });
  const states = stateLog();
  const c = client({ url: proxy.url, getToken: async () => token, clock, requestTimeoutMs: 7777, onStateChange: states.onStateChange });
  const r = recorder();
  await c.subscribe('rooms/late', r.handlers).ready;

  proxy.freeze(true); // the publish goes out, its reply is withheld
  const outcome = c.publish('rooms/late', 'chat.message', { text: 'late' }).then(
    () => 'resolved',
    (e) => e,
  );
  const timer = await waitUntil(() => live((t) => t.ms === 7777), 'the publish timer');
  fire(timer);
  const err = await outcome;
  assert.ok(err instanceof HeraldError, String(err));
  assert.equal(err.code, 'timeout');
  assert.equal(err.op, 'publish');
  assert.equal(err.temporary, true);
  assert.equal(c.state, 'reconnecting', 'the stalled connection was given up');
  assert.equal(states.at(-1).reason, 'timeout');

  proxy.freeze(false); // the late reply goes out, to the closed connection
  fire(await waitUntil(() => live((t) => t.ms <= fastBackoff.maxMs), 'the reconnect timer'));
  // The server did publish it: the resume replays it, once.
  await waitUntil(() => c.state === 'connected' && r.pubs.length === 1, 'the publication, replayed on resume');
  assert.deepEqual(r.pubs.map((p) => p.data), [{ text: 'late' }]);
  assert.equal(r.recovered.length, 1);
  assert.deepEqual(r.errors, []);
  c.close();
});

// The longest delay setTimeout takes; a longer one fires at once.
const MAX_DELAY = 2 ** 31 - 1;

test('ws: a token living 800 h or 1,500 h (timers past 2^31−1 ms) is not refreshed in a loop', async (t) => {
  const overflows = [];
  const onWarning = (w) => w.name === 'TimeoutOverflowWarning' && overflows.push(w.message);
  process.on('warning', onWarning);
  t.after(() => process.off('warning', onWarning));
  const cached = mintToken({ subscribe: ['orders/*'], ttlSeconds: 1500 * 3600 });
  // 800 h: a fresh token at every call (its refresh at 0.8 of the life is
  // past the limit); 1,500 h: the same cached token (the retry halfway to
  // the expiry is past it too).
  for (const [hours, getToken] of [
    [800, () => mintToken({ subscribe: ['orders/*'], ttlSeconds: 800 * 3600 })],
    [1500, () => cached],
  ]) {
    const calls = [];
    const c = client({
      url: herald.url,
      getToken: async ({ reason }) => {
        calls.push(reason);
        return getToken();
      },
    });
    const r = recorder();
    await c.subscribe('orders/30', r.handlers).ready;
    // A few round trips through the server: a refresh loop runs hundreds
    // of times meanwhile.
    for (let n = 1; n <= 3; n++) {
      const id = await herald.publish('orders/30', { hours, n });
      await waitUntil(() => r.pubs.some((p) => p.id === id), `publication ${n} (${hours} h)`);
    }
    assert.deepEqual(calls, ['connect'], `${hours} h: getToken once, to connect`);
    assert.equal(c.state, 'connected');
    c.close();
  }
  assert.deepEqual(overflows, [], 'no timer was given more than setTimeout takes');
});

test('ws: a refresh due past 2^31−1 ms waits in steps of at most that, then runs once (fake clock)', async () => {
  const timers = [];
  const clock = {
    setTimeout: (fn, ms) => {
      const x = { fn, ms, cleared: false, fired: false };
      timers.push(x);
      return x;
    },
    clearTimeout: (x) => {
      if (x) x.cleared = true;
    },
    now: () => Date.now(),
  };
  const live = (pred) => timers.filter((x) => !x.cleared && !x.fired && pred(x));
  const fire = (x) => {
    x.fired = true;
    x.fn();
  };
  const life = 1500 * 3600 * 1000;
  const token = mintToken({ subscribe: ['orders/*'], ttlSeconds: life / 1000 });
  const calls = [];
  const c = client({
    url: herald.url,
    clock,
    getToken: async ({ reason }) => {
      calls.push(reason);
      return token;
    },
  });
  await c.subscribe('orders/31').ready;
  assert.deepEqual(timers.filter((x) => !(x.ms <= MAX_DELAY)).map((x) => x.ms), [], 'no delay past the limit');
  // The refresh is due at refreshRatio (0.8) of the life: 4.32e9 ms, two
  // steps of the limit and the rest.
  let due = 0.8 * life;
  while (due > MAX_DELAY) {
    const [step] = live((x) => x.ms === MAX_DELAY);
    assert.ok(step, `a step of ${MAX_DELAY} ms with ${due} ms to go`);
    fire(step);
    due -= MAX_DELAY;
    assert.deepEqual(calls, ['connect'], 'no refresh before it is due');
  }
  const [last] = live((x) => Math.abs(x.ms - due) < 60_000);
  assert.ok(last, `the last step, about ${due} ms: ${JSON.stringify(live(() => true).map((x) => x.ms))}`);
  fire(last);
  await waitUntil(() => calls.length === 2, 'the refresh');
  assert.deepEqual(calls, ['connect', 'refresh']);
  // The app had only the same token: the next try is halfway to the
  // expiry (about 2.16e9 ms), again in steps.
  await waitUntil(() => live((x) => x.ms === MAX_DELAY).length === 1, 'the next try, in steps');
  assert.deepEqual(timers.filter((x) => !(x.ms <= MAX_DELAY)).map((x) => x.ms), []);
  assert.deepEqual(calls, ['connect', 'refresh']);
  c.close();
});

test('ws: publishes that time out while disconnected leave no waiter behind (5,000 of them)', async () => {
  const token = await herald.token({ publish: ['rooms/*'] });
  const p = await TcpProxy.start(herald.port);
  try {
    p.hold(true); // the server cannot be reached
    const c = client({ url: p.url, getToken: async () => token, requestTimeoutMs: 1000 });
    const outcomes = await Promise.allSettled(Array.from({ length: 5000 }, (_, i) => c.publish('rooms/w', 'chat.message', { i })));
    assert.deepEqual([...new Set(outcomes.map((o) => o.status === 'rejected' && o.reason.code))], ['not_connected']);
    assert.notEqual(c.state, 'connected');
    assert.equal(c._waiters.length, 1, 'only connect()\'s own wait is left');
    p.hold(false);
    await waitUntil(() => c.state === 'connected', 'the connection once the server is reachable');
    const res = await c.publish('rooms/w', 'chat.message', { after: 'outage' });
    assert.equal(typeof res.id, 'string');
    assert.equal(c._waiters.length, 0);
    c.close();
  } finally {
    await p.close();
  }
});
