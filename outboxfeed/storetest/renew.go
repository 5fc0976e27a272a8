package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
)

// testLeaseRenewal checks Store.Renew and the Worker's renewal of the
// lease of a batch whose deliveries are under way, each case on a fresh
// store.
func testLeaseRenewal(t *testing.T, setup func(t *testing.T) *Harness) {
	runParallel(t, []namedCase[func(t *testing.T, h *Harness)]{
		{"RenewExtendsTheLease", testRenewExtends},
		{"RenewAfterTakeoverIsLost", testRenewAfterTakeover},
		{"LongDeliveriesKeepTheLease", testLongDeliveriesKeepLease},
		{"CrashedWorkerTakenOverWithinOneLease", testCrashedWorkerTakenOver},
		{"LostRenewalCancelsDeliveries", testLostRenewalCancels},
	}, func(t *testing.T, fn func(t *testing.T, h *Harness)) {
		fn(t, setup(t))
	})
}

// processing is the Processing state of record id, failing the test when
// it is in another.
func processing(t *testing.T, s outboxfeed.Store, id, when string) outboxfeed.Processing {
	t.Helper()
	p, ok := StateOf(t, s, id).(outboxfeed.Processing)
	if !ok {
		t.Fatalf("%s: %s = %#v, want processing", when, id, StateOf(t, s, id))
	}
	return p
}

// sameLease reports whether two readings of a record's claim show the
// same lease.
func sameLease(a, b outboxfeed.Processing) bool {
	return a.LeaseOwner == b.LeaseOwner && a.Fence == b.Fence && a.Attempt == b.Attempt && a.LeaseExpiresAt.Equal(b.LeaseExpiresAt)
}

// A renewal under the batch's owner and fence moves the lease's expiry to
// the lease from now, never earlier, and leaves owner and fence as they
// are; under another owner or fence, or after the completion, it is
// refused with ErrLeaseLost and changes nothing. A lease that expired
// with nobody taking it over is still its owner's, and is renewed.
func testRenewExtends(t *testing.T, h *Harness) {
	ctx := context.Background()
	ids := h.Stage(t, true, Note("orders/1", `{"n":1}`), Note("orders/1", `{"n":2}`))
	b := ClaimAny(t, h.Store, "holder", 10, time.Minute)
	if b == nil || len(b.Records) != 2 {
		t.Fatalf("claim = %+v, want both records", b)
	}
	before := processing(t, h.Store, ids[0], "after the claim")
	if err := h.Store.Renew(ctx, b, time.Hour); err != nil {
		t.Fatalf("renew under the claim's owner and fence: %v", err)
	}
	renewed := processing(t, h.Store, ids[0], "after the renewal")
	if renewed.LeaseOwner != "holder" || renewed.Fence != b.Fence || renewed.Fence != before.Fence {
		t.Fatalf("renewed lease = %+v, want holder's at fence %d", renewed, b.Fence)
	}
	if got := renewed.LeaseExpiresAt.Sub(before.LeaseExpiresAt); got < 58*time.Minute {
		t.Fatalf("the renewal for an hour moved the expiry from %v to %v (by %v), want about 59m later",
			before.LeaseExpiresAt, renewed.LeaseExpiresAt, got)
	}
	if err := h.Store.Renew(ctx, b, time.Second); err != nil {
		t.Fatalf("a shorter renewal: %v", err)
	}
	if got := processing(t, h.Store, ids[0], "after a shorter renewal").LeaseExpiresAt; got.Before(renewed.LeaseExpiresAt) {
		t.Fatalf("a renewal for a second brought the expiry forward from %v to %v", renewed.LeaseExpiresAt, got)
	}
	for name, late := range map[string]outboxfeed.Batch{
		"older fence": func() outboxfeed.Batch { c := *b; c.Fence--; return c }(),
		"newer fence": func() outboxfeed.Batch { c := *b; c.Fence++; return c }(),
		"wrong owner": func() outboxfeed.Batch { c := *b; c.Owner = "intruder"; return c }(),
	} {
		if err := h.Store.Renew(ctx, &late, 2*time.Hour); !errors.Is(err, outboxfeed.ErrLeaseLost) {
			t.Fatalf("%s: renew = %v, want ErrLeaseLost", name, err)
		}
		if p := processing(t, h.Store, ids[0], name); !sameLease(p, renewed) {
			t.Fatalf("%s: a refused renewal changed the lease from %+v to %+v", name, renewed, p)
		}
	}
	held, _, err := h.Store.Complete(ctx, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeDone}}, nil)
	if !held || err != nil {
		t.Fatalf("complete after the renewals = %v, %v", held, err)
	}
	if err := h.Store.Renew(ctx, b, time.Hour); !errors.Is(err, outboxfeed.ErrLeaseLost) {
		t.Fatalf("renew after the completion = %v, want ErrLeaseLost", err)
	}
	for _, id := range ids {
		if _, ok := StateOf(t, h.Store, id).(outboxfeed.Dispatched); !ok {
			t.Fatalf("%s = %#v after the completion, want dispatched", id, StateOf(t, h.Store, id))
		}
	}

	// Expired, nobody took it over: still the holder's.
	next := h.Stage(t, true, Note("orders/1", `{"n":3}`))
	b2 := ClaimAny(t, h.Store, "holder", 10, 20*time.Millisecond)
	if b2 == nil || fmt.Sprint(BatchIDs(b2)) != fmt.Sprint(next) {
		t.Fatalf("second claim = %+v, want %v", b2, next)
	}
	EventuallyIn[outboxfeed.Pending](t, 10*time.Second, "the short lease to expire", h.Store, next[0])
	if err := h.Store.Renew(ctx, b2, time.Hour); err != nil {
		t.Fatalf("renew an expired lease nobody took over: %v", err)
	}
	if p := processing(t, h.Store, next[0], "after renewing the expired lease"); p.LeaseOwner != "holder" || p.Fence != b2.Fence {
		t.Fatalf("renewed expired lease = %+v, want holder's at fence %d", p, b2.Fence)
	}
	if b := ClaimAny(t, h.Store, "intruder", 10, time.Hour); b != nil {
		t.Fatalf("the renewed partition was claimed by another owner: %+v", b)
	}
	if held, _, err := h.Store.Complete(ctx, b2, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDone}}, nil); !held || err != nil {
		t.Fatalf("complete after renewing the expired lease = %v, %v", held, err)
	}
}

