package ws_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/subscriptions"
)

// gateAuthorizer wraps an authorizer: a channel under "slow/" waits for
// release (or the request's end), one under "fail/" fails.
type gateAuthorizer struct {
	authorizer
	release chan struct{}
	waiting atomic.Int32
}

func newGateAuthorizer() *gateAuthorizer {
	return &gateAuthorizer{release: make(chan struct{})}
}

// wrap makes a wrap inner (envOptions.authz).
func (a *gateAuthorizer) wrap(inner authorizer) authorizer {
	a.authorizer = inner
	return a
}

func (a *gateAuthorizer) Authorize(ctx context.Context, r subscriptions.Request) (subscriptions.Decision, error) {
	switch {
	case strings.HasPrefix(r.Channel, "slow/"):
		a.waiting.Add(1)
		select {
		case <-a.release:
		case <-ctx.Done():
			return subscriptions.Decision{}, ctx.Err()
		}
	case strings.HasPrefix(r.Channel, "fail/"):
		return subscriptions.Decision{}, errors.New("authorizer down")
	}
	return a.authorizer.Authorize(ctx, r)
}

// TestWSErrorReplies: every malformed or refused request gets its typed
// error reply and the connection stays healthy.
func TestWSErrorReplies(t *testing.T) {
	authz := newGateAuthorizer()
	e := newEnv(t, envOptions{authz: authz.wrap})
	c := e.connected("orders/*", "fail/*")

	noID := map[string]string{
		`{not json`:                           ws.CodeBadRequest,
		`[1,2]`:                               ws.CodeBadRequest,
		`"ping"`:                              ws.CodeBadRequest,
		`{"op":"ping"}`:                       ws.CodeBadRequest,
		`{"id":-1,"op":"ping"}`:               ws.CodeBadRequest,
		`{"id":"x","op":"ping"}`:              ws.CodeBadRequest,
		`{"id":1.5,"op":"ping"}`:              ws.CodeBadRequest,
		`{"id":0,"op":"subscribe"}`:           ws.CodeBadRequest,
		`{"op":"ping","id":3}garbage`:         ws.CodeBadRequest,
		`{"id":9007199254740992,"op":"ping"}`: ws.CodeBadRequest,
		`{"id":18446744073709551615,"op":"subscribe","channel":"orders/1"}`: ws.CodeBadRequest,
	}
	for frame, code := range noID {
		c.SendFrame(frame)
		f := c.NextFrame(5 * time.Second)
		if f.Push != "" || f.ID != 0 || f.Error == nil || f.Error.Code != code || f.Error.Message == "" ||
			strings.Contains(f.Raw, `"id"`) {
			t.Fatalf("%s: got %s, want a %s error without id", frame, f.Raw, code)
		}
	}
	withID := map[string]string{
		`{"id":5,"op":"dance"}`:                     ws.CodeNotFound,
		`{"id":6}`:                                  ws.CodeBadRequest,
		`{"id":7,"op":"subscribe"}`:                 ws.CodeBadRequest,
		`{"id":8,"op":"subscribe","channel":"a b"}`: ws.CodeBadRequest,
		`{"id":9,"op":"subscribe","channel":7}`:     ws.CodeBadRequest,
		`{"id":10,"op":"subscribe","channel":"orders/1","since":{"offset":1}}`:                 ws.CodeBadRequest,
		`{"id":11,"op":"unsubscribe","channel":"orders/1"}`:                                    ws.CodeNotSubscribed,
		`{"id":12,"op":"subscribe","channel":"secret/1"}`:                                      ws.CodeForbidden,
		`{"id":13,"op":"connect","token":"x"}`:                                                 ws.CodeBadRequest,
		`{"id":14,"op":"subscribe","channel":"fail/1"}`:                                        ws.CodeServerError,
		`{"id":15,"op":"refresh"}`:                                                             ws.CodeBadRequest,
		`{"id":16,"op":"publish","channel":"orders/1","type":"t","schema_version":1,"data":1}`: ws.CodeForbidden,
	}
	for frame, code := range withID {
		c.SendFrame(frame)
		f := c.NextFrame(5 * time.Second)
		if f.Push != "" || f.ID == 0 || !strings.Contains(frame, `"id":`+itoa(f.ID)) {
			t.Fatalf("%s: got %s, want the reply to its id", frame, f.Raw)
		}
		if f.Error == nil || f.Error.Code != code || f.Error.Message == "" || f.Error.Temporary != ws.ErrorCodes[code] {
			t.Fatalf("%s: got %s, want error %s", frame, f.Raw, code)
		}
	}
	c.Subscribe("orders/1", nil)
	c.Fails(c.Request(ws.OpSubscribe, map[string]any{"channel": "orders/1"}), ws.CodeAlreadySubscribed)
	// Unknown fields are ignored.
	c.OK(c.Request(ws.OpPing, map[string]any{"future": []int{1, 2}}), nil)

	// Still healthy: it receives what is published.
	pub := e.publish("acme", "orders/1", `1`)
	if p := c.Pub(); p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}
	if n := testenv.MetricValue(t, e.requests.WithLabelValues("invalid", ws.CodeBadRequest)); n < 1 {
		t.Fatalf("herald_ws_requests_total{invalid,bad_request} = %v", n)
	}
}

func itoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// TestWSTooManyRequests: requests beyond MaxInflight are answered
// too_many_requests at once; the running ones complete and the connection
// goes on.
func TestWSTooManyRequests(t *testing.T) {
	authz := newGateAuthorizer()
	e := newEnv(t, envOptions{bounds: session.Bounds{MaxInflight: 2}, authz: authz.wrap})
	c := e.connected("slow/*", "orders/*")
	a := c.Request(ws.OpSubscribe, map[string]any{"channel": "slow/1"})
	b := c.Request(ws.OpSubscribe, map[string]any{"channel": "slow/2"})
	eventually(t, 5*time.Second, "two requests in flight", func() bool { return authz.waiting.Load() == 2 })
	over := c.Request(ws.OpSubscribe, map[string]any{"channel": "orders/1"})
	c.Fails(over, ws.CodeTooManyRequests)
	// Cheap requests are not invocations: ping still answers.
	c.OK(c.Request(ws.OpPing, nil), nil)
	close(authz.release)
	got := map[uint64]bool{}
	for range 2 {
		f := c.NextFrame(5 * time.Second)
		if f.Error != nil {
			t.Fatalf("in-flight request failed: %s", f.Raw)
		}
		got[f.ID] = true
	}
	if !got[a] || !got[b] {
		t.Fatalf("replies %v, want %d and %d", got, a, b)
	}
	c.Subscribe("orders/1", nil)
	if n := testenv.MetricValue(t, e.limits.WithLabelValues(session.LimitInflight)); n != 1 {
		t.Fatalf("herald_limit_rejections_total{inflight} = %v", n)
	}
}

// TestWSTooManySubscriptions: subscriptions beyond MaxSubscriptions are
// refused; unsubscribing makes room.
func TestWSTooManySubscriptions(t *testing.T) {
	e := newEnv(t, envOptions{bounds: session.Bounds{MaxSubscriptions: 2}})
	c := e.connected("orders/*")
	c.Subscribe("orders/1", nil)
	c.Subscribe("orders/2", nil)
	c.Fails(c.Request(ws.OpSubscribe, map[string]any{"channel": "orders/3"}), ws.CodeTooManySubscriptions)
	c.OK(c.Request(ws.OpUnsubscribe, map[string]any{"channel": "orders/1"}), nil)
	c.Subscribe("orders/3", nil)
	pub := e.publish("acme", "orders/3", `3`)
	if p := c.Pub(); p.Offset != pub.Offset || p.Key.Channel != "orders/3" {
		t.Fatalf("got %+v", p)
	}
	if n := testenv.MetricValue(t, e.limits.WithLabelValues(session.LimitSubscriptions)); n != 1 {
		t.Fatalf("herald_limit_rejections_total{subscriptions} = %v", n)
	}
}

// TestWSUnsubscribeWhileSubscribing: a subscription still being made
// cannot be ended yet.
func TestWSUnsubscribeWhileSubscribing(t *testing.T) {
	authz := newGateAuthorizer()
	e := newEnv(t, envOptions{authz: authz.wrap})
	c := e.connected("slow/*")
	id := c.Request(ws.OpSubscribe, map[string]any{"channel": "slow/1"})
	eventually(t, 5*time.Second, "the subscribe to be authorizing", func() bool { return authz.waiting.Load() == 1 })
	msg := c.Fails(c.Request(ws.OpUnsubscribe, map[string]any{"channel": "slow/1"}), ws.CodeNotSubscribed).Message
	if !strings.Contains(msg, "wait for its reply") {
		t.Fatalf("message %q", msg)
	}
	c.Fails(c.Request(ws.OpSubscribe, map[string]any{"channel": "slow/1"}), ws.CodeAlreadySubscribed)
	close(authz.release)
	c.OK(id, nil)
	c.OK(c.Request(ws.OpUnsubscribe, map[string]any{"channel": "slow/1"}), nil)
}

// TestWSDuplicateInflightID: while a request is in flight (a subscribe
// waiting for the authorization webhook), another request with its id is
// refused with duplicate_id, whatever its op; the first one still gets its
// own reply, after which the id may be used again.
func TestWSDuplicateInflightID(t *testing.T) {
	t.Parallel()
	called, release := make(chan struct{}, 1), make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		called <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"allow": true, "ttl_seconds": 60})
	}))
	t.Cleanup(hook.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	e := newEnv(t, envOptions{authz: webhook(t, hook.URL, time.Minute)})
	c := e.connected("orders/*")

	id := c.Request(ws.OpSubscribe, map[string]any{"channel": "docs/1"})
	<-called
	c.SendFrame(map[string]any{"id": id, "op": ws.OpPing})
	if msg := c.Fails(id, ws.CodeDuplicateID).Message; !strings.Contains(msg, "in flight") {
		t.Fatalf("message %q", msg)
	}
	c.SendFrame(map[string]any{"id": id, "op": ws.OpSubscribe, "channel": "orders/1"})
	c.Fails(id, ws.CodeDuplicateID)

	close(release)
	var res ws.SubscribeResult
	c.OK(id, &res)
	if res.Channel != "docs/1" {
		t.Fatalf("reply to %d is for %q, want docs/1", id, res.Channel)
	}
	c.SendFrame(map[string]any{"id": id, "op": ws.OpPing})
	c.OK(id, nil)
	if n := testenv.MetricValue(t, e.requests.WithLabelValues(ws.OpSubscribe, ws.CodeDuplicateID)); n != 1 {
		t.Fatalf("herald_ws_requests_total{subscribe,duplicate_id} = %v", n)
	}
}

// webhook returns an authorizer option: grants, then the authorization
// webhook at url, answering within timeout.
func webhook(t *testing.T, url string, timeout time.Duration) func(authorizer) authorizer {
	authz, err := subscriptions.NewAuthorizer(subscriptions.Config{WebhookURL: url, WebhookTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return func(authorizer) authorizer { return authz }
}
