// The client's behaviours, written once and run over both transports in
// Node (test/behaviours.test.js) and in headless Chromium
// (browser/behaviours.test.js), against real `herald serve` processes.
//
// A scenario gets {env, transport}. env starts servers and clients:
//   env.startHerald(args)   a Herald, destroyed when the test ends
//   env.startProxy(h)       a TcpProxy in front of h, closed when it ends
//   env.open(opts)          a client (testutil/probe.js) in Node or in the
//                           page: {record(), subscribe(ch), online(),
//                           offline(), hide(), show(), close()}, all async
// Waits are on events (what the client records), bounded by minutes.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Herald, TcpProxy, fastBackoff, mintToken, republish, waitUntil, watch } from './helpers.js';

const MINUTES = 120_000;

/** A backoff so slow that only an immediate reconnect can explain a quick one. */
export const slowBackoff = { initialMs: 600_000, maxMs: 600_000, jitter: 'none', resetAfterMs: 600_000 };

/** servers returns env.startHerald and env.startProxy for test t; every Herald gets args first. */
export function servers(t, args = []) {
  return {
    async startHerald(more = []) {
      const h = await Herald.start({ args: [...args, ...more] });
      t.after(() => h.destroy());
      return h;
    },
    async startProxy(h) {
      const p = await TcpProxy.start(h.port);
      t.after(() => p.close());
      return p;
    },
  };
}

/** waitFor polls a client's record until pred holds, failing with what it saw. */
export async function waitFor(client, pred, what, ms = MINUTES) {
  let rec;
  try {
    return await waitUntil(async () => {
      rec = await client.record();
      return pred(rec) && rec;
    }, what, ms);
  } catch (e) {
    e.message += `; the client recorded:\n${JSON.stringify(rec).slice(0, 4000)}`;
    throw e;
  }
}

/** publishAll publishes {n} for n in from…from+count-1 on channel and returns the ids. */
async function publishAll(h, channel, from, count) {
  const ids = [];
  for (let n = from; n < from + count; n++) ids.push(await h.publish(channel, { n }));
  return ids;
}

const ids = (pubs) => pubs.map((p) => p.id);

