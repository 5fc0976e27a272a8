// Herald client: an ES module with no dependencies, for browsers and Node.
//
// It speaks both of Herald's client transports (docs/protocol.md):
//
//   - "ws":  the herald.v1 WebSocket protocol (GET /v1/ws): subscribe and
//            unsubscribe without reconnecting, publish, in-band token refresh;
//   - "sse": Server-Sent Events (GET /v1/sse): one stream carrying every
//            subscribed channel, through EventSource in browsers, or over
//            fetch streaming (FetchEventSource below) where there is none.
//
// Per channel it tracks the position (offset, epoch) of the last publication
// and resumes from it after every reconnect; it reconnects with bounded
// exponential backoff and full jitter, honours the server's disconnect
// reasons, close codes and delay hints, calls onGap when the server could not
// fill a gap (the app must refresh its authoritative state), and drops
// duplicate and replayed publications. See clientjs/README.md.

/** The WebSocket subprotocol this client speaks. */
export const PROTOCOL = 'herald.v1';

/** Client states reported to onStateChange. */
export const States = Object.freeze({
  IDLE: 'idle', // not started, or SSE with no channel to stream
  CONNECTING: 'connecting', // fetching a token, opening the connection
  CONNECTED: 'connected', // WebSocket connected / SSE stream open
  RECONNECTING: 'reconnecting', // waiting (backoff or server delay) to reconnect
  CLOSED: 'closed', // closed by close(), or the server said not to reconnect
});

// Disconnect reasons after which the same request would fail again
// (docs/protocol.md, "Disconnect reasons").
const NO_RECONNECT = new Set(['bad_request', 'unauthorized', 'forbidden', 'message_too_big', 'protocol_error', 'revoked']);

// Requests that count against the server's max_inflight.
const COUNTED_OPS = new Set(['subscribe', 'publish', 'refresh']);

/**
 * HeraldError is every error this client reports: an error reply of the
 * server (code from docs/protocol.md "Error codes"), a refused stream or
 * connection (a disconnect reason), or a client-side condition:
 * "disconnected", "closed", "not_connected", "not_supported", "token_error",
 * "invalid_argument".
 */
export class HeraldError extends Error {
  /**
   * @param {string} code
   * @param {string} [message]
   * @param {{temporary?: boolean, op?: string, status?: number, closeCode?: number, cause?: unknown}} [extra]
   */
  constructor(code, message, extra = {}) {
    super(message || code, extra.cause === undefined ? undefined : { cause: extra.cause });
    this.name = 'HeraldError';
    /** Stable snake_case code. */
    this.code = code;
    /** True when the same request may succeed later unchanged. */
    this.temporary = Boolean(extra.temporary);
    if (extra.op !== undefined) this.op = extra.op;
    if (extra.status !== undefined) this.status = extra.status;
    if (extra.closeCode !== undefined) this.closeCode = extra.closeCode;
  }
}

/**
 * What a client does after a WebSocket close code (docs/protocol.md, close
 * code ranges): "stop" for 4500–4599 (the same request would fail again),
 * "reauth" for 4100–4199 (fetch a fresh token, then reconnect), "reconnect"
 * for everything else (4000–4099, the standard 1000–1015, unknown codes).
 * @param {number} code
 * @returns {'reconnect'|'reauth'|'stop'}
 */
export function closeAction(code) {
  if (code >= 4500 && code <= 4599) return 'stop';
  if (code >= 4100 && code <= 4199) return 'reauth';
  return 'reconnect';
}

/**
 * What a client does after a disconnect reason (an SSE disconnect event, a
 * WebSocket disconnect push, or the error code of a refused request).
 * @param {string} reason
 * @param {boolean} [reconnect] the server's "reconnect" flag, when it sent one
 * @returns {'reconnect'|'reauth'|'stop'}
 */
export function reasonAction(reason, reconnect) {
  if (reason === 'token_expired') return 'reauth';
  if (reconnect === false || NO_RECONNECT.has(reason)) return 'stop';
  return 'reconnect';
}

/**
 * Backoff computes bounded exponential reconnect delays with jitter.
 * The n-th delay (n from 0) is drawn from [0, cap] ("full" jitter),
 * [cap/2, cap] ("half") or is cap ("none"), with
 * cap = min(maxMs, initialMs · factor^n).
 */
export class Backoff {
  /**
   * @param {{initialMs?: number, maxMs?: number, factor?: number, jitter?: 'full'|'half'|'none',
   *          resetAfterMs?: number, random?: () => number}} [options]
   *   initialMs default 500; maxMs default 30000; factor default 2; jitter
   *   default "full"; resetAfterMs (used by HeraldClient: a connection that
   *   stayed up this long resets the backoff) default 5000; random default
   *   Math.random.
   */
  constructor(options = {}) {
    const o = { initialMs: 500, maxMs: 30000, factor: 2, jitter: 'full', resetAfterMs: 5000, random: Math.random, ...options };
    if (!(o.initialMs > 0) || !Number.isFinite(o.initialMs)) throw new HeraldError('invalid_argument', `backoff.initialMs must be a positive number, got ${o.initialMs}`);
    if (!(o.maxMs >= o.initialMs) || !Number.isFinite(o.maxMs)) throw new HeraldError('invalid_argument', `backoff.maxMs must be a number ≥ initialMs (${o.initialMs}), got ${o.maxMs}`);
    if (!(o.factor >= 1) || !Number.isFinite(o.factor)) throw new HeraldError('invalid_argument', `backoff.factor must be a number ≥ 1, got ${o.factor}`);
    if (!['full', 'half', 'none'].includes(o.jitter)) throw new HeraldError('invalid_argument', `backoff.jitter must be "full", "half" or "none", got ${o.jitter}`);
    if (!(o.resetAfterMs >= 0)) throw new HeraldError('invalid_argument', `backoff.resetAfterMs must be ≥ 0, got ${o.resetAfterMs}`);
    if (typeof o.random !== 'function') throw new HeraldError('invalid_argument', 'backoff.random must be a function');
    this.options = o;
    this._attempt = 0;
  }

  /** How many delays were handed out since the last reset. */
  get attempt() {
    return this._attempt;
  }

  /** The largest delay the attempt-th draw may return. */
  cap(attempt = this._attempt) {
    const o = this.options;
    return Math.min(o.maxMs, o.initialMs * Math.pow(o.factor, attempt));
  }

  /** The next delay in milliseconds; never more than maxMs. */
  next() {
    const cap = this.cap();
    if (this._attempt < 1000) this._attempt++;
    const r = Math.min(Math.max(this.options.random(), 0), 1);
    switch (this.options.jitter) {
      case 'none':
        return Math.round(cap);
      case 'half':
        return Math.round(cap / 2 + (r * cap) / 2);
      default:
        return Math.round(r * cap);
    }
  }

  /** Starts over from initialMs. */
  reset() {
    this._attempt = 0;
  }
}

