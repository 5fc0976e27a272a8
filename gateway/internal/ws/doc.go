// Package ws is the gateway's herald.v1 WebSocket transport over the
// connection core (internal/session; the protocol is docs/protocol.md).
// The handler in package gateway checks the handshake, reads the upgrade
// request's credential (Credentials) and accepts the WebSocket through a
// Hijacker; then a Conn, the WebSocket side of one session.Conn, has:
//
//   - a reader, which owns the connection: a goroutine of its own
//     (Conn.Run), started by the handler, which then returns, so
//     net/http's request and buffers are not kept for the connection's
//     lifetime. It reads every frame (never under a deadline context,
//     which would close the connection) with a small read buffer
//     (ws_netconn.go) and handles each on a short-lived goroutine it waits
//     for (Conn.handleApart), so its own stack stays small: connect, ping
//     and unsubscribe are answered there, and subscribe, publish and
//     refresh start a goroutine each, at most MaxInflight at once; the op
//     table (ws_frames.go: OpTable) gives per op its decoding, validation,
//     sync or async and handler (ws_ops.go);
//   - the connection core's writer (internal/session/conn_writer.go),
//     started on demand whenever something is queued and gone again once
//     the queues are empty, so an idle connection holds one goroutine. The
//     writer is the only one to write data frames: through wsSink
//     (ws_sink.go) it batches everything queued into messages of
//     newline-separated frames (ws_replies.go), each message written
//     under its own deadline, and it performs the subscriptions' hub and
//     history work, so a subscription's reply, its recovered publications
//     and its live ones leave in order;
//   - timers instead of goroutines for the connect timeout, the client
//     timeout, the server's pings (the core's heartbeat) and the token's
//     expiry (ws_expiry.go); revocation and re-authorization are the
//     server-wide revalidation timer's (gateway/revalidate.go), which ends
//     a subscription or the connection through the core.
//
// What a connection needs of the server (credentials, the user's slots,
// counting it opened and closed, releasing it, the broker and the
// authorizer, the limit metrics) is the Server interface; the bounds it
// reads of the gateway's Config are Config, both in the Env every
// connection of one server shares.
package ws
