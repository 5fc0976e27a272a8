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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/subscriptions"
)

// Revalidation timing in these tests: 100 ms ticks, a fresh token asked
// for 1 s ahead of exp, 300 ms of grace after it. Tokens carry whole-second
// exps (JWT NumericDate), so each lives 2–3 s.
//
// No assertion here rests on how fast the machine runs. A bound that
// says "not before" is exact: the client reads the clock after the server
// acted, so scheduling delays only widen the margin. A bound that says
// "not after" is an order of events: a cut by the revalidation timer must
// come from the first pass that sees the revocation (heldRevocations
// holds every later pass), a webhook's denial must end the subscription
// it answers for (testHook.holdAfterDenial), and a stream must end before
// a publication made once its token has expired.
const (
	testInterval = 100 * time.Millisecond
	testAhead    = time.Second
	testGrace    = 300 * time.Millisecond
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
	exp         time.Time     // when set, the exp itself (life is ignored)
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
	if !s.exp.IsZero() {
		exp = s.exp
	}
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

// waitForClock returns once the clock has passed when. The event awaited
// is the instant itself (a token's exp), not another goroutine's
// progress.
func waitForClock(when time.Time) {
	for d := time.Until(when); d >= 0; d = time.Until(when) {
		time.Sleep(d + time.Millisecond)
	}
}

// publishPastExp publishes a marker to channel once the clock has passed
// exp, on a goroutine of its own, and returns a func that waits for it
// and reports its error. A stream that ends before its token's exp, as
// it must, never gets the marker; one that lived on past exp would
// (sseStream.waitEOF fails on any event).
func (e *testEnv) publishPastExp(exp time.Time, tenant, channel string) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		waitForClock(exp)
		_, err := e.broker.Publish(context.Background(), fanout.Message{
			ID: "past-exp", Key: fanout.Key{Tenant: tenant, Channel: channel},
			Type: "order.updated", SchemaVersion: 1, Data: json.RawMessage(`"published past exp"`),
		})
		done <- err
	}()
	return func() error { return <-done }
}

// TestSSEExpiryCutOff: a stream hears reauth within RefreshAhead of its
// token's exp while it still delivers, and is closed with reauth and
// disconnect (token_expired, reconnect) before the token expires: a
// publication made once exp has passed never reaches it.
func TestSSEExpiryCutOff(t *testing.T) {
	t.Parallel()
	// RefreshAhead leaves 3.5 s between reauth and the end of the stream
	// (ExpiryLead before exp) for the publication that shows it goes on:
	// room for a busy machine's delays.
	cfg := fastReval()
	cfg.RefreshAhead = 4 * time.Second
	e := newEnv(t, envOptions{cfg: cfg})
	tok, exp := mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, life: 5 * time.Second})
	s := e.stream(tok, "orders/1")
	pastExp := e.publishPastExp(exp, "acme", "orders/1")

	r := s.reauthEvent(t)
	asked := time.Now()
	if r.Reason != "token_expired" || !r.Reconnect || r.ExpiresAt != exp.Unix() || r.Message == "" {
		t.Fatalf("reauth = %+v, want token_expired, reconnect, expires_at %d", r, exp.Unix())
	}
	// The clock is read after the server sent reauth, so this holds
	// however late the event is read.
	if ahead := exp.Sub(asked); ahead > cfg.RefreshAhead {
		t.Fatalf("reauth came %s before exp, want within RefreshAhead (%s)", ahead, cfg.RefreshAhead)
	}
	// The stream goes on until it is closed.
	pub := e.publish("acme", "orders/1", `1`)
	if _, p := s.publication(t); p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}
	s.reauthEvent(t)
	d := s.control(t, "disconnect")
	closed := time.Now()
	if d.Reason != "token_expired" || !d.Reconnect {
		t.Fatalf("disconnect = %+v", d)
	}
	if early := exp.Sub(closed); early > sse.ExpiryLead {
		t.Fatalf("the stream closed %s before exp, want ExpiryLead (%s)", early, sse.ExpiryLead)
	}
	s.waitEOF(t)
	if err := pastExp(); err != nil {
		t.Fatal(err)
	}
	t.Logf("SSE: reauth read %s before exp, disconnect %s before exp", exp.Sub(asked).Round(time.Millisecond),
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
// token_expired (4100) once ExpiryGrace has passed, on its own timer.
// Both bounds are exact: the clock is read after the server acted.
func TestWSExpiryCutOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: fastReval()})
	// The refresh push is due RefreshAhead (1 s) before exp, 3–4 s after
	// the mint: the connect and the subscribe have that long to be answered
	// before it, so that a reply never races the push.
	tok, exp := mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, life: 4 * time.Second})
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
	if ahead := exp.Sub(asked); ahead > testAhead {
		t.Fatalf("refresh asked %s before exp, want within RefreshAhead (%s)", ahead, testAhead)
	}
	d := c.ClosedWith("token_expired", session.CloseTokenExpired)
	cut := time.Since(exp)
	if !d.Reconnect {
		t.Fatalf("disconnect %+v", d)
	}
	if cut < testGrace {
		t.Fatalf("closed %s after exp, want ExpiryGrace (%s) after it", cut, testGrace)
	}
	t.Logf("WS: refresh asked %s before exp, closed %s after exp (grace %s, interval %s)",
		exp.Sub(asked).Round(time.Millisecond), cut.Round(time.Millisecond), testGrace, testInterval)
}

