package ws_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/internal/testenv"
)

// TestWSCloseCodeTable: every Reason has a close code in the range that
// says what the client does, and no two reasons share one.
func TestWSCloseCodeTable(t *testing.T) {
	seen := map[websocket.StatusCode]string{}
	for _, r := range session.Reasons {
		code := session.CloseCode(r)
		switch {
		case r.Code == session.ReasonTokenExpired.Code:
			if code < 4100 || code > 4199 {
				t.Errorf("%s: code %d, want 4100–4199 (refresh the token, then reconnect)", r.Code, code)
			}
		case r.Reconnect:
			if code < 4000 || code > 4099 {
				t.Errorf("%s: code %d, want 4000–4099 (reconnect)", r.Code, code)
			}
		default:
			if code < 4500 || code > 4599 {
				t.Errorf("%s: code %d, want 4500–4599 (do not reconnect)", r.Code, code)
			}
		}
		if other, dup := seen[code]; dup {
			t.Errorf("%s and %s share close code %d", r.Code, other, code)
		}
		seen[code] = r.Code
	}
	if got := session.CloseCode(session.Reason{Code: "future_retry", Reconnect: true}); got != session.CloseReconnect {
		t.Errorf("unknown reconnecting reason: %d", got)
	}
	if got := session.CloseCode(session.Reason{Code: "future_final"}); got != session.CloseNoReconnect {
		t.Errorf("unknown final reason: %d", got)
	}
}

// TestWSOversizePublicationFromHistory: a publication larger than the
// whole queue bound cannot be queued; the connection reads it from the
// history instead and stays open.
func TestWSOversizePublicationFromHistory(t *testing.T) {
	e := newEnv(t, envOptions{bounds: session.Bounds{QueueMaxBytes: 1024}})
	c := e.connected("orders/*")
	c.Subscribe("orders/1", nil)
	big := `"` + strings.Repeat("x", 2048) + `"`
	e.publish("acme", "orders/1", big) // larger than the whole queue
	e.publish("acme", "orders/1", `"small"`)
	if p := c.Pub(); p.Offset != 1 || string(p.Data) != big {
		t.Fatalf("first publication: offset %d, %d bytes", p.Offset, len(p.Data))
	}
	if p := c.Pub(); p.Offset != 2 || string(p.Data) != `"small"` {
		t.Fatalf("second publication: %+v", p)
	}
	if n := testenv.MetricValue(t, e.env.Counters.CatchUps.WithLabelValues("ws")); n != 1 {
		t.Fatalf("herald_catch_ups_total{ws} = %v, want 1", n)
	}
	if n := e.closedFor("slow"); n != 0 {
		t.Fatalf("%v slow disconnects", n)
	}
}

// failingRecoverer fails Recover while fail is set.
type failingRecoverer struct {
	session.History
	fail atomic.Bool
}

func (f *failingRecoverer) Recover(ctx context.Context, key fanout.Key, since fanout.Position, limit int) (fanout.Recovery, error) {
	if f.fail.Load() {
		return fanout.Recovery{}, errors.New("history unavailable")
	}
	return f.History.Recover(ctx, key, since, limit)
}

// TestWSResync: publications lost on their way to this node are recovered
// in order; a gap the history cannot fill closes with insufficient_state
// (4003); a history that does not answer closes with server_error (4002).
func TestWSResync(t *testing.T) {
	var rec *failingRecoverer
	e := newEnv(t, envOptions{history: 5, recoverer: func(r session.History) session.History {
		rec = &failingRecoverer{History: r}
		return rec
	}})
	key := fanout.Key{Tenant: "acme", Channel: "orders/1"}
	c := e.connected("orders/*")
	c.Subscribe("orders/1", nil)
	// A subscribe whose history does not answer fails with server_error.
	rec.fail.Store(true)
	c.Fails(c.Request(ws.OpSubscribe, map[string]any{"channel": "orders/2"}), ws.CodeServerError)
	rec.fail.Store(false)
	c.Subscribe("orders/2", nil)

	e.publish("acme", "orders/1", `1`)
	c.Pub()
	e.broker.Stop() // detaches the hub: what follows is lost in transit
	e.publish("acme", "orders/1", `2`)
	e.publish("acme", "orders/1", `3`)
	e.hub.HandleResync(key)
	for i := 2; i <= 3; i++ {
		if p := c.Pub(); p.Offset != uint64(i) {
			t.Fatalf("offset %d, want %d", p.Offset, i)
		}
	}
	for i := 4; i <= 10; i++ {
		e.publish("acme", "orders/1", itoa(uint64(i)))
	}
	e.hub.HandleResync(key)
	d := c.ClosedWith("insufficient_state", session.CloseInsufficientState)
	if !d.Reconnect {
		t.Fatalf("disconnect %+v", d)
	}

	c = e.connected("orders/*")
	c.Subscribe("orders/1", nil)
	rec.fail.Store(true)
	e.hub.HandleResync(key)
	c.ClosedWith("server_error", session.CloseServerError)
}

// TestWSProtocolViolations: binary and non-UTF-8 messages close with
// protocol_error (4504); the server stays healthy.
func TestWSProtocolViolations(t *testing.T) {
	e := newEnv(t, envOptions{})
	for name, send := range map[string]func(c *wstest.Client) error{
		"binary": func(c *wstest.Client) error {
			return c.Conn.Write(context.Background(), websocket.MessageBinary, []byte(`{"id":1,"op":"ping"}`))
		},
		"invalid utf-8": func(c *wstest.Client) error {
			return c.Conn.Write(context.Background(), websocket.MessageText, []byte("{\"id\":1,\"op\":\"ping\",\"x\":\"\xff\xfe\"}"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := e.connected("orders/*")
			if err := send(c); err != nil {
				t.Fatal(err)
			}
			d := c.ClosedWith("protocol_error", session.CloseProtocolError)
			if d.Reconnect || d.Message == "" {
				t.Fatalf("disconnect %+v", d)
			}
		})
	}
	c := e.connected("orders/*")
	c.Subscribe("orders/1", nil)
	eventually(t, 5*time.Second, "two protocol_error disconnects", func() bool {
		return e.closedFor("protocol_error") == 2
	})
}
