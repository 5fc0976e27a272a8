package webhookhandler

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/pgstore"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"
	"github.com/heraldgw/herald/outboxfeed/webhook"

	"github.com/prometheus/client_golang/prometheus"
)

const testSecret webhook.Secret = "whsec_Nm8b7X2m0qkq3v9sQ8pZkR4y1WcT6hJd5LaE2uFgYiM="

// receiver answers each record by its type and logs every request.
type receiver struct {
	mu    sync.Mutex
	seen  map[string]int // requests per record id
	order map[string][]string
	types map[string]string
	quit  chan struct{}
}

func newReceiver() *receiver {
	return &receiver{seen: map[string]int{}, order: map[string][]string{}, types: map[string]string{}, quit: make(chan struct{})}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m struct{ ID, Type, Channel string }
	if err := json.Unmarshal(body, &m); err != nil || m.ID != r.Header.Get("webhook-id") {
		w.WriteHeader(400)
		return
	}
	rc.mu.Lock()
	rc.seen[m.ID]++
	n := rc.seen[m.ID]
	rc.types[m.ID] = m.Type
	rc.mu.Unlock()
	switch {
	case m.Type == "bad.request":
		w.WriteHeader(422)
		return
	case m.Type == "flaky.server" && n == 1:
		w.WriteHeader(500)
		return
	case m.Type == "throttled" && n == 1:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(429)
		return
	case m.Type == "slow.answer" && n == 1:
		select { // past the handler's timeout
		case <-time.After(2 * time.Second):
		case <-rc.quit:
		}
	}
	rc.mu.Lock()
	rc.order[m.Channel] = append(rc.order[m.Channel], m.ID)
	rc.mu.Unlock()
	w.WriteHeader(204)
}

func (rc *receiver) count(id string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.seen[id]
}

func openStore(t *testing.T) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(context.Background(), pgstore.Config{URL: testenv.DatabaseURL(t)})
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = s.Close() })
	testenv.Must(t, s.Migrate(context.Background()), "migrate")
	return s
}

func note(channel, typ string) stage.Notification {
	return stage.Notification{TenantID: "acme", Channel: channel, Type: typ, SchemaVersion: 1, Payload: json.RawMessage(`{"a":1}`)}
}

func hookConfig(name, url string) webhook.Config {
	return webhook.Config{Name: name, URL: url, Secret: testSecret, Timeout: 300 * time.Millisecond, AllowPrivateNetwork: true,
		RetryBaseDelay: 10 * time.Millisecond, RetryMaxDelay: 50 * time.Millisecond,
		OutageBaseDelay: 10 * time.Millisecond, OutageMaxDelay: 100 * time.Millisecond}
}

// startHandler registers and starts a webhook handler's Worker.
func startHandler(t *testing.T, s *pgstore.Store, cfg webhook.Config) (*storetest.Worker, outboxfeed.Store, *prometheus.Registry) {
	t.Helper()
	_, err := s.RegisterHandler(context.Background(), outboxfeed.HandlerSpec{Name: cfg.Name, Type: "webhook"})
	testenv.Must(t, err, "register")
	reg := prometheus.NewRegistry()
	h, err := New(cfg, reg)
	testenv.Must(t, err, "new handler")
	t.Cleanup(h.Close)
	hs := s.ForHandler(cfg.Name)
	w := storetest.StartDeliveryWorker(t, hs, h, h.WorkerConfig(outboxfeed.WorkerConfig{Registerer: reg}))
	return w, hs, reg
}

func waitState(t *testing.T, s outboxfeed.Store, id string, want string) outboxfeed.Record {
	t.Helper()
	var r outboxfeed.Record
	testenv.Eventually(t, 20*time.Second, id+" "+want, func() bool {
		r = storetest.MustGet(t, s, id)
		return r.State.Name() == want
	})
	return r
}

