// Package sse is the gateway's SSE transport over the connection core
// (internal/session): a Stream is the SSE side of one session.Conn, its
// Sink the text/event-stream framing the core's writer writes through,
// with the stream's resume Cursor as each event's id.
//
// The handler in package gateway authenticates and admits the request,
// subscribes the stream and writes its head; then an HTTP/1.1 stream
// leaves net/http (Stream.Hijack) and keeps only a reader goroutine of its
// own (Stream.Wait), its body chunked, while an HTTP/2 stream keeps its
// handler waiting (Stream.Wait too) and is written through net/http. A
// stream reads its bounds from the core (session.Conn.Bounds) and holds
// nothing of the server: once Wait returns, the handler ends the stream
// (Stream.End) and releases its registration and slots.
package sse
