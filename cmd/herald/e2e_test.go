package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/outboxdb"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
)

const testSecret = "e2e-secret-0123456789abcdef-0123456789"

var listenRE = regexp.MustCompile(`listening on (http://\S+)`)

// startServe runs `herald serve` in-process and returns its base URL. The
// server stops when the test ends.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	p := startInProcess(append([]string{"serve", "--listen", "127.0.0.1:0", "--jwt-hmac-secret", testSecret,
		"--data-dir", t.TempDir(), "--outbox-poll-interval", "50ms", "--log-level", "warn"}, args...))
	t.Cleanup(func() {
		p.stop(t, 30*time.Second)
		if t.Failed() {
			t.Logf("serve stderr:\n%s", p.errOut.String())
		}
	})
	var base string
	p.waitUntil(t, 30*time.Second, "its address", func() bool {
		m := listenRE.FindStringSubmatch(p.out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	return base
}

func mint(t *testing.T, tenant, sub string, grants ...string) string {
	t.Helper()
	tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{
		Subject: sub, Tenant: tenant, Subscribe: grants, ExpiresAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// stager stages notifications in the producer's own transaction.
type stager interface {
	stage(t *testing.T, n stage.Notification, commit bool) string
}

type pgStager struct{ url string }

func (p pgStager) stage(t *testing.T, n stage.Notification, commit bool) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A business change in the same transaction.
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, status text)`); err != nil {
		t.Fatal(err)
	}
	id, err := stage.Stage(ctx, tx, n)
	if err != nil {
		t.Fatal(err)
	}
	if commit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

type sqliteStager struct{ path string }

func (s sqliteStager) stage(t *testing.T, n stage.Notification, commit bool) string {
	t.Helper()
	ctx := context.Background()
	// A producer sharing the embedded store waits for Herald's short write
	// transactions (busy_timeout) and takes its write lock up front.
	db, err := sql.Open("sqlite", "file:"+s.path+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, status text)`); err != nil {
		t.Fatal(err)
	}
	id, err := stage.StageSQL(ctx, tx, stage.SQLite, n)
	if err != nil {
		t.Fatal(err)
	}
	if commit {
		err = tx.Commit()
	} else {
		err = tx.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// storeArgs are the flags that select the store of dbURL, as storeCases
// return it: --database-url for PostgreSQL, --data-dir for the SQLite file
// <dir>/herald.db.
func storeArgs(dbURL string) []string {
	if outboxdb.IsPostgresURL(dbURL) {
		return []string{"--database-url", dbURL}
	}
	return []string{"--data-dir", filepath.Dir(dbURL)}
}

// storeCase is one outbox store the end-to-end tests run against.
type storeCase struct {
	name  string
	setup func(t *testing.T) (dbURL string, st stager)
}

// migrated sets the store up and migrates it with herald migrate; db
// names it to herald's commands.
func (sc storeCase) migrated(t *testing.T) (dbURL string, st stager, db []string) {
	t.Helper()
	dbURL, st = sc.setup(t)
	db = storeArgs(dbURL)
	mustHerald(t, append([]string{"migrate", "--log-level", "warn", "--create-data-dir"}, db...)...)
	return dbURL, st, db
}

func storeCases() []storeCase {
	return []storeCase{
		{"postgres", func(t *testing.T) (string, stager) {
			u := testenv.DatabaseURL(t)
			return u, pgStager{u}
		}},
		{"sqlite", func(t *testing.T) (string, stager) {
			p := filepath.Join(t.TempDir(), "herald.db")
			return p, sqliteStager{p}
		}},
	}
}

func notification(tenant, channel string, data string) stage.Notification {
	return stage.Notification{
		TenantID: tenant, Channel: channel, Type: "order.updated", SchemaVersion: 2,
		Payload: json.RawMessage(data),
	}
}

// forEachServedStore runs f as a subtest for each store, with a herald
// serve on it at base.
func forEachServedStore(t *testing.T, f func(t *testing.T, dbURL string, st stager, base string)) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			dbURL, st := sc.setup(t)
			f(t, dbURL, st, startServe(t, storeArgs(dbURL)...))
		})
	}
}

