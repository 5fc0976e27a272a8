// The in-page side of the browser tests (browser.test.js, and through
// harness.probe, testutil/probe.js, behaviours.test.js). It imports
// herald.js from the client= parameter of its own URL (page.html passes on
// its own client=, by default /herald.js), or from Herald's /client/herald.js on
// the page's origin when it has none (injected inline into Herald's demo
// page). It exposes window.harness, which starts clients and records
// everything they report, for the tests to read with page.evaluate, and
// sets <html data-harness> to "ready" or to the reason it failed.

const clientUrl = new URL(import.meta.url).searchParams.get('client') || '/client/herald.js';

// plainError keeps the fields of a HeraldError that survive page.evaluate.
function plainError(e) {
  if (!e) return null;
  return { name: e.name, code: e.code, message: e.message, temporary: e.temporary, op: e.op, status: e.status, closeCode: e.closeCode };
}

try {
  const herald = await import(clientUrl);
  const clients = new Map();

  window.harness = {
    origin: location.origin,
    clientUrl: new URL(clientUrl, location.href).href,
    // True when the page's EventSource is the browser's own.
    nativeEventSource: typeof EventSource === 'function' && /\[native code\]/.test(Function.prototype.toString.call(EventSource)),

    // start opens a HeraldClient named name (url defaults to the page's
    // origin) and subscribes it to channels. getToken returns token and
    // records each call's reason.
    start(name, { url, transport, token, channels, backoff }) {
      const rec = { tokenCalls: [], states: [], errors: [], fallbacks: [], connect: null, ready: {}, pubs: {}, gaps: [], recovered: [], subErrors: [] };
      const opts = {
        transport,
        backoff,
        getToken: async ({ reason }) => {
          rec.tokenCalls.push(reason);
          return token;
        },
        onStateChange: (s) => rec.states.push({ state: s.state, previous: s.previous, reason: s.reason, closeCode: s.closeCode, delayMs: s.delayMs }),
        onError: (e) => rec.errors.push(String((e && e.message) || e)),
      };
      if (url !== undefined) opts.url = url;
      const c = new herald.HeraldClient(opts);
      c.on('fallback', (e) => rec.fallbacks.push(e));
      c.connect().then(
        () => {
          rec.connect = { ok: true };
        },
        (e) => {
          rec.connect = { error: plainError(e) };
        },
      );
      for (const ch of channels) {
        rec.pubs[ch] = [];
        const sub = c.subscribe(ch, {
          onPublication: (p) => rec.pubs[ch].push(p),
          onGap: (g) => rec.gaps.push(g),
          onRecovered: (r) => rec.recovered.push(r),
          onError: (e) => rec.subErrors.push({ channel: ch, error: plainError(e) }),
        });
        sub.ready.then(
          (r) => {
            rec.ready[ch] = r;
          },
          (e) => {
            rec.ready[ch] = { error: plainError(e) };
          },
        );
      }
      clients.set(name, { c, rec });
    },

    // record returns what client name has seen so far.
    record(name) {
      const x = clients.get(name);
      if (!x) return null;
      return { ...x.rec, state: x.c.state, lastError: plainError(x.c.lastError), positions: x.c.positions() };
    },

    close(name) {
      clients.get(name)?.c.close();
    },

    // probe starts a client driven by its event API (testutil/probe.js,
    // served beside this file) for the behaviour scenarios.
    async probe(name, opts) {
      const { startProbe } = await import(new URL('probe.js', import.meta.url).href);
      probes.set(name, startProbe(herald, opts));
    },
    probeRecord: (name) => probes.get(name).record(),
    probeSubscribe: (name, channel) => probes.get(name).subscribe(channel),
    probeClose: (name) => probes.get(name)?.close(),
    onlineEvents: 0,

    // setVisibility makes the page look hidden or visible, as a browser
    // does when the tab goes to the background and back.
    setVisibility(state) {
      Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => state });
      Object.defineProperty(document, 'hidden', { configurable: true, get: () => state === 'hidden' });
      document.dispatchEvent(new Event('visibilitychange'));
    },
  };
  const probes = new Map();
  window.addEventListener('online', () => window.harness.onlineEvents++);
  document.documentElement.dataset.harness = 'ready';
} catch (e) {
  document.documentElement.dataset.harness = `herald.js failed to load from ${clientUrl}: ${(e && e.message) || e}`;
}
