package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
)

const testWebhookSecret = "whsec_Nm8b7X2m0qkq3v9sQ8pZkR4y1WcT6hJd5LaE2uFgYiM="

// Wrong handlers config stops serve and feed at start with the key and
// the reason, and never prints a secret.
func TestHandlersConfigRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := `"name":"billing","type":"webhook","url":"https://billing.example/h","secret":"` + testWebhookSecret + `"`
	for _, c := range []struct{ handlers, want string }{
		{`{"name":"x"}`, "want a JSON list of handlers"},
		{`[{` + good + `,"colour":"red"}]`, `handlers[0] (billing): unknown key "colour"`},
		{`[{"name":"billing","type":"email"}]`, `handlers[0] (billing): type: "email": want webhook or realtime`},
		{`[{"name":"Billing","type":"webhook","url":"https://x.example"}]`, "handlers[0] (Billing): name:"},
		{`[{"name":"realtime","type":"webhook","url":"https://x.example"}]`, "built-in realtime handler"},
		{`[{` + good + `},{` + good + `}]`, "handlers[1] (billing): name: a second handler of that name"},
		{`[{` + good + `,"routes":[{"type":"invoice.**.x"}]}]`, "handlers[0] (billing): routes[0]: type"},
		{`[{` + good + `,"timeout":"soon"}]`, `handlers[0] (billing): timeout: "soon" is not a duration`},
		{`[{` + good + `,"claim_delay":"2s"}]`, "handlers[0] (billing): webhook: invalid config: handler \"billing\": claim_delay 2s: must be between 1ms and 1s"},
		{`[{"name":"realtime","type":"realtime","claim_delay":"5ms"}]`, "claim_delay: not a setting of the realtime handler"},
		{`[{` + good + `,"batch_size":20000}]`, "handlers[0] (billing): webhook: invalid config: handler \"billing\": batch_size 20000: must be between 1 and 10000"},
		{`[{"name":"realtime","type":"realtime","batch_size":5000}]`, "batch_size: not a setting of the realtime handler; its batch is --outbox-batch-size"},
		{`[{"name":"realtime","type":"realtime","url":"https://x.example"}]`, "url: not a setting of the realtime handler"},
		{`[{"name":"billing","type":"webhook","secret":"` + testWebhookSecret + `"}]`, "handlers[0] (billing): url: missing"},
		{`[{"name":"billing","type":"webhook","url":"ftp://billing.example/h","secret":"` + testWebhookSecret + `"}]`, "billing"},
		{`[{"name":"billing","type":"webhook","url":"https://billing.example/h","secret":"whsec_short"}]`, "secret"},
		{`[{"name":"billing","type":"webhook","url":"https://billing.example/h"}]`, "secret"},
		{`[{` + good + `,"target_p99":"11s"}]`, "handlers[0] (billing): target_p99: 11s: want more than 0 and at most 10s"},
		{`[{"name":"realtime","type":"realtime","target_p99":"0s"}]`, "handlers[0] (realtime): target_p99: 0s: want more than 0"},
		{`[{` + good + `,"max_backlog_age":"0s"}]`, "handlers[0] (billing): max_backlog_age: 0s: want more than 0"},
	} {
		for _, cmd := range []string{"serve", "feed"} {
			args := []string{cmd, "--handlers", c.handlers, "--data-dir", dir, "--listen", "127.0.0.1:0",
				"--jwt-hmac-secret", testSecret, "--log-level", "error"}
			if cmd == "feed" {
				args = []string{cmd, "--handlers", c.handlers, "--data-dir", dir, "--listen", "", "--log-level", "error"}
			}
			code, out, errOut := herald(t, args...)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("%s --handlers %s: exit %d, stderr %q; want it to say %q", cmd, c.handlers, code, errOut, c.want)
			}
			if strings.Contains(out+errOut, strings.TrimPrefix(testWebhookSecret, "whsec_")) {
				t.Errorf("%s: the secret was printed: %s", cmd, errOut)
			}
		}
	}
}

// hookLog is a webhook receiver on loopback that logs every request.
type hookLog struct {
	mu  sync.Mutex
	ids []string
	ch  chan struct{}
}

func (h *hookLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m struct{ ID, Kind, Tenant string }
	if json.Unmarshal(body, &m) != nil || m.ID != r.Header.Get("webhook-id") || r.Header.Get("webhook-signature") == "" {
		w.WriteHeader(400)
		return
	}
	h.mu.Lock()
	h.ids = append(h.ids, m.ID)
	h.mu.Unlock()
	select {
	case h.ch <- struct{}{}:
	default:
	}
	w.WriteHeader(204)
}

func (h *hookLog) has(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.ids {
		if x == id {
			return true
		}
	}
	return false
}

