package stage_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/pgstore"
	"github.com/heraldgw/herald/outboxfeed/sqlitestore"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/heraldgw/herald/internal/names"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// backend is one way a producer stages: a transaction that changes a
// business table (orders) and stages notifications, and the outbox store
// that reads them back as the Worker would.
type backend struct {
	store outboxfeed.Store
	// inTx runs fn in a producer transaction holding a new order id, and
	// commits when commit is true.
	inTx func(t *testing.T, commit bool, orderID int, fn func(stageFn) error) error
	// orderExists reports whether the business change committed.
	orderExists func(t *testing.T, orderID int) bool
}

// stageFn stages one notification in the backend's open transaction.
type stageFn func(n stage.Notification) (string, error)

const ordersDDL = `CREATE TABLE orders (id integer PRIMARY KEY, status text NOT NULL)`

func pgStore(t *testing.T) (*pgstore.Store, string) {
	t.Helper()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	s, err := pgstore.Open(ctx, pgstore.Config{URL: url})
	testenv.Must(t, err, "open postgres store")
	t.Cleanup(func() { _ = s.Close() })
	testenv.Must(t, s.Migrate(ctx), "migrate")
	_, err = s.Pool().Exec(ctx, ordersDDL)
	testenv.Must(t, err, "create orders")
	return s, url
}

// pgxBackend stages with stage.Stage on a pgx connection of its own.
func pgxBackend(t *testing.T) *backend {
	s, url := pgStore(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	testenv.Must(t, err, "connect")
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return &backend{
		store: s,
		inTx: func(t *testing.T, commit bool, orderID int, fn func(stageFn) error) error {
			tx, err := conn.Begin(ctx)
			testenv.Must(t, err, "begin")
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, `INSERT INTO orders (id, status) VALUES ($1, 'paid')`, orderID)
			testenv.Must(t, err, "insert order")
			if err := fn(func(n stage.Notification) (string, error) { return stage.Stage(ctx, tx, n) }); err != nil {
				return err
			}
			if commit {
				return tx.Commit(ctx)
			}
			return nil
		},
		orderExists: func(t *testing.T, id int) bool {
			var n int
			testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = $1`, id).Scan(&n), "count orders")
			return n == 1
		},
	}
}

// sqlBackend stages with stage.StageSQL on db, whose dialect it detects.
func sqlBackend(t *testing.T, store outboxfeed.Store, db *sql.DB, want stage.Dialect) *backend {
	t.Helper()
	ctx := context.Background()
	d, err := stage.DetectDialect(db)
	testenv.Must(t, err, "detect dialect")
	if d != want {
		t.Fatalf("DetectDialect = %v, want %v", d, want)
	}
	ph := "$1"
	if d == stage.SQLite {
		ph = "?"
	}
	return &backend{
		store: store,
		inTx: func(t *testing.T, commit bool, orderID int, fn func(stageFn) error) error {
			tx, err := db.BeginTx(ctx, nil)
			testenv.Must(t, err, "begin")
			defer func() { _ = tx.Rollback() }()
			_, err = tx.ExecContext(ctx, `INSERT INTO orders (id, status) VALUES (`+ph+`, 'paid')`, orderID)
			testenv.Must(t, err, "insert order")
			if err := fn(func(n stage.Notification) (string, error) { return stage.StageSQL(ctx, tx, d, n) }); err != nil {
				return err
			}
			if commit {
				return tx.Commit()
			}
			return nil
		},
		orderExists: func(t *testing.T, id int) bool {
			var n int
			testenv.Must(t, db.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE id = `+ph, id).Scan(&n), "count orders")
			return n == 1
		},
	}
}

func pgSQLBackend(t *testing.T) *backend {
	s, url := pgStore(t)
	db, err := sql.Open("pgx", url)
	testenv.Must(t, err, "open database/sql postgres")
	t.Cleanup(func() { _ = db.Close() })
	return sqlBackend(t, s, db, stage.Postgres)
}

func sqliteBackend(t *testing.T) *backend {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "herald.db")})
	testenv.Must(t, err, "open sqlite store")
	t.Cleanup(func() { _ = s.Close() })
	testenv.Must(t, s.Migrate(ctx), "migrate")
	// The application writes through a connection pool of its own, as it
	// would when it shares the file with Herald.
	db, err := sql.Open("sqlite", "file:"+s.Path()+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	testenv.Must(t, err, "open producer connection")
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.ExecContext(ctx, ordersDDL)
	testenv.Must(t, err, "create orders")
	return sqlBackend(t, s, db, stage.SQLite)
}

