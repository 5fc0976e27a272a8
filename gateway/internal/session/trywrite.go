package session

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
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

// write writes w.buf to fd until the socket is full (EAGAIN). The
// descriptor is non-blocking (the runtime's poller set it so), so the
// call cannot block: it is made without telling the scheduler, which
// would otherwise hand the goroutine's processor to another thread
// while a busy fan-out is in the kernel, thread switches that cost as
// much as a tenth of the CPU of a broadcast.
func (w *TryWriter) write(fd uintptr) bool {
	for w.n < len(w.buf) {
		b := w.buf[w.n:]
		r, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		n := int(r)
		switch {
		case errno == syscall.EINTR:
			continue
		case errno == syscall.EAGAIN:
			return true
		case errno != 0:
			w.errno = &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", errno)}
			return true
		case n <= 0:
			return true
		}
		w.n += n
	}
	return true
}

// Rest is the end of a write a TryWriter could not send: every later
// write to the connection sends it first, so writes never interleave.
// The zero Rest holds nothing.
type Rest struct{ b []byte }

// Pending reports whether a rest waits.
func (r *Rest) Pending() bool { return r.b != nil }

// Keep keeps a copy of b after what waits.
func (r *Rest) Keep(b []byte) { r.b = append(r.b, b...) }

// Send writes what waits to w, blocking under w's write deadline; after
// it nothing waits, whatever the error.
func (r *Rest) Send(w io.Writer) error {
	if r.b == nil {
		return nil
	}
	_, err := w.Write(r.b)
	r.b = nil
	return err
}
