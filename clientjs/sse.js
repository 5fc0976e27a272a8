// Herald's realtime client over Server-Sent Events only: the core
// (core.js) with the SSE driver, and no WebSocket code. One SseLink per
// stream carries every subscribed channel; the driver reopens the stream
// when the channel set changes. In runtimes without EventSource (Node) it
// loads FetchEventSource (eventsource.js) on first use.
import { Client, HeraldError, reasonAction, endpoint, network, PROTOCOL, STOP_REASONS, States, Backoff, ChannelState, Subscription } from './core.js';

export { PROTOCOL, STOP_REASONS, States, HeraldError, reasonAction, Backoff, ChannelState, Subscription };

class SseLink {
  constructor(client, token, channels) {
    this._client = client;
    this._token = token;
    this._channels = channels;
    this._established = this._ended = false;
    this._source = null;
    // The stream must open and subscribe every channel within requestTimeoutMs.
    this._waiting = new Set(channels);
    const ms = client._options.requestTimeoutMs;
    this._timer = client._later(() => {
      const err = new HeraldError('timeout', `the stream did not start within ${ms} ms`, { temporary: true, op: 'subscribe' });
      for (const ch of this._waiting) client._subs.get(ch)?._reject(err);
      this._end({ reason: 'timeout', message: err.message });
    }, ms);
    this._start();
  }

  // _url is the stream's URL: its channels and their subscription tokens.
  async _url() {
    const tokens = await this._subTokens();
    const url = new URL(this._client._sseUrl);
    for (const ch of this._channels) url.searchParams.append('channel', ch);
    for (const t of tokens) url.searchParams.append('sub_token', t);
    return url;
  }

  async _start() {
    const c = this._client;
    const cred = await this._credentials();
    if (this._ended) return;
    if (cred.fail) return this._end(cred.fail);
    const url = await this._url();
    if (this._ended) return;
    let src;
    try {
      if (c._EventSource) {
        for (const [k, v] of Object.entries(cred.query || {})) url.searchParams.set(k, v);
        if (c._cursor) url.searchParams.set('last_event_id', c._cursor);
        src = new c._EventSource(url.toString());
      } else {
        const headers = { ...cred.headers };
        if (c._cursor) headers['Last-Event-ID'] = c._cursor;
        const { FetchEventSource } = await import('./eventsource.js');
        if (this._ended) return;
        src = new FetchEventSource(url.toString(), { headers, fetch: c._fetch, idleTimeoutMs: c._options.sseIdleTimeoutMs });
      }
    } catch (e) {
      return this._end(network(`cannot open the stream: ${e && e.message}`));
    }
    this._source = src;
    const on = (type, fn) =>
      src.addEventListener(type, (ev) => {
        if (this._ended) return;
        if (ev.lastEventId && type !== 'reauth') c._cursor = ev.lastEventId;
        let d = null;
        try {
          d = JSON.parse(ev.data);
        } catch {
          // not JSON
        }
        fn(d && typeof d === 'object' ? d : {}, ev);
      });
    on('message', (pub) => c._deliver(pub));
    // The stream is up with its first "subscribed" event, not when it
    // opens: a stream holding only "reauth" and "disconnect" (an expired
    // token) is no connection.
    on('subscribed', (d) => {
      if (!this._established) {
        this._established = true;
        c._linkUp(this, {});
      }
      const sub = c._subs.get(d.channel);
      this._waiting.delete(d.channel);
      if (this._waiting.size === 0) c._cancel(this._timer);
      if (sub && !sub.closed) c._subscribed(sub, { ...d, recovered: Boolean(d.recovered) });
    });
    // The token expires soon (or did): open a new stream with a fresh one,
    // resuming from the cursor.
    on('reauth', (d) => this._end({ action: 'reauth', reason: 'token_expired', message: d.message }));
    on('unsubscribed', (d) => c._serverUnsubscribed(this, d));
    on('disconnect', (d) => {
      const reason = String(d.reason || 'disconnected');
      this._end({ action: reasonAction(reason, d.reconnect), reason, delayMs: d.reconnect ? d.delay_ms : undefined, message: d.message });
    });
    on('error', (_, ev) => {
      // FetchEventSource gives up a silent stream with a "timeout" error.
      if (ev.error && ev.error.code === 'timeout') this._end({ reason: 'timeout', message: ev.error.message });
      else if (this._established) this._end(network('the stream broke'));
      else this._diagnose(ev);
    });
  }

