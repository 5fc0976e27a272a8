package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/outboxdb"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
)

const testAdminToken = "serve-ops-admin-token-0123456789"

// writeTokenFile writes content to a 0600 file and returns its path.
func writeTokenFile(t *testing.T, content string) string {
	t.Helper()
	return writeConfig(t, "admin-token", content)
}

// getOps GETs base+path with Authorization (none when empty) and returns
// the status and body.
func getOps(t *testing.T, base, path, authorization string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func opsStatusOf(t *testing.T, base string) testenv.OpsStatus {
	t.Helper()
	code, h, b := getOps(t, base, "/ops/status", "Bearer "+testAdminToken)
	if code != http.StatusOK || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("/ops/status: %d (Cache-Control %q) %s", code, h.Get("Cache-Control"), b)
	}
	var st testenv.OpsStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("/ops/status %s: %v", b, err)
	}
	return st
}

// TestServeOpsView runs `herald serve --feed=false` on PostgreSQL with an
// admin token: the operator view shows the real backlog (records staged
// while no Worker runs), the dead letter an earlier Worker left, the open
// stream, the readiness checks, and a store failure as the outbox status.
func TestServeOpsView(t *testing.T) {
	t.Parallel()
	dbURL := testenv.DatabaseURL(t)
	mustHerald(t, "migrate", "--log-level", "warn", "--database-url", dbURL)
	st := pgStager{dbURL}
	store, err := outboxdb.Open(context.Background(), outboxdb.Config{DatabaseURL: dbURL})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	// A Worker that reads order.updated v1 only dead-letters a v2 record.
	dead := st.stage(t, notification("acme", "orders/9", `{"n":0}`), true)
	runFeedUntil(t, dbURL, `{"order.updated": {"versions": [1]}}`, "the dead letter", func() bool {
		return stateName(t, store, dead) == outboxfeed.StateDeadLetter
	})
	// Then three records nobody dispatches: the node below runs no Worker.
	oldest := time.Now().Add(-2 * time.Minute).UTC().Truncate(time.Millisecond)
	for i := range 3 {
		n := notification("acme", "orders/1", `{"n":1}`)
		n.SchemaVersion = 1
		n.OccurredAt = oldest.Add(time.Duration(i) * time.Second)
		st.stage(t, n, true)
	}

	base := startServe(t, "--database-url", dbURL, "--feed=false", "--max-connections", "33",
		"--admin-token-file", writeTokenFile(t, testAdminToken+"\n"))
	subscribeSSE(t, base+"/v1/sse?channel=orders/1", mint(t, "acme", "u1", "orders/*"), "")

	got := opsStatusOf(t, base)
	if r := got.Readiness; r.Status != "ready" || r.Checks["outbox"] != "ok" || r.Checks["broker"] != "ok" || len(r.Checks) != 2 {
		t.Errorf("readiness = %+v", r)
	}
	if c := got.Connections; c.SSE != 1 || c.WS != 0 || c.Total != 1 || c.Max != 33 {
		t.Errorf("connections = %+v, want one SSE stream of 33", c)
	}
	o := got.Outbox
	if o.Status != "ok" || o.Pending == nil || *o.Pending != 3 || o.DeadLetters == nil || *o.DeadLetters != 1 {
		t.Fatalf("outbox = %+v, want 3 pending and 1 dead letter", o)
	}
	if len(o.Handlers) != 1 || o.Handlers[0].Name != "realtime" || o.Handlers[0].State != "active" || o.Handlers[0].Pending != 3 || !o.Handlers[0].TargetUp {
		t.Errorf("handlers = %+v, want realtime, active, 3 pending", o.Handlers)
	}
	if o.OldestPending == nil || !o.OldestPending.Equal(oldest) || o.OldestAge == nil || *o.OldestAge < 120 || *o.OldestAge > 180 {
		t.Errorf("oldest pending %v (age %v s), want %v, about 120 s ago", o.OldestPending, o.OldestAge, oldest)
	}
	// The same numbers as `herald outbox stats`.
	var stats struct {
		States map[string]int64 `json:"states"`
	}
	if err := json.Unmarshal([]byte(mustHerald(t, "outbox", "stats", "--json", "--database-url", dbURL)), &stats); err != nil {
		t.Fatal(err)
	}
	if stats.States["pending"] != 3 || stats.States["dead_letter"] != 1 {
		t.Errorf("outbox stats says %v", stats.States)
	}

	// Without the token, or with another one: 401, nothing shown.
	for _, auth := range []string{"", "Bearer " + testAdminToken[:len(testAdminToken)-1] + "x"} {
		code, _, b := getOps(t, base, "/ops/status", auth)
		if code != http.StatusUnauthorized || !strings.Contains(string(b), `"unauthorized"`) || strings.Contains(string(b), "pending") {
			t.Errorf("Authorization %q: %d %s", auth, code, b)
		}
	}
	if code, h, b := getOps(t, base, "/ops/", ""); code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(string(b), "operator view") {
		t.Errorf("GET /ops/: %d %s", code, b)
	}

	// A broken store shows as the outbox status; the node stays up.
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `ALTER TABLE herald.outbox_retry RENAME TO outbox_retry_away`); err != nil {
		t.Fatal(err)
	}
	got = opsStatusOf(t, base)
	if o := got.Outbox; !strings.HasPrefix(o.Status, "error: ") || !strings.Contains(o.Status, "outbox_retry") || o.Pending != nil || o.DeadLetters != nil {
		t.Errorf("outbox of a broken store = %+v", o)
	}
	if c := got.Connections; c.SSE != 1 {
		t.Errorf("connections with a broken store = %+v", c)
	}
	if _, err := conn.Exec(context.Background(), `ALTER TABLE herald.outbox_retry_away RENAME TO outbox_retry`); err != nil {
		t.Fatal(err)
	}
	if o := opsStatusOf(t, base).Outbox; o.Status != "ok" || *o.Pending != 3 {
		t.Errorf("outbox after repair = %+v", o)
	}
}

