// Herald's realtime client over the WebSocket (herald.v1) only: the core
// (core.js) with the WebSocket driver, and no SSE code. herald.js has both.
import { Client, PROTOCOL, HeraldError, reasonAction, endpoint, network, STOP_REASONS, States, Backoff, ChannelState, Subscription } from './core.js';

export { PROTOCOL, STOP_REASONS, States, HeraldError, reasonAction, Backoff, ChannelState, Subscription };

/** What to do after a WebSocket close code: 'reconnect', 'reauth' or 'stop'. */
export function closeAction(code) {
  if (code >= 4500 && code <= 4599) return 'stop';
  if (code >= 4100 && code <= 4199) return 'reauth';
  return 'reconnect';
}

// Requests that count against the server's max_inflight.
const COUNTED = ['subscribe', 'publish', 'refresh'];

const timeout = (message) => ({ reason: 'timeout', message });

class WsLink {
  constructor(client, token) {
    this._client = client;
    this._token = token;
    this._established = this._ended = this._opened = this._refreshing = false;
    this._pending = new Map();
    this._queue = [];
    this._nextId = 1;
    this._inflight = 0;
    this._maxInflight = 16;
    this._push = null; // the server's disconnect push
    this._connectError = null;
    this._watchdogMs = 0;
    this._skew = 0; // the server's clock minus the client's, ms
    this._deadline = 0; // when the token expires, by the client's clock
    this._timers = { connect: null, watchdog: null, refresh: null, error: null };
    this._ws = null;
    // The handshake and the connect reply, within requestTimeoutMs.
    this._timer('connect', client._options.requestTimeoutMs, () => this._end(timeout('no connect reply in time')));
    try {
      this._ws = new client._WebSocket(client._wsUrl, PROTOCOL);
    } catch (e) {
      Promise.resolve().then(() => this._end(network(`cannot open the WebSocket: ${e && e.message}`)));
      return;
    }
    this._ws.onopen = () => this._open();
    this._ws.onmessage = (ev) => this._message(ev);
    this._ws.onerror = () => this._error();
    this._ws.onclose = (ev) => this._closed(ev);
  }

  _timer(name, ms, fn) {
    const c = this._client;
    c._cancel(this._timers[name]);
    this._timers[name] = ms === null ? null : c._later(() => {
      this._timers[name] = null;
      fn();
    }, ms);
  }

  // _error: browsers follow the error event with a close event; Node 20's
  // WebSocket may not, so a socket that never opened ends here, an open one soon.
  _error() {
    const info = { reason: 'network', closeCode: 1006, message: 'the WebSocket failed' };
    if (!this._opened) this._end(info);
    else if (this._timers.error === null) this._timer('error', 1000, () => this._end(info));
  }

  _open() {
    this._opened = true;
    const connected = (result) => {
      this._timer('connect', null);
      this._established = true;
      if (result.limits && result.limits.max_inflight > 0) this._maxInflight = result.limits.max_inflight;
      if (result.ping_interval_ms > 0 && result.pong_timeout_ms > 0) this._watchdogMs = result.ping_interval_ms + result.pong_timeout_ms;
      this._kick();
      const c = this._client;
      const h = result.history;
      const t = result.server_time_ms;
      if (t > 0) this._skew = t - c._clock.now();
      c.server = { version: result.version, clockOffsetMs: t > 0 ? this._skew : undefined, history: h && { size: h.size, ttlMs: h.ttl_ms } };
      // The token's life by the server's clock, never the device's.
      this._expires(result.expires_in >= 0 ? result.expires_in * 1000 : this._left(result.expires_at));
      c._linkUp(this, { client: result.client, expiresAt: result.expires_at });
    };
    this.request('connect', { token: this._token }, connected).catch((err) => {
      this._connectError = err; // the server closes next, with the reason's code
    });
  }

