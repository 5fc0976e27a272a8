package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
)

// corsEnv is a server that lets pages of app.example.com call it, with
// tickets enabled.
func corsEnv(t *testing.T) *testEnv {
	t.Helper()
	tickets, err := auth.NewMemoryTickets(auth.TicketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, envOptions{
		cfg:  Config{ConnectAttemptsPerIP: -1, AllowedOrigins: []string{"app.example.com"}},
		deps: func(d *Deps) { d.Tickets = tickets },
	})
}

// send does one request with headers (name, value pairs) and returns the
// response with its body read.
func (e *testEnv) send(t *testing.T, method, path string, headers ...string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestCORSPreflight(t *testing.T) {
	t.Parallel()
	e := corsEnv(t)
	for _, tc := range []struct{ path, method string }{{"/v1/tickets", "POST"}, {"/v1/sse", "GET"}} {
		resp, body := e.send(t, http.MethodOptions, tc.path, "Origin", "https://app.example.com",
			"Access-Control-Request-Method", tc.method, "Access-Control-Request-Headers", "authorization, last-event-id")
		h := resp.Header
		if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
			h.Get("Access-Control-Allow-Credentials") != "true" || h.Get("Access-Control-Allow-Methods") != tc.method ||
			!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") ||
			!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Last-Event-ID") || h.Get("Access-Control-Max-Age") == "" {
			t.Fatalf("%s preflight: %d %v %s", tc.path, resp.StatusCode, h, body)
		}
		resp, body = e.send(t, http.MethodOptions, tc.path, "Origin", "https://evil.example",
			"Access-Control-Request-Method", tc.method)
		var eb errorBody
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" ||
			json.Unmarshal([]byte(body), &eb) != nil || eb.Error.Code != "forbidden" {
			t.Fatalf("%s preflight from another origin: %d %v %s", tc.path, resp.StatusCode, resp.Header, body)
		}
	}
	// OPTIONS that is not a preflight is just a method the endpoint does
	// not answer.
	if resp, body := e.send(t, http.MethodOptions, "/v1/tickets"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("plain OPTIONS: %d %s", resp.StatusCode, body)
	}
	// The WebSocket endpoint has its own Origin check and no preflight.
	if resp, _ := e.send(t, http.MethodOptions, "/v1/ws", "Origin", "https://app.example.com",
		"Access-Control-Request-Method", "GET"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("OPTIONS /v1/ws: %d", resp.StatusCode)
	}
}

func TestCORSResponses(t *testing.T) {
	t.Parallel()
	e := corsEnv(t)
	tok := e.token("acme", "u1", "orders/*")

	// A ticket for a page of an allowed origin: readable by it.
	resp, body := e.send(t, http.MethodPost, "/v1/tickets", "Origin", "https://app.example.com", "Authorization", "Bearer "+tok)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		resp.Header.Get("Access-Control-Allow-Credentials") != "true" || !strings.Contains(resp.Header.Get("Vary"), "Origin") {
		t.Fatalf("ticket for an allowed origin: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	var tr ticketResponse
	if err := json.Unmarshal([]byte(body), &tr); err != nil || tr.Ticket == "" {
		t.Fatalf("ticket body %s: %v", body, err)
	}
	// Another origin: served, but without the headers that let its page
	// read the answer.
	resp, _ = e.send(t, http.MethodPost, "/v1/tickets", "Origin", "https://evil.example", "Authorization", "Bearer "+tok)
	if resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("ticket for another origin carries CORS headers: %v", resp.Header)
	}
	// The server's own origin needs none.
	resp, _ = e.send(t, http.MethodPost, "/v1/tickets", "Origin", "http://"+strings.TrimPrefix(e.base, "http://"), "Authorization", "Bearer "+tok)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("same-origin ticket: %d %v", resp.StatusCode, resp.Header)
	}

	// An event stream for an allowed origin, opened with the ticket.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		e.base+"/v1/sse?"+url.Values{"channel": {"orders/1"}, "ticket": {tr.Ticket}}.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", "https://app.example.com")
	stream, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := newSSEStream(stream, cancel)
	t.Cleanup(s.close)
	if stream.StatusCode != http.StatusOK || stream.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		stream.Header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Fatalf("stream: %d %v", stream.StatusCode, stream.Header)
	}
	s.next(t, 5*time.Second)
	s.subscribed(t)
	pub := e.publish("acme", "orders/1", `1`)
	if _, p := s.publication(t); p.Offset != pub.Offset {
		t.Fatalf("got %+v, want offset %d", p, pub.Offset)
	}
}
