package session

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
		if r, _ := q.push(p); r != pushed {
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
	if r, dropped := q.push(p); r != pushFull || dropped != 1 {
		t.Fatalf("push beyond the bound while the batch is in flight = %v, %d dropped", r, dropped)
	}
	// Once the writer is done with its batch, the queue takes pushes again.
	q.release(batch)
	for i := 0; i < 2; i++ {
		if r, _ := q.push(p); r != pushed {
			t.Fatalf("push %d after the release = %v", i, r)
		}
	}
	// A push beyond the bound drops what is queued too: all of it is in the
	// history, which the writer reads instead.
	if r, _ := q.push(p); r != pushed {
		t.Fatalf("third push = %v", r)
	}
	if r, dropped := q.push(p); r != pushFull || dropped != 4 {
		t.Fatalf("push beyond the bound = %v, %d dropped, want 4 (3 queued and itself)", r, dropped)
	}
	if b := q.take(nil); len(b) != 0 {
		t.Fatalf("%d items left after the queue dropped them", len(b))
	}
	for i := 0; i < 3; i++ {
		if r, _ := q.push(p); r != pushed {
			t.Fatalf("push %d after the drop = %v: the dropped items still count", i, r)
		}
	}
}

func TestSendQueueBoundsBytesAndReleases(t *testing.T) {
	big := prepared("a", 1, `"`+strings.Repeat("x", 400)+`"`)
	q := newSendQueue(2*itemSize(big), 100)
	for i := 0; i < 2; i++ {
		if r, _ := q.push(big); r != pushed {
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
		if r, _ := q.push(big); r != pushed {
			t.Fatalf("item %d refused: released bytes were not returned to the bound", i)
		}
	}
	if r, _ := q.push(big); r != pushFull {
		t.Fatal("the byte bound was not enforced")
	}
}

func TestSendQueueClosed(t *testing.T) {
	q := newSendQueue(1<<20, 10)
	q.push(prepared("a", 1, `1`))
	q.close()
	if r, _ := q.push(prepared("a", 2, `1`)); r != pushClosed {
		t.Fatalf("push after close = %v", r)
	}
	if b := q.take(nil); len(b) != 0 {
		t.Fatalf("a closed queue still holds %d items", len(b))
	}
}

func TestPositionsAdmit(t *testing.T) {
	ps := NewPositions("acme", 2)
	ps.Add("a", fanout.Position{Offset: 5, Epoch: "e"})
	ps.Add("b", fanout.Position{Offset: 0, Epoch: "f"})
	if ps.Add("a", fanout.Position{}) {
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
		if got := ps.Admit(s.key, s.pos); got != s.want {
			t.Fatalf("step %d: admit(%v, %v) = %v", i, s.key, s.pos, got)
		}
	}
	ps.Remove("a")
	if ps.Admit(k("a"), fanout.Position{Offset: 100, Epoch: "e2"}) {
		t.Fatal("a removed channel admitted a publication")
	}
	if !ps.Admit(k("b"), fanout.Position{Offset: 2, Epoch: "f"}) || len(ps.Entries) != 1 {
		t.Fatal("removing a channel broke the others")
	}
}

func TestPositionsAdmitNext(t *testing.T) {
	ps := NewPositions("acme", 2)
	ps.Add("a", fanout.Position{Offset: 5, Epoch: "e"}) // its epoch read from the history now
	k := fanout.Key{Tenant: "acme", Channel: "a"}
	steps := []struct {
		took bool // the writer took the queue again first
		pos  fanout.Position
		want Admission
	}{
		{false, fanout.Position{Offset: 5, Epoch: "e"}, AdmitRepeat},
		{false, fanout.Position{Offset: 1, Epoch: "e0"}, AdmitGap}, // queued before the read: maybe older
		{true, fanout.Position{Offset: 1, Epoch: "e0"}, AdmitGap},  // the take after the read: maybe queued before it
		{true, fanout.Position{Offset: 7, Epoch: "e"}, AdmitGap},   // 6 is missing
		{false, fanout.Position{Offset: 6, Epoch: "e"}, AdmitWrite},
		{false, fanout.Position{Offset: 7, Epoch: "e"}, AdmitWrite},
		{false, fanout.Position{Offset: 7, Epoch: "e"}, AdmitRepeat},
		{false, fanout.Position{Offset: 3, Epoch: "e2"}, AdmitGap},   // a new epoch, its first ones missing
		{false, fanout.Position{Offset: 1, Epoch: "e2"}, AdmitWrite}, // a new epoch from its first
		{false, fanout.Position{Offset: 3, Epoch: "e2"}, AdmitGap},
		{false, fanout.Position{Offset: 2, Epoch: "e2"}, AdmitWrite},
		{false, fanout.Position{Offset: 1, Epoch: "e"}, AdmitWrite}, // an epoch other than the position's, from its first
	}
	for i, s := range steps {
		if s.took {
			ps.Took()
		}
		if got := ps.AdmitNext(k, s.pos); got != s.want {
			t.Fatalf("step %d: admitNext(%v) = %v, want %v", i, s.pos, got, s.want)
		}
	}
	// A new epoch read from the history (catching up) makes the live
	// stream's next takes uncertain again.
	if !ps.Admit(k, fanout.Position{Offset: 1, Epoch: "e3"}) {
		t.Fatal("a new epoch from the history not admitted")
	}
	ps.Took()
	if got := ps.AdmitNext(k, fanout.Position{Offset: 1, Epoch: "e4"}); got != AdmitGap {
		t.Fatalf("a new epoch right after one read from the history: %v", got)
	}
	if got := ps.AdmitNext(fanout.Key{Tenant: "acme", Channel: "b"}, fanout.Position{Offset: 1, Epoch: "e"}); got != AdmitRepeat {
		t.Fatalf("untracked channel: %v", got)
	}
}
