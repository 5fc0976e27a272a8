// Package session is the gateway's connection core: one realtime
// connection (Conn), whatever its transport, and everything it shares
// with the other connections of its server (Env).
//
// A Conn holds its hub subscriptions and their positions (Positions, the
// content of an SSE cursor), one bounded publication queue that the hub
// fills through Deliver without blocking, one control queue for replies,
// refresh requests and subscription changes, the subscriptions a client
// asked for by request and its revalidation state. One writer, started on
// demand on a goroutine of the server's WriterPool, drains both queues
// into the transport's Sink, the only thing the core knows of a
// transport, and exits once nothing is left. A publication that finds no
// writer running and nothing pending is written by Deliver itself,
// through a DirectSink and without blocking; only what the socket does
// not take is left to the writer. A connection whose queue
// overflows reads its channels from the history; one that falls behind
// the history is closed as slow.
//
// Every close has a typed Reason; every subscription that did not
// recover, a RecoveryReason; every bound a connection meets, a Limit*
// label. The Reason and RecoveryReason tables are herald.v1's vocabulary:
// docs/protocol.md and the JS client's fixture are generated from them.
//
// The core declares what it needs of the server: a Hub to subscribe
// through, a History to recover from, the Counters it updates and a
// rate-limited logger. It holds the Bounds of every connection, which the
// server fills once from its Config and the transports (internal/sse,
// internal/ws) read through Conn.Bounds; they build on the exported
// members of Conn.
package session
