// Why Herald refused an HTTP request: its status, JSON error body and
// Retry-After, and what the client does next. Loaded only when a request
// was refused (by sse.js and eventsource.js).
import { reasonAction, network } from './core.js';

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
 * ticketRefusal reads a refused POST /v1/tickets: null when the server has
 * tickets switched off (404 tickets_disabled, the one answer after which
 * the token may go in the URL), else what follows: a 404 without that
 * code (a proxy that does not route the path) retries with backoff.
 */
export async function ticketRefusal(res) {
  const r = await readRefusal(res);
  return r.code === 'tickets_disabled' ? null : info({ ...r, message: `POST /v1/tickets: ${r.message || `${r.status} ${r.code}`}` });
}

/**
 * streamRefusal says why an SSE stream did not open (ev: its source's
 * error event), as what the client does next. The error event of a
 * FetchEventSource has the status; a browser EventSource hides it, so the
 * same request (url() resolves to it) is made once more with fetch and
 * the Authorization header (token), which reads the status and the code.
 */
export async function streamRefusal(ev, fetch, url, token) {
  if (typeof ev.status === 'number') return info(ev);
  if (ev.error !== undefined || !fetch) return network(`cannot open the stream${ev.error ? ': ' + ev.error.message : ''}`);
  const u = await url();
  const abort = new AbortController();
  let res;
  try {
    res = await fetch(u.toString(), { headers: { Authorization: `Bearer ${token}`, Accept: 'text/event-stream' }, signal: abort.signal });
  } catch (e) {
    return network(`cannot open the stream: ${e && e.message}`);
  }
  if (res.status !== 200) return refused(res);
  abort.abort();
  return network('the stream failed to open');
}
