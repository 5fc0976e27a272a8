package ws_test

import (
	"context"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/subscriptions"
)

// slowAuthorizer delays the decision for one channel, to hold a subscribe
// in authorization while the client refreshes its token.
type slowAuthorizer struct {
	inner   authorizer
	channel string
	delay   time.Duration
	entered chan struct{} // receives once per delayed decision
}

func (a slowAuthorizer) Authorize(ctx context.Context, r subscriptions.Request) (subscriptions.Decision, error) {
	if r.Channel == a.channel {
		select {
		case a.entered <- struct{}{}:
		default:
		}
		select {
		case <-time.After(a.delay):
		case <-ctx.Done():
			return subscriptions.Decision{}, ctx.Err()
		}
	}
	return a.inner.Authorize(ctx, r)
}

// TestWSRefreshDuringSubscribe: a token refreshed while a subscribe is being
// authorized decides that subscribe; the old token's grant does not carry
// over to a subscription that would then never be checked again.
func TestWSRefreshDuringSubscribe(t *testing.T) {
	entered := make(chan struct{}, 1)
	e := newEnv(t, envOptions{authz: func(a authorizer) authorizer {
		return slowAuthorizer{inner: a, channel: "secret/x", delay: 300 * time.Millisecond, entered: entered}
	}})
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(e.wsToken("u1", []string{"secret/**", "orders/*"}, nil))
	sub := c.Request(ws.OpSubscribe, map[string]any{"channel": "secret/x"})
	select {
	case <-entered: // the subscribe is being decided with the old token
	case <-time.After(5 * time.Second):
		t.Fatal("subscribe never reached the authorizer")
	}
	ref := c.Request(ws.OpRefresh, map[string]any{"token": e.wsToken("u1", []string{"orders/*"}, nil)})
	c.OK(ref, nil)
	c.Fails(sub, ws.CodeForbidden)
}
