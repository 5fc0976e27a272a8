package gateway

import (
	"github.com/heraldgw/herald/gateway/internal/session"
	"net/http"
	"time"
)

// sseConn is the SSE side of one Conn. The handler subscribes and writes
// the head of the stream through net/http. Then an HTTP/1.1 stream leaves
// net/http (hijack), as a WebSocket does after its upgrade, so its request,
// buffers and the handler's goroutine are not kept for the stream's
// lifetime:
//
//   - a reader, a goroutine of its own with a small stack and buffer,
//     notices the client closing the connection (sseConn.run) and ends
//     the stream;
//   - the connection's writer (internal/session/conn_writer.go) starts
//     on demand and is gone again once everything is written, so an idle
//     stream holds one goroutine;
//   - the body stays chunked: each batch is one chunk, written with one
//     write call (chunkOut).
//
// An HTTP/2 stream cannot leave net/http: its handler waits while the
// writer writes through the ResponseWriter, until the stream ends.
type sseConn struct {
	srv  *Server
	c    *session.Conn
	sink *sseSink

	opened bool     // the stream started (counted by Server.opened); handler or reader only
	rbuf   [16]byte // what the client sends on a stream is read and dropped
}

// newSSEConn prepares the SSE side of c, writing to w, before c is shared.
func newSSEConn(s *Server, c *session.Conn, w http.ResponseWriter) *sseConn {
	out := newHTTPOut(w)
	sc := &sseConn{srv: s, c: c, sink: newSSESink(out, s.cfg.WriteTimeout)}
	c.Out = sc.sink
	c.CloseWhenEmpty = true // a stream's channels are fixed when it opens
	c.TickExpiry = true
	c.Cur.Store(c.Claims)
	c.SetAbort(out.abort)
	return sc
}

// hijack takes an HTTP/1.1 stream, whose head was written and flushed,
// over from net/http and starts its reader. It reports false when the
// stream stays with net/http: HTTP/2 or HTTP/1.0, or a ResponseWriter that
// cannot be hijacked.
func (sc *sseConn) hijack(w http.ResponseWriter, r *http.Request) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return false // HTTP/1.0 has no chunked bodies; HTTP/2 cannot be hijacked
	}
	nc, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	// Nothing is left in net/http's buffers (startSSE flushed), and what
	// the client sent after its request is of no use to the stream.
	out := newChunkOut(nc, sc.srv.cfg.WriteTimeout)
	sc.c.SetAbort(out.abort) // first: no abort of the old out runs past this
	sc.sink.setOut(out)
	go sc.run(out)
	return true
}

// run is the reader: it reads and drops what the client sends until the
// connection ends, then ends the stream.
func (sc *sseConn) run(out *chunkOut) {
	for {
		if _, err := out.conn.Read(sc.rbuf[:]); err != nil {
			break
		}
	}
	sc.c.Close(ReasonClientClosed, 0)
	<-sc.c.FinalDone
	sc.end()
}

// end releases what the stream held once it is over: its subscriptions,
// its registration and the user's and the server's slots.
func (sc *sseConn) end() {
	s, c := sc.srv, sc.c
	if sc.opened {
		s.closed(c)
	}
	c.UnsubscribeAll()
	c.SetAbort(nil)
	// Clear the per-batch deadline: a connection net/http kept may serve
	// another request after this one.
	_ = sc.sink.SetDeadline(time.Time{})
	c.Cancel()
	s.unregister(c)
	s.releaseUser(c)
	s.releaseSlot()
}
