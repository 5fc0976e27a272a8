package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/storetest"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

func newSQLiteStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "herald.db")})
	testenv.Must(t, err, "open sqlite store")
	t.Cleanup(func() { _ = s.Close() })
	testenv.Must(t, s.Migrate(context.Background()), "migrate")
	return s
}

func sqliteHarness(t *testing.T) *storetest.Harness {
	s := newSQLiteStore(t)
	// The producer writes through a connection of its own, as an
	// application sharing the file would. It waits for the write lock as
	// long as a test may: under -race the pure-Go SQLite runs two orders of
	// magnitude slower, and a handler whose target is down claims its
	// backlog again and again, each claim holding the lock.
	producer, err := sql.Open("sqlite", "file:"+s.Path()+"?_pragma=busy_timeout(60000)&_txlock=immediate")
	testenv.Must(t, err, "open producer connection")
	t.Cleanup(func() { _ = producer.Close() })
	return &storetest.Harness{
		Store: s,
		Table: "outbox",
		Stage: func(t *testing.T, commit bool, ns ...stage.Notification) []string {
			t.Helper()
			ctx := context.Background()
			tx, err := producer.BeginTx(ctx, nil)
			testenv.Must(t, err, "begin")
			defer func() { _ = tx.Rollback() }()
			ids := make([]string, len(ns))
			for i, n := range ns {
				ids[i], err = stage.StageSQL(ctx, tx, stage.SQLite, n)
				testenv.Must(t, err, "stage")
			}
			if commit {
				testenv.Must(t, tx.Commit(), "commit")
			}
			return ids
		},
		Exec: func(ctx context.Context, q string) error {
			_, err := s.DB().ExecContext(ctx, q)
			return err
		},
		PartitionOf: func(*testing.T, fanout.Key) int { return 0 }, // one partition
		Queued: func(t *testing.T, k fanout.Key) int {
			var n int
			testenv.Must(t, s.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM outbox_retry
				WHERE tenant_id = ?1 AND channel = ?2 AND state = 'pending'`, k.Tenant, k.Channel).Scan(&n), "count queued")
			return n
		},
		StageOne: func(ctx context.Context, n stage.Notification) (string, error) {
			return stageOne(ctx, s, n)
		},
		DueNow: func(t *testing.T) {
			_, err := s.DB().ExecContext(context.Background(), `UPDATE outbox_retry SET next_attempt_at = 0 WHERE state = 'pending'`)
			testenv.Must(t, err, "make the retry queue due")
		},
	}
}

func TestSQLiteConformance(t *testing.T) {
	storetest.Run(t, sqliteHarness)
}

func TestSQLiteOpen(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "b")
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: "sqlite://" + filepath.Join(dir, "h.db")})
	testenv.Must(t, err, "open")
	defer s.Close()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("data directory not created: %v", err)
	}
	var mode string
	testenv.Must(t, s.DB().QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode), "journal_mode")
	if mode != "wal" {
		t.Fatalf("journal_mode = %q, want wal", mode)
	}
	testenv.Must(t, s.Migrate(ctx), "migrate")
	var version int
	testenv.Must(t, s.DB().QueryRowContext(ctx, "SELECT max(version) FROM schema_migrations").Scan(&version), "migrations table")
	if version != len(sqliteMigrations) {
		t.Fatalf("schema version %d, want %d", version, len(sqliteMigrations))
	}
	for _, bad := range []string{":memory:", "sqlite://", "file:?mode=memory", "x.db?cache=shared"} {
		if _, err := Open(ctx, Config{Path: bad}); !errors.Is(err, outboxfeed.ErrInvalidConfig) {
			t.Errorf("Open(%q) = %v, want ErrInvalidConfig", bad, err)
		}
	}
}

func TestSQLitePath(t *testing.T) {
	for in, want := range map[string]string{
		"herald-data/herald.db":       "herald-data/herald.db",
		"sqlite:///var/lib/herald.db": "/var/lib/herald.db",
		"sqlite://rel/herald.db":      "rel/herald.db",
		"file:/tmp/h.db?cache=shared": "/tmp/h.db",
		"file:data/h.db":              "data/h.db",
	} {
		got, q, err := sqlitePath(in)
		if err != nil || got != want {
			t.Errorf("sqlitePath(%q) = %q, %v; want %q", in, got, err, want)
		}
		if in == "file:/tmp/h.db?cache=shared" && q.Get("cache") != "shared" {
			t.Errorf("query of %q lost: %v", in, q)
		}
	}
}

// stageOne stages n in a transaction of its own on the store's connection
// and wakes this process's Workers.
func stageOne(ctx context.Context, s *Store, n stage.Notification) (id string, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		id, err = stage.StageSQL(ctx, tx, stage.SQLite, n)
		return err
	})
	if err != nil {
		return "", err
	}
	s.Notify()
	return id, nil
}

func TestSQLiteHandlers(t *testing.T) {
	storetest.RunHandlers(t, sqliteHarness)
}

func TestSQLiteReaders(t *testing.T) {
	storetest.RunReaders(t, sqliteHarness, func(t *testing.T, h *storetest.Harness, handler, owner string, age time.Duration) {
		t.Helper()
		q := fmt.Sprintf(`UPDATE outbox_reader SET seen_at = %d WHERE handler = '%s' AND owner = '%s'`,
			time.Now().Add(-age).UnixMicro(), handler, owner)
		if err := h.Exec(context.Background(), q); err != nil {
			t.Fatalf("age the reader row: %v", err)
		}
	})
}