export const scenarios = [
  ...['on', 'onStateChange'].map((via) => ({
    name: `subscribing from a synchronous "connected" state listener (${via === 'on' ? 'client.on' : 'the onStateChange option'}): the subscription is made once and lives`,
    async run(t, { env, transport }) {
      const h = await env.startHerald();
      const token = await h.token({ subscribe: ['orders/*'] });
      const late = 'orders/late';
      const c = await env.open({ transport, url: h.url, token, channels: ['orders/early'], subscribeWhenConnected: { channel: late, via }, backoff: fastBackoff });
      let r = await waitFor(c, (x) => x.ready[late], 'the subscription made by the listener');
      assert.equal(r.ready[late].error, undefined, JSON.stringify(r.ready[late]));
      const id = await h.publish(late, { n: 1 });
      // A subscribe sent twice would end the subscription (already_subscribed) long before this publication.
      r = await waitFor(c, (x) => x.pubs[late].some((p) => p.id === id) || x.subStates.some((s) => s.channel === late && s.state === 'unsubscribed'), 'the publication, or the end of the subscription');
      assert.deepEqual(r.subErrors, []);
      assert.deepEqual(r.subStates.filter((s) => s.channel === late).map((s) => s.state), ['subscribed']);
      assert.deepEqual(ids(r.pubs[late]), [id]);
      assert.deepEqual(r.errors, []);
    },
  })),
  {
    name: 'a token that expired already: one reauth, then the first connection, reported once and not as a reconnect',
    async run(t, { env, transport }) {
      const h = await env.startHerald();
      const expired = mintToken({ subscribe: ['orders/*'], ttlSeconds: -3600 });
      const fresh = await h.token({ subscribe: ['orders/*'] });
      const c = await env.open({ transport, url: h.url, token: { connect: expired, token_expired: fresh }, channels: ['orders/11'], backoff: fastBackoff });
      let r = await waitFor(c, (x) => x.connect && x.ready['orders/11'], 'connect() and the subscription');
      assert.deepEqual(r.connect, { tokenCalls: 2 }, 'connect() resolves on the connection made with the fresh token');
      assert.deepEqual(r.tokenReasons, ['connect', 'token_expired']);
      assert.deepEqual(r.states.map((s) => s.state), ['connecting', 'reconnecting', 'connecting', 'connected']);
      assert.equal(r.states[1].reason, 'token_expired');
      assert.deepEqual(r.disconnected.map((d) => d.reason), ['token_expired']);
      assert.deepEqual(r.connected, [{ reconnect: false, recovered: true, reload: [], reasons: {} }]);
      const id = await h.publish('orders/11', { n: 1 });
      r = await waitFor(c, (x) => x.pubs['orders/11'].some((p) => p.id === id), 'live delivery');
      assert.deepEqual(r.connected.length, 1);
      assert.deepEqual(r.errors, []);
    },
  },
  {
    name: 'a reply that never comes: the request times out with "timeout", the late reply is ignored',
    async run(t, { env, transport }) {
      const h = await env.startHerald();
      const proxy = await env.startProxy(h);
      const token = await h.token({ subscribe: ['orders/*'] });
      const c = await env.open({ transport, url: proxy.url, token, channels: ['orders/1'], backoff: fastBackoff, requestTimeoutMs: 1500 });
      await waitFor(c, (r) => r.ready['orders/1'] && r.connected.length === 1, 'the first subscription');

      proxy.freeze(true); // from now on the server's replies are withheld
      await c.subscribe('orders/2');
      let r = await waitFor(c, (x) => x.ready['orders/2'], 'the subscription of orders/2 to settle');
      assert.equal(r.ready['orders/2'].error?.code, 'timeout', JSON.stringify(r.ready['orders/2']));
      assert.equal(r.ready['orders/2'].error.temporary, true);
      assert.ok(r.disconnected.some((d) => d.reason === 'timeout' && d.reconnect), 'the stalled connection was given up');
      assert.equal(r.subStates.filter((s) => s.channel === 'orders/2' && s.state === 'unsubscribed').length, 0, 'a timeout does not end the subscription');

      proxy.freeze(false); // the late replies go out, to connections the client has closed
      r = await waitFor(c, (x) => x.state === 'connected' && x.subStates.some((s) => s.channel === 'orders/2' && s.state === 'subscribed'), 'orders/2 subscribed after the reconnect');
      const sent = await publishAll(h, 'orders/2', 1, 2);
      r = await waitFor(c, (x) => x.pubs['orders/2'].length >= 2, 'the publications on orders/2');
      assert.deepEqual(ids(r.pubs['orders/2']), sent, 'each publication once, in order');
      r = await waitFor(c, (x) => x.iterated['orders/2'].length >= 2, 'for await to see them');
      assert.deepEqual(r.iterated['orders/2'], sent);
      assert.deepEqual(r.errors, []);
      assert.deepEqual(r.subErrors, []);
    },
  },
  {
    name: 'offline → online: the client reconnects at once instead of waiting out its backoff, and recovers',
    async run(t, { env, transport }) {
      const h = await env.startHerald();
      const proxy = await env.startProxy(h);
      const token = await h.token({ subscribe: ['orders/*'] });
      const c = await env.open({ transport, url: proxy.url, token, channels: ['orders/3'], backoff: slowBackoff });
      await waitFor(c, (r) => r.connected.length === 1, 'the first connection');
      const watcher = await watch(t, h, token, 'orders/3');
      const first = await h.publish('orders/3', { n: 1 });
      await waitFor(c, (r) => r.pubs['orders/3'].length === 1 && r.connected.length === 1, 'the first publication');

      await c.offline();
      proxy.hold(true);
      proxy.cut();
      let r = await waitFor(c, (x) => x.disconnected.length === 1, 'the client to notice the cut');
      assert.equal(r.disconnected[0].delayMs, slowBackoff.initialMs, 'its backoff would wait ten minutes');
      const during = await publishAll(h, 'orders/3', 2, 2);
      await waitUntil(() => watcher.pubs.length === 3, 'the publications made while offline');
      proxy.hold(false);
      await c.online();

      r = await waitFor(c, (x) => x.connected.length === 2 && x.pubs['orders/3'].length === 3, 'the reconnect on "online"');
      assert.equal(r.connecting.at(-1).reason, 'online');
      assert.deepEqual(r.connected[1], { reconnect: true, recovered: true, reload: [], reasons: {} });
      assert.deepEqual(ids(r.pubs['orders/3']), [first, ...during]);
      assert.deepEqual(r.gaps, []);
      assert.deepEqual(r.errors, []);
    },
  },
  {
    name: 'online again while the connection is silently dead: it is checked at once and replaced',
    async run(t, { env, transport }) {
      const h = await env.startHerald();
      const proxy = await env.startProxy(h);
      const token = await h.token({ subscribe: ['orders/*'] });
      // The server's heartbeats alone would take a minute to tell.
      const c = await env.open({ transport, url: proxy.url, token, channels: ['orders/9'], backoff: fastBackoff, requestTimeoutMs: 1500 });
      await waitFor(c, (r) => r.connected.length === 1, 'the first connection');
      await c.offline();
      proxy.freeze(true); // the network changed: the old connection is dead, and says nothing
      await c.online();
      let r = await waitFor(c, (x) => x.disconnected.length >= 1, 'the dead connection to be found out');
      assert.equal(r.disconnected[0].reason, 'timeout');
      // The WebSocket is checked with a ping; a stream is replaced by a new one.
      if (transport === 'ws') assert.match(r.disconnected[0].message, /ping/);
      // (on a busy machine the new stream may have timed out and been
      // retried already: the replacement is one of the attempts)
      else assert.ok(r.connecting.some((x) => x.reason === 'online'), 'a stream opened because the client came online');
      proxy.freeze(false);
      r = await waitFor(c, (x) => x.connected.length >= 2 && x.state === 'connected', 'a new connection');
      assert.deepEqual(r.connected.at(-1), { reconnect: true, recovered: true, reload: [], reasons: {} });
      const id = await h.publish('orders/9', { n: 1 });
      await waitFor(c, (x) => x.pubs['orders/9'].some((p) => p.id === id), 'live delivery on the new connection');
    },
  },
  {
    name: 'a tab hidden longer than the history window: visible again, it reconnects at once and names the channel to reload',
    async run(t, { env, transport }) {
      const h = await env.startHerald(['--history-size', '2']);
      const proxy = await env.startProxy(h);
      const token = await h.token({ subscribe: ['orders/*'] });
      const c = await env.open({ transport, url: proxy.url, token, channels: ['orders/4'], backoff: slowBackoff, resyncAfterHiddenMs: 0 });
      await waitFor(c, (r) => r.connected.length === 1, 'the first connection');
      const watcher = await watch(t, h, token, 'orders/4');
      await h.publish('orders/4', { n: 1 });
      await waitFor(c, (r) => r.pubs['orders/4'].length === 1 && r.connected.length === 1, 'the first publication');

      await c.hide();
      proxy.hold(true); // the hidden tab was frozen and its connection died
      proxy.cut();
      await waitFor(c, (x) => x.disconnected.length === 1, 'the client to notice the cut');
      await publishAll(h, 'orders/4', 2, 4); // more than the history keeps
      await waitUntil(() => watcher.pubs.length === 5, 'the publications made while hidden');
      proxy.hold(false);
      await c.show();

      let r = await waitFor(c, (x) => x.connected.length === 2, 'the reconnect on "visible"');
      assert.equal(r.connecting.at(-1).reason, 'visible');
      assert.deepEqual(r.connected[1], { reconnect: true, recovered: false, reload: ['orders/4'], reasons: { 'orders/4': 'history_exceeded' } });
      assert.equal(r.gaps.length, 1);
      assert.equal(r.gaps[0].reason, 'not_recovered');
      assert.equal(r.gaps[0].recovery, 'history_exceeded', 'the server says why');
      assert.deepEqual(r.subStates.filter((s) => s.state === 'subscribed').map((s) => s.recovery), ['no_position', 'history_exceeded']);
      assert.equal(r.pubs['orders/4'].length, 1, 'nothing replayed: the history no longer reaches back');
      const live = await h.publish('orders/4', { n: 6 });
      r = await waitFor(c, (x) => x.pubs['orders/4'].length === 2, 'live delivery after the gap');
      assert.equal(r.pubs['orders/4'][1].id, live);
      assert.equal(r.pubs['orders/4'][1].offset, 6);
    },
  },
  {
    name: 'a duplicate and a reordered publication: the duplicate is dropped, latestWins keeps the newest version',
    async run(t, { env, transport }) {
      // The server answers a repeat of an id its history still holds with
      // the publication already there; a history of one publication lets
      // the repeat through as a new entry, as one past the history window is.
      const h = await env.startHerald(['--history-size', '1']);
      const token = await h.token({ subscribe: ['orders/*'] });
      const c = await env.open({ transport, url: h.url, token, channels: ['orders/5'], backoff: fastBackoff });
      let r = await waitFor(c, (x) => x.ready['orders/5'], 'the subscription');
      assert.equal(r.ready['orders/5'].recovered, false, 'a first subscription starts live');
      assert.equal(r.state, 'connected');
      const dup = randomUUID();
      await h.publish('orders/5', { key: 'o1', version: 1 }, { id: dup });
      await waitFor(c, (x) => x.pubs['orders/5'].length === 1, 'the first publication');
      const other = await h.publish('orders/5', { key: 'o0', version: 1 }); // the history no longer holds dup
      await waitFor(c, (x) => x.pubs['orders/5'].length === 2, 'the second publication');
      await republish(h, 'orders/5', { key: 'o1', version: 1 }, dup); // the same record again: same id, new offset
      const v3 = await h.publish('orders/5', { key: 'o1', version: 3 });
      const v2 = await h.publish('orders/5', { key: 'o1', version: 2 }); // produced out of order
      r = await waitFor(c, (x) => x.pubs['orders/5'].some((p) => p.id === v2) && x.iterated['orders/5'].includes(v2), 'the last publication');
      assert.deepEqual(ids(r.pubs['orders/5']), [dup, other, v3, v2], 'the duplicate id is delivered once');
      assert.deepEqual(r.pubs['orders/5'].map((p) => p.offset), [1, 2, 4, 5]);
      assert.deepEqual(r.iterated['orders/5'], [dup, other, v3, v2]);
      assert.deepEqual(r.applied, { o0: 1, o1: 3 }, 'the older version that came last was not applied');
      assert.deepEqual(r.gaps, [], 'the duplicate advanced the position: no false gap');
      // The envelope, as docs/protocol.md has it.
      const p = r.pubs['orders/5'][0];
      assert.equal(p.channel, 'orders/5');
      assert.equal(p.type, 'order.updated');
      assert.equal(p.schema_version, 1);
      assert.deepEqual(p.data, { key: 'o1', version: 1 });
      assert.deepEqual(p.freshness, { mode: 'immediate' });
      assert.equal(p.push, undefined);
      assert.deepEqual(r.positions['orders/5'], { offset: 5, epoch: p.epoch });
      await c.close();
      assert.equal((await c.record()).state, 'closed');
    },
  },
  {
    name: 'a server restart with a new epoch: bounded reconnects meanwhile, then the reconnect names the channel to reload, live delivery goes on',
    async run(t, { env, transport }) {
      // Without its history log, the restarted server has lost the history.
      const h = await env.startHerald(['--history-log=false']);
      const token = await h.token({ subscribe: ['orders/*'] });
      const c = await env.open({ transport, url: h.url, token, channels: ['orders/6'], backoff: fastBackoff });
      await waitFor(c, (r) => r.connected.length === 1, 'the first connection');
      await h.publish('orders/6', { n: 1 });
      let r = await waitFor(c, (x) => x.pubs['orders/6'].length === 1 && x.connected.length === 1, 'the first publication');
      assert.deepEqual(r.connected[0], { reconnect: false, recovered: true, reload: [], reasons: {} });
      const epoch1 = r.pubs['orders/6'][0].epoch;

      await h.stop(); // graceful: a disconnect with reason "shutdown" (WebSocket: close 4000) and a delay
      r = await waitFor(c, (x) => x.disconnected.length >= 1, 'the disconnect');
      assert.equal(r.disconnected[0].reason, 'shutdown');
      assert.equal(r.disconnected[0].reconnect, true);
      await waitFor(c, (x) => x.states.filter((s) => s.state === 'reconnecting').length >= 3, 'a few refused reconnects');
      await h.restart();
      r = await waitFor(c, (x) => x.connected.length === 2, 'the reconnect to the new server');
      assert.deepEqual(r.connected[1], { reconnect: true, recovered: false, reload: ['orders/6'], reasons: { 'orders/6': 'epoch_changed' } });
      assert.equal(r.gaps.length, 1);
      assert.equal(r.gaps[0].channel, 'orders/6');
      assert.equal(r.gaps[0].reason, 'epoch_changed');
      assert.equal(r.gaps[0].recovery, 'epoch_changed');
      assert.notEqual(r.gaps[0].epoch, epoch1);
      assert.equal(r.state, 'connected');
      const waits = r.states.filter((s) => s.state === 'reconnecting');
      assert.equal(waits[0].reason, 'shutdown');
      if (transport === 'ws') assert.equal(waits[0].closeCode, 4000);
      // The first waits the server's delay_ms (at most --shutdown-reconnect-delay, 200 ms), the others the backoff.
      assert.ok(waits[0].delayMs <= Math.max(200, fastBackoff.maxMs));
      for (const s of waits) assert.ok(s.delayMs <= fastBackoff.maxMs, `delay ${s.delayMs} within the bound`);
      const id = await h.publish('orders/6', { n: 2 });
      r = await waitFor(c, (x) => x.iterated['orders/6'].includes(id), 'live delivery after the restart');
      assert.equal(r.pubs['orders/6'].at(-1).epoch, r.gaps[0].epoch);
    },
  },
  {
    name: 'the network drops: the client reconnects within its backoff and resumes, nothing lost',
    async run(t, { env, transport }) {
      const h = await env.startHerald();
      const proxy = await env.startProxy(h);
      const token = await h.token({ subscribe: ['orders/*'] });
      const c = await env.open({ transport, url: proxy.url, token, channels: ['orders/2'], backoff: fastBackoff });
      await waitFor(c, (r) => r.ready['orders/2'], 'the subscription');
      const a = await h.publish('orders/2', { n: 1 });
      await waitFor(c, (r) => r.pubs['orders/2'].length === 1, 'the first publication');
      // A second client, straight to the server, sees what is published
      // while the first is cut off.
      const watcher = await watch(t, h, token, 'orders/2');

      proxy.hold(true);
      proxy.cut();
      await waitFor(c, (x) => x.state === 'reconnecting', 'the client to notice the drop');
      const b = await h.publish('orders/2', { n: 2 });
      const d = await h.publish('orders/2', { n: 3 });
      await waitUntil(() => watcher.pubs.length === 2, 'the publications made during the gap');
      proxy.hold(false);

      const r = await waitFor(c, (x) => x.pubs['orders/2'].length === 3, 'the missed publications');
      assert.deepEqual(ids(r.pubs['orders/2']), [a, b, d]);
      assert.deepEqual(r.pubs['orders/2'].map((p) => p.offset), [1, 2, 3]);
      assert.deepEqual(r.gaps, []);
      assert.equal(r.recovered.length, 1);
      assert.equal(r.recovered[0].channel, 'orders/2');
      const waits = r.states.filter((s) => s.state === 'reconnecting');
      assert.ok(waits.length >= 1);
      for (const s of waits) assert.ok(s.delayMs <= fastBackoff.maxMs, `delay ${s.delayMs} within the bound`);
    },
  },
  {
    name: 'a token that expires while connected: a fresh one at once, and the channels resume with nothing lost',
    async run(t, { env, transport }) {
      // The app has no fresher token when asked to refresh (WebSocket:
      // getToken({reason: 'refresh'}) returns the same one), so the server
      // ends the connection at expiry (WebSocket: close 4100; SSE: a reauth
      // event); the client asks for a fresh token (reason token_expired) and
      // reconnects at once, resuming.
      const h = await env.startHerald();
      const short = await h.token({ subscribe: ['orders/*'], ttl: '2s' });
      const fresh = await h.token({ subscribe: ['orders/*'] });
      const c = await env.open({ transport, url: h.url, token: { connect: short, token_expired: fresh }, channels: ['orders/14'], backoff: fastBackoff, refreshRatio: 0 });
      await waitFor(c, (r) => r.ready['orders/14'], 'the subscription');
      const a = await h.publish('orders/14', { n: 1 });
      await waitFor(c, (r) => r.pubs['orders/14'].length === 1, 'the first publication');
      let r = await waitFor(c, (x) => x.tokenReasons.includes('token_expired') && x.state === 'connected' && x.recovered.length === 1, 'a new connection with a fresh token');
      const waits = r.states.filter((s) => s.state === 'reconnecting');
      assert.equal(waits.length, 1);
      assert.equal(waits[0].reason, 'token_expired');
      assert.equal(waits[0].delayMs, 0, 'the first token_expired reconnects at once');
      if (transport === 'ws') assert.equal(waits[0].closeCode, 4100);
      assert.equal(r.tokenReasons[0], 'connect');
      const b = await h.publish('orders/14', { n: 2 });
      r = await waitFor(c, (x) => x.pubs['orders/14'].length === 2, 'a publication on the new connection');
      assert.deepEqual(ids(r.pubs['orders/14']), [a, b]);
      assert.deepEqual(r.gaps, []);
    },
  },
  {
    name: 'a connection with no sign of life (no ping, no heartbeat) is given up and reopened',
    // A browser's EventSource hides the stream's heartbeat comments: there
    // the stream is left to the browser, so this runs everywhere else.
    where: ({ browser, transport }) => !(browser && transport === 'sse'),
    async run(t, { env, transport }) {
      const h = await env.startHerald(['--heartbeat-interval', '200ms', '--client-timeout', '1s']);
      const proxy = await env.startProxy(h);
      const token = await h.token({ subscribe: ['orders/*'] });
      const c = await env.open({ transport, url: proxy.url, token, channels: ['orders/7'], backoff: fastBackoff, sseIdleTimeoutMs: 1000 });
      await waitFor(c, (r) => r.connected.length === 1, 'the first connection');
      proxy.freeze(true); // the connection stays open, but nothing comes through
      let r = await waitFor(c, (x) => x.disconnected.length >= 1, 'the silent connection to be given up');
      assert.equal(r.disconnected[0].reason, 'timeout');
      proxy.freeze(false);
      r = await waitFor(c, (x) => x.connected.length >= 2 && x.state === 'connected', 'a new connection');
      assert.deepEqual(r.connected.at(-1), { reconnect: true, recovered: true, reload: [], reasons: {} });
      const id = await h.publish('orders/7', { n: 1 });
      await waitFor(c, (x) => x.pubs['orders/7'].some((p) => p.id === id), 'live delivery on the new connection');
    },
  },
  {
    name: 'a saved position the server never published: the gap and "connected" say why (WebSocket: position_ahead; SSE, whose cursor is opaque: no_position)',
    async run(t, { env, transport }) {
      const h = await env.startHerald();
      const token = await h.token({ subscribe: ['orders/*'] });
      const watcher = await watch(t, h, token, 'orders/8');
      await h.publish('orders/8', { n: 1 });
      await waitUntil(() => watcher.pubs.length === 1, 'the first publication');
      const { epoch } = watcher.pubs[0];
      const c = await env.open({ transport, url: h.url, token, channels: ['orders/8'], since: { 'orders/8': { offset: 50, epoch } }, backoff: fastBackoff });
      let r = await waitFor(c, (x) => x.connected.length === 1 && x.gaps.length === 1, 'the subscription and its gap');
      const why = transport === 'ws' ? 'position_ahead' : 'no_position';
      assert.deepEqual(r.connected[0], { reconnect: false, recovered: false, reload: ['orders/8'], reasons: { 'orders/8': why } });
      assert.deepEqual(r.gaps[0], { channel: 'orders/8', reason: 'not_recovered', recovery: why, offset: 1, epoch });
      assert.equal(r.ready['orders/8'].reason, why, 'sub.ready has the server\'s result');
      const sub = r.subStates.find((s) => s.state === 'subscribed');
      assert.equal(sub.recovered, false);
      assert.equal(sub.gap, 'not_recovered');
      assert.equal(sub.recovery, why);
      const id = await h.publish('orders/8', { n: 2 });
      r = await waitFor(c, (x) => x.pubs['orders/8'].some((p) => p.id === id), 'live delivery after the gap');
      assert.equal(r.pubs['orders/8'].length, 1, 'nothing replayed');
    },
  },
  {
    name: 'client.server: the WebSocket connect reply\'s version, clock offset and history window (none over SSE)',
    async run(t, { env, transport }) {
      const h = await env.startHerald(['--history-size', '7', '--history-ttl', '90s']);
      const token = await h.token({ subscribe: ['orders/*'] });
      const c = await env.open({ transport, url: h.url, token, channels: ['orders/10'], backoff: fastBackoff });
      const r = await waitFor(c, (x) => x.connected.length === 1, 'the first connection');
      if (transport === 'sse') {
        assert.equal(r.server, null);
        return;
      }
      assert.equal(typeof r.server.version, 'string');
      assert.ok(r.server.version.length > 0, 'a version');
      assert.deepEqual(r.server.history, { size: 7, ttlMs: 90_000 });
      // The server runs on this machine: its clock is this one's, give or take the reply's trip.
      assert.equal(typeof r.server.clockOffsetMs, 'number');
      assert.ok(Math.abs(r.server.clockOffsetMs) < 5000, `clock offset ${r.server.clockOffsetMs} ms`);
    },
  },
];
