// The core of Herald's client, shared by both transports: the protocol's
// vocabulary, errors, backoff, channel positions, events, and the
// transport-independent client (connection lifecycle, reconnects,
// subscriptions, delivery). A transport plugs in as a driver (sse.js,
// ws.js); the entry modules choose which. Herald serves these files
// minified (dist/, built by build.mjs); the comments are for this source.

// ---- the protocol's vocabulary (docs/protocol.md) and the client's one
// error type; test/vocabulary.test.js checks them against the server's table

/** The WebSocket subprotocol. */
export const PROTOCOL = 'herald.v1';

/**
 * Disconnect reasons after which the same request would fail again.
 * @type {readonly import('./herald.js').StopReason[]}
 */
export const STOP_REASONS = Object.freeze(['bad_request', 'unauthorized', 'forbidden', 'message_too_big', 'protocol_error', 'revoked']);

/** Every error the client reports; codes are listed in herald.d.ts. */
export class HeraldError extends Error {
  constructor(code, message, extra = {}) {
    super(message || code, extra.cause === undefined ? undefined : { cause: extra.cause });
    this.name = 'HeraldError';
    this.code = code;
    this.temporary = Boolean(extra.temporary);
    for (const k of ['op', 'status', 'closeCode']) if (extra[k] !== undefined) this[k] = extra[k];
  }
}

/** What to do after a disconnect reason (and the server's reconnect flag). */
export function reasonAction(reason, reconnect) {
  if (reason === 'token_expired') return 'reauth';
  if (reconnect === false || STOP_REASONS.includes(reason)) return 'stop';
  return 'reconnect';
}

/** network is what follows a network failure, for every transport: reconnect. */
export const network = (message) => ({ action: 'reconnect', reason: 'network', message });

const invalid = (m) => new HeraldError('invalid_argument', m);

// check throws invalid_argument for the first option of o that fails its test.
function check(o, tests, prefix = '') {
  for (const k in tests) if (!tests[k](o[k])) throw invalid(`${prefix}${k}: ${o[k]}`);
}

/**
 * The longest delay setTimeout takes (2^31−1 ms, about 24.8 days): it
 * fires a longer one at once. The client waits longer in steps.
 */
export const MAX_DELAY = 2 ** 31 - 1;

// ---- bounded exponential backoff with jitter

/** Reconnect delays: the n-th is drawn from [0, cap] (jitter "full"), [cap/2, cap] ("half") or is cap ("none"), cap = min(maxMs, initialMs·factor^n). */
export class Backoff {
  /** @param {import('./herald.js').BackoffOptions} [options] */
  constructor(options = {}) {
    /** @type {Required<import('./herald.js').BackoffOptions>} */
    const o = { initialMs: 500, maxMs: 30000, factor: 2, jitter: 'full', resetAfterMs: 5000, random: Math.random, ...options };
    check(
      o,
      {
        initialMs: (v) => v > 0,
        maxMs: (v) => v >= o.initialMs,
        factor: (v) => v >= 1,
        jitter: (v) => ['full', 'half', 'none'].includes(v),
        resetAfterMs: (v) => v >= 0,
        random: (v) => typeof v === 'function',
      },
      'backoff.',
    );
    this.options = o;
    this._attempt = 0;
  }

  get attempt() {
    return this._attempt;
  }

  cap(attempt = this._attempt) {
    const o = this.options;
    return Math.min(o.maxMs, o.initialMs * Math.pow(o.factor, attempt));
  }

  next() {
    const cap = this.cap();
    if (this._attempt < 1000) this._attempt++;
    const r = Math.min(Math.max(this.options.random(), 0), 1);
    const j = this.options.jitter;
    return Math.round(j === 'none' ? cap : j === 'half' ? cap / 2 + (r * cap) / 2 : r * cap);
  }

  reset() {
    this._attempt = 0;
  }
}

// ---- one channel's resume position and recent message ids

