// Types, checked with tsc (typescript, pinned, installed by
// scripts/test-js.sh):
//   - the modules type-check as JavaScript (checkJs), and the README's
//     uses of the client (test/types/usage.ts) against the declarations;
//   - the declarations (herald.d.ts, sse.d.ts, ws.d.ts, latest.d.ts) match
//     the code: tsc generates declarations from the JavaScript, and every
//     export the modules have must be declared, every declared one must
//     exist, and each must be assignable to its declaration.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { toolsDir } from '../build.mjs';

const dir = fileURLToPath(new URL('..', import.meta.url));
const tsc = join(toolsDir, 'node_modules', 'typescript', 'bin', 'tsc');
const MODULES = ['core.js', 'sse.js', 'ws.js', 'latest.js', 'eventsource.js', 'refusal.js', 'herald.js'];
const ENTRIES = ['herald.js', 'sse.js', 'ws.js', 'latest.js'];

function run(args) {
  return new Promise((resolve) => {
    execFile(process.execPath, [tsc, ...args], { cwd: dir, timeout: 300_000 }, (err, stdout, stderr) => resolve({ code: err ? err.code || 1 : 0, out: `${stdout}${stderr}` }));
  });
}

const common = ['--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--lib', 'es2022,dom'];

test('the modules type-check (checkJs), and the README uses against the declarations', async () => {
  const r = await run(['-p', 'test/types/tsconfig.json']);
  assert.equal(r.code, 0, `tsc -p test/types/tsconfig.json:\n${r.out}`);
});

test('the declarations match what the modules export and implement', async (t) => {
  const tmp = await mkdtemp(join(tmpdir(), 'herald-clientjs-types-'));
  t.after(() => rm(tmp, { recursive: true, force: true }));
  const gen = await run([...common, '--allowJs', '--declaration', '--emitDeclarationOnly', '--outDir', join(tmp, 'gen'), ...MODULES]);
  assert.equal(gen.code, 0, `declarations from the JavaScript:\n${gen.out}`);
  const lines = [];
  for (const [i, f] of ENTRIES.entries()) {
    const names = Object.keys(await import(`../${f}`));
    // A value its declaration file declares itself is one the module exports.
    const dts = await readFile(join(dir, f.replace(/\.js$/, '.d.ts')), 'utf8');
    for (const [, n] of dts.matchAll(/^export (?:const|function|class) (\w+)/gm)) assert.ok(names.includes(n), `${f.replace(/\.js$/, '.d.ts')} declares ${n}, which ${f} does not export`);
    lines.push(`import * as D${i} from ${JSON.stringify(join(dir, f))};`, `import * as G${i} from './gen/${f}';`);
    lines.push(`export const exports${i}: [Exclude<keyof typeof D${i}, keyof typeof G${i}>, Exclude<keyof typeof G${i}, keyof typeof D${i}>] = [] as unknown as [never, never];`);
    for (const n of names) lines.push(`export const ${n}${i}: typeof D${i}.${n} = G${i}.${n};`);
  }
  await writeFile(join(tmp, 'conformance.ts'), lines.join('\n') + '\n');
  const r = await run([...common, '--noEmit', '--strict', '--skipLibCheck', join(tmp, 'conformance.ts')]);
  assert.equal(r.code, 0, `declarations vs generated (${join(tmp, 'conformance.ts')}):\n${r.out}`);
});
