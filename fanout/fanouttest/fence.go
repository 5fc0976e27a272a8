package fanouttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/heraldgw/herald/fanout"
)

// RunFence runs the fenced Publish contract (see fanout.Fence) against a
// broker whose history holds historySize publications per channel.
func RunFence(t *testing.T, newBroker func(t *testing.T, historySize int) fanout.Broker) {
	t.Run("stale fence refused, equal and higher accepted", func(t *testing.T) {
		b := newBroker(t, 10)
		key := fanout.Key{Tenant: "acme", Channel: "fence/stale"}
		rec := Recording(t, b, key)
		MustPublish(t, b, Fenced(key, "m1", fanout.Fence{Scope: "p1", Value: 2}))
		MustBeStale(t, b, Fenced(key, "m2", fanout.Fence{Scope: "p1", Value: 1}))
		MustBeStale(t, b, Fenced(key, "m2", fanout.Fence{Scope: "p1", Value: 1, Takeover: true}))
		if p := MustPublish(t, b, Fenced(key, "m3", fanout.Fence{Scope: "p1", Value: 2})); p.Offset != 2 || p.Fence != (fanout.Fence{}) {
			t.Fatalf("equal fence: %+v, want offset 2 and no fence", p)
		}
		MustPublish(t, b, Fenced(key, "m4", fanout.Fence{Scope: "p1", Value: 3}))
		MustBeStale(t, b, Fenced(key, "m5", fanout.Fence{Scope: "p1", Value: 2}))
		HistoryAndFanOut(t, b, rec, key, "m1", "m3", "m4")
	})

	t.Run("fence values compare exactly", func(t *testing.T) {
		b := newBroker(t, 10)
		key := fanout.Key{Tenant: "acme", Channel: "fence/values"}
		// Doubles cannot tell these apart; the broker must.
		MustPublish(t, b, Fenced(key, "a", fanout.Fence{Scope: "big", Value: math.MaxInt64}))
		MustBeStale(t, b, Fenced(key, "b", fanout.Fence{Scope: "big", Value: math.MaxInt64 - 1}))
		for i, v := range []int64{-10, -10, -9, 0, 9, 10, 100} {
			MustPublish(t, b, Fenced(key, fmt.Sprint("n", i), fanout.Fence{Scope: "neg", Value: v}))
		}
		for _, v := range []int64{99, 11, -1, -11, math.MinInt64} {
			MustBeStale(t, b, Fenced(key, "late", fanout.Fence{Scope: "neg", Value: v}))
		}
	})

	t.Run("scopes are independent", func(t *testing.T) {
		b := newBroker(t, 10)
		key := fanout.Key{Tenant: "acme", Channel: "fence/scopes"}
		MustPublish(t, b, Fenced(key, "a1", fanout.Fence{Scope: "p1", Value: 5}))
		MustPublish(t, b, Fenced(key, "b1", fanout.Fence{Scope: "p2", Value: 1}))
		MustBeStale(t, b, Fenced(key, "a2", fanout.Fence{Scope: "p1", Value: 4}))
		MustPublish(t, b, Fenced(key, "b2", fanout.Fence{Scope: "p2", Value: 1}))
		MustBeStale(t, b, Fenced(key, "b3", fanout.Fence{Scope: "p2", Value: 0}))
		if got := IDs(History(t, b, key)); !slices.Equal(got, []string{"a1", "b1", "b2"}) {
			t.Fatalf("history %v, want [a1 b1 b2]", got)
		}
	})

	t.Run("takeover duplicate returns the retained publication", func(t *testing.T) {
		b := newBroker(t, 10)
		key := fanout.Key{Tenant: "acme", Channel: "fence/takeover"}
		rec := Recording(t, b, key)
		m1 := MustPublish(t, b, Fenced(key, "m1", fanout.Fence{Scope: "p1", Value: 1}))
		MustPublish(t, b, Fenced(key, "m2", fanout.Fence{Scope: "p1", Value: 1}))
		again := Fenced(key, "m1", fanout.Fence{Scope: "p1", Value: 2, Takeover: true})
		again.Data = json.RawMessage(`{"other":true}`)
		got := MustPublish(t, b, again)
		if got.Position != m1.Position || got.ID != "m1" || got.Key != key || string(got.Data) != `{"id":"m1"}` ||
			!got.Time.Equal(m1.Time) || got.Type != m1.Type || got.Fence != (fanout.Fence{}) {
			t.Fatalf("takeover of m1: %+v data %s; want the retained %+v", got, got.Data, m1)
		}
		// The takeover raised the fence.
		MustBeStale(t, b, Fenced(key, "m3", fanout.Fence{Scope: "p1", Value: 1}))
		if p := MustPublish(t, b, Fenced(key, "m3", fanout.Fence{Scope: "p1", Value: 2, Takeover: true})); p.Offset != 3 {
			t.Fatalf("takeover of a new id at %v, want offset 3", p.Position)
		}
		// Without Takeover a retained id is skipped too.
		if p := MustPublish(t, b, Fenced(key, "m1", fanout.Fence{Scope: "p1", Value: 2})); p.Position != m1.Position {
			t.Fatalf("non-takeover repeat at %v, want the retained %v", p.Position, m1.Position)
		}
		HistoryAndFanOut(t, b, rec, key, "m1", "m2", "m3")
	})

	t.Run("takeover of an id no longer retained appends", func(t *testing.T) {
		b := newBroker(t, 3)
		key := fanout.Key{Tenant: "acme", Channel: "fence/trimmed"}
		for i := 1; i <= 4; i++ {
			MustPublish(t, b, Fenced(key, fmt.Sprint("m", i), fanout.Fence{Scope: "p1", Value: 1}))
		}
		if p := MustPublish(t, b, Fenced(key, "m1", fanout.Fence{Scope: "p1", Value: 2, Takeover: true})); p.Offset != 5 {
			t.Fatalf("takeover of trimmed m1 at %v, want offset 5", p.Position)
		}
		// Retained now: m3, m4, m1.
		if p := MustPublish(t, b, Fenced(key, "m3", fanout.Fence{Scope: "p1", Value: 2, Takeover: true})); p.Offset != 3 {
			t.Fatalf("takeover of retained m3 at %v, want offset 3", p.Position)
		}
		if p := MustPublish(t, b, Fenced(key, "m2", fanout.Fence{Scope: "p1", Value: 2, Takeover: true})); p.Offset != 6 {
			t.Fatalf("takeover of trimmed m2 at %v, want offset 6", p.Position)
		}
		if p := MustPublish(t, b, Fenced(fanout.Key{Tenant: "acme", Channel: "fence/other"}, "m4", fanout.Fence{Scope: "p1", Value: 2, Takeover: true})); p.Offset != 1 {
			t.Fatalf("takeover of m4 on another channel at %v, want offset 1", p.Position)
		}
	})

	t.Run("takeover scans the whole retained history", func(t *testing.T) {
		b := newBroker(t, 205)
		key := fanout.Key{Tenant: "acme", Channel: "fence/long"}
		for i := range 210 {
			MustPublish(t, b, Msg(key, fmt.Sprint("m", i)))
		}
		for _, i := range []int{5, 6, 105, 109, 110, 209} { // m5 is the oldest retained
			if p := MustPublish(t, b, Fenced(key, fmt.Sprint("m", i), fanout.Fence{Scope: "p1", Value: 1, Takeover: true})); p.Offset != uint64(i+1) {
				t.Fatalf("takeover of m%d at %v, want offset %d", i, p.Position, i+1)
			}
		}
		if p := MustPublish(t, b, Fenced(key, "m4", fanout.Fence{Scope: "p1", Value: 1, Takeover: true})); p.Offset != 211 {
			t.Fatalf("takeover of trimmed m4 at %v, want offset 211", p.Position)
		}
	})

	t.Run("stale holder first on a channel is skipped by the takeover", func(t *testing.T) {
		b := newBroker(t, 10)
		done, fresh := fanout.Key{Tenant: "acme", Channel: "fence/done"}, fanout.Key{Tenant: "acme", Channel: "fence/fresh"}
		MustPublish(t, b, Fenced(done, "x", fanout.Fence{Scope: "p1", Value: 2, Takeover: true}))
		MustBeStale(t, b, Fenced(done, "y", fanout.Fence{Scope: "p1", Value: 1}))
		// Memory refuses it (its fence is per scope), Redis accepts it (per
		// channel and scope): either way the takeover adds no second entry.
		_, err := b.Publish(Context(t), Fenced(fresh, "m", fanout.Fence{Scope: "p1", Value: 1}))
		if err != nil && !errors.Is(err, fanout.ErrStaleFence) {
			t.Fatal(err)
		}
		MustPublish(t, b, Fenced(fresh, "m", fanout.Fence{Scope: "p1", Value: 2, Takeover: true}))
		if got := IDs(History(t, b, fresh)); !slices.Equal(got, []string{"m"}) {
			t.Fatalf("history %v, want [m]", got)
		}
	})

	t.Run("unfenced unchanged", func(t *testing.T) {
		b := newBroker(t, 10)
		key := fanout.Key{Tenant: "acme", Channel: "fence/none"}
		MustPublish(t, b, Fenced(key, "f", fanout.Fence{Scope: "p1", Value: 9}))
		MustPublish(t, b, Msg(key, "u"))
		if p := MustPublish(t, b, Msg(key, "u")); p.Offset != 2 {
			t.Fatalf("unfenced repeat at %v, want the retained offset 2", p.Position)
		}
		for _, f := range []fanout.Fence{{Value: 1}, {Takeover: true}} {
			if _, err := b.Publish(Context(t), Fenced(key, "bad", f)); !errors.Is(err, fanout.ErrInvalidMessage) {
				t.Errorf("fence %+v without scope: err = %v, want fanout.ErrInvalidMessage", f, err)
			}
		}
		if got := IDs(History(t, b, key)); !slices.Equal(got, []string{"f", "u"}) {
			t.Fatalf("history %v, want [f u]", got)
		}
	})

	t.Run("concurrent holders leave one entry per id", func(t *testing.T) {
		b := newBroker(t, 100)
		keys := []fanout.Key{{Tenant: "acme", Channel: "fence/c0"}, {Tenant: "acme", Channel: "fence/c1"}}
		rec := Recording(t, b, keys...)
		const n = 30
		holder := func(f fanout.Fence, prefix string) (map[fanout.Key][]error, map[string]fanout.Publication) {
			errs, pubs := make(map[fanout.Key][]error), make(map[string]fanout.Publication)
			for i := range n {
				k := keys[i%2]
				p, err := b.Publish(context.Background(), Fenced(k, fmt.Sprint(prefix, i), f))
				errs[k] = append(errs[k], err)
				if err == nil {
					pubs[p.ID] = p
				}
			}
			return errs, pubs
		}
		var wg sync.WaitGroup
		var oldErrs, newErrs, otherErrs map[fanout.Key][]error
		var newPubs map[string]fanout.Publication
		wg.Go(func() { oldErrs, _ = holder(fanout.Fence{Scope: "p1", Value: 1}, "m") })
		wg.Go(func() { newErrs, newPubs = holder(fanout.Fence{Scope: "p1", Value: 2, Takeover: true}, "m") })
		wg.Go(func() { otherErrs, _ = holder(fanout.Fence{Scope: "p2", Value: 1, Takeover: true}, "q") })
		wg.Wait()
		for _, k := range keys {
			for i, err := range append(newErrs[k], otherErrs[k]...) {
				if err != nil {
					t.Fatalf("publication %d on %v: %v", i, k, err)
				}
			}
			stale := false
			for i, err := range oldErrs[k] {
				switch {
				case err != nil && !errors.Is(err, fanout.ErrStaleFence):
					t.Fatalf("old holder's publication %d on %v: %v", i, k, err)
				case stale && err == nil:
					t.Fatalf("old holder's publication %d on %v accepted after a refusal", i, k)
				}
				stale = stale || err != nil
			}
		}
		for j, k := range keys {
			hist := History(t, b, k)
			seen := make(map[string]int)
			for _, p := range hist {
				seen[p.ID]++
			}
			for i := j; i < n; i += 2 {
				for _, id := range []string{fmt.Sprint("m", i), fmt.Sprint("q", i)} {
					if seen[id] != 1 {
						t.Fatalf("%v holds %s %d times, want once", k, id, seen[id])
					}
				}
				p := newPubs[fmt.Sprint("m", i)]
				if !slices.ContainsFunc(hist, func(h fanout.Publication) bool { return h.ID == p.ID && h.Position == p.Position }) {
					t.Fatalf("new holder's %+v is not in %v's history", p, k)
				}
			}
			if len(hist) != n {
				t.Fatalf("%v holds %d publications, want %d", k, len(hist), n)
			}
			if got := DeliveredUpTo(t, b, rec, k); !slices.Equal(got, IDs(hist)) {
				t.Fatalf("%v fanned out %v, history %v", k, got, IDs(hist))
			}
		}
	})
}
