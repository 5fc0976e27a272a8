package outboxfeed

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// leaseKeeper renews the lease of one batch while its deliveries run
// (Store.Renew), every LeaseDuration/3, so that a batch whose deliveries
// take longer than the lease (a webhook's requests) keeps its partition
// while a Worker that died loses it within one lease.
//
// It renews only while a delivery of the batch may still be running
// within its PublishTimeout: a delivery that ignores its deadline (a
// process frozen, a Deliverer stuck) no longer keeps the lease, which then
// runs out and is taken over as before. When a renewal finds the lease
// lost (another Worker took the partition over), the batch's context is
// cancelled: the deliveries under way stop, and the batch is not
// completed.
type leaseKeeper struct {
	w      *Worker
	b      *Batch
	cancel context.CancelFunc // the batch's deliveries
	every  time.Duration

	// busyUntil (Unix ns) is the latest deadline of a delivery started:
	// past it, nothing the batch legitimately runs needs the lease renewed.
	busyUntil atomic.Int64
	// from (Unix ns) is when the lease last began: the claim, or the
	// sending of the last renewal that succeeded.
	from atomic.Int64
	lost atomic.Bool

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	rctx    context.Context // the renewals' context, cancelled by stop
	rcancel context.CancelFunc
	running sync.WaitGroup
}

// keepLease starts renewing b's lease, which began at claimedAt, and
// returns the context the batch's deliveries run under; stop ends the
// renewals.
func (w *Worker) keepLease(ctx context.Context, b *Batch, claimedAt time.Time) (context.Context, *leaseKeeper) {
	dctx, cancel := context.WithCancel(ctx)
	k := &leaseKeeper{w: w, b: b, cancel: cancel, every: max(w.cfg.LeaseDuration/3, time.Microsecond)}
	k.from.Store(claimedAt.UnixNano())
	k.busyUntil.Store(claimedAt.Add(w.cfg.PublishTimeout).UnixNano())
	k.mu.Lock() // renew sets the timer again under mu
	k.timer = time.AfterFunc(k.every, k.renew)
	k.mu.Unlock()
	return dctx, k
}

// busy notes a delivery that may run until deadline.
func (k *leaseKeeper) busy(deadline time.Time) {
	if k == nil {
		return
	}
	d := deadline.UnixNano()
	for {
		cur := k.busyUntil.Load()
		if d <= cur || k.busyUntil.CompareAndSwap(cur, d) {
			return
		}
	}
}

// renew runs on the timer: one renewal, then the timer is set again.
func (k *leaseKeeper) renew() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	if k.rctx == nil {
		k.rctx, k.rcancel = context.WithCancel(context.Background())
	}
	k.running.Add(1)
	k.mu.Unlock()
	defer k.running.Done()

	sent := time.Now()
	// Only while a delivery under way is within its deadline: one that
	// overran it renews nothing, and the lease runs out unless another
	// delivery starts.
	if sent.UnixNano() <= k.busyUntil.Load() && !k.renewOnce(sent) {
		return // lost: no more renewals
	}
	k.mu.Lock()
	if !k.stopped {
		k.timer.Reset(max(0, k.every-time.Since(sent))) // every third of a lease, however long the call took
	}
	k.mu.Unlock()
}

// renewOnce renews the lease, sent at sent; it reports false when the
// lease was lost (the batch's deliveries are then cancelled).
func (k *leaseKeeper) renewOnce(sent time.Time) bool {
	rctx, cancel := context.WithTimeout(k.rctx, k.w.cfg.LeaseDuration)
	err := k.w.store.Renew(rctx, k.b, k.w.cfg.LeaseDuration)
	cancel()
	switch {
	case err == nil:
		k.from.Store(sent.UnixNano())
	case errors.Is(err, ErrLeaseLost):
		k.lost.Store(true)
		k.cancel()
		return false
	case k.rctx.Err() == nil:
		// The store did not answer: try again at the next tick; the
		// completion settles the batch whatever happens meanwhile.
		if ok, suppressed := k.w.limit.Allow("renew"); ok {
			k.w.log.Warn("outbox lease renewal failed; retrying", "partition", k.b.Partition, "err", err, "suppressed", suppressed)
		}
	}
	return true
}

// stop ends the renewals (a renewal under way is cancelled and waited
// for) and reports when the lease last began and whether a renewal found
// it lost.
func (k *leaseKeeper) stop() (from time.Time, lost bool) {
	k.mu.Lock()
	k.stopped = true
	k.timer.Stop()
	if k.rcancel != nil {
		k.rcancel()
	}
	k.mu.Unlock()
	k.running.Wait()
	k.cancel()
	return time.Unix(0, k.from.Load()), k.lost.Load()
}