/**
 * latestWins returns a filter for applying absolute state: accept(item) is
 * true when item is newer than every item of the same key seen before
 * (versionFn(item) greater than the kept one), and keeps it; older and
 * equal versions (duplicates, reordered updates) return false. Versions
 * compare with < and >: numbers, bigints, or strings that sort (ISO 8601
 * UTC times). An item whose version is null, undefined or NaN is refused.
 *
 *   const orders = latestWins(p => p.data.id, p => p.data.version);
 *   onPublication: p => { if (orders(p)) render(p.data); }
 *
 * The filter also has get(key), version(key), has(key), delete(key),
 * clear(), values() and size.
 * @template T
 * @param {(item: T) => unknown} keyFn
 * @param {(item: T) => number|bigint|string} versionFn
 */
export function latestWins(keyFn, versionFn) {
  if (typeof keyFn !== 'function' || typeof versionFn !== 'function') {
    throw new HeraldError('invalid_argument', 'latestWins(keyFn, versionFn): both must be functions');
  }
  const latest = new Map();
  /** @param {T} item */
  function accept(item) {
    const version = versionFn(item);
    if (version === null || version === undefined || (typeof version === 'number' && Number.isNaN(version))) return false;
    const key = keyFn(item);
    const cur = latest.get(key);
    if (cur !== undefined && !(version > cur.version)) return false;
    latest.set(key, { version, item });
    return true;
  }
  accept.get = (key) => latest.get(key)?.item;
  accept.version = (key) => latest.get(key)?.version;
  accept.has = (key) => latest.has(key);
  accept.delete = (key) => latest.delete(key);
  accept.clear = () => latest.clear();
  accept.values = () => Array.from(latest.values(), (e) => e.item);
  Object.defineProperty(accept, 'size', { get: () => latest.size });
  return accept;
}

/**
 * ChannelState is one channel's resume position and recent message ids.
 * HeraldClient keeps one per subscription; it is exported for tests and for
 * apps that consume publications from elsewhere.
 */
export class ChannelState {
  /**
   * @param {number} [maxIds] message ids remembered for de-duplication (LRU), default 1000
   * @param {{offset: number, epoch: string}|null} [position] a position to resume from
   */
  constructor(maxIds = 1000, position = null) {
    this.maxIds = Math.max(1, maxIds | 0);
    /** @type {number|undefined} */
    this.offset = undefined;
    /** @type {string|undefined} */
    this.epoch = undefined;
    this._ids = new Map();
    if (position && typeof position.epoch === 'string' && position.epoch !== '' && Number.isSafeInteger(position.offset)) {
      this.offset = position.offset;
      this.epoch = position.epoch;
    }
  }

  /** The resume position, or null before the first subscription. */
  get position() {
    return this.epoch === undefined ? null : { offset: this.offset, epoch: this.epoch };
  }

  /**
   * Applies a subscription result ({recovered, offset, epoch}: the channel's
   * position when the subscription began). Returns the gap reason when the
   * channel had a position the server could not resume: "epoch_changed"
   * (history lost) or "not_recovered" (history too short); else null.
   */
  subscribed(result) {
    const had = this.epoch !== undefined;
    let gap = null;
    if (had && !result.recovered) gap = result.epoch !== this.epoch ? 'epoch_changed' : 'not_recovered';
    if (!result.recovered || !had) {
      this.offset = result.offset;
      this.epoch = result.epoch;
    }
    return gap;
  }

  /**
   * Decides about one publication. It advances the position for every
   * publication past it, and returns {deliver, gap}: deliver is false for a
   * publication at or before the position in the same epoch (a replay) and
   * for a message id seen recently (a duplicate); gap is "epoch_changed" or
   * "offset_gap" when publications were evidently missed, else null.
   */
  accept(pub) {
    if (pub.epoch === this.epoch && pub.offset <= this.offset) return { deliver: false, gap: null };
    let gap = null;
    if (this.epoch !== undefined && pub.epoch !== this.epoch) gap = 'epoch_changed';
    else if (this.epoch !== undefined && pub.offset > this.offset + 1) gap = 'offset_gap';
    this.offset = pub.offset;
    this.epoch = pub.epoch;
    if (pub.id !== undefined && this._ids.has(pub.id)) {
      this._ids.delete(pub.id);
      this._ids.set(pub.id, true);
      return { deliver: false, gap };
    }
    if (pub.id !== undefined) {
      this._ids.set(pub.id, true);
      if (this._ids.size > this.maxIds) this._ids.delete(this._ids.keys().next().value);
    }
    return { deliver: true, gap };
  }
}

/**
 * Subscription is one channel of a HeraldClient. Create it with
 * client.subscribe(channel, handlers).
 */
export class Subscription {
  constructor(client, channel, handlers) {
    this._client = client;
    /** The channel name (without the tenant). */
    this.channel = channel;
    this._handlers = handlers;
    this._state = new ChannelState(client._options.maxIds, handlers.since || null);
    this._status = 'pending'; // pending | active | closed
    this._retry = null; // timer of a retried subscribe
    this._inflight = null; // the running WebSocket subscribe request
    this._backoff = new Backoff(client._options.backoff);
    let resolve, reject;
    /** Settles with the first subscription result, or the error that ended it. */
    this.ready = new Promise((res, rej) => {
      resolve = res;
      reject = rej;
    });
    this.ready.catch(() => {});
    this._resolve = resolve;
    this._reject = reject;
  }

  /** The resume position: {offset, epoch} of the last publication, or null. */
  get position() {
    return this._state.position;
  }

  /** True while the server delivers this channel. */
  get active() {
    return this._status === 'active';
  }

  /** True once unsubscribed, or ended by the server or a refusal. */
  get closed() {
    return this._status === 'closed';
  }

  /** Stops the subscription. Safe to call twice. */
  unsubscribe() {
    this._client._unsubscribe(this);
  }
}

/**
 * FetchEventSource is an EventSource-compatible reader of text/event-stream
 * over fetch streaming, for runtimes without EventSource (Node) and for
 * sending headers. Unlike EventSource it never reconnects by itself: on a
 * refused request or an ended stream it fires "error" and is CLOSED; the
 * error event of a refused request carries status, code, message and
 * retryAfterMs (from the JSON body and Retry-After). With idleTimeoutMs, a
 * stream that receives no bytes at all (not even a heartbeat comment) for
 * that long is given up as dead.
 */
export class FetchEventSource {
  /**
   * @param {string|URL} url
   * @param {{headers?: Record<string,string>, fetch?: typeof fetch, withCredentials?: boolean, idleTimeoutMs?: number}} [init]
   */
  constructor(url, init = {}) {
    this.url = String(url);
    this.withCredentials = Boolean(init.withCredentials);
    this.readyState = FetchEventSource.CONNECTING;
    this.onopen = null;
    this.onmessage = null;
    this.onerror = null;
    this._listeners = new Map();
    this._abort = new AbortController();
    this._type = '';
    this._data = [];
    this._lastId = '';
    this._buf = '';
    this._cr = false;
    this._idleMs = init.idleTimeoutMs > 0 ? init.idleTimeoutMs : 0;
    this._idle = null;
    const f = init.fetch || globalThis.fetch;
    const headers = { Accept: 'text/event-stream', 'Cache-Control': 'no-cache', ...(init.headers || {}) };
    Promise.resolve().then(() => this._run(f, headers));
  }

