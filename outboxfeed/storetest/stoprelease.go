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
// it, right after a completion claimed its next batch, or while its
// claim was answered.
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
		stopAfterClaim(t, setup(t), false)
	})
	t.Run("WhileItsClaimWasAnswered", func(t *testing.T) {
		t.Parallel()
		stopAfterClaim(t, setup(t), true)
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
// with once a completion has claimed the next batch (or, with onClaim,
// once a claim has claimed one): the Worker stops with that batch leased
// and not yet dispatched.
type stopOnNext struct {
	outboxfeed.Store
	stop     func()
	onClaim  bool
	once     sync.Once
	returned atomic.Int32
}

func (s *stopOnNext) Claim(ctx context.Context, req outboxfeed.ClaimRequest) (*outboxfeed.Batch, error) {
	b, err := s.Store.Claim(ctx, req)
	if b != nil && s.onClaim {
		s.once.Do(s.stop)
	}
	return b, err
}

func (s *stopOnNext) Complete(ctx context.Context, b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) (bool, *outboxfeed.Batch, error) {
	held, nb, err := s.Store.Complete(ctx, b, out, next)
	if nb != nil && !s.onClaim {
		s.once.Do(s.stop)
	}
	return held, nb, err
}

// ReleaseLeases is the wrapped store's.
func (s *stopOnNext) ReleaseLeases(ctx context.Context, owners []string) (int, error) {
	return s.Store.(outboxfeed.LeaseReleaser).ReleaseLeases(ctx, owners)
}

// ReturnBatches is the wrapped store's; returned counts its calls.
func (s *stopOnNext) ReturnBatches(ctx context.Context, bs []*outboxfeed.Batch) (int, error) {
	n, err := s.Store.(outboxfeed.BatchReturner).ReturnBatches(ctx, bs)
	s.returned.Add(int32(n))
	return n, err
}

// The batch a completion (or, onClaim, a claim) claimed just as the
// Worker stopped was never dispatched: the stop gives it back as it was
// claimed (nothing enters the retry queue), and the next Worker delivers
// its records (and the rest) with no takeover, each once.
func stopAfterClaim(t *testing.T, h *Harness, onClaim bool) {
	if _, ok := h.Store.(outboxfeed.LeaseReleaser); !ok {
		t.Fatalf("%T does not implement outboxfeed.LeaseReleaser", h.Store)
	}
	if _, ok := h.Store.(outboxfeed.BatchReturner); !ok {
		t.Fatalf("%T does not implement outboxfeed.BatchReturner", h.Store)
	}
	var ids []string
	for i := range 10 {
		ids = append(ids, h.Stage(t, true, Note("orders/1", fmt.Sprintf(`{"n":%d}`, i)))...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &stopOnNext{Store: h.Store, stop: cancel, onClaim: onClaim}
	first := NewRecorder()
	// Batches of 2 out of 10 records: the first completion claims the
	// next batch of the same partition.
	w, err := outboxfeed.NewWorker(s, first, outboxfeed.WorkerConfig{
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
	if n := s.returned.Load(); n != 1 {
		t.Fatalf("the stop gave back %d batches, want the one claimed as it came", n)
	}
	if n := h.Queued(t, fanout.Key{Tenant: "acme", Channel: "orders/1"}); n != 0 {
		t.Fatalf("%d records in the retry queue after the stop, want none: the batch goes back as it was claimed", n)
	}
	// Another Worker claims the partition at once, and not as a takeover:
	// no attempt is counted against the records of the batch given back.
	b := ClaimAny(t, h.Store, "next-worker", 100, stopLease)
	if b == nil {
		t.Fatal("the partition stayed leased to the stopped Worker")
	}
	if b.Takeover || b.Takeovers != 0 {
		t.Fatalf("the next claim is a takeover (Takeover %v, Takeovers %d), want a plain claim", b.Takeover, b.Takeovers)
	}
	var rest []string
	for _, id := range ids {
		if _, done := StateOf(t, h.Store, id).(outboxfeed.Dispatched); !done {
			rest = append(rest, id)
		}
	}
	if fmt.Sprint(BatchIDs(b)) != fmt.Sprint(rest) {
		t.Fatalf("next claim %v, want every record not dispatched, %v", BatchIDs(b), rest)
	}
	for _, r := range b.Records {
		if r.Attempt != 0 {
			t.Fatalf("record %s claimed with attempt %d, want 0", r.ID, r.Attempt)
		}
	}
	// The claim is given back too (no attempt made), and a Worker
	// delivers what the first did not, each record once in all.
	if n, err := h.Store.(outboxfeed.BatchReturner).ReturnBatches(context.Background(), []*outboxfeed.Batch{b}); err != nil || n != 1 {
		t.Fatalf("give back the next claim: %d, %v", n, err)
	}
	second := NewRecorder()
	StartWorker(t, h.Store, second, outboxfeed.WorkerConfig{LeaseDuration: stopLease})
	second.WaitFor(t, time.Minute, "the records the first Worker left", func() bool { return Delivered(second, rest) })
	seen := map[string]int{}
	for _, m := range append(first.Messages(), second.Messages()...) {
		seen[m.ID]++
		if m.Fence.Takeover {
			t.Errorf("%s published as a takeover", m.ID)
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("%s published %d times, want once", id, seen[id])
		}
	}
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

// testReturnBatches: a batch given back (BatchReturner) leaves its
// partition as the claim found it. The next claim reads the same records,
// not as a takeover and with no attempt counted; a batch that was itself
// a takeover is taken over next with the count it had, not one more; a
// batch whose partition another owner took over meanwhile, or that was
// given back or completed already, is not given back (its fence or owner
// no longer match), and the lease of that other owner is untouched.
func testReturnBatches(t *testing.T, h *Harness) {
	ctx := context.Background()
	r, ok := h.Store.(outboxfeed.BatchReturner)
	if !ok {
		t.Fatalf("%T does not implement outboxfeed.BatchReturner", h.Store)
	}
	give := func(b *outboxfeed.Batch) int {
		t.Helper()
		n, err := r.ReturnBatches(ctx, []*outboxfeed.Batch{b})
		if err != nil {
			t.Fatalf("return batch of %s at fence %d: %v", b.Owner, b.Fence, err)
		}
		return n
	}
	ids := h.Stage(t, true, Note("orders/1", `{"n":1}`), Note("orders/1", `{"n":2}`), Note("orders/1", `{"n":3}`))

	// A plain claim given back: the next one is plain too, and the same.
	a := ClaimAny(t, h.Store, "a", 10, stopLease)
	if a == nil || fmt.Sprint(BatchIDs(a)) != fmt.Sprint(ids) || a.Takeover || a.Takeovers != 0 {
		t.Fatalf("claim of a = %+v, want a plain batch of %v", a, ids)
	}
	if n := give(a); n != 1 {
		t.Fatalf("gave back %d batches, want 1", n)
	}
	if _, ok := StateOf(t, h.Store, ids[0]).(outboxfeed.Pending); !ok {
		t.Fatalf("a record of a batch given back is %#v, want pending", StateOf(t, h.Store, ids[0]))
	}
	b := ClaimAny(t, h.Store, "b", 10, stopLease)
	if b == nil || fmt.Sprint(BatchIDs(b)) != fmt.Sprint(ids) || b.Takeover || b.Takeovers != 0 || b.Fence <= a.Fence {
		t.Fatalf("claim after the give-back = %+v, want a plain batch of %v above fence %d", b, ids, a.Fence)
	}
	for _, rec := range b.Records {
		if rec.Attempt != 0 {
			t.Fatalf("record %s claimed with attempt %d after a give-back, want 0", rec.ID, rec.Attempt)
		}
	}
	// a's fence is gone: giving a back again touches nothing, and b's
	// lease holds.
	if n := give(a); n != 0 {
		t.Fatalf("a batch whose partition was claimed again was given back (%d)", n)
	}
	if c := ClaimAny(t, h.Store, "c", 10, stopLease); c != nil {
		t.Fatalf("b's lease was lost to c (%+v) after a stale give-back", c)
	}

	// A takeover given back is taken over next with the count it had, not
	// one more. b is given back; dead claims with a short lease and
	// vanishes, taker takes its batch over once the lease ran out.
	if n := give(b); n != 1 {
		t.Fatalf("gave back %d batches, want 1", n)
	}
	const short = 20 * time.Millisecond
	dead := ClaimAny(t, h.Store, "dead", 10, short)
	if dead == nil || dead.Takeovers != 0 {
		t.Fatalf("claim of dead = %+v, want a plain batch", dead)
	}
	var tk *outboxfeed.Batch
	Eventually(t, time.Minute, "the dead holder's partition taken over", func() bool {
		tk = ClaimAny(t, h.Store, "taker", 10, stopLease)
		return tk != nil
	})
	if !tk.Takeover || tk.Takeovers != 1 {
		t.Fatalf("claim after an expiry = %+v, want a takeover (1)", tk)
	}
	if n := give(tk); n != 1 {
		t.Fatalf("gave back %d takeover batches, want 1", n)
	}
	next := ClaimAny(t, h.Store, "next", 10, stopLease)
	if next == nil || !next.Takeover || next.Takeovers != 1 || next.Fence <= tk.Fence {
		t.Fatalf("claim after a takeover was given back = %+v, want the same takeover (Takeovers 1) above fence %d", next, tk.Fence)
	}
	if got := BatchIDs(next); len(got) == 0 || got[0] != ids[0] {
		t.Fatalf("claim after a takeover was given back reads %v, want it to start at %s", got, ids[0])
	}
	// Completed: the batch cannot be given back any more.
	out := make([]outboxfeed.Outcome, len(next.Records))
	if held, _, err := h.Store.Complete(ctx, next, out, nil); err != nil || !held {
		t.Fatalf("complete: held %v, err %v", held, err)
	}
	if n := give(next); n != 0 {
		t.Fatalf("a completed batch was given back (%d)", n)
	}
	if n := give(tk); n != 0 {
		t.Fatalf("a batch given back twice (%d)", n)
	}
	for _, id := range ids {
		if _, ok := StateOf(t, h.Store, id).(outboxfeed.Dispatched); !ok {
			t.Fatalf("%s is %#v after its completion, want dispatched", id, StateOf(t, h.Store, id))
		}
	}
	if b := ClaimAny(t, h.Store, "last", 10, stopLease); b != nil {
		t.Fatalf("claim after every record was dispatched = %+v, want none", b)
	}
}
