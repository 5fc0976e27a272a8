package ws

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"

	"github.com/heraldgw/herald/gateway/internal/session"
)

// writeGate is the way out of a WebSocket. coder/websocket writes its
// frames through it (the target of its buffered writer: its pongs and
// close frames from any goroutine, the writer's messages), and the hub's
// side writes a whole message through it without blocking (tryWrite).
// Writes pass one at a time; a message the socket took only in part
// leaves its rest here, and every later write sends that rest first, so
// frames never interleave.
type writeGate struct {
	mu    sync.Mutex
	conn  io.Writer          // the connection under the library
	under net.Conn           // the hijacked connection: the rest goes straight to it
	try   *session.TryWriter // on under's descriptor; nil: it has none
	rest  session.Rest       // the end of a message tryWrite left
}

// newWriteGate passes the library's writes on to conn; under is the
// hijacked connection, whose descriptor tryWrite writes to.
func newWriteGate(conn io.Writer, under net.Conn) *writeGate {
	return &writeGate{conn: conn, under: under, try: session.NewTryWriter(under)}
}

// Write implements io.Writer for the library.
func (g *writeGate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.sendRestLocked(); err != nil {
		return 0, err
	}
	return g.conn.Write(p)
}

// sendRest sends what tryWrite left, blocking under the connection's
// write deadline.
func (g *writeGate) sendRest() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sendRestLocked()
}

func (g *writeGate) sendRestLocked() error { return g.rest.Send(g.under) }

// tryWrite writes b, one or more whole frames, without waiting: it
// returns how much of b went out. Nothing goes out while the library
// writes a frame of its own or a rest waits, or when the socket is full
// or a write deadline has passed (the writer then writes b as it would
// have); a part of b, and the rest is kept for the next write. An error
// is the socket's.
func (g *writeGate) tryWrite(b []byte) (int, error) {
	if g.try == nil || !g.mu.TryLock() {
		return 0, nil
	}
	defer g.mu.Unlock()
	if g.rest.Pending() {
		return 0, nil
	}
	n, err := g.try.Write(b)
	switch {
	case err != nil && n == 0 && errors.Is(err, os.ErrDeadlineExceeded):
		return 0, nil
	case err != nil:
		return n, err
	case n > 0 && n < len(b):
		g.rest.Keep(b[n:])
	}
	return n, nil
}
