package pgstore

import (
	"context"
	"testing"
	"time"

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
	// Autovacuum would read whole indexes into the same counters.
	_, err := s.Pool().Exec(ctx, `DO $$
		DECLARE r regclass;
		BEGIN
			FOR r IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'herald.outbox'::regclass LOOP
				EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', r);
			END LOOP;
		END $$`)
	testenv.Must(t, err, "autovacuum off")
	_, err = s.Pool().Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload, xid)
		SELECT 'acme', 'c/' || (g % 100), 'order.updated', 1, '{}', '2' FROM generate_series(1, 100000) g`)
	testenv.Must(t, err, "dispatched records")
	_, err = s.Pool().Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload)
		SELECT 'acme', 'c/' || (g % 100), 'order.updated', 1, '{}' FROM generate_series(1, 20000) g`)
	testenv.Must(t, err, "records to claim")
	_, err = s.Pool().Exec(ctx, `ANALYZE herald.outbox`)
	testenv.Must(t, err, "analyze")

	conn := s.Pool()
	read := func() int64 {
		var n int64
		_, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		testenv.Must(t, err, "flush stats")
		_, err = conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
		testenv.Must(t, err, "clear stats snapshot")
		testenv.Must(t, conn.QueryRow(ctx, `SELECT coalesce(sum(idx_blks_hit + idx_blks_read), 0)::bigint FROM pg_statio_user_indexes
			WHERE schemaname = 'herald' AND indexrelname LIKE '%part_xid%'`).Scan(&n), "index pages")
		return n
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
