package session

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// TestConnEpochChangeWhileCatchingUp: a channel's epoch changes (here:
// evicted past MaxChannels, which starts it over as an idle one does
// past the history TTL) while its connection catches up; the new epoch's
// first publication was dropped from the full queue and its second one
// is queued. The connection writes the new epoch from its first
// publication, in order, never the second one alone: a client that got
// {new epoch, 2} without 1 would resume from there as recovered.
func TestConnEpochChangeWhileCatchingUp(t *testing.T) {
	const queued = 4
	e := newCoreEnvWith(t, fanout.MemoryConfig{HistorySize: 1000, MaxChannels: 2},
		Bounds{QueueMaxMessages: queued, HeartbeatInterval: time.Hour})
	sink := newMemSink()
	c := newCoreConn(t, e, sink, "rooms/a", "rooms/b")
	c.StartWriting()
	first := e.publish("acme", "rooms/a", `1`)
	eventually(t, time.Minute, "rooms/a@1 to be written", func() bool { return sink.last("rooms/a") == 1 })

	// The client stops reading: the writer blocks in its flush.
	sink.stall()
	e.publish("acme", "rooms/b", `1`)
	eventually(t, time.Minute, "the writer to block", sink.blocked)

	// rooms/c evicts rooms/a, the idlest channel: its next publication
	// starts a new epoch.
	e.publish("acme", "rooms/c", `1`)
	// Overflow the queue: it is empty afterwards, as the writer holds
	// nothing in flight while it flushes.
	dropped := e.counter(e.env.Counters.QueueDropped)
	for e.counter(e.env.Counters.QueueDropped) == dropped {
		e.publish("acme", "rooms/b", `1`)
	}
	for range queued { // a full queue, and rooms/b newer than rooms/c
		e.publish("acme", "rooms/b", `1`)
	}
	a1 := e.publish("acme", "rooms/a", `1`) // a new epoch (evicting rooms/c); dropped: the queue is full
	if a1.Epoch == first.Epoch || a1.Offset != 1 {
		t.Fatalf("rooms/a published at %+v, want offset 1 of an epoch other than %q", a1.Position, first.Epoch)
	}
	a2 := e.publish("acme", "rooms/a", `1`) // queued
	sink.unstall()

	top := e.publish("acme", "rooms/b", `1`)
	eventually(t, time.Minute, "the client to catch up", func() bool {
		return sink.last("rooms/b") == top.Offset && sink.last("rooms/a") == a2.Offset || c.Closed()
	})
	if c.Closed() {
		t.Fatalf("closed as %s", c.Reason().Code)
	}
	want := []fanout.Position{first.Position, a1.Position, a2.Position}
	if got := sink.written("rooms/a"); !slices.Equal(got, want) {
		t.Fatalf("rooms/a written %v, want %v", got, want)
	}
	for i, p := range sink.written("rooms/b") {
		if p.Offset != uint64(i+1) {
			t.Fatalf("rooms/b: publication #%d has offset %d (gap or repeat)", i+1, p.Offset)
		}
	}
}

// hookedHistory runs before once, ahead of the first Recover it answers.
type hookedHistory struct {
	History
	before func()
	once   sync.Once
}

func (h *hookedHistory) Recover(ctx context.Context, key fanout.Key, since fanout.Position, limit int) (fanout.Recovery, error) {
	h.once.Do(h.before)
	return h.History.Recover(ctx, key, since, limit)
}

// TestConnOlderEpochQueuedBeforeSubscribing: a publication queued between
// the hub's subscription and the history's answer may be of an epoch
// older than the one the subscription starts in (the channel was evicted
// in between). It is never written: a client would take it for the start
// of a new epoch, when it is older than the position it was given.
func TestConnOlderEpochQueuedBeforeSubscribing(t *testing.T) {
	e := newCoreEnvWith(t, fanout.MemoryConfig{HistorySize: 100, MaxChannels: 1}, Bounds{HeartbeatInterval: time.Hour})
	sink := newMemSink()
	c := newCoreConn(t, e, sink)
	var old fanout.Publication
	e.env.History = &hookedHistory{History: e.broker, before: func() {
		old = e.publish("acme", "rooms/a", `"old"`) // queued: the hub subscription is made
		e.publish("acme", "junk/1", `1`)            // evicts rooms/a
	}}
	sub, err := c.Subscribe(context.Background(), "rooms/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if sub.Top.Epoch == old.Epoch || sub.Top.Offset != 0 || old.Offset != 1 {
		t.Fatalf("subscribed at %+v after %+v: want a new epoch at offset 0", sub.Top, old.Position)
	}
	c.StartWriting()
	next := e.publish("acme", "rooms/a", `"new"`)
	eventually(t, time.Minute, "the new publication", func() bool { return len(sink.written("rooms/a")) > 0 && sink.last("rooms/a") == next.Offset })
	if got, want := sink.written("rooms/a"), []fanout.Position{next.Position}; !slices.Equal(got, want) {
		t.Fatalf("rooms/a written %v, want %v (subscribed at %+v)", got, want, sub.Top)
	}
}
