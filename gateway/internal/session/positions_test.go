package session

import (
	"fmt"
	"testing"

	"github.com/heraldgw/herald/fanout"
)

// TestPositionsAcrossTheIndex: positions are found, removed and added
// again the same whether a connection holds a few channels (scanned) or
// more than indexFrom (indexed), and across the change from one to the
// other.
func TestPositionsAcrossTheIndex(t *testing.T) {
	const n = 3 * indexFrom
	ps := NewPositions("acme", 1)
	key := func(i int) fanout.Key { return fanout.Key{Tenant: "acme", Channel: fmt.Sprintf("c/%d", i)} }
	check := func(tracked func(i int) bool) {
		t.Helper()
		for i := range n {
			p := ps.Of(key(i))
			switch {
			case tracked(i) && (p == nil || p.Offset != uint64(i)):
				t.Fatalf("channel %d: position %v, want offset %d", i, p, i)
			case !tracked(i) && p != nil:
				t.Fatalf("channel %d: position %v, want none", i, p)
			}
		}
	}
	for i := range n {
		if !ps.Add(key(i).Channel, fanout.Position{Offset: uint64(i), Epoch: "e"}) {
			t.Fatalf("channel %d: added twice", i)
		}
		if ps.Add(key(i).Channel, fanout.Position{}) {
			t.Fatalf("channel %d: added again", i)
		}
		check(func(j int) bool { return j <= i })
	}
	if ps.Of(fanout.Key{Tenant: "other", Channel: "c/1"}) != nil {
		t.Fatal("another tenant's channel is tracked")
	}
	for i := 0; i < n; i += 2 {
		ps.Remove(key(i).Channel)
	}
	check(func(j int) bool { return j%2 == 1 })
	for i := 0; i < n; i += 2 {
		ps.Add(key(i).Channel, fanout.Position{Offset: uint64(i), Epoch: "e"})
	}
	check(func(int) bool { return true })

	small := NewPositions("acme", 1)
	small.Add("a", fanout.Position{Offset: 1})
	small.Add("b", fanout.Position{Offset: 2})
	small.Remove("a")
	if p := small.Of(fanout.Key{Tenant: "acme", Channel: "b"}); p == nil || p.Offset != 2 || small.index != nil {
		t.Fatalf("b at %v, index %v", p, small.index)
	}
}
