package gateway

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// Revalidation timing in these tests: 100 ms ticks, a fresh token asked
// for 1 s ahead of exp, 300 ms of grace after it. Tokens carry whole-second
// exps (JWT NumericDate), so each lives 2–3 s.
const (
	testInterval = 100 * time.Millisecond
	testAhead    = time.Second
	testGrace    = 300 * time.Millisecond
	// testSlack absorbs scheduling delays (race detector, 2 shared cores)
	// in timing assertions; the measured values are logged.
	testSlack = 250 * time.Millisecond
)

// fastReval is a Config with the test revalidation timing.
func fastReval() Config {
	return Config{
		RevalidateInterval: testInterval, RefreshAhead: testAhead, ExpiryGrace: testGrace,
		ConnectAttemptsPerIP: -1,
	}
}

// tokenSpec describes a token to mint.
type tokenSpec struct {
	tenant, sub string
	subscribe   []string
	sid, jti    string
	life        time.Duration // at least; exp is rounded up to a whole second
}

// mintSpec mints a token and returns it with its exp.
func mintSpec(t testing.TB, s tokenSpec) (string, time.Time) {
	t.Helper()
	if s.tenant == "" {
		s.tenant = "acme"
	}
	if s.sub == "" {
		s.sub = "u1"
	}
	if s.life == 0 {
		s.life = time.Hour
	}
	exp := time.Now().Add(s.life).Truncate(time.Second).Add(time.Second)
	tok, err := auth.MintHS256(testSecret, auth.Claims{
		Subject: s.sub, Tenant: s.tenant, Subscribe: s.subscribe,
		SessionID: s.sid, TokenID: s.jti, ExpiresAt: exp,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok, exp
}

// reauthEvent decodes the data of a reauth event.
func (s *sseStream) reauthEvent(t *testing.T) sse.DisconnectEvent {
	t.Helper()
	return s.control(t, "reauth")
}

// TestSSEExpiryCutOff: a stream hears reauth within RefreshAhead of its
// token's exp while it still delivers, and is closed with reauth and
// disconnect (token_expired, reconnect) before the token expires.
func TestSSEExpiryCutOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: fastReval()})
	tok, exp := mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, life: 2 * time.Second})
	s := e.stream(tok, "orders/1")

	r := s.reauthEvent(t)
	asked := time.Now()
	if r.Reason != "token_expired" || !r.Reconnect || r.ExpiresAt != exp.Unix() || r.Message == "" {
		t.Fatalf("reauth = %+v, want token_expired, reconnect, expires_at %d", r, exp.Unix())
	}
	if ahead := exp.Sub(asked); ahead > testAhead+testSlack || ahead < 2*testInterval {
		t.Fatalf("reauth came %s before exp, want within RefreshAhead (%s) and before the close", ahead, testAhead)
	}
	// The stream goes on until it is closed.
	pub := e.publish("acme", "orders/1", `1`)
	if _, p := s.publication(t); p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}
	s.reauthEvent(t)
	d := s.control(t, "disconnect")
	if d.Reason != "token_expired" || !d.Reconnect {
		t.Fatalf("disconnect = %+v", d)
	}
	s.waitEOF(t)
	closed := time.Now()
	if !closed.Before(exp) {
		t.Fatalf("the stream closed %s after exp, want before", closed.Sub(exp))
	}
	t.Logf("SSE: reauth %s before exp, stream closed %s before exp", exp.Sub(asked).Round(time.Millisecond),
		exp.Sub(closed).Round(time.Millisecond))
	eventually(t, 5*time.Second, "the disconnect to be counted", func() bool {
		return e.counter(e.srv.metrics.disconnects.WithLabelValues("sse", "token_expired")) == 1
	})
}

