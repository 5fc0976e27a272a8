package fanouttest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/heraldgw/herald/fanout"
)

// RunIdempotent runs the idempotent Publish contract (see
// fanout.Broker.Publish) against a broker whose history holds historySize
// publications per channel. newLossy returns a broker and a publish that
// the broker accepts but whose first answer is lost, so it is retried; the
// publish returns what the retry answered.
func RunIdempotent(t *testing.T, newBroker func(t *testing.T, historySize int) fanout.Broker,
	newLossy func(t *testing.T) (fanout.Broker, func(t *testing.T, m fanout.Message) fanout.Publication)) {
	t.Run("a publish whose reply was lost is retried without a second entry", func(t *testing.T) {
		b, publishLosingReply := newLossy(t)
		key := fanout.Key{Tenant: "acme", Channel: "idem/lost"}
		rec := Recording(t, b, key)
		first := MustPublish(t, b, Msg(key, "m0")) // loads the script where it runs
		got := publishLosingReply(t, Msg(key, "m1"))
		if got.ID != "m1" || got.Offset != first.Offset+1 || got.Epoch != first.Epoch {
			t.Fatalf("retried publish answered %+v, want m1 at offset %d", got.Position, first.Offset+1)
		}
		if p := MustPublish(t, b, Msg(key, "m2")); p.Offset != got.Offset+1 {
			t.Fatalf("next publication at %v, want offset %d", p.Position, got.Offset+1)
		}
		HistoryAndFanOut(t, b, rec, key, "m0", "m1", "m2")
	})

	t.Run("a retained id is answered with its publication", func(t *testing.T) {
		b := newBroker(t, 10)
		key := fanout.Key{Tenant: "acme", Channel: "idem/retained"}
		rec := Recording(t, b, key)
		m1 := MustPublish(t, b, Msg(key, "m1"))
		MustPublish(t, b, Msg(key, "m2"))
		again := Msg(key, "m1")
		again.Data = json.RawMessage(`{"other":true}`)
		got := MustPublish(t, b, again)
		if got.Position != m1.Position || got.ID != "m1" || got.Key != key || string(got.Data) != `{"id":"m1"}` ||
			!got.Time.Equal(m1.Time) || got.Type != m1.Type {
			t.Fatalf("repeat of m1: %+v data %s; want the retained %+v", got, got.Data, m1)
		}
		// The same id on another channel is another message.
		if p := MustPublish(t, b, Msg(fanout.Key{Tenant: "acme", Channel: "idem/other"}, "m1")); p.Offset != 1 {
			t.Fatalf("m1 on another channel at %v, want offset 1", p.Position)
		}
		if d := DeliveredUpTo(t, b, rec, key); !slices.Equal(d, []string{"m1", "m2"}) {
			t.Fatalf("fanned out %v, want [m1 m2]", d)
		}
	})

	t.Run("an id that left the history is appended again", func(t *testing.T) {
		b := newBroker(t, 3)
		key := fanout.Key{Tenant: "acme", Channel: "idem/trimmed"}
		for i := 1; i <= 10; i++ {
			MustPublish(t, b, Msg(key, fmt.Sprint("m", i)))
		}
		// Retained: m8 m9 m10.
		for i := 8; i <= 10; i++ {
			if p := MustPublish(t, b, Msg(key, fmt.Sprint("m", i))); p.Offset != uint64(i) {
				t.Fatalf("repeat of retained m%d at %v, want offset %d", i, p.Position, i)
			}
		}
		if p := MustPublish(t, b, Msg(key, "m7")); p.Offset != 11 {
			t.Fatalf("repeat of trimmed m7 at %v, want offset 11", p.Position)
		}
		// Retained: m9 m10 m7; m8 has left.
		if p := MustPublish(t, b, Msg(key, "m8")); p.Offset != 12 {
			t.Fatalf("repeat of trimmed m8 at %v, want offset 12", p.Position)
		}
		if p := MustPublish(t, b, Msg(key, "m7")); p.Offset != 11 {
			t.Fatalf("repeat of re-appended m7 at %v, want offset 11", p.Position)
		}
		top := MustRecover(t, b, key, fanout.Position{}).Top
		r := MustRecover(t, b, key, fanout.Position{Offset: 9, Epoch: top.Epoch})
		if h := IDs(r.Publications); !r.Recovered || !slices.Equal(h, []string{"m10", "m7", "m8"}) {
			t.Fatalf("history after offset 9: %v (recovered %v), want [m10 m7 m8]", h, r.Recovered)
		}
	})

	t.Run("concurrent repeats leave one entry per id", func(t *testing.T) {
		b := newBroker(t, 100)
		key := fanout.Key{Tenant: "acme", Channel: "idem/concurrent"}
		const n, workers = 40, 4
		got := make([]map[string]fanout.Position, workers)
		errs := make(chan error, workers)
		done := make(chan struct{})
		for w := range workers {
			got[w] = make(map[string]fanout.Position)
			go func() {
				defer func() { done <- struct{}{} }()
				for i := range n {
					p, err := b.Publish(context.Background(), Msg(key, fmt.Sprint("m", i)))
					if err != nil {
						errs <- err
						return
					}
					got[w][p.ID] = p.Position
				}
			}()
		}
		for range workers {
			<-done
		}
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		h := History(t, b, key)
		if len(h) != n {
			t.Fatalf("history holds %d publications, want %d", len(h), n)
		}
		for _, p := range h {
			for w := range workers {
				if got[w][p.ID] != p.Position {
					t.Fatalf("worker %d got %s at %v, history has it at %v", w, p.ID, got[w][p.ID], p.Position)
				}
			}
		}
	})
}