// TestWSRefreshKeepsAlive: answering every refresh push with an in-band
// refresh keeps a connection open across several token lifetimes, with
// its subscription delivering throughout. Each token expires RefreshAhead
// + ExpiryGrace after the one it replaces, so the push for it leaves no
// earlier than the replaced token's exp + grace: every push after the
// first shows the connection outlived a token. The client has from a push
// to the token's exp + grace (4 s) to refresh: a busy machine's delays
// stay well inside it.
func TestWSRefreshKeepsAlive(t *testing.T) {
	t.Parallel()
	cfg := fastReval()
	cfg.ExpiryGrace = 3 * time.Second
	step := cfg.RefreshAhead + cfg.ExpiryGrace
	e := newEnv(t, envOptions{cfg: cfg})
	// The first push is due two seconds or more after the connect (exp is
	// 3–4 s off, RefreshAhead 1 s); the subscribe waits for it, so that
	// its reply never races a push.
	tok, exp := mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, life: 3 * time.Second})
	first := exp
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(tok)
	const lifetimes = 3
	for i := range lifetimes + 1 {
		if p := wstest.RefreshPush(t, c.NextFrame(10*time.Second)); p.ExpiresAt != exp.Unix() {
			t.Fatalf("round %d: refresh push for %d, want %d", i, p.ExpiresAt, exp.Unix())
		}
		if i > 0 && time.Now().Before(exp.Add(-step).Add(cfg.ExpiryGrace)) {
			t.Fatalf("round %d: a refresh push before the replaced token's exp + grace", i)
		}
		if i == 0 {
			c.Subscribe("orders/1", nil)
		}
		if i == lifetimes {
			break
		}
		tok, exp = mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, exp: exp.Add(step)})
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
	c.OK(c.Request(ws.OpPing, nil), nil)
	t.Logf("WS: alive %s past the first token's exp, across %d token lifetimes, by in-band refresh",
		time.Since(first).Round(time.Millisecond), lifetimes)
	if n := e.counter(e.srv.metrics.disconnects.WithLabelValues("ws", "token_expired")); n != 0 {
		t.Fatalf("%v token_expired disconnects", n)
	}
}

// heldRevocations is a revocation store whose revalidation passes a test
// can hold. After revokeHeld, the first snapshot taken from then on (it
// holds the revocation) is served, and every later one waits until the
// test releases them. The revalidation timer takes its snapshot first in
// each pass, on its one goroutine, so while a snapshot waits no later
// pass runs: a cut the test sees before it releases came from the first
// pass that saw the revocation, that is within one RevalidateInterval of
// it, however slowly the machine runs. Snapshots fail while fail is set.
type heldRevocations struct {
	auth.RevocationStore
	fail  atomic.Bool
	calls atomic.Int64 // snapshots asked for

	mu   sync.Mutex
	gate chan struct{} // non-nil while a revocation is held; closed by release
	seen bool          // a snapshot holding it was served
}

func holdRevocations(s auth.RevocationStore) *heldRevocations {
	return &heldRevocations{RevocationStore: s}
}

func (h *heldRevocations) Snapshot(ctx context.Context) (*auth.RevocationSet, error) {
	h.calls.Add(1)
	if h.fail.Load() {
		return nil, errors.New("store down")
	}
	h.mu.Lock()
	gate, seen := h.gate, h.seen
	h.mu.Unlock()
	if gate != nil && seen {
		// Not ctx: a pass whose snapshot times out goes on with the last
		// good one, which holds the revocation.
		<-gate
	}
	set, err := h.RevocationStore.Snapshot(ctx)
	if gate != nil && !seen && err == nil {
		h.mu.Lock()
		if h.gate == gate {
			h.seen = true
		}
		h.mu.Unlock()
	}
	return set, err
}