// TestSSEExpiredTokenReconnect: an EventSource reconnecting with an
// expired token gets 200 with reauth and disconnect, never a 401 (which
// would stop EventSource for good); other clients get 401 token_expired.
func TestSSEExpiredTokenReconnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: fastReval()})
	tok := e.tokenExp("acme", "u1", time.Now().Add(-time.Minute), "orders/*")
	resp := e.eventSourceGet(t, url.Values{"channel": {"orders/1"}, "access_token": {tok}}, "Last-Event-ID", "AQ")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %q, want a 200 event stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := newSSEStream(resp, func() {})
	t.Cleanup(s.close)
	if ev := s.next(t, 5*time.Second); ev.Retry == "" {
		t.Fatalf("first block %+v, want retry", ev)
	}
	if r := s.reauthEvent(t); r.Reason != "token_expired" || !r.Reconnect {
		t.Fatalf("reauth = %+v", r)
	}
	if d := s.control(t, "disconnect"); d.Reason != "token_expired" || !d.Reconnect {
		t.Fatalf("disconnect = %+v", d)
	}
	s.waitEOF(t)
	e.refused(request{query: q("channel", "orders/1"), bearer: tok}, 401, "token_expired")
}

// TestWSExpiryCutOff: a WebSocket client is asked for a fresh token within
// RefreshAhead of exp; without a refresh the connection is closed with
// token_expired (4100) within ExpiryGrace + RevalidateInterval of exp.
func TestWSExpiryCutOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: fastReval()})
	tok, exp := mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, life: 2 * time.Second})
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(tok)
	c.Subscribe("orders/1", nil)

	p := wstest.RefreshPush(t, c.NextFrame(5*time.Second))
	asked := time.Now()
	if p.ExpiresAt != exp.Unix() || p.GraceMS != testGrace.Milliseconds() || p.ExpiresInMS <= 0 ||
		time.Duration(p.ExpiresInMS)*time.Millisecond > testAhead {
		t.Fatalf("refresh push %+v, want expires_at %d, grace_ms %d, 0 < expires_in_ms ≤ %d",
			p, exp.Unix(), testGrace.Milliseconds(), testAhead.Milliseconds())
	}
	if ahead := exp.Sub(asked); ahead > testAhead+testSlack || ahead < 0 {
		t.Fatalf("refresh asked %s before exp, want within RefreshAhead (%s)", ahead, testAhead)
	}
	d := c.ClosedWith("token_expired", session.CloseTokenExpired)
	cut := time.Since(exp)
	if !d.Reconnect {
		t.Fatalf("disconnect %+v", d)
	}
	if cut < testGrace-testSlack/5 || cut > testGrace+testInterval+testSlack {
		t.Fatalf("closed %s after exp, want within ExpiryGrace (%s) + RevalidateInterval (%s)", cut, testGrace, testInterval)
	}
	t.Logf("WS: refresh asked %s before exp, closed %s after exp (grace %s, interval %s)",
		exp.Sub(asked).Round(time.Millisecond), cut.Round(time.Millisecond), testGrace, testInterval)
}

