package pgstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/storetest"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/internal/wait"

	"github.com/jackc/pgx/v5"
)

// countingPublisher accepts everything and counts it.
type countingPublisher struct{ n atomic.Int64 }

func (p *countingPublisher) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	p.n.Add(1)
	return fanout.Publication{Message: msg}, nil
}

// outboxSize is the size of herald.outbox's segments (attached and
// archived) with their indexes.
func outboxSize(t *testing.T, s *Store) int64 {
	t.Helper()
	var n int64
	testenv.Must(t, s.Pool().QueryRow(context.Background(), `SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint
		FROM (SELECT relid, isleaf FROM pg_partition_tree('herald.outbox')
			UNION ALL SELECT relid, isleaf FROM pg_partition_tree('herald.outbox_archive')) t WHERE isleaf`).Scan(&n), "outbox size")
	return n
}

// attachedSegments counts the partitions claims read (herald.outbox's
// leaves) and the archived ones.
func attachedSegments(t *testing.T, s *Store) (attached, archived int) {
	t.Helper()
	testenv.Must(t, s.Pool().QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM pg_partition_tree('herald.outbox') WHERE isleaf),
		(SELECT count(*) FROM pg_partition_tree('herald.outbox_archive') WHERE isleaf)`).Scan(&attached, &archived), "segments")
	return attached, archived
}

// prunedOnce is a Pruner of cfg that has run once (making the first
// segments).
func prunedOnce(t *testing.T, s *Store, cfg outboxfeed.PrunerConfig) *outboxfeed.Pruner {
	t.Helper()
	p, err := outboxfeed.NewPruner(s, cfg)
	testenv.Must(t, err, "pruner")
	_, err = p.Prune(context.Background())
	testenv.Must(t, err, "first prune")
	return p
}

// stageSeries stages n records with payload over the channels c/0 … c/6
// in one statement and returns their ids.
func stageSeries(t *testing.T, s *Store, n int, payload string) []string {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload)
		SELECT 'acme', 'c/' || (g % 7), 'order.updated', 1, $2 FROM generate_series(1, $1) g RETURNING id::text`, n, payload)
	testenv.Must(t, err, "stage")
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	testenv.Must(t, err, "stage rows")
	return ids
}