export class ChannelState {
  constructor(maxIds = 1000, position = null) {
    this.maxIds = Math.max(1, maxIds | 0);
    this.offset = undefined;
    this.epoch = undefined;
    this._ids = new Map();
    if (position && position.epoch) {
      this.offset = position.offset;
      this.epoch = position.epoch;
    }
  }

  get position() {
    return this.epoch === undefined ? null : { offset: this.offset, epoch: this.epoch };
  }

  /**
   * subscribed applies a subscription result; it returns the gap reason
   * when a position the channel had was not resumed, else null.
   * @returns {import('./herald.js').GapReason | null}
   */
  subscribed(result) {
    const had = this.epoch !== undefined;
    /** @type {import('./herald.js').GapReason | null} */
    let gap = null;
    if (had && !result.recovered) gap = result.epoch !== this.epoch ? 'epoch_changed' : 'not_recovered';
    if (!result.recovered || !had) {
      this.offset = result.offset;
      this.epoch = result.epoch;
    }
    return gap;
  }

  // accept advances the position past pub; deliver is false for a replay
  // (at or before the position) and for a recently seen message id.
  /** @returns {{deliver: boolean, gap: import('./herald.js').GapReason | null}} */
  accept(pub) {
    if (pub.epoch === this.epoch && pub.offset <= this.offset) return { deliver: false, gap: null };
    /** @type {import('./herald.js').GapReason | null} */
    let gap = null;
    if (this.epoch !== undefined) gap = pub.epoch !== this.epoch ? 'epoch_changed' : pub.offset > this.offset + 1 ? 'offset_gap' : null;
    this.offset = pub.offset;
    this.epoch = pub.epoch;
    const ids = this._ids;
    const seen = pub.id !== undefined && ids.delete(pub.id);
    if (pub.id !== undefined) ids.set(pub.id, true);
    if (ids.size > this.maxIds) ids.delete(ids.keys().next().value);
    return { deliver: !seen, gap };
  }
}

// ---- event listeners, removed by the function on() returns

export class Emitter {
  /** Calls fn for every event of type; returns the function that removes it. */
  on(type, fn) {
    const m = this._on || (this._on = new Map());
    if (!m.has(type)) m.set(type, new Set());
    const w = (a) => fn(a);
    m.get(type).add(w);
    return () => {
      m.get(type).delete(w);
    };
  }

  // _emit calls the listeners of type; it says whether there were any.
  // A listener that throws is reported through _fault (not for "error").
  _emit(type, arg) {
    const s = this._on && this._on.get(type);
    if (!s || s.size === 0) return false;
    for (const fn of [...s]) {
      try {
        fn(arg);
      } catch (e) {
        if (type !== 'error') this._fault(e);
      }
    }
    return true;
  }

  _fault(e) {
    if (typeof console !== 'undefined') console.error('herald:', e);
  }
}

// ---- the client and its subscriptions

/** Client states, reported by the "state" event. */
export const States = Object.freeze({ IDLE: 'idle', CONNECTING: 'connecting', CONNECTED: 'connected', RECONNECTING: 'reconnecting', CLOSED: 'closed' });
const { IDLE, CONNECTING, CONNECTED, RECONNECTING, CLOSED } = States;

/** endpoint appends path to base's path, with the scheme for a WebSocket (ws) or HTTP. */
export function endpoint(base, path, ws) {
  const u = new URL(base);
  const secure = u.protocol === 'https:' || u.protocol === 'wss:';
  u.protocol = ws ? (secure ? 'wss:' : 'ws:') : secure ? 'https:' : 'http:';
  u.pathname = u.pathname.replace(/\/+$/, '') + path;
  u.search = u.hash = '';
  return u;
}

// The events a subscription's options can have handlers for: onPublication, ….
const HANDLED = ['publication', 'gap', 'recovered', 'error', 'state'];

