package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

// sqliteFixtureView reads every record's derived lifecycle from the
// outbox_record view (of the handler, once it has one: where is "" before
// migration 5 or "WHERE handler = 'realtime'" after).
func sqliteFixtureView(t *testing.T, db *sql.DB, where string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT id, seq, state, attempt, next_attempt_at, lease_owner, lease_expires_at, fence,
	last_error, dispatched_at, dead_lettered_at FROM outbox_record ` + where + ` ORDER BY seq`)
	testenv.Must(t, err, "read outbox_record")
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, state string
		var seq, attempt, next, fence int64
		var owner, lastErr sql.NullString
		var expires, dispatched, dead sql.NullInt64
		testenv.Must(t, rows.Scan(&id, &seq, &state, &attempt, &next, &owner, &expires, &fence, &lastErr, &dispatched, &dead), "scan")
		out = append(out, fmt.Sprint(id, seq, state, attempt, next, owner, expires, fence, lastErr, dispatched, dead))
	}
	testenv.Must(t, rows.Err(), "rows")
	return out
}

// sqliteFixturePartition reads the partition row's columns of migration 4.
func sqliteFixturePartition(t *testing.T, db *sql.DB, where string) string {
	t.Helper()
	var owner sql.NullString
	var expires, claimTo, done sql.NullInt64
	var fence, pos, takeovers, tkTo, claimQto, tkQto int64
	testenv.Must(t, db.QueryRow(`SELECT owner, expires_at, fence, pos, claim_to, done_at, takeovers, tk_to, claim_qto, tk_qto
	FROM outbox_partition `+where).Scan(&owner, &expires, &fence, &pos, &claimTo, &done, &takeovers, &tkTo, &claimQto, &tkQto), "read partition")
	return fmt.Sprint(owner, expires, fence, pos, claimTo, done, takeovers, tkTo, claimQto, tkQto)
}

// TestSQLiteFixtureUpgradesInPlace migrates a database of migration 4
// (before handlers) with records in every state: its position, queue and
// batch log become realtime's, every record's state is what it was, every
// record not yet delivered is delivered once, in order (CheckFixture), and
// a handler added then with StartRetained gets every record still in the
// outbox, once, with realtime's untouched.
func TestSQLiteFixtureUpgradesInPlace(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "herald.db")
	src, err := os.Open("testdata/sqlite-v4.db")
	testenv.Must(t, err, "open fixture")
	dst, err := os.Create(path)
	testenv.Must(t, err, "create copy")
	_, err = io.Copy(dst, src)
	testenv.Must(t, err, "copy fixture")
	testenv.Must(t, errors.Join(src.Close(), dst.Close()), "close copies")
	s, err := Open(context.Background(), Config{Path: path})
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()

	var version int
	testenv.Must(t, s.DB().QueryRow(`SELECT max(version) FROM schema_migrations`).Scan(&version), "fixture version")
	if version != 4 {
		t.Fatalf("fixture at version %d, want 4", version)
	}
	before := sqliteFixtureView(t, s.DB(), "")
	if len(before) < 14 {
		t.Fatalf("the fixture holds %d records, want its 14", len(before))
	}
	part := sqliteFixturePartition(t, s.DB(), "WHERE part = 0")
	var queued, batches int64
	testenv.Must(t, s.DB().QueryRow(`SELECT (SELECT count(*) FROM outbox_retry), (SELECT count(*) FROM outbox_batch)`).Scan(&queued, &batches), "count")
	testenv.Must(t, s.Migrate(ctx), "migrate")
	if after := sqliteFixtureView(t, s.DB(), "WHERE handler = 'realtime'"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("realtime's records after the upgrade:\n%v\nbefore:\n%v", after, before)
	}
	if p := sqliteFixturePartition(t, s.DB(), "WHERE handler = 'realtime' AND part = 0"); p != part {
		t.Fatalf("realtime's partition %s, before the upgrade %s", p, part)
	}
	var rq, rb int64
	testenv.Must(t, s.DB().QueryRow(`SELECT (SELECT count(*) FROM outbox_retry WHERE handler = 'realtime'),
	(SELECT count(*) FROM outbox_batch WHERE handler = 'realtime')`).Scan(&rq, &rb), "count")
	if rq != queued || rb != batches || queued == 0 || batches == 0 {
		t.Fatalf("realtime has %d queue rows and %d batches, want the fixture's %d and %d", rq, rb, queued, batches)
	}
	list, err := s.Handlers(ctx)
	if err != nil || len(list) != 1 || list[0].Name != outboxfeed.RealtimeHandler || list[0].State != outboxfeed.HandlerActive {
		t.Fatalf("handlers after the upgrade = %+v, %v; want realtime, active", list, err)
	}

	storetest.CheckFixture(t, s, "testdata/sqlite-v4-ids.json", func() {
		_, err := s.DB().Exec(`UPDATE outbox_retry SET next_attempt_at = 0 WHERE state = 'pending'`)
		testenv.Must(t, err, "make the retry due")
	})

	// A handler added now gets every record still in the outbox.
	var all []string
	rows, err := s.DB().Query(`SELECT id FROM outbox ORDER BY seq`)
	testenv.Must(t, err, "read ids")
	for rows.Next() {
		var id string
		testenv.Must(t, rows.Scan(&id), "scan id")
		all = append(all, id)
	}
	testenv.Must(t, rows.Err(), "ids")
	rows.Close()
	// Realtime published every record; its last completion may still be
	// under way.
	storetest.Eventually(t, time.Minute, "realtime has nothing pending", func() bool {
		st, err := s.Stats(ctx)
		return err == nil && st.Pending == 0
	})
	done := sqliteFixtureView(t, s.DB(), "WHERE handler = 'realtime'")
	created, err := s.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: "hooks", Type: "webhook"})
	if err != nil || !created {
		t.Fatalf("register hooks: %v, %v", created, err)
	}
	rec := storetest.NewRecorder()
	storetest.StartDeliveryWorker(t, s.ForHandler("hooks"), rec, outboxfeed.WorkerConfig{Handler: "hooks"})
	rec.WaitFor(t, time.Minute, "hooks gets every retained record", func() bool { return rec.Count() >= len(all) })
	storetest.ExactlyOnce(t, rec, all)
	if after := sqliteFixtureView(t, s.DB(), "WHERE handler = 'realtime'"); fmt.Sprint(after) != fmt.Sprint(done) {
		t.Fatalf("realtime's records changed by hooks' deliveries:\n%v\nbefore:\n%v", after, done)
	}
}
