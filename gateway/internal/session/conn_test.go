package session

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
)

// memSink is a sink that records what the writer hands it, in order, as
// a client would read it. Its flush blocks while it is stalled, as a
// write to a client that stopped reading does.
type memSink struct {
	mu     sync.Mutex
	events []string
	pubs   map[string][]uint64          // offsets written, per channel
	poss   map[string][]fanout.Position // positions written, per channel
	gate   chan struct{}                // non-nil: stalled until closed
	held   int                          // flushes blocked on gate
	closed bool
	intact bool
}

func newMemSink() *memSink {
	return &memSink{pubs: map[string][]uint64{}, poss: map[string][]fanout.Position{}}
}

func (s *memSink) record(ev string) error {
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
	return nil
}

func (s *memSink) Arm() error                  { return nil }
func (s *memSink) SetDeadline(time.Time) error { return nil }
func (s *memSink) Heartbeat() error            { return s.record("heartbeat") }
func (s *memSink) RefreshRequest(time.Time) error {
	return s.record("refresh")
}
func (s *memSink) Subscribed(id uint64, sub Subscription, _ *Positions) error {
	return s.record(fmt.Sprintf("subscribed %d %s", id, sub.Channel))
}
func (s *memSink) SubscribeFailed(id uint64, ch string, r Reason) error {
	return s.record(fmt.Sprintf("subscribe failed %d %s %s", id, ch, r.Code))
}
func (s *memSink) Unsubscribed(id uint64, ch string, r Reason, _ *Positions) error {
	return s.record(fmt.Sprintf("unsubscribed %d %s %s", id, ch, r.Code))
}
func (s *memSink) Frame(b []byte) error { return s.record("frame " + string(b)) }
func (s *memSink) Final(r Reason, _ time.Duration) error {
	return s.record("final " + r.Code)
}
func (s *memSink) Kill() {}

func (s *memSink) Publication(p *fanout.Prepared, _ *Positions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := p.Key().Channel
	s.pubs[ch] = append(s.pubs[ch], p.Position().Offset)
	s.poss[ch] = append(s.poss[ch], p.Position())
	s.events = append(s.events, fmt.Sprintf("pub %s@%d", ch, p.Position().Offset))
	return nil
}

func (s *memSink) Flush() error {
	s.mu.Lock()
	g := s.gate
	if g != nil {
		s.held++
	}
	s.mu.Unlock()
	if g != nil {
		<-g
		s.mu.Lock()
		s.held--
		s.mu.Unlock()
	}
	return nil
}

// blocked reports whether the writer is blocked in a stalled flush.
func (s *memSink) blocked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held > 0
}

// written returns the positions written of channel, in order.
func (s *memSink) written(channel string) []fanout.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.poss[channel])
}

func (s *memSink) Close(_ Reason, intact bool) {
	s.mu.Lock()
	s.closed, s.intact = true, intact
	s.mu.Unlock()
}

// stall makes flush block until unstall.
func (s *memSink) stall() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *memSink) unstall() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

// last returns the last offset written of channel, 0 if none.
func (s *memSink) last(channel string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pubs[channel]; len(p) > 0 {
		return p[len(p)-1]
	}
	return 0
}

func (s *memSink) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// newCoreConn returns a connection of e writing to sink, subscribed live
// to channels, its writer held off until StartWriting.
func newCoreConn(t *testing.T, e *coreEnv, sink *memSink, channels ...string) *Conn {
	t.Helper()
	claims := &auth.Claims{Tenant: "acme", Subject: "u1"}
	c := New(e.env, e.nextID(), "sse", claims, "test")
	c.Out = sink
	c.Cur.Store(claims)
	for _, ch := range channels {
		if _, err := c.Subscribe(context.Background(), ch, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c.Close(ReasonShutdown, 0)
		<-c.FinalDone
		c.UnsubscribeAll()
	})
	return c
}

