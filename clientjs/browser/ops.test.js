// Herald's operator view (GET /ops/) in a real browser: headless Chromium
// (Debian's /usr/bin/chromium, driven by playwright-core) against a real
// `herald serve --admin-token-file … --feed=false` on the embedded SQLite
// store. scripts/test-browser.sh installs both and runs this file
// (bash scripts/test-browser.sh browser/ops.test.js).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, writeFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Herald } from '../testutil/helpers.js';
import { useChromium } from './lib.js';

const ADMIN_TOKEN = 'browser-ops-admin-token-0123456789';
const TOKEN_KEY = 'herald.ops.token';

const newPage = useChromium();

/** startOpsHerald starts `herald serve` with the operator view on and no Worker, so staged records stay pending. */
async function startOpsHerald(t) {
  const dir = await mkdtemp(join(tmpdir(), 'herald-ops-token-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'admin-token');
  await writeFile(file, `${ADMIN_TOKEN}\n`, { mode: 0o600 });
  const h = await Herald.start({ args: ['--admin-token-file', file, '--feed=false', '--max-connections', '25'] });
  t.after(() => h.destroy());
  return h;
}

/** openStream opens an SSE stream from Node and resolves once its first bytes arrived (it is then counted). */
async function openStream(t, h, token, channel) {
  const ac = new AbortController();
  t.after(() => ac.abort());
  const resp = await fetch(`${h.url}/v1/sse?channel=${encodeURIComponent(channel)}`, { headers: { Authorization: `Bearer ${token}` }, signal: ac.signal });
  if (resp.status !== 200) throw new Error(`GET /v1/sse: ${resp.status} ${await resp.text()}`);
  const first = await resp.body.getReader().read();
  assert.ok(!first.done && first.value.length > 0, 'the stream sent its first event');
}

/** opsStatus fetches /ops/status from Node with authorization (none when empty). */
async function opsStatus(h, authorization) {
  const resp = await fetch(`${h.url}/ops/status`, { headers: authorization ? { Authorization: authorization } : {} });
  return { status: resp.status, headers: resp.headers, body: await resp.json() };
}

/** openOps opens /ops/ in a fresh browser context, recording requests and console messages. */
async function openOps(t, h) {
  const page = await newPage(t, { timeout: 10_000 });
  const requests = [];
  const consoleLines = [];
  page.on('request', (r) => requests.push({ method: r.method(), url: r.url(), authorization: r.headers().authorization }));
  page.on('console', (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => consoleLines.push(`pageerror: ${e.message}`));
  const resp = await page.goto(`${h.url}/ops/`);
  assert.equal(resp.status(), 200);
  return { page, requests, consoleLines, headers: resp.headers() };
}

/** waitText waits until the element sel reads want, failing with what the page shows. */
async function waitText(pg, sel, want, ms = 10_000) {
  try {
    await pg.page.waitForFunction(([s, w]) => document.querySelector(s)?.textContent === w, [sel, want], { timeout: ms });
  } catch (e) {
    const shown = await pg.page.evaluate(() => document.body.innerText);
    throw new Error(`${sel} never read ${JSON.stringify(want)} within ${ms} ms (${e.message.split('\n')[0]}); the page shows:\n${shown}\nconsole:\n${pg.consoleLines.join('\n')}`);
  }
}

const text = (pg, sel) => pg.page.textContent(sel);

/** signIn types token into the form and submits it. */
async function signIn(pg, token) {
  await pg.page.waitForSelector('#login:not([hidden])');
  await pg.page.fill('#token', token);
  await pg.page.click('#show');
}

test('ops: a wrong token is refused; the admin token shows readiness, the open stream and the backlog, refreshed', async (t) => {
  const h = await startOpsHerald(t);
  await openStream(t, h, await h.token({ subscribe: ['orders/*'] }), 'orders/1');
  await h.publish('orders/1', { n: 1 }); // no Worker: it stays in the backlog

  const pg = await openOps(t, h);
  const csp = pg.headers['content-security-policy'];
  assert.match(csp, /script-src 'self';/);
  assert.ok(!csp.includes('unsafe'), csp);

  // A wrong token: the refusal, the form again, nothing kept.
  await signIn(pg, 'not-the-admin-token-0123456789');
  await pg.page.waitForSelector('#message.error');
  assert.equal(await text(pg, '#message'), 'Refused: the admin token is not accepted.');
  assert.equal(await pg.page.isVisible('#status'), false);
  assert.equal(await pg.page.isVisible('#login'), true);
  assert.equal(await pg.page.evaluate((k) => sessionStorage.getItem(k), TOKEN_KEY), null);

  // The admin token.
  await signIn(pg, ADMIN_TOKEN);
  await pg.page.waitForSelector('#status:not([hidden])');
  await waitText(pg, '#outbox-pending', '1');
  assert.equal(await pg.page.isVisible('#login'), false);
  assert.equal(await pg.page.isVisible('#message'), false);
  assert.equal(await text(pg, '#ready-status'), 'ready');
  const checks = await pg.page.$$eval('#ready-checks tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  assert.deepEqual(checks, [['broker', 'ok'], ['outbox', 'ok']]);
  assert.equal(await text(pg, '#conn-sse'), '1');
  assert.equal(await text(pg, '#conn-ws'), '0');
  assert.equal(await text(pg, '#conn-total'), '1 of 25');
  assert.equal(await text(pg, '#conn-max'), '25');
  assert.equal(await text(pg, '#outbox-status'), 'ok');
  assert.equal(await text(pg, '#outbox-dead'), '0');
  assert.match(await text(pg, '#outbox-oldest'), /^\d+\.\d s \(occurred \d{4}-\d\d-\d\dT[\d:.]+Z\)$/);
  const shot = Date.parse(await text(pg, '#snapshot-time'));
  assert.ok(Math.abs(Date.now() - shot) < 60_000, `snapshot time ${await text(pg, '#snapshot-time')} is now`);
  assert.equal(await pg.page.evaluate((k) => sessionStorage.getItem(k), TOKEN_KEY), ADMIN_TOKEN);

  // What the page shows is what /ops/status says.
  const direct = await opsStatus(h, `Bearer ${ADMIN_TOKEN}`);
  assert.equal(direct.status, 200);
  assert.equal(direct.headers.get('cache-control'), 'no-store');
  assert.equal(direct.body.outbox.pending, 1);
  assert.deepEqual(direct.body.connections, { sse: 1, ws: 0, total: 1, max: 25 });

  // It polls: a second record and a second stream show up without a reload.
  await h.publish('orders/2', { n: 2 });
  await openStream(t, h, await h.token({ sub: 'u2', subscribe: ['orders/*'] }), 'orders/2');
  await waitText(pg, '#outbox-pending', '2');
  await waitText(pg, '#conn-sse', '2');

  // A reload keeps the token for this tab: no form.
  await pg.page.reload();
  await pg.page.waitForSelector('#status:not([hidden])');
  await waitText(pg, '#outbox-pending', '2');
  assert.equal(await pg.page.isVisible('#login'), false);

  // The page asked for nothing but its own files and GET /ops/status, the
  // token only ever in the Authorization header.
  const paths = new Set(pg.requests.map((r) => `${r.method} ${new URL(r.url).pathname}`));
  paths.delete('GET /favicon.ico');
  assert.deepEqual([...paths].sort(), ['GET /ops/', 'GET /ops/ops.css', 'GET /ops/ops.js', 'GET /ops/status']);
  const polls = pg.requests.filter((r) => r.url.endsWith('/ops/status'));
  assert.equal(polls[0].authorization, 'Bearer not-the-admin-token-0123456789');
  assert.ok(polls.length >= 3 && polls.slice(1).every((r) => r.authorization === `Bearer ${ADMIN_TOKEN}`), JSON.stringify(polls));
  assert.ok(pg.requests.every((r) => !r.url.includes(ADMIN_TOKEN)));
  // No CSP violation or script error; the one 401 is the refused token.
  const problems = pg.consoleLines.filter((l) => !/status of 401/.test(l));
  assert.deepEqual(problems, []);
});

test('ops: without the token /ops/status answers 401 with a JSON error, and "Forget token" asks again', async (t) => {
  const h = await startOpsHerald(t);
  for (const auth of ['', 'Bearer wrong-token-0123456789abcdef', `Basic ${ADMIN_TOKEN}`]) {
    const r = await opsStatus(h, auth);
    assert.equal(r.status, 401, auth);
    assert.equal(r.body.error.code, 'unauthorized');
    assert.equal(r.headers.get('cache-control'), 'no-store');
    assert.equal(r.body.outbox, undefined);
  }

  const pg = await openOps(t, h);
  await signIn(pg, ADMIN_TOKEN);
  await waitText(pg, '#outbox-pending', '0');
  assert.equal(await text(pg, '#outbox-oldest'), 'none waiting');
  assert.equal(await text(pg, '#conn-total'), '0 of 25');
  await pg.page.click('#forget');
  await pg.page.waitForSelector('#login:not([hidden])');
  assert.equal(await pg.page.isVisible('#status'), false);
  assert.equal(await pg.page.evaluate((k) => sessionStorage.getItem(k), TOKEN_KEY), null);
});
