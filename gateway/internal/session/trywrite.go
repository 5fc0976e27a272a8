package session

import (
	"net"
	"os"
	"syscall"
)

// TryWriter writes to a connection's socket without waiting for it: what
// the socket's buffer takes now, nothing more (a direct write from the
// hub's side, DirectSink). Only the holder of the connection's writer's
// place uses it.
type TryWriter struct {
	raw   syscall.RawConn
	buf   []byte             // what write is to write
	n     int                // what it wrote
	errno error              // its error, other than EAGAIN
	fn    func(uintptr) bool // write, bound once
}

// NewTryWriter returns a TryWriter on conn's descriptor, or nil when conn
// has none (a TLS connection, a pipe).
func NewTryWriter(conn net.Conn) *TryWriter {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &TryWriter{raw: raw}
	w.fn = w.write
	return w
}

// Write writes what of b the socket takes now and returns how much that
// was: 0 when its buffer is full. It never waits. An error is the
// socket's (a reset, a closed connection), or os.ErrDeadlineExceeded
// when the connection's write deadline has passed: then nothing was
// written.
func (w *TryWriter) Write(b []byte) (int, error) {
	w.buf, w.n, w.errno = b, 0, nil
	err := w.raw.Write(w.fn)
	if err == nil {
		err = w.errno
	}
	n := w.n
	w.buf = nil
	return n, err
}

// write writes w.buf to fd until the socket is full (EAGAIN).
func (w *TryWriter) write(fd uintptr) bool {
	for w.n < len(w.buf) {
		n, err := syscall.Write(int(fd), w.buf[w.n:])
		if n > 0 {
			w.n += n
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return true
		case err != nil:
			w.errno = &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", err)}
			return true
		case n <= 0:
			return true
		}
	}
	return true
}
