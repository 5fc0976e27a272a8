package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/prometheus/client_golang/prometheus"
)

// stopLease is the lease of the Workers of testStopReleasesLeases: far
// longer than the test, so a partition another owner can claim is one
// whose lease the stopped Worker gave back.
const stopLease = time.Hour

// A Worker's graceful stop releases its leases: another Worker (another
// owner) claims at once the records the stop gave back and those staged
// afterwards, instead of waiting for the stopped Worker's leases to
// expire. For a Worker stopped idle after delivering, in its first
// publish, in the middle of a batch, while it lingers for its
// ClaimDelay, and, through its parent context as `herald serve` stops
// it, right after a completion claimed its next batch.
func testStopReleasesLeases(t *testing.T, setup func(t *testing.T) *Harness) {
	for _, c := range []struct {
		name string
		cfg  outboxfeed.WorkerConfig
		// hold, when above 0, holds that publish (1: the first) until the
		// Worker stops.
		hold int32
	}{
		{name: "Idle"},
		{name: "FirstPublish", hold: 1},
		{name: "MidPublish", hold: 2},
		{name: "Lingering", cfg: outboxfeed.WorkerConfig{ClaimDelay: stopLease / 8}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			stopReleasesLeases(t, setup(t), c.cfg, c.hold)
		})
	}
	t.Run("AfterCompletionClaimedNext", func(t *testing.T) {
		t.Parallel()
		stopAfterCompletionClaimedNext(t, setup(t))
	})
}

func stopReleasesLeases(t *testing.T, h *Harness, cfg outboxfeed.WorkerConfig, hold int32) {
	rec := NewRecorder()
	entered := make(chan struct{})
	if hold > 0 {
		var calls atomic.Int32
		rec.Before = func(ctx context.Context, _ fanout.Message) error {
			if calls.Add(1) == hold {
				close(entered)
				<-ctx.Done() // cut off by Stop
				return ctx.Err()
			}
			return nil
		}
	}
	cfg.LeaseDuration, cfg.BatchSize = stopLease, 100
	w := StartWorker(t, h.Store, rec, cfg)
	// One transaction, and with a ClaimDelay one channel: a record of
	// another partition, or committed after its partition's claim, could
	// wait for the lingering lane.
	channels := 4
	if cfg.ClaimDelay > 0 {
		channels = 1
	}
	var notes []stage.Notification
	for i := range 4 {
		notes = append(notes, Note(fmt.Sprintf("orders/%d", i%channels), `{"n":1}`))
	}
	ids := h.Stage(t, true, notes...)
	if hold > 0 {
		select {
		case <-entered:
		case <-time.After(time.Minute):
			t.Fatal("the held publish never started")
		}
	} else {
		rec.WaitFor(t, time.Minute, "the records delivered", func() bool { return Delivered(rec, ids) })
	}
	w.Stop()
	// Records of every channel the stopped Worker may have leased.
	for i := range 4 {
		ids = append(ids, h.Stage(t, true, Note(fmt.Sprintf("orders/%d", i), `{"n":2}`))...)
	}
	claimRestAtOnce(t, h, ids)
}

// stopOnNext is a store that cancels the context its Worker was started
// with once a completion has claimed the next batch: the Worker stops
// with that batch leased and not yet dispatched.
type stopOnNext struct {
	outboxfeed.Store
	stop func()
	once sync.Once
}

func (s *stopOnNext) Complete(ctx context.Context, b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) (bool, *outboxfeed.Batch, error) {
	held, nb, err := s.Store.Complete(ctx, b, out, next)
	if nb != nil {
		s.once.Do(s.stop)
	}
	return held, nb, err
}

// ReleaseLeases is the wrapped store's.
func (s *stopOnNext) ReleaseLeases(ctx context.Context, owners []string) (int, error) {
	return s.Store.(outboxfeed.LeaseReleaser).ReleaseLeases(ctx, owners)
}

func stopAfterCompletionClaimedNext(t *testing.T, h *Harness) {
	if _, ok := h.Store.(outboxfeed.LeaseReleaser); !ok {
		t.Fatalf("%T does not implement outboxfeed.LeaseReleaser", h.Store)
	}
	var ids []string
	for i := range 10 {
		ids = append(ids, h.Stage(t, true, Note("orders/1", fmt.Sprintf(`{"n":%d}`, i)))...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &stopOnNext{Store: h.Store, stop: cancel}
	// Batches of 2 out of 10 records: the first completion claims the
	// next batch of the same partition.
	w, err := outboxfeed.NewWorker(s, NewRecorder(), outboxfeed.WorkerConfig{
		Lanes: 1, BatchSize: 2, LeaseDuration: stopLease, PollInterval: 20 * time.Millisecond,
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	w.Stop()
	claimRestAtOnce(t, h, ids)
}

// claimRestAtOnce claims, as another Worker, until it has every record of
// ids that is not dispatched; a partition still leased to the stopped
// Worker yields none of its records.
func claimRestAtOnce(t *testing.T, h *Harness, ids []string) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		if _, done := StateOf(t, h.Store, id).(outboxfeed.Dispatched); !done {
			want[id] = true
		}
	}
	for len(want) > 0 {
		b := ClaimAny(t, h.Store, "next-worker", 100, stopLease)
		if b == nil {
			var left []string
			for id := range want {
				left = append(left, id)
			}
			t.Fatalf("records %v cannot be claimed by another Worker: the stopped Worker kept their partition's lease", left)
		}
		for _, r := range b.Records {
			delete(want, r.ID)
		}
		out := make([]outboxfeed.Outcome, len(b.Records))
		if held, _, err := h.Store.Complete(context.Background(), b, out, nil); err != nil || !held {
			t.Fatalf("complete: held %v, err %v", held, err)
		}
	}
}
