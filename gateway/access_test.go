package gateway

import (
	"context"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/subscriptions"
)

// The tests of this file hold every credential to its end: a stream or a
// subscription lasts no longer than the credential it rests on, whatever
// the revalidation interval and the verifier's clock-skew leeway.

// TestSSEStreamEndsAtItsTokensExp: with the default revalidation interval
// (10 s), a stream opened with a token valid for 4 s hears reauth at once,
// delivers, and ends with reauth then disconnect (token_expired)
// ExpiryLead before exp, on a timer of its own rather than at the next
// tick: a publication made once exp has passed never reaches it.
func TestSSEStreamEndsAtItsTokensExp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{ConnectAttemptsPerIP: -1}})
	if e.srv.cfg.RevalidateInterval != 10*time.Second {
		t.Fatalf("RevalidateInterval %s, want the default 10s", e.srv.cfg.RevalidateInterval)
	}
	tok, exp := mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, life: 4 * time.Second})
	opened := time.Now()
	s := e.stream(tok, "orders/1")
	pastExp := e.publishPastExp(exp, "acme", "orders/1")
	if r := s.reauthEvent(t); r.Reason != "token_expired" || r.ExpiresAt != exp.Unix() {
		t.Fatalf("reauth %+v, want token_expired for exp %d", r, exp.Unix())
	}
	pub := e.publish("acme", "orders/1", `1`)
	if _, p := s.publication(t); p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}
	s.reauthEvent(t)
	d := s.control(t, "disconnect")
	ended := time.Now()
	if d.Reason != "token_expired" || !d.Reconnect {
		t.Fatalf("disconnect %+v, want token_expired with reconnect", d)
	}
	// The clock is read after the server sent disconnect, so this holds
	// however late the event is read.
	if early := exp.Sub(ended); early > sse.ExpiryLead {
		t.Fatalf("the stream ended %s before exp, want %s", early, sse.ExpiryLead)
	}
	s.waitEOF(t)
	if err := pastExp(); err != nil {
		t.Fatal(err)
	}
	t.Logf("SSE with a %s token and a 10s interval: ended %s after opening, %s before exp",
		exp.Sub(opened).Round(time.Millisecond), ended.Sub(opened).Round(time.Millisecond), exp.Sub(ended).Round(time.Millisecond))
}

