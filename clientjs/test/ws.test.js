// The WebSocket transport (herald.v1) against a real `herald serve`: what
// only it does (publish, in-band refresh, close codes, request timeouts).
// The behaviours both transports share are testutil/scenarios.js
// (behaviours.test.js).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { HeraldClient, HeraldError } from '../herald.js';
import { Herald, TcpProxy, fastBackoff, mintToken, recorder, stateLog, waitUntil } from '../testutil/helpers.js';

let herald;
let proxy;
const clients = [];

before(async () => {
  // Tokens of 800 h and 1,500 h below: past the default longest lifetime.
  herald = await Herald.start({ args: ['--max-token-lifetime', '2000h'] });
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

test('ws: an in-band refresh keeps the connection up past the first token\'s expiry', async () => {
  // An app that refreshes: in-band at half the lifetime (or when the
  // server asks), no reconnect. (An app that cannot refresh in time gets
  // a new connection with a fresh token: testutil/scenarios.js.)
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

  await waitUntil(() => refreshReasons.includes('refresh'), 'in-band refresh', 5000);
  // Past the first token's expiry (3 s) the refreshed connection still delivers.
  const wait = 3500 - (Date.now() - started);
  if (wait > 0) await new Promise((res) => setTimeout(res, wait));
  const id = await herald.publish('orders/3', { after: 'expiry' });
  await waitUntil(() => r2.pubs.some((p) => p.id === id), 'publication after expiry');
  assert.deepEqual(rs.filter((s) => s.state === 'reconnecting'), [], 'refresh needed no reconnect');
  assert.equal(refreshReasons[0], 'connect');
  assert.ok(refreshReasons.slice(1).every((x) => x === 'refresh'), JSON.stringify(refreshReasons));
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

/**
 * fakeClock is a clock (the client's clock option) whose timers fire only
 * when the test fires them: timers is every timer set ({fn, ms, cleared,
 * fired}), live(pred) those neither cleared nor fired that pred accepts,
 * fire(timer) runs one. Its now() is the real one.
 */
function fakeClock() {
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
  return { clock, timers, live, fire };
}

test('ws: a publish whose reply never comes rejects with timeout when its timer fires (fake clock); the late reply is ignored', async () => {
  const { clock, live: liveAll, fire } = fakeClock();
  const live = (pred) => liveAll(pred)[0];
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
  const { clock, timers, live, fire } = fakeClock();
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
