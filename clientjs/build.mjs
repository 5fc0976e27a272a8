// Builds dist/: each module of this directory minified on its own (no
// bundling: the files import each other as the sources do). Herald serves
// dist/ under /client/; test/dist.test.js checks it is up to date.
//
//   node build.mjs     (esbuild from $HERALD_JSTOOLS, which scripts/test-js.sh installs)
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

/** The modules Herald serves, entry points first. */
export const MODULES = ['herald.js', 'sse.js', 'ws.js', 'core.js', 'latest.js', 'eventsource.js', 'refusal.js'];

/** The folder holding the pinned build tools (esbuild, typescript). */
export const toolsDir = process.env.HERALD_JSTOOLS || join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'herald-jstools');

/** build returns {file: minified source} for every module. */
export function build() {
  let esbuild;
  try {
    esbuild = createRequire(join(toolsDir, 'package.json'))('esbuild');
  } catch (e) {
    throw new Error(`esbuild is not installed in ${toolsDir} (${e.message}): run scripts/test-js.sh, which installs it`);
  }
  const out = {};
  const sources = Object.fromEntries(MODULES.map((f) => [f, readFileSync(join(here, f), 'utf8')]));
  // Properties starting with _ are internal: they get short names, the
  // same in every module (one mangle cache, modules in a fixed order),
  // never a word that appears in any module (false: not a new name).
  let mangleCache = {};
  for (const src of Object.values(sources)) for (const [w] of src.matchAll(/[A-Za-z$][\w$]*/g)) mangleCache[w] = false;
  for (const f of MODULES) {
    const opts = { minify: true, format: 'esm', target: 'es2022', legalComments: 'none', mangleProps: /^_/, mangleCache };
    const r = esbuild.transformSync(sources[f], opts);
    mangleCache = r.mangleCache;
    out[f] = r.code;
  }
  return out;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  mkdirSync(join(here, 'dist'), { recursive: true });
  for (const [f, code] of Object.entries(build())) writeFileSync(join(here, 'dist', f), code);
}