// revokeHeld revokes r and holds every revalidation pass after the first
// that sees it until the func it returns is called, at the latest when t
// ends.
func (h *heldRevocations) revokeHeld(t *testing.T, r auth.Revocation) func() {
	t.Helper()
	if err := h.Revoke(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	h.mu.Lock()
	held := h.gate != nil
	if !held {
		h.gate, h.seen = gate, false
	}
	h.mu.Unlock()
	if held {
		t.Fatal("a revocation is held already")
	}
	return releaseOnce(t, &h.mu, func() { h.gate = nil }, gate)
}

// releaseOnce returns a func that, the first time it is called, runs
// forget under mu and closes gate; it is called when t ends at the
// latest.
func releaseOnce(t *testing.T, mu *sync.Mutex, forget func(), gate chan struct{}) func() {
	var once sync.Once
	release := func() {
		once.Do(func() {
			mu.Lock()
			forget()
			mu.Unlock()
			close(gate)
		})
	}
	t.Cleanup(release)
	return release
}

// TestRevocationCutOff: revoking a session cuts its SSE and WebSocket
// connections by the first revalidation pass that sees the revocation;
// other connections go on; the revoked token can no longer connect.
func TestRevocationCutOff(t *testing.T) {
	t.Parallel()
	revs := holdRevocations(auth.NewMemoryRevocations())
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
	release := revs.revokeHeld(t, auth.Revocation{SessionID: "s-a", Until: expA, Reason: "test"})
	d := sseA.control(t, "disconnect")
	cutSSE := time.Since(revoked)
	if d.Reason != "revoked" || d.Reconnect {
		t.Fatalf("sse disconnect %+v, want revoked without reconnect", d)
	}
	sseA.waitEOF(t)
	wsA.ClosedWith("revoked", session.CloseRevoked)
	cutWS := time.Since(revoked)
	release()
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
	release = revs.revokeHeld(t, auth.Revocation{TokenID: "j-c", Until: expC})
	wsC.ClosedWith("revoked", session.CloseRevoked)
	release()
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

// TestRevocationStoreOutage: while snapshots fail, the last good one stays
// in force (fail open for new revocations, closed for known ones), the
// failure is logged rate-limited and counted; once the store answers, the
// pending revocation cuts at the first pass that sees it.
func TestRevocationStoreOutage(t *testing.T) {
	t.Parallel()
	revs := holdRevocations(auth.NewMemoryRevocations())
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
	release := revs.revokeHeld(t, auth.Revocation{SessionID: "s-b", Until: expB})
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
	c.ClosedWith("revoked", session.CloseRevoked)
	release()
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

	mu     sync.Mutex
	starts []time.Time   // when each call came
	held   chan struct{} // non-nil: calls after a denial wait for it (denyHeld)
	denied bool          // a denial was answered since denyHeld
}

// denyHeld makes the webhook deny from now on and holds every call after
// its first denial until the func it returns is called, at the latest
// when t ends: what that denial decides must happen without another call.
func (h *testHook) denyHeld(t *testing.T) func() {
	held := make(chan struct{})
	h.mu.Lock()
	h.held, h.denied = held, false
	h.mu.Unlock()
	h.allow.Store(false)
	return releaseOnce(t, &h.mu, func() { h.held = nil }, held)
}

// callStarts returns when each call came.
func (h *testHook) callStarts() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.starts...)
}

func newTestHook(t *testing.T) *testHook {
	t.Helper()
	h := &testHook{}
	h.allow.Store(true)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.starts = append(h.starts, time.Now())
		held, denied := h.held, h.denied
		h.mu.Unlock()
		h.calls.Add(1)
		if held != nil && denied {
			select {
			case <-held:
			case <-r.Context().Done():
				return
			}
		}
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
		if !allow {
			h.mu.Lock()
			h.denied = h.held != nil
			h.mu.Unlock()
		}
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
// when the answer's TTL lapses, not before; the first denial ends that
// subscription with an unsubscribed push while the grant-based one keeps
// delivering.
func TestReauthorizeWebhookWS(t *testing.T) {
	t.Parallel()
	hook, e, c := hookedWS(t)
	pub := e.publish("acme", "docs/1", `1`)
	if p := c.Pub(); p.Key.Channel != "docs/1" || p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}
	// Still allowed at the first recheck, which waited for the TTL: the
	// recheck is due a TTL after the decision, which came after the call.
	calls := hook.calls.Load()
	eventually(t, 5*time.Second, "a recheck", func() bool { return hook.calls.Load() > calls })
	if st := hook.callStarts(); len(st) < 2 || st[1].Sub(st[0]) < time.Second {
		t.Fatalf("webhook calls at %v: the recheck came before the answer's TTL (1s) lapsed", st)
	}

	flipped := time.Now()
	release := hook.denyHeld(t)
	f := c.NextFrame(10 * time.Second)
	ended := time.Since(flipped)
	release()
	if f.Push != "unsubscribed" || f.Ctl.Channel != "docs/1" || f.Ctl.Reason != "forbidden" || f.Ctl.Resubscribe ||
		!strings.Contains(f.Ctl.Message, "docs access withdrawn") {
		t.Fatalf("want unsubscribed docs/1 forbidden, got %s", f.Raw)
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
	revs := holdRevocations(auth.NewMemoryRevocations())
	const timeout = 3 * time.Second
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
	// The first pass that sees the revocation cuts, though rechecks hang.
	release := revs.revokeHeld(t, auth.Revocation{SessionID: "victim", Until: exp})
	victim.ClosedWith("revoked", session.CloseRevoked)
	release()

	// The clock is read before the subscribe is sent, so the webhook
	// timeout cannot have run out earlier than waited says.
	start := time.Now()
	sub := c.Request(ws.OpSubscribe, map[string]any{"channel": "docs/2"})
	ping := c.Request(ws.OpPing, nil)
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
			if waited := time.Since(start); waited < timeout {
				t.Fatalf("denied after %s, before the webhook timeout", waited)
			}
		}
		got = append(got, f.ID)
	}
	if got[0] != ping {
		t.Fatalf("replies in order %v: the ping waited for the webhook", got)
	}
}
