package subscriptions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
)

// hook is a test authorization webhook whose answer the test chooses.
type hook struct {
	*httptest.Server
	calls   atomic.Int64
	mu      sync.Mutex
	seen    []webhookRequest
	headers []http.Header
	answer  func(r webhookRequest) (status int, body string)
	// block, when set, runs after the request is read and before answering;
	// returning false sends no answer.
	block func(r *http.Request) bool
}

func newHook(t *testing.T, answer func(r webhookRequest) (int, string)) *hook {
	t.Helper()
	return newBlockingHook(t, answer, nil)
}

func newBlockingHook(t *testing.T, answer func(r webhookRequest) (int, string), block func(r *http.Request) bool) *hook {
	t.Helper()
	h := &hook{answer: answer, block: block}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.calls.Add(1)
		var req webhookRequest
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want POST application/json", http.StatusBadRequest)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body) // reach EOF so a client hang-up cancels r.Context()
		h.mu.Lock()
		h.seen = append(h.seen, req)
		h.headers = append(h.headers, r.Header.Clone())
		h.mu.Unlock()
		if h.block != nil && !h.block(r) {
			return
		}
		status, body := h.answer(req)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(h.Close)
	return h
}

func allowIf(f func(webhookRequest) bool, ttl string) func(webhookRequest) (int, string) {
	return func(r webhookRequest) (int, string) {
		if f(r) {
			return 200, `{"allow":true,"ttl_seconds":` + ttl + `}`
		}
		return 200, `{"allow":false,"ttl_seconds":` + ttl + `,"reason":"not a member of this project"}`
	}
}

