package fanouttest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/heraldgw/herald/fanout"
)

// RunRecover runs the Recover contract against a broker whose
// history holds 3 publications per channel.
func RunRecover(t *testing.T, newBroker func(t *testing.T) fanout.Broker) {
	t.Run("never-seen channel", func(t *testing.T) {
		b := newBroker(t)
		key := fanout.Key{Tenant: "acme", Channel: "fresh/1"}
		r := MustRecover(t, b, key, fanout.Position{})
		if r.Recovered || r.Top.Offset != 0 || r.Top.Epoch == "" || len(r.Publications) != 0 {
			t.Fatalf("first recover: %+v", r)
		}
		again := MustRecover(t, b, key, r.Top)
		if !again.Recovered || again.Top != r.Top || again.Publications == nil || len(again.Publications) != 0 {
			t.Fatalf("recover from the lazily created top: %+v (top %v)", again, r.Top)
		}
		p := MustPublish(t, b, Msg(key, "m1"))
		if p.Offset != 1 || p.Epoch != r.Top.Epoch {
			t.Fatalf("first publication at %v, want offset 1 in epoch %s", p.Position, r.Top.Epoch)
		}
		fromZero := MustRecover(t, b, key, r.Top)
		if !fromZero.Recovered || !EqualOffsets(Offsets(fromZero.Publications), 1) {
			t.Fatalf("recover from {0, epoch}: %+v", fromZero)
		}
	})

	t.Run("offsets, history bound and positions", func(t *testing.T) {
		b := newBroker(t)
		key := fanout.Key{Tenant: "acme", Channel: "orders/7"}
		var epoch string
		for i := 1; i <= 5; i++ {
			p := MustPublish(t, b, Msg(key, fmt.Sprintf("m%d", i)))
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
		top := fanout.Position{Offset: 5, Epoch: epoch}

		within := MustRecover(t, b, key, fanout.Position{Offset: 2, Epoch: epoch})
		if !within.Recovered || within.Top != top || !EqualOffsets(Offsets(within.Publications), 3, 4, 5) {
			t.Fatalf("recover within history: %+v", within)
		}
		for i, p := range within.Publications {
			want := fmt.Sprintf("m%d", i+3)
			if p.ID != want || p.Key != key || p.Epoch != epoch || p.Type != "order.updated" ||
				string(p.Data) != fmt.Sprintf(`{"id":%q}`, want) {
				t.Fatalf("recovered publication %d: %+v data %s", i, p, p.Data)
			}
		}
		for _, since := range []fanout.Position{{Offset: 1, Epoch: epoch}, {Offset: 0, Epoch: epoch}} {
			beyond := MustRecover(t, b, key, since)
			if beyond.Recovered || beyond.Top != top || len(beyond.Publications) != 0 {
				t.Fatalf("recover from %v beyond history: %+v", since, beyond)
			}
		}
		atTop := MustRecover(t, b, key, top)
		if !atTop.Recovered || atTop.Top != top || len(atTop.Publications) != 0 {
			t.Fatalf("recover from top: %+v", atTop)
		}
		for _, since := range []fanout.Position{{Offset: 4, Epoch: "other-epoch"}, {Offset: 4, Epoch: ""}, {Offset: 9, Epoch: epoch}} {
			wrong := MustRecover(t, b, key, since)
			if wrong.Recovered || wrong.Top != top || len(wrong.Publications) != 0 {
				t.Fatalf("recover from %v: %+v", since, wrong)
			}
		}
	})

	t.Run("pages", func(t *testing.T) {
		b := newBroker(t)
		key := fanout.Key{Tenant: "acme", Channel: "orders/paged"}
		var epoch string
		for i := 1; i <= 5; i++ {
			epoch = MustPublish(t, b, Msg(key, fmt.Sprintf("m%d", i))).Epoch
		}
		top := fanout.Position{Offset: 5, Epoch: epoch}
		page := func(since fanout.Position, limit int) fanout.Recovery {
			t.Helper()
			r, err := b.Recover(Context(t), key, since, limit)
			if err != nil {
				t.Fatalf("recover from %v, limit %d: %v", since, limit, err)
			}
			return r
		}
		for _, c := range []struct {
			since fanout.Position
			limit int
			want  []uint64
		}{
			{fanout.Position{Offset: 2, Epoch: epoch}, 1, []uint64{3}},
			{fanout.Position{Offset: 2, Epoch: epoch}, 2, []uint64{3, 4}},
			{fanout.Position{Offset: 2, Epoch: epoch}, 3, []uint64{3, 4, 5}},
			{fanout.Position{Offset: 2, Epoch: epoch}, 10, []uint64{3, 4, 5}},
			{fanout.Position{Offset: 3, Epoch: epoch}, 1, []uint64{4}},
			{fanout.Position{Offset: 4, Epoch: epoch}, 2, []uint64{5}},
			{top, 1, nil},
		} {
			r := page(c.since, c.limit)
			if !r.Recovered || r.Top != top || !EqualOffsets(Offsets(r.Publications), c.want...) {
				t.Fatalf("page from %v, limit %d: %+v, want offsets %v", c.since, c.limit, r, c.want)
			}
		}
		// A page never hides that the history lost the start.
		for _, limit := range []int{1, 2, 10} {
			if r := page(fanout.Position{Offset: 1, Epoch: epoch}, limit); r.Recovered || len(r.Publications) != 0 {
				t.Fatalf("page from beyond the history, limit %d: %+v", limit, r)
			}
		}
	})

	t.Run("tenants and channels are separate streams", func(t *testing.T) {
		b := newBroker(t)
		a := MustPublish(t, b, Msg(fanout.Key{Tenant: "acme", Channel: "shared"}, "a1"))
		MustPublish(t, b, Msg(fanout.Key{Tenant: "acme", Channel: "shared"}, "a2"))
		o := MustPublish(t, b, Msg(fanout.Key{Tenant: "other", Channel: "shared"}, "o1"))
		c := MustPublish(t, b, Msg(fanout.Key{Tenant: "acme", Channel: "shared/sub"}, "c1"))
		if o.Offset != 1 || c.Offset != 1 || o.Epoch == a.Epoch || c.Epoch == a.Epoch {
			t.Fatalf("streams not separate: acme %v other %v sub %v", a.Position, o.Position, c.Position)
		}
		r := MustRecover(t, b, fanout.Key{Tenant: "other", Channel: "shared"}, fanout.Position{Offset: 0, Epoch: o.Epoch})
		if !r.Recovered || len(r.Publications) != 1 || r.Publications[0].ID != "o1" || r.Publications[0].Key.Tenant != "other" {
			t.Fatalf("other tenant's history: %+v", r)
		}
	})

	t.Run("invalid input", func(t *testing.T) {
		b := newBroker(t)
		ctx := Context(t)
		bad := []fanout.Message{
			{ID: "x", Key: fanout.Key{Tenant: "", Channel: "c"}, Type: "t", Data: json.RawMessage(`1`)},
			{ID: "x", Key: fanout.Key{Tenant: "a/b", Channel: "c"}, Type: "t", Data: json.RawMessage(`1`)},
			{ID: "x", Key: fanout.Key{Tenant: "a", Channel: "c/{x}"}, Type: "t", Data: json.RawMessage(`1`)},
			{ID: "", Key: fanout.Key{Tenant: "a", Channel: "c"}, Type: "t", Data: json.RawMessage(`1`)},
			{ID: "x", Key: fanout.Key{Tenant: "a", Channel: "c"}, Type: "", Data: json.RawMessage(`1`)},
			{ID: "x", Key: fanout.Key{Tenant: "a", Channel: "c"}, Type: "t", Data: nil},
			{ID: "x", Key: fanout.Key{Tenant: "a", Channel: "c"}, Type: "t", Data: json.RawMessage(`{"a":`)},
			{ID: "x", Key: fanout.Key{Tenant: "a", Channel: "c"}, Type: "t", Data: json.RawMessage(`1`), Freshness: json.RawMessage(`{`)},
		}
		for i, m := range bad {
			if _, err := b.Publish(ctx, m); err == nil || !errors.Is(err, fanout.ErrInvalidMessage) {
				t.Errorf("bad message %d: err = %v, want fanout.ErrInvalidMessage", i, err)
			}
		}
		if _, err := b.Recover(ctx, fanout.Key{Tenant: "a", Channel: "bad channel"}, fanout.Position{}, 0); err == nil || !errors.Is(err, fanout.ErrInvalidKey) {
			t.Errorf("recover on a bad key: err = %v, want fanout.ErrInvalidKey", err)
		}
	})
}