// A holder whose lease expired and was taken over cannot renew it: the
// renewal reports ErrLeaseLost and changes nothing, and its completion is
// refused too; the new holder renews and completes.
func testRenewAfterTakeover(t *testing.T, h *Harness) {
	ctx := context.Background()
	ids := h.Stage(t, true, Note("orders/1", `{"n":1}`), Note("orders/1", `{"n":2}`))
	old := ClaimAny(t, h.Store, "old", 10, 20*time.Millisecond)
	if old == nil || fmt.Sprint(BatchIDs(old)) != fmt.Sprint(ids) {
		t.Fatalf("old holder's claim = %+v, want %v", old, ids)
	}
	EventuallyIn[outboxfeed.Pending](t, 10*time.Second, "the old holder's lease to expire", h.Store, ids[0])
	taken := ClaimAny(t, h.Store, "new", 10, time.Hour)
	if taken == nil || fmt.Sprint(BatchIDs(taken)) != fmt.Sprint(ids) || !taken.Takeover || taken.Takeovers != 1 || taken.Fence <= old.Fence {
		t.Fatalf("the new holder's claim = %+v, want a takeover of %v above fence %d", taken, ids, old.Fence)
	}
	want := processing(t, h.Store, ids[0], "after the takeover")
	if err := h.Store.Renew(ctx, old, time.Hour); !errors.Is(err, outboxfeed.ErrLeaseLost) {
		t.Fatalf("the old holder's renewal after the takeover = %v, want ErrLeaseLost", err)
	}
	if p := processing(t, h.Store, ids[0], "after the old holder's renewal"); !sameLease(p, want) {
		t.Fatalf("the old holder's refused renewal changed the lease from %+v to %+v", want, p)
	}
	held, nb, err := h.Store.Complete(ctx, old, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeDone}}, nil)
	if held || nb != nil || err != nil {
		t.Fatalf("the old holder's completion = %v, %v, %v; want refused", held, nb, err)
	}
	for _, id := range ids {
		if p := processing(t, h.Store, id, "after the old holder's completion"); p.LeaseOwner != "new" || p.Fence != taken.Fence || p.Attempt != 0 {
			t.Fatalf("%s = %+v, want the new holder's untouched claim at fence %d", id, p, taken.Fence)
		}
	}
	if err := h.Store.Renew(ctx, taken, time.Hour); err != nil {
		t.Fatalf("the new holder's renewal: %v", err)
	}
	if held, _, err := h.Store.Complete(ctx, taken, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeDone}}, nil); !held || err != nil {
		t.Fatalf("the new holder's completion = %v, %v", held, err)
	}
	for _, id := range ids {
		if _, ok := StateOf(t, h.Store, id).(outboxfeed.Dispatched); !ok {
			t.Fatalf("%s = %#v, want dispatched", id, StateOf(t, h.Store, id))
		}
	}
}

