package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
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
	"github.com/heraldgw/herald/subscriptions"
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

// testHook is an authorization webhook for docs/* channels: it allows or
// denies with a TTL of one second, fails with 500, or hangs until the
// caller gives up.
type testHook struct {
	srv   *httptest.Server
	allow atomic.Bool
	fail  atomic.Bool
	hang  atomic.Bool
	calls atomic.Int64
}

func newTestHook(t *testing.T) *testHook {
	t.Helper()
	h := &testHook{}
	h.allow.Store(true)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.calls.Add(1)
		var req struct{ Tenant, Subject, Channel string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		switch {
		case h.hang.Load():
			<-r.Context().Done()
			return
		case h.fail.Load():
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		allow := h.allow.Load() && strings.HasPrefix(req.Channel, "docs/")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"allow": allow, "ttl_seconds": 1, "reason": "docs access withdrawn"})
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// hookEnv is a gateway whose authorizer asks hook and accepts
// subscription tokens. The webhook timeout is long: the tests that use it
// need a webhook that is up to answer, however busy the machine (a
// timeout is the same "unavailable" as a webhook that is down);
// TestSlowWebhookBlocksNothing sets one of its own.
func hookEnv(t *testing.T, hookURL string, deps func(*Deps)) *testEnv {
	t.Helper()
	return hookEnvTimeout(t, hookURL, time.Minute, deps)
}

func hookEnvTimeout(t *testing.T, hookURL string, timeout time.Duration, deps func(*Deps)) *testEnv {
	t.Helper()
	verifier, err := auth.NewVerifier(auth.Config{HMACSecret: testSecret, Leeway: -1})
	if err != nil {
		t.Fatal(err)
	}
	authz, err := subscriptions.NewAuthorizer(subscriptions.Config{
		SubTokens: verifier, WebhookURL: hookURL, WebhookTimeout: timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, envOptions{cfg: fastReval(), deps: func(d *Deps) {
		d.Authorizer = authz
		if deps != nil {
			deps(d)
		}
	}})
}

// hookedWS starts a hookEnv on a test webhook of its own and connects a
// WebSocket client subscribed to orders/1, which its token grants
// (orders/*), and docs/1, which only the webhook allows.
func hookedWS(t *testing.T) (*testHook, *testEnv, *wstest.Client) {
	t.Helper()
	hook := newTestHook(t)
	e := hookEnv(t, hook.srv.URL, nil)
	c := e.connected("orders/*")
	c.Subscribe("orders/1", nil)
	c.Subscribe("docs/1", nil)
	return hook, e, c
}

// TestReauthorizeWebhookWS: a webhook-allowed subscription is re-checked
// when the answer's TTL lapses; once the webhook denies, that subscription
// ends with an unsubscribed push while the grant-based one keeps
// delivering.
func TestReauthorizeWebhookWS(t *testing.T) {
	t.Parallel()
	hook, e, c := hookedWS(t)
	pub := e.publish("acme", "docs/1", `1`)
	if p := c.Pub(); p.Key.Channel != "docs/1" || p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}
	// Still allowed at the first recheck.
	calls := hook.calls.Load()
	eventually(t, 5*time.Second, "a recheck", func() bool { return hook.calls.Load() > calls })

	hook.allow.Store(false)
	flipped := time.Now()
	f := c.NextFrame(5 * time.Second)
	ended := time.Since(flipped)
	if f.Push != "unsubscribed" || f.Ctl.Channel != "docs/1" || f.Ctl.Reason != "forbidden" || f.Ctl.Resubscribe ||
		!strings.Contains(f.Ctl.Message, "docs access withdrawn") {
		t.Fatalf("want unsubscribed docs/1 forbidden, got %s", f.Raw)
	}
	if ended > time.Second+testInterval+testSlack {
		t.Fatalf("ended %s after the webhook flipped, want within its TTL (1s) + RevalidateInterval", ended)
	}
	t.Logf("webhook subscription ended %s after the webhook started denying (TTL 1s, interval %s)",
		ended.Round(time.Millisecond), testInterval)
	e.publish("acme", "docs/1", `2`)
	pub = e.publish("acme", "orders/1", `3`)
	if p := c.Pub(); p.Key.Channel != "orders/1" || p.Offset != pub.Offset {
		t.Fatalf("got %+v, want only orders/1", p)
	}
	c.Fails(c.Request(ws.OpUnsubscribe, map[string]any{"channel": "docs/1"}), ws.CodeNotSubscribed)
	if n := e.counter(e.srv.metrics.subsEnded.WithLabelValues("ws", "forbidden")); n != 1 {
		t.Fatalf("herald_subscriptions_ended_total{ws,forbidden} = %v", n)
	}
}

// TestReauthorizeWebhookSSE: the same on SSE: an unsubscribed event for
// the withdrawn channel, the stream goes on for the others; when the last
// channel goes, the stream ends.
func TestReauthorizeWebhookSSE(t *testing.T) {
	t.Parallel()
	hook := newTestHook(t)
	e := hookEnv(t, hook.srv.URL, nil)
	tok := e.token("acme", "u1", "orders/*")
	s := e.stream(tok, "orders/1", "docs/1")
	only := e.stream(tok, "docs/2")
	pub := e.publish("acme", "docs/1", `1`)
	if _, p := s.publication(t); p.Key.Channel != "docs/1" || p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}

	hook.allow.Store(false)
	ev := s.nextEvent(t)
	var u sse.UnsubscribedEvent
	if ev.Name != "unsubscribed" || json.Unmarshal([]byte(ev.Data), &u) != nil || !ev.HasID {
		t.Fatalf("want an unsubscribed event with an id, got %+v", ev)
	}
	if u.Channel != "docs/1" || u.Reason != "forbidden" || u.Resubscribe || u.Message == "" {
		t.Fatalf("unsubscribed = %+v", u)
	}
	e.publish("acme", "docs/1", `2`)
	pub = e.publish("acme", "orders/1", `3`)
	if _, p := s.publication(t); p.Key.Channel != "orders/1" || p.Offset != pub.Offset {
		t.Fatalf("got %+v, want only orders/1", p)
	}
	d := only.control(t, "disconnect")
	if d.Reason != "forbidden" || d.Reconnect {
		t.Fatalf("disconnect = %+v", d)
	}
	only.waitEOF(t)
}