  // _diagnose ends a stream that did not open, saying why (refusal.js
  // reads the refusal).
  async _diagnose(ev) {
    this._closeSource();
    const { streamRefusal } = await import('./refusal.js');
    this._end(await streamRefusal(ev, this._client._fetch, () => this._url(), this._token));
  }

  // _credentials returns the query parameters or headers carrying the token:
  // without an EventSource, the Authorization header; with one, a ticket,
  // or access_token once the server said it has tickets switched off (404
  // tickets_disabled, which the "fallback" event tells). Any other refusal
  // of POST /v1/tickets, a 404 from a proxy included, is a failure.
  async _credentials() {
    const c = this._client;
    const auth = { Authorization: `Bearer ${this._token}` };
    if (!c._EventSource) return { headers: auth };
    if (!c._ticketsOff) {
      let res;
      try {
        res = await c._fetch(c._ticketUrl, { method: 'POST', headers: auth });
      } catch (e) {
        return { fail: network(`POST /v1/tickets: ${e && e.message}`) };
      }
      if (res.ok) {
        const body = await res.json().catch(() => null);
        const t = body && body.ticket;
        return typeof t === 'string' && t !== '' ? { query: { ticket: t } } : { fail: { reason: 'server_error', message: 'no ticket' } };
      }
      const fail = await (await import('./refusal.js')).ticketRefusal(res);
      if (fail) return { fail };
      c._ticketsOff = true;
      c._emit('fallback', { reason: 'tickets_disabled', credential: 'access_token' });
    }
    return { query: { access_token: this._token } };
  }

  // _subTokens returns the subscription tokens of the stream's channels.
  // A channel whose token cannot be had ends and leaves the stream.
  async _subTokens() {
    const c = this._client;
    const out = [];
    for (const ch of [...this._channels]) {
      const sub = c._subs.get(ch);
      try {
        const t = sub && (await sub._token());
        if (typeof t === 'string' && t !== '') out.push(t);
      } catch (e) {
        this._channels = this._channels.filter((x) => x !== ch);
        this._waiting.delete(ch);
        c._ended(sub, e);
      }
    }
    return out;
  }

  _closeSource() {
    try {
      this._source?.close();
    } catch {
      // closed already
    }
  }

  _end(info) {
    if (this._ended) return;
    this.close();
    this._client._linkDown(this, info);
  }

  close() {
    this._ended = true;
    this._client._cancel(this._timer);
    this._closeSource();
  }
}

// restart reopens the stream (once per turn) with the new channel set,
// resuming from the cursor.
function restart(c, sub, link, why) {
  if (c._restartQueued) return;
  c._restartQueued = true;
  Promise.resolve().then(() => {
    c._restartQueued = false;
    // While reconnecting, the next attempt takes the new set.
    if (c._wanted && c._state !== 'reconnecting') c._reopen(why);
  });
}

/** The SSE driver of Client (core.js). */
export const sse = {
  idle: true, // no channel, no stream
  init(c, base) {
    // With an EventSource (the browser's, or one passed in) credentials go
    // in the URL; without, FetchEventSource sends them as a header. Both
    // need fetch (tickets, and the diagnosis of a refused stream).
    c._EventSource = c._options.EventSource || globalThis.EventSource || null;
    if (!c._fetch) throw new HeraldError('not_supported', 'no fetch in this runtime');
    c._sseUrl = endpoint(base, '/v1/sse', false);
    c._ticketUrl = endpoint(base, '/v1/tickets', false).toString();
    c._ticketsOff = c._restartQueued = false;
    c._cursor = '';
  },
  open: (c, token) => new SseLink(c, token, [...c._subs.keys()]),
  up() {},
  added: restart,
  removed: restart,
  resubscribe: restart,
  // probe: a browser EventSource cannot tell a stalled stream, so open a new one.
  probe: (c, link, why) => restart(c, 0, 0, why),
};

/** HeraldClient over Server-Sent Events. */
export class HeraldClient extends Client {
  constructor(options) {
    super(options, { sse });
  }
}
