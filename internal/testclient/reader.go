package testclient

import (
	"sync"
	"sync/atomic"
)

// reader is what SSE and WS share: the lifecycle of their background
// reader, and the stall that makes it stop reading.
type reader struct {
	done    chan struct{} // closed when the reader has stopped
	closing chan struct{} // closed by Close
	unstall chan struct{}
	stalled atomic.Bool
	once    sync.Once
	err     error // why it stopped; set before done is closed
}

func (r *reader) init() {
	r.done, r.closing, r.unstall = make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
}

// Done is closed when the reader has stopped.
func (r *reader) Done() <-chan struct{} { return r.done }

// Err is why the stream or connection ended: io.EOF for the clean end of
// an SSE body; for a WS, websocket.CloseStatus of it is the server's close
// code. nil before Done.
func (r *reader) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Stall makes the reader stop reading (an SSE body once it has handed
// over what it buffered, a WebSocket after the message it is reading), so
// the server sees a client that does not read.
func (r *reader) Stall() { r.stalled.Store(true) }

// Resume makes a stalled reader read again.
func (r *reader) Resume() {
	r.stalled.Store(false)
	select {
	case r.unstall <- struct{}{}:
	default:
	}
}

// waitWhileStalled returns once the reader is not stalled: true, or false
// when Close came first.
func (r *reader) waitWhileStalled() bool {
	for r.stalled.Load() {
		select {
		case <-r.closing:
			return false
		case <-r.unstall:
		}
	}
	return true
}

// close closes closing and calls end, the first time only, then waits
// for the reader to stop.
func (r *reader) close(end func()) {
	r.once.Do(func() {
		close(r.closing)
		end()
	})
	<-r.done
}
