package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/outboxdb"
	"github.com/heraldgw/herald/outboxfeed/sqlitestore"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

const testAdminToken = "ops-test-admin-token-0123456789"

// storeSource is the OpsSource cmd/herald wires, over a real outbox store.
type storeSource struct{ s outboxfeed.Store }

func (x storeSource) OutboxStatus(ctx context.Context) (OutboxStatus, error) {
	st, err := x.s.Stats(ctx)
	if err != nil {
		return OutboxStatus{}, err
	}
	out := OutboxStatus{Pending: st.Pending, DeadLetters: st.DeadLetter, OldestPending: st.OldestPending}
	if !st.OldestPending.IsZero() {
		out.OldestPendingAge = st.Now.Sub(st.OldestPending)
	}
	return out, nil
}

// openSQLiteOutbox opens a migrated embedded outbox store, closed when the
// test ends.
func openSQLiteOutbox(t *testing.T) *sqlitestore.Store {
	t.Helper()
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "herald.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// opsStatusOK fetches /ops/status with the admin token; it must answer 200
// with no-store.
func (e *testEnv) opsStatusOK() testenv.OpsStatus {
	e.t.Helper()
	resp, cancel := e.do(request{path: "/ops/status", bearer: testAdminToken})
	defer cancel()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("/ops/status: %d %s", resp.StatusCode, b)
	}
	if cc, ct := resp.Header.Get("Cache-Control"), resp.Header.Get("Content-Type"); cc != "no-store" || ct != "application/json" {
		e.t.Fatalf("/ops/status: Cache-Control %q, Content-Type %q", cc, ct)
	}
	var a testenv.OpsStatus
	if err := json.Unmarshal(b, &a); err != nil {
		e.t.Fatalf("/ops/status body %s: %v", b, err)
	}
	return a
}