func newWebhookAuthorizer(t *testing.T, cfg Config) *Authorizer {
	t.Helper()
	a, err := NewAuthorizer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestWebhookAllowDenyAndCache(t *testing.T) {
	h := newHook(t, allowIf(func(r webhookRequest) bool { return strings.HasPrefix(r.Channel, "projects/p1") }, "60"))
	reg := prometheus.NewRegistry()
	a := newWebhookAuthorizer(t, Config{
		WebhookURL:    h.URL + "/authz",
		WebhookHeader: http.Header{"Authorization": {"Bearer webhook-secret"}},
		Registerer:    reg,
	})
	ctx := context.Background()
	c := conn("alice", "acme", "public/*")

	d, err := a.Authorize(ctx, Request{Claims: c, Channel: "projects/p1/tasks"})
	if err != nil || !d.Allowed || d.Source != SourceWebhook {
		t.Fatalf("webhook allow: %+v, %v", d, err)
	}
	if d.RecheckAfter < 59*time.Second || d.RecheckAfter > 60*time.Second {
		t.Fatalf("RecheckAfter %s, want the answer's 60s TTL", d.RecheckAfter)
	}
	d, err = a.Authorize(ctx, Request{Claims: c, Channel: "projects/p2"})
	if err != nil || d.Allowed || !strings.Contains(d.Reason, "denied by authorization webhook: not a member of this project") {
		t.Fatalf("webhook deny: %+v, %v", d, err)
	}
	if d, _ := a.Authorize(ctx, Request{Claims: c, Channel: "public/x"}); !d.Allowed || d.Source != SourceGrant {
		t.Fatalf("grant: %+v", d)
	}
	if n := h.calls.Load(); n != 2 {
		t.Fatalf("%d webhook calls, want 2 (grants never call it)", n)
	}
	// Cached: same (tenant, subject, channel) does not call again; another
	// tenant or subject does.
	for range 5 {
		if d, _ := a.Authorize(ctx, Request{Claims: c, Channel: "projects/p1/tasks"}); !d.Allowed {
			t.Fatalf("cached allow lost: %+v", d)
		}
		if d, _ := a.Authorize(ctx, Request{Claims: c, Channel: "projects/p2"}); d.Allowed {
			t.Fatalf("cached deny lost: %+v", d)
		}
	}
	if n := h.calls.Load(); n != 2 {
		t.Fatalf("%d webhook calls after cached repeats, want 2", n)
	}
	_, _ = a.Authorize(ctx, Request{Claims: conn("alice", "globex"), Channel: "projects/p1/tasks"})
	_, _ = a.Authorize(ctx, Request{Claims: conn("bob", "acme"), Channel: "projects/p1/tasks"})
	if n := h.calls.Load(); n != 4 {
		t.Fatalf("%d webhook calls, want 4: the cache key includes tenant and subject", n)
	}
	h.mu.Lock()
	first, last := h.seen[0], h.seen[3]
	hdr := h.headers[0].Get("Authorization")
	h.mu.Unlock()
	if first != (webhookRequest{Tenant: "acme", Subject: "alice", Channel: "projects/p1/tasks"}) ||
		last != (webhookRequest{Tenant: "acme", Subject: "bob", Channel: "projects/p1/tasks"}) {
		t.Fatalf("webhook bodies: %+v, %+v", first, last)
	}
	if hdr != "Bearer webhook-secret" {
		t.Fatalf("configured header not sent: %q", hdr)
	}
	for _, m := range []struct {
		name, label, value string
		want               float64
	}{
		{"herald_subscriptions_webhook_cache_hits_total", "", "", 10},
		{"herald_subscriptions_webhook_calls_total", "result", "allow", 3},
		{"herald_subscriptions_webhook_calls_total", "result", "deny", 1},
		{"herald_subscriptions_decisions_total", "result", "webhook", 8},
		{"herald_subscriptions_decisions_total", "result", "grant", 1},
		{"herald_subscriptions_decisions_total", "result", "denied", 6},
	} {
		if got := counterSum(t, reg, m.name, m.label, m.value); got != m.want {
			t.Errorf("%s{%s=%q} = %v, want %v", m.name, m.label, m.value, got, m.want)
		}
	}
}

// counterSum sums a gathered counter family over its labels matching
// label=value (label "" for all).
func counterSum(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if label == "" || (lp.GetName() == label && lp.GetValue() == value) {
					sum += m.GetCounter().GetValue()
					break
				}
			}
			if len(m.GetLabel()) == 0 {
				sum += m.GetCounter().GetValue()
			}
		}
		return sum
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func TestWebhookTTL(t *testing.T) {
	var ttl atomic.Value
	ttl.Store("0.05")
	h := newHook(t, func(webhookRequest) (int, string) {
		return 200, `{"allow":true,"ttl_seconds":` + ttl.Load().(string) + `}`
	})
	a := newWebhookAuthorizer(t, Config{WebhookURL: h.URL, WebhookDefaultTTL: 30 * time.Second, WebhookMaxTTL: 2 * time.Minute})
	ctx := context.Background()
	r := Request{Claims: conn("alice", "acme"), Channel: "docs/1"}

	if _, err := a.Authorize(ctx, r); err != nil {
		t.Fatal(err)
	}
	eventuallyCalls(t, h, 2, func() { _, _ = a.Authorize(ctx, r) }) // the 50ms answer lapses

	ttl.Store("null")
	r.Channel = "docs/2"
	d, _ := a.Authorize(ctx, r)
	if d.RecheckAfter < 29*time.Second || d.RecheckAfter > 30*time.Second {
		t.Fatalf("no ttl_seconds: RecheckAfter %s, want the 30s default", d.RecheckAfter)
	}
	ttl.Store("86400")
	r.Channel = "docs/3"
	d, _ = a.Authorize(ctx, r)
	if d.RecheckAfter < 119*time.Second || d.RecheckAfter > 2*time.Minute {
		t.Fatalf("ttl above the cap: RecheckAfter %s, want 2m", d.RecheckAfter)
	}
}

func eventuallyCalls(t *testing.T, h *hook, want int64, poke func()) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.calls.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("webhook called %d times, want %d", h.calls.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
		poke()
	}
}

