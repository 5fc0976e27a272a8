// No module of the client imports itself through others: the import graph
// of every .js and .mjs file under clientjs/ (static imports, re-exports
// and import()s of a relative path, as the sources and dist/ write them;
// not the type-only import()s of JSDoc comments) has no cycle. A cycle makes a module's exports depend on which module
// an app loads first; the test names every cycle it finds.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/** modules returns the .js and .mjs files under dir (no node_modules, no dot folders). */
function modules(dir) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name.startsWith('.') || e.name === 'node_modules') continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...modules(p));
    else if (/\.m?js$/.test(e.name)) out.push(p);
  }
  return out;
}

// `… from './x.js'`, `import './x.js'` and `import('./x.js')`, quoted
// either way, with or without spaces (dist/ is minified).
const IMPORT = /(?:\bfrom\s*|\bimport\s*\(?\s*)(['"])(\.{1,2}\/[^'"\n]+)\1/g;

/** imports returns the files file imports by a relative path. */
function imports(file) {
  // Comments go first (a URL's // is no comment).
  const text = readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:\\])\/\/.*$/gm, '$1');
  return [...new Set([...text.matchAll(IMPORT)].map((m) => resolve(dirname(file), m[2])))];
}

/** cycles returns each cycle of graph ({file: [imported files]}) once, as a path that ends where it starts. */
function cycles(graph) {
  const found = new Map();
  const state = new Map(); // 1: on the path, 2: done
  const path = [];
  const visit = (f) => {
    state.set(f, 1);
    path.push(f);
    for (const g of graph[f] || []) {
      if (state.get(g) === 1) {
        const cycle = path.slice(path.indexOf(g));
        // The same cycle found from another module is reported once.
        const key = [...cycle].sort().join('\n');
        if (!found.has(key)) found.set(key, [...cycle, g]);
      } else if (!state.has(g)) {
        visit(g);
      }
    }
    path.pop();
    state.set(f, 2);
  };
  for (const f of Object.keys(graph).sort()) if (!state.has(f)) visit(f);
  return [...found.values()];
}

test('the cycle finder finds a cycle through a dynamic import, and none in a tree', () => {
  assert.deepEqual(cycles({ a: ['b'], b: ['c'], c: ['a'], d: ['a'] }), [['a', 'b', 'c', 'a']]);
  assert.deepEqual(cycles({ a: ['b', 'c'], b: ['c'], c: [] }), []);
  assert.deepEqual(cycles({ a: ['a'] }), [['a', 'a']]);
  const text = `import { x } from './core.js';\nconst m = await import("./refusal.js");\nexport * from './latest.js';\nimport'./side.js';`;
  assert.deepEqual([...text.matchAll(IMPORT)].map((m) => m[2]), ['./core.js', './refusal.js', './latest.js', './side.js']);
  // core.js imports nothing: the import()s of its JSDoc types are no imports.
  assert.deepEqual(imports(join(root, 'core.js')), []);
  assert.deepEqual(imports(join(root, 'sse.js')), ['core.js', 'eventsource.js', 'refusal.js'].map((f) => join(root, f)));
});

test('no import cycle among the client\'s modules, tests and tools', () => {
  const files = modules(root);
  assert.ok(files.some((f) => f.endsWith(join('clientjs', 'sse.js'))) && files.some((f) => f.endsWith(join('dist', 'sse.js'))), 'the sources and dist/ are read');
  const graph = Object.fromEntries(files.map((f) => [f, imports(f)]));
  assert.ok(graph[join(root, 'eventsource.js')].includes(join(root, 'refusal.js')), 'the graph has the imports: eventsource.js imports refusal.js');
  const found = cycles(graph).map((c) => c.map((f) => relative(root, f)).join(' → '));
  assert.deepEqual(found, [], `import cycles:\n${found.join('\n')}`);
});
