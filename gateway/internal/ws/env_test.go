package ws_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
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
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/internal/ratelog"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/subscriptions"
)

var testSecret = []byte("ws-test-secret")

// authorizer decides subscriptions (subscriptions.Authorizer, or a test's
// wrapper around it).
type authorizer interface {
	Authorize(ctx context.Context, r subscriptions.Request) (subscriptions.Decision, error)
}

// recoverer answers the core's recovery requests (the broker, or a test's
// wrapper around it).
type recoverer interface {
	Recover(ctx context.Context, key fanout.Key, since fanout.Position, limit int) (fanout.Recovery, error)
}

// testEnv serves the WebSocket transport alone, on real TCP connections:
// an httptest server whose handler hands every upgrade to ws.Accept, over
// a connection core of its own (an in-memory broker and hub). It admits a
// connect frame's HS256 token as the server does (verified, then not
// expired more than ExpiryGrace ago) and releases a connection once
// ws.Conn.Run returns; the upgrade request's credentials, the connection
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
	runs     sync.WaitGroup // the connections' Run

	mu     sync.Mutex
	conns  map[*session.Conn]struct{} // accepted, Run not returned
	closed map[string]int             // connections whose Run returned, by reason
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
	// history wraps what the core recovers from (the broker).
	recoverer func(recoverer) recoverer
	noPublish bool // no broker to take client publications
	// listener wraps the server's listener.
	listener func(net.Listener) net.Listener
}

// withDefaults fills the zero bounds with the server's defaults.
func withDefaults(b session.Bounds) session.Bounds {
	setInt := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setDur := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	setInt(&b.QueueMaxBytes, 1<<20)
	setInt(&b.QueueMaxMessages, 1024)
	setInt(&b.MaxSubscriptions, 128)
	setInt(&b.MaxMessageSize, ws.DefaultMaxMessageSize)
	setInt(&b.MaxInflight, 16)
	setDur(&b.HeartbeatInterval, 15*time.Second)
	setDur(&b.WriteTimeout, 10*time.Second)
	setDur(&b.ConnectTimeout, 10*time.Second)
	setDur(&b.ClientTimeout, 60*time.Second)
	setDur(&b.RefreshAhead, 60*time.Second)
	setDur(&b.ExpiryGrace, 5*time.Second)
	return b
}

// newEnv starts a testEnv for o, stopped when t ends.
func newEnv(t *testing.T, o envOptions) *testEnv {
	t.Helper()
	broker, err := fanout.NewMemoryBroker(fanout.MemoryConfig{HistorySize: o.history, HistoryTTL: o.historyTTL})
	if err != nil {
		t.Fatal(err)
	}
	hub, err := fanout.NewHub(broker, fanout.HubConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := broker.Start(context.Background(), hub); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Stop)

	vec := func(name string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name}, labels)
	}
	counter := func(name string) prometheus.Counter { return prometheus.NewCounter(prometheus.CounterOpts{Name: name}) }
	log := ratelog.New(slog.New(slog.DiscardHandler), 10*time.Second, 20)
	b := withDefaults(o.bounds)
	if b.HistorySize == 0 {
		b.HistorySize = o.history
	}
	if b.HistoryTTL == 0 {
		b.HistoryTTL = o.historyTTL
	}
	var history recoverer = broker
	if o.recoverer != nil {
		history = o.recoverer(broker)
	}
	var authz authorizer = &subscriptions.Authorizer{}
	if o.authz != nil {
		authz = o.authz(authz)
	}
	e := &testEnv{
		t: t, broker: broker, hub: hub,
		requests: vec("herald_ws_requests_total", "op", "result"),
		limits:   vec("herald_limit_rejections_total", "limit"),
		client:   &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		verifier: auth.NewHMACVerifier(testSecret, o.leeway),
		conns:    map[*session.Conn]struct{}{},
		closed:   map[string]int{},
	}
	e.env = &session.Env{
		Bounds:  b,
		Hub:     hub,
		History: history,
		Counters: session.Counters{
			Deliveries:     vec("herald_deliveries_total", "transport"),
			QueueDropped:   counter("herald_queue_dropped_total"),
			CatchUps:       vec("herald_catchups_total", "transport"),
			QueueLimit:     e.limits.WithLabelValues(session.LimitQueue),
			SubsEnded:      vec("herald_subscriptions_ended_total", "transport", "reason"),
			ReauthFailures: counter("herald_reauth_failures_total"),
		},
		Log:     log,
		Writers: session.NewWriterPool(),
	}
	version := o.version
	if version == "" {
		version = "dev"
	}
	e.wsEnv = &ws.Env{
		Version:   version,
		Authorize: authz.Authorize,
		Refresh:   e.verify,
		Log:       log,
		Requests:  e.requests,
		Limits:    e.limits,
	}
	if !o.noPublish {
		e.wsEnv.Publish = broker.Publish
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(e.serve))
	if o.listener != nil {
		srv.Listener = o.listener(srv.Listener)
	}
	srv.Start()
	e.addr = srv.Listener.Addr().String()
	t.Cleanup(func() {
		srv.Close()
		e.mu.Lock()
		for c := range e.conns {
			c.HardClose(session.ReasonShutdown)
		}
		e.mu.Unlock()
		e.runs.Wait()
		e.env.Writers.Stop()
		e.client.CloseIdleConnections()
	})
	return e
}

// serve upgrades one request and runs the connection until it ends.
func (e *testEnv) serve(w http.ResponseWriter, r *http.Request) {
	c := session.New(e.env, e.ids.Add(1), "ws", &auth.Claims{}, r.RemoteAddr)
	connect := func(_ context.Context, token string) (*auth.Claims, session.Reason, string) {
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
	go func() {
		defer e.runs.Done()
		wc.Run()
		e.mu.Lock()
		delete(e.conns, c)
		e.closed[c.Reason().Code]++
		e.mu.Unlock()
	}()
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

// liveConns returns the connections whose Run has not returned.
func (e *testEnv) liveConns() []*session.Conn {
	e.mu.Lock()
	defer e.mu.Unlock()
	var l []*session.Conn
	for c := range e.conns {
		l = append(l, c)
	}
	return l
}

// closedFor counts the connections that ended (Run returned) for reason.
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
	e.t.Helper()
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(e.wsToken("u1", subscribe, nil))
	return c
}

// wsToken mints a connection token with subscribe and publish grants.
func (e *testEnv) wsToken(sub string, subscribe, publish []string) string {
	e.t.Helper()
	return e.mint(sub, time.Now().Add(time.Hour), subscribe, publish)
}

func (e *testEnv) mint(sub string, exp time.Time, subscribe, publish []string) string {
	e.t.Helper()
	tok, err := mintClaims(sub, "acme", exp, subscribe, publish, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// mintClaims mints an HS256 token with testSecret.
func mintClaims(sub, tenant string, exp time.Time, subscribe, publish []string, channel string) (string, error) {
	return auth.MintHS256(testSecret, auth.Claims{
		Subject: sub, Tenant: tenant, Subscribe: subscribe, Publish: publish, Channel: channel, ExpiresAt: exp,
	})
}

// publish publishes data on the channel of tenant through the broker.
func (e *testEnv) publish(tenant, channel string, data string) fanout.Publication {
	e.t.Helper()
	return testenv.Publish(e.t, e.broker, tenant, channel, data)
}

// counter reads the value of one counter series.
func (e *testEnv) counter(m prometheus.Metric) float64 {
	e.t.Helper()
	return testenv.MetricValue(e.t, m)
}

// eventually polls cond until it holds, failing t after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}
