package ws_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
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
	if p.ID != pub.ID || p.Key.Channel != "orders/1" || p.Offset != 1 || p.Epoch != sub.Epoch ||
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

// expiryBounds are bounds with RefreshAhead ahead and ExpiryGrace grace.
// There is no revalidation tick here: whatever happens at a token's
// expiry is the connection's own timer.
func expiryBounds(ahead, grace time.Duration) session.Bounds {
	return session.Bounds{RefreshAhead: ahead, ExpiryGrace: grace}
}

// TestWSRefreshPushAtRefreshAhead: the refresh push leaves RefreshAhead
// before exp, not at a revalidation tick (an hour away here).
func TestWSRefreshPushAtRefreshAhead(t *testing.T) {
	t.Parallel()
	const ahead = 3 * time.Hour
	e := newEnv(t, envOptions{bounds: expiryBounds(ahead, 5*time.Second)})
	exp := time.Now().Add(ahead + time.Second).Truncate(time.Second).Add(time.Second)
	tok := e.mint("u1", exp, []string{"orders/*"}, nil)
	c := e.dialWS(wstest.DialOpts{})
	if res := c.Connect(tok); res.ExpiresIn <= int64(ahead/time.Second) {
		t.Fatalf("connect result %+v: expires_in ≤ RefreshAhead", res)
	}
	p := wstest.RefreshPush(t, c.NextFrame(time.Minute))
	if left := time.Until(exp); left > ahead {
		t.Fatalf("refresh pushed %s before exp, want within RefreshAhead (%s)", left, ahead)
	}
	if p.ExpiresAt != exp.Unix() || p.ExpiresInMS > ahead.Milliseconds() || p.GraceMS != 5000 {
		t.Fatalf("refresh push %+v", p)
	}
	c.OK(c.Request(ws.OpPing, nil), nil) // one push per token, and the connection goes on
}

// TestWSRefreshPushInsideGrace: a token already past its exp, accepted
// inside ExpiryGrace, gets its refresh push right after the connect reply
// and, not replaced, closes the connection with token_expired
// ExpiryGrace after exp, on the connection's timer.
func TestWSRefreshPushInsideGrace(t *testing.T) {
	t.Parallel()
	const grace = 8 * time.Second // the connect must land inside it, on a busy machine too
	e := newEnv(t, envOptions{
		bounds: expiryBounds(3*time.Hour, grace),
		leeway: time.Minute, // the clock skew a deployment allows
	})
	exp := time.Now().Truncate(time.Second).Add(-time.Second)
	tok, err := auth.MintHS256(testSecret, auth.Claims{Subject: "u1", Tenant: "acme", ExpiresAt: exp})
	if err != nil {
		t.Fatal(err)
	}
	c := e.dialWS(wstest.DialOpts{})
	if res := c.Connect(tok); res.ExpiresAt != exp.Unix() || res.ExpiresIn != 0 {
		t.Fatalf("connect result %+v, want expires_at %d and expires_in 0", res, exp.Unix())
	}
	p := wstest.RefreshPush(t, c.NextFrame(time.Minute))
	if p.ExpiresAt != exp.Unix() || p.ExpiresInMS != 0 || p.GraceMS != grace.Milliseconds() {
		t.Fatalf("refresh push %+v", p)
	}
	c.ClosedWith(session.ReasonTokenExpired.Code, session.CloseTokenExpired)
	if early := time.Until(exp.Add(grace)); early > 0 {
		t.Fatalf("closed %s before exp + ExpiryGrace", early)
	}
}

// slowAuthorizer holds the decisions for one channel until release is
// closed, to hold a subscribe in authorization while the client refreshes
// its token.
type slowAuthorizer struct {
	inner   authorizer
	channel string
	release chan struct{} // closed by the test
	entered chan struct{} // receives once per held decision
}

func (a slowAuthorizer) Authorize(ctx context.Context, r subscriptions.Request) (subscriptions.Decision, error) {
	if r.Channel == a.channel {
		select {
		case a.entered <- struct{}{}:
		default:
		}
		select {
		case <-a.release:
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
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	e := newEnv(t, envOptions{authz: func(a authorizer) authorizer {
		return slowAuthorizer{inner: a, channel: "secret/x", release: release, entered: entered}
	}})
	t.Cleanup(unblock) // before the server stops
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(e.wsToken("u1", []string{"secret/**", "orders/*"}, nil))
	sub := c.Request(ws.OpSubscribe, map[string]any{"channel": "secret/x"})
	select {
	case <-entered: // the subscribe is being decided with the old token
	case <-time.After(5 * time.Second):
		t.Fatal("subscribe never reached the authorizer")
	}
	ref := c.Request(ws.OpRefresh, map[string]any{"token": e.wsToken("u1", []string{"orders/*"}, nil)})
	c.OK(ref, nil) // answered while the subscribe is still held
	unblock()
	c.Fails(sub, ws.CodeForbidden)
}

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
	for p := c.Pub(); p.Key.Channel != "rooms/b"; p = c.Pub() {
		problems = append(problems, "received a publication of "+p.Key.Channel)
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
