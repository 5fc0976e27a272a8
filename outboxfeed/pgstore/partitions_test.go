package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

// TestPostgresSetPartitionsKeepsOrder changes the partition count from 4
// to 8 while producers stage on 40 channels and a Worker drains, with a
// transaction that staged before the change still open across it and a
// record waiting in the retry queue: every record is published exactly
// once, each channel in commit order, the old partitions retire and the
// new ones take the records staged after the change.
func TestPostgresSetPartitionsKeepsOrder(t *testing.T) {
	const channels, perChannel, producers = 40, 60, 8
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	a, _ := outboxfeed.AdminOf(s)
	rec := storetest.NewRecorder()
	var failed atomic.Bool
	rec.Before = func(_ context.Context, msg fanout.Message) error {
		if msg.Key.Channel == "c/7" && failed.CompareAndSwap(false, true) {
			return outboxfeed.Retryable(errors.New("target busy")) // c/7 waits in the retry queue once
		}
		return nil
	}
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{BatchSize: 50, RetryBaseDelay: 50 * time.Millisecond, RetryMaxDelay: 50 * time.Millisecond})

	// The long transaction stages on c/0 before the change.
	long, err := s.Pool().Begin(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = long.Rollback(ctx) }()
	longID, err := stage.Stage(ctx, long, storetest.Note("c/0", `{"long":true}`))
	testenv.Must(t, err, "stage in the long transaction")

	var mu sync.Mutex
	committed := map[string][]string{} // channel → ids in commit order
	var staged atomic.Int64
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perChannel {
				for c := p; c < channels; c += producers {
					ch := fmt.Sprintf("c/%d", c)
					id, err := stageOne(ctx, s, storetest.Note(ch, fmt.Sprintf(`{"i":%d}`, i)))
					if err != nil {
						t.Errorf("stage: %v", err)
						return
					}
					mu.Lock()
					committed[ch] = append(committed[ch], id)
					mu.Unlock()
					staged.Add(1)
				}
			}
		})
	}
	storetest.Eventually(t, time.Minute, "a third staged", func() bool { return staged.Load() >= channels*perChannel/3 })
	testenv.Must(t, a.SetPartitions(ctx, 8), "set partitions")
	if err := a.SetPartitions(ctx, 2); !errors.Is(err, outboxfeed.ErrInvalidRequest) {
		t.Fatalf("a second change while the first is in progress: %v, want ErrInvalidRequest", err)
	}
	wg.Wait()
	testenv.Must(t, long.Commit(ctx), "commit the long transaction")
	committed["c/0"] = append(committed["c/0"], longID)

	total := channels*perChannel + 1
	rec.WaitFor(t, 2*time.Minute, "every record", func() bool { return rec.Count() >= total })
	storetest.Eventually(t, time.Minute, "the old partitions retired", func() bool {
		ps, err := a.Partitions(ctx)
		if err != nil {
			return false
		}
		states := map[string]int{}
		for _, p := range ps {
			states[p.State]++
		}
		return states["retired"] == 4 && states["active"] == 8
	})
	for ch, want := range committed {
		got := rec.Channel(fanout.Key{Tenant: "acme", Channel: ch})
		if ch == "c/0" {
			// The long transaction overlapped the others of c/0: its record
			// may come anywhere, the others in commit order.
			var rest []string
			for _, id := range got {
				if id != longID {
					rest = append(rest, id)
				}
			}
			if len(rest) != len(got)-1 {
				t.Fatalf("c/0: the long transaction's record published %d times", len(got)-len(rest))
			}
			got, want = rest, want[:len(want)-1]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("channel %s: published %d records %v, want %d in commit order %v", ch, len(got), got, len(want), want)
		}
	}
	// Records staged from now on go to the new partitions.
	id, err := stageOne(ctx, s, storetest.Note("c/1", `{}`))
	testenv.Must(t, err, "stage after")
	var part int
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT part FROM herald.outbox WHERE id = $1::uuid`, id).Scan(&part), "part")
	if part < 4 || part >= 12 {
		t.Fatalf("a record staged after the change is in partition %d, want one of 4..11", part)
	}
	rec.WaitFor(t, 10*time.Second, "a record staged after the change", func() bool { _, ok := rec.ByID(id); return ok })
}

// TestPostgresRepartitionCompletesWithoutPolls: a Worker of several lanes
// whose lead lane serves every partition (claims of several partitions)
// and none of which polls finishes a change of the partition count with
// the lead lane's claims alone: once the last old partition retired, its
// next claim makes the new ones active, and the records staged after the
// change are published.
func TestPostgresRepartitionCompletesWithoutPolls(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	a, _ := outboxfeed.AdminOf(s)
	rec := storetest.NewRecorder()
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{Lanes: 4, PollInterval: time.Hour, IdleAfter: time.Hour})
	var ids []string
	stageSome := func(from int) {
		for i := range 8 {
			id, err := stageOne(ctx, s, storetest.Note(fmt.Sprintf("c/%d", i), fmt.Sprintf(`{"n":%d}`, from+i)))
			testenv.Must(t, err, "stage")
			ids = append(ids, id)
		}
	}
	stageSome(0)
	rec.WaitFor(t, time.Minute, "the records staged before the change", func() bool { return rec.Count() >= len(ids) })
	testenv.Must(t, a.SetPartitions(ctx, 6), "set partitions")
	stageSome(8)
	published := func() bool {
		for _, id := range ids {
			if _, ok := rec.ByID(id); !ok {
				return false
			}
		}
		return true
	}
	// The Worker does not poll: each record staged wakes the lead lane,
	// whose claims retire the old partitions (each takes two claims after
	// the change) and then make the new ones active.
	poked := time.Now()
	storetest.Eventually(t, time.Minute, "the change finished and every record published", func() bool {
		if published() && oldPartitionsRetired(t, a, 6) {
			return true
		}
		if time.Since(poked) >= 20*time.Millisecond {
			_, err := stageOne(ctx, s, storetest.Note("poke", `{}`))
			testenv.Must(t, err, "stage")
			poked = time.Now()
		}
		return false
	})
}

// oldPartitionsRetired reports whether a change of the partition count
// from 4 has finished: the 4 old partitions retired, the new ones active.
func oldPartitionsRetired(t *testing.T, a outboxfeed.Admin, n int) bool {
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
	s, err := Open(ctx, Config{URL: pg.URL()})
	testenv.Must(t, err, "open store")
	t.Cleanup(func() { _ = s.Close() })
	testenv.Must(t, s.Migrate(ctx), "migrate")
	a, _ := outboxfeed.AdminOf(s)

	// Hold the repartition row, so the change blocks after its first write.
	x, err := s.Pool().Begin(ctx)
	testenv.Must(t, err, "begin X")
	defer func() { _ = x.Rollback(ctx) }()
	_, err = x.Exec(ctx, `SELECT * FROM herald.outbox_repartition FOR UPDATE`)
	testenv.Must(t, err, "lock the repartition row")
	changed := make(chan error, 1)
	go func() { changed <- a.SetPartitions(ctx, 8) }()
	storetest.Eventually(t, 30*time.Second, "the change waiting on the row lock", func() bool {
		var n int
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%outbox_repartition%'`).Scan(&n), "activity")
		return n == 1
	})
	p, pIDs := openStage(t, s, storetest.Note("c/open", `{"producer":"P"}`))
	testenv.Must(t, x.Commit(ctx), "release the change")
	testenv.Must(t, <-changed, "set partitions")

	rec := storetest.NewRecorder()
	w := storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{Lanes: 1, PollInterval: 10 * time.Millisecond})
	qID, err := stageOne(ctx, s, storetest.Note("c/after", `{"staged":"after the change"}`))
	testenv.Must(t, err, "stage after the change")
	// Give the Worker many claims while P is open: none may retire the
	// partition P staged into.
	storetest.Eventually(t, time.Minute, "claims while the producer is open", func() bool {
		return w.Claims(outboxfeed.ClaimEmpty)+w.Claims(outboxfeed.ClaimBatch) >= 50
	})
	testenv.Must(t, p.Commit(ctx), "commit P")
	rec.WaitFor(t, time.Minute, "the record P staged under the old mapping", func() bool { _, ok := rec.ByID(pIDs[0]); return ok })
	rec.WaitFor(t, time.Minute, "the record staged after the change", func() bool { _, ok := rec.ByID(qID); return ok })
	storetest.Eventually(t, time.Minute, "the change finished", func() bool { return oldPartitionsRetired(t, a, 8) })
}