  addEventListener(type, fn) {
    if (typeof fn !== 'function') return;
    if (!this._listeners.has(type)) this._listeners.set(type, new Set());
    this._listeners.get(type).add(fn);
  }

  removeEventListener(type, fn) {
    this._listeners.get(type)?.delete(fn);
  }

  /** Ends the stream. */
  close() {
    if (this.readyState === FetchEventSource.CLOSED) return;
    this.readyState = FetchEventSource.CLOSED;
    this._disarm();
    this._abort.abort();
  }

  // _arm restarts the idle timer (on every chunk received).
  _arm() {
    if (this._idleMs <= 0) return;
    this._disarm();
    this._idle = setTimeout(() => {
      this._idle = null;
      this._fail({ error: new HeraldError('timeout', `nothing received for ${this._idleMs} ms`, { temporary: true }) });
    }, this._idleMs);
  }

  _disarm() {
    if (this._idle !== null) {
      clearTimeout(this._idle);
      this._idle = null;
    }
  }

  _dispatch(ev) {
    const on = this['on' + ev.type];
    if ((ev.type === 'open' || ev.type === 'message' || ev.type === 'error') && typeof on === 'function') on.call(this, ev);
    for (const fn of [...(this._listeners.get(ev.type) || [])]) fn.call(this, ev);
  }

  _fail(extra) {
    if (this.readyState === FetchEventSource.CLOSED) return;
    this.readyState = FetchEventSource.CLOSED;
    this._disarm();
    this._abort.abort();
    this._dispatch({ type: 'error', target: this, ...extra });
  }

  async _run(f, headers) {
    let res;
    try {
      if (typeof f !== 'function') throw new HeraldError('not_supported', 'no fetch in this runtime');
      res = await f(this.url, {
        headers,
        signal: this._abort.signal,
        credentials: this.withCredentials ? 'include' : 'same-origin',
      });
    } catch (error) {
      this._fail({ error });
      return;
    }
    if (this.readyState === FetchEventSource.CLOSED) {
      res.body?.cancel().catch(() => {});
      return;
    }
    const type = res.headers.get('content-type') || '';
    if (res.status !== 200 || !type.startsWith('text/event-stream')) {
      const info = await readRefusal(res);
      this._fail(info);
      return;
    }
    this.readyState = FetchEventSource.OPEN;
    this._arm();
    this._dispatch({ type: 'open', target: this });
    const decoder = new TextDecoder();
    try {
      const reader = res.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done || this.readyState === FetchEventSource.CLOSED) break;
        this._arm();
        this._feed(decoder.decode(value, { stream: true }));
      }
    } catch (error) {
      this._fail({ error });
      return;
    }
    this._fail({});
  }

  // _feed splits text into lines (CRLF, CR or LF) and handles each.
  _feed(text) {
    if (this._cr && text.startsWith('\n')) text = text.slice(1);
    this._cr = text.endsWith('\r');
    this._buf += text.replace(/\r\n?/g, '\n');
    let start = 0;
    let i;
    while ((i = this._buf.indexOf('\n', start)) >= 0) {
      this._line(this._buf.slice(start, i));
      start = i + 1;
      if (this.readyState === FetchEventSource.CLOSED) return;
    }
    this._buf = this._buf.slice(start);
  }

  _line(line) {
    if (line === '') {
      if (this._data.length > 0) {
        const ev = { type: this._type || 'message', data: this._data.join('\n'), lastEventId: this._lastId, origin: originOf(this.url), target: this };
        this._type = '';
        this._data = [];
        this._dispatch(ev);
      }
      this._type = '';
      return;
    }
    if (line[0] === ':') return;
    const c = line.indexOf(':');
    const field = c < 0 ? line : line.slice(0, c);
    let value = c < 0 ? '' : line.slice(c + 1);
    if (value[0] === ' ') value = value.slice(1);
    switch (field) {
      case 'event':
        this._type = value;
        break;
      case 'data':
        this._data.push(value);
        break;
      case 'id':
        if (!value.includes('\0')) this._lastId = value;
        break;
      default: // retry and unknown fields: this source never reconnects by itself
    }
  }
}
FetchEventSource.CONNECTING = 0;
FetchEventSource.OPEN = 1;
FetchEventSource.CLOSED = 2;

function originOf(url) {
  try {
    return new URL(url).origin;
  } catch {
    return '';
  }
}

// readRefusal reads the status, the JSON error body and Retry-After of a
// refused request.
async function readRefusal(res) {
  const info = { status: res.status, code: '', message: '', retryAfterMs: retryAfterMs(res.headers.get('retry-after')) };
  try {
    const text = (await res.text()).slice(0, 4096);
    const body = JSON.parse(text);
    if (body && body.error && typeof body.error.code === 'string') {
      info.code = body.error.code;
      info.message = String(body.error.message || '');
    }
  } catch {
    // not JSON: the status alone tells
  }
  if (!info.code) info.code = codeForStatus(res.status);
  return info;
}

function retryAfterMs(h) {
  if (!h) return undefined;
  if (/^\d+$/.test(h.trim())) return Number(h.trim()) * 1000;
  const t = Date.parse(h);
  return Number.isNaN(t) ? undefined : Math.max(0, t - Date.now());
}

function codeForStatus(status) {
  switch (status) {
    case 400:
      return 'bad_request';
    case 401:
      return 'unauthorized';
    case 403:
      return 'forbidden';
    case 404:
      return 'not_found';
    case 429:
      return 'too_many_requests';
    case 503:
      return 'too_many_connections';
    default:
      return 'server_error';
  }
}

// endpoint appends path to the base URL's path, mapping the scheme for
// WebSocket (ws/wss) or HTTP (http/https) use.
function endpoint(base, path, ws) {
  const u = new URL(base);
  const scheme = u.protocol.replace(':', '');
  const secure = scheme === 'https' || scheme === 'wss';
  u.protocol = ws ? (secure ? 'wss:' : 'ws:') : secure ? 'https:' : 'http:';
  u.pathname = u.pathname.replace(/\/+$/, '') + path;
  u.search = '';
  u.hash = '';
  return u;
}

/**
 * HeraldClient connects to Herald over the WebSocket (herald.v1) or SSE,
 * keeps the subscribed channels resumed across reconnects, and delivers
 * each publication once, in offset order per channel.
 */