func TestCommittedRecordReachesSubscriber(t *testing.T) {
	forEachServedStore(t, func(t *testing.T, dbURL string, st stager, base string) {
		sseURL := base + "/v1/sse?channel=orders/1"

		mine := subscribeSSE(t, sseURL, mint(t, "acme", "u1", "orders/*"), "")
		other := subscribeSSE(t, sseURL, mint(t, "globex", "u9", "orders/*"), "")

		rolledBack := st.stage(t, notification("acme", "orders/1", `{"status":"cancelled"}`), false)
		before := time.Now().Add(-time.Second)
		id := st.stage(t, notification("acme", "orders/1", `{"status":"paid","total":12.5}`), true)

		e, cursor := mine.nextPublication(t, 10*time.Second)
		if e.ID != id {
			t.Fatalf("first publication id %s, want the committed %s (rolled back was %s)", e.ID, id, rolledBack)
		}
		if e.Key.Channel != "orders/1" || e.Offset != 1 || e.Epoch == "" || e.Type != "order.updated" || e.SchemaVersion != 2 {
			t.Fatalf("envelope %+v", e)
		}
		if e.Time.Before(before) || e.Time.After(time.Now().Add(time.Second)) {
			t.Fatalf("time %v not around the commit", e.Time)
		}
		if string(e.Freshness) != `{"mode":"immediate"}` {
			t.Fatalf("freshness %s", e.Freshness)
		}
		// jsonb keeps the value, not the key order or spacing.
		var data map[string]any
		if err := json.Unmarshal(e.Data, &data); err != nil || data["status"] != "paid" || data["total"] != 12.5 || len(data) != 2 {
			t.Fatalf("data %s", e.Data)
		}
		if cursor == "" {
			t.Fatal("publication without an id: cursor")
		}
		mine.expectNextMarker(t, st, "acme", "orders/1", 2)    // the rolled-back record never comes
		other.expectNextMarker(t, st, "globex", "orders/1", 1) // globex's orders/1 is another channel

		store, err := outboxdb.Open(context.Background(), outboxdb.Config{DatabaseURL: dbURL})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		waitDispatched(t, store, id)
		if _, err := store.Get(context.Background(), rolledBack); err == nil {
			t.Fatalf("rolled-back record %s exists in the outbox", rolledBack)
		}
	})
}

func waitDispatched(t *testing.T, store outboxfeed.Store, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rec, err := store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := rec.State.(outboxfeed.Dispatched); ok {
			if d.At.IsZero() {
				t.Fatal("dispatched without dispatched_at")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %s is %s, want dispatched", id, rec.State.Name())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestResumeAfterReconnect(t *testing.T) {
	forEachServedStore(t, func(t *testing.T, dbURL string, st stager, base string) {
		sseURL := base + "/v1/sse?channel=orders/7"
		tok := mint(t, "acme", "u1", "orders/*")

		s := subscribeSSE(t, sseURL, tok, "")
		first := st.stage(t, notification("acme", "orders/7", `{"n":1}`), true)
		e, lastID := s.nextPublication(t, 10*time.Second)
		if e.ID != first {
			t.Fatalf("got %s want %s", e.ID, first)
		}
		s.Close()

		var missed []string
		for i := 2; i <= 4; i++ {
			missed = append(missed, st.stage(t, notification("acme", "orders/7", `{"n":`+string(rune('0'+i))+`}`), true))
		}
		store, err := outboxdb.Open(context.Background(), outboxdb.Config{DatabaseURL: dbURL})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		for _, id := range missed {
			waitDispatched(t, store, id)
		}

		r := subscribeSSE(t, sseURL, tok, lastID)
		if !strings.Contains(r.Subscribed, `"recovered":true`) {
			t.Fatalf("want subscribed with recovered:true, got %s", r.Subscribed)
		}
		for i, want := range missed {
			e, _ := r.nextPublication(t, 5*time.Second)
			if e.ID != want || e.Offset != uint64(i+2) {
				t.Fatalf("resumed #%d: id %s offset %d, want %s offset %d", i, e.ID, e.Offset, want, i+2)
			}
		}
		r.expectNextMarker(t, st, "acme", "orders/7", uint64(len(missed)+2))
	})
}

func TestSSERefusals(t *testing.T) {
	base := startServe(t)
	cases := []struct {
		name, query, token string
		status             int
		code               string
	}{
		{"no token", "channel=orders/1", "", 401, "unauthorized"},
		{"garbage token", "channel=orders/1", "not.a.jwt", 401, "unauthorized"},
		{"expired token", "channel=orders/1", expired(t), 401, "token_expired"},
		{"no grant", "channel=invoices/1", mint(t, "acme", "u1", "orders/*"), 403, "forbidden"},
		{"one of two not granted", "channel=orders/1&channel=invoices/1", mint(t, "acme", "u1", "orders/*"), 403, "forbidden"},
		{"bad channel", "channel=orders//1", mint(t, "acme", "u1", "orders/*"), 400, "bad_request"},
		{"bad cursor", "channel=orders/1&last_event_id=%21%21", mint(t, "acme", "u1", "orders/*"), 400, "bad_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openSSE(t, base+"/v1/sse?"+c.query, c.token, "")
			if s.Status != c.status {
				t.Fatalf("status %d, want %d: %s", s.Status, c.status, s.Body)
			}
			var body struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(s.Body), &body); err != nil {
				t.Fatalf("body is not a JSON error: %q", s.Body)
			}
			if body.Error.Code != c.code || body.Error.Message == "" {
				t.Fatalf("error %+v, want code %s with a message", body.Error, c.code)
			}
		})
	}
}

func expired(t *testing.T) string {
	t.Helper()
	tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{
		Subject: "u1", Tenant: "acme", Subscribe: []string{"orders/*"}, ExpiresAt: time.Now().Add(-time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
