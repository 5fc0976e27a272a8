// What an app loads, gzipped (gzip -9), module by module as Herald serves
// them (dist/): the whole client (herald.js and every module it imports,
// statically or not) within 12 KB, an SSE-only app in a browser (sse.js
// and its static imports: no FetchEventSource, no refusal handling until
// a request is refused) within 6 KB. KB as bundle-size tools count it:
// 1,000 bytes. Fails over budget.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';

const dist = new URL('../dist/', import.meta.url);
const source = (f) => readFileSync(new URL(f, dist));

// graph returns the modules entry loads: static imports, and dynamic ones too when asked.
function graph(entry, dynamic) {
  const seen = new Set();
  const visit = (f) => {
    if (seen.has(f)) return;
    seen.add(f);
    const text = source(f).toString();
    for (const m of text.matchAll(/(?:from|import)\s*(\(?)\s*"\.\/([^"]+)"/g)) if (!m[1] || dynamic) visit(m[2]);
  };
  visit(entry);
  return [...seen].sort();
}

function gzipped(files) {
  return files.reduce((n, f) => n + gzipSync(source(f), { level: 9 }).length, 0);
}

const KB = 1000;

test('the whole client is within 12 KB gzipped, an SSE-only app within 6 KB', (t) => {
  const whole = graph('herald.js', true);
  const sse = graph('sse.js', false);
  const ws = graph('ws.js', false);
  const sizes = { whole: gzipped(whole), sse: gzipped(sse), ws: gzipped(ws) };
  t.diagnostic(`whole client (${whole.join(' ')}): ${sizes.whole} bytes gzipped`);
  t.diagnostic(`SSE-only in a browser (${sse.join(' ')}): ${sizes.sse} bytes gzipped`);
  t.diagnostic(`WebSocket-only (${ws.join(' ')}): ${sizes.ws} bytes gzipped`);
  assert.ok(!sse.includes('ws.js') && !ws.includes('sse.js') && !ws.includes('eventsource.js'), 'one transport loads no code of the other');
  assert.ok(sizes.whole <= 12 * KB, `the whole client is ${sizes.whole} bytes gzipped, over 12 KB (12,000 bytes)`);
  assert.ok(sizes.sse <= 6 * KB, `an SSE-only app loads ${sizes.sse} bytes gzipped, over 6 KB (6,000 bytes)`);
});
