package outboxfeed

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// oldPartitionsRetired reports whether a change of the partition count
// from 4 has finished: the 4 old partitions retired, the new ones active.
func oldPartitionsRetired(t *testing.T, a Admin, n int) bool {
	t.Helper()
	ps, err := a.Partitions(context.Background())
	if err != nil {
		return false
	}
	states := map[string]int{}
	for _, p := range ps {
		states[p.State]++
	}
	return states["retired"] == 4 && states["active"] == n
}

// A producer that stages under the old mapping while the change of the
// partition count commits, and commits after it, must still be
// delivered: its partition cannot retire before it ends. The interleaving
// is made exact on a PostgreSQL of the test's own (xids are the cluster's):
// the change takes its xid and waits on a row lock; the producer stages
// (old mapping, the next xid) and stays open; the change commits.
func TestPostgresRepartitionWaitsForOpenProducers(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPrivatePG(t)
	ctx := context.Background()
	s, err := OpenPG(ctx, Config{DatabaseURL: pg.URL()})
	testenv.Must(t, err, "open store")
	t.Cleanup(func() { _ = s.Close() })
	testenv.Must(t, s.Migrate(ctx), "migrate")
	a, _ := AdminOf(s)

	// Hold the repartition row, so the change blocks after its first write.
	x, err := s.Pool().Begin(ctx)
	testenv.Must(t, err, "begin X")
	defer func() { _ = x.Rollback(ctx) }()
	_, err = x.Exec(ctx, `SELECT * FROM herald.outbox_repartition FOR UPDATE`)
	testenv.Must(t, err, "lock the repartition row")
	changed := make(chan error, 1)
	go func() { changed <- a.SetPartitions(ctx, 8) }()
	eventually(t, 30*time.Second, "the change waiting on the row lock", func() bool {
		var n int
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%outbox_repartition%'`).Scan(&n), "activity")
		return n == 1
	})
	p, pIDs := openStage(t, s, note("c/open", `{"producer":"P"}`))
	testenv.Must(t, x.Commit(ctx), "release the change")
	testenv.Must(t, <-changed, "set partitions")

	rec := newRecorder()
	w := startWorker(t, s, rec, WorkerConfig{Lanes: 1, PollInterval: 10 * time.Millisecond})
	qID, err := s.StageOne(ctx, note("c/after", `{"staged":"after the change"}`))
	testenv.Must(t, err, "stage after the change")
	// Give the Worker many claims while P is open: none may retire the
	// partition P staged into.
	eventually(t, time.Minute, "claims while the producer is open", func() bool {
		return testutil.ToFloat64(w.m.claimEmpty)+testutil.ToFloat64(w.m.claimBatch) >= 50
	})
	testenv.Must(t, p.Commit(ctx), "commit P")
	rec.waitFor(t, time.Minute, "the record P staged under the old mapping", func() bool { _, ok := rec.byID(pIDs[0]); return ok })
	rec.waitFor(t, time.Minute, "the record staged after the change", func() bool { _, ok := rec.byID(qID); return ok })
	eventually(t, time.Minute, "the change finished", func() bool { return oldPartitionsRetired(t, a, 8) })
}

// A dead letter of a partition that a change of the partition count
// retired is delivered when it is replayed.
func TestPostgresReplayAfterRepartition(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	a, _ := AdminOf(s)
	var broken atomic.Bool
	broken.Store(true)
	rec := newRecorder()
	rec.before = func(_ context.Context, msg fanout.Message) error {
		if broken.Load() && msg.Key.Channel == "c/dl" {
			return Permanent(errors.New("the target refused it"))
		}
		return nil
	}
	startWorker(t, s, rec, WorkerConfig{})
	id := pgStage(t, s, note("c/dl", `{}`))[0]
	eventually(t, 10*time.Second, "the record dead-lettered", func() bool {
		_, ok := stateOf(t, s, id).(DeadLetter)
		return ok
	})
	testenv.Must(t, a.SetPartitions(ctx, 8), "set partitions")
	eventually(t, time.Minute, "the change finished", func() bool { return oldPartitionsRetired(t, a, 8) })
	broken.Store(false)
	res, err := a.Replay(ctx, ReplayRequest{IDs: []string{id}, Actor: "test", Reason: "the target is fixed"})
	testenv.Must(t, err, "replay")
	if len(res.Replayed) != 1 {
		t.Fatalf("replayed %v, skipped %v", res.Replayed, res.Skipped)
	}
	rec.waitFor(t, 30*time.Second, "the replayed record", func() bool { _, ok := rec.byID(id); return ok })
	eventually(t, 10*time.Second, "the replayed record dispatched", func() bool {
		_, ok := stateOf(t, s, id).(Dispatched)
		return ok
	})
}
