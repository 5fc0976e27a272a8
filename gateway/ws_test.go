package gateway

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// These tests drive a whole server: what they check is the server's part
// of a WebSocket connection, its admission (the upgrade request's
// credentials, the verification, expiry and revocation of connect and
// refresh tokens), its counting, the broker it hands the transport and
// its graceful shutdown (Server.Stop). The transport's ops, bounds and
// closes are tested in internal/ws.

// TestWSConnectionCounted: a connection is counted open once its connect
// succeeded, and closed with its reason once it ended.
func TestWSConnectionCounted(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.connected("orders/*")
	if n := e.counter(e.srv.metrics.connections.WithLabelValues("ws")); n != 1 {
		t.Fatalf("herald_connections{ws} = %v", n)
	}
	c.Close()
	eventually(t, 5*time.Second, "the connection to be counted closed", func() bool {
		return e.counter(e.srv.metrics.disconnects.WithLabelValues("ws", "client_closed")) == 1
	})
}

func TestWSConnectUsesUpgradeCredentials(t *testing.T) {
	e := newEnv(t, envOptions{})
	tok := e.wsToken("u1", []string{"orders/*"}, nil)
	cases := map[string]wstest.DialOpts{
		"header": {Header: http.Header{"Authorization": {"Bearer " + tok}}},
		"cookie": {Header: http.Header{"Cookie": {DefaultCookieName + "=" + tok}}},
		"query":  {Query: "access_token=" + url.QueryEscape(tok)},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			c := e.dialWS(o)
			c.Connect("")
			c.Subscribe("orders/1", nil)
		})
	}
	// A token in the connect frame wins over the upgrade request's.
	c := e.dialWS(wstest.DialOpts{Header: http.Header{"Authorization": {"Bearer not-a-token"}}})
	c.Connect(tok)
	// A malformed Authorization header is reported at connect.
	c = e.dialWS(wstest.DialOpts{Header: http.Header{"Authorization": {"Basic abc"}}})
	if msg := c.Fails(c.Request(ws.OpConnect, nil), ws.CodeUnauthorized).Message; !strings.Contains(msg, "Bearer") {
		t.Fatalf("message %q", msg)
	}
	c.ClosedWith("unauthorized", session.CloseUnauthorized)
}

func TestWSPublishWithoutPublisher(t *testing.T) {
	e := newEnv(t, envOptions{deps: func(d *Deps) { d.Broker = recoverOnly{d.Broker} }})
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(e.wsToken("u1", nil, []string{"**"}))
	msg := c.Fails(c.Request(ws.OpPublish, map[string]any{
		"channel": "rooms/lobby", "type": "t", "schema_version": 1, "data": 1,
	}), ws.CodeForbidden).Message
	if !strings.Contains(msg, "not available") {
		t.Fatalf("message %q", msg)
	}
}

// recoverOnly hides a broker's Publish.
type recoverOnly struct{ Recoverer }

// TestWSRefresh: an in-band refresh is refused for another subject, an
// invalid or expired token, and otherwise replaces the connection's token
// and its grants. That the connection then outlives the old token is
// TestWSRefreshKeepsAlive's.
func TestWSRefresh(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.dialWS(wstest.DialOpts{})
	// Half of RefreshAhead (a minute) away: closer to its exp than
	// RefreshAhead, so the push follows the reply, and far enough that no
	// delay of a busy machine lets it run out during the test.
	oldExp := time.Now().Add(DefaultRefreshAhead / 2).Truncate(time.Second)
	c.Connect(e.mint("u1", oldExp, []string{"orders/*", "users/u1"}, nil))
	if p := wstest.RefreshPush(t, c.NextFrame(5*time.Second)); p.ExpiresAt != oldExp.Unix() {
		t.Fatalf("refresh push %+v", p)
	}
	c.Subscribe("orders/1", nil)
	c.Subscribe("users/u1", nil)

	// Another subject, an invalid token and an expired one are refused; the
	// connection keeps its token.
	c.Fails(c.Request(ws.OpRefresh, map[string]any{"token": e.wsToken("u2", []string{"**"}, nil)}), ws.CodeForbidden)
	c.Fails(c.Request(ws.OpRefresh, map[string]any{"token": "garbage"}), ws.CodeUnauthorized)
	c.Fails(c.Request(ws.OpRefresh, map[string]any{"token": e.mint("u1", time.Now().Add(-time.Minute), nil, nil)}), ws.CodeTokenExpired)
	c.Fails(c.Request(ws.OpRefresh, nil), ws.CodeBadRequest)

	// The new token keeps orders/* but drops users/u1: that subscription
	// ends with an unsubscribed push, the other goes on.
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	var res ws.RefreshResult
	c.OK(c.Request(ws.OpRefresh, map[string]any{"token": e.mint("u1", exp, []string{"orders/*"}, nil)}), &res)
	if res.ExpiresAt != exp.Unix() {
		t.Fatalf("refresh result %+v, want expires_at %d", res, exp.Unix())
	}
	f := c.NextFrame(5 * time.Second)
	if f.Push != "unsubscribed" || f.Ctl.Channel != "users/u1" || f.Ctl.Reason != "forbidden" ||
		f.Ctl.Resubscribe || f.Ctl.Message == "" {
		t.Fatalf("want an unsubscribed push for users/u1, got %s", f.Raw)
	}
	e.publish("acme", "users/u1", `1`)
	pub := e.publish("acme", "orders/1", `2`)
	if p := c.Pub(); p.Key.Channel != "orders/1" || p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}
	c.OK(c.Request(ws.OpPing, nil), nil)
	c.Fails(c.Request(ws.OpUnsubscribe, map[string]any{"channel": "users/u1"}), ws.CodeNotSubscribed)
}