export class HeraldClient {
  /**
   * @param {object} options see clientjs/README.md and herald.d.ts
   */
  constructor(options = {}) {
    const o = {
      url: undefined,
      transport: 'ws',
      getToken: undefined,
      WebSocket: undefined,
      EventSource: undefined,
      fetch: undefined,
      backoff: {},
      onStateChange: undefined,
      onError: undefined,
      refreshRatio: 0.8,
      requestTimeoutMs: 10000,
      maxIds: 1000,
      sseIdleTimeoutMs: 45000,
      clock: undefined,
      ...options,
    };
    if (o.url === undefined && globalThis.location) o.url = globalThis.location.origin;
    let base;
    try {
      base = new URL(String(o.url), globalThis.location ? globalThis.location.href : undefined);
    } catch {
      throw new HeraldError('invalid_argument', `url must be Herald's base URL (http://host:port), got ${o.url}`);
    }
    if (o.transport !== 'ws' && o.transport !== 'sse') throw new HeraldError('invalid_argument', `transport must be "ws" or "sse", got ${o.transport}`);
    if (typeof o.getToken !== 'function') throw new HeraldError('invalid_argument', 'getToken must be an async function returning a JWT');
    if (!(o.refreshRatio >= 0 && o.refreshRatio < 1)) throw new HeraldError('invalid_argument', `refreshRatio must be in [0, 1), got ${o.refreshRatio}`);
    if (!(o.sseIdleTimeoutMs >= 0)) throw new HeraldError('invalid_argument', `sseIdleTimeoutMs must be ≥ 0 (0 = none), got ${o.sseIdleTimeoutMs}`);
    if (!(o.maxIds >= 1)) throw new HeraldError('invalid_argument', `maxIds must be ≥ 1, got ${o.maxIds}`);
    if (!(o.requestTimeoutMs > 0)) throw new HeraldError('invalid_argument', `requestTimeoutMs must be positive, got ${o.requestTimeoutMs}`);
    this._options = o;
    this._backoff = new Backoff(o.backoff);
    this._clock = o.clock || { setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (t) => clearTimeout(t), now: () => Date.now() };
    this._fetch = o.fetch || (typeof globalThis.fetch === 'function' ? globalThis.fetch.bind(globalThis) : null);
    if (o.transport === 'ws') {
      this._WebSocket = o.WebSocket || globalThis.WebSocket;
      if (typeof this._WebSocket !== 'function') {
        throw new HeraldError('not_supported', 'no WebSocket in this runtime: pass the WebSocket option (Node 20: run with --experimental-websocket)');
      }
      this._wsUrl = endpoint(base, '/v1/ws', true).toString();
    } else {
      // With an EventSource (the browser's, or one passed in) credentials go
      // in the URL (ticket, else access_token); without one, FetchEventSource
      // sends them as a header.
      this._EventSource = o.EventSource || globalThis.EventSource || null;
      if (!this._EventSource && !this._fetch) throw new HeraldError('not_supported', 'no EventSource and no fetch in this runtime');
      this._sseUrl = endpoint(base, '/v1/sse', false);
      this._ticketUrl = endpoint(base, '/v1/tickets', false).toString();
      this._ticketsMissing = false;
      this._cursor = '';
    }
    /** @type {Map<string, Subscription>} */
    this._subs = new Map();
    this._unsubPending = new Map();
    this._state = States.IDLE;
    this._wanted = false;
    this._gen = 0;
    this._link = null;
    this._timer = null;
    this._stableTimer = null;
    this._tokenReason = 'connect';
    this._waiters = [];
    this._restartQueued = false;
    this._reauthing = false;
    this.lastError = null;
  }

  /** The current state: one of States. */
  get state() {
    return this._state;
  }

  /** The transport: "ws" or "sse". */
  get transport() {
    return this._options.transport;
  }

  /** Resume positions of every subscribed channel: {channel: {offset, epoch}}. */
  positions() {
    const out = {};
    for (const [ch, s] of this._subs) if (s.position) out[ch] = s.position;
    return out;
  }

  /**
   * Starts connecting (subscribe and publish do it too). Resolves when
   * connected (SSE: when a stream opens, so after the first subscribe);
   * rejects when the client closes first. Safe to call again.
   */
  connect() {
    const p = new Promise((resolve, reject) => {
      if (this._state === States.CONNECTED) resolve();
      else this._waiters.push({ resolve, reject });
    });
    if (!this._wanted) {
      this._wanted = true;
      this._backoff.reset();
      this.lastError = null;
      this._attempt();
    }
    return p;
  }

  /** Closes the connection and stops reconnecting; subscriptions are kept for a later connect(). */
  close() {
    this._wanted = false;
    this._gen++;
    this._clearTimer();
    this._clearStable();
    if (this._link) {
      this._link.close();
      this._link = null;
    }
    for (const s of this._subs.values()) {
      if (s._status === 'active') s._status = 'pending';
      this._clearRetry(s);
    }
    this._setState(States.CLOSED, { reason: 'client_closed' });
  }

  /**
   * Subscribes to a channel. handlers: onPublication(pub) for each new
   * publication; onGap({channel, reason, offset, epoch}) when publications
   * were missed and the app must refresh its authoritative state;
   * onRecovered({channel, offset, epoch}) after a resume that missed
   * nothing; onError(err) when the subscription ends for good; since:
   * {offset, epoch} to resume from a saved position; token: a subscription
   * token (for a channel no grant of the connection token covers), or an
   * async function returning one (called before every (re)subscription).
   * @returns {Subscription}
   */
  subscribe(channel, handlers = {}) {
    if (typeof channel !== 'string' || channel === '') throw new HeraldError('invalid_argument', 'channel must be a non-empty string');
    if (this._subs.has(channel)) throw new HeraldError('already_subscribed', `already subscribed to "${channel}": unsubscribe first`);
    const sub = new Subscription(this, channel, handlers);
    this._subs.set(channel, sub);
    if (!this._wanted) {
      this.connect().catch(() => {});
    } else if (this.transport === 'ws') {
      if (this._state === States.CONNECTED && this._link) this._wsSubscribe(sub, this._link);
    } else {
      this._sseChannelsChanged();
    }
    return sub;
  }

  /**
   * Publishes on an interactive channel (WebSocket only; the token needs a
   * publish grant for it). Waits up to requestTimeoutMs for a connection.
   * Resolves with {id, offset, epoch}; rejects with a HeraldError
   * ("forbidden", "bad_request", "server_error" (temporary), "disconnected"
   * when the connection dropped before the reply: the publication may or may
   * not have happened).
   */
  async publish(channel, type, data, { schemaVersion = 1 } = {}) {
    if (this.transport !== 'ws') throw new HeraldError('not_supported', 'publish needs the WebSocket transport', { op: 'publish' });
    if (data === undefined) throw new HeraldError('invalid_argument', 'data is required (any JSON value, null included)', { op: 'publish' });
    if (!this._wanted) this.connect().catch(() => {});
    const link = await this._connectedLink('publish');
    return link.request('publish', { channel, type, schema_version: schemaVersion, data });
  }

  // ---- connection lifecycle ----

  _connectedLink(op) {
    if (this._state === States.CONNECTED && this._link) return Promise.resolve(this._link);
    return new Promise((resolve, reject) => {
      const t = this._clock.setTimeout(() => {
        w.done = true;
        reject(new HeraldError('not_connected', `not connected within ${this._options.requestTimeoutMs} ms`, { temporary: true, op }));
      }, this._options.requestTimeoutMs);
      const w = {
        done: false,
        resolve: () => {
          if (w.done) return;
          w.done = true;
          this._clock.clearTimeout(t);
          resolve(this._link);
        },
        reject: (e) => {
          if (w.done) return;
          w.done = true;
          this._clock.clearTimeout(t);
          reject(e);
        },
      };
      this._waiters.push(w);
    });
  }

