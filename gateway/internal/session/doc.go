// Package session is the gateway's connection core: one realtime
// connection (Conn), whatever its transport, and everything it shares
// with the other connections of its server (Env).
//
// A Conn holds its hub subscriptions and their positions (positions.go,
// the content of an SSE cursor), one bounded publication queue
// (queue.go) that the hub fills through Deliver without blocking, one
// control queue (conn_ctl.go) for replies, refresh requests and
// subscription changes, the subscriptions a client asked for by request
// (conn_subs.go) and its revalidation state (conn_reval.go). One writer
// (conn_writer.go), started on demand on a goroutine of the server's
// WriterPool (writers.go), drains both queues into the transport's Sink,
// the only thing the core knows of a transport, and exits once nothing
// is left. A connection whose queue overflows reads its channels from
// the history; one that falls behind the history is closed as slow.
//
// Every close has a typed Reason (reasons.go); every subscription that
// did not recover, a RecoveryReason (recovery.go). Both tables are
// herald.v1's vocabulary: docs/protocol.md and the JS client's fixture
// are generated from them.
//
// The core declares what it needs of the server: a Hub to subscribe
// through and a History to recover from (env.go), the Bounds of
// Config, the Counters it updates and a rate-limited logger. The
// transports (package gateway's sse*.go and ws*.go) build on the
// exported members of Conn.
package session