  _message(ev) {
    if (this._ended || typeof ev.data !== 'string') return;
    this._kick();
    for (const line of ev.data.split('\n')) {
      let f = null;
      try {
        f = JSON.parse(line);
      } catch {
        // not a frame
      }
      if (f && typeof f === 'object') this._frame(f);
      if (this._ended) return;
    }
  }

  _frame(f) {
    const c = this._client;
    switch (f.push) {
      case undefined:
        break;
      case 'pub': {
        const { push, ...pub } = f;
        c._deliver(pub);
        return;
      }
      case 'ping':
        this._write({ op: 'pong' });
        return;
      case 'unsubscribed':
        c._serverUnsubscribed(this, f);
        return;
      case 'refresh': // the server asks for a fresh token before expires_at
        this._expires(f.expires_in_ms >= 0 ? f.expires_in_ms : this._left(f.expires_at));
        this._refresh();
        return;
      case 'disconnect':
        this._push = f;
        return;
      default: // unknown pushes are ignored
        return;
    }
    // A reply: to a pending request, else late (its request timed out) and ignored.
    if (typeof f.id === 'number' && this._pending.has(f.id)) this._settle(f.id, f);
    else if (f.error && f.id === undefined) c._fault(new HeraldError(String(f.error.code), `herald: ${f.error.message}`));
  }

  // _kick restarts the liveness watchdog: a connection that received
  // nothing for ping_interval_ms + pong_timeout_ms is dead.
  _kick() {
    if (this._watchdogMs > 0) this._timer('watchdog', this._watchdogMs, () => this._end(timeout(`nothing received for ${this._watchdogMs} ms`)));
  }

  // _left returns the ms until expiresAt (Unix seconds) by the server's clock.
  _left(expiresAt) {
    return expiresAt * 1000 - this._client._clock.now() - this._skew;
  }

  // _expires notes that the token expires in ms and schedules the refresh
  // at refreshRatio of that.
  _expires(ms) {
    const c = this._client;
    const ratio = c._options.refreshRatio;
    this._deadline = c._clock.now() + ms;
    this._timer('refresh', ms > 0 && ratio > 0 ? ms * ratio : null, () => this._refresh());
  }

  async _refresh() {
    this._timer('refresh', null);
    if (this._ended || this._refreshing) return;
    this._refreshing = true;
    try {
      await this._refreshOnce();
    } finally {
      this._refreshing = false;
    }
  }

  async _refreshOnce() {
    const c = this._client;
    // Without a new token, try again halfway to the expiry; past it the
    // server closes with token_expired and the reconnect asks for one.
    const later = () => {
      const left = this._deadline - c._clock.now();
      if (left > 2000) this._timer('refresh', left / 2, () => this._refresh());
    };
    let token = null;
    try {
      token = await c._options.getToken({ reason: 'refresh' });
    } catch (e) {
      c._fault(new HeraldError('token_error', `getToken (refresh) failed: ${e && e.message}`, { cause: e }));
    }
    if (this._ended) return;
    if (typeof token !== 'string' || token === '' || token === this._token) return later();
    try {
      const res = await this.request('refresh', { token });
      this._token = token;
      this._expires(this._left(res.expires_at));
    } catch (err) {
      if (this._ended) return;
      // forbidden: another subject or tenant, so open a new connection with it.
      if (err.code === 'forbidden') return this._end({ action: 'reauth', reason: 'token_changed', message: err.message });
      c._fault(err);
      later();
    }
  }

