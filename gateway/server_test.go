package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"
)

func TestGracefulStopTellsStreamsToReconnect(t *testing.T) {
	delay := 300 * time.Millisecond
	e := newEnv(t, envOptions{cfg: Config{ShutdownReconnectDelay: delay}})
	tok := e.token("acme", "u1", "orders/*")
	streams := []*sseStream{e.stream(tok, "orders/1"), e.stream(tok, "orders/1", "orders/2")}

	e.srv.Stop()
	for _, s := range streams {
		d := s.control(t, "disconnect")
		if d.Reason != "shutdown" || !d.Reconnect || d.DelayMS < 0 || d.DelayMS > delay.Milliseconds() {
			t.Fatalf("disconnect = %+v, want shutdown, reconnect, delay in [0, %d]", d, delay.Milliseconds())
		}
		s.waitEOF(t)
	}
	if n := e.counter(e.srv.metrics.disconnects.WithLabelValues("sse", "shutdown")); n != 2 {
		t.Fatalf("herald_disconnects_total{sse,shutdown} = %v", n)
	}
	if n := e.counter(e.srv.metrics.connections.WithLabelValues("sse")); n != 0 {
		t.Fatalf("herald_connections{sse} = %v after stop", n)
	}
	e.srv.Stop() // twice is safe
	if err := e.srv.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop = %v", err)
	}
	if _, err := e.client.Get(e.base + "/healthz"); err == nil {
		t.Fatalf("the listener still accepts after Stop")
	}
}

func TestStartStopLifecycle(t *testing.T) {
	e := newEnv(t, envOptions{})
	if err := e.srv.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v", err)
	}

	// Stop before Start is safe, and so is a cancelled Start context.
	srv, err := New(Config{Listen: "127.0.0.1:0"}, Deps{
		Verifier: e.srv.deps.Verifier, Authorizer: e.srv.deps.Authorizer, Broker: e.broker, Hub: e.hub,
	})
	if err != nil {
		t.Fatal(err)
	}
	if srv.Addr() != "" {
		t.Fatalf("Addr before Start = %q", srv.Addr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	srv.Stop()
	srv.Stop()

	unstarted, err := New(Config{}, Deps{
		Verifier: e.srv.deps.Verifier, Authorizer: e.srv.deps.Authorizer, Broker: e.broker, Hub: e.hub,
	})
	if err != nil {
		t.Fatal(err)
	}
	unstarted.Stop()
	unstarted.Stop()
	if got := unstarted.Config().Listen; got != DefaultListen {
		t.Fatalf("default Listen = %q", got)
	}

	// Starting on a port in use fails with a clear error.
	clash, err := New(Config{Listen: e.srv.Addr()}, Deps{
		Verifier: e.srv.deps.Verifier, Authorizer: e.srv.deps.Authorizer, Broker: e.broker, Hub: e.hub,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := clash.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "listen on") {
		t.Fatalf("Start on a busy port = %v", err)
	}
	clash.Stop()
}

func TestHealthAndReadiness(t *testing.T) {
	failing := errors.New("connection refused")
	var broken atomic.Bool
	e := newEnv(t, envOptions{readyChecks: []ReadyCheck{
		{Name: "outbox", Check: func(ctx context.Context) error { return nil }},
		{Name: "redis", Check: func(ctx context.Context) error {
			if broken.Load() {
				return failing
			}
			return nil
		}},
	}})
	if code, _, body := e.get("/healthz"); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	code, _, body := e.get("/readyz")
	if code != 200 {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	broken.Store(true)
	code, hdr, body := e.get("/readyz")
	if code != 503 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("/readyz with a failing check = %d %s", code, body)
	}
	var ans readyAnswer
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Status != "not_ready" || ans.Checks["redis"] != "error: connection refused" || ans.Checks["outbox"] != "ok" {
		t.Fatalf("/readyz answer %+v", ans)
	}
}

func TestMetricsExposition(t *testing.T) {
	e := newEnv(t, envOptions{})
	tok := e.token("acme", "u1", "orders/*")
	s := e.stream(tok, "orders/1")
	e.publish("acme", "orders/1", `1`)
	s.publication(t)
	e.get("/healthz")
	e.get("/nope/secret-path")

	code, hdr, body := e.get("/metrics")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics = %d %s", code, hdr.Get("Content-Type"))
	}
	for _, want := range []string{
		`herald_connections{transport="sse"} 1`,
		`herald_connections_total{transport="sse"} 1`,
		`herald_deliveries_total{transport="sse"} 1`,
		`herald_disconnects_total{reason="slow",transport="sse"} 0`,
		`herald_queue_dropped_total 0`,
		`herald_http_requests_total{code="200",path="/healthz"} 1`,
		`herald_http_requests_total{code="200",path="/v1/sse"} 1`,
		`herald_http_requests_total{code="404",path="other"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, "secret-path") {
		t.Errorf("an unknown path became a label value")
	}
}

func TestMetricsWithoutGatherer(t *testing.T) {
	e := newEnv(t, envOptions{deps: func(d *Deps) { d.Registerer = nil }})
	if code, _, _ := e.get("/metrics"); code != 404 {
		t.Fatalf("/metrics without a gatherer = %d", code)
	}
}

func TestDemoPageAndClient(t *testing.T) {
	e := newEnv(t, envOptions{deps: func(d *Deps) {
		d.ClientJS = fstest.MapFS{
			"herald.js": {Data: []byte("export class Herald {}\n")},
			"core.js":   {Data: []byte("export const core = 1;\n")},
			"notes.txt": {Data: []byte("not a module\n")},
			"sub/x.js":  {Data: []byte("export {};\n")},
		}
	}})
	code, hdr, body := e.get("/")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("/ = %d %s", code, hdr.Get("Content-Type"))
	}
	for _, want := range []string{"EventSource", "/v1/sse", "access_token", "subscribed", "disconnect"} {
		if !strings.Contains(body, want) {
			t.Errorf("demo page lacks %q", want)
		}
	}
	for _, external := range []string{"http://", "https://", "//cdn"} {
		if strings.Contains(body, external) {
			t.Errorf("demo page refers to an external resource (%q)", external)
		}
	}
	if !strings.Contains(hdr.Get("Content-Security-Policy"), "connect-src 'self'") {
		t.Errorf("demo CSP = %q", hdr.Get("Content-Security-Policy"))
	}
	code, hdr, body = e.get("/client/herald.js")
	if code != 200 || body != "export class Herald {}\n" || !strings.HasPrefix(hdr.Get("Content-Type"), "text/javascript") {
		t.Fatalf("/client/herald.js = %d %q %q", code, hdr.Get("Content-Type"), body)
	}
	if got := hdr.Get("Access-Control-Allow-Origin"); got != "*" {
		t.Errorf("/client/herald.js Access-Control-Allow-Origin = %q, want * (importable as a module from any origin)", got)
	}
	checkClientModules(t, e)

	bare := newEnv(t, envOptions{})
	if code, _, _ := bare.get("/client/herald.js"); code != 404 {
		t.Fatalf("/client/herald.js without ClientJS = %d", code)
	}
	resp, err := bare.client.Post(bare.base+"/v1/sse", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" {
		t.Fatalf("POST /v1/sse = %d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// checkClientModules checks the modules under /client/ beside herald.js:
// JavaScript, revalidated by ETag; nothing but .js files inside the folder.
func checkClientModules(t *testing.T, e *testEnv) {
	t.Helper()
	code, hdr, body := e.get("/client/core.js")
	if code != 200 || body != "export const core = 1;\n" || hdr.Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Fatalf("/client/core.js = %d %q %q", code, hdr.Get("Content-Type"), body)
	}
	etag := hdr.Get("ETag")
	if hdr.Get("Cache-Control") != "no-cache" || !strings.HasPrefix(etag, `"`) || hdr.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("/client/core.js headers: Cache-Control %q, ETag %q, X-Content-Type-Options %q", hdr.Get("Cache-Control"), etag, hdr.Get("X-Content-Type-Options"))
	}
	req, _ := http.NewRequest(http.MethodGet, e.base+"/client/core.js", nil)
	req.Header.Set("If-None-Match", etag)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("/client/core.js with If-None-Match its ETag = %d, want 304", resp.StatusCode)
	}
	if code, _, _ := e.get("/client/sub/x.js"); code != 200 {
		t.Errorf("/client/sub/x.js = %d", code)
	}
	for _, p := range []string{"/client/notes.txt", "/client/missing.js", "/client/", "/client/../herald.js", "/client/sub/../../herald.js"} {
		if code, _, _ := e.get(p); code != 404 {
			t.Errorf("%s = %d, want 404", p, code)
		}
	}
}

