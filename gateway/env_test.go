package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
	"github.com/heraldgw/herald/fanout/redisbroker"
	"github.com/heraldgw/herald/gateway/internal/sessiontest"
	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/subscriptions"
)

var testSecret = []byte("gateway-test-secret")

// testEnv is a gateway on 127.0.0.1:0 over a real MemoryBroker and Hub.
type testEnv struct {
	t      *testing.T
	srv    *Server
	base   string
	broker fanout.Broker
	hub    *fanout.Hub
	reg    *prometheus.Registry
	client *http.Client
	logs   *testenv.SyncBuffer
}

type envOptions struct {
	cfg     Config
	history int
	// historyTTL is the in-memory broker's HistoryTTL; 0: its default.
	historyTTL time.Duration
	// broker is the history and fan-out: "" (in memory), "redis" (the
	// test Redis, a key prefix of the test's own) or "cluster" (a Redis
	// Cluster the test starts).
	broker      string
	readyChecks []ReadyCheck
	deps        func(*Deps)
}

// newTestBroker makes the broker o names.
func newTestBroker(t testing.TB, o envOptions) (fanout.Broker, error) {
	switch o.broker {
	case "":
		return fanout.NewMemoryBroker(fanout.MemoryConfig{HistorySize: o.history, HistoryTTL: o.historyTTL})
	case "redis":
		url, prefix := testenv.Redis(t)
		return redisbroker.New(redisbroker.Config{URL: url, KeyPrefix: prefix, HistorySize: o.history})
	case "cluster":
		c := testenv.StartRedisCluster(t)
		return redisbroker.New(redisbroker.Config{
			URL: "redis://" + c.Addrs[0], Cluster: true, HistorySize: o.history,
			KeyPrefix: "herald_t_" + testenv.Suffix() + ":",
		})
	}
	return nil, fmt.Errorf("no broker %q", o.broker)
}

func newEnv(t *testing.T, o envOptions) *testEnv {
	t.Helper()
	e := startTestServer(t, o)
	e.t = t
	return e
}

// startTestServer starts a gateway on 127.0.0.1:0 for o over a broker and
// hub of its own, stopped when tb ends; the testEnv it returns has no t
// (newEnv sets it).
func startTestServer(tb testing.TB, o envOptions) *testEnv {
	tb.Helper()
	broker, err := newTestBroker(tb, o)
	if err != nil {
		tb.Fatal(err)
	}
	hub := fanouttest.StartHub(tb, broker, fanout.HubConfig{})

	logs := &testenv.SyncBuffer{}
	reg := prometheus.NewRegistry()
	cfg := o.cfg
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	deps := Deps{
		Verifier:    auth.NewHMACVerifier(testSecret, 0),
		Authorizer:  &subscriptions.Authorizer{},
		Broker:      broker,
		Hub:         hub,
		ReadyChecks: o.readyChecks,
		Logger:      slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer:  reg,
	}
	if o.deps != nil {
		o.deps(&deps)
	}
	srv, err := New(cfg, deps)
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	e := &testEnv{
		srv: srv, base: "http://" + srv.Addr(), broker: broker, hub: hub, reg: reg,
		client: &http.Client{Transport: tr}, logs: logs,
	}
	tb.Cleanup(func() {
		srv.Stop()
		tr.CloseIdleConnections()
	})
	return e
}

// token mints a token for tenant and subject with grants, valid for an hour.
func (e *testEnv) token(tenant, sub string, grants ...string) string {
	e.t.Helper()
	return e.tokenExp(tenant, sub, time.Now().Add(time.Hour), grants...)
}