// TestOpsStatus: the status of a node with a real embedded outbox holding
// two records, one SSE stream and one WebSocket connection.
func TestOpsStatus(t *testing.T) {
	t.Parallel()
	store := openSQLiteOutbox(t)
	ctx := context.Background()
	occurred := time.Now().Add(-90 * time.Second).UTC().Truncate(time.Millisecond)
	for i, ch := range []string{"orders/1", "orders/2"} {
		n := stage.Notification{TenantID: "acme", Channel: ch, Type: "order.updated", SchemaVersion: 1,
			Payload: json.RawMessage(`{"n":1}`), OccurredAt: occurred.Add(time.Duration(i) * time.Second)}
		tx, err := store.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stage.StageSQL(ctx, tx, stage.SQLite, n); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	e := newEnv(t, envOptions{
		cfg:         Config{AdminToken: testAdminToken, MaxConnections: 7},
		readyChecks: []ReadyCheck{{Name: "outbox", Check: store.Ping}},
		deps:        func(d *Deps) { d.Ops = storeSource{store} },
	})

	before := time.Now().UTC()
	a := e.opsStatusOK()
	if a.Readiness.Status != "ready" || len(a.Readiness.Checks) != 1 || a.Readiness.Checks["outbox"] != "ok" {
		t.Errorf("readiness = %+v", a.Readiness)
	}
	if c := a.Connections; c.SSE != 0 || c.WS != 0 || c.Total != 0 || c.Max != 7 {
		t.Errorf("connections with none open = %+v", c)
	}
	o := a.Outbox
	if o.Status != "ok" || o.Pending == nil || *o.Pending != 2 || o.DeadLetters == nil || *o.DeadLetters != 0 {
		t.Fatalf("outbox = %+v", o)
	}
	if o.OldestPending == nil || !o.OldestPending.Equal(occurred) || o.OldestAge == nil || *o.OldestAge < 90 || *o.OldestAge > 120 {
		t.Errorf("oldest pending = %v, age %v; want %v, about 90 s", o.OldestPending, o.OldestAge, occurred)
	}
	if a.Time.Before(before.Add(-time.Second)) || a.Time.After(time.Now().Add(time.Second)) {
		t.Errorf("snapshot time %v is not now", a.Time)
	}

	// One stream of each transport.
	e.stream(e.token("acme", "u1", "orders/*"), "orders/1")
	ws := e.dialWS(wstest.DialOpts{})
	ws.Connect(e.token("acme", "u2", "orders/*"))
	a = e.opsStatusOK()
	if c := a.Connections; c.SSE != 1 || c.WS != 1 || c.Total != 2 || c.Max != 7 {
		t.Errorf("connections = %+v, want 1 SSE and 1 WebSocket of 7", c)
	}
	ws.Close()
	eventually(t, 5*time.Second, "the WebSocket connection to leave the count", func() bool {
		return e.opsStatusOK().Connections.WS == 0
	})
}

// TestOpsStoreErrorShown: a store that fails makes the outbox part an
// error status with null numbers, not a failed answer; a node without a
// source says it has no store.
func TestOpsStoreErrorShown(t *testing.T) {
	t.Parallel()
	// A real PostgreSQL server, asked for a database that does not exist.
	u, err := url.Parse(testenv.BaseDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/herald_missing_" + testenv.Suffix()
	store, err := outboxdb.Open(context.Background(), outboxdb.Config{DatabaseURL: u.String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	e := newEnv(t, envOptions{
		cfg:         Config{AdminToken: testAdminToken},
		readyChecks: []ReadyCheck{{Name: "outbox", Check: store.Ping}},
	})

	a := e.opsStatusOK()
	if o := a.Outbox; o.Status != "unavailable: this node has no outbox store" || o.Pending != nil || o.DeadLetters != nil || o.OldestPending != nil {
		t.Errorf("outbox without a source = %+v", o)
	}

	e = newEnv(t, envOptions{
		cfg:         Config{AdminToken: testAdminToken},
		readyChecks: []ReadyCheck{{Name: "outbox", Check: store.Ping}},
		deps:        func(d *Deps) { d.Ops = storeSource{store} },
	})
	a = e.opsStatusOK()
	o := a.Outbox
	if !strings.HasPrefix(o.Status, "error: ") || !strings.Contains(o.Status, "does not exist") {
		t.Errorf("outbox status %q, want the store's error", o.Status)
	}
	if o.Pending != nil || o.DeadLetters != nil || o.OldestPending != nil || o.OldestAge != nil {
		t.Errorf("numbers of a failed store = %+v, want null", o)
	}
	if a.Readiness.Status != "not_ready" || !strings.HasPrefix(a.Readiness.Checks["outbox"], "error: ") {
		t.Errorf("readiness = %+v, want the outbox check failing", a.Readiness)
	}
	if !strings.Contains(e.logs.String(), "reading the outbox failed") {
		t.Errorf("the store failure is not logged:\n%s", e.logs.String())
	}
}

// TestOpsRefusesWithoutTheToken: /ops/status answers 401 with a JSON error
// to no token, a wrong one, a prefix of it, another scheme, and the token
// anywhere but the Authorization header; the token is never logged.
func TestOpsRefusesWithoutTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{AdminToken: testAdminToken}})
	cases := map[string]request{
		"no token":     {},
		"wrong token":  {bearer: "ops-test-admin-token-0123456780"},
		"prefix":       {bearer: testAdminToken[:len(testAdminToken)-1]},
		"longer":       {bearer: testAdminToken + "0"},
		"basic scheme": {authorization: "Basic " + testAdminToken},
		"bare token":   {authorization: testAdminToken},
		"cookie":       {cookie: testAdminToken},
		"query":        {query: url.Values{"access_token": {testAdminToken}, "token": {testAdminToken}}},
	}
	for name, r := range cases {
		t.Run(name, func(t *testing.T) {
			r.path = "/ops/status"
			resp, cancel := e.do(r)
			defer cancel()
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401: %s", resp.StatusCode, b)
			}
			if resp.Header.Get("Cache-Control") != "no-store" || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
				t.Errorf("headers %v", resp.Header)
			}
			var body errorBody
			if err := json.Unmarshal(b, &body); err != nil || body.Error.Code != "unauthorized" || body.Error.Message == "" {
				t.Fatalf("body %s (%v), want a JSON unauthorized error", b, err)
			}
			if strings.Contains(string(b), "readiness") || strings.Contains(string(b), "outbox") {
				t.Errorf("a refusal leaks the status: %s", b)
			}
		})
	}
	e.opsStatusOK() // and the right one passes
	// The header is compared case-insensitively on the scheme, like tokens.
	resp, cancel := e.do(request{path: "/ops/status", authorization: "bearer " + testAdminToken})
	resp.Body.Close()
	cancel()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("lower-case bearer: %d", resp.StatusCode)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "operator view refused") {
		t.Errorf("refusals are not logged:\n%s", logs)
	}
	if strings.Contains(logs, "ops-test-admin-token") {
		t.Errorf("a token appears in the logs:\n%s", logs)
	}
}