// TestWebhookDown: with the webhook down, a subscription that needs it is
// denied with authorization_unavailable (temporary); grant-based ones are
// not blocked; a webhook subscription re-checked while the webhook is down
// ends alone, resubscribe true.
func TestWebhookDown(t *testing.T) {
	t.Parallel()
	hook, e, c := hookedWS(t)

	hook.fail.Store(true)
	f := c.NextFrame(5 * time.Second)
	if f.Push != "unsubscribed" || f.Ctl.Channel != "docs/1" || f.Ctl.Reason != "authorization_unavailable" ||
		!f.Ctl.Resubscribe || !strings.Contains(f.Ctl.Message, "authorization webhook unavailable") {
		t.Fatalf("want unsubscribed docs/1 authorization_unavailable, got %s", f.Raw)
	}
	msg := c.Fails(c.Request(ws.OpSubscribe, map[string]any{"channel": "docs/2"}), ws.CodeAuthzUnavailable).Message
	if !strings.Contains(msg, "authorization webhook unavailable") {
		t.Fatalf("message %q", msg)
	}
	c.Subscribe("orders/2", nil)
	pub := e.publish("acme", "orders/1", `1`)
	if p := c.Pub(); p.Offset != pub.Offset || p.Key.Channel != "orders/1" {
		t.Fatalf("got %+v", p)
	}
	tok := e.token("acme", "u1", "orders/*")
	msg = e.refused(request{query: q("channel", "orders/1", "channel", "docs/1"), bearer: tok}, 503, "authorization_unavailable")
	if !strings.Contains(msg, "authorization webhook unavailable") {
		t.Fatalf("message %q", msg)
	}
	e.stream(tok, "orders/1")

	// Unreachable altogether: the same.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	e2 := hookEnv(t, dead, nil)
	c2 := e2.connected("orders/*")
	c2.Fails(c2.Request(ws.OpSubscribe, map[string]any{"channel": "docs/1"}), ws.CodeAuthzUnavailable)
	c2.Subscribe("orders/1", nil)
}

// TestSlowWebhookBlocksNothing: while the webhook hangs, a subscribe that
// needs it waits alone (other requests on the connection are answered),
// is denied after the webhook timeout, and the revalidation timer keeps
// cutting revoked sessions on time although re-authorizations hang.
func TestSlowWebhookBlocksNothing(t *testing.T) {
	t.Parallel()
	hook := newTestHook(t)
	revs := auth.NewMemoryRevocations()
	const timeout = 1500 * time.Millisecond
	e := hookEnvTimeout(t, hook.srv.URL, timeout, func(d *Deps) { d.Revocations = revs })
	c := e.connected("orders/*")
	c.Subscribe("orders/1", nil)
	c.Subscribe("docs/1", nil)
	victimTok, exp := mintSpec(t, tokenSpec{sub: "u9", subscribe: []string{"orders/*"}, sid: "victim"})
	victim := e.dialWS(wstest.DialOpts{})
	victim.Connect(victimTok)

	hook.hang.Store(true)
	calls := hook.calls.Load()
	eventually(t, 5*time.Second, "a hanging recheck", func() bool { return hook.calls.Load() > calls })
	revoked := time.Now()
	if err := revs.Revoke(context.Background(), auth.Revocation{SessionID: "victim", Until: exp}); err != nil {
		t.Fatal(err)
	}
	victim.ClosedWith("revoked", session.CloseRevoked)
	if cut := time.Since(revoked); cut > testInterval+testSlack {
		t.Fatalf("revocation cut %s after, with a hanging webhook", cut)
	}

	sub := c.Request(ws.OpSubscribe, map[string]any{"channel": "docs/2"})
	ping := c.Request(ws.OpPing, nil)
	start := time.Now()
	var got []uint64
	for len(got) < 2 {
		f := c.NextFrame(5 * time.Second)
		switch {
		case f.Push == "unsubscribed":
			continue // docs/1's recheck timed out
		case f.Push != "":
			t.Fatalf("unexpected %s", f.Raw)
		case f.ID == ping:
			if f.Error != nil {
				t.Fatalf("ping failed: %s", f.Raw)
			}
		case f.ID == sub:
			if f.Error == nil || f.Error.Code != ws.CodeAuthzUnavailable {
				t.Fatalf("subscribe: %s", f.Raw)
			}
			if waited := time.Since(start); waited < timeout*2/3 {
				t.Fatalf("denied after %s, before the webhook timeout", waited)
			}
		}
		got = append(got, f.ID)
	}
	if got[0] != ping {
		t.Fatalf("replies in order %v: the ping waited for the webhook", got)
	}
}