  _setState(state, info = {}) {
    const previous = this._state;
    this._state = state;
    if (state === States.CONNECTED) {
      const ws = this._waiters;
      this._waiters = [];
      for (const w of ws) w.resolve();
    } else if (state === States.CLOSED) {
      const ws = this._waiters;
      this._waiters = [];
      const err = info.error || new HeraldError('closed', 'the client is closed');
      for (const w of ws) w.reject(err);
    }
    if (previous === state && state !== States.RECONNECTING) return;
    this._call(this._options.onStateChange, { state, previous, ...info });
  }

  _call(fn, arg) {
    if (typeof fn !== 'function') return;
    try {
      fn(arg);
    } catch (e) {
      this._report(e);
    }
  }

  _report(err) {
    if (typeof this._options.onError === 'function') {
      try {
        this._options.onError(err);
      } catch {
        // the error handler itself failed: nothing more to do
      }
    } else if (typeof console !== 'undefined') {
      console.error('herald:', err);
    }
  }

  _clearTimer() {
    if (this._timer !== null) {
      this._clock.clearTimeout(this._timer);
      this._timer = null;
    }
  }

  _clearStable() {
    if (this._stableTimer !== null) {
      this._clock.clearTimeout(this._stableTimer);
      this._stableTimer = null;
    }
  }

  _clearRetry(sub) {
    if (sub._retry !== null) {
      this._clock.clearTimeout(sub._retry);
      sub._retry = null;
    }
  }

  // _attempt fetches a token and opens one connection.
  async _attempt() {
    this._clearTimer();
    if (!this._wanted) return;
    const gen = ++this._gen;
    if (this.transport === 'sse' && this._subs.size === 0) {
      this._setState(States.IDLE, { reason: 'no_channels' });
      return;
    }
    this._setState(States.CONNECTING);
    const reason = this._tokenReason;
    let token;
    try {
      token = await this._options.getToken({ reason });
    } catch (e) {
      if (gen !== this._gen) return;
      this._linkDown(null, { action: 'reconnect', reason: 'token_error', error: new HeraldError('token_error', `getToken failed: ${e && e.message}`, { temporary: true, cause: e }) });
      return;
    }
    if (gen !== this._gen || !this._wanted) return;
    if (typeof token !== 'string' || token === '') {
      this._linkDown(null, { action: 'stop', reason: 'unauthorized', error: new HeraldError('unauthorized', 'getToken returned no token') });
      return;
    }
    this._tokenReason = 'connect';
    this._link = this.transport === 'ws' ? new WsLink(this, token) : new SseLink(this, token, [...this._subs.keys()]);
  }

  // _linkUp runs when a connection is established.
  _linkUp(link, info = {}) {
    if (link !== this._link) return;
    this._clearStable();
    const resetAfter = this._backoff.options.resetAfterMs;
    this._stableTimer = this._clock.setTimeout(() => {
      this._stableTimer = null;
      this._backoff.reset();
      this._reauthing = false;
    }, resetAfter);
    this.lastError = null;
    this._setState(States.CONNECTED, info);
    if (this.transport === 'ws') for (const sub of this._subs.values()) this._wsSubscribe(sub, link);
  }

  // _linkDown decides what follows the end of a connection (or of an
  // attempt): info.action ("reconnect" | "reauth" | "stop"), info.reason,
  // info.delayMs (the server's hint), info.error.
  _linkDown(link, info) {
    if (link !== null && link !== this._link) return;
    this._link = null;
    this._clearStable();
    for (const s of this._subs.values()) {
      if (s._status === 'active') s._status = 'pending';
      this._clearRetry(s);
    }
    if (!this._wanted) return;
    this._gen++;
    const error = info.error || new HeraldError(info.reason || 'disconnected', info.message || `connection ended: ${info.reason || 'network'}`, {
      temporary: info.action !== 'stop',
      status: info.status,
      closeCode: info.closeCode,
    });
    this.lastError = error;
    if (info.action === 'stop') {
      this._wanted = false;
      this._setState(States.CLOSED, { reason: info.reason, closeCode: info.closeCode, error });
      return;
    }
    let delay;
    if (info.action === 'reauth') {
      // The first token_expired after a connection that stayed up is
      // answered at once; repeated ones back off.
      this._tokenReason = 'token_expired';
      delay = link && link.established && !this._reauthing ? 0 : this._backoff.next();
      this._reauthing = true;
    } else {
      delay = info.delayMs > 0 ? info.delayMs : this._backoff.next();
    }
    this._setState(States.RECONNECTING, { reason: info.reason, closeCode: info.closeCode, delayMs: delay, error });
    this._timer = this._clock.setTimeout(() => {
      this._timer = null;
      this._attempt();
    }, delay);
  }

  // ---- delivery ----

  _deliver(pub) {
    if (!pub || typeof pub.channel !== 'string') return;
    const sub = this._subs.get(pub.channel);
    if (!sub || sub._status !== 'active') return;
    const v = sub._state.accept(pub);
    if (v.gap) this._gap(sub, v.gap);
    if (v.deliver) this._call(sub._handlers.onPublication, pub);
  }

  _gap(sub, reason) {
    const pos = sub._state.position;
    this._call(sub._handlers.onGap, { channel: sub.channel, reason, offset: pos.offset, epoch: pos.epoch });
  }

  // _subscribed applies a subscription result (WS reply, SSE subscribed event).
  _subscribed(sub, result) {
    const resumed = sub._state.position !== null;
    sub._status = 'active';
    sub._backoff.reset();
    const gap = sub._state.subscribed(result);
    sub._resolve(result);
    if (gap) this._gap(sub, gap);
    else if (resumed && result.recovered) this._call(sub._handlers.onRecovered, { channel: sub.channel, offset: result.offset, epoch: result.epoch });
  }

  // _ended ends a subscription for good (refused, or ended by the server).
  _ended(sub, err) {
    if (this._subs.get(sub.channel) === sub) this._subs.delete(sub.channel);
    sub._status = 'closed';
    this._clearRetry(sub);
    sub._reject(err);
    this._call(sub._handlers.onError, err);
  }

  _unsubscribe(sub) {
    if (sub._status === 'closed') return;
    const wasActive = sub._status === 'active';
    sub._status = 'closed';
    this._clearRetry(sub);
    if (this._subs.get(sub.channel) === sub) this._subs.delete(sub.channel);
    sub._reject(new HeraldError('unsubscribed', `unsubscribed from "${sub.channel}"`));
    if (this.transport === 'sse') {
      this._sseChannelsChanged();
      return;
    }
    const link = this._link;
    if (!link || this._state !== States.CONNECTED) return;
    if (wasActive) {
      this._wsUnsubscribe(sub.channel, link);
    } else if (sub._inflight) {
      // A subscribe still running is unsubscribed when its reply arrives
      // (the server refuses unsubscribe before it); a new subscription of
      // the channel waits for both.
      const ch = sub.channel;
      const p = sub._inflight
        .catch(() => {})
        .then(() => {
          const q = this._unsubPending.get(ch);
          return q !== p ? q : undefined;
        })
        .finally(() => {
          if (this._unsubPending.get(ch) === p) this._unsubPending.delete(ch);
        });
      this._unsubPending.set(ch, p);
    }
  }

