package sqlitestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

// TestSQLiteSchemaRollback takes a file of the current schema with
// records in every state (dispatched, dead-lettered, waiting for a retry
// with one held behind it, never claimed) back to version 3: every record
// keeps its state, the schema is exactly migration 3's, a producer of that
// release stages into it, and once upgraded again every record not yet
// delivered is delivered once, in order, and no other.
func TestSQLiteSchemaRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSQLiteStore(t)
	last := len(sqliteMigrations)
	const older = 3 // every step since has a down step
	e := storetest.StageEveryState(t, s, func(ns ...stage.Notification) []string { return sbStage(t, s, ns...) }, false, 0)
	newer := sqliteSchemaShape(t, s)
	testenv.Must(t, s.MigrateTo(ctx, older), "roll back one step")
	if v, err := s.SchemaVersion(ctx); err != nil || v != older {
		t.Fatalf("after the rollback: version %d, %v; want %d", v, err, older)
	}
	e.CheckStates(t, before5{s})

	fresh, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "fresh.db")})
	testenv.Must(t, err, "open a fresh file")
	t.Cleanup(func() { _ = fresh.Close() })
	testenv.Must(t, fresh.MigrateTo(ctx, older), "a fresh schema at the older version")
	if got, want := sqliteSchemaShape(t, s), sqliteSchemaShape(t, fresh); got != want {
		t.Fatalf("the schema rolled back differs from a fresh one of version %d:\ngot  %s\nwant %s", older, got, want)
	}
	if sqliteSchemaShape(t, s) == newer {
		t.Fatal("the schema's shape does not tell the versions apart")
	}

	later := sbStage(t, s, storetest.Note("r/pending", `{"n":3}`))
	testenv.Must(t, s.MigrateTo(ctx, last), "upgrade again")
	e.CheckDeliveredOnce(t, s, func() {
		_, err := s.DB().Exec(`UPDATE outbox_retry SET next_attempt_at = 0 WHERE state = 'pending'`)
		testenv.Must(t, err, "make the retry due")
	}, map[string][]string{"r/pending": later})
}

// TestSQLiteSchemaRollbackRefused: migration 4 is not reversed while a
// claim is open (a Worker died holding it), nor past migration 3, which
// has no down step; the refusals say what to do, and nothing changes.
func TestSQLiteSchemaRollbackRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSQLiteStore(t)
	last := len(sqliteMigrations)
	ids := sbStage(t, s, storetest.Note("a", `{"n":1}`), storetest.Note("a", `{"n":2}`))
	b, err := s.Claim(ctx, outboxfeed.ClaimRequest{Owner: "dead-worker", Partition: outboxfeed.AnyPartition, Limit: 10, Lease: time.Millisecond})
	testenv.Must(t, err, "the dead holder's claim")
	if b == nil || len(b.Records) != 2 {
		t.Fatalf("the dead holder's claim: %+v", b)
	}
	for _, c := range []struct {
		to   int
		want []string
	}{
		{3, []string{"migration 4 (takeover extent) cannot be reversed now", "a claim is open up to seq 2", "stop every Worker"}},
		{2, []string{"migration 3 (outbox partition batches) cannot be reversed", `herald outbox stats says "oldest waiting record: none"`,
			`sqlite3 ` + s.Path() + ` ".backup `, sqliteTables, "docs/runbooks/rollback-schema.md"}},
	} {
		err := s.MigrateTo(ctx, c.to)
		if !errors.Is(err, outboxfeed.ErrRollbackRefused) {
			t.Fatalf("rollback to %d = %v, want ErrRollbackRefused", c.to, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the refusal to go to %d does not say %q:\n%v", c.to, w, err)
			}
		}
		if v, err := s.SchemaVersion(ctx); err != nil || v != last {
			t.Fatalf("after the refusal: version %d, %v; want %d", v, err, last)
		}
	}
	// The drop list of the advice is every table and view Herald has.
	var objs []string
	rows, err := s.DB().Query(`SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'`)
	testenv.Must(t, err, "list tables")
	for rows.Next() {
		var typ, name string
		testenv.Must(t, rows.Scan(&typ, &name), "scan table")
		objs = append(objs, "DROP "+strings.ToUpper(typ)+" "+name+";")
	}
	testenv.Must(t, rows.Err(), "tables")
	drops := strings.Split(strings.ReplaceAll(sqliteTables, "; ", ";\n"), "\n")
	slices.Sort(drops)
	slices.Sort(objs)
	if strings.Join(objs, " ") != strings.Join(drops, " ") {
		t.Fatalf("the advice drops %v; Herald's schema has %v", drops, objs)
	}
	storetest.StartWorker(t, s, storetest.NewRecorder(), outboxfeed.WorkerConfig{LeaseDuration: time.Second})
	storetest.EventuallyIn[outboxfeed.Dispatched](t, time.Minute, "the claimed records delivered", s, ids[1])
}

// sqliteSchemaShape describes the file's schema: every table's and view's
// columns, every index and trigger, and the migrations recorded.
func sqliteSchemaShape(t *testing.T, s *Store) string {
	t.Helper()
	var shape string
	testenv.Must(t, s.DB().QueryRow(`
SELECT group_concat(x, char(10)) FROM (SELECT x FROM (
	SELECT 'column ' || m.name || '.' || p.name || ' ' || p.type || ' ' || p."notnull" || ' ' || coalesce(p.dflt_value, '') || ' ' || p.pk AS x
	FROM sqlite_master m, pragma_table_info(m.name) p WHERE m.type IN ('table', 'view')
	UNION ALL
	SELECT m.type || ' ' || m.name || ' ' || coalesce(m.sql, '') FROM sqlite_master m WHERE m.type IN ('index', 'trigger', 'view')
	UNION ALL
	SELECT 'migration ' || version || ' ' || name FROM schema_migrations) ORDER BY x)`).Scan(&shape), "schema shape")
	return shape
}

// The runbook says which SQLite steps go back, and drops what the
// advice drops.
func TestSQLiteRollbackDoc(t *testing.T) {
	storetest.CheckRollbackDoc(t, "SQLite", sqliteMigrations)
	b, err := os.ReadFile(storetest.RollbackDoc)
	testenv.Must(t, err, "read the runbook")
	if !strings.Contains(string(b), `sqlite3 herald-data/herald.db "`+sqliteTables+`"`) {
		t.Fatalf("%s does not drop what the advice drops: %s", storetest.RollbackDoc, sqliteTables)
	}
}

// before5 reads records of a schema from before migration 5, whose view
// has no handler column.
type before5 struct{ *Store }

func (s before5) Get(ctx context.Context, id string) (outboxfeed.Record, error) {
	return s.get(ctx, id, `SELECT `+sqliteRecordColumns+` FROM outbox_record WHERE id = ?1`)
}

// Migration 5 goes back only once realtime is the sole handler.
func TestSQLiteHandlersRollback(t *testing.T) {
	t.Parallel()
	storetest.HandlersRollback(t, newSQLiteStore(t), 4)
}

// The migration files read, with every directive expanded.
func TestSQLiteMigrationFiles(t *testing.T) {
	storetest.CheckMigrationFiles(t, migrationFiles, "migration", sqliteMigrations, sqliteMigrationsErr)
}