// TestServeOpsViewOff: without --admin-token-file the view's routes are
// 404, token or not.
func TestServeOpsViewOff(t *testing.T) {
	t.Parallel()
	base := startServe(t)
	for _, path := range []string{"/ops/", "/ops/status", "/ops/ops.js"} {
		if code, _, b := getOps(t, base, path, "Bearer "+testAdminToken); code != http.StatusNotFound || !strings.Contains(string(b), "not_found") {
			t.Errorf("GET %s: %d %s", path, code, b)
		}
	}
}

// TestAdminTokenFileRefused: a token under 16 bytes, an empty file or a
// missing one stops serve before it listens, naming the setting, whether
// it came from the flag, the environment or the config file.
func TestAdminTokenFileRefused(t *testing.T) {
	short := writeTokenFile(t, "too-short\n")
	empty := writeTokenFile(t, " \n")
	spaced := writeTokenFile(t, "two words of a token")
	missing := filepath.Join(t.TempDir(), "nope")
	cfg := writeConfig(t, "herald.json", `{"admin-token-file": "`+short+`"}`)
	cases := []struct {
		name string
		args []string
		env  string
		want []string
	}{
		{"flag", []string{"--admin-token-file", short}, "", []string{"--admin-token-file " + short, "is 9 bytes: the admin token must be at least 16 bytes", "openssl rand"}},
		{"empty", []string{"--admin-token-file", empty}, "", []string{"is 0 bytes"}},
		{"space", []string{"--admin-token-file", spaced}, "", []string{"visible ASCII"}},
		{"missing", []string{"--admin-token-file", missing}, "", []string{"--admin-token-file", missing, "no such file"}},
		{"env", nil, short, []string{"--admin-token-file " + short, "at least 16 bytes"}},
		{"config file", []string{"--config", cfg}, "", []string{"--admin-token-file " + short, "at least 16 bytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("HERALD_ADMIN_TOKEN_FILE", c.env)
			}
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--log-level", "warn"}, c.args...)
			code, out, errOut := herald(t, args...)
			if code != 1 || strings.Contains(out, "listening") {
				t.Fatalf("exit %d, stdout %q; want 1 before listening", code, out)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
			if strings.Contains(errOut, "too-short") || strings.Contains(errOut, "two words") {
				t.Errorf("the error quotes the token: %s", errOut)
			}
		})
	}
}

// TestAdminTokenFileReadable: a token file others can read is used, with a
// warning.
func TestAdminTokenFileReadable(t *testing.T) {
	for mode, warn := range map[os.FileMode]bool{0o600: false, 0o400: false, 0o644: true, 0o640: true} {
		p := writeTokenFile(t, "  "+testAdminToken+"\n")
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		var logs strings.Builder
		tok, err := readAdminToken(p, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil || tok != testAdminToken {
			t.Fatalf("mode %v: %q, %v", mode, tok, err)
		}
		if got := strings.Contains(logs.String(), "can be read by other users"); got != warn {
			t.Errorf("mode %v: warned %v, want %v: %s", mode, got, warn, logs.String())
		}
		if strings.Contains(logs.String(), testAdminToken) {
			t.Errorf("the warning quotes the token: %s", logs.String())
		}
	}
}

func TestBannerOperatorView(t *testing.T) {
	var o serveOptions
	o.auth.HMACSecret = "node-secret-0123456789"
	if text := bannerOf(o, false); !strings.Contains(text, "operator view: off") || !strings.Contains(text, "--admin-token-file FILE") ||
		!strings.Contains(text, "http://127.0.0.1:8080/ops/") {
		t.Errorf("banner of a node without the view:\n%s", text)
	}
	o.adminTokenFile = "/run/secrets/herald-admin"
	text := bannerOf(o, false)
	if !strings.Contains(text, "operator view: http://127.0.0.1:8080/ops/") || strings.Contains(text, "off;") {
		t.Errorf("banner of a node with the view:\n%s", text)
	}
}