/** One channel of a client: client.subscribe(channel, options). */
export class Subscription extends Emitter {
  constructor(client, channel, h) {
    super();
    this._client = client;
    this.channel = channel;
    this._h = h;
    this._state = new ChannelState(client._options.maxIds, h.since || null);
    /** @type {import('./herald.js').SubscriptionState} */
    this._status = 'subscribing';
    this._retry = null;
    this._backoff = new Backoff(client._options.backoff);
    this.ready = new Promise((res, rej) => {
      this._resolve = res;
      this._reject = rej;
    });
    this.ready.catch(() => {});
    for (const ev of HANDLED) {
      const fn = h['on' + ev[0].toUpperCase() + ev.slice(1)];
      if (typeof fn === 'function') this.on(ev, fn);
    }
  }

  get position() {
    return this._state.position;
  }

  /** "subscribing", "subscribed" or "unsubscribed". */
  get state() {
    return this._status;
  }

  get active() {
    return this._status === 'subscribed';
  }

  get closed() {
    return this._status === 'unsubscribed';
  }

  unsubscribe() {
    this._client._unsubscribe(this);
  }

  _fault(e) {
    this._client._fault(e);
  }

  /** @param {import('./herald.js').SubscriptionState} state */
  _set(state, info = {}) {
    const previous = this._status;
    if (previous === state) return;
    this._status = state;
    this._emit('state', { channel: this.channel, state, previous, ...info });
  }

  // _token returns the subscription token (option token: a string or a function).
  async _token() {
    const t = this._h.token;
    try {
      return typeof t === 'function' ? await t() : t;
    } catch (e) {
      throw new HeraldError('token_error', `subscription token for "${this.channel}": ${e && e.message}`, { cause: e });
    }
  }

  /** Publications from now on; ends when unsubscribed, throws the error that ended the subscription. */
  [Symbol.asyncIterator]() {
    const queue = [];
    let end = null;
    /** @type {(v?: unknown) => void} */
    let wake = () => {};
    const offs = [
      this.on('publication', (p) => queue.push(p) && wake()),
      this.on('error', (e) => (end = end || { e }) && wake()),
      this.on('state', (s) => s.state === 'unsubscribed' && (end = end || {}) && wake()),
    ];
    if (this.closed) end = {};
    const stop = () => offs.forEach((f) => f());
    return {
      async next() {
        while (!queue.length && !end) await new Promise((r) => (wake = r));
        if (queue.length) return { value: queue.shift(), done: false };
        stop();
        if (end.e) throw end.e;
        return { value: undefined, done: true };
      },
      async return() {
        stop();
        queue.length = 0;
        end = end || {};
        wake();
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]() {
        return this;
      },
    };
  }
}

/** Client is HeraldClient without its transports; the entry modules pass them (drivers). */
export class Client extends Emitter {
  constructor(options, drivers) {
    super();
    const o = {
      transport: Object.keys(drivers)[0],
      backoff: {},
      refreshRatio: 0.8,
      requestTimeoutMs: 5000,
      maxIds: 1000,
      sseIdleTimeoutMs: 45000,
      resyncAfterHiddenMs: 10000,
      ...options,
    };
    const loc = globalThis.location;
    if (o.url === undefined && loc) o.url = loc.origin;
    let base;
    try {
      base = new URL(String(o.url), loc ? loc.href : undefined);
    } catch {
      throw invalid(`url: ${o.url}`);
    }
    const d = drivers[o.transport];
    check(o, {
      transport: () => d,
      getToken: (v) => typeof v === 'function',
      refreshRatio: (v) => v >= 0 && v < 1,
      requestTimeoutMs: (v) => v > 0,
    });
    this._options = o;
    this._driver = d;
    this._backoff = new Backoff(o.backoff);
    this._clock = o.clock || { setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (t) => clearTimeout(t), now: Date.now };
    this._fetch = o.fetch || globalThis.fetch?.bind(globalThis);
    const target = (x) => (x && typeof x.addEventListener === 'function' ? x : null);
    this._win = target(o.window !== undefined ? o.window : globalThis);
    this._doc = target(o.document !== undefined ? o.document : globalThis.document);
    this._subs = new Map();
    /** @type {import('./herald.js').State} */
    this._state = IDLE;
    this._wanted = false;
    this._gen = 0;
    this._link = null;
    this._timer = null;
    this._stable = null;
    this._tokenReason = 'connect';
    this._waiters = [];
    this._reauthing = false;
    this._sync = null;
    this._ups = 0;
    this._hiddenAt = 0;
    this.lastError = null;
    this.server = null;
    if (typeof o.onStateChange === 'function') this.on('state', o.onStateChange);
    if (typeof o.onError === 'function') this.on('error', o.onError);
    this._onOnline = () => this._wake('online');
    this._onVisibility = () => {
      const now = this._clock.now();
      if (this._doc.visibilityState === 'hidden') {
        this._hiddenAt = now;
      } else if (this._hiddenAt) {
        const long = now - this._hiddenAt >= o.resyncAfterHiddenMs;
        this._hiddenAt = 0;
        if (long) this._wake('visible');
      }
    };
    d.init(this, base);
  }

