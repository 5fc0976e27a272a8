// Package gateway is Herald's HTTP server: the SSE handler (over the
// transport in internal/sse), the herald.v1 WebSocket handler (over the
// transport in internal/ws; the protocol is docs/protocol.md), health and
// readiness probes, Prometheus metrics and the demo page.
//
// The server decides what a connection may do: its credentials and
// admission, the connection slots (MaxConnections, MaxConnectionsPerUser)
// and the bounds of every connection, which it fills once from Config into
// the connection core (session.Bounds). A transport gets values and
// functions, never a way back into the server, and the server releases
// what a connection held once its transport is done with it.
//
// Every stream is a connection (internal/session: Conn), whatever its
// transport, with one bounded send queue that the fan-out hub fills with
// a non-blocking enqueue, one control queue and one writer that drains
// both into the transport's sink (internal/sse, internal/ws), writes a
// batch and flushes only when nothing is left. A connection whose queue
// overflows drops what it holds and catches up from the channel history;
// only one that falls behind the history is closed, as "slow". Every
// close has a typed Reason (internal/session: session.Reason and its
// table, the one name of each reason) that is a metric label, a log field
// and, where the stream can still carry it, a final "disconnect" event
// telling the client whether and when to reconnect.
//
// After its head (the upgrade, or the SSE response's headers and first
// events) an HTTP/1.1 connection leaves net/http (hijack): a reader
// goroutine of its own notices the client going, and the writer is
// started on demand and exits when the queues are empty, so an idle
// connection holds only its reader goroutine (internal/ws, internal/sse).
// An HTTP/2 SSE stream, which cannot be hijacked, keeps its handler
// waiting while the writer writes through net/http.
//
// One server-wide revalidation timer walks every
// connection each Config.RevalidateInterval: it cuts revoked tokens and
// sessions, asks for fresh tokens ahead of expiry and closes connections
// whose token ran out, and re-authorizes subscriptions allowed by a
// subscription token or the webhook, ending a withdrawn one alone.
//
// A stream's resume position is an opaque cursor (internal/sse) covering
// every channel of the stream; a client that presents it gets every
// missed publication in order, or is told recovered:false and nothing
// partial.
package gateway
