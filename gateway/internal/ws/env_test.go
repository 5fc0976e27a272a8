package ws_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sessiontest"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/subscriptions"
)

var testSecret = []byte("ws-test-secret")

// authorizer decides subscriptions (subscriptions.Authorizer, or a test's
// wrapper around it).
type authorizer interface {
	Authorize(ctx context.Context, r subscriptions.Request) (subscriptions.Decision, error)
}

// testEnv serves the WebSocket transport alone, on real TCP connections:
// an httptest server whose handler hands every upgrade to ws.Accept, over
// a connection core of its own (an in-memory broker and hub). It admits a
// connect frame's HS256 token as the server does (verified, then not
// expired more than ExpiryGrace ago) and releases a connection once
// it ended (ws.Conn.Start's done); the upgrade request's credentials, the connection
// slots and revocation are the server's and have no part here.
type testEnv struct {
	t        *testing.T
	addr     string
	broker   *fanout.MemoryBroker
	hub      *fanout.Hub
	requests *prometheus.CounterVec // herald_ws_requests_total{op,result}
	limits   *prometheus.CounterVec // herald_limit_rejections_total{limit}
	client   *http.Client

	env      *session.Env
	wsEnv    *ws.Env
	verifier *auth.HMACVerifier
	ids      atomic.Uint64
	// connectHook is envOptions.connect.
	connectHook func()
	runs        sync.WaitGroup // the connections, until they end

	mu     sync.Mutex
	conns  map[*session.Conn]struct{} // accepted, not ended
	closed map[string]int             // connections that ended, by reason
}

type envOptions struct {
	// bounds are the connections' bounds; zero fields take the server's
	// defaults (gateway.Config).
	bounds     session.Bounds
	history    int           // the broker's HistorySize; 0: its default
	historyTTL time.Duration // the broker's HistoryTTL; 0: its default
	version    string        // announced in the connect reply; default "dev"
	leeway     time.Duration // the verifier's allowance for clock skew
	// authz wraps the authorizer (subscriptions.Authorizer{}: grants only).
	authz func(authorizer) authorizer
	// recoverer wraps what the core recovers from (the broker).
	recoverer func(session.History) session.History
	// connect, when set, runs in each connect request's reader before the
	// token is checked: a test holds the reader there.
	connect func()
}

// newEnv starts a testEnv for o, stopped when t ends.
func newEnv(t *testing.T, o envOptions) *testEnv {
	t.Helper()
	var authz authorizer = &subscriptions.Authorizer{}
	if o.authz != nil {
		authz = o.authz(authz)
	}
	e := &testEnv{
		t:        t,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_ws_requests_total"}, []string{"op", "result"}),
		limits:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_limit_rejections_total"}, []string{"limit"}),
		client:   &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		verifier: auth.NewHMACVerifier(testSecret, o.leeway),
		conns:    map[*session.Conn]struct{}{},
		closed:   map[string]int{},

		connectHook: o.connect,
	}
	core := sessiontest.New(t, sessiontest.Options{
		Bounds: o.bounds, History: o.history, HistoryTTL: o.historyTTL, Recoverer: o.recoverer,
		QueueLimit: e.limits.WithLabelValues(session.LimitQueue),
	})
	e.env, e.broker, e.hub = core.Env, core.Broker, core.Hub
	version := o.version
	if version == "" {
		version = "dev"
	}
	e.wsEnv = &ws.Env{
		Version:   version,
		Publish:   e.broker.Publish,
		Authorize: authz.Authorize,
		Refresh:   e.verify,
		Log:       e.env.Log,
		Requests:  e.requests,
		Limits:    e.limits,
	}
	srv := httptest.NewServer(http.HandlerFunc(e.serve))
	e.addr = srv.Listener.Addr().String()
	t.Cleanup(func() { // before the core's: its writer pool, broker and hub
		srv.Close()
		e.mu.Lock()
		for c := range e.conns {
			c.HardClose(session.ReasonShutdown)
		}
		e.mu.Unlock()
		e.runs.Wait()
		e.client.CloseIdleConnections()
	})
	return e
}

// serve upgrades one request and runs the connection until it ends.
func (e *testEnv) serve(w http.ResponseWriter, r *http.Request) {
	c := session.New(e.env, e.ids.Add(1), "ws", &auth.Claims{}, r.RemoteAddr)
	connect := func(_ context.Context, token string) (*auth.Claims, session.Reason, string) {
		if e.connectHook != nil {
			e.connectHook()
		}
		claims, reason, msg := e.verify(token)
		if reason.Code == "" {
			c.Claims = claims
		}
		return claims, reason, msg
	}
	wc, err := ws.Accept(w, r, e.wsEnv, c, connect)
	if err != nil {
		c.Cancel()
		return
	}
	e.mu.Lock()
	e.conns[c] = struct{}{}
	e.mu.Unlock()
	e.runs.Add(1)
	wc.Start(func() {
		defer e.runs.Done()
		e.mu.Lock()
		delete(e.conns, c)
		e.closed[c.Reason().Code]++
		e.mu.Unlock()
	})
}

// verify admits a connect or refresh token: it verifies, and has not
// expired more than ExpiryGrace ago.
func (e *testEnv) verify(token string) (*auth.Claims, session.Reason, string) {
	if token == "" {
		return nil, session.ReasonUnauthorized, "no token: put it in the connect frame's token field"
	}
	claims, err := e.verifier.Verify(token)
	switch {
	case errors.Is(err, auth.ErrExpired):
		return nil, session.ReasonTokenExpired, "token expired: fetch a fresh one"
	case err != nil:
		return nil, session.ReasonUnauthorized, "token does not verify: " + err.Error()
	}
	if !claims.ExpiresAt.IsZero() && !time.Now().Before(claims.ExpiresAt.Add(e.env.Bounds.ExpiryGrace)) {
		return nil, session.ReasonTokenExpired, "token expired: fetch a fresh one"
	}
	return claims, session.Reason{}, ""
}

// closedFor counts the connections that ended for reason.
func (e *testEnv) closedFor(reason string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed[reason]
}

// dialWS opens a WebSocket and starts reading; it fails the test if the
// handshake fails.
func (e *testEnv) dialWS(o wstest.DialOpts) *wstest.Client {
	e.t.Helper()
	c, _, err := wstest.Dial(e.t, "ws://"+e.addr, o, e.client)
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	return c
}

// connected dials and connects with a token granting subscribe.
func (e *testEnv) connected(subscribe ...string) *wstest.Client {
	return e.dialWS(wstest.DialOpts{}).Connected(e.wsToken("u1", subscribe, nil))
}

// wsToken mints a connection token with subscribe and publish grants,
// valid for an hour.
func (e *testEnv) wsToken(sub string, subscribe, publish []string) string {
	return e.mint(sub, time.Now().Add(time.Hour), subscribe, publish)
}

// mint mints a connection token of tenant acme.
func (e *testEnv) mint(sub string, exp time.Time, subscribe, publish []string) string {
	return wstest.Mint(e.t, testSecret, auth.Claims{
		Subject: sub, Tenant: "acme", Subscribe: subscribe, Publish: publish, ExpiresAt: exp,
	})
}

// publish publishes data on the channel of tenant through the broker.
func (e *testEnv) publish(tenant, channel string, data string) fanout.Publication {
	e.t.Helper()
	return sessiontest.Publish(e.t, e.broker, tenant, channel, data)
}

// eventually polls cond until it holds, failing t after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}