func TestStopRefusesNewStreamsWhileDraining(t *testing.T) {
	e := newEnv(t, envOptions{})
	tok := e.token("acme", "u1", "orders/*")
	s := e.stream(tok, "orders/1")
	e.srv.Stop()
	s.control(t, "disconnect")
	// Through the handler directly (the listener is closed): a stream that
	// arrives while stopping is refused with 503 shutdown.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/sse?channel=orders/1", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	e.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), `"shutdown"`) {
		t.Fatalf("stream during shutdown = %d %s", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "shutdown") {
		t.Fatalf("/readyz while stopping = %d %s", rec.Code, rec.Body.String())
	}
}

// TestHeaderTimeout: a client that sends half a request line and stops
// has its connection closed (at most with net/http's 400) once HeaderTimeout
// passes — well before the 10s default would close it. The timeout is
// a second, not less: the request of the last step must reach the server
// within it, however busy the machine.
func TestHeaderTimeout(t *testing.T) {
	const timeout = time.Second
	e := newEnv(t, envOptions{cfg: Config{HeaderTimeout: timeout}})
	if got := e.srv.Config().HeaderTimeout; got != timeout {
		t.Fatalf("Config().HeaderTimeout = %s", got)
	}
	conn, err := net.Dial("tcp", e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /heal")); err != nil {
		t.Fatal(err)
	}
	// Only a guard against hanging: half the default, so a server still
	// on the default fails here.
	if err := conn.SetReadDeadline(time.Now().Add(DefaultHeaderTimeout / 2)); err != nil {
		t.Fatal(err)
	}
	// The close event: the read ends with EOF (or a reset).
	b, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection was still open %s after the half request (HeaderTimeout %s)", DefaultHeaderTimeout/2, timeout)
	}
	if len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
		t.Fatalf("the server answered %q", b)
	}

	// A client that sends its whole request in time is answered.
	if code, _, _ := e.get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
}
