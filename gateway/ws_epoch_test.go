package gateway

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// This test drives a whole server: the catch-up of a laggard through the
// server's handler on small socket buffers (shared with the server's
// other laggard tests, SSE's too), watched through the server's metrics.

// TestWSEpochChangeWhileCatchingUp: one channel idles past the history
// TTL while another floods a client that stopped reading. The idle
// channel's next publications start a new epoch; the first is dropped
// from the full queue, the second and third are queued. When the client
// reads again it gets the new epoch from its first publication, in
// order: never offset 2 without 1, which would leave a gap no one tells
// it of, and a position from which a resume reports recovered: true.
func TestWSEpochChangeWhileCatchingUp(t *testing.T) {
	const (
		ttl      = 3 * time.Second
		maxBytes = 32 << 10
		maxMsgs  = 8 // catching up reads pages of 4
	)
	e := newEnv(t, envOptions{history: 10000, historyTTL: ttl, cfg: Config{
		QueueMaxBytes: maxBytes, QueueMaxMessages: maxMsgs, ConnectAttemptsPerIP: -1,
		HeartbeatInterval: time.Hour, ClientTimeout: 2 * time.Hour, WriteTimeout: time.Hour,
	}})
	c := dialSlow(t, e, smallBufferServer(t, e), wstest.DialOpts{}, "rooms/*")
	c.Subscribe("rooms/a", nil)
	c.Subscribe("rooms/b", nil)
	a := fanout.Key{Tenant: "acme", Channel: "rooms/a"}
	e.publish("acme", "rooms/a", `"first"`)
	first := c.Pub()

	// The client stops reading; rooms/b floods it with 8 KB publications
	// until its queue overflowed: the writer is stuck in a write.
	c.Stall()
	big := `"` + strings.Repeat("x", 8<<10) + `"`
	dropped := e.counter(e.srv.metrics.queueDropped)
	for n := 0; e.counter(e.srv.metrics.queueDropped) == dropped; n++ {
		if n > 10000 {
			t.Fatal("the queue never overflowed")
		}
		e.publish("acme", "rooms/b", big)
	}
	// rooms/a idles past the TTL (its history starts over once the broker
	// next looks at it) while rooms/b goes on.
	polls := 0
	eventually(t, time.Minute, "rooms/a to expire", func() bool {
		if polls++; polls%20 == 0 {
			e.publish("acme", "rooms/b", big)
		}
		rec, err := e.broker.Recover(context.Background(), a, fanout.Position{Offset: first.Offset, Epoch: first.Epoch}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return !rec.Recovered
	})
	// rooms/a's new epoch: its first publication overflows the queue (it
	// is bigger than the queue's bound) and is dropped with it; the next
	// ones are queued.
	a1 := e.publish("acme", "rooms/a", `"`+strings.Repeat("y", maxBytes)+`"`)
	a2 := e.publish("acme", "rooms/a", `"2"`)
	a3 := e.publish("acme", "rooms/a", `"3"`)
	if a1.Epoch == first.Epoch || a1.Offset != 1 || a3.Offset != 3 {
		t.Fatalf("rooms/a published at %+v, want offset 1 of an epoch other than %q", a1.Position, first.Epoch)
	}

	// The client reads again, until it has rooms/a's new epoch (rooms/b's
	// catching up may go on). Per channel, each publication follows the
	// one before: the next offset, or offset 1 of a new epoch.
	c.Resume()
	got := map[string][]fanout.Position{"rooms/a": {{Offset: first.Offset, Epoch: first.Epoch}}}
	last := func(ch string) fanout.Position {
		if l := got[ch]; len(l) > 0 {
			return l[len(l)-1]
		}
		return fanout.Position{}
	}
	for last("rooms/a") != a3.Position {
		f := c.NextFrame(30 * time.Second)
		switch {
		case f.Push == "disconnect":
			// Told: a resume would report recovered: false. Only a
			// machine too slow to catch up within the TTL gets here.
			t.Logf("disconnected (%s) after %v", f.Ctl.Reason, got)
			if f.Ctl.Reason != "slow" {
				t.Fatalf("disconnect %+v", f.Ctl)
			}
			return
		case f.Push != "pub":
			t.Fatalf("unexpected frame %s", f.Raw)
		}
		p := fanout.Position{Offset: f.Pub.Offset, Epoch: f.Pub.Epoch}
		if prev := last(f.Pub.Key.Channel); !follows(p, prev) {
			t.Fatalf("%s: %+v after %+v: a gap or a repeat (received %v)", f.Pub.Key.Channel, p, prev, got)
		}
		got[f.Pub.Key.Channel] = append(got[f.Pub.Key.Channel], p)
	}
	want := []fanout.Position{{Offset: first.Offset, Epoch: first.Epoch}, a1.Position, a2.Position, a3.Position}
	if !slices.Equal(got["rooms/a"], want) {
		t.Fatalf("rooms/a got %v, want %v", got["rooms/a"], want)
	}

}

// follows reports whether a client that received prev (zero: nothing) of
// a channel may receive p next: the next offset of the same epoch, or the
// first publication of a new one.
func follows(p, prev fanout.Position) bool {
	if p.Epoch != prev.Epoch {
		return p.Offset == 1
	}
	return p.Offset == prev.Offset+1
}