// TestPostgresDoneSegmentsLeaveTheClaims: full segments whose records are
// all done move out of herald.outbox (which every claim reads) into the
// archive at once, whatever the retention; a segment with a record not
// yet done stays; archived records keep their state for operators; past
// the retention the archived segments are dropped.
func TestPostgresDoneSegmentsLeaveTheClaims(t *testing.T) {
	const size, segments = 1000, 5
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	keep := prunedOnce(t, s, outboxfeed.PrunerConfig{SegmentRecords: size, Retention: time.Hour})

	// Segments fill while no Worker runs (the first segmentMargin records
	// go to the default partition): none is done, none archived.
	var ids []string
	for range segments + segmentMargin/size {
		ids = append(ids, stageSeries(t, s, size, `{"n":1}`)...)
		_, err := keep.Prune(ctx)
		testenv.Must(t, err, "prune while staging")
	}
	attached, archived := attachedSegments(t, s)
	if archived != 0 {
		t.Fatalf("%d segments archived while their records were pending", archived)
	}
	var full int
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox_segment
		WHERE to_seq <= (SELECT last_value FROM herald.outbox_record_seq)`).Scan(&full), "full segments")
	if full < 2 || attached < full {
		t.Fatalf("%d full segments, %d partitions attached; want at least 2 full, all attached", full, attached)
	}

	pub := &countingPublisher{}
	w := storetest.StartWorker(t, s, pub, outboxfeed.WorkerConfig{BatchSize: 100})
	storetest.Eventually(t, 5*time.Minute, "every record published", func() bool { return pub.n.Load() >= int64(len(ids)) })
	storetest.Eventually(t, time.Minute, "the backlog empty", func() bool {
		st, err := s.Stats(ctx)
		return err == nil && st.Pending == 0
	})
	w.Stop()
	_, err := keep.Prune(ctx)
	testenv.Must(t, err, "prune after the drain")
	attached, archived = attachedSegments(t, s)
	t.Logf("after the drain: %d partitions attached, %d archived", attached, archived)
	if archived < full {
		t.Fatalf("%d segments archived, want the %d full ones at least", archived, full)
	}
	// The default partition, the segment receiving records and the ones
	// made ahead of it.
	if attached > segmentsAhead+2 {
		t.Fatalf("%d partitions still attached to herald.outbox, want at most %d", attached, segmentsAhead+2)
	}
	// Producers pay for no id index (migration 15); every archived
	// segment has one, part of the archive's, built before its move.
	var outboxIDIndex bool
	var indexed int
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT to_regclass('herald.outbox_id_idx') IS NOT NULL,
		(SELECT count(*) FROM pg_partition_tree('herald.outbox_archive_id_idx') WHERE isleaf)`).Scan(&outboxIDIndex, &indexed), "id indexes")
	if outboxIDIndex || indexed != archived {
		t.Fatalf("herald.outbox has an id index: %v; %d of %d archived segments have theirs", outboxIDIndex, indexed, archived)
	}
	for _, id := range []string{ids[0], ids[len(ids)/2], ids[len(ids)-1]} {
		if _, ok := storetest.StateOf(t, s, id).(outboxfeed.Dispatched); !ok {
			t.Fatalf("record %s in an archived segment: state %T, want Dispatched", id, storetest.StateOf(t, s, id))
		}
	}
	var total int64
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox_records`).Scan(&total), "count records")
	if total != int64(len(ids)) {
		t.Fatalf("herald.outbox_records lists %d records, want %d", total, len(ids))
	}

	// Past the retention the archive is dropped.
	expire, err := outboxfeed.NewPruner(s, outboxfeed.PrunerConfig{SegmentRecords: size, Retention: time.Nanosecond})
	testenv.Must(t, err, "pruner")
	_, err = expire.Prune(ctx)
	testenv.Must(t, err, "prune past the retention")
	if _, archived = attachedSegments(t, s); archived != 0 {
		t.Fatalf("%d archived segments left past the retention", archived)
	}
	var listed int
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox_segment WHERE archived_at IS NOT NULL`).Scan(&listed), "segment list")
	if listed != 0 {
		t.Fatalf("herald.outbox_segment still lists %d archived segments", listed)
	}
}

// TestPostgresRetentionDropsSegments drains and expires 1,000,000 records
// staged in 20 transactions while the Pruner keeps segments ahead: the
// table and its indexes come back to their size before the run, with no
// row deleted one by one.
func TestPostgresRetentionDropsSegments(t *testing.T) {
	const records, txs = 1_000_000, 20
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	p := prunedOnce(t, s, outboxfeed.PrunerConfig{SegmentRecords: records / txs, Retention: time.Nanosecond})
	before := outboxSize(t, s)

	pub := &countingPublisher{}
	w := storetest.StartWorker(t, s, pub, outboxfeed.WorkerConfig{BatchSize: 5000, Lanes: 2})
	for range txs {
		_, err := s.Pool().Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload)
			SELECT 'acme', 'c/' || (g % 1000), 'order.updated', 1, '{"n":1}' FROM generate_series(1, $1) g`, records/txs)
		testenv.Must(t, err, "stage")
		_, err = p.Prune(ctx)
		testenv.Must(t, err, "prune while staging")
	}
	storetest.Eventually(t, 10*time.Minute, "every record published", func() bool { return pub.n.Load() >= records })
	storetest.Eventually(t, time.Minute, "the backlog empty", func() bool {
		st, err := s.Stats(ctx)
		return err == nil && st.Pending == 0
	})
	w.Stop()
	if n := pub.n.Load(); n != records {
		t.Fatalf("published %d records, want %d", n, records)
	}
	_, err := p.Prune(ctx)
	testenv.Must(t, err, "prune after the drain")
	after := outboxSize(t, s)
	t.Logf("herald.outbox with indexes: %d bytes before, %d after draining and expiring %d records", before, after, records)
	if after > before+before/10 {
		t.Fatalf("herald.outbox is %d bytes after the run, more than 10%% over its %d bytes before", after, before)
	}
	var left int64
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox`).Scan(&left), "count")
	if left != 0 {
		t.Fatalf("%d records left in herald.outbox", left)
	}
}

