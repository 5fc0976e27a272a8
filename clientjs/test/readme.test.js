// README.md says what the code does: the five lines a web developer
// copies come first; the defaults in the options table are the client's;
// the reasons it lists as stopping are STOP_REASONS; and docs/protocol.md
// gives the same request timeout and serving path, recovery reasons and
// token refresh clock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { HeraldClient, STOP_REASONS } from '../herald.js';

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