  get state() {
    return this._state;
  }

  get transport() {
    return this._options.transport;
  }

  /** Resume positions of every subscribed channel: {channel: {offset, epoch}}. */
  positions() {
    const out = {};
    for (const [ch, s] of this._subs) if (s.position) out[ch] = s.position;
    return out;
  }

  /** Starts connecting; resolves when connected, rejects when the client closes first. */
  connect() {
    const p = new Promise((resolve, reject) => {
      if (this._state === CONNECTED) resolve();
      else this._waiters.push({ resolve, reject });
    });
    if (!this._wanted) {
      this._wanted = true;
      this._ups = 0;
      this._backoff.reset();
      this.lastError = null;
      this._listen('addEventListener');
      this._attempt();
    }
    return p;
  }

  /** Closes the connection and stops reconnecting; subscriptions are kept for a later connect(). */
  close() {
    this._stop();
    this._gen++;
    if (this._link) this._link.close();
    this._detach();
    this._setState(CLOSED, { reason: 'client_closed' });
  }

  /** Subscribes to channel; options: handlers (onPublication, …), since, token. */
  subscribe(channel, options = {}) {
    if (typeof channel !== 'string' || channel === '') throw invalid(`channel: ${channel}`);
    if (this._subs.has(channel)) throw new HeraldError('already_subscribed', channel);
    const sub = new Subscription(this, channel, options);
    this._subs.set(channel, sub);
    if (!this._wanted) this.connect().catch(() => {});
    else this._driver.added(this, sub);
    return sub;
  }

  /** Publishes on an interactive channel (WebSocket only); resolves with {id, offset, epoch}. */
  async publish(channel, type, data, options = {}) {
    const p = this._driver.publish;
    if (!p) throw new HeraldError('not_supported', 'publish needs the WebSocket', { op: 'publish' });
    return p(this, channel, type, data, options);
  }

  // ---- connection lifecycle ----

  _listen(method) {
    if (this._win) this._win[method]('online', this._onOnline);
    if (this._doc) this._doc[method]('visibilitychange', this._onVisibility);
  }

  _stop() {
    if (this._wanted) this._listen('removeEventListener');
    this._wanted = false;
    this._timer = this._cancel(this._timer);
  }

  // _wake reconnects at once (the network is back, the page is visible
  // again), or checks that the open connection is still alive.
  _wake(why) {
    if (!this._wanted) return;
    this._backoff.reset();
    if (this._state === RECONNECTING) this._attempt(why);
    else if (this._state === CONNECTED && this._link) this._driver.probe(this, this._link, why);
  }

  _setState(state, info = {}) {
    const previous = this._state;
    this._state = state;
    if (state === CONNECTED || state === CLOSED) {
      const ws = this._waiters;
      this._waiters = [];
      const err = info.error || new HeraldError('closed', 'the client is closed');
      for (const w of ws) if (state === CONNECTED) w.resolve();
      else w.reject(err);
    }
    if (previous === state && state !== RECONNECTING) return;
    const ev = { state, previous, ...info };
    this._emit('state', ev);
    if (state === CONNECTING) this._emit('connecting', ev);
    if ((state === RECONNECTING || state === CLOSED) && previous !== CLOSED) this._emit('disconnected', { ...ev, reconnect: state === RECONNECTING });
  }

