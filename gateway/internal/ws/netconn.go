package ws

import (
	"bufio"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"
)

// readBufSize is the read buffer coder/websocket gets for a connection:
// bufio's minimum, instead of net/http's 4 KiB, which the library would
// keep for the connection's lifetime. Client messages are few and small,
// so the larger buffer would only save the odd read call.
const readBufSize = 16

// writeBufSize is the write buffer coder/websocket keeps for the
// connection's lifetime, instead of net/http's 4 KiB: large enough for
// any frame header the server writes (at most 10 bytes). The library
// writes a frame as its header and then its payload; what of a frame does
// not fit is handed on to the connection (frameWatch.Write), which holds
// a frame's first bytes until the rest comes and writes them together,
// in one system call. So a message leaves in one write, whatever its
// size, and an idle connection holds no write buffer.
const writeBufSize = 16

// hijacker is the http.ResponseWriter handed to websocket.Accept: its
// Hijack gives the library small buffers over a frameWatch, which it
// keeps in conn.
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
	fw := &frameWatch{Conn: conn, max: h.maxMessage}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n) // cannot fail: n bytes are buffered
		fw.hold(append([]byte(nil), b...))
	}
	if sc, ok := conn.(syscall.Conn); ok && canWait {
		fw.sc, _ = sc.SyscallConn() // nil on error: the reader then waits inside the library
	}
	h.conn = fw
	// The library's frames pass the gate, then the watch; the hub's side
	// writes whole frames through the gate straight to conn (direct.go).
	// A frame of the library's that the watch holds in part is not on the
	// socket yet, so a direct frame never lands inside it.
	h.gate = newWriteGate(fw, conn)
	rw := bufio.NewReadWriter(bufio.NewReaderSize(fw, readBufSize), bufio.NewWriterSize(h.gate, writeBufSize))
	return fw, rw, nil
}

// errMessageTooBig fails every read of a connection once a frame header
// announced a message over MaxMessageSize.
var errMessageTooBig = errors.New("gateway: a frame header announced a message over the maximum message size")

// frameWatch is the connection under coder/websocket. It follows the
// frames both ways:
//
//   - Reading, it hands the library at most the rest of the header or
//     payload being read, never bytes of a later frame, so once a message
//     was read to its end the library holds nothing unread and the reader
//     can park the connection (park: no goroutine waits) or wait for the
//     client's next bytes outside the library, on a small stack (wait).
//     It also refuses a message whose frame headers
//     announce more than MaxMessageSize on sight: the library checks its
//     read limit only as payload arrives, so the reader would wait for
//     that payload, until the client timeout. The watch hands the
//     library the bytes before such a header, then fails every read with
//     errMessageTooBig, which the reader reports as message_too_big; the
//     close handshake then reads on for a short while only (drain). The
//     library reads from one goroutine at a time (its read lock).
//   - Writing, it holds the first bytes of a frame that the library's
//     small write buffer passed on, and writes them together with the
//     rest of the frame (Write). The library writes from one goroutine
//     at a time (its write lock).
type frameWatch struct {
	net.Conn
	sc syscall.RawConn // of Conn, to wait for bytes without reading them; nil: not waited for
	pk parkState       // the poller's, where an idle connection parks (park)

	// held were read from the connection but not yet by the library: the
	// bytes sent with the upgrade request, read first; after a refused
	// header, that header and what followed, which drain serves.
	// heldLeft says whether any are left, to wait.
	held     []byte
	heldLeft atomic.Bool
	tooBig   atomic.Bool // a header announced more than max; every read fails, until drain
	// draining lets reads through unwatched: the close handshake that
	// follows a refused message reads and discards what the client still
	// sends (see drain).
	draining atomic.Bool
	max      int64 // MaxMessageSize: the most a message may announce

	in  frameCursor // the client's frames
	msg uint64      // payload bytes announced by the current message's data frames

	out   frameCursor        // the server's frames
	pend  [writeBufSize]byte // the start of the frame being written (out)
	npend uint8
	vec   [2][]byte // pend and the rest of the frame, for one writev
}

// Read implements net.Conn.
func (c *frameWatch) Read(p []byte) (int, error) {
	if c.draining.Load() {
		return c.read(p)
	}
	if c.tooBig.Load() {
		return 0, errMessageTooBig
	}
	if span := c.in.span(); len(p) > span {
		p = p[:span]
	}
	n, err := c.read(p)
	start, end, ok := c.scan(p[:n])
	if ok {
		return n, err
	}
	// The library gets the bytes before the header; the header and what
	// follows it are held for drain. A header begun in an earlier read is
	// held whole: the library lost its first bytes with the failed read.
	c.tooBig.Store(true)
	rest := c.held
	if start < 0 {
		c.hold(append(append(append([]byte(nil), c.in.hdr[:c.in.need]...), p[end:n]...), rest...))
		return 0, errMessageTooBig
	}
	c.hold(append(append([]byte(nil), p[start:n]...), rest...))
	if start == 0 {
		return 0, errMessageTooBig
	}
	return start, nil
}

// hold makes b the bytes read before the connection's.
func (c *frameWatch) hold(b []byte) {
	c.held = b
	c.heldLeft.Store(len(b) > 0)
}

