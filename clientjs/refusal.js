// Why Herald refused an HTTP request: its status, JSON error body and
// Retry-After. Loaded only when a request was refused.
import { reasonAction } from './core.js';
import { network } from './sse.js';

/** readRefusal reads the status, JSON error body and Retry-After (seconds) of a refused request. */
export async function readRefusal(res) {
  const after = Number(res.headers.get('retry-after'));
  const info = { status: res.status, code: '', message: '', retryAfterMs: after >= 0 ? after * 1000 : undefined };
  try {
    const body = JSON.parse((await res.text()).slice(0, 4096));
    if (body && body.error && typeof body.error.code === 'string') {
      info.code = body.error.code;
      info.message = String(body.error.message || '');
    }
  } catch {
    // not JSON: the status alone tells
  }
  if (!info.code) info.code = { 401: 'unauthorized', 403: 'forbidden', 429: 'too_many_requests' }[res.status] || 'server_error';
  return info;
}

/** info maps a refusal to what the client does next. */
export const info = (r) => ({ action: reasonAction(r.code), reason: r.code, status: r.status, message: r.message || `refused: ${r.status} ${r.code}`, delayMs: r.retryAfterMs });

/** refused returns what follows the refused request of response res. */
export const refused = async (res) => info(await readRefusal(res));

/**
 * diagnose ends an SSE stream that did not open, saying why: the error
 * event of a FetchEventSource has the status; a browser EventSource hides
 * it, so the same request is made once more with fetch and the
 * Authorization header.
 */
export async function diagnose(link, ev) {
  const c = link._client;
  link._closeSource();
  if (typeof ev.status === 'number') return link._end(info(ev));
  if (ev.error !== undefined || !c._fetch) return link._end(network(`cannot open the stream${ev.error ? ': ' + ev.error.message : ''}`));
  const url = await link._url();
  const abort = new AbortController();
  let res;
  try {
    res = await c._fetch(url.toString(), { headers: { Authorization: `Bearer ${link._token}`, Accept: 'text/event-stream' }, signal: abort.signal });
  } catch (e) {
    return link._end(network(`cannot open the stream: ${e && e.message}`));
  }
  if (res.status === 200) {
    abort.abort();
    return link._end(network('the stream failed to open'));
  }
  link._end(await refused(res));
}