  // request sends one request; the promise settles with its reply, or
  // rejects with "timeout" after requestTimeoutMs, which also ends the
  // connection (it is evidently stalled). onResult runs synchronously on
  // success, before the frames that follow the reply in the same message.
  request(op, fields = {}, onResult = null) {
    if (this._ended) return Promise.reject(new HeraldError('disconnected', 'the connection is closed', { temporary: true, op }));
    return new Promise((resolve, reject) => {
      const c = this._client;
      const ms = c._options.requestTimeoutMs;
      const job = { op, id: 0, _fields: fields, _resolve: resolve, _reject: reject, _onResult: onResult, _counted: COUNTED.includes(op) };
      job._timer = c._later(() => {
        this._pending.delete(job.id);
        reject(new HeraldError('timeout', `no reply to ${op} within ${ms} ms`, { temporary: true, op }));
        this._end(timeout(`no reply to ${op} within ${ms} ms`));
      }, ms);
      if (job._counted && this._inflight >= this._maxInflight) this._queue.push(job);
      else this._send(job);
    });
  }

  _send(job) {
    job.id = this._nextId++;
    if (job._counted) this._inflight++;
    this._pending.set(job.id, job);
    this._write({ id: job.id, op: job.op, ...job._fields });
  }

  _settle(id, f) {
    const job = this._pending.get(id);
    this._pending.delete(id);
    this._client._cancel(job._timer);
    if (job._counted) {
      this._inflight--;
      while (this._queue.length > 0 && this._inflight < this._maxInflight && !this._ended) this._send(this._queue.shift());
    }
    const e = f.error;
    if (e) return job._reject(new HeraldError(String(e.code), String(e.message || e.code), { temporary: Boolean(e.temporary), op: job.op }));
    const result = f.result || {};
    if (job._onResult) {
      try {
        job._onResult(result);
      } catch (err) {
        this._client._fault(err);
      }
    }
    job._resolve(result);
  }

  _write(obj) {
    if (this._ended || !this._ws) return;
    try {
      this._ws.send(JSON.stringify(obj));
    } catch (e) {
      this._end(network(`send failed: ${e && e.message}`));
    }
  }

  _closed(ev) {
    const code = ev.code;
    const p = this._push;
    const message = (p && p.message) || ev.reason;
    /** @type {any} */
    let info;
    if (code >= 4000 && code <= 4999) {
      info = { action: closeAction(code), reason: (p && p.reason) || ev.reason || String(code), closeCode: code, delayMs: p && p.reconnect ? p.delay_ms : undefined, message };
    } else if (p) {
      info = { action: reasonAction(p.reason, p.reconnect), reason: p.reason, closeCode: code, delayMs: p.delay_ms, message };
    } else {
      info = { reason: 'network', closeCode: code, message: `connection closed (${code}${ev.reason ? ' ' + ev.reason : ''})` };
    }
    const ce = this._connectError;
    if (ce && info.action === 'stop') info.error = new HeraldError(ce.code, ce.message, { op: 'connect', closeCode: code });
    this._end(info);
  }

  _end(info) {
    if (this._ended) return;
    this.close();
    this._client._linkDown(this, info);
  }

  // close ends the connection from the client's side, reporting nothing.
  close() {
    if (this._ended) return;
    this._ended = true;
    for (const k of Object.keys(this._timers)) this._timer(k, null);
    for (const job of [...this._pending.values(), ...this._queue]) {
      this._client._cancel(job._timer);
      job._reject(new HeraldError('disconnected', 'the connection closed before the reply', { temporary: true, op: job.op }));
    }
    this._pending.clear();
    this._queue = [];
    const ws = this._ws;
    if (!ws) return;
    ws.onopen = ws.onmessage = ws.onclose = null;
    ws.onerror = () => {};
    try {
      if (ws.readyState === 0 || ws.readyState === 1) ws.close(1000);
    } catch {
      // already closing
    }
  }
}

