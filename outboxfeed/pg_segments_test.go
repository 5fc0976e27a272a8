package outboxfeed

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

// countingPublisher accepts everything and counts it.
type countingPublisher struct{ n atomic.Int64 }

func (p *countingPublisher) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	p.n.Add(1)
	return fanout.Publication{Message: msg}, nil
}

// outboxSize is the size of herald.outbox's segments with their indexes.
func outboxSize(t *testing.T, s *PGStore) int64 {
	t.Helper()
	var n int64
	testenv.Must(t, s.Pool().QueryRow(context.Background(), `SELECT sum(pg_total_relation_size(relid))::bigint
		FROM pg_partition_tree('herald.outbox') WHERE isleaf`).Scan(&n), "outbox size")
	return n
}

// TestPostgresRetentionDropsSegments drains and expires 1,000,000 records
// staged in 20 transactions while the Pruner keeps segments ahead: the
// table and its indexes come back to their size before the run, with no
// row deleted one by one.
func TestPostgresRetentionDropsSegments(t *testing.T) {
	const records, txs = 1_000_000, 20
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	p, err := NewPruner(s, PrunerConfig{SegmentRecords: records / txs, Retention: time.Nanosecond})
	testenv.Must(t, err, "pruner")
	_, err = p.Prune(ctx)
	testenv.Must(t, err, "first prune")
	before := outboxSize(t, s)

	pub := &countingPublisher{}
	w := startWorker(t, s, pub, WorkerConfig{BatchSize: 5000, Lanes: 2})
	for range txs {
		_, err := s.Pool().Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload)
			SELECT 'acme', 'c/' || (g % 1000), 'order.updated', 1, '{"n":1}' FROM generate_series(1, $1) g`, records/txs)
		testenv.Must(t, err, "stage")
		_, err = p.Prune(ctx)
		testenv.Must(t, err, "prune while staging")
	}
	eventually(t, 10*time.Minute, "every record published", func() bool { return pub.n.Load() >= records })
	eventually(t, time.Minute, "the backlog empty", func() bool {
		st, err := s.Stats(ctx)
		return err == nil && st.Pending == 0
	})
	w.Stop()
	if n := pub.n.Load(); n != records {
		t.Fatalf("published %d records, want %d", n, records)
	}
	_, err = p.Prune(ctx)
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
