package fanouttest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// Sub is a fanout.Subscriber with a bounded queue: Deliver never blocks
// and drops (counting) when the queue is full, as a connection would.
type Sub struct {
	C       chan *fanout.Prepared
	Dropped atomic.Int64
	Resyncs chan fanout.Key // what a ResyncSub is told
}

// NewSub returns a Sub whose queue holds size publications.
func NewSub(size int) *Sub {
	return &Sub{C: make(chan *fanout.Prepared, size), Resyncs: make(chan fanout.Key, 16)}
}

// Deliver queues p, or drops it when the queue is full.
func (s *Sub) Deliver(p *fanout.Prepared) {
	select {
	case s.C <- p:
	default:
		s.Dropped.Add(1)
	}
}

// Drain takes everything queued, without waiting.
func (s *Sub) Drain() []*fanout.Prepared {
	var out []*fanout.Prepared
	for {
		select {
		case p := <-s.C:
			out = append(out, p)
		default:
			return out
		}
	}
}

// Receive waits for n deliveries to s; it fails t after 10 seconds.
func (s *Sub) Receive(t testing.TB, n int) []*fanout.Prepared {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	out := make([]*fanout.Prepared, 0, n)
	for len(out) < n {
		select {
		case p := <-s.C:
			out = append(out, p)
		case <-timeout.C:
			t.Fatalf("received %d of %d publications", len(out), n)
		}
	}
	return out
}

// ResyncSub is a Sub that also wants resync notices (a
// fanout.ResyncSubscriber): they are queued on Resyncs.
type ResyncSub struct{ *Sub }

// Resync queues k on Resyncs.
func (s ResyncSub) Resync(k fanout.Key) { s.Resyncs <- k }

// WaitResync waits for a resync notice and returns its key; with none
// within 10 seconds it fails t with the message missing.
func (s *Sub) WaitResync(t testing.TB, missing string) fanout.Key {
	t.Helper()
	select {
	case k := <-s.Resyncs:
		return k
	case <-Context(t).Done():
		t.Fatal(missing)
		return fanout.Key{}
	}
}