// TestWSRefreshKeepsAlive: answering every refresh push with an in-band
// refresh keeps a connection open across several token lifetimes, with
// its subscription delivering throughout.
func TestWSRefreshKeepsAlive(t *testing.T) {
	t.Parallel()
	cfg := fastReval()
	cfg.RefreshAhead = 600 * time.Millisecond
	e := newEnv(t, envOptions{cfg: cfg})
	tok, exp := mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, life: time.Second})
	exps := []time.Time{exp}
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(tok)
	c.Subscribe("orders/1", nil)
	const lifetimes = 3
	for i := range lifetimes {
		if p := wstest.RefreshPush(t, c.NextFrame(5*time.Second)); p.ExpiresAt != exp.Unix() {
			t.Fatalf("round %d: refresh push for %d, want %d", i, p.ExpiresAt, exp.Unix())
		}
		tok, exp = mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, life: time.Second})
		exps = append(exps, exp)
		var res ws.RefreshResult
		c.OK(c.Request(ws.OpRefresh, map[string]any{"token": tok}), &res)
		if res.ExpiresAt != exp.Unix() {
			t.Fatalf("refresh result %+v", res)
		}
		pub := e.publish("acme", "orders/1", `1`)
		if got := c.Pub(); got.Offset != pub.Offset {
			t.Fatalf("round %d: got %+v", i, got)
		}
	}
	// The fourth token is asked for in turn; once the third has run out
	// (its exp and grace passed), the connection still answers.
	if p := wstest.RefreshPush(t, c.NextFrame(5*time.Second)); p.ExpiresAt != exp.Unix() {
		t.Fatalf("refresh push for %d, want %d", p.ExpiresAt, exp.Unix())
	}
	<-time.After(time.Until(exps[lifetimes-1].Add(testGrace + 2*testInterval)))
	c.OK(c.Request(ws.OpPing, nil), nil)
	t.Logf("WS: alive %s past the first token's exp, across %d token lifetimes, by in-band refresh",
		time.Since(exps[0]).Round(time.Millisecond), lifetimes)
	if n := e.counter(e.srv.metrics.disconnects.WithLabelValues("ws", "token_expired")); n != 0 {
		t.Fatalf("%v token_expired disconnects", n)
	}
}

