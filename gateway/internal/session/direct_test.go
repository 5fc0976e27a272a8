package session

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// directSink is a memSink that can also be written without blocking
// (DirectSink): TryFlush reports a full socket while full is set, and
// every call fails the test when another is under way (two writers).
type directSink struct {
	*memSink
	t       *testing.T
	full    atomic.Bool
	in      atomic.Bool
	direct  atomic.Int64 // TryFlush calls that sent everything
	refused atomic.Int64 // TryFlush calls that found the socket full
	flushes atomic.Int64 // Flush calls (the writer's)
}

var _ DirectSink = (*directSink)(nil)

func newDirectSink(t *testing.T) *directSink { return &directSink{memSink: newMemSink(), t: t} }

// enter marks a call of the writer's place; leave ends it.
func (s *directSink) enter() {
	if !s.in.CompareAndSwap(false, true) {
		s.t.Error("two writers at once on one connection")
	}
}
func (s *directSink) leave() { s.in.Store(false) }

func (s *directSink) Direct(*fanout.Prepared) bool { return true }

func (s *directSink) TryFlush() (bool, error) {
	s.enter()
	defer s.leave()
	if s.full.Load() {
		s.refused.Add(1)
		return false, nil
	}
	s.direct.Add(1)
	return true, nil
}

func (s *directSink) Flush() error {
	s.enter()
	defer s.leave()
	s.flushes.Add(1)
	return s.memSink.Flush()
}

// newDirectConn is newCoreConn writing to a directSink; its writer is
// held off until StartWriting.
func newDirectConn(t *testing.T, e *coreEnv, channels ...string) (*Conn, *directSink) {
	t.Helper()
	ds := newDirectSink(t)
	c := newCoreConn(t, e, ds.memSink, channels...)
	c.Out = ds // the writer is held off: nothing reads Out yet
	return c, ds
}

// checkInOrder fails unless sink holds the offsets 1..n of channel, in
// order, once each.
func checkInOrder(t *testing.T, s *memSink, channel string, n uint64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.pubs[channel]
	for i, off := range got {
		if off != uint64(i+1) {
			t.Fatalf("%s: publication #%d has offset %d (gap or repeat)", channel, i+1, off)
		}
	}
	if uint64(len(got)) != n {
		t.Fatalf("%s: %d publications, want %d", channel, len(got), n)
	}
}

// TestConnDirectWrite: with no writer running and nothing queued, the
// hub's side writes a publication itself (no writer is started for it),
// and the connection's position and written offset follow.
func TestConnDirectWrite(t *testing.T) {
	e := newCoreEnv(t, 100, Bounds{HeartbeatInterval: time.Hour})
	c, sink := newDirectConn(t, e, "orders/1")
	c.StartWriting()
	for range 5 {
		e.publish("acme", "orders/1", `1`)
	}
	// The memory broker delivers on the publisher's goroutine: a direct
	// write is done when publish returns.
	if got := sink.direct.Load(); got != 5 {
		t.Fatalf("%d direct writes, want 5", got)
	}
	if got := sink.flushes.Load(); got != 0 {
		t.Fatalf("the writer flushed %d times for publications written directly", got)
	}
	checkInOrder(t, sink.memSink, "orders/1", 5)
	if off, ok := c.Pos.Written("orders/1"); !ok || off != 5 {
		t.Fatalf("written offset %d (%v), want 5", off, ok)
	}
}