// errKilled is what a killed Worker's store calls return.
var errKilled = errors.New("storetest: the Worker's process was killed")

// errCut is what a renewal returns while the test cuts them off.
var errCut = errors.New("storetest: renewals cut off")

// leaseStore is a Worker's store that counts the renewals that succeeded
// and, once killed, answers nothing more, like the store of a process
// that died.
type leaseStore struct {
	outboxfeed.Store
	renewals atomic.Int64
	renewed  chan struct{}
	cut      atomic.Bool  // renewals fail (the store does not answer them)
	mu       sync.RWMutex // held for reading by every call, for writing by kill
	dead     bool
}

func newLeaseStore(s outboxfeed.Store) *leaseStore {
	return &leaseStore{Store: s, renewed: make(chan struct{}, 1)}
}

// call runs fn unless the store was killed; kill waits for the calls
// under way.
func (s *leaseStore) call(fn func() error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.dead {
		return errKilled
	}
	return fn()
}

// kill makes every later call fail, once the calls under way returned.
func (s *leaseStore) kill() {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
}

func (s *leaseStore) Renew(ctx context.Context, b *outboxfeed.Batch, lease time.Duration) error {
	return s.call(func() error {
		if s.cut.Load() {
			return errCut
		}
		err := s.Store.Renew(ctx, b, lease)
		if err == nil {
			s.renewals.Add(1)
			signal(s.renewed)
		}
		return err
	})
}

func (s *leaseStore) Claim(ctx context.Context, req outboxfeed.ClaimRequest) (b *outboxfeed.Batch, err error) {
	err = s.call(func() error { b, err = s.Store.Claim(ctx, req); return err })
	return b, err
}

func (s *leaseStore) Complete(ctx context.Context, b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) (held bool, nb *outboxfeed.Batch, err error) {
	err = s.call(func() error { held, nb, err = s.Store.Complete(ctx, b, out, next); return err })
	return held, nb, err
}

func (s *leaseStore) Stats(ctx context.Context) (st outboxfeed.Stats, err error) {
	err = s.call(func() error { st, err = s.Store.Stats(ctx); return err })
	return st, err
}

func (s *leaseStore) Ping(ctx context.Context) error {
	return s.call(func() error { return s.Store.Ping(ctx) })
}

// waitRenewals blocks until n renewals succeeded.
func (s *leaseStore) waitRenewals(t *testing.T, n int64) {
	t.Helper()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for s.renewals.Load() < n {
		select {
		case <-s.renewed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d renewals of the lease (%d so far)", n, s.renewals.Load())
		}
	}
}

// blocker is a Deliverer whose first delivery blocks until the test
// releases it (honouring its context unless ignoreCtx), and which records
// each record it delivered with the fence of its claim.
type blocker struct {
	ignoreCtx bool
	entered   chan struct{}
	gate      chan struct{}
	cancelled chan struct{} // closed when the blocked delivery's context ended
	once      sync.Once     // releases the gate
	calls     atomic.Int32

	mu     sync.Mutex
	ids    []string
	fences []int64
}

func newBlocker(ignoreCtx bool) *blocker {
	return &blocker{ignoreCtx: ignoreCtx, entered: make(chan struct{}), gate: make(chan struct{}), cancelled: make(chan struct{})}
}

func (d *blocker) release() { d.once.Do(func() { close(d.gate) }) }

func (d *blocker) Deliver(ctx context.Context, r *outboxfeed.Record) error {
	if d.calls.Add(1) == 1 {
		close(d.entered)
		if d.ignoreCtx {
			<-d.gate
		} else {
			select {
			case <-d.gate:
			case <-ctx.Done():
				close(d.cancelled)
				return ctx.Err()
			}
		}
	}
	d.mu.Lock()
	d.ids = append(d.ids, r.ID)
	d.fences = append(d.fences, r.Fence)
	d.mu.Unlock()
	return nil
}

func (d *blocker) delivered() (ids []string, fences []int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.ids...), append([]int64(nil), d.fences...)
}

func (d *blocker) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-d.entered:
	case <-time.After(time.Minute):
		t.Fatal("the worker never started delivering")
	}
}

// renewalLease is the short lease of the Worker cases: correctness, not
// timing, is what they check, so it only needs to be far shorter than the
// deliveries — and long enough for each renewal to land within two thirds
// of it on a busy machine (SQLite under the race detector, with other
// Workers claiming through its one connection).
const renewalLease = time.Second

