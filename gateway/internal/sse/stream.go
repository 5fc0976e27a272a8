package sse

import (
	"context"
	"net/http"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
)

// Stream is the SSE side of one Conn. The handler subscribes and writes
// the head of the stream through net/http. Then an HTTP/1.1 stream leaves
// net/http (hijack), as a WebSocket does after its upgrade, so its request,
// buffers and the handler's goroutine are not kept for the stream's
// lifetime:
//
//   - a reader, a goroutine of its own with a small stack and buffer,
//     notices the client closing the connection (Stream.Wait) and ends
//     the stream;
//   - the connection core's writer starts on demand and is gone again
//     once everything is written, so an idle stream holds one goroutine;
//   - the body stays chunked: each batch is one chunk, written with one
//     write call (chunkOut).
//
// An HTTP/2 stream cannot leave net/http: its handler waits while the
// writer writes through the ResponseWriter, until the stream ends.
type Stream struct {
	Conn *session.Conn
	Sink *Sink

	chunked *chunkOut // set by Hijack: the stream left net/http
	rbuf    [16]byte  // what the client sends on a stream is read and dropped
	exp     expiry    // the token's expiry timer
}

// NewStream prepares the SSE side of c, writing to w, before c is shared.
func NewStream(c *session.Conn, w http.ResponseWriter) *Stream {
	out := NewHTTPOut(w)
	sc := &Stream{Conn: c, Sink: NewSink(out, c.Bounds().WriteTimeout)}
	c.Out = sc.Sink
	c.CloseWhenEmpty = true // a stream's channels are fixed when it opens
	c.Cur.Store(c.Claims)
	c.SetAbort(out.Abort)
	return sc
}

// Hijack takes an HTTP/1.1 stream, whose head was written and flushed,
// over from net/http; Wait then reads the connection. It reports false
// when the stream stays with net/http: HTTP/2 or HTTP/1.0, or a
// ResponseWriter that cannot be hijacked.
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
	out := newChunkOut(nc, sc.Conn.Bounds().WriteTimeout)
	sc.Conn.SetAbort(out.Abort) // first: no abort of the old out runs past this
	sc.Sink.setOut(out)
	sc.chunked = out
	return true
}

// Wait returns once the stream has ended and its final events are
// written. A hijacked stream's Wait is its reader: it reads and drops what
// the client sends until the connection ends, so it runs on a goroutine of
// its own with a small stack. A stream net/http keeps ends when ctx, the
// request's, does.
func (sc *Stream) Wait(ctx context.Context) {
	if out := sc.chunked; out != nil {
		for {
			if _, err := out.conn.Read(sc.rbuf[:]); err != nil {
				break
			}
		}
		sc.Conn.Close(session.ReasonClientClosed, 0)
	} else {
		select {
		case <-ctx.Done():
			sc.Conn.Close(session.ReasonClientClosed, 0)
		case <-sc.Conn.FinalDone:
		}
	}
	<-sc.Conn.FinalDone
}

// End releases what the stream itself held once it is over: its
// subscriptions and its timer; the registration and the slots are the
// server's to release.
func (sc *Stream) End() {
	c := sc.Conn
	sc.stopExpiry()
	c.UnsubscribeAll()
	c.SetAbort(nil)
	// Clear the per-batch deadline: a connection net/http kept may serve
	// another request after this one.
	_ = sc.Sink.SetDeadline(time.Time{})
	c.Cancel()
}