func TestStage(t *testing.T) {
	t.Parallel()
	backends := []struct {
		name  string
		setup func(*testing.T) *backend
	}{
		{"PostgresPgx", pgxBackend},
		{"PostgresDatabaseSQL", pgSQLBackend},
		{"SQLite", sqliteBackend},
	}
	tests := []struct {
		name string
		fn   func(*testing.T, *backend)
	}{
		{"EveryField", testEveryField},
		{"Defaults", testDefaults},
		{"SomeDefaults", testSomeDefaults},
		{"RollbackStagesNothing", testRollback},
		{"ValidationErrorsLeaveTxUsable", testValidation},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, b.setup(t))
				})
			}
		})
	}
}

func get(t *testing.T, b *backend, id string) outboxfeed.Record {
	t.Helper()
	r, err := b.store.Get(context.Background(), id)
	testenv.Must(t, err, "get "+id)
	return r
}

func jsonEqual(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w any
	testenv.Must(t, json.Unmarshal([]byte(got), &g), "unmarshal got")
	testenv.Must(t, json.Unmarshal([]byte(want), &w), "unmarshal want")
	return reflect.DeepEqual(g, w)
}

func testEveryField(t *testing.T, b *backend) {
	occurred := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)
	n := stage.Notification{
		ID:       "0F8FAD5B-D9CB-469F-A165-70867728950E", // canonical form is lower case
		TenantID: "acme", Channel: "orders/1", Type: "order.updated", SchemaVersion: 2,
		Payload:    json.RawMessage(`{"status":"paid","total":12.5}`),
		Freshness:  json.RawMessage(`{"mode":"advisory","authority":"order-1"}`),
		OccurredAt: occurred, Kind: stage.KindIntegrationEvent,
	}
	var id string
	testenv.Must(t, b.inTx(t, true, 1, func(s stageFn) (err error) {
		id, err = s(n)
		return err
	}), "stage and commit")
	if id != strings.ToLower(n.ID) {
		t.Fatalf("id = %q, want %q", id, strings.ToLower(n.ID))
	}
	r := get(t, b, id)
	if r.TenantID != "acme" || r.Channel != "orders/1" || r.Type != "order.updated" || r.SchemaVersion != 2 ||
		r.Kind != stage.KindIntegrationEvent || !r.OccurredAt.Equal(occurred) {
		t.Fatalf("record = %+v", r)
	}
	if !jsonEqual(t, string(r.Payload), string(n.Payload)) || !jsonEqual(t, string(r.Freshness), string(n.Freshness)) {
		t.Fatalf("payload %s, freshness %s", r.Payload, r.Freshness)
	}
	if _, ok := r.State.(outboxfeed.Pending); !ok {
		t.Fatalf("state = %#v, want Pending", r.State)
	}
	if !b.orderExists(t, 1) {
		t.Fatal("the business change did not commit")
	}
}

func testDefaults(t *testing.T, b *backend) {
	before := time.Now().Add(-time.Second)
	var id string
	testenv.Must(t, b.inTx(t, true, 1, func(s stageFn) (err error) {
		id, err = s(stage.Notification{
			TenantID: "acme", Channel: "orders/1", Type: "order.updated", SchemaVersion: 1,
			Payload: json.RawMessage(`"paid"`),
		})
		return err
	}), "stage and commit")
	if _, err := stage.ParseID(id); err != nil {
		t.Fatalf("generated id: %v", err)
	}
	r := get(t, b, id)
	if r.Kind != stage.KindNotification || !jsonEqual(t, string(r.Freshness), `{"mode":"immediate"}`) {
		t.Fatalf("kind %q, freshness %s", r.Kind, r.Freshness)
	}
	if r.OccurredAt.Before(before) || r.OccurredAt.After(time.Now().Add(time.Second)) {
		t.Fatalf("occurred_at %v is not now", r.OccurredAt)
	}
}

// testSomeDefaults: a notification that sets one of freshness, occurred_at
// and kind gets the defaults for the other two.
func testSomeDefaults(t *testing.T, b *backend) {
	before := time.Now().Add(-time.Second)
	ids := make([]string, 3)
	testenv.Must(t, b.inTx(t, true, 1, func(s stageFn) (err error) {
		n := stage.Notification{TenantID: "acme", Channel: "orders/1", Type: "order.updated", SchemaVersion: 1,
			Payload: json.RawMessage(`{}`)}
		for i := range ids {
			m := n
			switch i {
			case 0:
				m.Kind = stage.KindJourneyStepCommand
			case 1:
				m.Freshness = json.RawMessage(`{"mode":"advisory","authority":"order-1"}`)
			case 2:
				m.OccurredAt = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
			}
			if ids[i], err = s(m); err != nil {
				return err
			}
		}
		return nil
	}), "stage and commit")
	for i, id := range ids {
		r := get(t, b, id)
		kind, freshness, now := stage.KindNotification, `{"mode":"immediate"}`, true
		switch i {
		case 0:
			kind = stage.KindJourneyStepCommand
		case 1:
			freshness = `{"mode":"advisory","authority":"order-1"}`
		case 2:
			now = false
			if !r.OccurredAt.Equal(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)) {
				t.Errorf("record %d: occurred_at %v, want the one staged", i, r.OccurredAt)
			}
		}
		if r.Kind != kind || !jsonEqual(t, string(r.Freshness), freshness) {
			t.Errorf("record %d: kind %q, freshness %s; want %q, %s", i, r.Kind, r.Freshness, kind, freshness)
		}
		if now && (r.OccurredAt.Before(before) || r.OccurredAt.After(time.Now().Add(time.Second))) {
			t.Errorf("record %d: occurred_at %v is not now", i, r.OccurredAt)
		}
	}
}