func TestWebhookFailsClosed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + l.Addr().String() + "/authz?key=secret-in-url"
	_ = l.Close()

	cases := map[string]func(webhookRequest) (int, string){
		"500":          func(webhookRequest) (int, string) { return 500, `{"allow":true}` },
		"not json":     func(webhookRequest) (int, string) { return 200, `<html>` },
		"no allow":     func(webhookRequest) (int, string) { return 200, `{"ttl_seconds":5}` },
		"allow string": func(webhookRequest) (int, string) { return 200, `{"allow":"yes"}` },
		"huge": func(webhookRequest) (int, string) {
			return 200, `{"allow":true,"reason":"` + strings.Repeat("x", 70<<10) + `"}`
		},
	}
	run := func(t *testing.T, url string, h *hook) {
		var logs testenv.SyncBuffer
		a := newWebhookAuthorizer(t, Config{WebhookURL: url, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		ctx := context.Background()
		for range 2 {
			d, err := a.Authorize(ctx, Request{Claims: conn("alice", "acme"), Channel: "x/1"})
			if err != nil || d.Allowed || !strings.Contains(d.Reason, ReasonWebhookUnavailable) {
				t.Fatalf("want fail-closed denial, got %+v, %v", d, err)
			}
		}
		if h != nil && h.calls.Load() != 2 {
			t.Fatalf("failures must not be cached: %d calls, want 2", h.calls.Load())
		}
		if strings.Contains(logs.String(), "secret-in-url") {
			t.Fatalf("log leaks the webhook URL: %s", logs.String())
		}
		if !strings.Contains(logs.String(), "authorization webhook failed") {
			t.Fatalf("failure not logged: %q", logs.String())
		}
	}
	t.Run("closed port", func(t *testing.T) { run(t, closedURL, nil) })
	for name, answer := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHook(t, answer)
			run(t, h.URL, h)
		})
	}
}

// TestWebhookSlowDoesNotBlockOthers: while the webhook hangs, a channel a
// grant allows is decided without it, and concurrent requests for one key
// share one call. The webhook hangs until the test lets it answer (its
// timeout, a minute, never ends it first), so no step depends on how fast
// the machine runs. TestWebhookTimeoutFailsClosed covers the timeout.
func TestWebhookSlowDoesNotBlockOthers(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	h := newBlockingHook(t, func(webhookRequest) (int, string) { return 200, `{"allow":false,"reason":"held"}` },
		func(r *http.Request) bool {
			started <- struct{}{}
			select {
			case <-release:
				return true
			case <-r.Context().Done():
				return false
			}
		})
	a := newWebhookAuthorizer(t, Config{WebhookURL: h.URL, WebhookTimeout: time.Minute})
	// Every request for the webhook reads its clock once, first: entered
	// counts the requests that have reached it.
	var entered atomic.Int32
	a.webhook.now = func() time.Time {
		entered.Add(1)
		return time.Now()
	}
	ctx := context.Background()
	c := conn("alice", "acme", "public/*")

	const n = 8
	slow := make(chan Decision, n)
	for range n { // concurrent requests for one key share one call
		go func() {
			d, err := a.Authorize(ctx, Request{Claims: c, Channel: "private/1"})
			if err != nil {
				t.Errorf("authorize private/1: %v", err)
			}
			slow <- d
		}()
	}
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("webhook never called")
	}
	deadline := time.Now().Add(time.Minute)
	for entered.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests reached the webhook's clock", entered.Load(), n)
		}
		time.Sleep(time.Millisecond) // polling, not an assertion
	}
	d, err := a.Authorize(ctx, Request{Claims: c, Channel: "public/1"})
	if err != nil || !d.Allowed || d.Source != SourceGrant {
		t.Fatalf("grant-allowed channel during a slow webhook: %+v, %v", d, err)
	}
	select {
	case d := <-slow:
		t.Fatalf("a request for the hung webhook was answered before it was let go: %+v", d)
	default:
	}
	close(release)
	for range n {
		if d := <-slow; d.Allowed || !strings.Contains(d.Reason, "denied by authorization webhook: held") {
			t.Fatalf("want the webhook's denial, got %+v", d)
		}
	}
	if n := h.calls.Load(); n != 1 {
		t.Fatalf("%d webhook calls for 8 concurrent requests of one key, want 1", n)
	}
}

