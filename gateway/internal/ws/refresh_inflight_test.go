package ws_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/subscriptions"
)

// heldRecoverer holds the first Recover of one channel until released,
// keeping the connection's writer busy in that subscription.
type heldRecoverer struct {
	session.History
	channel string
	entered chan struct{} // closed when the held Recover began
	release chan struct{} // closed by the test
	once    sync.Once
}

func (h *heldRecoverer) Recover(ctx context.Context, key fanout.Key, since fanout.Position, limit int) (fanout.Recovery, error) {
	if key.Channel == h.channel {
		held := false
		h.once.Do(func() { held = true })
		if held {
			close(h.entered)
			select {
			case <-h.release:
			case <-ctx.Done():
				return fanout.Recovery{}, ctx.Err()
			}
		}
	}
	return h.History.Recover(ctx, key, since, limit)
}

// decisionLog records every authorization decision made: the channel
// and the grants of the token it was decided with.
type decisionLog struct {
	inner authorizer
	mu    sync.Mutex
	log   []string
}

func (a *decisionLog) Authorize(ctx context.Context, r subscriptions.Request) (subscriptions.Decision, error) {
	d, err := a.inner.Authorize(ctx, r)
	a.mu.Lock()
	a.log = append(a.log, r.Channel+" with "+strings.Join(r.Claims.Subscribe, ","))
	a.mu.Unlock()
	return d, err
}

func (a *decisionLog) decided(entry string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Contains(a.log, entry)
}

// TestWSRefreshCoversSubscriptionsInFlight: a client allowed rooms/*
// and subscribed to rooms/b has its writer busy making another
// subscription (rooms/x, whose history is slow to answer) when it asks
// for rooms/s, which is allowed and handed to the writer; it then
// refreshes to a token granting rooms/b only. Neither rooms/x nor rooms/s
// may be made under the new token: both subscribe requests are refused
// as forbidden, and no publication of either follows, as a new
// connection with that token is refused them.
func TestWSRefreshCoversSubscriptionsInFlight(t *testing.T) {
	for attempt := 1; ; attempt++ {
		if refreshInFlight(t) {
			return
		}
		// The subscribe of rooms/s was decided again on the request's
		// side, after the refresh: the writer's check was not reached.
		if attempt == 5 {
			t.Fatal("the subscribe of rooms/s never reached the writer before the refresh")
		}
		t.Logf("attempt %d: the refresh landed before the subscribe was handed to the writer; again", attempt)
	}
}

// refreshInFlight runs the scenario once; it reports false when the
// refresh landed before the subscribe of rooms/s was handed to the
// writer, so that the case was not exercised.
func refreshInFlight(t *testing.T) bool {
	held := &heldRecoverer{channel: "rooms/x", entered: make(chan struct{}), release: make(chan struct{})}
	decisions := &decisionLog{}
	e := newEnv(t, envOptions{
		recoverer: func(r session.History) session.History {
			held.History = r
			return held
		},
		authz: func(a authorizer) authorizer {
			decisions.inner = a
			return decisions
		},
	})
	released := false
	defer func() {
		if !released {
			close(held.release)
		}
	}()
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(e.wsToken("u1", []string{"rooms/*"}, nil))
	c.Subscribe("rooms/b", nil)

	subX := c.Request(ws.OpSubscribe, map[string]any{"channel": "rooms/x"})
	select {
	case <-held.entered: // the writer is busy making rooms/x
	case <-time.After(time.Minute):
		t.Fatal("the subscribe of rooms/x never reached the history")
	}
	subS := c.Request(ws.OpSubscribe, map[string]any{"channel": "rooms/s"})
	eventually(t, time.Minute, "rooms/s to be allowed", func() bool { return decisions.decided("rooms/s with rooms/*") })
	ref := c.Request(ws.OpRefresh, map[string]any{"token": e.wsToken("u1", []string{"rooms/b"}, nil)})
	// The refresh re-checks the subscriptions made (rooms/b) once the new
	// token is current.
	eventually(t, time.Minute, "the refresh to re-check rooms/b", func() bool { return decisions.decided("rooms/b with rooms/b") })
	if decisions.decided("rooms/s with rooms/b") {
		return false
	}

	close(held.release)
	released = true
	var problems []string
	for _, r := range []struct {
		id uint64
		ch string
	}{{subX, "rooms/x"}, {subS, "rooms/s"}} {
		if f := c.Reply(r.id); f.Error == nil || f.Error.Code != ws.CodeForbidden {
			problems = append(problems, "subscribe "+r.ch+" answered "+f.Raw)
		}
	}
	c.OK(ref, nil)
	e.publish("acme", "rooms/s", `"s"`)
	e.publish("acme", "rooms/x", `"x"`)
	e.publish("acme", "rooms/b", `"b"`)
	for p := c.Pub(); p.Channel != "rooms/b"; p = c.Pub() {
		problems = append(problems, "received a publication of "+p.Channel)
	}
	if len(problems) > 0 {
		t.Fatalf("after the refresh to a token granting rooms/b only:\n%s", strings.Join(problems, "\n"))
	}
	// A new connection with the new token is refused the same channels.
	c2 := e.dialWS(wstest.DialOpts{})
	c2.Connect(e.wsToken("u1", []string{"rooms/b"}, nil))
	for _, ch := range []string{"rooms/s", "rooms/x"} {
		c2.Fails(c2.Request(ws.OpSubscribe, map[string]any{"channel": ch}), ws.CodeForbidden)
	}
	return true
}
