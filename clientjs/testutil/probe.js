// A probe drives one HeraldClient through its event API (client.on,
// sub.on, for await) and records what it reports, as plain data. The
// behaviour scenarios (scenarios.js) read it the same way in Node
// (test/behaviours.test.js) and in a browser page (browser/harness.js).
// It imports nothing: the caller passes the client module.

/** plainError keeps the fields of a HeraldError that survive structured cloning. */
export function plainError(e) {
  if (!e) return null;
  return { name: e.name, code: e.code, message: e.message, temporary: e.temporary, op: e.op, status: e.status, closeCode: e.closeCode };
}

/**
 * startProbe opens a client of module herald (the client module) with
 * opts ({transport, url, token, channels, since, subTokens,
 * subscribeWhenConnected, backoff, requestTimeoutMs, refreshRatio,
 * resyncAfterHiddenMs, sseIdleTimeoutMs, window, document}), calls
 * connect() and subscribes it to opts.channels, from since[channel] and
 * with the subscription token subTokens[channel] when given. token is the
 * token getToken returns, or {reason: token} by getToken's reason (a
 * reason not listed gets connect's). subscribeWhenConnected
 * ({channel, via: 'on' | 'onStateChange'}) subscribes to channel from a
 * synchronous "connected" state listener, added with client.on or as the
 * onStateChange option. Publications whose data has a key and a version
 * are applied to rec.applied through latestWins, as an app would.
 */
export function startProbe(herald, opts) {
  const rec = { states: [], connecting: [], connected: [], disconnected: [], errors: [], pubs: {}, iterated: {}, iterEnd: {}, gaps: [], recovered: [], ready: {}, subStates: [], subErrors: [], applied: {}, tokenCalls: 0, tokenReasons: [], connect: null };
  const { token, channels = [], since = {}, subTokens = {}, subscribeWhenConnected: late, ...rest } = opts;
  const onConnected = (s) => s.state === 'connected' && !rec.pubs[late.channel] && subscribe(late.channel);
  if (late && late.via === 'onStateChange') rest.onStateChange = onConnected;
  const c = new herald.HeraldClient({
    ...rest,
    getToken: async ({ reason }) => {
      rec.tokenCalls++;
      rec.tokenReasons.push(reason);
      return typeof token === 'string' ? token : token[reason] || token.connect;
    },
  });
  if (late && late.via === 'on') c.on('state', onConnected);
  c.on('state', (s) => rec.states.push({ state: s.state, previous: s.previous, reason: s.reason, delayMs: s.delayMs, closeCode: s.closeCode }));
  c.on('connecting', (e) => rec.connecting.push({ reason: e.reason }));
  c.on('connected', (e) => rec.connected.push({ reconnect: e.reconnect, recovered: e.recovered, reload: e.reload, reasons: e.reasons }));
  c.on('disconnected', (e) => rec.disconnected.push({ reason: e.reason, reconnect: e.reconnect, delayMs: e.delayMs, message: e.error && e.error.message }));
  c.on('error', (e) => rec.errors.push(String((e && e.message) || e)));
  const orders = herald.latestWins(
    (p) => p.data.key,
    (p) => p.data.version,
  );
  const subscribe = (ch) => {
    rec.pubs[ch] = [];
    rec.iterated[ch] = [];
    const sub = c.subscribe(ch, { since: since[ch], token: subTokens[ch] });
    sub.on('publication', (p) => {
      rec.pubs[ch].push(p);
      if (p.data && p.data.key !== undefined && orders(p)) rec.applied[p.data.key] = p.data.version;
    });
    sub.on('gap', (g) => rec.gaps.push(g));
    sub.on('recovered', (x) => rec.recovered.push(x));
    sub.on('state', (s) => rec.subStates.push({ channel: ch, state: s.state, recovered: s.recovered, gap: s.gap, recovery: s.recovery, reason: s.reason }));
    sub.on('error', (e) => rec.subErrors.push({ channel: ch, error: plainError(e) }));
    sub.ready.then(
      (r) => (rec.ready[ch] = r),
      (e) => (rec.ready[ch] = { error: plainError(e) }),
    );
    (async () => {
      for await (const p of sub) rec.iterated[ch].push(p.id);
      rec.iterEnd[ch] = { done: true };
    })().catch((e) => (rec.iterEnd[ch] = { error: plainError(e) }));
  };
  for (const ch of channels) subscribe(ch);
  // connect() resolves on the first connection: how many tokens it took.
  c.connect().then(
    () => (rec.connect = { tokenCalls: rec.tokenCalls }),
    (e) => (rec.connect = { error: plainError(e) }),
  );
  return {
    client: c,
    subscribe,
    record: () => ({ ...rec, state: c.state, positions: c.positions(), server: c.server }),
    close: () => c.close(),
  };
}
