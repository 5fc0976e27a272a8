package sse

import (
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
)

// Out carries the bytes of an SSE stream to the client: through
// net/http's response (HTTP/2, or a writer that cannot be hijacked), or
// straight to the connection taken over from net/http after the headers
// (HTTP/1.1; chunkOut).
type Out interface {
	// Write sends buf[Room:], whole events; the first Room bytes of
	// buf are free for the out's own framing, which may overwrite them.
	Write(buf []byte) error
	// Flush pushes what write sent on to the client.
	Flush() error
	// SetDeadline sets the deadline of the writes and flush that follow.
	SetDeadline(t time.Time) error
	// Abort gives a write blocked on the client session.FinalWriteTimeout
	// more, then makes it fail: a slow but live client still gets its
	// disconnect event, a stalled one is cut within that time.
	Abort()
	// Finish ends the body, when intact, and closes what the out owns.
	Finish(intact bool)
	// Kill closes what the out owns at once; any goroutine may call it.
	Kill()
}

// Room is the room a sink leaves at the start of its buffer for the
// framing of a chunk: up to 8 hexadecimal digits and CRLF.
const Room = 10

// httpOut writes through net/http's ResponseWriter.
type httpOut struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func NewHTTPOut(w http.ResponseWriter) httpOut {
	return httpOut{w: w, rc: http.NewResponseController(w)}
}

func (o httpOut) Write(buf []byte) error {
	_, err := o.w.Write(buf[Room:])
	return err
}

func (o httpOut) Flush() error { return o.rc.Flush() }

func (o httpOut) SetDeadline(t time.Time) error {
	err := o.rc.SetWriteDeadline(t)
	if err == http.ErrNotSupported {
		return nil // a writer without deadlines (tests' recorders); nothing to set
	}
	return err
}

func (o httpOut) Abort() { _ = o.rc.SetWriteDeadline(time.Now().Add(session.FinalWriteTimeout)) }

// Finish does nothing: net/http ends the response when the handler
// returns.
func (o httpOut) Finish(bool) {}

// Kill does nothing: net/http closes its connections (Server.Stop).
func (o httpOut) Kill() {}

// chunkOut writes the rest of an HTTP/1.1 response whose head net/http
// wrote with Transfer-Encoding: chunked: each write is one chunk, sent at
// once with a single write call, so no buffer is held between writes,
// except the end of a chunk a non-blocking write (TryWrite) left.
type chunkOut struct {
	conn net.Conn
	// slack is how much earlier than asked a deadline already set may
	// be and still be kept: a busy stream asks for one per batch, and
	// each one set moves a runtime timer (several percent of the CPU a
	// small batch costs).
	slack time.Duration
	set   atomic.Int64 // the deadline last set, Unix ns; 0: none, or aborted

	// try writes without blocking (TryWrite); nil when the connection
	// has no descriptor (TLS).
	try *session.TryWriter
	// rest is the end of a chunk TryWrite could not send; the next write
	// sends it first.
	rest session.Rest
}

func newChunkOut(conn net.Conn, writeTimeout time.Duration) *chunkOut {
	return &chunkOut{conn: conn, slack: writeTimeout / 16, try: session.NewTryWriter(conn)}
}

// frame turns buf, whose first Room bytes are free, into one chunk and
// returns it; nil for no event.
func frame(buf []byte) []byte {
	n := len(buf) - Room
	if n <= 0 {
		return nil // an empty chunk would end the body
	}
	var head [Room]byte
	h := strconv.AppendUint(head[:0], uint64(n), 16)
	h = append(h, '\r', '\n')
	start := Room - len(h)
	copy(buf[start:], h)
	return append(buf, '\r', '\n')[start:]
}

func (o *chunkOut) Write(buf []byte) error {
	if err := o.sendRest(); err != nil {
		return err
	}
	b := frame(buf)
	if b == nil {
		return nil
	}
	_, err := o.conn.Write(b)
	return err
}

// sendRest sends what a TryWrite left, blocking under the deadline set.
func (o *chunkOut) sendRest() error { return o.rest.Send(o.conn) }

// TryWrite sends buf as one chunk, as Write does, but without waiting for
// the socket: it reports false when the socket did not take it all, and
// keeps the rest for the next write. Without a descriptor it keeps it
// all.
func (o *chunkOut) TryWrite(buf []byte) (bool, error) {
	b := frame(buf)
	if b == nil {
		return true, nil
	}
	if o.rest.Pending() || o.try == nil {
		o.rest.Keep(b)
		return false, nil
	}
	n, err := o.try.Write(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The deadline of a batch long written has passed; a write that
		// does not wait needs none, and the next batch sets its own.
		o.set.Store(0)
		if err = o.conn.SetWriteDeadline(time.Time{}); err == nil {
			n, err = o.try.Write(b)
		}
	}
	if err != nil {
		return false, err
	}
	if n == len(b) {
		return true, nil
	}
	o.rest.Keep(b[n:])
	return false, nil
}

// lastChunk is the end of a chunked body.
var lastChunk = []byte("0\r\n\r\n")

// Finish writes the end of the body when intact, and closes the
// connection, which ends the stream's reader.
func (o *chunkOut) Finish(intact bool) {
	if intact && o.sendRest() == nil {
		_, _ = o.conn.Write(lastChunk)
	}
	_ = o.conn.Close()
}

func (o *chunkOut) Kill() { _ = o.conn.Close() }

// Flush sends what a TryWrite left; every write sends at once.
func (o *chunkOut) Flush() error { return o.sendRest() }

// SetDeadline sets the write deadline t, unless the one set already comes
// at most slack before it: a batch then has between WriteTimeout - slack
// and WriteTimeout.
func (o *chunkOut) SetDeadline(t time.Time) error {
	want := t.UnixNano()
	if t.IsZero() {
		want = 0
	}
	if set := o.set.Load(); set != 0 && want != 0 && set <= want && set >= want-int64(o.slack) {
		return nil
	}
	o.set.Store(want)
	return o.conn.SetWriteDeadline(t)
}

func (o *chunkOut) Abort() {
	o.set.Store(0)
	_ = o.conn.SetWriteDeadline(time.Now().Add(session.FinalWriteTimeout))
}
