package outboxfeed

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// stageTwo stages two records of one channel in one transaction.
func stageTwo(t *testing.T, s *PGStore) (first, second string) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	testenv.Must(t, err, "begin")
	first, err = Stage(ctx, tx, note("orders/1", `{"i":1}`))
	testenv.Must(t, err, "stage")
	second, err = Stage(ctx, tx, note("orders/1", `{"i":2}`))
	testenv.Must(t, err, "stage")
	testenv.Must(t, tx.Commit(ctx), "commit")
	return first, second
}

// waitForLockWaiter waits until a backend waits for a lock of locktype.
func waitForLockWaiter(t *testing.T, s *PGStore, locktype string) {
	t.Helper()
	eventually(t, 5*time.Second, "a backend waiting for a "+locktype+" lock", func() bool {
		var n int
		err := s.Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM pg_locks WHERE locktype = $1 AND NOT granted`, locktype).Scan(&n)
		return err == nil && n > 0
	})
}

// A picked record whose row changes between the claim's snapshot and its
// update is skipped; the records picked after it in its channel must not
// be handed out, or they would be published before it.
func TestPostgresClaimKeepsOrderWhenAPickedRowChanges(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	first, second := stageTwo(t, s)

	// Another transaction changes the first record and holds its row lock,
	// so the claim picks both from its snapshot and then waits on the row.
	other, err := s.Pool().Begin(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, `UPDATE herald.outbox SET last_error = 'touched' WHERE id = $1`, first)
	testenv.Must(t, err, "touch the first record")

	type result struct {
		recs []Record
		err  error
	}
	done := make(chan result, 1)
	go func() {
		recs, err := s.Claim(ctx, "w", 10, time.Hour)
		done <- result{recs, err}
	}()
	waitForLockWaiter(t, s, "transactionid")
	testenv.Must(t, other.Commit(ctx), "commit the change")
	res := <-done
	testenv.Must(t, res.err, "claim")
	for _, r := range res.recs {
		if r.ID == second {
			t.Fatal("the second record was claimed while the first, skipped, stays pending: order broken")
		}
	}
	if _, ok := stateOf(t, s, second).(Pending); !ok {
		t.Fatalf("second record is %#v, want given back to pending", stateOf(t, s, second))
	}
	got, err := s.Claim(ctx, "w", 10, time.Hour)
	testenv.Must(t, err, "claim again")
	if len(got) != 2 || got[0].ID != first || got[1].ID != second {
		t.Fatalf("the next claim took %d records, want both in order", len(got))
	}
}

// A Worker whose lease expired completes its batch (holding those rows)
// and then waits for the claim lock, while the claimer holding the lock
// would take the same rows over. The claim skips rows another transaction
// holds instead of waiting for them: no deadlock, and the late completion
// goes through.
func TestPostgresTakeoverSkipsRowsACompletionHolds(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	first, _ := stageTwo(t, s)
	res, err := s.claimCycle(ctx, claimRequest{owner: "late", limit: 10, lease: time.Hour})
	testenv.Must(t, err, "claim")
	if len(res.claimed) != 2 {
		t.Fatalf("claimed %d records, want 2", len(res.claimed))
	}
	_, err = s.Pool().Exec(ctx, `UPDATE herald.outbox SET lease_expires_at = now() - interval '1 second'`)
	testenv.Must(t, err, "expire the leases")

	claimer, err := s.Pool().Begin(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = claimer.Rollback(ctx) }()
	_, err = claimer.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgClaimLockKey)
	testenv.Must(t, err, "take the claim lock")

	done := make(chan error, 1)
	go func() {
		_, err := s.claimCycle(ctx, claimRequest{owner: "late", limit: 10, lease: time.Hour,
			complete: leasesOfRecords(res.claimed), completeAt: res.places})
		done <- err
	}()
	waitForLockWaiter(t, s, "advisory")
	// The lock holder claims; the expired rows are held by the late cycle.
	far := farPlan(10)
	_, err = claimer.Exec(ctx, `SET LOCAL lock_timeout = '3s'`)
	testenv.Must(t, err, "lock timeout")
	rows, err := claimer.Query(ctx, pgClaim, "other", 10, time.Hour.Microseconds(), defaultWindow(10), 0,
		"", "", far.reserve, far.channels, far.prefix, far.spread)
	testenv.Must(t, err, "claim beside the late completion")
	var got claimResult
	row := newPGClaimRow(&got)
	for rows.Next() {
		testenv.Must(t, row.scan(rows, &got), "scan")
	}
	rows.Close()
	testenv.Must(t, rows.Err(), "claim beside the late completion")
	if n := len(got.claimed) + len(got.behind) + len(got.exhausted); n != 0 {
		t.Fatalf("the claim took %d records a completion holds", n)
	}
	testenv.Must(t, claimer.Commit(ctx), "commit")
	testenv.Must(t, <-done, "late cycle")
	if _, ok := stateOf(t, s, first).(Dispatched); !ok {
		t.Fatalf("first record is %#v, want dispatched by the late completion", stateOf(t, s, first))
	}
}

// Each lane claims under its own lease owner: should an asynchronously
// committed claim be lost in a server crash and the same fence be handed
// out again, one lane's late write cannot match the other lane's lease.
func TestPostgresLanesClaimUnderTheirOwnOwner(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	release := make(chan struct{})
	rec := newRecorder()
	rec.before = func(ctx context.Context, _ fanout.Message) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	tx, err := s.Pool().Begin(ctx)
	testenv.Must(t, err, "begin")
	for i := range 40 {
		_, err := Stage(ctx, tx, note(fmt.Sprintf("orders/%d", i), `{}`))
		testenv.Must(t, err, "stage")
	}
	testenv.Must(t, tx.Commit(ctx), "commit")
	w := startWorker(t, s, rec, WorkerConfig{BatchSize: 20, Lanes: 2, PollInterval: 5 * time.Millisecond})
	var owners []string
	eventually(t, 10*time.Second, "both lanes holding a batch", func() bool {
		rows, err := s.Pool().Query(ctx, `SELECT DISTINCT lease_owner FROM herald.outbox WHERE state = 'processing' ORDER BY 1`)
		if err != nil {
			return false
		}
		owners, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err == nil && len(owners) == 2
	})
	close(release)
	if owners[0] != w.Owner() || owners[1] != w.Owner()+"/2" {
		t.Fatalf("lease owners %q, want %q and %q", owners, w.Owner(), w.Owner()+"/2")
	}
	rec.waitFor(t, 10*time.Second, "every record", func() bool { return rec.count() >= 40 })
}

// The cycle's statements are planned once per connection, maybe while the
// table is nearly empty; those plans must not read the whole table once
// it has grown (a completion by sequential scan made commit → publish
// latency grow with the table).
func TestPostgresCyclePlansNeverScanTheTable(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{MaxConns: 1}) // every statement on one backend
	ctx := context.Background()
	cycle := func(complete []Record, places []string) claimResult {
		t.Helper()
		res, err := s.claimCycle(ctx, claimRequest{owner: "w", limit: 100, lease: time.Hour,
			complete: leasesOfRecords(complete), completeAt: places, asyncCommit: true})
		testenv.Must(t, err, "cycle")
		return res
	}
	_, err := s.Pool().Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload)
		SELECT 'acme', 'orders/' || g, 'order.updated', 1, '{}' FROM generate_series(1, 60) g`)
	testenv.Must(t, err, "stage")
	_, err = s.Pool().Exec(ctx, `ANALYZE herald.outbox`)
	testenv.Must(t, err, "analyze")
	res := cycle(nil, nil) // plans made on a small, analyzed table
	res = cycle(res.claimed, res.places)

	_, err = s.Pool().Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload, state, dispatched_at)
		SELECT 'acme', 'orders/' || (g % 100), 'order.updated', 1, '{}', 'dispatched', now() FROM generate_series(1, 20000) g`)
	testenv.Must(t, err, "grow the table")
	_, err = s.Pool().Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload)
		SELECT 'acme', 'orders/' || g, 'order.updated', 1, '{}' FROM generate_series(1, 50) g`)
	testenv.Must(t, err, "stage more")
	// Rows read: by sequential scans, and through indexes (an index scan
	// without a condition reads the whole table as surely as a
	// sequential scan does).
	reads := func() (seq, viaIndex int64) {
		t.Helper()
		_, err := s.Pool().Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		testenv.Must(t, err, "flush stats")
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT seq_scan, coalesce(idx_tup_fetch, 0)
			FROM pg_stat_user_tables WHERE relid = 'herald.outbox'::regclass`).Scan(&seq, &viaIndex), "read stats")
		return seq, viaIndex
	}
	seq0, idx0 := reads()
	res = cycle(res.claimed, res.places)
	if len(res.claimed) != 50 {
		t.Fatalf("claimed %d records, want 50", len(res.claimed))
	}
	if res = cycle(res.claimed, res.places); res.completed != 50 {
		t.Fatalf("completed %d records, want 50", res.completed)
	}
	seq1, idx1 := reads()
	if seq1 != seq0 {
		t.Fatalf("the cycle scanned the whole table %d times", seq1-seq0)
	}
	// Two cycles claim and complete 50 records; reading their rows (and
	// the dead versions an index still points at) is a few hundred.
	if idx1-idx0 > 2000 {
		t.Fatalf("two cycles over 50 records read %d rows through indexes: a plan walks the table", idx1-idx0)
	}
}

// The claim compares channels by equality only: sorting text by the
// database collation (a strcoll call per comparison under C.UTF-8) cost a
// third of the drain rate. With one lane's batch in flight, the next
// claim's plan must hold no merge join, no sort on a text column and no
// DISTINCT aggregate (which sorts its input).
func TestPostgresClaimSortsNoText(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	_, err := s.Pool().Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload)
		SELECT 'acme', 'orders/' || (g % 1000), 'order.updated', 1, '{}' FROM generate_series(1, 40000) g`)
	testenv.Must(t, err, "stage")
	_, err = s.Pool().Exec(ctx, `ANALYZE herald.outbox`)
	testenv.Must(t, err, "analyze")
	if _, err := s.claimCycle(ctx, claimRequest{owner: "lane1", limit: 500, lease: time.Hour}); err != nil {
		t.Fatal(err)
	}

	tx, err := s.Pool().Begin(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, pgCycleSettings)
	testenv.Must(t, err, "cycle settings")
	_, err = tx.Exec(ctx, pgClaimLock, pgClaimLockKey)
	testenv.Must(t, err, "claim lock")
	// The cycle runs the claim with a generic plan (force_generic_plan),
	// which EXPLAIN shows only for a prepared statement.
	_, err = tx.Exec(ctx, `PREPARE claim AS `+pgClaim)
	testenv.Must(t, err, "prepare the claim")
	far := farPlan(500)
	var plan []byte
	testenv.Must(t, tx.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) EXECUTE claim('lane2', 500, %d, 1314, 0, '', '', %d, %d, %d, %d)`,
		time.Hour.Microseconds(), far.reserve, far.channels, far.prefix, far.spread)).Scan(&plan), "explain the claim")
	var doc []struct{ Plan map[string]any }
	testenv.Must(t, json.Unmarshal(plan, &doc), "decode the plan")
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		outputs, _ := n["Output"].([]any) // ModifyTable nodes have none
		for _, o := range outputs {
			if out := o.(string); strings.Contains(out, "DISTINCT") {
				t.Errorf("the claim computes %s (a sort in the aggregate)", out)
			}
		}
		switch n["Node Type"] {
		case "Merge Join":
			t.Errorf("the claim merge-joins on %v", n["Merge Cond"])
		case "Sort":
			for _, k := range n["Sort Key"].([]any) {
				if key := k.(string); strings.Contains(key, "tenant_id") || strings.Contains(key, "channel") {
					t.Errorf("the claim sorts by %s", key)
				}
			}
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
	}
	if len(doc) != 1 {
		t.Fatalf("EXPLAIN returned %d plans", len(doc))
	}
	walk(doc[0].Plan)
}
