package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
)

// fenced is msg(key, id) published under f.
func fenced(key Key, id string, f Fence) Message {
	m := msg(key, id)
	m.Fence = f
	return m
}

// ids lists the message ids of pubs.
func ids(pubs []Publication) []string {
	out := make([]string, len(pubs))
	for i, p := range pubs {
		out[i] = p.ID
	}
	return out
}

// history is key's whole retained history, which must hold every
// publication of the current epoch.
func history(t *testing.T, b Broker, key Key) []Publication {
	t.Helper()
	top := mustRecover(t, b, key, Position{}).Top
	r := mustRecover(t, b, key, Position{Epoch: top.Epoch})
	if !r.Recovered {
		t.Fatalf("history of %v not recovered from offset 0: %+v", key, r)
	}
	return r.Publications
}

// recording starts b with a recorder subscribed to keys.
func recording(t *testing.T, b Broker, keys ...Key) *recorder {
	t.Helper()
	rec := newRecorder()
	if err := b.Start(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := b.Subscribe(testCtx(t), k); err != nil {
			t.Fatal(err)
		}
	}
	return rec
}

// deliveredUpTo publishes an unfenced "last" on key, waits until the
// recorder has it, and returns the ids the recorder got for key before it:
// anything fanned out earlier arrives first.
func deliveredUpTo(t *testing.T, b Broker, rec *recorder, key Key) []string {
	t.Helper()
	last := mustPublish(t, b, msg(key, "last"))
	pubs := rec.waitFor(t, "the last publication", func(pubs []Publication) bool {
		return slices.ContainsFunc(pubs, func(p Publication) bool { return p.Key == key && p.Position == last.Position })
	})
	var out []string
	for _, p := range pubs {
		if p.Key == key && p.ID != "last" {
			out = append(out, p.ID)
		}
	}
	return out
}

func mustBeStale(t *testing.T, b Broker, m Message) {
	t.Helper()
	if p, err := b.Publish(testCtx(t), m); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("publish %s under %+v: %+v, err = %v; want ErrStaleFence", m.ID, m.Fence, p, err)
	}
}

