// Broadcast over Server-Sent Events: SUBS subscribers open GET /v1/sse on
// one channel, each with its own token; after WARMUP s one WebSocket
// publisher sends RATE/s for DURATION s. See docs/loadtest.md.
//
// k6's http API hands a response body back only when the request ends, so
// each stream is cut by the request timeout while the publisher is still
// publishing, and the body received so far is read then. Per-publication
// receive times are therefore not observable; what is measured instead:
//
//   sse_staleness: at the cut, how long ago the newest publication the
//     stream had delivered was sent. That publication's delivery latency is
//     at most this (it arrived before the cut), and with publications every
//     1/RATE s it exceeds the real latency by at most about 1/RATE s. Its
//     threshold therefore bounds the delivery latency.
//   deliveries, deliveries_missing, deliveries_out_of_order: every offset
//     after the subscribed event's, once and in order, up to the cut.
//
//   k6 run -e BASE=http://127.0.0.1:PORT -e SECRET=… loadtest/k6/sse.js
import { check } from 'k6';
import http from 'k6/http';
import { Trend } from 'k6/metrics';
import { broadcastOptions, cfg, closes, mintToken, newChannel, publish, Tracker } from './herald.js';

const staleness = new Trend('sse_staleness', true);

// The stream is cut this long after it opens: while publications still flow.
const windowS = cfg.warmupS + Math.max(1, Math.floor(cfg.durationS / 2));

export const options = broadcastOptions(windowS + 30, {
  // Staleness is the delivery latency plus up to one publishing
  // interval: the latency bounds plus 1000/RATE ms.
  sse_staleness: [`p(50)<${Number(cfg.p50) + 1000 / cfg.rate}`, `p(99)<${Number(cfg.p99) + 1000 / cfg.rate}`],
  deliveries: ['count>0'],
});

export function setup() {
  return { channel: newChannel() };
}

// events splits an event-stream body into {event, data} (comments and id:
// lines dropped); a trailing partial event is left out.
function events(body) {
  const out = [];
  const blocks = body.split('\n\n');
  blocks.pop(); // unterminated (or empty) tail
  for (const b of blocks) {
    let ev = '';
    let data = null;
    for (const line of b.split('\n')) {
      if (line.startsWith('event: ')) ev = line.slice(7);
      else if (line.startsWith('data: ')) data = line.slice(6);
    }
    if (data !== null) out.push({ event: ev, data: data });
  }
  return out;
}

export function subscriber(data) {
  const token = mintToken(`k6-sse-${__VU}`, [data.channel], null);
  const url = `${cfg.base}/v1/sse?channel=${encodeURIComponent(data.channel)}`;
  const res = http.get(url, {
    headers: { Authorization: `Bearer ${token}`, Accept: 'text/event-stream' },
    // The cut: k6 returns the body read so far. Cuts are spread over a
    // second so that k6 does not hand back every response at once (the
    // time it takes to would count as staleness).
    timeout: windowS * 1000 + (__VU % 50) * 20,
    tags: { name: '/v1/sse' },
  });
  const cut = Date.now();
  const evs = events(res.body || '');
  check(evs, { 'stream began with subscribed': (e) => e.length > 0 && e[0].event === 'subscribed' });
  if (evs.length === 0 || evs[0].event !== 'subscribed') return;
  const tr = new Tracker();
  tr.start(JSON.parse(evs[0].data).offset);
  let newest = null;
  for (const e of evs.slice(1)) {
    const env = JSON.parse(e.data);
    if (e.event === '') {
      tr.pub(env, null); // no per-publication receive time: staleness below is the measure
      if (env.data && typeof env.data.t === 'number') newest = Math.max(newest || 0, env.data.t / 1e6);
    } else if (e.event === 'disconnect') {
      closes.add(1, { reason: env.reason });
    }
  }
  check(newest, { 'publications arrived before the cut': (n) => n !== null });
  if (newest !== null) staleness.add(cut - newest);
}

export function publisher(data) {
  publish(data.channel);
}
