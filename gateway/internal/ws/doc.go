// Package ws is the gateway's herald.v1 WebSocket transport over the
// connection core (internal/session; the protocol is docs/protocol.md).
// The handler in package gateway checks the handshake and the bounds that
// come before it; then Accept completes the upgrade, through a hijacker
// that gives the WebSocket library small buffers and watches the client's
// frame headers, and returns a Conn, the WebSocket side of one
// session.Conn, which has:
//
//   - a reader, which owns the connection: started by the handler
//     (Conn.Start), which then returns, so net/http's request and buffers
//     are not kept for the connection's lifetime. On Linux, between
//     messages, it parks the connection with the epoll instance the
//     process's connections share (frameWatch.park) and its goroutine
//     ends: the poller's one goroutine starts a reader again once the
//     client's next bytes come, so an idle connection holds no goroutine.
//     Elsewhere it waits for the client's next bytes without reading them
//     (frameWatch.wait) and reads each message on a short-lived goroutine
//     it waits for (Conn.apart), so its own stack stays at the minimum.
//     A message is read (never under a deadline context, which would
//     close the connection) with a small read buffer and handled:
//     connect, ping and unsubscribe are answered there, and subscribe,
//     publish and refresh start a goroutine each, at most MaxInflight at
//     once; the op
//     table (OpTable) gives per op its decoding, validation, sync or
//     async and handler;
//   - the connection core's writer, started on demand whenever something
//     is queued and gone again once the queues are empty, so an idle
//     connection holds no writer. The writer is the only one to write
//     data frames: through the connection's sink it batches everything
//     queued into messages of newline-separated frames, each message
//     written under its own deadline, and it performs the subscriptions'
//     hub and history work, so a subscription's reply, its recovered
//     publications and its live ones leave in order;
//   - a write buffer of 16 bytes: the connection under the library
//     holds a frame's first bytes until its rest comes and writes both
//     in one system call (frameWatch.Write), so no buffer is kept;
//   - one timer, not a goroutine, for the connect timeout, the client
//     timeout, the server's pings (the core's heartbeat, session.Beat)
//     and the token's expiry (Conn.timersDue); revocation and re-authorization are the server-wide
//     revalidation timer's, which ends a subscription or the connection
//     through the core.
//
// Nothing here points back into the server. A connection reads its bounds
// from the core (session.Conn.Bounds); what else it needs comes as values
// and functions: the Env every connection of one server shares (the
// broker's publish, the authorizer, the admission of a refresh token, the
// metrics) and, per connection, its admission at connect (Connect), which
// the server decides: it verifies the credential, takes the user's slot
// and counts the connection open. Once the connection ended (Start's
// done), the server releases what the connection held.
package ws
