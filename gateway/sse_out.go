package gateway

import (
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// sseOut carries the bytes of an SSE stream to the client: through
// net/http's response (HTTP/2, or a writer that cannot be hijacked), or
// straight to the connection taken over from net/http after the headers
// (HTTP/1.1; chunkOut).
type sseOut interface {
	// write sends buf[sseRoom:], whole events; the first sseRoom bytes of
	// buf are free for the out's own framing, which may overwrite them.
	write(buf []byte) error
	// flush pushes what write sent on to the client.
	flush() error
	// setDeadline sets the deadline of the writes and flush that follow.
	setDeadline(t time.Time) error
	// abort gives a write blocked on the client finalWriteTimeout more,
	// then makes it fail: a slow but live client still gets its
	// disconnect event, a stalled one is cut within that time.
	abort()
	// finish ends the body, when intact, and closes what the out owns.
	finish(intact bool)
	// kill closes what the out owns at once; any goroutine may call it.
	kill()
}

// sseRoom is the room a sink leaves at the start of its buffer for the
// framing of a chunk: up to 8 hexadecimal digits and CRLF.
const sseRoom = 10

// httpOut writes through net/http's ResponseWriter.
type httpOut struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newHTTPOut(w http.ResponseWriter) httpOut {
	return httpOut{w: w, rc: http.NewResponseController(w)}
}

func (o httpOut) write(buf []byte) error {
	_, err := o.w.Write(buf[sseRoom:])
	return err
}

func (o httpOut) flush() error { return o.rc.Flush() }

func (o httpOut) setDeadline(t time.Time) error {
	err := o.rc.SetWriteDeadline(t)
	if err == http.ErrNotSupported {
		return nil // a writer without deadlines (tests' recorders); nothing to set
	}
	return err
}

func (o httpOut) abort() { _ = o.rc.SetWriteDeadline(time.Now().Add(finalWriteTimeout)) }

// finish does nothing: net/http ends the response when the handler
// returns.
func (o httpOut) finish(bool) {}

// kill does nothing: net/http closes its connections (Server.Stop).
func (o httpOut) kill() {}

// chunkOut writes the rest of an HTTP/1.1 response whose head net/http
// wrote with Transfer-Encoding: chunked: each write is one chunk, sent at
// once with a single write call, so there is nothing left to flush and no
// buffer held between writes.
type chunkOut struct {
	conn net.Conn
	// slack is how much earlier than asked a deadline already set may
	// be and still be kept: a busy stream asks for one per batch, and
	// each one set moves a runtime timer (several percent of the CPU a
	// small batch costs).
	slack time.Duration
	set   atomic.Int64 // the deadline last set, Unix ns; 0: none, or aborted
}

func newChunkOut(conn net.Conn, writeTimeout time.Duration) *chunkOut {
	return &chunkOut{conn: conn, slack: writeTimeout / 16}
}

func (o *chunkOut) write(buf []byte) error {
	n := len(buf) - sseRoom
	if n <= 0 {
		return nil // an empty chunk would end the body
	}
	var head [sseRoom]byte
	h := strconv.AppendUint(head[:0], uint64(n), 16)
	h = append(h, '\r', '\n')
	start := sseRoom - len(h)
	copy(buf[start:], h)
	buf = append(buf, '\r', '\n')
	_, err := o.conn.Write(buf[start:])
	return err
}

// lastChunk is the end of a chunked body.
var lastChunk = []byte("0\r\n\r\n")

// finish writes the end of the body when intact, and closes the
// connection, which ends the stream's reader.
func (o *chunkOut) finish(intact bool) {
	if intact {
		_, _ = o.conn.Write(lastChunk)
	}
	_ = o.conn.Close()
}

func (o *chunkOut) kill() { _ = o.conn.Close() }

func (o *chunkOut) flush() error { return nil }

// setDeadline sets the write deadline t, unless the one set already comes
// at most slack before it: a batch then has between WriteTimeout - slack
// and WriteTimeout.
func (o *chunkOut) setDeadline(t time.Time) error {
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

func (o *chunkOut) abort() {
	o.set.Store(0)
	_ = o.conn.SetWriteDeadline(time.Now().Add(finalWriteTimeout))
}