  // _fault reports err with the "error" event, or on the console without listeners.
  _fault(err) {
    if (!this._emit('error', err)) super._fault(err);
  }

  // _later calls fn after ms, a delay of any length: a timer fires at
  // MAX_DELAY at the latest, and then waits for the rest (h: the handle,
  // which _cancel takes).
  _later(fn, ms, h = {}) {
    h.t = this._clock.setTimeout(() => (ms > MAX_DELAY ? this._later(fn, ms - MAX_DELAY, h) : fn()), Math.min(ms, MAX_DELAY));
    return h;
  }

  // _cancel clears timer h of _later (null: none); it returns null, the new value.
  _cancel(h) {
    if (h) this._clock.clearTimeout(h.t);
    return null;
  }

  // _detach forgets the connection: subscriptions wait for the next one.
  _detach() {
    this._link = null;
    this._sync = null;
    this._stable = this._cancel(this._stable);
    for (const s of this._subs.values()) {
      if (s.active) s._set('subscribing');
      s._retry = this._cancel(s._retry);
    }
  }

  // _reopen replaces the connection with a new one at once.
  _reopen(why) {
    if (this._link) this._link.close();
    this._detach();
    this._attempt(why);
  }

  // _attempt fetches a token and opens one connection.
  async _attempt(why) {
    this._timer = this._cancel(this._timer);
    if (!this._wanted) return;
    const gen = ++this._gen;
    if (this._driver.idle && this._subs.size === 0) {
      this._setState(IDLE, { reason: 'no_channels' });
      return;
    }
    this._setState(CONNECTING, why ? { reason: why } : {});
    let token;
    try {
      token = await this._options.getToken({ reason: this._tokenReason });
    } catch (e) {
      if (gen === this._gen) this._linkDown(null, { reason: 'token_error', error: new HeraldError('token_error', `getToken failed: ${e && e.message}`, { temporary: true, cause: e }) });
      return;
    }
    if (gen !== this._gen || !this._wanted) return;
    if (typeof token !== 'string' || token === '') {
      this._linkDown(null, { action: 'stop', reason: 'unauthorized', error: new HeraldError('unauthorized', 'getToken returned no token') });
      return;
    }
    this._tokenReason = 'connect';
    this._link = this._driver.open(this, token);
  }

  // _linkUp runs when a connection is established.
  _linkUp(link, info = {}) {
    if (link !== this._link) return;
    this._cancel(this._stable);
    this._stable = this._later(() => {
      this._stable = null;
      this._backoff.reset();
      this._reauthing = false;
    }, this._backoff.options.resetAfterMs);
    this.lastError = null;
    this._sync = { _info: info, _waiting: new Set([...this._subs.values()].filter((s) => !s.closed)), reload: [], reasons: {}, _first: this._ups++ === 0 };
    // The transport resubscribes before the state is announced: a listener
    // that subscribes then is not subscribed twice.
    this._driver.up(this, link);
    this._setState(CONNECTED, info);
    this._synced(null, null);
  }

  // _synced notes that sub has its answer on this connection; once every
  // subscription has, the "connected" event says what was recovered (and
  // in reasons, the server's reason for each channel to reload).
  _synced(sub, gap, recovery) {
    const s = this._sync;
    if (!s || (sub && !s._waiting.delete(sub))) return;
    if (gap) {
      s.reload.push(sub.channel);
      s.reasons[sub.channel] = recovery;
    }
    if (s._waiting.size > 0) return;
    this._sync = null;
    this._emit('connected', { ...s._info, reconnect: !s._first, recovered: s.reload.length === 0, reload: s.reload, reasons: s.reasons });
  }

