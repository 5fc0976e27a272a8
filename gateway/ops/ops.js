// Herald's operator view (served at /ops/ with /ops/index.html). It asks
// for the admin token, keeps it in sessionStorage (this tab only), and
// polls /ops/status with it every few seconds, rendering the answer with
// textContent only. It never sends anything but GET /ops/status.
'use strict';

(() => {
  const TOKEN_KEY = 'herald.ops.token';
  const POLL_MS = 3000;

  const $ = (id) => document.getElementById(id);
  let timer = null;
  // generation changes on every sign-in and sign-out, so the answer of a
  // poll started before is dropped.
  let generation = 0;

  function setText(id, text, cls) {
    const el = $(id);
    el.textContent = text;
    el.className = cls || '';
  }

  function message(text, cls) {
    const m = $('message');
    m.textContent = text || '';
    m.className = cls || '';
    m.hidden = !text;
  }

  function stop() {
    generation++;
    clearTimeout(timer);
    timer = null;
  }

  // askToken forgets the token and shows the form, with why when given.
  function askToken(why, cls) {
    stop();
    sessionStorage.removeItem(TOKEN_KEY);
    $('status').hidden = true;
    $('login').hidden = false;
    message(why, cls);
    $('token').value = '';
    $('token').focus();
  }

  function start() {
    stop();
    $('login').hidden = true;
    message('Loading…');
    poll(generation);
  }

  function schedule(gen) {
    if (gen === generation) timer = setTimeout(() => poll(gen), POLL_MS);
  }

  // stale keeps the last snapshot on screen and says why it is old.
  function stale(why) {
    if ($('status').hidden) {
      message(why, 'error');
      return;
    }
    message('');
    const s = $('stale');
    s.textContent = `(not refreshed: ${why})`;
    s.hidden = false;
  }

  async function poll(gen) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) {
      askToken();
      return;
    }
    let resp;
    let body = null;
    try {
      resp = await fetch('status', { headers: { Authorization: `Bearer ${token}` }, cache: 'no-store', credentials: 'omit' });
      body = await resp.json().catch(() => null);
    } catch (e) {
      if (gen !== generation) return;
      stale(`cannot reach the server: ${(e && e.message) || e}`);
      schedule(gen);
      return;
    }
    if (gen !== generation) return;
    const err = body && body.error && body.error.message;
    if (resp.status === 401) {
      askToken(`Refused: ${err || 'the admin token is not accepted'}.`, 'error');
      return;
    }
    if (!resp.ok || !body || !body.readiness) {
      stale(`the server answered ${resp.status}${err ? `: ${err}` : ''}`);
      schedule(gen);
      return;
    }
    render(body);
    schedule(gen);
  }

  // age renders seconds as "4.2 s", "3 min 5 s" or "2 h 10 min".
  function age(sec) {
    if (sec < 60) return `${sec.toFixed(1)} s`;
    const s = Math.floor(sec);
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }

  function render(st) {
    message('');
    $('stale').hidden = true;
    $('status').hidden = false;
    const t = $('snapshot-time');
    t.dateTime = st.time;
    t.textContent = st.time;

    const ready = st.readiness;
    setText('ready-status', ready.status, ready.status === 'ready' ? 'ok' : 'bad');
    const rows = Object.keys(ready.checks || {}).sort().map((name) => {
      const tr = document.createElement('tr');
      tr.dataset.check = name;
      const n = document.createElement('td');
      n.textContent = name;
      const r = document.createElement('td');
      r.textContent = ready.checks[name];
      r.className = ready.checks[name] === 'ok' ? 'ok' : 'bad';
      tr.append(n, r);
      return tr;
    });
    $('ready-checks').replaceChildren(...rows);

    const c = st.connections;
    setText('conn-sse', String(c.sse));
    setText('conn-ws', String(c.ws));
    setText('conn-total', `${c.total} of ${c.max}`, c.total >= c.max ? 'bad' : '');
    setText('conn-max', String(c.max));

    const o = st.outbox;
    const known = o.status === 'ok';
    setText('outbox-status', o.status, known ? 'ok' : 'bad');
    setText('outbox-pending', known ? String(o.pending) : 'unknown', known ? '' : 'warn');
    if (!known) setText('outbox-oldest', 'unknown', 'warn');
    else if (o.oldest_pending === null) setText('outbox-oldest', 'none waiting');
    else setText('outbox-oldest', `${age(o.oldest_pending_age_seconds)} (occurred ${o.oldest_pending})`);
    setText('outbox-dead', known ? String(o.dead_letters) : 'unknown', !known ? 'warn' : o.dead_letters > 0 ? 'bad' : '');
    const hrows = (o.handlers || []).map((h) => {
      const tr = document.createElement('tr');
      tr.dataset.handler = h.name;
      const cell = (text, cls) => {
        const td = document.createElement('td');
        td.textContent = text;
        td.className = cls || '';
        return td;
      };
      const state = h.state_reason ? `${h.state} (${h.state_reason})` : h.state;
      const target = h.target_up ? 'up' : h.failing_since ? `down since ${h.failing_since}` : 'down';
      tr.append(cell(h.name), cell(h.type), cell(state, h.state === 'active' ? 'ok' : 'bad'), cell(String(h.pending)),
        cell(h.pending > 0 ? age(h.oldest_pending_age_seconds) : 'none waiting'),
        cell(String(h.dead_letters), h.dead_letters > 0 ? 'bad' : ''), cell(target, h.target_up ? 'ok' : 'bad'),
        cell(h.last_error || ''));
      return tr;
    });
    $('handlers').replaceChildren(...hrows);
  }

  $('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const token = $('token').value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $('token').value = '';
    start();
  });
  $('forget').addEventListener('click', () => askToken('The token is forgotten in this tab.'));

  if (sessionStorage.getItem(TOKEN_KEY)) start();
  else askToken();
})();