// read reads the held bytes first, then the connection.
func (c *frameWatch) read(p []byte) (int, error) {
	if len(c.held) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.held)
	c.held = c.held[n:]
	if len(c.held) == 0 {
		c.hold(nil) // let the copy go
	}
	return n, nil
}

// wait returns once the client's next bytes can be read, or the
// connection failed (the library's read then says how), without reading
// them. The reader calls it between messages, when the library holds
// nothing unread (Read): it then waits in a few shallow frames rather
// than inside the library, so the garbage collector shrinks its stack to
// the minimum (2 KiB) while the connection is idle. A connection that is
// not a socket is not waited for.
func (c *frameWatch) wait() {
	if c.sc == nil || c.heldLeft.Load() || c.tooBig.Load() {
		return
	}
	_ = c.sc.Read(peekable)
}

// unread reports whether the client's bytes wait in the socket, not read
// yet: the client sent them, however late the reader is to read them. A
// connection that is not a socket has none.
func (c *frameWatch) unread() bool {
	if c.sc == nil {
		return false
	}
	var ok bool
	if err := c.sc.Control(func(fd uintptr) { ok = unread(fd) }); err != nil {
		return false
	}
	return ok
}

// Write implements net.Conn for the library's write buffer, which passes
// on what of a frame does not fit in it: the frame's first bytes (its
// header and the start of its payload, as much as the buffer holds),
// then the rest. The first are held until the frame is complete; then
// everything leaves in one writev. Bytes that end a frame are never held,
// so what the library flushed is written. (A frame begun in bytes that
// completed the one before, as frames that are not a message's last can
// be, is written in two.)
func (c *frameWatch) Write(p []byte) (int, error) {
	c.out.follow(p)
	if !c.out.between() && int(c.npend)+len(p) <= len(c.pend) {
		c.npend += uint8(copy(c.pend[c.npend:], p))
		return len(p), nil
	}
	if c.npend == 0 {
		return c.Conn.Write(p)
	}
	held := int(c.npend)
	c.npend = 0
	c.vec = [2][]byte{c.pend[:held], p}
	bufs := net.Buffers(c.vec[:])
	n, err := bufs.WriteTo(c.Conn)
	c.vec = [2][]byte{} // keep no message
	return max(0, int(n)-held), err
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

// scan follows the client's frames in b. When a header announces too
// much it returns false, the offsets in b where that header starts (-1
// when it started in an earlier read) and where it ends.
func (c *frameWatch) scan(b []byte) (start, end int, ok bool) {
	start = -1
	for i := 0; i < len(b); {
		if c.in.payload > 0 {
			i += c.in.skip(b[i:])
			continue
		}
		if c.in.hn == 0 {
			start = i
		}
		n, done := c.in.header(b[i:])
		i += n
		if done && !c.frame() {
			return start, i, false
		}
	}
	return 0, 0, true
}

// frame takes in the client's header just completed; false means the
// message it belongs to announces more than max.
func (c *frameWatch) frame() bool {
	n := c.in.payload
	switch c.in.hdr[0] & 0x0f {
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

// frameCursor follows the frame boundaries of one direction of a
// WebSocket stream, fed its bytes in order.
type frameCursor struct {
	hdr     [14]byte // the header being read
	hn      uint8    // bytes of hdr in
	need    uint8    // length of the header being read, once its second byte is in
	payload uint64   // payload bytes of the current frame still to come
}

// between reports whether the stream is between two frames.
func (f *frameCursor) between() bool { return f.hn == 0 && f.payload == 0 }

// span is how many of the bytes to come belong to the header or payload
// under way (or to the first two bytes of the next header).
func (f *frameCursor) span() int {
	switch {
	case f.payload > 0:
		return int(min(f.payload, 1<<30))
	case f.hn < 2:
		return 2 - int(f.hn)
	}
	return int(f.need - f.hn)
}

// skip takes in what of b belongs to the payload under way and returns
// how much that is.
func (f *frameCursor) skip(b []byte) int {
	n := min(uint64(len(b)), f.payload)
	f.payload -= n
	return int(n)
}

// header takes in the bytes of b that belong to the header under way (a
// new one when none is), and returns how many it took and whether the
// header is complete; the frame's payload length is then in payload.
func (f *frameCursor) header(b []byte) (int, bool) {
	i := 0
	for i < len(b) {
		if f.hn == 0 {
			f.need = 2
		}
		f.hdr[f.hn] = b[i]
		f.hn++
		i++
		if f.hn == 2 {
			switch f.hdr[1] & 0x7f {
			case 126:
				f.need += 2
			case 127:
				f.need += 8
			}
			if f.hdr[1]&0x80 != 0 {
				f.need += 4 // the mask key
			}
		}
		if f.hn == f.need {
			f.hn = 0
			f.payload = uint64(f.hdr[1] & 0x7f)
			switch f.payload {
			case 126:
				f.payload = uint64(binary.BigEndian.Uint16(f.hdr[2:4]))
			case 127:
				f.payload = binary.BigEndian.Uint64(f.hdr[2:10])
			}
			return i, true
		}
	}
	return i, false
}

// follow takes in b.
func (f *frameCursor) follow(b []byte) {
	for i := 0; i < len(b); {
		if f.payload > 0 {
			i += f.skip(b[i:])
			continue
		}
		n, _ := f.header(b[i:])
		i += n
	}
}
