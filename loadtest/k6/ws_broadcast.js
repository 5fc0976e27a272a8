// Broadcast over the herald.v1 WebSocket: SUBS subscribers on one channel,
// each with its own token; after WARMUP s one publisher sends RATE/s for
// DURATION s. Every delivery's latency (publisher's send time in the
// payload → the subscriber's onmessage) goes to delivery_latency; gaps and
// repeats of offsets are counted. See docs/loadtest.md.
//
//   go run ./loadtest/connbench -serve-only        # prints BASE and SECRET
//   k6 run -e BASE=http://127.0.0.1:PORT -e SECRET=… loadtest/k6/ws_broadcast.js
import { check } from 'k6';
import { setTimeout } from 'k6/timers';
import { WebSocket } from 'k6/websockets';
import { broadcastOptions, cfg, closes, mintToken, newChannel, publish, Tracker } from './herald.js';

export const options = broadcastOptions(cfg.warmupS + cfg.durationS + cfg.drainS + 30, {
  delivery_latency: [`p(50)<${cfg.p50}`, `p(99)<${cfg.p99}`],
  deliveries: [`count>=${cfg.subs * cfg.total}`],
});

export function setup() {
  return { channel: newChannel() };
}

export function subscriber(data) {
  const token = mintToken(`k6-sub-${__VU}`, [data.channel], null);
  const ws = new WebSocket(cfg.wsURL, 'herald.v1');
  const tr = new Tracker();
  let closedBy = null;
  ws.onopen = () => {
    // connect and subscribe at once, as the protocol allows.
    ws.send(JSON.stringify({ id: 1, op: 'connect', token: token }));
    ws.send(JSON.stringify({ id: 2, op: 'subscribe', channel: data.channel }));
  };
  ws.onmessage = (e) => {
    const now = Date.now();
    for (const line of String(e.data).split('\n')) {
      if (!line) continue;
      const f = JSON.parse(line);
      if (f.push === 'pub') {
        tr.pub(f, now);
      } else if (f.push === 'ping') {
        ws.send('{"op":"pong"}');
      } else if (f.push === 'disconnect') {
        closedBy = f.reason;
        closes.add(1, { reason: f.reason });
      } else if (f.id === 2) {
        check(f, { 'subscribed': (r) => !r.error && r.result !== undefined });
        if (f.result) tr.start(f.result.offset);
      } else if (f.id === 1) {
        check(f, { 'connected': (r) => !r.error });
      }
    }
  };
  ws.onclose = () => tr.finish(closedBy === null);
  ws.onerror = (e) => console.error(`subscriber ${__VU}: ${e.error}`);
  setTimeout(() => ws.close(), (cfg.warmupS + cfg.durationS + cfg.drainS) * 1000);
}

export function publisher(data) {
  publish(data.channel);
}