// testFenceCases runs the fenced Publish contract (see Fence) against a
// broker whose history holds historySize publications per channel.
func testFenceCases(t *testing.T, newBroker func(t *testing.T, historySize int) Broker) {
	t.Run("stale fence refused, equal and higher accepted", func(t *testing.T) {
		b := newBroker(t, 10)
		key := Key{"acme", "fence/stale"}
		rec := recording(t, b, key)
		mustPublish(t, b, fenced(key, "m1", Fence{Scope: "p1", Value: 2}))
		mustBeStale(t, b, fenced(key, "m2", Fence{Scope: "p1", Value: 1}))
		mustBeStale(t, b, fenced(key, "m2", Fence{Scope: "p1", Value: 1, Takeover: true}))
		if p := mustPublish(t, b, fenced(key, "m3", Fence{Scope: "p1", Value: 2})); p.Offset != 2 || p.Fence != (Fence{}) {
			t.Fatalf("equal fence: %+v, want offset 2 and no fence", p)
		}
		mustPublish(t, b, fenced(key, "m4", Fence{Scope: "p1", Value: 3}))
		mustBeStale(t, b, fenced(key, "m5", Fence{Scope: "p1", Value: 2}))
		if got := ids(history(t, b, key)); !slices.Equal(got, []string{"m1", "m3", "m4"}) {
			t.Fatalf("history %v, want [m1 m3 m4]", got)
		}
		if got := deliveredUpTo(t, b, rec, key); !slices.Equal(got, []string{"m1", "m3", "m4"}) {
			t.Fatalf("fanned out %v, want [m1 m3 m4]", got)
		}
	})

	t.Run("fence values compare exactly", func(t *testing.T) {
		b := newBroker(t, 10)
		key := Key{"acme", "fence/values"}
		// Doubles cannot tell these apart; the broker must.
		mustPublish(t, b, fenced(key, "a", Fence{Scope: "big", Value: math.MaxInt64}))
		mustBeStale(t, b, fenced(key, "b", Fence{Scope: "big", Value: math.MaxInt64 - 1}))
		for i, v := range []int64{-10, -10, -9, 0, 9, 10, 100} {
			mustPublish(t, b, fenced(key, fmt.Sprint("n", i), Fence{Scope: "neg", Value: v}))
		}
		for _, v := range []int64{99, 11, -1, -11, math.MinInt64} {
			mustBeStale(t, b, fenced(key, "late", Fence{Scope: "neg", Value: v}))
		}
	})

	t.Run("scopes are independent", func(t *testing.T) {
		b := newBroker(t, 10)
		key := Key{"acme", "fence/scopes"}
		mustPublish(t, b, fenced(key, "a1", Fence{Scope: "p1", Value: 5}))
		mustPublish(t, b, fenced(key, "b1", Fence{Scope: "p2", Value: 1}))
		mustBeStale(t, b, fenced(key, "a2", Fence{Scope: "p1", Value: 4}))
		mustPublish(t, b, fenced(key, "b2", Fence{Scope: "p2", Value: 1}))
		mustBeStale(t, b, fenced(key, "b3", Fence{Scope: "p2", Value: 0}))
		if got := ids(history(t, b, key)); !slices.Equal(got, []string{"a1", "b1", "b2"}) {
			t.Fatalf("history %v, want [a1 b1 b2]", got)
		}
	})

	t.Run("takeover duplicate returns the retained publication", func(t *testing.T) {
		b := newBroker(t, 10)
		key := Key{"acme", "fence/takeover"}
		rec := recording(t, b, key)
		m1 := mustPublish(t, b, fenced(key, "m1", Fence{Scope: "p1", Value: 1}))
		mustPublish(t, b, fenced(key, "m2", Fence{Scope: "p1", Value: 1}))
		again := fenced(key, "m1", Fence{Scope: "p1", Value: 2, Takeover: true})
		again.Data = json.RawMessage(`{"other":true}`)
		got := mustPublish(t, b, again)
		if got.Position != m1.Position || got.ID != "m1" || got.Key != key || string(got.Data) != `{"id":"m1"}` ||
			!got.Time.Equal(m1.Time) || got.Type != m1.Type || got.Fence != (Fence{}) {
			t.Fatalf("takeover of m1: %+v data %s; want the retained %+v", got, got.Data, m1)
		}
		// The takeover raised the fence.
		mustBeStale(t, b, fenced(key, "m3", Fence{Scope: "p1", Value: 1}))
		if p := mustPublish(t, b, fenced(key, "m3", Fence{Scope: "p1", Value: 2, Takeover: true})); p.Offset != 3 {
			t.Fatalf("takeover of a new id at %v, want offset 3", p.Position)
		}
		// Without Takeover a retained id is skipped too.
		if p := mustPublish(t, b, fenced(key, "m1", Fence{Scope: "p1", Value: 2})); p.Position != m1.Position {
			t.Fatalf("non-takeover repeat at %v, want the retained %v", p.Position, m1.Position)
		}
		want := []string{"m1", "m2", "m3"}
		if got := ids(history(t, b, key)); !slices.Equal(got, want) {
			t.Fatalf("history %v, want %v", got, want)
		}
		if got := deliveredUpTo(t, b, rec, key); !slices.Equal(got, want) {
			t.Fatalf("fanned out %v, want %v", got, want)
		}
	})

	t.Run("takeover of an id no longer retained appends", func(t *testing.T) {
		b := newBroker(t, 3)
		key := Key{"acme", "fence/trimmed"}
		for i := 1; i <= 4; i++ {
			mustPublish(t, b, fenced(key, fmt.Sprint("m", i), Fence{Scope: "p1", Value: 1}))
		}
		if p := mustPublish(t, b, fenced(key, "m1", Fence{Scope: "p1", Value: 2, Takeover: true})); p.Offset != 5 {
			t.Fatalf("takeover of trimmed m1 at %v, want offset 5", p.Position)
		}
		// Retained now: m3, m4, m1.
		if p := mustPublish(t, b, fenced(key, "m3", Fence{Scope: "p1", Value: 2, Takeover: true})); p.Offset != 3 {
			t.Fatalf("takeover of retained m3 at %v, want offset 3", p.Position)
		}
		if p := mustPublish(t, b, fenced(key, "m2", Fence{Scope: "p1", Value: 2, Takeover: true})); p.Offset != 6 {
			t.Fatalf("takeover of trimmed m2 at %v, want offset 6", p.Position)
		}
		if p := mustPublish(t, b, fenced(Key{"acme", "fence/other"}, "m4", Fence{Scope: "p1", Value: 2, Takeover: true})); p.Offset != 1 {
			t.Fatalf("takeover of m4 on another channel at %v, want offset 1", p.Position)
		}
	})

	t.Run("takeover scans the whole retained history", func(t *testing.T) {
		b := newBroker(t, 205)
		key := Key{"acme", "fence/long"}
		for i := range 210 {
			mustPublish(t, b, msg(key, fmt.Sprint("m", i)))
		}
		for _, i := range []int{5, 6, 105, 109, 110, 209} { // m5 is the oldest retained
			if p := mustPublish(t, b, fenced(key, fmt.Sprint("m", i), Fence{Scope: "p1", Value: 1, Takeover: true})); p.Offset != uint64(i+1) {
				t.Fatalf("takeover of m%d at %v, want offset %d", i, p.Position, i+1)
			}
		}
		if p := mustPublish(t, b, fenced(key, "m4", Fence{Scope: "p1", Value: 1, Takeover: true})); p.Offset != 211 {
			t.Fatalf("takeover of trimmed m4 at %v, want offset 211", p.Position)
		}
	})

	t.Run("stale holder first on a channel is skipped by the takeover", func(t *testing.T) {
		b := newBroker(t, 10)
		done, fresh := Key{"acme", "fence/done"}, Key{"acme", "fence/fresh"}
		mustPublish(t, b, fenced(done, "x", Fence{Scope: "p1", Value: 2, Takeover: true}))
		mustBeStale(t, b, fenced(done, "y", Fence{Scope: "p1", Value: 1}))
		// Memory refuses it (its fence is per scope), Redis accepts it (per
		// channel and scope): either way the takeover adds no second entry.
		_, err := b.Publish(testCtx(t), fenced(fresh, "m", Fence{Scope: "p1", Value: 1}))
		if err != nil && !errors.Is(err, ErrStaleFence) {
			t.Fatal(err)
		}
		mustPublish(t, b, fenced(fresh, "m", Fence{Scope: "p1", Value: 2, Takeover: true}))
		if got := ids(history(t, b, fresh)); !slices.Equal(got, []string{"m"}) {
			t.Fatalf("history %v, want [m]", got)
		}
	})

	t.Run("unfenced unchanged", func(t *testing.T) {
		b := newBroker(t, 10)
		key := Key{"acme", "fence/none"}
		mustPublish(t, b, fenced(key, "f", Fence{Scope: "p1", Value: 9}))
		mustPublish(t, b, msg(key, "u"))
		if p := mustPublish(t, b, msg(key, "u")); p.Offset != 2 {
			t.Fatalf("unfenced repeat at %v, want the retained offset 2", p.Position)
		}
		for _, f := range []Fence{{Value: 1}, {Takeover: true}} {
			if _, err := b.Publish(testCtx(t), fenced(key, "bad", f)); !errors.Is(err, ErrInvalidMessage) {
				t.Errorf("fence %+v without scope: err = %v, want ErrInvalidMessage", f, err)
			}
		}
		if got := ids(history(t, b, key)); !slices.Equal(got, []string{"f", "u"}) {
			t.Fatalf("history %v, want [f u]", got)
		}
	})

	t.Run("concurrent holders leave one entry per id", func(t *testing.T) {
		b := newBroker(t, 100)
		keys := []Key{{"acme", "fence/c0"}, {"acme", "fence/c1"}}
		rec := recording(t, b, keys...)
		const n = 30
		holder := func(f Fence, prefix string) (map[Key][]error, map[string]Publication) {
			errs, pubs := make(map[Key][]error), make(map[string]Publication)
			for i := range n {
				k := keys[i%2]
				p, err := b.Publish(context.Background(), fenced(k, fmt.Sprint(prefix, i), f))
				errs[k] = append(errs[k], err)
				if err == nil {
					pubs[p.ID] = p
				}
			}
			return errs, pubs
		}
		var wg sync.WaitGroup
		var oldErrs, newErrs, otherErrs map[Key][]error
		var newPubs map[string]Publication
		wg.Go(func() { oldErrs, _ = holder(Fence{Scope: "p1", Value: 1}, "m") })
		wg.Go(func() { newErrs, newPubs = holder(Fence{Scope: "p1", Value: 2, Takeover: true}, "m") })
		wg.Go(func() { otherErrs, _ = holder(Fence{Scope: "p2", Value: 1, Takeover: true}, "q") })
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
				case err != nil && !errors.Is(err, ErrStaleFence):
					t.Fatalf("old holder's publication %d on %v: %v", i, k, err)
				case stale && err == nil:
					t.Fatalf("old holder's publication %d on %v accepted after a refusal", i, k)
				}
				stale = stale || err != nil
			}
		}
		for j, k := range keys {
			hist := history(t, b, k)
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
				if !slices.ContainsFunc(hist, func(h Publication) bool { return h.ID == p.ID && h.Position == p.Position }) {
					t.Fatalf("new holder's %+v is not in %v's history", p, k)
				}
			}
			if len(hist) != n {
				t.Fatalf("%v holds %d publications, want %d", k, len(hist), n)
			}
			if got := deliveredUpTo(t, b, rec, k); !slices.Equal(got, ids(hist)) {
				t.Fatalf("%v fanned out %v, history %v", k, got, ids(hist))
			}
		}
	})
}