func (e *testEnv) tokenExp(tenant, sub string, exp time.Time, grants ...string) string {
	e.t.Helper()
	tok, err := auth.MintHS256(testSecret, auth.Claims{
		Subject: sub, Tenant: tenant, Subscribe: grants, ExpiresAt: exp,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// request is one GET to the gateway.
type request struct {
	path   string
	query  url.Values
	bearer string
	// authorization is a raw Authorization header (instead of bearer).
	authorization string
	cookie        string
	lastID        string
	headers       []string // more header pairs: name, value, ...
}

func (e *testEnv) do(r request) (*http.Response, context.CancelFunc) {
	e.t.Helper()
	u := e.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	if r.authorization != "" {
		req.Header.Set("Authorization", r.authorization)
	}
	if r.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	if r.cookie != "" {
		req.AddCookie(&http.Cookie{Name: DefaultCookieName, Value: r.cookie})
	}
	if r.lastID != "" {
		req.Header.Set("Last-Event-ID", r.lastID)
	}
	for i := 0; i+1 < len(r.headers); i += 2 {
		req.Header.Add(r.headers[i], r.headers[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		cancel()
		e.t.Fatalf("GET %s: %v", r.path, err)
	}
	return resp, cancel
}

// open starts a stream that must be accepted.
func (e *testEnv) open(r request) *sseStream {
	e.t.Helper()
	if r.path == "" {
		r.path = "/v1/sse"
	}
	resp, cancel := e.do(r)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		e.t.Fatalf("GET %s: status %d: %s", r.path, resp.StatusCode, b)
	}
	s := newSSEStream(resp, cancel)
	e.t.Cleanup(s.close)
	return s
}

// stream opens /v1/sse for channels with a bearer token and reads up to
// the subscribed events.
func (e *testEnv) stream(token string, channels ...string) *sseStream {
	e.t.Helper()
	s, _ := e.resume(token, "", channels...)
	return s
}

// resume opens /v1/sse for channels with a bearer token and lastID as
// Last-Event-ID ("": none), and returns it with its subscribed events.
func (e *testEnv) resume(token, lastID string, channels ...string) (*sseStream, []sse.SubscribedEvent) {
	e.t.Helper()
	s := e.open(request{bearer: token, query: url.Values{"channel": channels}, lastID: lastID})
	if ev := s.next(e.t, 5*time.Second); ev.Retry == "" {
		e.t.Fatalf("first block is not the retry field: %+v", ev)
	}
	subs := make([]sse.SubscribedEvent, len(channels))
	for i := range subs {
		_, subs[i] = s.subscribed(e.t)
	}
	return s, subs
}

// refused does a request that must be refused with status and code.
func (e *testEnv) refused(r request, status int, code string) string {
	e.t.Helper()
	if r.path == "" {
		r.path = "/v1/sse"
	}
	resp, cancel := e.do(r)
	defer cancel()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		e.t.Fatalf("GET %s?%s: status %d, want %d: %s", r.path, r.query.Encode(), resp.StatusCode, status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("Content-Type %q, want application/json", ct)
	}
	var body errorBody
	if err := json.Unmarshal(b, &body); err != nil {
		e.t.Fatalf("body %s: %v", b, err)
	}
	if body.Error.Code != code || body.Error.Message == "" {
		e.t.Fatalf("error %+v, want code %q and a message", body.Error, code)
	}
	return body.Error.Message
}

// publish publishes one message and returns its publication.
func (e *testEnv) publish(tenant, channel string, data string) fanout.Publication {
	e.t.Helper()
	return sessiontest.Publish(e.t, e.broker, tenant, channel, data)
}

// counter reads the value of one counter or gauge series.
func (e *testEnv) counter(m prometheus.Metric) float64 {
	e.t.Helper()
	return testenv.MetricValue(e.t, m)
}

// get fetches path and returns status and body.
func (e *testEnv) get(path string) (int, http.Header, string) {
	e.t.Helper()
	resp, cancel := e.do(request{path: path})
	defer cancel()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func q(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// mintWith mints a valid-looking token with another secret.
func mintWith(secret []byte, tenant string) (string, error) {
	return auth.MintHS256(secret, auth.Claims{
		Subject: "u1", Tenant: tenant, Subscribe: []string{"**"}, ExpiresAt: time.Now().Add(time.Hour),
	})
}

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

// eventSourceGet sends GET /v1/sse?query as a browser's EventSource does
// (Accept: text/event-stream), with extra headers.
func (e *testEnv) eventSourceGet(t *testing.T, query url.Values, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.base+"/v1/sse?"+query.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