  // ---- WebSocket subscriptions ----

  async _wsSubscribe(sub, link) {
    if (sub._status === 'closed') return;
    sub._status = 'pending';
    const pending = this._unsubPending.get(sub.channel);
    if (pending) await pending;
    const fields = { channel: sub.channel };
    const pos = sub._state.position;
    if (pos) fields.since = pos;
    try {
      const t = sub._handlers.token;
      if (typeof t === 'function') fields.token = await t();
      else if (typeof t === 'string' && t !== '') fields.token = t;
    } catch (e) {
      this._ended(sub, new HeraldError('token_error', `subscription token for "${sub.channel}": ${e && e.message}`, { cause: e }));
      return;
    }
    if (link !== this._link || sub._status === 'closed') return;
    const onResult = (result) => {
      if (sub._status === 'closed' || this._subs.get(sub.channel) !== sub) {
        if (link === this._link) this._wsUnsubscribe(sub.channel, link);
        return;
      }
      if (link === this._link) this._subscribed(sub, result);
    };
    sub._inflight = link.request('subscribe', fields, onResult);
    sub._inflight.catch((err) => this._wsSubscribeFailed(sub, link, err));
  }

  _wsSubscribeFailed(sub, link, err) {
    if (sub._status === 'closed' || link !== this._link) return;
    if (err.code === 'disconnected') return; // resubscribed after the reconnect
    if (err.temporary) {
      const delay = sub._backoff.next();
      sub._retry = this._clock.setTimeout(() => {
        sub._retry = null;
        if (link === this._link) this._wsSubscribe(sub, link);
      }, delay);
      return;
    }
    this._ended(sub, err);
  }

  _wsUnsubscribe(channel, link) {
    const p = link
      .request('unsubscribe', { channel })
      .catch(() => {})
      .finally(() => {
        if (this._unsubPending.get(channel) === p) this._unsubPending.delete(channel);
      });
    this._unsubPending.set(channel, p);
  }

  // _serverUnsubscribed handles the server ending one subscription (the
  // WebSocket unsubscribed push, the SSE unsubscribed event): with
  // resubscribe it subscribes again after a backoff, resuming from the
  // position; without, the subscription ends with onError.
  _serverUnsubscribed(link, frame) {
    if (!frame || link !== this._link) return;
    const sub = this._subs.get(frame.channel);
    if (!sub) return;
    const err = new HeraldError(String(frame.reason || 'unsubscribed'), String(frame.message || `the server ended the subscription to "${frame.channel}"`), {
      temporary: Boolean(frame.resubscribe),
    });
    if (!frame.resubscribe) {
      this._ended(sub, err);
      return;
    }
    sub._status = 'pending';
    const delay = sub._backoff.next();
    this._clearRetry(sub);
    sub._retry = this._clock.setTimeout(() => {
      sub._retry = null;
      if (link !== this._link) return;
      if (this.transport === 'ws') this._wsSubscribe(sub, link);
      else this._sseChannelsChanged();
    }, delay);
  }

  // ---- SSE stream ----

  // _sseChannelsChanged reopens the stream (once per turn) for the new
  // channel set, resuming with the cursor.
  _sseChannelsChanged() {
    if (this._restartQueued) return;
    this._restartQueued = true;
    Promise.resolve().then(() => {
      this._restartQueued = false;
      if (!this._wanted) return;
      if (this._state === States.RECONNECTING) return; // the next attempt takes the new set
      if (this._link) {
        this._link.close();
        this._link = null;
      }
      this._clearStable();
      for (const s of this._subs.values()) if (s._status === 'active') s._status = 'pending';
      this._attempt();
    });
  }

  _sseSubscribed(link, data) {
    if (link !== this._link || !data || typeof data.channel !== 'string') return;
    const sub = this._subs.get(data.channel);
    if (!sub || sub._status === 'closed') return;
    this._subscribed(sub, { channel: data.channel, recovered: Boolean(data.recovered), offset: data.offset, epoch: data.epoch });
  }

  // _sseCredentials returns the query parameters or headers carrying token.
  async _sseCredentials(token) {
    if (!this._EventSource) return { headers: { Authorization: `Bearer ${token}` } };
    if (this._fetch && !this._ticketsMissing) {
      let res;
      try {
        res = await this._fetch(this._ticketUrl, { method: 'POST', headers: { Authorization: `Bearer ${token}` } });
      } catch (e) {
        return { fail: { action: 'reconnect', reason: 'network', message: `POST /v1/tickets: ${e && e.message}` } };
      }
      if (res.status === 404) {
        res.body?.cancel().catch(() => {});
        this._ticketsMissing = true;
      } else if (res.ok) {
        let body = null;
        try {
          body = await res.json();
        } catch {
          body = null;
        }
        if (body && typeof body.ticket === 'string' && body.ticket !== '') return { query: { ticket: body.ticket } };
        return { fail: { action: 'reconnect', reason: 'server_error', message: 'POST /v1/tickets answered without a ticket' } };
      } else {
        return { fail: refusalInfo(await readRefusal(res)) };
      }
    }
    return { query: { access_token: token } };
  }
}

// refusalInfo maps a refused HTTP request to a _linkDown info.
function refusalInfo(r) {
  return { action: reasonAction(r.code), reason: r.code, status: r.status, message: r.message || `refused: ${r.status} ${r.code}`, delayMs: r.retryAfterMs };
}

// WsLink is one WebSocket connection.
class WsLink {
  constructor(client, token) {
    this.client = client;
    this.established = false;
    this.ended = false;
    this.pending = new Map();
    this.queue = [];
    this.nextId = 1;
    this.inflight = 0;
    this.maxInflight = 16;
    this.push = null; // the server's disconnect push
    this.connectError = null;
    this.token = token;
    this.timers = { connect: null, watchdog: null, refresh: null, error: null };
    this.opened = false;
    this.refreshing = false;
    this.watchdogMs = 0;
    try {
      this.ws = new client._WebSocket(client._wsUrl, PROTOCOL);
    } catch (e) {
      this.ws = null;
      Promise.resolve().then(() => this._end({ action: 'reconnect', reason: 'network', message: `cannot open the WebSocket: ${e && e.message}` }));
      return;
    }
    this.ws.onopen = () => this._open();
    this.ws.onmessage = (ev) => this._message(ev);
    this.ws.onerror = () => this._error();
    this.ws.onclose = (ev) => this._closed(ev);
  }

  // _error handles the error event. Browsers follow it with a close event;
  // some runtimes (Node 20's WebSocket after a refused connection) do not,
  // so a socket that never opened ends here, and an open one soon.
  _error() {
    const info = { action: 'reconnect', reason: 'network', closeCode: 1006, message: 'the WebSocket failed' };
    if (!this.opened) {
      this._end(info);
    } else if (this.timers.error === null) {
      this.timers.error = this.client._clock.setTimeout(() => this._end(info), 1000);
    }
  }

