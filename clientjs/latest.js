// latestWins: apply absolute state only when it is newer. A module of its
// own, so an app that does not use it does not load it: herald.js
// re-exports it; with sse.js or ws.js, import it from latest.js.
import { HeraldError } from './core.js';

/** A filter that accepts an item only when its version is above every version seen for its key (see herald.d.ts). */
export function latestWins(keyFn, versionFn) {
  if (typeof keyFn !== 'function' || typeof versionFn !== 'function') {
    throw new HeraldError('invalid_argument', 'latestWins(keyFn, versionFn): both must be functions');
  }
  const latest = new Map();
  function accept(item) {
    const version = versionFn(item);
    if (version === null || version === undefined || Number.isNaN(version)) return false;
    const key = keyFn(item);
    const cur = latest.get(key);
    if (cur !== undefined && !(version > cur.version)) return false;
    latest.set(key, { version, item });
    return true;
  }
  accept.get = (key) => latest.get(key)?.item;
  accept.version = (key) => latest.get(key)?.version;
  accept.has = (key) => latest.has(key);
  accept.delete = (key) => latest.delete(key);
  accept.clear = () => latest.clear();
  accept.values = () => Array.from(latest.values(), (e) => e.item);
  Object.defineProperty(accept, 'size', { get: () => latest.size });
  return accept;
}
