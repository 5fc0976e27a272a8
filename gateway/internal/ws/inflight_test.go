package ws_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/subscriptions"
)

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
	if n := e.counter(e.requests.WithLabelValues(ws.OpSubscribe, ws.CodeDuplicateID)); n != 1 {
		t.Fatalf("herald_ws_requests_total{subscribe,duplicate_id} = %v", n)
	}
}

// webhook returns an authorizer option: grants, subscription tokens, then
// the authorization webhook at url, answering within timeout.
func webhook(t *testing.T, url string, timeout time.Duration) func(authorizer) authorizer {
	t.Helper()
	verifier, err := auth.NewVerifier(auth.Config{HMACSecret: testSecret, Leeway: -1})
	if err != nil {
		t.Fatal(err)
	}
	authz, err := subscriptions.NewAuthorizer(subscriptions.Config{
		SubTokens: verifier, WebhookURL: url, WebhookTimeout: timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	return func(authorizer) authorizer { return authz }
}