// quietWorker is cfg with no more store calls than the case needs (one
// lane polling every 100ms, no backlog gauges), so that the renewals do
// not queue behind them for SQLite's one connection.
func quietWorker(cfg outboxfeed.WorkerConfig) outboxfeed.WorkerConfig {
	cfg.PollInterval, cfg.StatsInterval = 100*time.Millisecond, time.Hour
	cfg.Lanes = 1
	return cfg
}

// A Worker whose delivery takes many leases (a webhook request) renews
// its lease while it runs: nobody takes the batch over meanwhile — not
// another Worker polling for expired leases, not a claim of the test — the
// fence stays the claim's, and once the delivery returns the Worker
// completes the batch itself, each record delivered once.
func testLongDeliveriesKeepLease(t *testing.T, h *Harness) {
	ids := h.Stage(t, true, Note("orders/long", `{"n":1}`), Note("orders/long", `{"n":2}`))
	slow := newBlocker(false)
	ls := newLeaseStore(h.Store)
	w := StartDeliveryWorker(t, ls, slow, quietWorker(outboxfeed.WorkerConfig{LeaseDuration: renewalLease, PublishTimeout: time.Minute}))
	t.Cleanup(slow.release) // before the Worker's Stop, even on failure
	slow.waitEntered(t)
	claim := processing(t, h.Store, ids[0], "while the first delivery runs")
	if claim.LeaseOwner != w.Owner() {
		t.Fatalf("the batch is held by %q, want the slow Worker %q", claim.LeaseOwner, w.Owner())
	}
	other := newBlocker(false)
	other.release()
	w2 := StartDeliveryWorker(t, h.Store, other, quietWorker(outboxfeed.WorkerConfig{LeaseDuration: renewalLease}))
	// Renewals come every third of the lease: 9 of them span three leases.
	for n := int64(1); n <= 9; n++ {
		ls.waitRenewals(t, n)
		if b := ClaimAny(t, h.Store, "intruder", 10, time.Hour); b != nil {
			t.Fatalf("after %d renewals the batch was claimed by another owner: %+v", n, b)
		}
		if p := processing(t, h.Store, ids[0], fmt.Sprintf("after %d renewals", n)); p.LeaseOwner != claim.LeaseOwner || p.Fence != claim.Fence {
			t.Fatalf("after %d renewals the lease is %+v, want the claim's: owner %s, fence %d", n, p, claim.LeaseOwner, claim.Fence)
		}
	}
	slow.release()
	for _, id := range ids {
		EventuallyIn[outboxfeed.Dispatched](t, time.Minute, "the slow batch completed", h.Store, id)
		if d := StateOf(t, h.Store, id).(outboxfeed.Dispatched); d.Attempt != 0 {
			t.Fatalf("%s = %+v, want dispatched with no failed attempt", id, d)
		}
	}
	got, fences := slow.delivered()
	if fmt.Sprint(got) != fmt.Sprint(ids) || fences[0] != claim.Fence || fences[1] != claim.Fence {
		t.Fatalf("the slow Worker delivered %v at fences %v, want %v once each at the claim's fence %d", got, fences, ids, claim.Fence)
	}
	if n := other.calls.Load(); n != 0 || w2.Claims(outboxfeed.ClaimBatch) != 0 {
		t.Fatalf("the other Worker made %v claims of a batch and %d deliveries, want none", w2.Claims(outboxfeed.ClaimBatch), n)
	}
	Eventually(t, time.Minute, "two success outcomes", func() bool { return w.Outcomes(outboxfeed.OutcomeSuccess) == 2 })
	if lost := w.Outcomes(outboxfeed.OutcomeLeaseLost); lost != 0 {
		t.Fatalf("%v lease_lost outcomes", lost)
	}
}

