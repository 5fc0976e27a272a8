package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
)

// These tests drive a whole server: a stream is opened by the server's
// SSE handler (its request, credentials and channels, the head of the
// stream), and what they check is counted in the server's metrics. The
// SSE framing alone is tested in internal/sse.

// TestSSEClientCloseEndsStream: a client closing an idle HTTP/1.1 stream,
// which left net/http, is noticed by its reader at once (no write is
// needed to find out): the stream is counted closed as client_closed and
// leaves the hub.
func TestSSEClientCloseEndsStream(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{HeartbeatInterval: time.Hour, ClientTimeout: 2 * time.Hour}})
	s := e.stream(e.token("acme", "u1", "orders/*"), "orders/1")
	if e.hub.Subscriptions() != 1 {
		t.Fatalf("hub subscriptions = %d, want 1", e.hub.Subscriptions())
	}
	s.close()
	eventually(t, time.Minute, "the stream to end and leave the hub", func() bool {
		return e.counter(e.srv.metrics.disconnects.WithLabelValues("sse", "client_closed")) == 1 &&
			e.counter(e.srv.metrics.connections.WithLabelValues("sse")) == 0 &&
			e.hub.Subscriptions() == 0
	})
}

// TestSSEStreamEndsWithChunkedBody: a stream the server ends (here at
// Stop) ends its chunked body properly after the disconnect event, so an
// HTTP client reads a complete response rather than a cut connection.
func TestSSEStreamEndsWithChunkedBody(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{ShutdownReconnectDelay: time.Millisecond}})
	s := e.stream(e.token("acme", "u1", "orders/*"), "orders/1")
	if len(s.resp.TransferEncoding) != 1 || s.resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("Transfer-Encoding %v, want chunked", s.resp.TransferEncoding)
	}
	pub := e.publish("acme", "orders/1", `{"n":1}`)
	if _, p := s.publication(t); p.Offset != pub.Offset {
		t.Fatalf("offset %d, want %d", p.Offset, pub.Offset)
	}
	e.srv.Stop()
	if d := s.control(t, "disconnect"); d.Reason != session.ReasonShutdown.Code {
		t.Fatalf("disconnect reason %q", d.Reason)
	}
	s.waitEOF(t)
	if s.err.Error() != "EOF" {
		t.Fatalf("body ended with %v, want a clean EOF", s.err)
	}
}

// TestSSEOverHTTP2: an HTTP/2 stream, which cannot be hijacked, is served
// through net/http as before: head, publications, heartbeats, and its end
// when the client goes.
func TestSSEOverHTTP2(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{HeartbeatInterval: 20 * time.Millisecond}})
	ts := httptest.NewUnstartedServer(e.srv.Handler())
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/v1/sse?channel=orders/1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.token("acme", "u1", "orders/*"))
	resp, err := ts.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("%s %d, want HTTP/2 200", resp.Proto, resp.StatusCode)
	}
	s := newSSEStream(resp, cancel)
	defer s.close()
	if ev := s.next(t, time.Minute); ev.Retry == "" {
		t.Fatalf("first block is not the retry field: %+v", ev)
	}
	s.subscribed(t)
	var pubs []fanout.Publication
	for range 3 {
		pubs = append(pubs, e.publish("acme", "orders/1", `{"n":1}`))
	}
	pings := 0
	for got := 0; got < len(pubs) || pings == 0; {
		ev := s.next(t, time.Minute)
		switch {
		case len(ev.Comments) == 1 && ev.Comments[0] == "ping":
			pings++
		case ev.Data != "":
			p, err := fanout.DecodeEnvelope([]byte(ev.Data))
			if err != nil {
				t.Fatal(err)
			}
			if p.Offset != pubs[got].Offset {
				t.Fatalf("offset %d, want %d", p.Offset, pubs[got].Offset)
			}
			got++
		}
	}
	s.close()
	eventually(t, time.Minute, "the HTTP/2 stream to end", func() bool {
		return e.counter(e.srv.metrics.connections.WithLabelValues("sse")) == 0 && e.hub.Subscriptions() == 0
	})
}

// TestSSEWriteTimeout: a hijacked stream whose client stops reading, with
// a queue large enough never to fill, ends as write_timeout once a write
// has been blocked for WriteTimeout.
func TestSSEWriteTimeout(t *testing.T) {
	e := newEnv(t, envOptions{history: 1000, cfg: Config{
		WriteTimeout: 300 * time.Millisecond, QueueMaxBytes: 64 << 20, QueueMaxMessages: 100000,
	}})
	ts := smallBufferServer(t, e)
	openStalledAt(t, ts.Listener.Addr().String(), e.token("acme", "u1", "orders/*"), testRecvBuffer)
	timeouts := e.srv.metrics.disconnects.WithLabelValues("sse", session.ReasonWriteTimeout.Code)
	payload := `"` + strings.Repeat("x", 16<<10) + `"`
	for range 100 { // 1.6 MB: far more than the socket buffers hold
		e.publish("acme", "orders/1", payload)
	}
	eventually(t, time.Minute, "the stalled stream to end as write_timeout", func() bool {
		return e.counter(timeouts) == 1
	})
	if n := e.counter(e.srv.metrics.disconnects.WithLabelValues("sse", session.ReasonSlow.Code)); n != 0 {
		t.Fatalf("%v slow disconnects, want the write timeout alone", n)
	}
}
