package gateway

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/subscriptions"
)

// testHook is an authorization webhook for docs/* channels: it allows or
// denies with a TTL of one second, fails with 500, or hangs until the
// caller gives up.
type testHook struct {
	srv   *httptest.Server
	allow atomic.Bool
	fail  atomic.Bool
	hang  atomic.Bool
	calls atomic.Int64
}

func newTestHook(t *testing.T) *testHook {
	t.Helper()
	h := &testHook{}
	h.allow.Store(true)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.calls.Add(1)
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
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"allow": allow, "ttl_seconds": 1, "reason": "docs access withdrawn"})
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// hookEnv is a gateway whose authorizer asks hook (with a 300 ms timeout)
// and accepts subscription tokens.
func hookEnv(t *testing.T, hookURL string, deps func(*Deps)) *testEnv {
	t.Helper()
	return hookEnvTimeout(t, hookURL, 300*time.Millisecond, deps)
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
// when the answer's TTL lapses; once the webhook denies, that subscription
// ends with an unsubscribed push while the grant-based one keeps
// delivering.
func TestReauthorizeWebhookWS(t *testing.T) {
	t.Parallel()
	hook, e, c := hookedWS(t)
	pub := e.publish("acme", "docs/1", `1`)
	if p := c.Pub(); p.Channel != "docs/1" || p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}
	// Still allowed at the first recheck.
	calls := hook.calls.Load()
	eventually(t, 5*time.Second, "a recheck", func() bool { return hook.calls.Load() > calls })

	hook.allow.Store(false)
	flipped := time.Now()
	f := c.NextFrame(5 * time.Second)
	ended := time.Since(flipped)
	if f.Push != "unsubscribed" || f.Ctl.Channel != "docs/1" || f.Ctl.Reason != "forbidden" || f.Ctl.Resubscribe ||
		!strings.Contains(f.Ctl.Message, "docs access withdrawn") {
		t.Fatalf("want unsubscribed docs/1 forbidden, got %s", f.Raw)
	}
	if ended > time.Second+testInterval+testSlack {
		t.Fatalf("ended %s after the webhook flipped, want within its TTL (1s) + RevalidateInterval", ended)
	}
	t.Logf("webhook subscription ended %s after the webhook started denying (TTL 1s, interval %s)",
		ended.Round(time.Millisecond), testInterval)
	e.publish("acme", "docs/1", `2`)
	pub = e.publish("acme", "orders/1", `3`)
	if p := c.Pub(); p.Channel != "orders/1" || p.Offset != pub.Offset {
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
	if p := c.Pub(); p.Offset != pub.Offset || p.Channel != "orders/1" {
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
	revs := auth.NewMemoryRevocations()
	const timeout = 1500 * time.Millisecond
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
	revoked := time.Now()
	if err := revs.Revoke(context.Background(), auth.Revocation{SessionID: "victim", Until: exp}); err != nil {
		t.Fatal(err)
	}
	victim.ClosedWith("revoked", session.CloseRevoked)
	if cut := time.Since(revoked); cut > testInterval+testSlack {
		t.Fatalf("revocation cut %s after, with a hanging webhook", cut)
	}

	sub := c.Request(ws.OpSubscribe, map[string]any{"channel": "docs/2"})
	ping := c.Request(ws.OpPing, nil)
	start := time.Now()
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
			if waited := time.Since(start); waited < timeout*2/3 {
				t.Fatalf("denied after %s, before the webhook timeout", waited)
			}
		}
		got = append(got, f.ID)
	}
	if got[0] != ping {
		t.Fatalf("replies in order %v: the ping waited for the webhook", got)
	}
}