// TestConnDirectFullSocketFallsBack: a socket that cannot take a direct
// write leaves the rest to the writer, which sends it (Flush) before
// anything else; what the hub delivers meanwhile is queued behind it, and
// once the writer is done, direct writes resume.
func TestConnDirectFullSocketFallsBack(t *testing.T) {
	e := newCoreEnv(t, 100, Bounds{HeartbeatInterval: time.Hour})
	c, sink := newDirectConn(t, e, "orders/1")
	c.StartWriting()
	sink.full.Store(true)
	sink.stall() // the writer's flush blocks, as on a full socket
	e.publish("acme", "orders/1", `1`)
	if sink.refused.Load() != 1 {
		t.Fatalf("%d refused direct writes, want 1", sink.refused.Load())
	}
	eventually(t, time.Minute, "the writer to send the rest", sink.blocked)
	for range 3 { // queued behind the rest: the writer holds the place
		e.publish("acme", "orders/1", `1`)
	}
	if sink.direct.Load() != 0 || sink.refused.Load() != 1 {
		t.Fatalf("direct writes %d, refused %d while the writer ran: want 0, 1", sink.direct.Load(), sink.refused.Load())
	}
	sink.full.Store(false)
	sink.unstall()
	eventually(t, time.Minute, "the queued publications", func() bool { return sink.last("orders/1") == 4 })
	eventually(t, time.Minute, "the writer to finish", func() bool { return !c.writing.Load() })
	e.publish("acme", "orders/1", `1`)
	if sink.direct.Load() != 1 {
		t.Fatalf("%d direct writes after the writer finished, want 1", sink.direct.Load())
	}
	checkInOrder(t, sink.memSink, "orders/1", 5)
}

// TestConnDirectAndQueuedInterleave: publications of two channels from
// several publishers while the socket flips between full and not and the
// writer's flushes now and then block: direct and queued writes
// interleave, one writer at a time (the sink and -race check), and each
// channel's publications arrive once and in order.
func TestConnDirectAndQueuedInterleave(t *testing.T) {
	e := newCoreEnv(t, 100000, Bounds{HeartbeatInterval: time.Hour})
	channels := []string{"orders/1", "orders/2"}
	c, sink := newDirectConn(t, e, channels...)
	c.StartWriting()
	const perChannel = 2000
	// Rounds until each path was taken (a schedule may leave one out in a
	// round: the writer busy at every publication, say).
	total := 0
	for round := 0; sink.direct.Load() == 0 || sink.refused.Load() == 0 || sink.flushes.Load() == 0; round++ {
		if round == 20 {
			t.Fatalf("direct %d, refused %d, writer flushes %d after %d rounds: want each path taken",
				sink.direct.Load(), sink.refused.Load(), sink.flushes.Load(), round)
		}
		done := make(chan struct{})
		for _, ch := range channels {
			go func() {
				defer func() { done <- struct{}{} }()
				for i := range perChannel {
					e.publish("acme", ch, `1`)
					if i%7 == 0 {
						sink.full.Store(!sink.full.Load())
					}
				}
			}()
		}
		for i := 0; i < 2; {
			select {
			case <-done:
				i++
			default:
				sink.stall()
				for range 100 { // let the publishers queue behind a blocked flush
					runtime.Gosched()
				}
				sink.unstall()
			}
		}
		sink.full.Store(false)
		total += perChannel
		for _, ch := range channels {
			eventually(t, time.Minute, "every publication of "+ch, func() bool { return sink.last(ch) == uint64(total) })
			checkInOrder(t, sink.memSink, ch, uint64(total))
		}
	}
	if c.Closed() {
		t.Fatalf("closed as %s", c.Reason().Code)
	}
}

// TestConnDirectStalledHitsBound: a client that stops reading leaves a
// direct write's rest to the writer, which blocks; what follows queues
// up to the bound and the connection catches up from the history, or,
// further behind than the history reaches, is closed as slow.
func TestConnDirectStalledHitsBound(t *testing.T) {
	e := newCoreEnv(t, 8, Bounds{QueueMaxMessages: 4, HeartbeatInterval: time.Hour})
	c, sink := newDirectConn(t, e, "orders/1")
	c.StartWriting()
	sink.full.Store(true)
	sink.stall()
	for i := 0; !c.Closed(); i++ {
		if i > 1000 {
			t.Fatal("a stalled client was never closed")
		}
		e.publish("acme", "orders/1", `1`)
	}
	if r := c.Reason(); r.Code != ReasonSlow.Code {
		t.Fatalf("closed as %s, want %s", r.Code, ReasonSlow.Code)
	}
	if e.counter(e.env.Counters.QueueLimit) != 1 {
		t.Fatalf("queue limit counted %v times, want 1", e.counter(e.env.Counters.QueueLimit))
	}
	sink.unstall()
	<-c.FinalDone
}