func testRollback(t *testing.T, b *backend) {
	var ids []string
	testenv.Must(t, b.inTx(t, false, 1, func(s stageFn) error {
		for _, ch := range []string{"orders/1", "orders/2"} {
			id, err := s(stage.Notification{
				TenantID: "acme", Channel: ch, Type: "order.updated", SchemaVersion: 1,
				Payload: json.RawMessage(`{}`),
			})
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	}), "stage and roll back")
	for _, id := range ids {
		if _, err := b.store.Get(context.Background(), id); !errors.Is(err, outboxfeed.ErrNotFound) {
			t.Fatalf("Get(%s) after rollback: %v, want ErrNotFound", id, err)
		}
	}
	if b.orderExists(t, 1) {
		t.Fatal("the business change survived the rollback")
	}
}

func testValidation(t *testing.T, b *backend) {
	var id string
	testenv.Must(t, b.inTx(t, true, 1, func(s stageFn) error {
		for _, tc := range invalidNotifications() {
			if _, err := s(tc.n); !errors.Is(err, stage.ErrInvalidNotification) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err = %v, want ErrInvalidNotification mentioning %q", tc.name, err, tc.want)
			}
		}
		// Validation fails before any SQL, so the caller's transaction
		// (on PostgreSQL, aborted by any failed statement) is still usable.
		var err error
		id, err = s(valid())
		return err
	}), "stage after validation errors")
	get(t, b, id)
	if !b.orderExists(t, 1) {
		t.Fatal("the business change did not commit")
	}
}

func valid() stage.Notification {
	return stage.Notification{
		TenantID: "acme", Channel: "orders/1", Type: "order.updated", SchemaVersion: 1,
		Payload: json.RawMessage(`{"status":"paid"}`),
	}
}

type invalidCase struct {
	name string
	n    stage.Notification
	want string // in the error message
}

func invalidNotifications() []invalidCase {
	with := func(f func(*stage.Notification)) stage.Notification {
		n := valid()
		f(&n)
		return n
	}
	return []invalidCase{
		{"no tenant", with(func(n *stage.Notification) { n.TenantID = "" }), "tenant"},
		{"tenant with slash", with(func(n *stage.Notification) { n.TenantID = "a/b" }), "tenant"},
		{"no channel", with(func(n *stage.Notification) { n.Channel = "" }), "channel is empty"},
		{"channel empty segment", with(func(n *stage.Notification) { n.Channel = "orders//1" }), "empty segment"},
		{"channel too long", with(func(n *stage.Notification) { n.Channel = strings.Repeat("a", 256) }), "longer than 255"},
		{"no type", with(func(n *stage.Notification) { n.Type = "" }), "type must be 1–128 bytes"},
		{"type upper case", with(func(n *stage.Notification) { n.Type = "Order" }), "not one of [a-z0-9_.-]"},
		{"type too long", with(func(n *stage.Notification) { n.Type = strings.Repeat("t", 129) }), "type must be"},
		{"schema version 0", with(func(n *stage.Notification) { n.SchemaVersion = 0 }), "schema_version 0"},
		{"no payload", with(func(n *stage.Notification) { n.Payload = nil }), "payload is not valid JSON"},
		{"bad payload", with(func(n *stage.Notification) { n.Payload = json.RawMessage(`{`) }), "payload is not valid JSON"},
		{"bad freshness JSON", with(func(n *stage.Notification) { n.Freshness = json.RawMessage(`[`) }), "freshness"},
		{"freshness mode", with(func(n *stage.Notification) { n.Freshness = json.RawMessage(`{"mode":"eventual"}`) }), `mode "eventual"`},
		{"advisory without authority", with(func(n *stage.Notification) { n.Freshness = json.RawMessage(`{"mode":"advisory"}`) }), "needs an authority"},
		{"kind", with(func(n *stage.Notification) { n.Kind = "email" }), `kind "email"`},
		{"id not a uuid", with(func(n *stage.Notification) { n.ID = "order-1" }), `id "order-1" is not a uuid`},
		{"id without dashes", with(func(n *stage.Notification) { n.ID = "0f8fad5bd9cb469fa16570867728950e" }), "is not a uuid"},
	}
}

