package ws_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/subscriptions"
)

func TestWSConnectSubscribeUnsubscribe(t *testing.T) {
	e := newEnv(t, envOptions{version: "1.2.3", bounds: session.Bounds{
		HeartbeatInterval: time.Hour, ClientTimeout: 2 * time.Hour, HistorySize: 100, HistoryTTL: 5 * time.Minute}})
	c := e.dialWS(wstest.DialOpts{})
	if got := c.Conn.Subprotocol(); got != ws.Protocol {
		t.Fatalf("negotiated subprotocol %q", got)
	}
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	before := time.Now()
	res := c.Connect(e.mint("u1", exp, []string{"orders/*"}, nil))
	after := time.Now()
	// The server's clock and the token's TTL by it, so a client need not
	// trust its own clock.
	if res.ServerTimeMS < before.UnixMilli() || res.ServerTimeMS > after.UnixMilli() ||
		res.ExpiresIn < int64(exp.Sub(after)/time.Second) || res.ExpiresIn > int64(exp.Sub(before)/time.Second) {
		t.Fatalf("connect result %+v: server_time_ms or expires_in off (connected between %d and %d ms)",
			res, before.UnixMilli(), after.UnixMilli())
	}
	want := ws.ConnectResult{
		Client: res.Client, Protocol: ws.Protocol, Version: "1.2.3", PingIntervalMS: 3600000, PongTimeoutMS: 3600000,
		ServerTimeMS: res.ServerTimeMS, ExpiresAt: exp.Unix(), ExpiresIn: res.ExpiresIn,
		History: &ws.History{Size: 100, TTLMS: 300000},
		Limits:  ws.Limits{MaxMessageSize: 64 << 10, MaxSubscriptions: 128, MaxInflight: 16},
	}
	if !reflect.DeepEqual(res, want) || len(res.Client) < 16 {
		t.Fatalf("connect result %+v\nwant %+v", res, want)
	}

	sub := c.Subscribe("orders/1", nil)
	if sub.Recovered || sub.Offset != 0 || sub.Epoch == "" {
		t.Fatalf("live subscribe = %+v", sub)
	}
	pub := e.publish("acme", "orders/1", `{"n":1}`)
	f := c.NextFrame(5 * time.Second)
	p := f.Pub
	// The frame is the envelope behind {"push":"pub", without re-encoding.
	if want := `{"push":"pub",` + string(fanout.NewPrepared(pub).JSON()[1:]); f.Raw != want {
		t.Fatalf("frame %s\nwant  %s", f.Raw, want)
	}
	if p.ID != pub.ID || p.Channel != "orders/1" || p.Offset != 1 || p.Epoch != sub.Epoch ||
		p.Type != "order.updated" || p.SchemaVersion != 1 || string(p.Data) != `{"n":1}` ||
		string(p.Freshness) != `{"mode":"immediate"}` || p.Time.IsZero() {
		t.Fatalf("publication %+v, published %+v", p, pub)
	}

	c.OK(c.Request(ws.OpPing, nil), nil)
	c.OK(c.Request(ws.OpUnsubscribe, map[string]any{"channel": "orders/1"}), nil)
	e.publish("acme", "orders/1", `2`)
	// Nothing of orders/1 follows the unsubscribe reply: the next frame is
	// the reply to this ping.
	c.OK(c.Request(ws.OpPing, nil), nil)

	c.Close()
	eventually(t, 5*time.Second, "the connection to end as client_closed", func() bool {
		return e.closedFor("client_closed") == 1
	})
	if n := testenv.MetricValue(t, e.requests.WithLabelValues(ws.OpSubscribe, "ok")); n != 1 {
		t.Fatalf("herald_ws_requests_total{subscribe,ok} = %v", n)
	}
}

func TestWSPublish(t *testing.T) {
	e := newEnv(t, envOptions{})
	listener := e.connected("rooms/*")
	listener.Subscribe("rooms/lobby", nil)

	c := e.dialWS(wstest.DialOpts{})
	c.Connect(e.wsToken("u2", nil, []string{"rooms/lobby", "rooms/{sub}"}))
	var res ws.PublishResult
	c.OK(c.Request(ws.OpPublish, map[string]any{
		"channel": "rooms/lobby", "type": "chat.message", "schema_version": 2, "data": map[string]any{"text": "hi"},
	}), &res)
	if res.ID == "" || res.Offset != 1 || res.Epoch == "" {
		t.Fatalf("publish result %+v", res)
	}
	p := listener.Pub()
	if p.ID != res.ID || p.Offset != 1 || p.Epoch != res.Epoch || p.Type != "chat.message" ||
		p.SchemaVersion != 2 || string(p.Data) != `{"text":"hi"}` {
		t.Fatalf("listener got %+v", p)
	}
	// The publication is in the channel's history (not in any outbox).
	rec, err := e.broker.Recover(context.Background(), fanout.Key{Tenant: "acme", Channel: "rooms/lobby"},
		fanout.Position{Epoch: res.Epoch}, 0)
	if err != nil || !rec.Recovered || len(rec.Publications) != 1 || rec.Publications[0].ID != res.ID {
		t.Fatalf("history = %+v, %v", rec, err)
	}
	// {sub} grants expand to the subject.
	c.OK(c.Request(ws.OpPublish, map[string]any{"channel": "rooms/u2", "type": "t", "schema_version": 1, "data": nil}), nil)

	denied := c.Fails(c.Request(ws.OpPublish, map[string]any{
		"channel": "rooms/other", "type": "t", "schema_version": 1, "data": 1,
	}), ws.CodeForbidden)
	if !strings.Contains(denied.Message, "no publish grant") {
		t.Fatalf("message %q", denied.Message)
	}
	// The subscribe grant does not allow publishing.
	listener.Fails(listener.Request(ws.OpPublish, map[string]any{
		"channel": "rooms/lobby", "type": "t", "schema_version": 1, "data": 1,
	}), ws.CodeForbidden)
	for name, fields := range map[string]map[string]any{
		"type":           {"channel": "rooms/lobby", "type": "Bad Type", "schema_version": 1, "data": 1},
		"schema version": {"channel": "rooms/lobby", "type": "t", "schema_version": 0, "data": 1},
		"data":           {"channel": "rooms/lobby", "type": "t", "schema_version": 1},
		"channel":        {"channel": "rooms//x", "type": "t", "schema_version": 1, "data": 1},
	} {
		if msg := c.Fails(c.Request(ws.OpPublish, fields), ws.CodeBadRequest).Message; msg == "" {
			t.Fatalf("%s: empty message", name)
		}
	}
}

func TestWSSubscriptionToken(t *testing.T) {
	verifier, err := auth.NewVerifier(auth.Config{HMACSecret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	authz, err := subscriptions.NewAuthorizer(subscriptions.Config{SubTokens: verifier})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{authz: func(authorizer) authorizer { return authz }})
	c := e.connected() // no subscribe grant at all
	c.Fails(c.Request(ws.OpSubscribe, map[string]any{"channel": "docs/42"}), ws.CodeForbidden)
	subTok := wstest.Mint(t, testSecret, auth.Claims{
		Subject: "u1", Tenant: "acme", Channel: "docs/42", ExpiresAt: time.Now().Add(time.Hour),
	})
	c.Fails(c.Request(ws.OpSubscribe, map[string]any{"channel": "docs/43", "token": subTok}), ws.CodeForbidden)
	c.OK(c.Request(ws.OpSubscribe, map[string]any{"channel": "docs/42", "token": subTok}), nil)
	pub := e.publish("acme", "docs/42", `"x"`)
	if p := c.Pub(); p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}
}
