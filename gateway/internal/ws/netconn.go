package ws

import (
	"bufio"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// readBufSize is the read buffer coder/websocket gets for a connection:
// bufio's minimum, instead of net/http's 4 KiB, which the library would
// keep for the connection's lifetime. Client messages are few and small,
// so the larger buffer would only save the odd read call.
const readBufSize = 16

// writeBufSize is the write buffer coder/websocket keeps for the
// connection's lifetime, instead of net/http's 4 KiB: a message up to this
// size (a frame header and its payload) leaves in one write; a larger one
// in two (what fills the buffer, then the rest straight from the
// message), as a message over 4 KiB did anyway. Most pushes are small.
const writeBufSize = 1024

// hijacker is the http.ResponseWriter handed to websocket.Accept: its
// Hijack gives the library small buffers, reading through a frameWatch,
// which it keeps in conn.
type hijacker struct {
	http.ResponseWriter
	maxMessage int64       // MaxMessageSize
	conn       *frameWatch // set by Hijack
	gate       *writeGate  // set by Hijack: the library writes through it
}

// Hijack hijacks the connection. Bytes the client sent after the upgrade
// request (a connect frame sent without waiting for the 101) may sit in
// net/http's read buffer already; the returned connection reads them
// first. They cannot stay in a bufio.Reader: the library keeps only what
// the reader it gets has buffered, and reads the rest from the connection.
func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	under := conn
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n) // cannot fail: n bytes are buffered
		conn = &prefixConn{Conn: conn, prefix: append([]byte(nil), b...)}
	}
	h.conn = &frameWatch{Conn: conn, max: h.maxMessage}
	h.gate = newWriteGate(h.conn, under)
	rw := bufio.NewReadWriter(bufio.NewReaderSize(h.conn, readBufSize), bufio.NewWriterSize(h.gate, writeBufSize))
	return h.conn, rw, nil
}

// prefixConn is a connection whose first bytes were read before it was
// hijacked. coder/websocket reads a connection from one goroutine at a
// time (its read lock), so Read needs no lock of its own.
type prefixConn struct {
	net.Conn
	prefix []byte // not read yet
}

// Read implements net.Conn: the prefix first, then the connection.
func (c *prefixConn) Read(p []byte) (int, error) {
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

// errMessageTooBig fails every read of a connection once a frame header
// announced a message over MaxMessageSize.
var errMessageTooBig = errors.New("gateway: a frame header announced a message over the maximum message size")

// frameWatch reads a client's bytes ahead of coder/websocket and follows
// the frame headers in them. The library checks its read limit only as
// payload arrives, so a header announcing a message over the bound would
// have the reader wait for that payload, until the client timeout. The
// watch refuses such a message on sight: it hands the library the bytes
// before the header, then fails every read with errMessageTooBig, which
// the reader reports as message_too_big; the close handshake then reads
// on for a short while only (drain). Like prefixConn it is read from one goroutine
// at a time.
type frameWatch struct {
	net.Conn
	max    int64       // MaxMessageSize: the most a message may announce
	tooBig atomic.Bool // a header announced more; every read fails, until drain
	// draining lets reads through unwatched: the close handshake that
	// follows a refused message reads and discards what the client still
	// sends (see drain).
	draining atomic.Bool
	held     []byte // read from the connection but not yet by the library; drain serves them

	hdr     [14]byte // the header being read
	hn      int      // bytes of hdr read
	need    int      // length of the header being read, once its second byte is in
	payload uint64   // payload bytes of the current frame still to come
	msg     uint64   // payload bytes announced by the current message's data frames
}

// Read implements net.Conn.
func (c *frameWatch) Read(p []byte) (int, error) {
	if c.draining.Load() {
		if len(c.held) > 0 {
			n := copy(p, c.held)
			c.held = c.held[n:]
			return n, nil
		}
		return c.Conn.Read(p)
	}
	if c.tooBig.Load() {
		return 0, errMessageTooBig
	}
	n, err := c.Conn.Read(p)
	start, end, ok := c.scan(p[:n])
	if ok {
		return n, err
	}
	// The library gets the bytes before the header; the header and what
	// follows it are held for drain. A header begun in an earlier read is
	// held whole: the library lost its first bytes with the failed read.
	c.tooBig.Store(true)
	if start < 0 {
		c.held = append(append([]byte(nil), c.hdr[:c.need]...), p[end:n]...)
		return 0, errMessageTooBig
	}
	c.held = append([]byte(nil), p[start:n]...)
	if start == 0 {
		return 0, errMessageTooBig
	}
	return start, nil
}

// drain lets the close handshake after a refused message read on, until
// the client's close frame or until deadline: the client then finishes
// writing the message it had started and reads the close frame, where a
// connection dropped with unread bytes would be reset and the client
// might lose the frame.
func (c *frameWatch) drain(deadline time.Time) {
	_ = c.SetReadDeadline(deadline)
	c.draining.Store(true)
}

// scan follows the frames in b. When a header announces too much it
// returns false, the offsets in b where that header starts (-1 when it
// started in an earlier read) and where it ends.
func (c *frameWatch) scan(b []byte) (start, end int, ok bool) {
	start = -1
	for i := 0; i < len(b); {
		if c.payload > 0 {
			skip := min(uint64(len(b)-i), c.payload)
			c.payload -= skip
			i += int(skip)
			continue
		}
		if c.hn == 0 {
			start, c.need = i, 2
		}
		c.hdr[c.hn] = b[i]
		c.hn++
		i++
		if c.hn == 2 {
			switch c.hdr[1] & 0x7f {
			case 126:
				c.need += 2
			case 127:
				c.need += 8
			}
			if c.hdr[1]&0x80 != 0 {
				c.need += 4 // the mask key
			}
		}
		if c.hn < c.need {
			continue
		}
		if !c.frame() {
			return start, i, false
		}
	}
	return 0, 0, true
}

// frame takes in the complete header in hdr; false means the message it
// belongs to announces more than max.
func (c *frameWatch) frame() bool {
	c.hn = 0
	n := uint64(c.hdr[1] & 0x7f)
	switch n {
	case 126:
		n = uint64(binary.BigEndian.Uint16(c.hdr[2:4]))
	case 127:
		n = binary.BigEndian.Uint64(c.hdr[2:10])
	}
	c.payload = n
	switch c.hdr[0] & 0x0f {
	case 0x1, 0x2: // text, binary: a new message
		c.msg = 0
	case 0x0: // continuation
	default: // control frames (at most 125 bytes) and unknown opcodes, which the library refuses
		return true
	}
	if n > uint64(c.max) || c.msg > uint64(c.max)-n {
		return false
	}
	c.msg += n
	return true
}