// subscribe sends one subscribe request for sub, resuming from its position.
async function subscribe(c, sub, link) {
  if (sub.closed) return;
  sub._set('subscribing');
  const pending = c._unsubPending.get(sub.channel);
  if (pending) await pending;
  const fields = { channel: sub.channel };
  if (sub.position) fields.since = sub.position;
  try {
    const t = await sub._token();
    if (t) fields.token = t;
  } catch (e) {
    return c._ended(sub, e);
  }
  if (link !== c._link || sub.closed) return;
  sub._inflight = link.request('subscribe', fields, (result) => {
    if (link !== c._link) return;
    if (sub.closed || c._subs.get(sub.channel) !== sub) unsubscribe(c, sub.channel, link);
    else c._subscribed(sub, result);
  });
  sub._inflight.catch((err) => {
    if (sub.closed) return;
    if (err.code === 'timeout') sub._reject(err); // the reconnect subscribes again
    if (link !== c._link || err.code === 'disconnected' || err.code === 'timeout') return;
    if (!err.temporary) return c._ended(sub, err);
    c._retrySoon(sub, link);
    c._synced(sub, null);
  });
}

function unsubscribe(c, channel, link) {
  const p = link
    .request('unsubscribe', { channel })
    .catch(() => {})
    .finally(() => {
      if (c._unsubPending.get(channel) === p) c._unsubPending.delete(channel);
    });
  c._unsubPending.set(channel, p);
}

// connectedLink waits up to requestTimeoutMs for a connection; a wait
// that times out leaves the client's waiters.
function connectedLink(c, op) {
  if (c._state === 'connected' && c._link) return Promise.resolve(c._link);
  return new Promise((resolve, reject) => {
    const ms = c._options.requestTimeoutMs;
    const t = c._later(() => {
      const i = c._waiters.indexOf(w);
      if (i >= 0) c._waiters.splice(i, 1);
      reject(new HeraldError('not_connected', `not connected within ${ms} ms`, { temporary: true, op }));
    }, ms);
    const w = {
      resolve() {
        c._cancel(t);
        resolve(c._link);
      },
      reject(e) {
        c._cancel(t);
        reject(e);
      },
    };
    c._waiters.push(w);
  });
}

/** The WebSocket driver of Client (core.js). */
export const ws = {
  async publish(c, channel, type, data, { schemaVersion = 1 } = {}) {
    if (data === undefined) throw new HeraldError('invalid_argument', 'data is required (any JSON value, null included)', { op: 'publish' });
    if (!c._wanted) c.connect().catch(() => {});
    const link = await connectedLink(c, 'publish');
    return link.request('publish', { channel, type, schema_version: schemaVersion, data });
  },
  init(c, base) {
    c._WebSocket = c._options.WebSocket || globalThis.WebSocket;
    if (typeof c._WebSocket !== 'function') {
      throw new HeraldError('not_supported', 'no WebSocket in this runtime: pass the WebSocket option (Node 20: run with --experimental-websocket)');
    }
    c._wsUrl = endpoint(base, '/v1/ws', true).toString();
    c._unsubPending = new Map();
  },
  open: (c, token) => new WsLink(c, token),
  up(c, link) {
    for (const sub of c._subs.values()) subscribe(c, sub, link);
  },
  added(c, sub) {
    if (c._state === 'connected' && c._link) subscribe(c, sub, c._link);
  },
  removed(c, sub, wasActive) {
    const link = c._link;
    if (!link || c._state !== 'connected') return;
    if (wasActive) return unsubscribe(c, sub.channel, link);
    if (!sub._inflight) return;
    // A subscribe still running is unsubscribed when its reply arrives (the
    // server refuses unsubscribe before it); a new subscription of the
    // channel waits for both.
    const ch = sub.channel;
    const p = sub._inflight
      .catch(() => {})
      .then(() => {
        const q = c._unsubPending.get(ch);
        return q !== p ? q : undefined;
      })
      .finally(() => {
        if (c._unsubPending.get(ch) === p) c._unsubPending.delete(ch);
      });
    c._unsubPending.set(ch, p);
  },
  resubscribe: subscribe,
  // probe: a ping that times out ends a dead connection.
  probe: (c, link) => link.request('ping').catch(() => {}),
};

/** HeraldClient over the WebSocket. */
export class HeraldClient extends Client {
  constructor(options) {
    super(options, { ws });
  }
}