// A Worker killed in the middle of a delivery that had kept its lease for
// several leases renews it no more: the lease it holds expires within one
// lease of the kill, and another Worker then takes the batch over and
// delivers it, under a higher fence.
func testCrashedWorkerTakenOver(t *testing.T, h *Harness) {
	ids := h.Stage(t, true, Note("orders/crash", `{"n":1}`))
	hung := newBlocker(true) // a dead process does nothing more
	ls := newLeaseStore(h.Store)
	StartDeliveryWorker(t, ls, hung, quietWorker(outboxfeed.WorkerConfig{LeaseDuration: renewalLease, PublishTimeout: time.Minute,
		ShutdownTimeout: 50 * time.Millisecond}))
	t.Cleanup(hung.release)
	hung.waitEntered(t)
	enteredAt := time.Now()
	claim := processing(t, h.Store, ids[0], "while the delivery runs")
	next := newBlocker(false)
	next.release()
	w2 := StartDeliveryWorker(t, h.Store, next, quietWorker(outboxfeed.WorkerConfig{LeaseDuration: renewalLease}))
	ls.waitRenewals(t, 6) // two leases
	ls.kill()
	killedAt := time.Now()
	if n := next.calls.Load(); n != 0 {
		t.Fatalf("the other Worker delivered %d records before the kill, while the lease was renewed", n)
	}
	p := processing(t, h.Store, ids[0], "right after the kill")
	if p.LeaseOwner != claim.LeaseOwner || p.Fence != claim.Fence {
		t.Fatalf("at the kill the lease is %+v, want the claim's: owner %s, fence %d", p, claim.LeaseOwner, claim.Fence)
	}
	if !p.LeaseExpiresAt.After(enteredAt.Add(renewalLease)) {
		t.Fatalf("the lease expires at %v, not renewed past the claim's %v lease", p.LeaseExpiresAt, renewalLease)
	}
	if p.LeaseExpiresAt.After(killedAt.Add(renewalLease)) {
		t.Fatalf("the lease expires at %v, more than one lease (%v) after the kill at %v", p.LeaseExpiresAt, renewalLease, killedAt)
	}
	EventuallyIn[outboxfeed.Dispatched](t, time.Minute, "the other Worker to take the batch over and deliver it", h.Store, ids[0])
	got, fences := next.delivered()
	if fmt.Sprint(got) != fmt.Sprint(ids) || fences[0] <= claim.Fence {
		t.Fatalf("the other Worker delivered %v at fences %v, want %v once at a fence above the killed one's %d", got, fences, ids, claim.Fence)
	}
	Eventually(t, time.Minute, "the other Worker's success outcome", func() bool { return w2.Outcomes(outboxfeed.OutcomeSuccess) == 1 })
}

// A Worker whose renewals could not reach the store for a whole lease
// finds, at its next renewal, that another owner took the batch over: the
// delivery under way is cancelled, the batch's records are counted
// lease_lost, and the Worker writes nothing — the new holder's claim is
// untouched and completes.
func testLostRenewalCancels(t *testing.T, h *Harness) {
	ctx := context.Background()
	ids := h.Stage(t, true, Note("orders/lost", `{"n":1}`), Note("orders/lost", `{"n":2}`))
	slow := newBlocker(false)
	ls := newLeaseStore(h.Store)
	w := StartDeliveryWorker(t, ls, slow, quietWorker(outboxfeed.WorkerConfig{LeaseDuration: renewalLease, PublishTimeout: time.Minute}))
	t.Cleanup(slow.release)
	slow.waitEntered(t)
	claim := processing(t, h.Store, ids[0], "while the delivery runs")
	ls.waitRenewals(t, 1)
	ls.cut.Store(true)
	EventuallyIn[outboxfeed.Pending](t, time.Minute, "the lease to run out while renewals fail", h.Store, ids[0])
	taken := ClaimAny(t, h.Store, "new", 10, time.Hour)
	if taken == nil || fmt.Sprint(BatchIDs(taken)) != fmt.Sprint(ids) || !taken.Takeover || taken.Fence <= claim.Fence {
		t.Fatalf("the takeover claimed %+v, want %v above fence %d", taken, ids, claim.Fence)
	}
	ls.cut.Store(false)
	select {
	case <-slow.cancelled:
	case <-time.After(time.Minute):
		t.Fatal("the delivery under way was not cancelled once a renewal found the lease lost")
	}
	Eventually(t, time.Minute, "two lease_lost outcomes", func() bool { return w.Outcomes(outboxfeed.OutcomeLeaseLost) == 2 })
	if s, r := w.Outcomes(outboxfeed.OutcomeSuccess), w.Outcomes(outboxfeed.OutcomeRetry); s != 0 || r != 0 {
		t.Fatalf("success %v retry %v, want 0: a Worker that lost its lease completes nothing", s, r)
	}
	if got, _ := slow.delivered(); len(got) != 0 {
		t.Fatalf("the Worker that lost its lease delivered %v", got)
	}
	for _, id := range ids {
		if p := processing(t, h.Store, id, "after the lost renewal"); p.LeaseOwner != "new" || p.Fence != taken.Fence || p.Attempt != 0 {
			t.Fatalf("%s = %+v, want the new holder's untouched claim at fence %d", id, p, taken.Fence)
		}
	}
	if held, _, err := h.Store.Complete(ctx, taken, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeDone}}, nil); !held || err != nil {
		t.Fatalf("the new holder's completion = %v, %v", held, err)
	}
}