// A dead letter of a partition that a change of the partition count
// retired is delivered when it is replayed.
func TestPostgresReplayAfterRepartition(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	a, _ := outboxfeed.AdminOf(s)
	rec, broken := storetest.FailingRecorder(outboxfeed.Permanent(errors.New("the target refused it")))
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{})
	id := pgStage(t, s, storetest.Note("c/dl", `{}`))[0]
	storetest.EventuallyIn[outboxfeed.DeadLetter](t, 10*time.Second, "the record dead-lettered", s, id)
	testenv.Must(t, a.SetPartitions(ctx, 8), "set partitions")
	storetest.Eventually(t, time.Minute, "the change finished", func() bool { return oldPartitionsRetired(t, a, 8) })
	broken.Store(false)
	res, err := a.Replay(ctx, outboxfeed.ReplayRequest{IDs: []string{id}, Actor: "test", Reason: "the target is fixed"})
	testenv.Must(t, err, "replay")
	if len(res.Replayed) != 1 {
		t.Fatalf("replayed %v, skipped %v", res.Replayed, res.Skipped)
	}
	rec.WaitFor(t, 30*time.Second, "the replayed record", func() bool { _, ok := rec.ByID(id); return ok })
	storetest.EventuallyIn[outboxfeed.Dispatched](t, 10*time.Second, "the replayed record dispatched", s, id)
}

// A partition whose channel holds more than a batch in its retry queue
// (a broker outage) is being retired by a change of the partition count:
// once the broker is back the channel goes out in order, the partition
// retires and the new ones take over.
func TestPostgresRetiringPartitionWithAHeldChannel(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	a, _ := outboxfeed.AdminOf(s)
	rec, down := storetest.FailingRecorder(storetest.ErrBrokerDown)
	const batch = 5
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{BatchSize: batch})
	var held []string
	for range 4 {
		var ns []stage.Notification
		for i := range batch {
			ns = append(ns, storetest.Note("c/held", fmt.Sprintf(`{"i":%d}`, i)))
		}
		held = append(held, pgStage(t, s, ns...)...)
	}
	k := fanout.Key{Tenant: "acme", Channel: "c/held"}
	storetest.Eventually(t, 30*time.Second, "the channel held past a batch", func() bool {
		var n int
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox_retry WHERE channel = $1 AND state = 'pending'`,
			k.Channel).Scan(&n), "count held")
		return n == len(held)
	})
	testenv.Must(t, a.SetPartitions(ctx, 8), "set partitions")
	after := pgStage(t, s, storetest.Note("c/held", `{"after":"the change"}`))
	down.Store(false)
	want := append(held, after...)
	rec.WaitFor(t, time.Minute, "the held channel", func() bool { return len(rec.Channel(k)) >= len(want) })
	if got := rec.Channel(k); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("c/held published %v, want %v", got, want)
	}
	storetest.Eventually(t, time.Minute, "the change finished", func() bool { return oldPartitionsRetired(t, a, 8) })
}
