package gateway

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
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
//   - a writer starts on demand (sseConn.wake) whenever something is
//     queued and is gone again once everything is written, so an idle
//     stream holds one goroutine; heartbeats come from a timer that wakes
//     the writer;
//   - the body stays chunked: each batch is one chunk, written with one
//     write call (chunkOut).
//
// An HTTP/2 stream cannot leave net/http: its handler runs Conn.writer
// until the stream ends.
type sseConn struct {
	srv  *Server
	c    *Conn
	sink *sseSink

	// ctx bounds the writer's hub and broker calls once the stream left
	// net/http; it is cancelled as soon as the connection closes.
	ctx    context.Context
	cancel context.CancelFunc

	opened bool // the stream started (counted by Server.opened); handler or reader only

	mu  sync.Mutex // guards nc against kill
	nc  net.Conn   // the hijacked connection; nil while net/http has it
	out *chunkOut  // writes to nc

	writing   atomic.Bool // a writer runs, the handler writes, or the final frames were written
	beatDue   atomic.Bool // a heartbeat is to be written
	beat      *time.Timer // HeartbeatInterval, once hijacked
	broken    bool        // writer only: a write failed, the stream is not intact
	finalDone chan struct{}
	rbuf      [16]byte // what the client sends on a stream is read and dropped
}

// newSSEConn prepares the SSE side of c before c is shared: until the
// stream is handed to its own writer (handOff), the handler writes, so
// wake starts nothing.
func newSSEConn(s *Server, c *Conn) *sseConn {
	ctx, cancel := context.WithCancel(context.Background())
	sc := &sseConn{srv: s, c: c, ctx: ctx, cancel: cancel, finalDone: make(chan struct{})}
	sc.writing.Store(true)
	c.hooks = sseHooks{c}
	c.ctlCh = make(chan struct{}, 1)
	c.wake = sc.wake
	c.kill = sc.kill
	return sc
}

// hijack takes an HTTP/1.1 stream, whose head was written and flushed,
// over from net/http and starts its reader and on-demand writer. It
// reports false when the stream stays with net/http: HTTP/2 or HTTP/1.0,
// or a ResponseWriter that cannot be hijacked.
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
	sc.out = newChunkOut(nc, sc.srv.cfg.WriteTimeout)
	sc.mu.Lock()
	sc.nc = nc
	sc.mu.Unlock()
	sc.c.setAbort(sc.out.abort) // first: no abort of the old out runs past this
	sc.sink.out = sc.out
	sc.beat = stoppedTimer(sc.heartbeatDue)
	sc.beat.Reset(sc.srv.cfg.HeartbeatInterval)
	go sc.run()
	sc.writing.Store(false)
	if sc.pending() {
		sc.wake()
	}
	return true
}

// run is the reader: it reads and drops what the client sends until the
// connection ends, then ends the stream.
func (sc *sseConn) run() {
	for {
		if _, err := sc.nc.Read(sc.rbuf[:]); err != nil {
			break
		}
	}
	sc.c.Close(ReasonClientClosed, 0)
	<-sc.finalDone
	sc.end()
}

// kill closes a hijacked connection at once (Server.Stop, past
// ShutdownTimeout); net/http closes the others.
func (sc *sseConn) kill() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.nc != nil {
		_ = sc.nc.Close()
	}
}

// heartbeatDue has the writer send a heartbeat, and re-arms itself.
func (sc *sseConn) heartbeatDue() {
	if sc.c.closed() {
		return
	}
	sc.beatDue.Store(true)
	sc.wake()
	sc.beat.Reset(sc.srv.cfg.HeartbeatInterval)
}

// wake makes sure a writer runs for what is pending, and once the
// connection is closing, stops its hub and broker calls. It never blocks;
// the hub calls it on its delivery path.
func (sc *sseConn) wake() {
	if sc.c.closed() {
		sc.cancel()
	}
	if sc.writing.CompareAndSwap(false, true) {
		sc.srv.writers.run(sc)
	}
}

// pending reports whether the writer has work.
func (sc *sseConn) pending() bool {
	c := sc.c
	return c.closed() || len(c.queue.ready) > 0 || len(c.resyncCh) > 0 || len(c.ctlCh) > 0 || sc.beatDue.Load()
}

// writeLoop is the writer of a hijacked stream: it writes what is pending
// until nothing is, and exits, unless something arrived meanwhile. Once the
// connection is closing it writes the final events, closes the connection
// and keeps sc.writing set, so no writer ever starts again.
func (sc *sseConn) writeLoop() {
	for {
		if sc.c.closed() {
			sc.finish()
			return
		}
		if err := sc.pump(); err != nil {
			sc.broken = true
			sc.c.Close(writeErrorReason(sc.ctx, err), 0)
			continue
		}
		if sc.c.closed() {
			continue
		}
		sc.writing.Store(false)
		if !sc.pending() || !sc.writing.CompareAndSwap(false, true) {
			return
		}
	}
}

// pump writes control events, queued publications, history to read and
// a due heartbeat, each as Conn.writer does, in turn until none is left
// (so a live stream cannot starve reading the history). Only the writer
// receives from these channels, so one that is not empty is received from
// without blocking, and without the cost of a select.
func (sc *sseConn) pump() error {
	c, s := sc.c, sc.sink
	for !c.closed() {
		busy := false
		if signalled(c.ctlCh) {
			busy = true
			if err := c.control(sc.ctx, s); err != nil {
				return err
			}
		}
		if signalled(c.queue.ready) {
			busy = true
			if _, err := c.drain(s, nil); err != nil {
				return err
			}
		}
		if signalled(c.resyncCh) {
			busy = true
			if err := c.resync(sc.ctx, s); err != nil {
				return err
			}
		}
		if sc.beatDue.Swap(false) {
			busy = true
			if err := c.heartbeat(s); err != nil {
				return err
			}
		}
		if !busy {
			return nil
		}
	}
	return nil
}

// signalled takes the signal from ch, a channel of capacity 1 that only
// the caller receives from, and reports whether there was one.
func signalled(ch chan struct{}) bool {
	if len(ch) == 0 {
		return false
	}
	<-ch
	return true
}

// finish ends a hijacked stream: when it is intact and the reason is worth
// telling, it writes the final events and the end of the body under a
// short deadline; then it closes the connection, which ends the reader.
func (sc *sseConn) finish() {
	defer close(sc.finalDone)
	sc.cancel()
	sc.beat.Stop()
	c, s := sc.c, sc.sink
	if !sc.broken && c.reason.tellsClient() {
		t := time.Now().Add(min(sc.srv.cfg.WriteTimeout, finalWriteTimeout))
		if s.setDeadline(t) == nil && s.final(c.reason, c.delay) == nil && s.flush() == nil {
			_ = sc.out.end()
		}
	}
	s.release()
	_ = sc.nc.Close()
}

// end releases what the stream held once it is over: its subscriptions,
// its registration and the user's and the server's slots.
func (sc *sseConn) end() {
	s, c := sc.srv, sc.c
	if sc.opened {
		s.closed(c)
	}
	c.unsubscribeAll()
	c.setAbort(nil)
	if sc.sink != nil {
		// Clear the per-batch deadline: a connection net/http kept may
		// serve another request after this one.
		_ = sc.sink.setDeadline(time.Time{})
	}
	sc.cancel()
	s.unregister(c)
	s.releaseUser(c)
	s.releaseSlot()
}
