package sse

import (
	"github.com/heraldgw/herald/gateway/internal/session"
	"net/http"
	"time"
)

// Stream is the SSE side of one Conn. The handler subscribes and writes
// the head of the stream through net/http. Then an HTTP/1.1 stream leaves
// net/http (hijack), as a WebSocket does after its upgrade, so its request,
// buffers and the handler's goroutine are not kept for the stream's
// lifetime:
//
//   - a reader, a goroutine of its own with a small stack and buffer,
//     notices the client closing the connection (Stream.run) and ends
//     the stream;
//   - the connection's writer (internal/session/conn_writer.go) starts
//     on demand and is gone again once everything is written, so an idle
//     stream holds one goroutine;
//   - the body stays chunked: each batch is one chunk, written with one
//     write call (chunkOut).
//
// An HTTP/2 stream cannot leave net/http: its handler waits while the
// writer writes through the ResponseWriter, until the stream ends.
type Stream struct {
	env  *Env
	Conn *session.Conn
	Sink *Sink

	Opened bool     // the stream started (counted by Server.opened); handler or reader only
	rbuf   [16]byte // what the client sends on a stream is read and dropped
	exp    expiry   // the token's expiry timer (expiry.go)
}

// Server is what a stream needs of the server that accepted it.
type Server interface {
	// Closed counts and logs a stream that opened (Opened), once it
	// ended.
	Closed(c *session.Conn)
	// Release gives back what the stream held: its registration and the
	// user's and the server's connection slots.
	Release(c *session.Conn)
}

// Env is what the streams of one server share.
type Env struct {
	Server       Server
	WriteTimeout time.Duration // bounds each batch (Config.WriteTimeout)
	RefreshAhead time.Duration // reauth this long before exp (Config.RefreshAhead)
	ExpiryLead   time.Duration // the stream ends this long before exp (DefaultExpiryLead)
}

// NewStream prepares the SSE side of c, writing to w, before c is shared.
func NewStream(env *Env, c *session.Conn, w http.ResponseWriter) *Stream {
	out := NewHTTPOut(w)
	sc := &Stream{env: env, Conn: c, Sink: NewSink(out, env.WriteTimeout)}
	c.Out = sc.Sink
	c.CloseWhenEmpty = true // a stream's channels are fixed when it opens
	c.Cur.Store(c.Claims)
	c.SetAbort(out.Abort)
	return sc
}

// Hijack takes an HTTP/1.1 stream, whose head was written and flushed,
// over from net/http and starts its reader. It reports false when the
// stream stays with net/http: HTTP/2 or HTTP/1.0, or a ResponseWriter that
// cannot be hijacked.
func (sc *Stream) Hijack(w http.ResponseWriter, r *http.Request) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return false // HTTP/1.0 has no chunked bodies; HTTP/2 cannot be hijacked
	}
	nc, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	// Nothing is left in net/http's buffers (startSSE flushed), and what
	// the client sent after its request is of no use to the stream.
	out := newChunkOut(nc, sc.env.WriteTimeout)
	sc.Conn.SetAbort(out.Abort) // first: no abort of the old out runs past this
	sc.Sink.setOut(out)
	go sc.run(out)
	return true
}

// run is the reader: it reads and drops what the client sends until the
// connection ends, then ends the stream.
func (sc *Stream) run(out *chunkOut) {
	for {
		if _, err := out.conn.Read(sc.rbuf[:]); err != nil {
			break
		}
	}
	sc.Conn.Close(session.ReasonClientClosed, 0)
	<-sc.Conn.FinalDone
	sc.End()
}

// End releases what the stream held once it is over: its subscriptions,
// its registration and the user's and the server's slots.
func (sc *Stream) End() {
	s, c := sc.env.Server, sc.Conn
	sc.stopExpiry()
	if sc.Opened {
		s.Closed(c)
	}
	c.UnsubscribeAll()
	c.SetAbort(nil)
	// Clear the per-batch deadline: a connection net/http kept may serve
	// another request after this one.
	_ = sc.Sink.SetDeadline(time.Time{})
	c.Cancel()
	s.Release(c)
}
