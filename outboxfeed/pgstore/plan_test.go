package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/outboxfeed"

	"github.com/heraldgw/herald/internal/testenv"
)

// TestPostgresClaimReadsOnlyItsBatch guards the claim's plans: with
// 100,000 records already dispatched (a transaction every position covers)
// and 20,000 of one transaction in the range, the first claim of 100 reads
// the index pages of its partition's range once (about 5,000 entries) and
// the claims that go on through it read none — not the partition from its
// start (a plan walking the table in seq order, or a bitmap scan, would
// read tens of thousands), nor the range again for every batch.
func TestPostgresClaimReadsOnlyItsBatch(t *testing.T) {
	t.Parallel()
	// One connection: the claims and the statistics they leave share a
	// backend, which flushes them on request.
	s, _ := newPGStore(t, Config{MaxConns: 1})
	ctx := context.Background()
	autovacuumOff(t, s)
	_, err := s.Pool().Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload, xid)
		SELECT 'acme', 'c/' || (g % 100), 'order.updated', 1, '{}', '2' FROM generate_series(1, 100000) g`)
	testenv.Must(t, err, "dispatched records")
	_, err = s.Pool().Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload)
		SELECT 'acme', 'c/' || (g % 100), 'order.updated', 1, '{}' FROM generate_series(1, 20000) g`)
	testenv.Must(t, err, "records to claim")
	_, err = s.Pool().Exec(ctx, `ANALYZE herald.outbox`)
	testenv.Must(t, err, "analyze")

	read := func() int64 {
		return indexStat(t, s, `SELECT coalesce(sum(idx_blks_hit + idx_blks_read), 0)::bigint FROM pg_statio_user_indexes
			WHERE schemaname = 'herald' AND indexrelname LIKE '%part_xid%'`)
	}
	claims, first := 0, -1
	for b := (*outboxfeed.Batch)(nil); claims < 30; claims++ {
		before := read()
		next := &outboxfeed.ClaimRequest{Owner: "w", Partition: outboxfeed.AnyPartition, Limit: 100, Lease: time.Minute}
		if b != nil && b.More {
			next.Partition = b.Partition
		}
		if b == nil {
			b, err = s.Claim(ctx, *next)
		} else {
			_, b, err = s.Complete(ctx, b, make([]outboxfeed.Outcome, len(b.Records)), next)
		}
		testenv.Must(t, err, "claim")
		if b == nil {
			t.Fatal("nothing claimed")
		}
		n := read() - before
		switch {
		case claims == 0 && n > 1000:
			// Its range's entries lie on about 80 pages; up to 500 were seen
			// when the statistics of the staging came in late. A plan from the
			// partition's start would read thousands.
			t.Fatalf("the first claim read %d index pages, want about those of its range (5,000 entries)", n)
		case claims > 0 && b.Partition == first && n > 4:
			t.Fatalf("claim %d (%d records) going on through the range read %d index pages, want none of its range", claims, len(b.Records), n)
		}
		if claims == 0 {
			first = b.Partition
		}
	}
}