// TestWebhookTimeoutFailsClosed: a webhook that does not answer within
// WebhookTimeout denies, as unavailable, once the timeout has passed.
func TestWebhookTimeoutFailsClosed(t *testing.T) {
	const timeout = 200 * time.Millisecond
	h := newBlockingHook(t, nil, func(r *http.Request) bool {
		<-r.Context().Done() // the request body was read, so a client hang-up cancels this
		return false
	})
	a := newWebhookAuthorizer(t, Config{WebhookURL: h.URL, WebhookTimeout: timeout})
	t0 := time.Now()
	d, err := a.Authorize(context.Background(), Request{Claims: conn("alice", "acme"), Channel: "private/1"})
	if err != nil || d.Allowed || !strings.Contains(d.Reason, ReasonWebhookUnavailable) {
		t.Fatalf("hung webhook: want fail-closed denial, got %+v, %v", d, err)
	}
	if e := time.Since(t0); e < timeout {
		t.Fatalf("denied %s after the request, before the %s timeout", e, timeout)
	}
}

func TestWebhookCallerContext(t *testing.T) {
	release := make(chan struct{})
	h := newBlockingHook(t, func(webhookRequest) (int, string) { return 200, `{"allow":true}` }, func(r *http.Request) bool {
		select {
		case <-release:
			return true
		case <-r.Context().Done():
			return false
		}
	})
	defer close(release)
	a := newWebhookAuthorizer(t, Config{WebhookURL: h.URL, WebhookTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d, err := a.Authorize(ctx, Request{Claims: conn("alice", "acme"), Channel: "x/1"})
	if !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
		t.Fatalf("caller deadline: want denial and DeadlineExceeded, got %+v, %v", d, err)
	}
}

func TestWebhookInFlightBound(t *testing.T) {
	const timeout = 150 * time.Millisecond
	started := make(chan struct{}, 4)
	h := newBlockingHook(t, nil, func(r *http.Request) bool {
		started <- struct{}{}
		<-r.Context().Done()
		return false
	})
	rt := &peakTransport{base: &http.Transport{}}
	t.Cleanup(rt.base.CloseIdleConnections)
	a := newWebhookAuthorizer(t, Config{WebhookURL: h.URL, WebhookTimeout: timeout, WebhookMaxInFlight: 1,
		HTTPClient: &http.Client{Transport: rt}})
	ctx := context.Background()
	done := make(chan Decision, 1)
	go func() {
		d, _ := a.Authorize(ctx, Request{Claims: conn("alice", "acme"), Channel: "x/1"})
		done <- d
	}()
	<-started
	t0 := time.Now()
	d, err := a.Authorize(ctx, Request{Claims: conn("alice", "acme"), Channel: "x/2"})
	if err != nil || d.Allowed || !strings.Contains(d.Reason, ReasonWebhookUnavailable) {
		t.Fatalf("no free slot: want fail-closed denial, got %+v, %v", d, err)
	}
	if e := time.Since(t0); e < timeout {
		t.Fatalf("gave up on a slot %s after the request, before the %s timeout", e, timeout)
	}
	<-done
	if p := rt.peak.Load(); p != 1 {
		t.Fatalf("%d concurrent calls with one slot, want 1", p)
	}
}

func TestAnswerCacheBound(t *testing.T) {
	c := newAnswerCache(3)
	now := time.Now()
	for i := range 10 {
		c.put(webhookKey{tenant: "t", channel: fmt.Sprint(i)}, webhookAnswer{allow: true, ttl: time.Minute}, now)
		if c.len() > 3 {
			t.Fatalf("cache holds %d, bound 3", c.len())
		}
	}
	if _, ok := c.get(webhookKey{tenant: "t", channel: "9"}, now); !ok {
		t.Fatal("latest entry evicted")
	}
	if _, ok := c.get(webhookKey{tenant: "t", channel: "9"}, now.Add(time.Minute)); ok {
		t.Fatal("entry served past its TTL")
	}
	if _, ok := c.get(webhookKey{tenant: "other", channel: "8"}, now); ok {
		t.Fatal("entry served for another tenant")
	}
}

// peakTransport records the most webhook calls in flight at once.
type peakTransport struct {
	base         *http.Transport
	active, peak atomic.Int64
}

func (p *peakTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	n := p.active.Add(1)
	defer p.active.Add(-1)
	for cur := p.peak.Load(); n > cur && !p.peak.CompareAndSwap(cur, n); cur = p.peak.Load() {
	}
	return p.base.RoundTrip(r)
}