// TestConnDirectRun: a run of one channel's publications that finds no
// writer running leaves in one direct write; one beyond the run's bound,
// or one that finds the writer running, is queued and written in order by
// the writer; and a run that meets a full socket leaves the rest to the
// writer, with what follows queued behind it.
func TestConnDirectRun(t *testing.T) {
	e := newCoreEnv(t, 1000, Bounds{HeartbeatInterval: time.Hour})
	c, sink := newDirectConn(t, e, "orders/1")
	c.StartWriting()
	e.publishRun("acme", "orders/1", 5)
	if got := sink.direct.Load(); got != 1 {
		t.Fatalf("%d direct writes for a run of 5, want 1", got)
	}
	checkInOrder(t, sink.memSink, "orders/1", 5)
	if off, ok := c.Pos.Written("orders/1"); !ok || off != 5 {
		t.Fatalf("written offset %d (%v), want 5", off, ok)
	}

	// More than directRunBytes: queued, and the writer writes it.
	big := directRunBytes/(itemSize(fanout.NewPrepared(e.publish("acme", "other", `1`)))) + 1
	e.publishRun("acme", "orders/1", big)
	eventually(t, time.Minute, "the writer to write the long run", func() bool { return sink.last("orders/1") == uint64(5+big) })
	if sink.direct.Load() != 1 || sink.flushes.Load() == 0 {
		t.Fatalf("direct writes %d, writer flushes %d: want 1, ≥ 1", sink.direct.Load(), sink.flushes.Load())
	}
	eventually(t, time.Minute, "the writer to finish", func() bool { return !c.writing.Load() })

	// A full socket: the rest goes to the writer, the next run queues
	// behind it.
	sink.full.Store(true)
	sink.stall()
	e.publishRun("acme", "orders/1", 3)
	if sink.refused.Load() != 1 {
		t.Fatalf("%d refused direct writes, want 1", sink.refused.Load())
	}
	eventually(t, time.Minute, "the writer to send the rest", sink.blocked)
	e.publishRun("acme", "orders/1", 3)
	sink.full.Store(false)
	sink.unstall()
	total := uint64(5 + big + 6)
	eventually(t, time.Minute, "every publication", func() bool { return sink.last("orders/1") == total })
	checkInOrder(t, sink.memSink, "orders/1", total)
	if c.Closed() {
		t.Fatalf("closed as %s", c.Reason().Code)
	}
}

// TestPositionsWritten: the offset written per channel, as the hub's
// side reads it, follows Add, the admitted publications and Remove, by
// scanning a few channels and by index beyond indexFrom.
func TestPositionsWritten(t *testing.T) {
	for _, n := range []int{1, indexFrom, indexFrom + 5} {
		ps := NewPositions("acme", 4)
		for i := range n {
			ps.Add(fmt.Sprint("c", i), fanout.Position{Epoch: "e", Offset: uint64(10 * i)})
		}
		for i := range n {
			key := fanout.Key{Tenant: "acme", Channel: fmt.Sprint("c", i)}
			if a := ps.AdmitNext(key, fanout.Position{Epoch: "e", Offset: uint64(10*i + 1)}); a != AdmitWrite {
				t.Fatalf("n %d: c%d not admitted: %v", n, i, a)
			}
		}
		ps.Remove("c0")
		if _, ok := ps.Written("c0"); ok {
			t.Fatalf("n %d: a removed channel still has an offset", n)
		}
		if _, ok := ps.Written("other"); ok {
			t.Fatalf("n %d: a channel never added has an offset", n)
		}
		for i := 1; i < n; i++ {
			if off, ok := ps.Written(fmt.Sprint("c", i)); !ok || off != uint64(10*i+1) {
				t.Fatalf("n %d: c%d written %d (%v), want %d", n, i, off, ok, 10*i+1)
			}
		}
	}
}
