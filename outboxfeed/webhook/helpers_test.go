package webhook

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Fixed test secrets: 32 random bytes each. Their base64 parts are
// distinctive, so a test can look for them in any output.
const (
	testSecretA Secret = "whsec_Nm8b7X2m0qkq3v9sQ8pZkR4y1WcT6hJd5LaE2uFgYiM="
	testSecretB Secret = "whsec_q2Hn4cX8bV1zR7tY0uKm3sLp9wDf6gJe5aNi8oQhTkU="
	testSecretC Secret = "whsec_Zx5Cv8Bn2Mq4Wl7Ek1Rt9Yu3Io6Pa0Sd5Fg8Hj2Kl4E="
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
	rc := &receiver{handle: handle, arrived: make(chan struct{}, 10000)}
	rc.Server = httptest.NewUnstartedServer(http.HandlerFunc(rc.serve))
	rc.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			rc.conns.Add(1)
		}
	}
	rc.Start()
	t.Cleanup(rc.Close)
	return rc
}

// newTLSReceiver is newReceiver over TLS with HTTP/2 offered.
func newTLSReceiver(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{handle: handle, arrived: make(chan struct{}, 10000)}
	rc.Server = httptest.NewUnstartedServer(http.HandlerFunc(rc.serve))
	rc.EnableHTTP2 = true
	rc.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			rc.conns.Add(1)
		}
	}
	rc.StartTLS()
	t.Cleanup(rc.Close)
	return rc
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

var testTime = time.Date(2025, 3, 1, 10, 15, 30, 123456000, time.UTC)

func testMessage(id string) Message {
	return Message{
		ID:            id,
		Tenant:        "acme",
		Channel:       "billing/invoices",
		Kind:          "integration_event",
		Type:          "invoice.paid",
		SchemaVersion: 2,
		Time:          testTime,
		Data:          json.RawMessage(`{"invoice":"in_42","amount":1250}`),
	}
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

// secretParts are the base64 parts of the test secrets, for leak checks.
func secretParts() []string {
	var out []string
	for _, s := range []Secret{testSecretA, testSecretB, testSecretC} {
		out = append(out, strings.TrimPrefix(string(s), SecretPrefix))
	}
	return out
}

// noSecret fails the test if out holds any test secret or a long piece of
// one.
func noSecret(t *testing.T, what, out string) {
	t.Helper()
	for _, p := range secretParts() {
		for i := 0; i+12 <= len(p); i += 4 {
			if j := strings.Index(out, p[i:i+12]); j >= 0 {
				t.Fatalf("%s holds a piece of a secret: …%q…", what, out[max(0, j-200):min(len(out), j+100)])
			}
		}
	}
}
