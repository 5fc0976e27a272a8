package webhook

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// received is one request a receiver got.
type received struct {
	Header http.Header
	Body   []byte
	Proto  string
}

// receiver is a real HTTP server on loopback that records every request,
// counts the connections it accepted, and answers with handle (204 when
// nil).
type receiver struct {
	*httptest.Server
	conns atomic.Int64

	mu       sync.Mutex
	requests []received
	handle   func(w http.ResponseWriter, r *http.Request)
	arrived  chan struct{} // gets a value per request (buffered, never blocks)
}

func newReceiver(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	return startReceiver(t, handle, false)
}

// newTLSReceiver is newReceiver over TLS with HTTP/2 offered.
func newTLSReceiver(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	return startReceiver(t, handle, true)
}

func startReceiver(t *testing.T, handle func(w http.ResponseWriter, r *http.Request), tls bool) *receiver {
	t.Helper()
	rc := &receiver{handle: handle, arrived: make(chan struct{}, 10000)}
	rc.Server = httptest.NewUnstartedServer(http.HandlerFunc(rc.serve))
	countConns(rc.Server, &rc.conns)
	if tls {
		rc.EnableHTTP2 = true
		rc.StartTLS()
	} else {
		rc.Start()
	}
	t.Cleanup(rc.Close)
	return rc
}

// countConns makes srv count in n each connection it accepts.
func countConns(srv *httptest.Server, n *atomic.Int64) {
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
}

// bodyKey carries the request body the receiver read to its handler.
type bodyKey struct{}

// lastBody is the body of r as the receiver read it.
func lastBody(r *http.Request) []byte { b, _ := r.Context().Value(bodyKey{}).([]byte); return b }

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, body))
	rc.mu.Lock()
	rc.requests = append(rc.requests, received{Header: r.Header.Clone(), Body: body, Proto: r.Proto})
	handle := rc.handle
	rc.mu.Unlock()
	select {
	case rc.arrived <- struct{}{}:
	default:
	}
	if handle == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	handle(w, r)
}

func (rc *receiver) got() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.requests...)
}

// testConfig is a Config for url that may reach loopback.
func testConfig(url string) Config {
	return Config{Name: "billing", URL: url, Secret: testSecretA, AllowPrivateNetwork: true, Timeout: 5 * time.Second}
}

func newEndpoint(t *testing.T, cfg Config) *Endpoint {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(e.Close)
	return e
}

func deliver(t *testing.T, e *Endpoint, m Message) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return e.Deliver(ctx, m)
}

// wantClass fails the test unless r has the class and reason.
func wantClass(t *testing.T, r Result, class Class, reason Reason) {
	t.Helper()
	if r.Class != class || r.Reason != reason {
		t.Fatalf("result %v/%s (status %d, err %v); want %v/%s", r.Class, r.Reason, r.Status, r.Err, class, reason)
	}
	if Reasons[r.Reason] != r.Class {
		t.Fatalf("reason %s comes with class %v, not %v", r.Reason, Reasons[r.Reason], r.Class)
	}
}

// freePort returns a loopback address nothing listens on (it was free a
// moment ago; the kernel does not hand it out again at once).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
