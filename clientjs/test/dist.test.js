// dist/ is what Herald serves under /client/: each module minified on its
// own by build.mjs. It must be built from the sources as they are.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { build, MODULES } from '../build.mjs';

test('dist/ is built from the current sources (node build.mjs)', () => {
  const built = build();
  const dist = new URL('../dist/', import.meta.url);
  assert.deepEqual(readdirSync(dist).sort(), [...MODULES].sort(), 'dist/ holds exactly the modules');
  for (const f of MODULES) {
    assert.equal(readFileSync(new URL(f, dist), 'utf8'), built[f], `dist/${f} is stale: run node clientjs/build.mjs`);
  }
});
