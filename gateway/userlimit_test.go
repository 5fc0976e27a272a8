package gateway

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// TestMaxConnectionsPerUser: a user's connections beyond the bound are
// refused (SSE: 429; WebSocket: 429 before the upgrade when the upgrade
// carries the token, else an error reply and close code 4006); other
// users are not affected; a closed connection frees its slot.
func TestMaxConnectionsPerUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{MaxConnectionsPerUser: 2, ConnectAttemptsPerIP: -1}})
	tok := e.token("acme", "u1", "orders/*")
	first := e.stream(tok, "orders/1")
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(tok)

	e.refused(request{query: q("channel", "orders/2"), bearer: tok}, 429, "too_many_connections")
	_, resp, err := e.tryDialWS(wstest.DialOpts{Header: http.Header{"Authorization": {"Bearer " + tok}}})
	if err == nil || resp == nil || resp.StatusCode != 429 {
		t.Fatalf("WebSocket with the token in the upgrade: %v %v", resp, err)
	}
	late := e.dialWS(wstest.DialOpts{})
	late.Fails(late.Request(ws.OpConnect, map[string]any{"token": tok}), ws.CodeTooManyConnections)
	late.ClosedWith("too_many_connections", session.CloseTooManyConnections)

	// The same subject in another tenant is another user.
	e.stream(e.token("globex", "u1", "orders/*"), "orders/1")
	e.stream(e.token("acme", "u2", "orders/*"), "orders/1")

	first.close()
	eventually(t, 5*time.Second, "the slot to be freed", func() bool {
		resp, cancel := e.do(request{path: "/v1/sse", query: url.Values{"channel": {"orders/1"}}, bearer: tok})
		defer cancel()
		defer resp.Body.Close()
		return resp.StatusCode == 200
	})
	if n := e.counter(e.srv.metrics.limitRejections.WithLabelValues(limitUserConns)); n < 3 {
		t.Fatalf("herald_limit_rejections_total{connections_per_user} = %v", n)
	}
}
