// Checks the client's protocol constants against test/vocabulary.json, which
// the gateway's tests generate from the server's one table of reasons,
// close codes, error codes, recovery reasons and ops
// (gateway/internal/session/reasons.go and recovery.go; go test ./gateway
// -run TestVocabulary -update).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { PROTOCOL, STOP_REASONS, closeAction, reasonAction } from '../herald.js';

const vocabulary = JSON.parse(readFileSync(new URL('./vocabulary.json', import.meta.url), 'utf8'));

test('the subprotocol is the server\'s', () => {
  assert.equal(PROTOCOL, vocabulary.protocol);
});

test('every disconnect reason gets the action the server means', () => {
  assert.ok(vocabulary.reasons.length > 10);
  for (const r of vocabulary.reasons) {
    const want = r.code === 'token_expired' ? 'reauth' : r.reconnect ? 'reconnect' : 'stop';
    // Both with the server's reconnect flag (a disconnect push or event)
    // and without it (the error code of a refused request).
    assert.equal(reasonAction(r.code, r.reconnect), want, `${r.code} with its flag`);
    assert.equal(reasonAction(r.code), want, `${r.code} alone`);
  }
});

test('every close code is acted on as its range says', () => {
  for (const range of vocabulary.close_ranges) {
    for (const code of [range.from, range.to]) {
      assert.equal(closeAction(code), range.action, `close code ${code}`);
    }
  }
  for (const r of vocabulary.reasons) {
    if (!r.close) continue;
    const want = r.code === 'token_expired' ? 'reauth' : r.reconnect ? 'reconnect' : 'stop';
    assert.equal(closeAction(r.close), want, `${r.code} closes with ${r.close}`);
  }
  assert.equal(closeAction(1006), 'reconnect');
});

test('the ops the client sends are ops the server knows', () => {
  const source = ['../ws.js', '../core.js'].map((f) => readFileSync(new URL(f, import.meta.url), 'utf8')).join('\n');
  // Requests go through request('<op>', …); pongs are written directly.
  const sent = new Set([
    ...[...source.matchAll(/\.request\('([a-z_]+)'/g)].map((m) => m[1]),
    ...[...source.matchAll(/_write\(\{ op: '([a-z_]+)'/g)].map((m) => m[1]),
  ]);
  assert.ok(sent.size >= 6, `found ops ${[...sent]}`);
  for (const op of sent) assert.ok(vocabulary.ops.includes(op), `the client sends op ${op}, which the server does not know`);
});

// union returns the string literals of `export type name = …;` in herald.d.ts.
function union(name) {
  const dts = readFileSync(new URL('../herald.d.ts', import.meta.url), 'utf8');
  const m = new RegExp(`export type ${name} =([^;]+);`).exec(dts);
  assert.ok(m, `herald.d.ts declares ${name}`);
  return [...m[1].matchAll(/'([a-z_.0-9]+)'/g)].map((x) => x[1]).sort();
}

test('the exported and declared reasons, error codes, recovery reasons and ops are the server\'s', () => {
  const stop = vocabulary.reasons.filter((r) => !r.reconnect).map((r) => r.code).sort();
  assert.deepEqual([...STOP_REASONS].sort(), stop, 'STOP_REASONS');
  assert.deepEqual(union('StopReason'), stop, 'StopReason in herald.d.ts');
  assert.deepEqual(union('DisconnectReason'), vocabulary.reasons.map((r) => r.code).sort(), 'DisconnectReason in herald.d.ts');
  assert.deepEqual(union('ServerErrorCode'), vocabulary.error_codes.map((e) => e.code).sort(), 'ServerErrorCode in herald.d.ts');
  assert.deepEqual(union('RecoveryReason'), [...vocabulary.recovery_reasons].sort(), 'RecoveryReason in herald.d.ts');
  assert.deepEqual(union('Op'), [...vocabulary.ops].sort(), 'Op in herald.d.ts');
  // The client's own codes never reuse a server code with another meaning.
  const server = new Set([...vocabulary.error_codes.map((e) => e.code), ...vocabulary.reasons.map((r) => r.code)]);
  for (const code of union('ClientErrorCode')) assert.ok(!server.has(code) || code === 'timeout', `client code ${code} is also a server code`);
});
