// Shared helpers of the k6 scripts: configuration from the environment,
// the broadcast scenarios and shared thresholds, HS256 tokens minted per
// virtual user, the herald.v1 publisher and the
// per-subscriber delivery accounting. See docs/loadtest.md.
import crypto from 'k6/crypto';
import encoding from 'k6/encoding';
import { Counter, Trend } from 'k6/metrics';
import { setInterval, clearInterval, setTimeout } from 'k6/timers';
import { WebSocket } from 'k6/websockets';

const env = (name, dflt) => (__ENV[name] !== undefined && __ENV[name] !== '' ? __ENV[name] : dflt);

// The run's shape. BASE and SECRET come from `connbench -serve-only`.
export const cfg = {
  base: env('BASE', 'http://127.0.0.1:8080').replace(/\/$/, ''),
  secret: env('SECRET', ''),
  tenant: env('TENANT', 'bench'),
  subs: parseInt(env('SUBS', '100'), 10),
  rate: parseInt(env('RATE', '20'), 10), // publications per second
  durationS: parseInt(env('DURATION', '10'), 10), // seconds of publishing
  warmupS: parseInt(env('WARMUP', '3'), 10), // subscribers connect first
  drainS: parseInt(env('DRAIN', '3'), 10), // subscribers stay after the last publication
  p50: env('P50_MS', '50'),
  p99: env('P99_MS', '250'),
};
cfg.wsURL = cfg.base.replace(/^http/, 'ws') + '/v1/ws';
cfg.total = cfg.rate * cfg.durationS; // publications the publisher sends

// Delivery metrics, the same for both transports.
export const latency = new Trend('delivery_latency', true);
export const deliveries = new Counter('deliveries');
export const missing = new Counter('deliveries_missing');
export const disorder = new Counter('deliveries_out_of_order');
export const closes = new Counter('server_closes');
export const published = new Counter('publications_accepted');
export const pubErrors = new Counter('publications_refused');

// broadcastOptions are a broadcast script's k6 options: cfg.subs VUs
// running its subscriber function once, for at most subscriberS seconds,
// and one running its publisher function once the subscribers had
// WARMUP s to connect. The thresholds are the script's own (its latency
// and deliveries) and those every broadcast shares: no publication
// missing, out of order or refused, every check passed.
export function broadcastOptions(subscriberS, thresholds) {
  return {
    scenarios: {
      subscribers: {
        executor: 'per-vu-iterations', exec: 'subscriber', vus: cfg.subs, iterations: 1,
        maxDuration: `${subscriberS}s`,
      },
      publisher: {
        executor: 'per-vu-iterations', exec: 'publisher', vus: 1, iterations: 1,
        startTime: `${cfg.warmupS}s`, maxDuration: `${cfg.durationS + cfg.drainS + 30}s`,
      },
    },
    thresholds: {
      ...thresholds,
      deliveries_missing: ['count==0'],
      deliveries_out_of_order: ['count==0'],
      publications_refused: ['count==0'],
      checks: ['rate==1'],
    },
  };
}

// mintToken signs an HS256 JWT the way `herald token` does: sub, iat, exp
// and the herald claim (tenant, subscribe and publish grants).
export function mintToken(sub, subscribe, publish) {
  if (!cfg.secret) {
    throw new Error('set SECRET (the server\'s --jwt-hmac-secret; connbench -serve-only prints it)');
  }
  const now = Math.floor(Date.now() / 1000);
  const ttl = cfg.warmupS + cfg.durationS + cfg.drainS + 3600;
  const header = encoding.b64encode(JSON.stringify({ alg: 'HS256', typ: 'JWT' }), 'rawurl');
  const claims = { sub: sub, iat: now, exp: now + ttl, herald: { tenant: cfg.tenant } };
  if (subscribe) claims.herald.subscribe = subscribe;
  if (publish) claims.herald.publish = publish;
  const body = encoding.b64encode(JSON.stringify(claims), 'rawurl');
  const sig = crypto.hmac('sha256', cfg.secret, header + '.' + body, 'base64rawurl');
  return header + '.' + body + '.' + sig;
}

// A channel of its own per run, so offsets start fresh; setup() makes it
// once and hands it to every VU.
export function newChannel() {
  return 'bench/k6-' + Date.now().toString(36) + '/broadcast';
}

// Tracker checks one subscriber's deliveries: offsets must follow each other
// from the subscription's start, and the publisher's sequence numbers k
// must reach the last one (a tail lost at the end shows up there).
export class Tracker {
  constructor() {
    this.last = null; // last offset received
    this.lastK = -1;
  }
  start(offset) {
    this.last = offset;
  }
  // pub accounts one publication envelope received at now (ms); now null
  // records no latency (the receive time is unknown).
  pub(env, now) {
    if (this.last === null) return;
    if (env.offset === this.last + 1) {
      this.last = env.offset;
    } else if (env.offset > this.last + 1) {
      missing.add(env.offset - this.last - 1);
      this.last = env.offset;
    } else {
      disorder.add(1);
      return;
    }
    deliveries.add(1);
    if (env.data && typeof env.data.t === 'number') {
      // t is the publisher's send time in Unix ns (ms resolution here).
      if (now !== null) latency.add(now - env.data.t / 1e6);
      this.lastK = Math.max(this.lastK, env.data.k);
    }
  }
  // finish counts publications sent after the last one received.
  finish(expectAll) {
    if (expectAll && this.last !== null && this.lastK < cfg.total - 1) {
      missing.add(cfg.total - 1 - this.lastK);
    }
  }
}

// publish runs the publisher: one WebSocket with a publish grant, RATE
// publications per second for DURATION seconds, data {"t": send time in
// Unix ns, "k": sequence}; then it waits for the replies and closes.
export function publish(channel) {
  const token = mintToken('k6-publisher', null, [channel]);
  const ws = new WebSocket(cfg.wsURL, 'herald.v1');
  let sent = 0;
  let replies = 0;
  let timer = null;
  ws.onopen = () => ws.send(JSON.stringify({ id: 1, op: 'connect', token: token }));
  ws.onmessage = (e) => {
    for (const line of String(e.data).split('\n')) {
      if (!line) continue;
      const f = JSON.parse(line);
      if (f.push === 'ping') {
        ws.send('{"op":"pong"}');
      } else if (f.id === 1) {
        if (f.error) throw new Error('publisher connect refused: ' + f.error.code);
        timer = setInterval(() => {
          if (sent >= cfg.total) {
            clearInterval(timer);
            return;
          }
          const frame = {
            id: 2 + sent, op: 'publish', channel: channel, type: 'bench.tick', schema_version: 1,
            data: { t: Date.now() * 1e6, k: sent },
          };
          ws.send(JSON.stringify(frame));
          sent++;
        }, 1000 / cfg.rate);
      } else if (f.id >= 2) {
        replies++;
        if (f.error) pubErrors.add(1, { code: f.error.code });
        else published.add(1);
        if (replies === cfg.total) ws.close();
      }
    }
  };
  ws.onerror = (e) => console.error('publisher: ' + e.error);
  // Bounded whatever happens.
  setTimeout(() => ws.close(), (cfg.durationS + cfg.drainS + 5) * 1000);
}
