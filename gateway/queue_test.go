package gateway

import (
	"strings"
	"testing"

	"github.com/heraldgw/herald/fanout"
)

func prepared(channel string, offset uint64, data string) *fanout.Prepared {
	return fanout.NewPrepared(fanout.Publication{
		Message:  fanout.Message{ID: "id", Key: fanout.Key{Tenant: "acme", Channel: channel}, Type: "t", SchemaVersion: 1, Data: []byte(data)},
		Position: fanout.Position{Offset: offset, Epoch: "e"},
	})
}

func TestSendQueueBoundsMessages(t *testing.T) {
	q := newSendQueue(1<<20, 3)
	p := prepared("a", 1, `1`)
	for i := 0; i < 3; i++ {
		if r := q.push(p); r != pushed {
			t.Fatalf("push %d = %v", i, r)
		}
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("ready not signalled")
	}
	// Taken items still count until released.
	batch := q.take(nil)
	if len(batch) != 3 {
		t.Fatalf("took %d", len(batch))
	}
	if r := q.push(p); r != pushFull {
		t.Fatalf("push beyond the bound while the batch is in flight = %v", r)
	}
	if r := q.push(p); r != pushFull {
		t.Fatalf("an overflowed queue accepted a push: %v", r)
	}
}

func TestSendQueueBoundsBytesAndReleases(t *testing.T) {
	big := prepared("a", 1, `"`+strings.Repeat("x", 400)+`"`)
	q := newSendQueue(2*itemSize(big), 100)
	for i := 0; i < 2; i++ {
		if q.push(big) != pushed {
			t.Fatalf("item %d fits but was refused", i)
		}
	}
	batch := q.take(nil)
	q.release(batch)
	spare := q.take(batch)
	if len(spare) != 0 {
		t.Fatalf("queue not empty after take: %d", len(spare))
	}
	for i := 0; i < 2; i++ {
		if q.push(big) != pushed {
			t.Fatalf("item %d refused: released bytes were not returned to the bound", i)
		}
	}
	if q.push(big) != pushFull {
		t.Fatal("the byte bound was not enforced")
	}
}

func TestSendQueueClosed(t *testing.T) {
	q := newSendQueue(1<<20, 10)
	q.push(prepared("a", 1, `1`))
	q.close()
	if r := q.push(prepared("a", 2, `1`)); r != pushClosed {
		t.Fatalf("push after close = %v", r)
	}
	if b := q.take(nil); len(b) != 0 {
		t.Fatalf("a closed queue still holds %d items", len(b))
	}
}

func TestPositionsAdmit(t *testing.T) {
	ps := newPositions("acme", 2)
	ps.add("a", fanout.Position{Offset: 5, Epoch: "e"})
	ps.add("b", fanout.Position{Offset: 0, Epoch: "f"})
	if ps.add("a", fanout.Position{}) {
		t.Fatal("a channel was added twice")
	}
	k := func(ch string) fanout.Key { return fanout.Key{Tenant: "acme", Channel: ch} }
	steps := []struct {
		key  fanout.Key
		pos  fanout.Position
		want bool
	}{
		{k("a"), fanout.Position{Offset: 5, Epoch: "e"}, false}, // already had it
		{k("a"), fanout.Position{Offset: 6, Epoch: "e"}, true},
		{k("a"), fanout.Position{Offset: 6, Epoch: "e"}, false}, // repeat
		{k("a"), fanout.Position{Offset: 1, Epoch: "e2"}, true}, // new epoch
		{k("b"), fanout.Position{Offset: 1, Epoch: "f"}, true},
		{k("c"), fanout.Position{Offset: 1, Epoch: "f"}, false},                                     // not subscribed
		{fanout.Key{Tenant: "globex", Channel: "b"}, fanout.Position{Offset: 9, Epoch: "f"}, false}, // other tenant
	}
	for i, s := range steps {
		if got := ps.admit(s.key, s.pos); got != s.want {
			t.Fatalf("step %d: admit(%v, %v) = %v", i, s.key, s.pos, got)
		}
	}
	ps.remove("a")
	if ps.admit(k("a"), fanout.Position{Offset: 100, Epoch: "e2"}) {
		t.Fatal("a removed channel admitted a publication")
	}
	if !ps.admit(k("b"), fanout.Position{Offset: 2, Epoch: "f"}) || len(ps.entries) != 1 {
		t.Fatal("removing a channel broke the others")
	}
}
