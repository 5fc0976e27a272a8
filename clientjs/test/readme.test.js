// README.md says what the code does: the five lines a web developer
// copies come first; the defaults in the options table are the client's;
// the reasons it lists as stopping are STOP_REASONS; docs/protocol.md
// gives the same request timeout and serving path, recovery reasons and
// token refresh clock; and the example's commands run as written on the
// oldest Node it names.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { HeraldClient, STOP_REASONS } from '../herald.js';
import { heraldBinary, recorder, waitUntil } from '../testutil/helpers.js';
import { token } from '../example/app.mjs';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const protocol = readFileSync(new URL('../../docs/protocol.md', import.meta.url), 'utf8');

test('README: it starts with the five lines to copy', () => {
  const m = /^# .+\n\n```js\n((?:.+\n)+?)```\n/.exec(readme);
  assert.ok(m, 'a title, then a js block');
  const lines = m[1].trimEnd().split('\n');
  assert.equal(lines.length, 5, lines.join('\n'));
  assert.match(lines[0], /^import \{ HeraldClient \} from '.+\/client\/herald\.js';$/);
});

test('README: the documented defaults are the client\'s', () => {
  const c = new HeraldClient({ url: 'http://127.0.0.1:1', getToken: () => 't', window: null, document: null });
  const o = c._options;
  for (const k of ['requestTimeoutMs', 'resyncAfterHiddenMs', 'refreshRatio', 'maxIds', 'sseIdleTimeoutMs']) {
    assert.match(readme, new RegExp(`\\| \`${k}\` \\| \`${String(o[k]).replace('.', '\\.')}\` \\|`), `${k} defaults to ${o[k]}`);
  }
  const b = c._backoff.options;
  assert.ok(readme.includes(`{initialMs: ${b.initialMs}, maxMs: ${b.maxMs}, factor: ${b.factor}, jitter: '${b.jitter}', resetAfterMs: ${b.resetAfterMs}}`), 'backoff defaults');
  assert.equal(c.transport, 'ws');
  c.close();
});

test('README and docs/protocol.md agree with the code on reasons, timeouts and serving', () => {
  const stop = /the\s+reasons in `STOP_REASONS` \(([^)]+)\)/.exec(readme);
  assert.ok(stop, 'README lists STOP_REASONS');
  assert.deepEqual([...stop[1].matchAll(/`([a-z_]+)`/g)].map((x) => x[1]).sort(), [...STOP_REASONS].sort());
  assert.match(readme, /`requestTimeoutMs` \(default \*\*5000 ms\*\*\)/);
  assert.match(protocol, /the reference client:\n5 s\)/);
  assert.match(protocol, /served under `\/client\/`/);
  assert.match(readme, /`Cache-Control: no-cache` and an `ETag`/);
  assert.match(protocol, /`Cache-Control: no-cache` and an `ETag`/);
});

// rows returns the first-column codes of the table that starts at head in text.
function rows(text, head) {
  const i = text.indexOf(head);
  assert.ok(i >= 0, `a table at ${head}`);
  return [...text.slice(i).split('\n\n')[0].matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1]).sort();
}

test('README and docs/protocol.md list the server\'s recovery reasons, and refresh by its clock', () => {
  const vocabulary = JSON.parse(readFileSync(new URL('./vocabulary.json', import.meta.url), 'utf8'));
  const want = [...vocabulary.recovery_reasons].sort();
  assert.deepEqual(rows(readme, '| recovery reason | meaning |'), want, 'README');
  assert.deepEqual(rows(protocol, '<!-- generated: recovery-reasons'), want, 'docs/protocol.md');
  assert.match(protocol, /schedule the token refresh from `expires_in`/);
  assert.match(readme, /never the device's clock[^.]*: the `connect` reply's `expires_in`/);
});

/** freePort returns a TCP port of 127.0.0.1 nothing listens on now. */
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * started runs a long-running shell command line in cwd (its own process
 * group, stopped when the test ends) and waits until its output matches
 * ready; it fails at once, with the output, if the command exits first.
 */
