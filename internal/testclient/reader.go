package testclient

import (
	"sync"
	"sync/atomic"
	"time"
)

// reader is the state a background reader of a stream (SSE) or a
// connection (WS) shares with the test: whether it is stalled, whether
// the test closed it, and why it ended.
type reader struct {
	done    chan struct{}
	closing chan struct{}
	unstall chan struct{}
	stalled atomic.Bool
	once    sync.Once
	err     error
}

func newReader() reader {
	return reader{done: make(chan struct{}), closing: make(chan struct{}), unstall: make(chan struct{}, 1)}
}

// waitStalled returns at once unless the reader is stalled; then it
// returns once Resume is called, or errClosed once Close is.
func (r *reader) waitStalled() error {
	for r.stalled.Load() {
		select {
		case <-r.closing:
			return errClosed
		case <-r.unstall:
		}
	}
	return nil
}

// Stall makes the reader stop reading once it has handed over what it
// has read (the SSE body's buffer, the WebSocket message it is reading),
// so the server sees a client that does not read.
func (r *reader) Stall() { r.stalled.Store(true) }

// Resume makes a stalled reader read again.
func (r *reader) Resume() {
	r.stalled.Store(false)
	select {
	case r.unstall <- struct{}{}:
	default:
	}
}

// Done is closed when the reader has stopped.
func (r *reader) Done() <-chan struct{} { return r.done }

// Err is why the stream or connection ended (io.EOF for an SSE body's
// clean end; for a WS, websocket.CloseStatus of it is the server's close
// code); nil before Done.
func (r *reader) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// close closes the reader from the test's side, once: drop ends the
// stream or connection. It waits for the reader to stop.
func (r *reader) close(drop func()) {
	r.once.Do(func() {
		close(r.closing)
		drop()
	})
	<-r.done
}

// next returns the next value of ch, ErrEnded once ch is closed and
// empty, or ErrTimeout after timeout.
func next[T any](ch <-chan T, timeout time.Duration) (T, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v, ok := <-ch:
		if !ok {
			return v, ErrEnded
		}
		return v, nil
	case <-t.C:
		var zero T
		return zero, ErrTimeout
	}
}
