// The example page: an order list rendered from the application's
// authoritative state (GET /api/orders) and kept current by Herald's live
// updates on the channel "orders", reloaded whenever Herald says updates
// were missed. The way to load state without missing or double-applying
// an update:
//   1. subscribe first, so every update from now on is kept;
//   2. once subscribed (the position is known), fetch the state;
//   3. apply the state, then every update, each only when newer than
//      what is shown (latestWins: by order id, on its version).
// An update older than the fetched state is dropped, one newer is
// applied, and none is missed, whatever the order they come in.
//
// The page only reads: it never publishes, and its one channel is known
// when it starts. So it loads the SSE-only client (/client/sse.js, no
// WebSocket code) and latestWins on its own (/client/latest.js): one
// Server-Sent Events stream, which passes every HTTP proxy, shares an
// HTTP/2 connection with the page's other requests, and resumes from its
// cursor after a reconnect (docs/transports.md says when to choose which).

const config = await (await fetch('/api/config')).json();
const [{ HeraldClient }, { latestWins }] = await Promise.all([
  import(`${config.heraldUrl}/client/sse.js`),
  import(`${config.heraldUrl}/client/latest.js`),
]);

const list = document.getElementById('orders');
const status = document.getElementById('status');
const orders = latestWins(
  (o) => o.id,
  (o) => o.version,
);

function render() {
  const items = orders.values().sort((a, b) => a.id.localeCompare(b.id));
  list.replaceChildren(
    ...items.map((o) => {
      const li = document.createElement('li');
      li.id = `order-${o.id}`;
      li.dataset.version = String(o.version);
      li.append(`${o.id} ${o.item}: `);
      const s = document.createElement('span');
      s.textContent = o.status;
      li.append(s);
      return li;
    }),
  );
}

let pending = null; // updates that came while the state was loading

async function reload(why) {
  pending = [];
  status.textContent = `loading (${why})…`;
  const state = await (await fetch('/api/orders')).json();
  orders.clear();
  for (const o of state.orders) orders(o);
  for (const o of pending) orders(o);
  pending = null;
  document.body.dataset.reloads = String(Number(document.body.dataset.reloads || 0) + 1);
  render();
  status.textContent = 'live';
}

const client = new HeraldClient({
  url: config.heraldUrl,
  getToken: async () => (await fetch('/api/token')).text(),
});
const sub = client.subscribe('orders');
sub.on('publication', (p) => {
  if (pending) pending.push(p.data);
  else if (orders(p.data)) render();
});
// Updates were missed (history lost or too short): reload the state.
sub.on('gap', (g) => reload(g.reason));
client.on('disconnected', (d) => {
  if (d.reconnect) status.textContent = `reconnecting (${d.reason})…`;
});
client.on('connected', () => {
  if (!pending) status.textContent = 'live';
});

// Once subscribed (the position is known), load the state. The "state"
// event comes whenever the subscription succeeds, even after a first
// attempt that timed out (sub.ready would have rejected then).
let loaded = false;
sub.on('state', (s) => {
  if (s.state === 'subscribed' && !loaded) {
    loaded = true;
    reload('start');
  }
});