// TestRevocationCutOff: revoking a session cuts its SSE and WebSocket
// connections within one RevalidateInterval; other connections go on;
// the revoked token can no longer connect.
func TestRevocationCutOff(t *testing.T) {
	t.Parallel()
	revs := auth.NewMemoryRevocations()
	e := newEnv(t, envOptions{cfg: fastReval(), deps: func(d *Deps) { d.Revocations = revs }})
	tokA, expA := mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, sid: "s-a"})
	tokB, _ := mintSpec(t, tokenSpec{sub: "u2", subscribe: []string{"orders/*"}, sid: "s-b"})
	tokC, expC := mintSpec(t, tokenSpec{sub: "u3", subscribe: []string{"orders/*"}, jti: "j-c", sid: "s-c"})

	sseA := e.stream(tokA, "orders/1")
	wsA := e.dialWS(wstest.DialOpts{})
	wsA.Connect(tokA)
	wsA.Subscribe("orders/1", nil)
	sseB := e.stream(tokB, "orders/1")
	wsC := e.dialWS(wstest.DialOpts{})
	wsC.Connect(tokC)
	wsC.Subscribe("orders/1", nil)

	revoked := time.Now()
	if err := revs.Revoke(context.Background(), auth.Revocation{SessionID: "s-a", Until: expA, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	d := sseA.control(t, "disconnect")
	cutSSE := time.Since(revoked)
	if d.Reason != "revoked" || d.Reconnect {
		t.Fatalf("sse disconnect %+v, want revoked without reconnect", d)
	}
	sseA.waitEOF(t)
	wsA.ClosedWith("revoked", session.CloseRevoked)
	cutWS := time.Since(revoked)
	for name, cut := range map[string]time.Duration{"sse": cutSSE, "ws": cutWS} {
		if cut > testInterval+testSlack {
			t.Fatalf("%s cut %s after the revocation, want within RevalidateInterval (%s)", name, cut, testInterval)
		}
	}
	t.Logf("revocation (sid): SSE cut after %s, WebSocket after %s (interval %s)",
		cutSSE.Round(time.Millisecond), cutWS.Round(time.Millisecond), testInterval)

	// Others are untouched.
	pub := e.publish("acme", "orders/1", `1`)
	if _, p := sseB.publication(t); p.Offset != pub.Offset {
		t.Fatalf("sse B got %+v", p)
	}
	if p := wsC.Pub(); p.Offset != pub.Offset {
		t.Fatalf("ws C got %+v", p)
	}

	// A token id is revoked alone.
	revoked = time.Now()
	if err := revs.Revoke(context.Background(), auth.Revocation{TokenID: "j-c", Until: expC}); err != nil {
		t.Fatal(err)
	}
	wsC.ClosedWith("revoked", session.CloseRevoked)
	t.Logf("revocation (jti): WebSocket cut after %s", time.Since(revoked).Round(time.Millisecond))
	pub = e.publish("acme", "orders/1", `2`)
	if _, p := sseB.publication(t); p.Offset != pub.Offset {
		t.Fatalf("sse B got %+v", p)
	}

	// The revoked token cannot come back.
	e.refused(request{query: q("channel", "orders/1"), bearer: tokA}, 401, "revoked")
	c := e.dialWS(wstest.DialOpts{})
	c.Fails(c.Request(ws.OpConnect, map[string]any{"token": tokA}), ws.CodeRevoked)
	c.ClosedWith("revoked", session.CloseRevoked)
	eventually(t, 5*time.Second, "the disconnects to be counted", func() bool {
		return e.counter(e.srv.metrics.disconnects.WithLabelValues("sse", "revoked")) == 1 &&
			e.counter(e.srv.metrics.disconnects.WithLabelValues("ws", "revoked")) == 2
	})
}

// flakyRevocations fails its snapshots while fail is set.
type flakyRevocations struct {
	*auth.MemoryRevocations
	fail  atomic.Bool
	calls atomic.Int64
}

func (f *flakyRevocations) Snapshot(ctx context.Context) (*auth.RevocationSet, error) {
	f.calls.Add(1)
	if f.fail.Load() {
		return nil, errors.New("store down")
	}
	return f.MemoryRevocations.Snapshot(ctx)
}

// TestRevocationStoreOutage: while snapshots fail, the last good one stays
// in force (fail open for new revocations, closed for known ones), the
// failure is logged rate-limited and counted; once the store answers, the
// pending revocation cuts within an interval.
func TestRevocationStoreOutage(t *testing.T) {
	t.Parallel()
	revs := &flakyRevocations{MemoryRevocations: auth.NewMemoryRevocations()}
	e := newEnv(t, envOptions{cfg: fastReval(), deps: func(d *Deps) { d.Revocations = revs }})
	tokA, expA := mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, sid: "s-a"})
	tokB, expB := mintSpec(t, tokenSpec{sub: "u2", subscribe: []string{"orders/*"}, sid: "s-b"})
	if err := revs.Revoke(context.Background(), auth.Revocation{SessionID: "s-a", Until: expA}); err != nil {
		t.Fatal(err)
	}
	n := revs.calls.Load()
	eventually(t, 5*time.Second, "a snapshot holding the revocation", func() bool { return revs.calls.Load() > n+1 })
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(tokB)
	c.Subscribe("orders/1", nil)

	revs.fail.Store(true)
	if err := revs.Revoke(context.Background(), auth.Revocation{SessionID: "s-b", Until: expB}); err != nil {
		t.Fatal(err)
	}
	n = revs.calls.Load()
	eventually(t, 5*time.Second, "several failed snapshots", func() bool { return revs.calls.Load() > n+5 })
	// B's revocation is not seen yet: it stays connected.
	c.OK(c.Request(ws.OpPing, nil), nil)
	// A's revocation, from the last good snapshot, still holds.
	e.refused(request{query: q("channel", "orders/1"), bearer: tokA}, 401, "revoked")
	if got := e.counter(e.srv.metrics.revalFailures.WithLabelValues(checkRevocations)); got < 5 {
		t.Fatalf("herald_revalidation_failures_total{check=revocations} = %v", got)
	}
	if lines := strings.Count(e.logs.String(), "revocation snapshot failed"); lines < 1 || lines > 20 {
		t.Fatalf("%d log lines about failed snapshots, want 1–20 (rate limited)", lines)
	}

	revs.fail.Store(false)
	back := time.Now()
	c.ClosedWith("revoked", session.CloseRevoked)
	if cut := time.Since(back); cut > testInterval+testSlack {
		t.Fatalf("cut %s after the store came back", cut)
	}
	if e.counter(e.srv.metrics.revocationsAt) == 0 {
		t.Fatal("herald_revocations_snapshot_timestamp_seconds not set")
	}
}