// TestPostgresOpenTransactionsReadOneAtATime guards how the statements a
// busy lane runs every cycle (pgAdvanceSQL, pgClaimManySQL) and the claim
// function (herald.outbox_claim, migration 17) read the records of the
// transactions open at the start of a range: each xid is an index
// condition of its own lookup in every segment (readOpenByXid). As one
// condition xid = ANY (…) of the whole list, the generic plan of a
// segment without statistics (autovacuum off, or not yet analyzed) took
// the list as a filter and read every record of the partition retained in
// that segment, on every cycle: the first 1,001 records ever staged sit
// in herald.outbox_default for good, so an advance cost 2–3× what it does
// now, and the claim-and-complete cycle's PostgreSQL time twice as much.
func TestPostgresOpenTransactionsReadOneAtATime(t *testing.T) {
	t.Parallel()
	// One pooled connection: its statistics are the ones flushed below.
	s, url := newPGStore(t, Config{MaxConns: 1})
	ctx := context.Background()
	pool := s.Pool()
	testenv.Must(t, s.ensureSegments(ctx, 1_000_000), "segments")
	autovacuumOff(t, s)
	var err error
	// 1,000 records already dispatched, in the default segment (seq below
	// the first segment's), every one of them in partition part.
	var part int
	testenv.Must(t, pool.QueryRow(ctx, `SELECT herald.outbox_partition_of('acme', 'c/1')`).Scan(&part), "partition of c/1")
	_, err = pool.Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload, xid)
		SELECT 'acme', 'c/1', 'order.updated', 1, '{}', '2' FROM generate_series(1, 1000) g`)
	testenv.Must(t, err, "dispatched records")
	stage := func() {
		_, err := pool.Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload) VALUES ('acme', 'c/1', 'order.updated', 1, '{}')`)
		testenv.Must(t, err, "stage")
	}
	// A producer's transaction stays open across the claim: its xid is in
	// the range's end (hi), so the next range reads it by xid.
	open, err := pgx.Connect(ctx, url)
	testenv.Must(t, err, "producer connection")
	defer open.Close(ctx)
	tx, err := open.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload) VALUES ('acme', 'c/1', 'order.late', 1, '{}')`)
	testenv.Must(t, err, "open transaction")
	stage()

	read := func() int64 {
		return indexStat(t, s, `SELECT coalesce(sum(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes
			WHERE schemaname = 'herald' AND indexrelname LIKE '%part_xid%'`)
	}
	owner := "w"
	b, err := s.Claim(ctx, outboxfeed.ClaimRequest{Owner: owner, Partition: part, Limit: 100, Lease: time.Minute})
	testenv.Must(t, err, "claim")
	if b == nil || len(b.Records) != 1 {
		t.Fatalf("claim = %v, want the one committed record", b)
	}
	// Each cycle completes the batch and goes on in its partition
	// (pgAdvanceSQL) or claims every partition with work
	// (pgClaimManySQL), with the open transaction in the range's start.
	for cycle := range 6 {
		stage()
		before := read()
		next := &outboxfeed.ClaimRequest{Owner: owner, Partition: part, Limit: 100, Lease: time.Minute}
		var nbs []*outboxfeed.Batch
		if cycle%2 == 0 {
			var nb *outboxfeed.Batch
			_, nb, err = s.Complete(ctx, b, make([]outboxfeed.Outcome, len(b.Records)), next)
			nbs = one(nb)
		} else {
			next.Partition, next.Spread = outboxfeed.AnyPartition, 4
			_, nbs, err = s.CompleteMany(ctx, []outboxfeed.Completion{{Batch: b, Out: make([]outboxfeed.Outcome, len(b.Records))}}, next)
		}
		testenv.Must(t, err, "complete and claim")
		if n := read() - before; n > 50 {
			t.Fatalf("cycle %d read %d index entries, want the few of the new records and the open transaction's lookups, not the 1,000 retained", cycle, n)
		}
		if len(nbs) != 1 || len(nbs[0].Records) != 1 {
			t.Fatalf("cycle %d claimed %v, want one batch of the record staged meanwhile", cycle, nbs)
		}
		b = nbs[0]
	}
	// A claim of the partition anew (herald.outbox_claim, migration 17)
	// reads its range the same way.
	_, _, err = s.Complete(ctx, b, make([]outboxfeed.Outcome, len(b.Records)), nil)
	testenv.Must(t, err, "complete, the lease given back")
	stage()
	before := read()
	b, err = s.Claim(ctx, outboxfeed.ClaimRequest{Owner: owner, Partition: part, Limit: 100, Lease: time.Minute})
	testenv.Must(t, err, "claim anew")
	if n := read() - before; n > 50 {
		t.Fatalf("the claim anew read %d index entries, want the few of the new record and the open transaction's lookups, not the 1,000 retained", n)
	}
	if b == nil || len(b.Records) != 1 {
		t.Fatalf("claim anew = %v, want the record staged meanwhile", b)
	}
	// The open transaction's record is read once it commits.
	testenv.Must(t, tx.Commit(ctx), "commit the open transaction")
	_, nb, err := s.Complete(ctx, b, make([]outboxfeed.Outcome, len(b.Records)), &outboxfeed.ClaimRequest{Owner: owner, Partition: part, Limit: 100, Lease: time.Minute})
	testenv.Must(t, err, "complete")
	if nb == nil || len(nb.Records) != 1 || nb.Records[0].Type != "order.late" {
		t.Fatalf("after the commit claimed %v, want the open transaction's record", nb)
	}
}

// one is b as a list (none for nil).
func one(b *outboxfeed.Batch) []*outboxfeed.Batch {
	if b == nil {
		return nil
	}
	return []*outboxfeed.Batch{b}
}

// autovacuumOff keeps autovacuum off s's outbox segments: it would read
// whole indexes into the statistics the plan tests count.
func autovacuumOff(t *testing.T, s *Store) {
	t.Helper()
	_, err := s.Pool().Exec(context.Background(), `DO $$
		DECLARE r regclass;
		BEGIN
			FOR r IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'herald.outbox'::regclass LOOP
				EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', r);
			END LOOP;
		END $$`)
	testenv.Must(t, err, "autovacuum off")
}

// indexStat flushes the statistics of s's one pooled connection and reads
// the count query sums from them.
func indexStat(t *testing.T, s *Store, query string) int64 {
	t.Helper()
	ctx := context.Background()
	_, err := s.Pool().Exec(ctx, `SELECT pg_stat_force_next_flush()`)
	testenv.Must(t, err, "flush stats")
	_, err = s.Pool().Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
	testenv.Must(t, err, "clear stats snapshot")
	var n int64
	testenv.Must(t, s.Pool().QueryRow(ctx, query).Scan(&n), "index statistics")
	return n
}
