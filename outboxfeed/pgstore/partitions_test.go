package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/storetest"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
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