// herald serve with a webhook handler in its YAML config: a record routed
// to it reaches the receiver, one that is not does not; herald handlers
// pauses and resumes it; herald outbox stats --handler counts its records.
func TestServeWithWebhookHandler(t *testing.T) {
	t.Parallel()
	dbURL := testenv.DatabaseURL(t)
	hooks := &hookLog{ch: make(chan struct{}, 1)}
	srv := httptest.NewServer(hooks)
	defer srv.Close()
	cfg := filepath.Join(t.TempDir(), "node.yaml")
	yaml := `handlers:
  - name: billing
    type: webhook
    url: ` + srv.URL + `/hook
    secret: ` + testWebhookSecret + `
    allow_private_network: true
    routes:
      - kind: integration_event
        type: "invoice.*"
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	startServe(t, "--config", cfg, "--database-url", dbURL)
	st := pgStager{dbURL}
	invoice := notification("acme", "billing/1", `{"n":1}`)
	invoice.Kind, invoice.Type, invoice.SchemaVersion = "integration_event", "invoice.paid", 1
	other := notification("acme", "billing/1", `{"n":2}`)
	id := st.stage(t, invoice, true)
	otherID := st.stage(t, other, true)
	testenv.Eventually(t, 20*time.Second, "the invoice at the receiver", func() bool { return hooks.has(id) })

	// --json: one object a line, one a handler.
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(mustHerald(t, "handlers", "list", "--json", "--database-url", dbURL)), "\n") {
		var h struct{ Name string }
		if err := json.Unmarshal([]byte(line), &h); err != nil || listed[h.Name] {
			t.Fatalf("handlers list --json: line %q (%v)", line, err)
		}
		listed[h.Name] = true
	}
	if !listed["billing"] || !listed[outboxfeed.RealtimeHandler] {
		t.Fatalf("handlers list --json lists %v, want billing and %s", listed, outboxfeed.RealtimeHandler)
	}

	out := mustHerald(t, "handlers", "list", "--database-url", dbURL)
	for _, want := range []string{"billing", "webhook", "active", "realtime"} {
		if !strings.Contains(out, want) {
			t.Fatalf("handlers list lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, strings.TrimPrefix(testWebhookSecret, "whsec_")) {
		t.Fatalf("handlers list shows the secret:\n%s", out)
	}
	mustHerald(t, "handlers", "pause", "--database-url", dbURL, "--reason", "maintenance", "billing")
	paused := invoice
	paused.Payload = json.RawMessage(`{"n":3}`)
	pausedID := st.stage(t, paused, true)
	testenv.Eventually(t, 20*time.Second, "billing counts the paused record", func() bool {
		out := mustHerald(t, "outbox", "stats", "--handler", "billing", "--database-url", dbURL)
		return regexp.MustCompile(`(?m)^pending +1$`).MatchString(out)
	})
	if hooks.has(pausedID) {
		t.Fatal("a paused handler delivered")
	}
	if out := mustHerald(t, "handlers", "list", "--database-url", dbURL); !strings.Contains(out, "paused") || !strings.Contains(out, "maintenance") {
		t.Fatalf("handlers list after pause:\n%s", out)
	}
	mustHerald(t, "handlers", "resume", "--database-url", dbURL, "billing")
	testenv.Eventually(t, 20*time.Second, "the paused record after resume", func() bool { return hooks.has(pausedID) })
	if hooks.has(otherID) {
		t.Fatal("a record not routed to billing reached its receiver")
	}
	testenv.Eventually(t, 20*time.Second, "the invoice dispatched for both handlers", func() bool {
		out := mustHerald(t, "outbox", "show", "--id", id, "--database-url", dbURL)
		return regexp.MustCompile(`(?m)^realtime +dispatched `).MatchString(out) && regexp.MustCompile(`(?m)^billing +dispatched `).MatchString(out)
	})
	if out := mustHerald(t, "outbox", "show", "--id", id, "--json", "--database-url", dbURL); strings.Count(out, `"handler"`) != 2 {
		t.Fatalf("outbox show --json: want a line per handler:\n%s", out)
	}
	if code, _, errOut := herald(t, "outbox", "stats", "--handler", "nope", "--database-url", dbURL); code == 0 || !strings.Contains(errOut, "no such handler") {
		t.Fatalf("stats --handler nope: exit %d, %s", code, errOut)
	}
	if code, _, errOut := herald(t, "handlers", "drop", "--database-url", dbURL, "billing"); code == 0 || !strings.Contains(errOut, "--yes") {
		t.Fatalf("drop without --yes: exit %d, %s", code, errOut)
	}
}

// Every key a handler entry takes is in docs/handlers.md's settings table.
func TestHandlersDocKeys(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/handlers.md")
	if err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeOf(handlerJSON{})
	for i := 0; i < typ.NumField(); i++ {
		key := typ.Field(i).Tag.Get("json")
		if !strings.Contains(string(doc), "\n| `"+key+"` | ") {
			t.Errorf("docs/handlers.md's settings table lacks `%s`", key)
		}
	}
}

// A batch larger than the range a lane holds stops serve and feed at
// start, naming the setting: the realtime handler's and a webhook's.
func TestBatchSizeAboveRangeRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hook := `[{"name":"billing","type":"webhook","url":"https://billing.example/h","secret":"` + testWebhookSecret + `","batch_size":6000}]`
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--outbox-range-records", "5000"}, "config: --outbox-batch-size 10000: must be at most --outbox-range-records (5000)"},
		{[]string{"--outbox-range-records", "5000", "--outbox-batch-size", "100", "--handlers", hook}, "config: handler billing: batch_size 6000: must be at most --outbox-range-records (5000)"},
	} {
		for _, cmd := range []string{"serve", "feed"} {
			args := append([]string{cmd, "--data-dir", dir, "--listen", "127.0.0.1:0", "--jwt-hmac-secret", testSecret, "--log-level", "error"}, c.args...)
			if cmd == "feed" {
				args = append([]string{cmd, "--data-dir", dir, "--listen", "", "--log-level", "error"}, c.args...)
			}
			if code, _, errOut := herald(t, args...); code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("%s %v: exit %d, stderr %q; want it to say %q", cmd, c.args, code, errOut, c.want)
			}
		}
	}
}
