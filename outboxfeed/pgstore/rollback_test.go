package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

// TestPostgresSchemaRollback takes a database of the current schema with
// records in every state (dispatched, dead-lettered, waiting for a retry
// with one held behind it, claimed by a Worker that died, never claimed)
// back to version 6 (from 7: every step since has a down step): refused while the dead Worker's lease lasts, then
// done; every record keeps its state, the schema is exactly migration 6's,
// and a producer of that release stages into it. Then either a Worker of
// that release (migration 6's functions, as its outboxfeed calls them)
// delivers every record not yet delivered, once and in order, and no
// other; or the schema is upgraded again and this release's Worker does.
func TestPostgresSchemaRollback(t *testing.T) {
	t.Parallel()
	for _, older := range []bool{true, false} {
		name := "upgraded again"
		if older {
			name = "older release"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testPostgresSchemaRollback(t, older)
		})
	}
}

// pgOlderVersion is the version TestPostgresSchemaRollback goes back to:
// v6Drain calls its functions.
const pgOlderVersion = 6

func testPostgresSchemaRollback(t *testing.T, older bool) {
	ctx := context.Background()
	s, _ := newPGStore(t, Config{})
	last := len(pgMigrations)
	e := storetest.StageEveryState(t, s, func(ns ...stage.Notification) []string { return pgStage(t, s, ns...) }, true, 2*time.Second)

	err := s.MigrateTo(ctx, pgOlderVersion)
	if !errors.Is(err, outboxfeed.ErrRollbackRefused) || !strings.Contains(err.Error(), "is leased to dead-worker") {
		t.Fatalf("rollback while a lease lasts = %v, want refused naming the lease", err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != last {
		t.Fatalf("after the refusal: version %d, %v; want %d", v, err, last)
	}
	storetest.Eventually(t, time.Minute, "the dead holder's lease to end", func() bool {
		var live bool
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM herald.outbox_partition WHERE owner IS NOT NULL AND expires_at > now())`).Scan(&live), "leases")
		return !live
	})
	newer := pgSchemaShape(t, s)
	testenv.Must(t, s.MigrateTo(ctx, pgOlderVersion), "roll back one step")
	if v, err := s.SchemaVersion(ctx); err != nil || v != pgOlderVersion {
		t.Fatalf("after the rollback: version %d, %v; want %d", v, err, pgOlderVersion)
	}
	e.CheckStates(t, before8{s})

	// Exactly the schema migration 6 makes.
	fresh, err := Open(ctx, Config{URL: testenv.DatabaseURL(t)})
	testenv.Must(t, err, "open a fresh database")
	t.Cleanup(func() { _ = fresh.Close() })
	testenv.Must(t, fresh.migrateTo(ctx, pgOlderVersion), "a fresh schema at the older version")
	if got, want := pgSchemaShape(t, s), pgSchemaShape(t, fresh); got != want {
		t.Fatalf("the schema rolled back differs from a fresh one of version %d:\n%s", pgOlderVersion, shapeDiff(got, want))
	}
	if shape := pgSchemaShape(t, s); shape == newer || !strings.Contains(shape, "function outbox_complete(") {
		t.Fatalf("the schema's shape does not tell the versions apart:\n%s", shape)
	}

	// A producer of the older release stages meanwhile.
	later := pgStage(t, s, storetest.Note("r/pending", `{"n":3}`))
	makeDue := func() {
		_, err := s.Pool().Exec(ctx, `UPDATE herald.outbox_retry SET next_attempt_at = now() WHERE state = 'pending'`)
		testenv.Must(t, err, "make the retry due")
	}
	if !older {
		testenv.Must(t, s.MigrateTo(ctx, last), "upgrade again")
		e.CheckDeliveredOnce(t, s, makeDue, map[string][]string{"r/pending": later})
		return
	}
	makeDue()
	got, takeovers := v6Drain(t, s)
	want := map[string][]string{"r/retry": e.Retry, "r/claimed": e.Claimed, "r/pending": append(append([]string(nil), e.Pending...), later...)}
	n := 0
	for ch, ids := range want {
		n += len(ids)
		if fmt.Sprint(got[ch]) != fmt.Sprint(ids) {
			t.Fatalf("the older release delivered %v on %s, want %v (each once, in order)", got[ch], ch, ids)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the older release delivered %v, want only %v", got, want)
	}
	for _, id := range e.Claimed {
		if !takeovers[id] {
			t.Fatalf("%s, claimed by the Worker that died, was not published as a takeover", id)
		}
	}
	for _, ids := range want {
		for _, id := range ids {
			if _, ok := storetest.StateOf(t, before8{s}, id).(outboxfeed.Dispatched); !ok {
				t.Fatalf("%s after the older release's Worker: %#v", id, storetest.StateOf(t, before8{s}, id))
			}
		}
	}
	if _, ok := storetest.StateOf(t, before8{s}, e.Dead[0]).(outboxfeed.DeadLetter); !ok {
		t.Fatalf("the dead letter: %#v", storetest.StateOf(t, before8{s}, e.Dead[0]))
	}

	// Forward again: this release's Worker delivers what is staged next,
	// and nothing the older one delivered.
	testenv.Must(t, s.MigrateTo(ctx, last), "upgrade again")
	next := pgStage(t, s, storetest.Note("r/pending", `{"n":4}`))
	rec := storetest.NewRecorder()
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{})
	rec.WaitFor(t, time.Minute, "the record staged after the upgrade", func() bool { _, ok := rec.ByID(next[0]); return ok })
	storetest.EventuallyIn[outboxfeed.Dispatched](t, time.Minute, "it is dispatched", s, next[0])
	if c := rec.Count(); c != 1 {
		t.Fatalf("after the upgrade %d deliveries, want only %s (the older release delivered %d)", c, next[0], n)
	}
}

// v6Drain is a Worker of the release whose schema is version 6, as its
// outboxfeed calls migration 6's functions: it claims every partition
// with work until none has any, publishes a claim's retry-queue rows, then
// its range in seq order, and completes each claim with everything done.
// It returns the ids published per channel (tenant acme) and those
// published as a takeover.
func v6Drain(t *testing.T, s *Store) (map[string][]string, map[string]bool) {
	t.Helper()
	ctx := context.Background()
	got, takeovers := map[string][]string{}, map[string]bool{}
	for range 100 {
		type row struct {
			kind    byte
			part    int
			fence   int64
			qseq    *int64
			id      *string
			seq     *int64
			channel *string
			tk      bool
			tkq     int64
		}
		rows, err := s.Pool().Query(ctx, `SELECT r_kind, r_part, r_fence, r_qseq, r_id::text, r_seq, r_channel, r_tk, r_tkq
			FROM herald.outbox_claim(-1, 'older-worker', '1 minute', 1000, 8, 100000)`)
		testenv.Must(t, err, "migration 6's claim")
		var q, r []row
		for rows.Next() {
			var x row
			testenv.Must(t, rows.Scan(&x.kind, &x.part, &x.fence, &x.qseq, &x.id, &x.seq, &x.channel, &x.tk, &x.tkq), "scan the claim")
			switch x.kind {
			case 'q':
				q = append(q, x)
			case 'r':
				r = append(r, x)
			}
		}
		testenv.Must(t, rows.Err(), "the claim's rows")
		if len(q)+len(r) == 0 {
			return got, takeovers
		}
		if len(r) > 100000 {
			t.Fatal("a range larger than the test reads at once")
		}
		slices.SortFunc(r, func(a, b row) int { return cmp.Compare(*a.seq, *b.seq) })
		var qseqs []int64
		var qstates []string
		var qattempts []int32
		var qdelays []int64
		var qerrs []*string
		for _, x := range append(q, r...) {
			got[*x.channel] = append(got[*x.channel], *x.id)
			if x.tk || x.qseq != nil && *x.qseq <= x.tkq {
				takeovers[*x.id] = true
			}
		}
		for _, x := range q {
			qseqs, qstates, qattempts, qdelays, qerrs = append(qseqs, *x.qseq), append(qstates, outboxfeed.StateDispatched),
				append(qattempts, 0), append(qdelays, 0), append(qerrs, nil)
		}
		first := append(q, r...)[0]
		var lastSeq *int64
		if len(r) > 0 {
			lastSeq = r[len(r)-1].seq
		}
		var held bool
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT herald.outbox_complete($1, 'older-worker', $2, true, $3, $4,
			'{}', '{}', '{}', '{}', '{}', '{}', $5, $6, $7, $8, $9)`,
			first.part, first.fence, lastSeq, len(r), nonNil(qseqs), nonNil(qstates), nonNil(qattempts), nonNil(qdelays), nonNil(qerrs)).Scan(&held),
			"migration 6's completion")
		if !held {
			t.Fatal("the older Worker's completion lost its lease")
		}
	}
	t.Fatal("the older Worker still claimed after 100 claims")
	return nil, nil
}