  _open() {
    this.opened = true;
    const clock = this.client._clock;
    this.timers.connect = clock.setTimeout(() => {
      this._end({ action: 'reconnect', reason: 'timeout', message: 'no connect reply in time' });
    }, this.client._options.requestTimeoutMs);
    const connected = (result) => {
      clock.clearTimeout(this.timers.connect);
      this.established = true;
      if (result.limits && result.limits.max_inflight > 0) this.maxInflight = result.limits.max_inflight;
      if (result.ping_interval_ms > 0 && result.pong_timeout_ms > 0) this.watchdogMs = result.ping_interval_ms + result.pong_timeout_ms;
      this._kick();
      this._scheduleRefresh(result.expires_at);
      this.client._linkUp(this, { client: result.client, expiresAt: result.expires_at });
    };
    this.request('connect', { token: this.token }, connected).catch((err) => {
      clock.clearTimeout(this.timers.connect);
      this.connectError = err; // the server closes next, with the reason's code
    });
  }

  _message(ev) {
    if (this.ended || typeof ev.data !== 'string') return;
    this._kick();
    for (const line of ev.data.split('\n')) {
      if (line === '') continue;
      let f;
      try {
        f = JSON.parse(line);
      } catch {
        continue;
      }
      if (!f || typeof f !== 'object') continue;
      this._frame(f);
      if (this.ended) return;
    }
  }

  _frame(f) {
    if (typeof f.push === 'string') {
      switch (f.push) {
        case 'pub': {
          const { push, ...pub } = f;
          this.client._deliver(pub);
          break;
        }
        case 'ping':
          this._write({ op: 'pong' });
          break;
        case 'unsubscribed':
          this.client._serverUnsubscribed(this, f);
          break;
        case 'refresh':
          // The server asks for a fresh token before expires_at.
          this._refresh(Number(f.expires_at) || 0);
          break;
        case 'disconnect':
          this.push = f;
          break;
        default: // unknown pushes are ignored
      }
      return;
    }
    if (typeof f.id === 'number' && this.pending.has(f.id)) {
      this._settle(f.id, f);
      return;
    }
    if (f.error) this.client._report(new HeraldError(String(f.error.code), `herald: ${f.error.message}`));
  }

  // _kick restarts the liveness watchdog: a connection that received
  // nothing for ping_interval_ms + pong_timeout_ms is dead.
  _kick() {
    if (this.watchdogMs <= 0) return;
    const clock = this.client._clock;
    if (this.timers.watchdog !== null) clock.clearTimeout(this.timers.watchdog);
    this.timers.watchdog = clock.setTimeout(() => {
      this._end({ action: 'reconnect', reason: 'timeout', message: `nothing received for ${this.watchdogMs} ms` });
    }, this.watchdogMs);
  }

  _scheduleRefresh(expiresAt) {
    const c = this.client;
    const clock = c._clock;
    if (this.timers.refresh !== null) clock.clearTimeout(this.timers.refresh);
    this.timers.refresh = null;
    if (!(expiresAt > 0) || !(c._options.refreshRatio > 0)) return;
    const left = expiresAt * 1000 - clock.now();
    if (left <= 0) return;
    this.timers.refresh = clock.setTimeout(() => this._refresh(expiresAt), left * c._options.refreshRatio);
  }

  async _refresh(expiresAt) {
    const c = this.client;
    if (this.timers.refresh !== null) c._clock.clearTimeout(this.timers.refresh);
    this.timers.refresh = null;
    if (this.ended || this.refreshing) return;
    this.refreshing = true;
    try {
      await this._refreshOnce(expiresAt);
    } finally {
      this.refreshing = false;
    }
  }

  async _refreshOnce(expiresAt) {
    const c = this.client;
    let token;
    try {
      token = await c._options.getToken({ reason: 'refresh' });
    } catch (e) {
      c._report(new HeraldError('token_error', `getToken (refresh) failed: ${e && e.message}`, { cause: e }));
      token = null;
    }
    if (this.ended) return;
    if (typeof token !== 'string' || token === '' || token === this.token) {
      // Nothing new yet: try again halfway to the expiry; past it the server
      // closes with token_expired and the reconnect asks for a fresh token.
      const left = expiresAt * 1000 - c._clock.now();
      if (left > 2000) this.timers.refresh = c._clock.setTimeout(() => this._refresh(expiresAt), left / 2);
      return;
    }
    try {
      const res = await this.request('refresh', { token });
      this.token = token;
      this._scheduleRefresh(res.expires_at);
    } catch (err) {
      if (this.ended) return;
      if (err.code === 'forbidden') {
        // Another subject or tenant: open a new connection with it.
        this._end({ action: 'reauth', reason: 'token_changed', message: err.message });
        return;
      }
      c._report(err);
      const left = expiresAt * 1000 - c._clock.now();
      if (left > 2000) this.timers.refresh = c._clock.setTimeout(() => this._refresh(expiresAt), left / 2);
    }
  }

  // request sends one request; the promise settles with its reply.
  // onResult, when given, runs synchronously on a successful reply, before
  // the frames that follow it in the same message (a subscribe reply is
  // followed at once by the channel's publications).
  request(op, fields = {}, onResult = null) {
    if (this.ended) return Promise.reject(new HeraldError('disconnected', 'the connection is closed', { temporary: true, op }));
    return new Promise((resolve, reject) => {
      const job = { op, fields, resolve, reject, onResult, counted: COUNTED_OPS.has(op) };
      if (job.counted && this.inflight >= this.maxInflight) this.queue.push(job);
      else this._send(job);
    });
  }

  _send(job) {
    const id = this.nextId++;
    if (job.counted) this.inflight++;
    this.pending.set(id, job);
    this._write({ id, op: job.op, ...job.fields });
  }

  _settle(id, f) {
    const job = this.pending.get(id);
    this.pending.delete(id);
    if (job.counted) {
      this.inflight--;
      while (this.queue.length > 0 && this.inflight < this.maxInflight && !this.ended) this._send(this.queue.shift());
    }
    if (f.error) {
      const e = f.error;
      job.reject(new HeraldError(String(e.code), String(e.message || e.code), { temporary: Boolean(e.temporary), op: job.op }));
    } else {
      const result = f.result || {};
      if (job.onResult) {
        try {
          job.onResult(result);
        } catch (e) {
          this.client._report(e);
        }
      }
      job.resolve(result);
    }
  }

  _write(obj) {
    if (this.ended || !this.ws) return;
    try {
      this.ws.send(JSON.stringify(obj));
    } catch (e) {
      this._end({ action: 'reconnect', reason: 'network', message: `send failed: ${e && e.message}` });
    }
  }

  _closed(ev) {
    const code = ev.code;
    const p = this.push;
    let info;
    if (code >= 4000 && code <= 4999) {
      const reason = (p && p.reason) || ev.reason || String(code);
      info = { action: closeAction(code), reason, closeCode: code, delayMs: p && p.reconnect ? p.delay_ms : undefined, message: (p && p.message) || ev.reason };
    } else if (p) {
      info = { action: reasonAction(p.reason, p.reconnect), reason: p.reason, closeCode: code, delayMs: p.delay_ms, message: p.message };
    } else {
      info = { action: 'reconnect', reason: 'network', closeCode: code, message: `connection closed (${code}${ev.reason ? ' ' + ev.reason : ''})` };
    }
    if (this.connectError && info.action === 'stop') info.error = new HeraldError(this.connectError.code, this.connectError.message, { op: 'connect', closeCode: code });
    this._end(info);
  }

