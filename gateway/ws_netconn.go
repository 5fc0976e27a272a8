package gateway

import (
	"bufio"
	"net"
	"net/http"
)

// wsReadBufSize is the read buffer coder/websocket gets for a connection:
// bufio's minimum, instead of net/http's 4 KiB, which the library would
// keep for the connection's lifetime. Client messages are few and small,
// so the larger buffer would only save the odd read call. The write side
// keeps net/http's 4 KiB buffer, which puts a frame's header and payload
// in one write.
const wsReadBufSize = 16

// wsHijacker is the http.ResponseWriter handed to websocket.Accept: its
// Hijack gives the library a small read buffer.
type wsHijacker struct {
	http.ResponseWriter
}

// Hijack hijacks the connection. Bytes the client sent after the upgrade
// request (a connect frame sent without waiting for the 101) may sit in
// net/http's read buffer already; the returned connection reads them
// first. They cannot stay in a bufio.Reader: the library keeps only what
// the reader it gets has buffered, and reads the rest from the connection.
func (h wsHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n) // cannot fail: n bytes are buffered
		conn = &wsPrefixConn{Conn: conn, prefix: append([]byte(nil), b...)}
	}
	return conn, bufio.NewReadWriter(bufio.NewReaderSize(conn, wsReadBufSize), brw.Writer), nil
}

// wsPrefixConn is a connection whose first bytes were read before it was
// hijacked. coder/websocket reads a connection from one goroutine at a
// time (its read lock), so Read needs no lock of its own.
type wsPrefixConn struct {
	net.Conn
	prefix []byte // not read yet
}

// Read implements net.Conn: the prefix first, then the connection.
func (c *wsPrefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.prefix)
	c.prefix = c.prefix[n:]
	if len(c.prefix) == 0 {
		c.prefix = nil // let the copy go
	}
	return n, nil
}