// TestPostgresSchemaRollbackRefused: a step without a down step is not
// reversed, and the refusal says what to run instead; nothing changes.
func TestPostgresSchemaRollbackRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newPGStore(t, Config{})
	last := len(pgMigrations)
	ids := pgStage(t, s, storetest.Note("a", `{"n":1}`))
	err := s.MigrateTo(ctx, 5)
	if !errors.Is(err, outboxfeed.ErrRollbackRefused) {
		t.Fatalf("rollback to 5 = %v, want ErrRollbackRefused", err)
	}
	for _, want := range []string{"migration 6 (ranges in staging order) cannot be reversed",
		`herald outbox stats says "oldest waiting record: none"`,
		fmt.Sprintf(`psql "$HERALD_DATABASE_URL" -c 'ALTER SCHEMA herald RENAME TO herald_v%d'`, last),
		"docs/runbooks/rollback-schema.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != last {
		t.Fatalf("after the refusal: version %d, %v; want %d", v, err, last)
	}
	if err := s.MigrateTo(ctx, last+1); !errors.Is(err, outboxfeed.ErrInvalidConfig) {
		t.Fatalf("a version this release does not know: %v, want ErrInvalidConfig", err)
	}
	if _, ok := storetest.StateOf(t, s, ids[0]).(outboxfeed.Pending); !ok {
		t.Fatalf("the record after the refusal: %#v", storetest.StateOf(t, s, ids[0]))
	}
}

