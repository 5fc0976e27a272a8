package gateway

import (
	"fmt"
	"testing"

	"github.com/heraldgw/herald/fanout"
)

// TestResyncFillsLostPublications: when the broker reports that
// publications of a channel may have been lost on their way to this node,
// the stream recovers them from history in order, or ends with
// insufficient_state when the history cannot fill the gap.
func TestResyncFillsLostPublications(t *testing.T) {
	e := newEnv(t, envOptions{history: 5})
	tok := e.token("acme", "u1", "orders/*")
	s := e.stream(tok, "orders/1", "orders/2")
	key := fanout.Key{Tenant: "acme", Channel: "orders/1"}

	e.publish("acme", "orders/1", `1`)
	s.publication(t)

	e.broker.Stop() // detaches the hub: what follows is "lost in transit"
	e.publish("acme", "orders/1", `2`)
	e.publish("acme", "orders/1", `3`)
	e.hub.HandleResync(key)
	for i := 2; i <= 3; i++ {
		if _, p := s.publication(t); p.Offset != uint64(i) {
			t.Fatalf("offset %d, want %d", p.Offset, i)
		}
	}
	for i := 4; i <= 10; i++ { // 4..10: history keeps 6..10, so 4 and 5 are gone
		e.publish("acme", "orders/1", fmt.Sprint(i))
	}
	e.hub.HandleResync(key)
	d := s.control(t, "disconnect")
	if d.Reason != "insufficient_state" || !d.Reconnect {
		t.Fatalf("disconnect = %+v", d)
	}
	s.waitEOF(t)
}