// TestPrunerLifecycle: the Pruner starts once, prunes at once, and
// refuses a second Start and a Start after Stop.
func TestPrunerLifecycle(t *testing.T) {
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	p, err := outboxfeed.NewPruner(s, outboxfeed.PrunerConfig{Interval: time.Hour})
	testenv.Must(t, err, "pruner")
	testenv.Must(t, p.Start(ctx), "start")
	if err := p.Start(ctx); !errors.Is(err, outboxfeed.ErrStarted) {
		t.Fatalf("second Start = %v, want ErrStarted", err)
	}
	storetest.Eventually(t, time.Minute, "the first prune to make segments", func() bool {
		var n int
		return s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox_segment`).Scan(&n) == nil && n > 0
	})
	p.Stop()
	p.Stop()
	if err := p.Start(ctx); !errors.Is(err, outboxfeed.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
}

// Moving a done segment out of herald.outbox needs the table's own lock,
// which every producer's transaction holds while it runs. With producers'
// transactions always overlapping (here each lasts 150ms and another
// starts every 50ms), a move that waits a fixed 50ms for it never happens,
// and claims go on opening every done segment. The wait grows after each
// run that could not get the lock, so the move happens after a few runs
// (producers then wait at most that long, once).
func TestPostgresArchivingUnderOverlappingProducers(t *testing.T) {
	t.Parallel()
	const size = 100
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	p := prunedOnce(t, s, outboxfeed.PrunerConfig{SegmentRecords: size, Retention: time.Hour})
	var ids []string
	for range 3 {
		ids = append(ids, stageSeries(t, s, size+segmentMargin/3, `{}`)...)
		_, err := p.Prune(ctx)
		testenv.Must(t, err, "prune while staging")
	}
	pub := &countingPublisher{}
	storetest.StartWorker(t, s, pub, outboxfeed.WorkerConfig{})
	storetest.Eventually(t, time.Minute, "every record done", func() bool { return pub.n.Load() >= int64(len(ids)) })
	for _, id := range ids {
		storetest.Eventually(t, 10*time.Second, "dispatched", func() bool { _, ok := storetest.StateOf(t, s, id).(outboxfeed.Dispatched); return ok })
	}

	// Producers whose transactions always overlap.
	pctx, stop := context.WithCancel(ctx)
	var started atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				if !wait.Sleep(pctx, time.Duration(i)*50*time.Millisecond) {
					return
				}
				for pctx.Err() == nil {
					tx, err := s.Pool().Begin(pctx)
					if err != nil {
						return
					}
					if _, err := stage.Stage(pctx, tx, storetest.Note("c/busy", `{}`)); err == nil {
						started.Add(1)
						_, _ = tx.Exec(pctx, `SELECT pg_sleep(0.15)`)
					}
					_ = tx.Commit(context.Background())
				}
			})
		}
		wg.Wait()
	}()
	defer func() { stop(); <-done }()
	storetest.Eventually(t, 10*time.Second, "producers running", func() bool { return started.Load() >= 6 })
	for run := 1; ; run++ {
		_, err := p.Prune(ctx)
		testenv.Must(t, err, "prune under load")
		if _, archived := attachedSegments(t, s); archived > 0 {
			t.Logf("a done segment moved to the archive at run %d, with %d producer transactions begun", run, started.Load())
			break
		}
		if run == 10 {
			t.Fatalf("no done segment moved to the archive in %d runs while producers' transactions overlap", run)
		}
	}
}