// pgSchemaShape describes schema herald: its functions with their
// definitions, its tables' and views' columns (partitions aside), its
// views' definitions, its indexes and triggers, and the migrations
// recorded.
func pgSchemaShape(t *testing.T, s *Store) string {
	t.Helper()
	var shape string
	testenv.Must(t, s.Pool().QueryRow(context.Background(), `
SELECT string_agg(x, E'\n' ORDER BY x) FROM (
	SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') ' || md5(pg_get_functiondef(p.oid))
	FROM pg_proc p WHERE p.pronamespace = 'herald'::regnamespace
	UNION ALL
	SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		|| CASE WHEN a.attnotnull THEN ' not null' ELSE '' END || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
	FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
	WHERE c.relnamespace = 'herald'::regnamespace AND c.relkind IN ('r', 'p', 'v') AND NOT c.relispartition
	UNION ALL
	SELECT 'view ' || c.relname || ' ' || md5(pg_get_viewdef(c.oid))
	FROM pg_class c WHERE c.relnamespace = 'herald'::regnamespace AND c.relkind = 'v'
	UNION ALL
	SELECT 'index ' || i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class c ON c.oid = x.indrelid
	WHERE c.relnamespace = 'herald'::regnamespace AND NOT c.relispartition
	UNION ALL
	SELECT 'trigger ' || g.tgname || ' on ' || c.relname FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
	WHERE c.relnamespace = 'herald'::regnamespace AND NOT g.tgisinternal AND NOT c.relispartition
	UNION ALL
	SELECT 'migration ' || version || ' ' || name FROM herald.schema_migrations) q(x)`).Scan(&shape), "schema shape")
	return shape
}

// shapeDiff lists the lines of two shapes that only one has.
func shapeDiff(got, want string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	g, w := in(got), in(want)
	var b strings.Builder
	for l := range g {
		if !w[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	for l := range w {
		if !g[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	return b.String()
}

// The runbook says which PostgreSQL steps go back.
func TestPostgresRollbackDoc(t *testing.T) {
	storetest.CheckRollbackDoc(t, "PostgreSQL", pgMigrations)
}

// before8 reads records of a schema from before migration 8, whose view
// has no handler column.
type before8 struct{ *Store }

func (s before8) Get(ctx context.Context, id string) (outboxfeed.Record, error) {
	return s.get(ctx, id, `SELECT `+pgRecordColumns+` FROM herald.outbox_records WHERE id = $1::uuid
	ORDER BY qseq DESC NULLS LAST LIMIT 1`)
}

// Migration 8 goes back only once realtime is the sole handler.
func TestPostgresHandlersRollback(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	storetest.HandlersRollback(t, s, 7)
}

// The migration files read, with every directive expanded.
func TestPostgresMigrationFiles(t *testing.T) {
	storetest.CheckMigrationFiles(t, migrationFiles, "migration", pgMigrations, pgMigrationsErr)
}
