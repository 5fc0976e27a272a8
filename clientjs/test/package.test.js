// package.json is ready for npm: every export has its module and types,
// `files` holds every module an export loads (statically or not) and
// nothing else that is code, and the modules run nothing on import.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, existsSync } from 'node:fs';

const at = (f) => new URL(`../${f}`, import.meta.url);
const pkg = JSON.parse(readFileSync(at('package.json'), 'utf8'));

function graph(entry, seen = new Set()) {
  if (seen.has(entry)) return seen;
  seen.add(entry);
  for (const m of readFileSync(at(entry), 'utf8').matchAll(/(?:from|import)\s*\(?\s*'\.\/([^']+)'/g)) graph(m[1], seen);
  return seen;
}

test('package.json: exports, types, files and sideEffects', () => {
  assert.equal(pkg.type, 'module');
  assert.equal(pkg.sideEffects, false);
  assert.equal(pkg.types, 'herald.d.ts');
  assert.deepEqual(pkg.dependencies, undefined, 'no runtime dependencies');
  const shipped = new Set(pkg.files);
  const needed = new Set(['README.md']);
  for (const [path, target] of Object.entries(pkg.exports)) {
    if (path === './package.json') continue;
    for (const f of [target.types, target.default]) {
      assert.ok(existsSync(at(f)), `${path}: ${f} exists`);
      needed.add(f.slice(2));
    }
    for (const f of graph(target.default.slice(2))) needed.add(f);
  }
  assert.deepEqual([...shipped].sort(), [...needed].sort(), 'files is exactly what the exports need');
});

test('importing a module runs nothing: no timers, no listeners, no globals', async () => {
  const before = Object.keys(globalThis).sort();
  for (const f of ['herald.js', 'sse.js', 'ws.js', 'latest.js']) await import(at(f));
  assert.deepEqual(Object.keys(globalThis).sort(), before);
});
