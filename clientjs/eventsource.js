// FetchEventSource: an EventSource-compatible text/event-stream reader over
// fetch streaming, for runtimes without EventSource and for sending headers.
import { HeraldError, MAX_DELAY } from './core.js';
import { readRefusal } from './refusal.js';

const CONNECTING = 0;
const OPEN = 1;
const CLOSED = 2;

/** Never reconnects by itself: a refused request or an ended stream fires "error" (with status, code, message, retryAfterMs for a refusal) and closes. */
export class FetchEventSource {
  constructor(url, init = {}) {
    this.url = String(url);
    this.withCredentials = Boolean(init.withCredentials);
    /** @type {0 | 1 | 2} */
    this.readyState = CONNECTING;
    this.onopen = this.onmessage = this.onerror = null;
    this._listeners = new Map();
    this._abort = new AbortController();
    this._type = this._lastId = this._buf = '';
    this._data = [];
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

  close() {
    if (this.readyState === CLOSED) return;
    this.readyState = CLOSED;
    this._arm(0);
    this._abort.abort();
  }

  // _arm restarts the idle timer (on every chunk); _arm(0) stops it. A
  // timeout above MAX_DELAY waits in steps (left: what remains).
  _arm(ms = this._idleMs, left = ms) {
    if (this._idle !== null) clearTimeout(this._idle);
    this._idle = null;
    if (ms > 0) {
      this._idle = setTimeout(() => (left > MAX_DELAY ? this._arm(ms, left - MAX_DELAY) : this._fail({ error: new HeraldError('timeout', `nothing received for ${ms} ms`, { temporary: true }) })), Math.min(left, MAX_DELAY));
    }
  }

  _dispatch(ev) {
    const on = this['on' + ev.type];
    if (['open', 'message', 'error'].includes(ev.type) && typeof on === 'function') on.call(this, ev);
    for (const fn of [...(this._listeners.get(ev.type) || [])]) fn.call(this, ev);
  }

  _fail(extra) {
    if (this.readyState === CLOSED) return;
    this.close();
    this._dispatch({ type: 'error', target: this, ...extra });
  }

  async _run(f, headers) {
    let res;
    try {
      if (typeof f !== 'function') throw new HeraldError('not_supported', 'no fetch in this runtime');
      res = await f(this.url, { headers, signal: this._abort.signal, credentials: this.withCredentials ? 'include' : 'same-origin' });
    } catch (error) {
      return this._fail({ error });
    }
    if (this.readyState === CLOSED) return res.body?.cancel().catch(() => {});
    if (res.status !== 200 || !(res.headers.get('content-type') || '').startsWith('text/event-stream')) return this._fail(await readRefusal(res));
    this.readyState = OPEN;
    this._arm();
    this._dispatch({ type: 'open', target: this });
    const decoder = new TextDecoder();
    try {
      const reader = res.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done || /** @type {number} */ (this.readyState) === CLOSED) break;
        this._arm();
        this._feed(decoder.decode(value, { stream: true }));
      }
    } catch (error) {
      return this._fail({ error });
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
      if (this.readyState === CLOSED) return;
    }
    this._buf = this._buf.slice(start);
  }

  _line(line) {
    if (line === '') {
      if (this._data.length > 0) {
        let origin = '';
        try {
          origin = new URL(this.url).origin;
        } catch {
          // no origin
        }
        const ev = { type: this._type || 'message', data: this._data.join('\n'), lastEventId: this._lastId, origin, target: this };
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
    if (field === 'event') this._type = value;
    else if (field === 'data') this._data.push(value);
    else if (field === 'id' && !value.includes('\0')) this._lastId = value;
    // retry and unknown fields: this source never reconnects by itself
  }
}
FetchEventSource.CONNECTING = CONNECTING;
FetchEventSource.OPEN = OPEN;
FetchEventSource.CLOSED = CLOSED;