// TestOpsDisabled: without an admin token every route of the view is 404,
// whatever the credentials.
func TestOpsDisabled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, path := range []string{"/ops", "/ops/", "/ops/status", "/ops/ops.js", "/ops/ops.css", "/ops/index.html"} {
		for _, bearer := range []string{"", testAdminToken} {
			resp, cancel := e.do(request{path: path, bearer: bearer})
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			cancel()
			var body errorBody
			if resp.StatusCode != http.StatusNotFound || json.Unmarshal(b, &body) != nil || body.Error.Code != "not_found" {
				t.Errorf("GET %s: %d %s, want a 404 JSON error", path, resp.StatusCode, b)
			}
		}
	}
	_, _, body := e.get("/ops/")
	if !strings.Contains(body, "operator view is not enabled") {
		t.Errorf("the 404 does not say the view is off: %s", body)
	}
}

// TestOpsPage: the page and its two files are served without the token,
// under a CSP with no inline script or style, and the page uses neither.
func TestOpsPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{AdminToken: testAdminToken}})
	for path, ct := range map[string]string{
		"/ops/":        "text/html; charset=utf-8",
		"/ops/ops.js":  "text/javascript; charset=utf-8",
		"/ops/ops.css": "text/css; charset=utf-8",
	} {
		status, h, body := e.get(path)
		if status != http.StatusOK || h.Get("Content-Type") != ct || body == "" {
			t.Fatalf("GET %s: %d %q, %d bytes", path, status, h.Get("Content-Type"), len(body))
		}
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self';") || !strings.Contains(csp, "style-src 'self';") ||
			strings.Contains(csp, "unsafe") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: headers %v", path, h)
		}
	}
	_, _, page := e.get("/ops/")
	if !strings.Contains(page, `<script src="ops.js" defer></script>`) || strings.Count(page, "<script") != 1 ||
		strings.Contains(page, "<style") || strings.Contains(page, " style=") || regexp.MustCompile(`\son[a-z]+=`).MatchString(page) {
		t.Errorf("the page has inline script or style:\n%s", page)
	}
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Errorf("the page loads something from elsewhere:\n%s", page)
	}
	_, _, js := e.get("/ops/ops.js")
	for _, want := range []string{"sessionStorage", "'status'", "Authorization"} {
		if !strings.Contains(js, want) {
			t.Errorf("ops.js lacks %q", want)
		}
	}
	// /ops leads to /ops/, so the page's relative URLs resolve under it.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(e.base + "/ops")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ops/" {
		t.Errorf("GET /ops: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Read-only: the status takes GET alone.
	req, _ := http.NewRequest(http.MethodPost, e.base+"/ops/status", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err = e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ops/status: %d", resp.StatusCode)
	}
}

func TestAdminTokenValidated(t *testing.T) {
	for tok, want := range map[string]string{
		"short":                      "AdminToken must be at least 16 bytes, got 5",
		"fifteen-bytes-x":            "AdminToken must be at least 16 bytes, got 15",
		"has a space in the middle!": "AdminToken must be visible ASCII",
		"tab\tseparated-0123456789":  "byte 4 is not",
		"naïve-token-0123456789":     "AdminToken must be visible ASCII",
	} {
		err := Config{AdminToken: tok}.withDefaults().validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("AdminToken %q: validate = %v, want ErrInvalidConfig mentioning %q", tok, err, want)
		}
		if err != nil && strings.Contains(err.Error(), tok) {
			t.Errorf("the error quotes the token: %v", err)
		}
	}
	if err := (Config{AdminToken: "sixteen-bytes-ok"}).withDefaults().validate(); err != nil {
		t.Errorf("a 16-byte token: %v", err)
	}
}
