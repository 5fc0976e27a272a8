// Package sse is the gateway's SSE transport over the connection core
// (internal/session): a Stream is the SSE side of one session.Conn, its
// Sink the text/event-stream framing the core's writer writes through,
// with the stream's resume Cursor as each event's id.
//
// The handler in package gateway authenticates the request, subscribes
// the stream and writes its head; then an HTTP/1.1 stream leaves
// net/http (Stream.Hijack) and keeps only a reader goroutine of its own
// (sse_conn.go), its body chunked (sse_out.go: chunkOut), while an
// HTTP/2 stream keeps its handler waiting and is written through
// net/http (httpOut). What a stream needs of the server (closing counts,
// releasing its registration and slots) is the Server interface.
package sse