  // _linkDown decides what follows the end of a connection or attempt:
  // info.action ("reauth", "stop", else reconnect), reason, delayMs, error.
  _linkDown(link, info) {
    if (link !== null && link !== this._link) return;
    this._detach();
    if (!this._wanted) return;
    this._gen++;
    const error = info.error || new HeraldError(info.reason || 'disconnected', info.message || `connection ended: ${info.reason || 'network'}`, {
      temporary: info.action !== 'stop',
      status: info.status,
      closeCode: info.closeCode,
    });
    this.lastError = error;
    const about = { reason: info.reason, closeCode: info.closeCode, error };
    if (info.action === 'stop') {
      this._stop();
      this._setState(CLOSED, about);
      return;
    }
    let delay;
    if (info.action === 'reauth') {
      // The first token_expired after a connection that stayed up is
      // answered at once; repeated ones back off.
      this._tokenReason = 'token_expired';
      delay = link && link._established && !this._reauthing ? 0 : this._backoff.next();
      this._reauthing = true;
    } else {
      delay = info.delayMs > 0 ? info.delayMs : this._backoff.next();
    }
    this._setState(RECONNECTING, { ...about, delayMs: delay });
    this._timer = this._later(() => {
      this._timer = null;
      this._attempt();
    }, delay);
  }

  // ---- delivery ----

  _deliver(pub) {
    const sub = pub && this._subs.get(pub.channel);
    if (!sub || !sub.active) return;
    const v = sub._state.accept(pub);
    if (v.gap) this._gap(sub, v.gap);
    if (v.deliver) sub._emit('publication', pub);
  }

  // _gap reports a gap; recovery is the server's reason when a resume failed.
  _gap(sub, reason, recovery) {
    const p = sub.position;
    sub._emit('gap', { channel: sub.channel, reason, recovery, offset: p.offset, epoch: p.epoch });
  }

  // _subscribed applies a subscription result (WebSocket reply, SSE
  // event); with recovered: false, its reason says why.
  _subscribed(sub, result) {
    const resumed = sub.position !== null;
    sub._backoff.reset();
    const gap = sub._state.subscribed(result);
    const recovery = result.recovered ? undefined : result.reason;
    sub._set('subscribed', { recovered: Boolean(result.recovered), gap, recovery });
    sub._resolve(result);
    if (gap) this._gap(sub, gap, recovery);
    else if (resumed && result.recovered) sub._emit('recovered', { channel: sub.channel, offset: result.offset, epoch: result.epoch });
    this._synced(sub, gap, recovery);
  }

  // _ended ends a subscription for good (refused, or ended by the server).
  _ended(sub, err) {
    if (this._subs.get(sub.channel) === sub) this._subs.delete(sub.channel);
    sub._retry = this._cancel(sub._retry);
    sub._reject(err);
    sub._emit('error', err);
    sub._set('unsubscribed', { reason: err.code, error: err });
    this._synced(sub, null);
  }

  _unsubscribe(sub) {
    if (sub.closed) return;
    const wasActive = sub.active;
    sub._retry = this._cancel(sub._retry);
    if (this._subs.get(sub.channel) === sub) this._subs.delete(sub.channel);
    sub._reject(new HeraldError('unsubscribed', sub.channel));
    sub._set('unsubscribed', { reason: 'unsubscribed' });
    this._synced(sub, null);
    if (this._wanted) this._driver.removed(this, sub, wasActive);
  }

  // _retrySoon subscribes sub again after its backoff, on the same connection.
  _retrySoon(sub, link) {
    this._cancel(sub._retry);
    sub._retry = this._later(() => {
      sub._retry = null;
      if (link === this._link) this._driver.resubscribe(this, sub, link);
    }, sub._backoff.next());
  }

  // _serverUnsubscribed handles the server ending one subscription: with
  // resubscribe it subscribes again after a backoff, else it ends.
  _serverUnsubscribed(link, frame) {
    if (!frame || link !== this._link) return;
    const sub = this._subs.get(frame.channel);
    if (!sub) return;
    const err = new HeraldError(String(frame.reason || 'unsubscribed'), String(frame.message || `the server ended the subscription to "${frame.channel}"`), {
      temporary: Boolean(frame.resubscribe),
    });
    if (!frame.resubscribe) return this._ended(sub, err);
    sub._set('subscribing', { reason: err.code });
    this._retrySoon(sub, link);
  }
}
