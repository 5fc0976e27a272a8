package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// testCtx is a context for one test step.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func msg(key Key, id string) Message {
	return Message{
		ID:            id,
		Key:           key,
		Type:          "order.updated",
		SchemaVersion: 1,
		Data:          json.RawMessage(fmt.Sprintf(`{"id": %q}`, id)),
	}
}

func mustPublish(t testing.TB, b Broker, m Message) Publication {
	t.Helper()
	p, err := b.Publish(testCtx(t), m)
	if err != nil {
		t.Fatalf("publish %s: %v", m.ID, err)
	}
	return p
}

func mustRecover(t testing.TB, b Broker, key Key, since Position) Recovery {
	t.Helper()
	r, err := b.Recover(testCtx(t), key, since, 0)
	if err != nil {
		t.Fatalf("recover %v from %v: %v", key, since, err)
	}
	return r
}

// offsets lists the offsets of pubs.
func offsets(pubs []Publication) []uint64 {
	out := make([]uint64, len(pubs))
	for i, p := range pubs {
		out[i] = p.Offset
	}
	return out
}

func equalOffsets(a []uint64, b ...uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// testRecoverCases runs the Recover contract against a broker whose
// history holds 3 publications per channel.
func testRecoverCases(t *testing.T, newBroker func(t *testing.T) Broker) {
	t.Run("never-seen channel", func(t *testing.T) {
		b := newBroker(t)
		key := Key{"acme", "fresh/1"}
		r := mustRecover(t, b, key, Position{})
		if r.Recovered || r.Top.Offset != 0 || r.Top.Epoch == "" || len(r.Publications) != 0 {
			t.Fatalf("first recover: %+v", r)
		}
		again := mustRecover(t, b, key, r.Top)
		if !again.Recovered || again.Top != r.Top || again.Publications == nil || len(again.Publications) != 0 {
			t.Fatalf("recover from the lazily created top: %+v (top %v)", again, r.Top)
		}
		p := mustPublish(t, b, msg(key, "m1"))
		if p.Offset != 1 || p.Epoch != r.Top.Epoch {
			t.Fatalf("first publication at %v, want offset 1 in epoch %s", p.Position, r.Top.Epoch)
		}
		fromZero := mustRecover(t, b, key, r.Top)
		if !fromZero.Recovered || !equalOffsets(offsets(fromZero.Publications), 1) {
			t.Fatalf("recover from {0, epoch}: %+v", fromZero)
		}
	})

	t.Run("offsets, history bound and positions", func(t *testing.T) {
		b := newBroker(t)
		key := Key{"acme", "orders/7"}
		var epoch string
		for i := 1; i <= 5; i++ {
			p := mustPublish(t, b, msg(key, fmt.Sprintf("m%d", i)))
			if p.Offset != uint64(i) {
				t.Fatalf("publication %d at offset %d", i, p.Offset)
			}
			if i == 1 {
				epoch = p.Epoch
			} else if p.Epoch != epoch {
				t.Fatalf("epoch changed from %s to %s", epoch, p.Epoch)
			}
			if p.Key != key || p.Time.IsZero() {
				t.Fatalf("publication %d: key %v time %v", i, p.Key, p.Time)
			}
		}
		top := Position{5, epoch}

		within := mustRecover(t, b, key, Position{2, epoch})
		if !within.Recovered || within.Top != top || !equalOffsets(offsets(within.Publications), 3, 4, 5) {
			t.Fatalf("recover within history: %+v", within)
		}
		for i, p := range within.Publications {
			want := fmt.Sprintf("m%d", i+3)
			if p.ID != want || p.Key != key || p.Epoch != epoch || p.Type != "order.updated" ||
				string(p.Data) != fmt.Sprintf(`{"id":%q}`, want) {
				t.Fatalf("recovered publication %d: %+v data %s", i, p, p.Data)
			}
		}
		for _, since := range []Position{{1, epoch}, {0, epoch}} {
			beyond := mustRecover(t, b, key, since)
			if beyond.Recovered || beyond.Top != top || len(beyond.Publications) != 0 {
				t.Fatalf("recover from %v beyond history: %+v", since, beyond)
			}
		}
		atTop := mustRecover(t, b, key, top)
		if !atTop.Recovered || atTop.Top != top || len(atTop.Publications) != 0 {
			t.Fatalf("recover from top: %+v", atTop)
		}
		for _, since := range []Position{{4, "other-epoch"}, {4, ""}, {9, epoch}} {
			wrong := mustRecover(t, b, key, since)
			if wrong.Recovered || wrong.Top != top || len(wrong.Publications) != 0 {
				t.Fatalf("recover from %v: %+v", since, wrong)
			}
		}
	})

	t.Run("pages", func(t *testing.T) {
		b := newBroker(t)
		key := Key{"acme", "orders/paged"}
		var epoch string
		for i := 1; i <= 5; i++ {
			epoch = mustPublish(t, b, msg(key, fmt.Sprintf("m%d", i))).Epoch
		}
		top := Position{5, epoch}
		page := func(since Position, limit int) Recovery {
			t.Helper()
			r, err := b.Recover(testCtx(t), key, since, limit)
			if err != nil {
				t.Fatalf("recover from %v, limit %d: %v", since, limit, err)
			}
			return r
		}
		for _, c := range []struct {
			since Position
			limit int
			want  []uint64
		}{
			{Position{2, epoch}, 1, []uint64{3}},
			{Position{2, epoch}, 2, []uint64{3, 4}},
			{Position{2, epoch}, 3, []uint64{3, 4, 5}},
			{Position{2, epoch}, 10, []uint64{3, 4, 5}},
			{Position{3, epoch}, 1, []uint64{4}},
			{Position{4, epoch}, 2, []uint64{5}},
			{top, 1, nil},
		} {
			r := page(c.since, c.limit)
			if !r.Recovered || r.Top != top || !equalOffsets(offsets(r.Publications), c.want...) {
				t.Fatalf("page from %v, limit %d: %+v, want offsets %v", c.since, c.limit, r, c.want)
			}
		}
		// A page never hides that the history lost the start.
		for _, limit := range []int{1, 2, 10} {
			if r := page(Position{1, epoch}, limit); r.Recovered || len(r.Publications) != 0 {
				t.Fatalf("page from beyond the history, limit %d: %+v", limit, r)
			}
		}
	})

	t.Run("tenants and channels are separate streams", func(t *testing.T) {
		b := newBroker(t)
		a := mustPublish(t, b, msg(Key{"acme", "shared"}, "a1"))
		mustPublish(t, b, msg(Key{"acme", "shared"}, "a2"))
		o := mustPublish(t, b, msg(Key{"other", "shared"}, "o1"))
		c := mustPublish(t, b, msg(Key{"acme", "shared/sub"}, "c1"))
		if o.Offset != 1 || c.Offset != 1 || o.Epoch == a.Epoch || c.Epoch == a.Epoch {
			t.Fatalf("streams not separate: acme %v other %v sub %v", a.Position, o.Position, c.Position)
		}
		r := mustRecover(t, b, Key{"other", "shared"}, Position{0, o.Epoch})
		if !r.Recovered || len(r.Publications) != 1 || r.Publications[0].ID != "o1" || r.Publications[0].Key.Tenant != "other" {
			t.Fatalf("other tenant's history: %+v", r)
		}
	})

	t.Run("invalid input", func(t *testing.T) {
		b := newBroker(t)
		ctx := testCtx(t)
		bad := []Message{
			{ID: "x", Key: Key{"", "c"}, Type: "t", Data: json.RawMessage(`1`)},
			{ID: "x", Key: Key{"a/b", "c"}, Type: "t", Data: json.RawMessage(`1`)},
			{ID: "x", Key: Key{"a", "c/{x}"}, Type: "t", Data: json.RawMessage(`1`)},
			{ID: "", Key: Key{"a", "c"}, Type: "t", Data: json.RawMessage(`1`)},
			{ID: "x", Key: Key{"a", "c"}, Type: "", Data: json.RawMessage(`1`)},
			{ID: "x", Key: Key{"a", "c"}, Type: "t", Data: nil},
			{ID: "x", Key: Key{"a", "c"}, Type: "t", Data: json.RawMessage(`{"a":`)},
			{ID: "x", Key: Key{"a", "c"}, Type: "t", Data: json.RawMessage(`1`), Freshness: json.RawMessage(`{`)},
		}
		for i, m := range bad {
			if _, err := b.Publish(ctx, m); err == nil || !errors.Is(err, ErrInvalidMessage) {
				t.Errorf("bad message %d: err = %v, want ErrInvalidMessage", i, err)
			}
		}
		if _, err := b.Recover(ctx, Key{"a", "bad channel"}, Position{}, 0); err == nil || !errors.Is(err, ErrInvalidKey) {
			t.Errorf("recover on a bad key: err = %v, want ErrInvalidKey", err)
		}
	})
}

// recorder is a Handler that records what it is handed.
type recorder struct {
	mu     sync.Mutex
	pubs   []Publication
	signal chan struct{}
}

func newRecorder() *recorder { return &recorder{signal: make(chan struct{}, 1)} }

func (r *recorder) HandlePublication(p Publication) {
	r.mu.Lock()
	r.pubs = append(r.pubs, p)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() []Publication {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Publication(nil), r.pubs...)
}

// waitFor waits until cond holds for the recorded publications.
func (r *recorder) waitFor(t testing.TB, what string, cond func([]Publication) bool) []Publication {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		if pubs := r.snapshot(); cond(pubs) {
			return pubs
		}
		select {
		case <-r.signal:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; have %v", what, offsets(r.snapshot()))
		}
	}
}
