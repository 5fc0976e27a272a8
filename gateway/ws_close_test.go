package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// These tests drive a whole server: connect refusals are the server's
// admission (the token's verification, expiry and revocation, counted in
// its metrics), and a graceful shutdown is Server.Stop. The transport's
// own close behaviour is tested in internal/ws.

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