// TestValidate checks the rules without a database, and that name errors
// keep the gateway's ErrInvalidName in the chain.
func TestValidate(t *testing.T) {
	t.Parallel()
	n := valid()
	testenv.Must(t, n.Validate(), "validate a valid notification")
	for _, tc := range invalidNotifications() {
		if tc.n.ID != "" {
			continue // ids are checked by Stage and StageSQL, not Validate
		}
		err := tc.n.Validate()
		if !errors.Is(err, stage.ErrInvalidNotification) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want ErrInvalidNotification mentioning %q", tc.name, err, tc.want)
		}
		if nameErr := tc.want == "tenant" || strings.Contains(tc.name, "channel"); nameErr != errors.Is(err, names.ErrInvalidName) {
			t.Errorf("%s: errors.Is(err, ErrInvalidName) = %v", tc.name, !nameErr)
		}
	}
}

type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) { return nil, errors.New("fake") }

func init() { sql.Register("stage-test-fake", fakeDriver{}) }

func TestDialect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		driver string
		want   stage.Dialect
	}{{"pgx", stage.Postgres}, {"sqlite", stage.SQLite}} {
		db, err := sql.Open(tc.driver, "")
		testenv.Must(t, err, "open "+tc.driver)
		d, err := stage.DetectDialect(db)
		_ = db.Close()
		if err != nil || d != tc.want {
			t.Errorf("DetectDialect(%s) = %v, %v; want %v", tc.driver, d, err, tc.want)
		}
	}

	db, err := sql.Open("stage-test-fake", "")
	testenv.Must(t, err, "open fake")
	defer db.Close()
	if d, err := stage.DetectDialect(db); !errors.Is(err, stage.ErrUnknownDialect) || !strings.Contains(err.Error(), "stage_test.fakeDriver") {
		t.Fatalf("DetectDialect(fake) = %v, %v; want ErrUnknownDialect naming the driver", d, err)
	}

	// The zero Dialect is refused before any SQL: StageSQL never guesses.
	tx := sqlTx(t, "sqlite", filepath.Join(t.TempDir(), "x.db"))
	if _, err := stage.StageSQL(context.Background(), tx, 0, valid()); !errors.Is(err, stage.ErrUnknownDialect) {
		t.Fatalf("StageSQL with the zero Dialect: %v, want ErrUnknownDialect", err)
	}
	if s := stage.Dialect(0).String(); s != "Dialect(0)" {
		t.Fatalf("Dialect(0).String() = %q", s)
	}
}

// TestStageWithoutSchema checks that a database error (here: the schema
// was never migrated) is wrapped as such, not as a validation error.
func TestStageWithoutSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	check := func(t *testing.T, what string, err error, want string) {
		t.Helper()
		if err == nil || errors.Is(err, stage.ErrInvalidNotification) ||
			!strings.HasPrefix(err.Error(), "stage: insert: ") || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s without the schema: %v, want a database error mentioning %q", what, err, want)
		}
	}
	t.Run("Postgres", func(t *testing.T) {
		t.Parallel()
		url := testenv.DatabaseURL(t)
		conn, err := pgx.Connect(ctx, url)
		testenv.Must(t, err, "connect")
		defer conn.Close(ctx)
		tx, err := conn.Begin(ctx)
		testenv.Must(t, err, "begin")
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = stage.Stage(ctx, tx, valid())
		check(t, "Stage", err, `relation "herald.outbox" does not exist`)

		_, err = stage.StageSQL(ctx, sqlTx(t, "pgx", url), stage.Postgres, valid())
		check(t, "StageSQL", err, `relation "herald.outbox" does not exist`)
	})
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		_, err := stage.StageSQL(ctx, sqlTx(t, "sqlite", filepath.Join(t.TempDir(), "empty.db")), stage.SQLite, valid())
		check(t, "StageSQL", err, "no such table: outbox")
	})
}

// sqlTx begins a transaction on a new database/sql pool of driver on
// dsn; the test's end rolls it back and closes the pool.
func sqlTx(t *testing.T, driver, dsn string) *sql.Tx {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	testenv.Must(t, err, "open "+driver)
	t.Cleanup(func() { _ = db.Close() })
	tx, err := db.Begin()
	testenv.Must(t, err, "begin")
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}
