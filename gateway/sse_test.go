package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// These tests drive a whole server: an SSE request's credentials,
// channels, cursor and refusals are the server's handler's; the stream's
// framing is tested in internal/sse.

func TestSSEStreamHeadersRetryAndEnvelope(t *testing.T) {
	e := newEnv(t, envOptions{})
	tok := e.token("acme", "u1", "orders/*")
	s := e.open(request{bearer: tok, query: q("channel", "orders/1")})

	h := s.resp.Header
	for k, want := range map[string]string{
		"Content-Type":      "text/event-stream",
		"Cache-Control":     "no-cache",
		"X-Accel-Buffering": "no",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	// The headers arrived before anything was published; the retry field
	// comes first, then the subscribed event.
	if ev := s.next(t, 5*time.Second); ev.Retry != "2000" || ev.Name != "" || ev.Data != "" {
		t.Fatalf("first block = %+v, want only retry: 2000", ev)
	}
	sev, sub := s.subscribed(t)
	if sub.Channel != "orders/1" || sub.Recovered || sub.Offset != 0 || sub.Epoch == "" {
		t.Fatalf("subscribed = %+v", sub)
	}

	pub := e.publish("acme", "orders/1", `{"status": "paid"}`)
	ev, got := s.publication(t)
	if ev.ID == sev.ID {
		t.Fatalf("publication id did not advance past the subscribed id %q", ev.ID)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(ev.Data), &raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id", "channel", "offset", "epoch", "type", "schema_version", "time", "freshness", "data"} {
		if _, ok := raw[f]; !ok {
			t.Errorf("envelope lacks %q: %s", f, ev.Data)
		}
	}
	if got.ID != pub.ID || got.Key.Channel != "orders/1" || got.Offset != 1 || got.Epoch != pub.Epoch ||
		got.Type != "order.updated" || got.SchemaVersion != 1 ||
		string(got.Data) != `{"status":"paid"}` || string(got.Freshness) != `{"mode":"immediate"}` {
		t.Fatalf("envelope = %+v (raw %s)", got, ev.Data)
	}
	if strings.Contains(ev.Data, "acme") {
		t.Fatalf("the envelope carries the tenant: %s", ev.Data)
	}
	if n := e.counter(e.srv.metrics.deliveries.WithLabelValues("sse")); n != 1 {
		t.Fatalf("herald_deliveries_total{sse} = %v, want 1", n)
	}
}

func TestSSETenantIsolation(t *testing.T) {
	e := newEnv(t, envOptions{})
	acme := e.stream(e.token("acme", "u1", "orders/*"), "orders/1")
	other := e.stream(e.token("globex", "u1", "orders/*"), "orders/1")

	e.publish("acme", "orders/1", `{"for":"acme"}`)
	e.publish("globex", "orders/1", `{"for":"globex"}`)

	if _, p := acme.publication(t); string(p.Data) != `{"for":"acme"}` {
		t.Fatalf("acme got %s", p.Data)
	}
	// globex's first publication is its own: acme's never reached it.
	if _, p := other.publication(t); string(p.Data) != `{"for":"globex"}` || p.Offset != 1 {
		t.Fatalf("globex got %s at offset %d", p.Data, p.Offset)
	}
}

func TestSSEForbiddenIfAnyChannelIsNotGranted(t *testing.T) {
	e := newEnv(t, envOptions{})
	tok := e.token("acme", "u1", "orders/*", "users/{sub}/**")
	msg := e.refused(request{bearer: tok, query: q("channel", "orders/1", "channel", "users/u2/inbox")}, 403, "forbidden")
	if !contains(msg, "users/u2/inbox") {
		t.Errorf("message %q does not name the channel", msg)
	}
	// Allowed together they work; {sub} expands to the subject.
	s := e.stream(tok, "orders/1", "users/u1/inbox")
	e.publish("acme", "users/u1/inbox", `1`)
	if _, p := s.publication(t); p.Key.Channel != "users/u1/inbox" {
		t.Fatalf("got %+v", p)
	}
}

func TestSSEUnauthorized(t *testing.T) {
	e := newEnv(t, envOptions{})
	ch := q("channel", "orders/1")
	e.refused(request{query: ch}, 401, "unauthorized")
	e.refused(request{query: ch, bearer: "not-a-jwt"}, 401, "unauthorized")

	other, err := mintWith([]byte("another-secret"), "acme")
	if err != nil {
		t.Fatal(err)
	}
	e.refused(request{query: ch, bearer: other}, 401, "unauthorized")
	e.refused(request{query: ch, bearer: e.tokenExp("acme", "u1", time.Now().Add(-time.Minute), "orders/*")}, 401, "token_expired")

	resp, cancel := e.do(request{path: "/v1/sse", query: ch})
	defer cancel()
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("401 is not JSON")
	}
	if n := e.counter(e.srv.metrics.httpRequests.WithLabelValues("/v1/sse", "401")); n != 5 {
		t.Fatalf("herald_http_requests_total{/v1/sse,401} = %v, want 5", n)
	}
}