  _end(info) {
    if (this.ended) return;
    this._teardown();
    this.client._linkDown(this, info);
  }

  // close ends the connection from the client's side, reporting nothing.
  close() {
    if (this.ended) return;
    this._teardown();
  }

  _teardown() {
    this.ended = true;
    const clock = this.client._clock;
    for (const k of Object.keys(this.timers)) {
      if (this.timers[k] !== null) clock.clearTimeout(this.timers[k]);
      this.timers[k] = null;
    }
    const err = new HeraldError('disconnected', 'the connection closed before the reply', { temporary: true });
    for (const job of this.pending.values()) job.reject(new HeraldError(err.code, err.message, { temporary: true, op: job.op }));
    for (const job of this.queue) job.reject(new HeraldError(err.code, err.message, { temporary: true, op: job.op }));
    this.pending.clear();
    this.queue = [];
    if (this.ws) {
      this.ws.onopen = this.ws.onmessage = this.ws.onclose = null;
      this.ws.onerror = () => {};
      try {
        if (this.ws.readyState === 0 || this.ws.readyState === 1) this.ws.close(1000);
      } catch {
        // already closing
      }
    }
  }
}

// SseLink is one SSE stream.
class SseLink {
  constructor(client, token, channels) {
    this.client = client;
    this.token = token;
    this.channels = channels;
    this.established = false;
    this.ended = false;
    this.source = null;
    this._start();
  }

  async _start() {
    const c = this.client;
    const cred = await c._sseCredentials(this.token);
    if (this.ended) return;
    if (cred.fail) {
      this._end(cred.fail);
      return;
    }
    const url = new URL(c._sseUrl);
    for (const ch of this.channels) url.searchParams.append('channel', ch);
    for (const t of await this._subTokens()) url.searchParams.append('sub_token', t);
    if (this.ended) return;
    let src;
    try {
      if (c._EventSource) {
        for (const [k, v] of Object.entries(cred.query || {})) url.searchParams.set(k, v);
        if (c._cursor) url.searchParams.set('last_event_id', c._cursor);
        src = new c._EventSource(url.toString());
      } else {
        const headers = { ...cred.headers };
        if (c._cursor) headers['Last-Event-ID'] = c._cursor;
        src = new FetchEventSource(url.toString(), { headers, fetch: c._fetch, idleTimeoutMs: c._options.sseIdleTimeoutMs });
      }
    } catch (e) {
      this._end({ action: 'reconnect', reason: 'network', message: `cannot open the stream: ${e && e.message}` });
      return;
    }
    this.source = src;
    src.addEventListener('open', () => {
      if (this.ended) return;
      this.established = true;
      c._linkUp(this, {});
    });
    src.addEventListener('message', (ev) => {
      if (this.ended) return;
      if (ev.lastEventId) c._cursor = ev.lastEventId;
      const pub = parseJSON(ev.data);
      if (pub) c._deliver(pub);
    });
    src.addEventListener('subscribed', (ev) => {
      if (this.ended) return;
      if (ev.lastEventId) c._cursor = ev.lastEventId;
      c._sseSubscribed(this, parseJSON(ev.data));
    });
    src.addEventListener('reauth', (ev) => {
      // The token expires soon (or did): open a new stream with a fresh
      // token, resuming from the cursor. A "disconnect" may follow; this
      // stream is closed already.
      if (this.ended) return;
      const d = parseJSON(ev.data) || {};
      this._end({ action: 'reauth', reason: 'token_expired', message: d.message || 'the server asked for a fresh token' });
    });
    src.addEventListener('unsubscribed', (ev) => {
      if (this.ended) return;
      if (ev.lastEventId) c._cursor = ev.lastEventId;
      c._serverUnsubscribed(this, parseJSON(ev.data));
    });
    src.addEventListener('disconnect', (ev) => {
      if (this.ended) return;
      const d = parseJSON(ev.data) || {};
      const reason = String(d.reason || 'disconnected');
      const action = reasonAction(reason, d.reconnect);
      this._end({ action, reason, delayMs: d.reconnect ? d.delay_ms : undefined, message: d.message });
    });
    src.addEventListener('error', (ev) => {
      if (this.ended) return;
      if (this.established) {
        this._end({ action: 'reconnect', reason: 'network', message: 'the stream broke' });
      } else {
        this._diagnose(ev);
      }
    });
  }

  // _subTokens returns the subscription tokens of the stream's channels
  // (handlers.token). A channel whose token cannot be had ends with
  // onError and leaves the stream.
  async _subTokens() {
    const c = this.client;
    const out = [];
    for (const ch of [...this.channels]) {
      const sub = c._subs.get(ch);
      const t = sub && sub._handlers.token;
      if (!t) continue;
      try {
        const v = typeof t === 'function' ? await t() : t;
        if (typeof v === 'string' && v !== '') out.push(v);
      } catch (e) {
        this.channels = this.channels.filter((x) => x !== ch);
        c._ended(sub, new HeraldError('token_error', `subscription token for "${ch}": ${e && e.message}`, { cause: e }));
      }
    }
    return out;
  }

  // _diagnose finds out why a stream did not open: the error event of a
  // FetchEventSource carries the status; a browser EventSource hides it, so
  // the same request is probed with fetch (headers, no ticket).
  async _diagnose(ev) {
    const c = this.client;
    this._closeSource();
    if (typeof ev.status === 'number') {
      this._end(refusalInfo(ev));
      return;
    }
    if (ev.error !== undefined || !c._fetch) {
      this._end({ action: 'reconnect', reason: 'network', message: `cannot open the stream${ev.error ? ': ' + ev.error.message : ''}` });
      return;
    }
    const url = new URL(c._sseUrl);
    for (const ch of this.channels) url.searchParams.append('channel', ch);
    for (const t of await this._subTokens()) url.searchParams.append('sub_token', t);
    const abort = new AbortController();
    let res;
    try {
      res = await c._fetch(url.toString(), { headers: { Authorization: `Bearer ${this.token}`, Accept: 'text/event-stream' }, signal: abort.signal });
    } catch (e) {
      if (!this.ended) this._end({ action: 'reconnect', reason: 'network', message: `cannot open the stream: ${e && e.message}` });
      return;
    }
    if (res.status === 200) {
      abort.abort();
      if (!this.ended) this._end({ action: 'reconnect', reason: 'network', message: 'the stream failed to open' });
      return;
    }
    const r = await readRefusal(res);
    if (!this.ended) this._end(refusalInfo(r));
  }

  _closeSource() {
    if (this.source) {
      try {
        this.source.close();
      } catch {
        // closed already
      }
    }
  }

  _end(info) {
    if (this.ended) return;
    this.ended = true;
    this._closeSource();
    this.client._linkDown(this, info);
  }

  close() {
    this.ended = true;
    this._closeSource();
  }
}

function parseJSON(s) {
  try {
    const v = JSON.parse(s);
    return v && typeof v === 'object' ? v : null;
  } catch {
    return null;
  }
}