// Each answer class leads to its documented outcome, through the Worker,
// on real PostgreSQL and a real HTTP receiver.
func TestWebhookOutcomes(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	rc := newReceiver()
	srv := httptest.NewServer(rc)
	defer srv.Close()
	defer close(rc.quit)
	w, hs, _ := startHandler(t, s, hookConfig("hooks", srv.URL))
	ids := storetest.StagePgx(t, s.Pool(), true, note("c/ok", "all.good"), note("c/bad", "bad.request"), note("c/flaky", "flaky.server"),
		note("c/throttled", "throttled"), note("c/slow", "slow.answer"), note("c/flaky", "all.good"))
	for i, want := range []struct {
		state   string
		attempt int
		tries   int
	}{
		{"dispatched", 0, 1},  // 2xx
		{"dead_letter", 1, 1}, // other 4xx: permanent
		{"dispatched", 1, 2},  // 500: retryable, one attempt burnt
		{"dispatched", 0, 2},  // 429 with Retry-After: an outage, none burnt
		{"dispatched", 0, 2},  // a timeout: an outage, none burnt
		{"dispatched", 0, 1},  // behind the flaky one in its channel
	} {
		r := waitState(t, hs, ids[i], want.state)
		if r.Attempt != want.attempt || rc.count(ids[i]) != want.tries {
			t.Errorf("%s (%s): attempt %d after %d requests, want %d after %d", r.Type, r.State.Name(), r.Attempt, rc.count(ids[i]), want.attempt, want.tries)
		}
	}
	rc.mu.Lock()
	if got := rc.order["c/flaky"]; len(got) != 2 || got[0] != ids[2] || got[1] != ids[5] {
		t.Errorf("c/flaky accepted in order %v, want %v", got, []string{ids[2], ids[5]})
	}
	rc.mu.Unlock()
	if dl := storetest.StateOf(t, hs, ids[1]).(outboxfeed.DeadLetter); dl.Reason == "" {
		t.Errorf("dead letter without a reason")
	}
	testenv.Eventually(t, 5*time.Second, "response metrics", func() bool {
		return w.Metric("herald_webhook_responses_total", "class", "outage", "reason", "throttled") == 1 &&
			w.Metric("herald_webhook_responses_total", "class", "permanent", "reason", "client_error") == 1 &&
			w.Metric("herald_webhook_responses_total", "class", "retryable", "reason", "server_error") == 1 &&
			w.Metric("herald_webhook_responses_total", "class", "outage", "reason", "timeout") == 1
	})
}

// 410 disables the handler; its records wait until it is enabled.
func TestWebhookGoneDisables(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	var gone sync.Mutex
	isGone := true
	var accepted []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gone.Lock()
		defer gone.Unlock()
		if isGone {
			w.WriteHeader(410)
			return
		}
		accepted = append(accepted, r.Header.Get("webhook-id"))
		w.WriteHeader(200)
	}))
	defer srv.Close()
	_, hs, _ := startHandler(t, s, hookConfig("hooks", srv.URL))
	ids := storetest.StagePgx(t, s.Pool(), true, note("c/1", "a.b"), note("c/1", "a.c"))
	testenv.Eventually(t, 10*time.Second, "disabled", func() bool {
		list, err := s.Handlers(context.Background())
		return err == nil && len(list) == 2 && list[0].Name == "hooks" && list[0].State == outboxfeed.HandlerDisabled
	})
	for _, id := range ids {
		if r := storetest.MustGet(t, hs, id); r.Attempt != 0 || r.State.Name() == "dead_letter" {
			t.Fatalf("%s: %s attempt %d while disabled; want waiting, none burnt", id, r.State.Name(), r.Attempt)
		}
	}
	gone.Lock()
	isGone = false
	gone.Unlock()
	testenv.Must(t, s.SetHandlerState(context.Background(), "hooks", outboxfeed.HandlerActive, "endpoint back"), "enable")
	for _, id := range ids {
		waitState(t, hs, id, "dispatched")
	}
	gone.Lock()
	defer gone.Unlock()
	if len(accepted) != 2 || accepted[0] != ids[0] || accepted[1] != ids[1] {
		t.Fatalf("accepted %v, want %v", accepted, ids)
	}
}

// A refused connection is an endpoint outage: records wait with no
// attempt burnt, the target is down; they go out once it listens.
func TestWebhookConnectionRefused(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "listen")
	addr := l.Addr().String()
	testenv.Must(t, l.Close(), "close") // nothing listens there now
	w, hs, _ := startHandler(t, s, hookConfig("hooks", "http://"+addr+"/hook"))
	ids := storetest.StagePgx(t, s.Pool(), true, note("c/1", "a.b"))
	testenv.Eventually(t, 10*time.Second, "target down", func() bool {
		return w.Metric("herald_outbox_target_up") == 0 &&
			w.Metric("herald_webhook_responses_total", "class", "outage", "reason", "connection_refused") >= 2
	})
	if r := storetest.MustGet(t, hs, ids[0]); r.Attempt != 0 {
		t.Fatalf("attempt %d during an outage, want 0", r.Attempt)
	}
	l, err = net.Listen("tcp", addr)
	testenv.Must(t, err, "listen again")
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(202) })}}
	srv.Start()
	defer srv.Close()
	waitState(t, hs, ids[0], "dispatched")
	testenv.Eventually(t, 10*time.Second, "target up", func() bool { return w.Metric("herald_outbox_target_up") == 1 })
}