async function started(t, line, cwd, env, ready) {
  const child = spawn('sh', ['-c', line], { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let exited = null;
  child.stdout.on('data', (b) => (out += b));
  child.stderr.on('data', (b) => (out += b));
  child.on('exit', (code, signal) => (exited = { code, signal }));
  t.after(() => {
    try {
      process.kill(-child.pid, 'SIGTERM');
    } catch {
      // gone already
    }
  });
  await waitUntil(() => {
    if (exited) throw new Error(`\`${line}\` exited (${JSON.stringify(exited)}) before it was ready:\n${out}`);
    return ready.test(out);
  }, `\`${line}\` to print ${ready}`, 60_000);
}

test('README: the example\'s commands work as written on the oldest Node it names, against a real Herald', async (t) => {
  const block = /The example runs against a local Herald[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme);
  assert.ok(block, 'the example\'s commands');
  const [serve, app, curl, ...more] = block[1].split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#'));
  assert.deepEqual(more, [], 'three commands: Herald, the app, a change');

  // The oldest Node the README names runs the app's command.
  const oldest = Number(/Node\.js ≥ (\d+)/.exec(readme)?.[1]);
  assert.ok(oldest >= 20, 'the README names its oldest Node: "Node.js ≥ N"');
  const node = process.env.HERALD_OLDEST_NODE || process.execPath;
  const version = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
  assert.equal(Number(version.slice(1).split('.')[0]), oldest, `${node} is ${version}, not Node ${oldest}: scripts/test-js.sh sets HERALD_OLDEST_NODE to a Node ${oldest}`);

  // A folder laid out as the repository's root (bin/herald, clientjs/),
  // with that node, and herald, first on PATH; the commands' ports become
  // free ones, and nothing else changes.
  const root = await mkdtemp(join(tmpdir(), 'herald-clientjs-readme-'));
  t.after(() => rm(root, { recursive: true, force: true }));
  const bin = await heraldBinary();
  await mkdir(join(root, 'bin'));
  await mkdir(join(root, 'path'));
  await symlink(bin, join(root, 'bin', 'herald'));
  await symlink(bin, join(root, 'path', 'herald'));
  await symlink(node, join(root, 'path', 'node'));
  await symlink(fileURLToPath(new URL('..', import.meta.url)), join(root, 'clientjs'));
  const env = { PATH: `${join(root, 'path')}:${process.env.PATH}`, HOME: process.env.HOME || root };
  const [heraldPort, appPort] = [await freePort(), await freePort()];
  const ports = (line) => line.replaceAll('8080', String(heraldPort)).replaceAll('8090', String(appPort));

  await started(t, ports(serve), root, env, /listening on http:/);
  await started(t, ports(app), root, env, /the example is on http:/);
  const page = await fetch(`http://127.0.0.1:${appPort}/`);
  assert.equal(page.status, 200);
  assert.match(await page.text(), /<html/i);

  // A subscriber to the app's channel, with a token signed by the secret
  // the commands give Herald and the app.
  const secret = /--jwt-hmac-secret (\S+)/.exec(serve)[1];
  assert.ok(app.includes(`HERALD_SECRET=${secret}`), 'Herald and the app share the secret');
  const c = new HeraldClient({ url: `http://127.0.0.1:${heraldPort}`, transport: 'sse', getToken: () => token(secret, 'readme', { tenant: 'acme', subscribe: ['orders'] }) });
  t.after(() => c.close());
  const r = recorder();
  await c.subscribe('orders', r.handlers).ready;

  // The change, as the README makes it; until the app's own WebSocket is
  // up its publish fails (published: false) and the change is only saved.
  let answer;
  await waitUntil(async () => {
    const out = await new Promise((resolve, reject) =>
      execFile('sh', ['-c', ports(curl)], { cwd: root, env, timeout: 20_000 }, (err, stdout, stderr) => (err ? reject(new Error(`${curl}: ${err.message}\n${stderr}`)) : resolve(stdout))),
    );
    answer = JSON.parse(out);
    return answer.published;
  }, 'the change, published');
  assert.equal(answer.order.id, 'A-2');
  assert.equal(answer.order.status, 'shipped');
  await waitUntil(() => r.pubs.some((p) => p.data.id === 'A-2' && p.data.status === 'shipped'), 'the change, delivered to a subscriber');
  assert.equal(r.pubs.at(-1).type, 'order.updated');
});