// TestConnRoundOrder: the writer takes everything queued in one round and
// writes it in order, control items first, then the publications, then a
// due heartbeat; closing, it writes the replies still queued and the
// final frames, and the transport closes intact.
func TestConnRoundOrder(t *testing.T) {
	e := newCoreEnv(t, 100, Bounds{HeartbeatInterval: time.Hour})
	sink := newMemSink()
	c := newCoreConn(t, e, sink, "orders/1")
	c.beatDue.Store(true)
	c.PushCtl(CtlItem{Kind: CtlFrame, Frame: []byte("reply 1")})
	for range 3 {
		e.publish("acme", "orders/1", `1`)
	}
	eventually(t, time.Minute, "the publications to be queued", func() bool {
		c.queue.mu.Lock()
		defer c.queue.mu.Unlock()
		return len(c.queue.items) == 3
	})
	c.StartWriting()
	want := []string{"frame reply 1", "pub orders/1@1", "pub orders/1@2", "pub orders/1@3", "heartbeat"}
	eventually(t, time.Minute, "the round to be written", func() bool { return len(sink.log()) == len(want) })
	if got := sink.log(); !slices.Equal(got, want) {
		t.Fatalf("round %q, want %q", got, want)
	}

	sink.stall() // the next round's flush blocks: the reply below stays queued
	e.publish("acme", "orders/1", `1`)
	eventually(t, time.Minute, "the writer to block", func() bool { return sink.last("orders/1") == 4 })
	c.PushCtl(CtlItem{Kind: CtlFrame, Frame: []byte("reply 2")})
	c.Close(ReasonShutdown, 0)
	sink.unstall()
	<-c.FinalDone
	want = append(want, "pub orders/1@4", "frame reply 2", "final shutdown")
	if got := sink.log(); !slices.Equal(got, want) || !sink.closed || !sink.intact {
		t.Fatalf("%q (closed %v, intact %v), want %q closed intact", got, sink.closed, sink.intact, want)
	}
}

// TestConnFlipsBetweenLiveAndCatchUp: a subscriber of two channels whose
// client stalls and reads again many times, each time long enough for
// its queue to overflow, flips between the live stream and catching up
// from the history; whatever the transport, it gets every publication of
// each channel exactly once and in order, and is never closed.
func TestConnFlipsBetweenLiveAndCatchUp(t *testing.T) {
	const flips = 30
	e := newCoreEnv(t, 100000, Bounds{QueueMaxMessages: 4, HeartbeatInterval: time.Hour})
	sink := newMemSink()
	channels := []string{"orders/1", "orders/2"}
	c := newCoreConn(t, e, sink, channels...)
	c.StartWriting()
	catchUps := e.env.Counters.CatchUps.WithLabelValues("sse")
	published := map[string]uint64{}
	publish := func(i int) {
		ch := channels[i%len(channels)]
		published[ch] = e.publish("acme", ch, `1`).Offset
	}
	caughtUp := func() bool {
		for _, ch := range channels {
			if sink.last(ch) != published[ch] {
				return false
			}
		}
		return true
	}
	n := 0
	for flip := range flips {
		// Live: the client reads.
		for range 5 {
			publish(n)
			n++
		}
		eventually(t, time.Minute, "the live publications", caughtUp)
		// It stalls until its queue overflowed; publications go on.
		sink.stall()
		for lags := e.counter(catchUps); e.counter(catchUps) == lags; n++ {
			if n > 100000 {
				t.Fatalf("flip %d: the queue never overflowed", flip)
			}
			publish(n)
		}
		for range 10 {
			publish(n)
			n++
		}
		// It reads again, while publications go on, and catches up.
		sink.unstall()
		for range 10 {
			publish(n)
			n++
		}
		eventually(t, time.Minute, "the client to catch up", caughtUp)
	}
	if got := e.counter(catchUps); got < flips {
		t.Fatalf("%v catch-ups, want at least %d", got, flips)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, ch := range channels {
		got := sink.pubs[ch]
		for i, off := range got {
			if off != uint64(i+1) {
				t.Fatalf("%s: publication #%d has offset %d (gap or repeat)", ch, i+1, off)
			}
		}
		if uint64(len(got)) != published[ch] {
			t.Fatalf("%s: %d publications, want %d", ch, len(got), published[ch])
		}
	}
	if c.Closed() {
		t.Fatalf("closed as %s", c.Reason().Code)
	}
}