func TestWSConnectRefusals(t *testing.T) {
	e := newEnv(t, envOptions{})
	t.Run("unauthorized", func(t *testing.T) {
		c := e.dialWS(wstest.DialOpts{})
		c.Fails(c.Request(ws.OpConnect, map[string]any{"token": "not-a-jwt"}), ws.CodeUnauthorized)
		d := c.ClosedWith("unauthorized", session.CloseUnauthorized)
		if d.Reconnect || d.Message == "" {
			t.Fatalf("disconnect %+v", d)
		}
	})
	t.Run("no token", func(t *testing.T) {
		c := e.dialWS(wstest.DialOpts{})
		c.Fails(c.Request(ws.OpConnect, nil), ws.CodeUnauthorized)
		c.ClosedWith("unauthorized", session.CloseUnauthorized)
	})
	t.Run("token expired", func(t *testing.T) {
		c := e.dialWS(wstest.DialOpts{})
		c.Fails(c.Request(ws.OpConnect, map[string]any{"token": e.mint("u1", time.Now().Add(-time.Minute), nil, nil)}), ws.CodeTokenExpired)
		d := c.ClosedWith("token_expired", session.CloseTokenExpired)
		if !d.Reconnect {
			t.Fatalf("disconnect %+v", d)
		}
	})
	t.Run("request before connect", func(t *testing.T) {
		c := e.dialWS(wstest.DialOpts{})
		c.OK(c.Request(ws.OpPing, nil), nil) // ping is fine before connect
		c.Request(ws.OpSubscribe, map[string]any{"channel": "orders/1"})
		d := c.ClosedWith("protocol_error", session.CloseProtocolError)
		if !strings.Contains(d.Message, "connect") {
			t.Fatalf("disconnect %+v", d)
		}
	})
	// The server is unharmed.
	c := e.connected("orders/*")
	c.Subscribe("orders/1", nil)
	if n := e.counter(e.srv.metrics.connections.WithLabelValues("ws")); n != 1 {
		t.Fatalf("herald_connections{ws} = %v", n)
	}
}

// TestWSGracefulShutdown: Stop tells every connection to reconnect after
// a jittered delay, then closes with 4000.
func TestWSGracefulShutdown(t *testing.T) {
	delay := 300 * time.Millisecond
	e := newEnv(t, envOptions{cfg: Config{ShutdownReconnectDelay: delay}})
	clients := []*wstest.Client{e.connected("orders/*"), e.connected("orders/*"), e.dialWS(wstest.DialOpts{})}
	clients[0].Subscribe("orders/1", nil)
	clients[1].Subscribe("orders/1", nil)
	e.srv.Stop()
	for i, c := range clients {
		d := c.ClosedWith("shutdown", session.CloseShutdown)
		if !d.Reconnect || d.DelayMS < 0 || d.DelayMS > delay.Milliseconds() {
			t.Fatalf("client %d: disconnect %+v, want reconnect within %s", i, d, delay)
		}
	}
	if n := e.counter(e.srv.metrics.disconnects.WithLabelValues("ws", "shutdown")); n != 2 {
		t.Fatalf("herald_disconnects_total{ws,shutdown} = %v (the unconnected one is not counted)", n)
	}
	if n := e.counter(e.srv.metrics.connections.WithLabelValues("ws")); n != 0 {
		t.Fatalf("herald_connections{ws} = %v after Stop", n)
	}
	if _, _, err := e.tryDialWS(wstest.DialOpts{}); err == nil {
		t.Fatal("the server still accepts WebSockets after Stop")
	}
}