// leewayEnv is a gateway whose verifier keeps the default 30 s clock-skew
// leeway and whose authorizer accepts subscription tokens, checking them
// against revs (nil: none).
func leewayEnv(t *testing.T, revs auth.RevocationStore) *testEnv {
	t.Helper()
	verifier, err := auth.NewVerifier(auth.Config{HMACSecret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	cfg := subscriptions.Config{SubTokens: verifier}
	if revs != nil {
		cfg.Revocations = revs
	}
	authz, err := subscriptions.NewAuthorizer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, envOptions{cfg: fastReval(), deps: func(d *Deps) {
		d.Verifier, d.Authorizer = verifier, authz
		if revs != nil {
			d.Revocations = revs
		}
	}})
}

// subTokenSpec mints a subscription token of tenant acme for u1.
func subTokenSpec(t *testing.T, channel, sid, jti string, exp time.Time) string {
	t.Helper()
	tok, err := auth.MintHS256(testSecret, auth.Claims{
		Subject: "u1", Tenant: "acme", Channel: channel, SessionID: sid, TokenID: jti, ExpiresAt: exp,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// wsUnsubscribed reads the next frame of c, which must be an unsubscribed
// push for channel with reason.
func wsUnsubscribed(t *testing.T, c *wstest.Client, channel, reason string, resubscribe bool) {
	t.Helper()
	f := c.NextFrame(10 * time.Second)
	if f.Push != "unsubscribed" || f.Ctl.Channel != channel || f.Ctl.Reason != reason || f.Ctl.Resubscribe != resubscribe {
		t.Fatalf("want unsubscribed %s (%s, resubscribe %v), got %s", channel, reason, resubscribe, f.Raw)
	}
}

// sseUnsubscribed reads the next event of s, which must be an
// unsubscribed event for channel with reason.
func sseUnsubscribed(t *testing.T, s *sseStream, channel, reason string) {
	t.Helper()
	ev := s.nextEvent(t)
	if ev.Name != "unsubscribed" || !strings.Contains(ev.Data, `"channel":"`+channel+`"`) || !strings.Contains(ev.Data, `"reason":"`+reason+`"`) {
		t.Fatalf("want unsubscribed %s (%s), got %q: %s", channel, reason, ev.Name, ev.Data)
	}
}

// TestSubscriptionTokenEndsAtItsExp: a subscription opened with a
// subscription token ends at that token's exp, with no clock-skew leeway,
// over WebSocket and SSE, while the connection and its other
// subscriptions go on; one opened with a token already past its exp (but
// inside the leeway, so it is accepted) ends at once. Ending "at exp" is
// held from both sides without a clock budget: never before exp (the
// clock is read after the server acted), and well before the 30 s leeway
// (the unsubscribed push is awaited 10 s at most, and exp is 2–3 s off).
func TestSubscriptionTokenEndsAtItsExp(t *testing.T) {
	t.Parallel()
	e := leewayEnv(t, nil)
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	sub := subTokenSpec(t, "private/7", "", "", exp)

	c := e.connected("orders/*")
	c.Subscribe("orders/1", nil)
	var res ws.SubscribeResult
	c.OK(c.Request(ws.OpSubscribe, map[string]any{"channel": "private/7", "token": sub}), &res)
	s := e.open(request{bearer: e.token("acme", "u1", "orders/*"), query: url.Values{
		"channel": {"orders/1", "private/7"}, "sub_token": {sub},
	}})
	s.next(t, 5*time.Second)
	s.subscribed(t)
	s.subscribed(t)
	pub := e.publish("acme", "private/7", `1`)
	if p := c.Pub(); p.Key.Channel != "private/7" || p.Offset != pub.Offset {
		t.Fatalf("ws got %+v", p)
	}
	if _, p := s.publication(t); p.Key.Channel != "private/7" || p.Offset != pub.Offset {
		t.Fatalf("sse got %+v", p)
	}

	wsUnsubscribed(t, c, "private/7", "token_expired", true)
	lateWS := time.Since(exp)
	sseUnsubscribed(t, s, "private/7", "token_expired")
	lateSSE := time.Since(exp)
	for name, late := range map[string]time.Duration{"ws": lateWS, "sse": lateSSE} {
		if late < 0 {
			t.Fatalf("%s: the subscription ended %s before the subscription token's exp", name, -late)
		}
	}
	t.Logf("subscription token: WebSocket subscription ended %s after exp, SSE %s (leeway 30s)",
		lateWS.Round(time.Millisecond), lateSSE.Round(time.Millisecond))
	e.publish("acme", "private/7", `2`)
	pub = e.publish("acme", "orders/1", `3`)
	if p := c.Pub(); p.Key.Channel != "orders/1" || p.Offset != pub.Offset {
		t.Fatalf("ws got %+v, want only orders/1", p)
	}
	if _, p := s.publication(t); p.Key.Channel != "orders/1" || p.Offset != pub.Offset {
		t.Fatalf("sse got %+v, want only orders/1", p)
	}

	// Subscribing again with a fresh subscription token works at once.
	fresh := subTokenSpec(t, "private/7", "", "", time.Now().Add(time.Hour))
	c.OK(c.Request(ws.OpSubscribe, map[string]any{"channel": "private/7", "token": fresh}), &res)
	pub = e.publish("acme", "private/7", `3`)
	if p := c.Pub(); p.Key.Channel != "private/7" || p.Offset != pub.Offset {
		t.Fatalf("ws after subscribing again got %+v", p)
	}

	// Past its exp but inside the leeway: accepted, and ended at once.
	stale := subTokenSpec(t, "private/8", "", "", time.Now().Add(-5*time.Second))
	c.OK(c.Request(ws.OpSubscribe, map[string]any{"channel": "private/8", "token": stale}), &res)
	wsUnsubscribed(t, c, "private/8", "token_expired", true)
	c.OK(c.Request(ws.OpPing, nil), nil)
	if n := e.counter(e.srv.metrics.subsEnded.WithLabelValues("ws", "token_expired")); n != 2 {
		t.Fatalf("herald_subscriptions_ended_total{ws,token_expired} = %v, want 2", n)
	}
}

// revocationBackends opens the Redis and the PostgreSQL revocation stores
// on the real services.
func revocationBackends() map[string]func(t *testing.T) auth.RevocationStore {
	return map[string]func(t *testing.T) auth.RevocationStore{
		"redis": func(t *testing.T) auth.RevocationStore {
			rdb, prefix := testenv.RedisClient(t)
			return auth.NewRedisRevocations(rdb, prefix)
		},
		"postgres": func(t *testing.T) auth.RevocationStore {
			pool, err := pgxpool.New(context.Background(), testenv.DatabaseURL(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			s := auth.NewPostgresRevocations(pool)
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// TestRevokingASubscriptionToken: revoking a subscription token (by jti,
// or its session by sid) ends the subscriptions it opened within one
// revalidation interval, over WebSocket and SSE, with reason revoked and
// no resubscribe, long before the token's exp; the connections and their
// other subscriptions go on, and the token opens nothing more. For the
// Redis and the PostgreSQL revocation stores. "Within one interval" is
// the first revalidation pass that sees the revocation (heldRevocations).
func TestRevokingASubscriptionToken(t *testing.T) {
	t.Parallel()
	for name, open := range revocationBackends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			revs := holdRevocations(open(t))
			e := leewayEnv(t, revs)
			exp := time.Now().Add(300 * time.Second)
			byJTI := subTokenSpec(t, "private/bob-only", "", "sub-j1", exp)
			bySID := subTokenSpec(t, "private/team", "sub-s1", "", exp)

			c := e.connected("orders/*")
			c.Subscribe("orders/1", nil)
			var res ws.SubscribeResult
			c.OK(c.Request(ws.OpSubscribe, map[string]any{"channel": "private/bob-only", "token": byJTI}), &res)
			c.OK(c.Request(ws.OpSubscribe, map[string]any{"channel": "private/team", "token": bySID}), &res)
			s := e.open(request{bearer: e.token("acme", "u1", "orders/*"), query: url.Values{
				"channel": {"orders/1", "private/bob-only", "private/team"}, "sub_token": {byJTI, bySID},
			}})
			s.next(t, 5*time.Second)
			for range 3 {
				s.subscribed(t)
			}

			for _, step := range []struct {
				channel string
				r       auth.Revocation
			}{
				{"private/bob-only", auth.Revocation{TokenID: "sub-j1", Until: exp}},
				{"private/team", auth.Revocation{SessionID: "sub-s1", Until: exp}},
			} {
				revoked := time.Now()
				release := revs.revokeHeld(t, step.r)
				wsUnsubscribed(t, c, step.channel, "revoked", false)
				cutWS := time.Since(revoked)
				sseUnsubscribed(t, s, step.channel, "revoked")
				cutSSE := time.Since(revoked)
				release()
				t.Logf("%s revoked (%s store): WebSocket subscription cut after %s, SSE after %s (interval %s)",
					step.channel, name, cutWS.Round(time.Millisecond), cutSSE.Round(time.Millisecond), testInterval)
				e.publish("acme", step.channel, `"after the revocation"`)
				pub := e.publish("acme", "orders/1", `1`)
				if p := c.Pub(); p.Key.Channel != "orders/1" || p.Offset != pub.Offset {
					t.Fatalf("ws got %+v, want only orders/1", p)
				}
				if _, p := s.publication(t); p.Key.Channel != "orders/1" || p.Offset != pub.Offset {
					t.Fatalf("sse got %+v, want only orders/1", p)
				}
			}
			c.Fails(c.Request(ws.OpSubscribe, map[string]any{"channel": "private/bob-only", "token": byJTI}), ws.CodeForbidden)
			e.refused(request{bearer: e.token("acme", "u1"), query: url.Values{
				"channel": {"private/team"}, "sub_token": {bySID},
			}}, 403, "forbidden")
			if n := e.counter(e.srv.metrics.subsEnded.WithLabelValues("ws", "revoked")); n != 2 {
				t.Fatalf("herald_subscriptions_ended_total{ws,revoked} = %v, want 2", n)
			}
		})
	}
}

// TestSecurityCredentialsTable: docs/security.md's table of credentials
// has a row for every credential a connection or a subscription rests on,
// and each row names tests that exist in the repository.
func TestSecurityCredentialsTable(t *testing.T) {
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Credentials\n")
	if !ok {
		t.Fatal("docs/security.md has no Credentials section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	defined := map[string]bool{}
	funcRE := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcRE.FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 6 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || strings.TrimSpace(cells[0]) == "credential" {
			continue
		}
		name := strings.TrimSpace(cells[0])
		tests := regexp.MustCompile("`(Test\\w+)`").FindAllStringSubmatch(cells[5], -1)
		if len(tests) == 0 {
			t.Errorf("row %q names no test", name)
		}
		for _, m := range tests {
			if !defined[m[1]] {
				t.Errorf("row %q names %s, which no test file defines", name, m[1])
			}
		}
		for _, want := range []string{"connection token", "ticket", "subscription token", "authorization webhook answer", "admin token"} {
			if strings.HasPrefix(name, want) {
				rows[want] = true
			}
		}
	}
	for _, want := range []string{"connection token", "ticket", "subscription token", "authorization webhook answer", "admin token"} {
		if !rows[want] {
			t.Errorf("the credentials table has no row for the %s", want)
		}
	}
}