func TestSSEBadRequest(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{MaxSubscriptions: 2}})
	tok := e.token("acme", "u1", "**")
	cases := []struct {
		name   string
		r      request
		expect string
	}{
		{"no channel", request{bearer: tok}, "no channel"},
		{"empty channel", request{bearer: tok, query: q("channel", "")}, "empty"},
		{"bad segment", request{bearer: tok, query: q("channel", "orders//1")}, "empty segment"},
		{"bad byte", request{bearer: tok, query: q("channel", "orders/1 2")}, "not one of"},
		{"too many", request{bearer: tok, query: q("channel", "a", "channel", "b", "channel", "c")}, "at most 2"},
		{"bad cursor header", request{bearer: tok, query: q("channel", "a"), lastID: "!!!"}, "base64url"},
		{"bad cursor query", request{bearer: tok, query: q("channel", "a", "last_event_id", "AQ")}, "truncated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if msg := e.refused(c.r, 400, "bad_request"); !contains(msg, c.expect) {
				t.Fatalf("message %q lacks %q", msg, c.expect)
			}
		})
	}
	// Duplicates count once.
	e.stream(tok, "a")
	s := e.open(request{bearer: tok, query: q("channel", "a", "channel", "a", "channel", "b")})
	s.next(t, 5*time.Second)
	s.subscribed(t)
	s.subscribed(t)
}

func TestSSECredentialSources(t *testing.T) {
	t.Run("access_token query and cookie accepted", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		tok := e.token("acme", "u1", "orders/*")
		s := e.open(request{query: q("channel", "orders/1", "access_token", tok)})
		s.next(t, 5*time.Second)
		s.subscribed(t)
		c := e.open(request{cookie: tok, query: q("channel", "orders/1")})
		c.next(t, 5*time.Second)
		c.subscribed(t)
		e.publish("acme", "orders/1", `true`)
		s.publication(t)
		c.publication(t)
		// A malformed Authorization header is refused, not skipped for the
		// cookie.
		msg := e.refused(request{authorization: "Basic dTE6cA==", cookie: tok, query: q("channel", "orders/1")}, 401, "unauthorized")
		if !contains(msg, "Bearer") {
			t.Fatalf("message %q", msg)
		}
	})
	t.Run("access_token query switched off", func(t *testing.T) {
		e := newEnv(t, envOptions{cfg: Config{DisableAccessTokenQuery: true}})
		tok := e.token("acme", "u1", "orders/*")
		msg := e.refused(request{query: q("channel", "orders/1", "access_token", tok)}, 401, "unauthorized")
		if !contains(msg, "disabled") {
			t.Fatalf("message %q", msg)
		}
		e.stream(tok, "orders/1") // the header still works
	})
}

func TestSSEAccessTokenNeverLogged(t *testing.T) {
	e := newEnv(t, envOptions{})
	tok := e.token("acme", "u1", "orders/*")
	e.refused(request{query: q("channel", "nope//", "access_token", tok)}, 400, "bad_request")
	e.refused(request{query: q("channel", "x", "access_token", tok+"x")}, 401, "unauthorized")
	s := e.open(request{query: q("channel", "orders/1", "access_token", tok)})
	s.next(t, 5*time.Second)
	s.subscribed(t)
	s.close()
	e.srv.Stop()
	logs := e.logs.String()
	if !contains(logs, "REDACTED") || !contains(logs, "request refused") {
		t.Fatalf("the refusals were not logged with a redacted URL:\n%s", logs)
	}
	sig := tok[strings.LastIndexByte(tok, '.')+1:]
	if contains(logs, sig) {
		t.Fatalf("the token reached the log:\n%s", logs)
	}
}

func TestSSEHeartbeat(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{HeartbeatInterval: 20 * time.Millisecond}})
	s := e.stream(e.token("acme", "u1", "orders/*"), "orders/1")
	for i := 0; i < 3; i++ {
		ev := s.next(t, 5*time.Second)
		if len(ev.Comments) != 1 || ev.Comments[0] != "ping" || ev.Name != "" || ev.Data != "" {
			t.Fatalf("want a ping comment, got %+v", ev)
		}
	}
}

func TestSSEMaxConnections(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{MaxConnections: 2}})
	tok := e.token("acme", "u1", "orders/*")
	e.stream(tok, "orders/1")
	e.stream(tok, "orders/2")
	e.refused(request{bearer: tok, query: q("channel", "orders/3")}, 503, "too_many_connections")
	// Other routes are not bounded by it.
	if code, _, _ := e.get("/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	if n := e.counter(e.srv.metrics.connections.WithLabelValues("sse")); n != 2 {
		t.Fatalf("herald_connections{sse} = %v", n)
	}
}

func TestSSEQueryMalformed(t *testing.T) {
	e := newEnv(t, envOptions{})
	tok := e.token("acme", "u1", "orders/*")
	resp, cancel := e.do(request{path: "/v1/sse?channel=orders/1&x=%zz", bearer: tok})
	defer cancel()
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
}
