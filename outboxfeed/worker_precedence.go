package outboxfeed

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/internal/wait"
)

// Precedence gives one Worker of a process precedence over others that
// consume the same outbox (docs/handlers.md, "Realtime goes first"): the
// Worker that leads it (WorkerConfig.Leads, the realtime handler's) marks
// it busy while its claims find a backlog; the Workers that yield to it
// (WorkerConfig.YieldsTo, the webhook handlers') wait before each claim
// while it is busy, each wait at most their PollInterval, so they still
// claim a batch per lane at least once every PollInterval and never
// starve. Until the leading Worker's first claim returns, it counts as
// busy: Workers started together (after a restart, with a backlog for
// each) leave the first reads of the backlog to it, their backlog
// statistics included. Batches already claimed are delivered at full
// speed. The zero value is ready to use;
// it is safe for concurrent use.
type Precedence struct {
	busyUntil atomic.Int64 // UnixNano until which the leading Worker counts as busy
	led       atomic.Bool  // the leading Worker's first claim returned
	yields    atomic.Int64 // waits that found it busy, for tests
}

// markBusy says the leading Worker found a backlog now: it counts as busy
// for hold (its IdleAfter) unless it finds one again.
func (p *Precedence) markBusy(now time.Time, hold time.Duration) {
	until := now.Add(hold).UnixNano()
	for {
		old := p.busyUntil.Load()
		if old >= until || p.busyUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// Busy reports whether the leading Worker has a backlog, or has not yet
// claimed.
func (p *Precedence) Busy() bool { return !p.led.Load() || time.Now().UnixNano() < p.busyUntil.Load() }

// Yields is how many times a yielding Worker waited for the leading one.
func (p *Precedence) Yields() int64 { return p.yields.Load() }

// wait waits while the leading Worker is busy, at most max, counting the
// wait in Yields; it reports false when ctx ended.
func (p *Precedence) wait(ctx context.Context, max time.Duration) bool {
	return p.waitCounted(ctx, max, true)
}

// waitCounted is wait, counting a wait that found the leading Worker busy
// in Yields when count says so.
func (p *Precedence) waitCounted(ctx context.Context, max time.Duration, count bool) bool {
	deadline := time.Now().Add(max)
	counted := !count
	for {
		now := time.Now()
		until := time.Unix(0, p.busyUntil.Load())
		if !p.led.Load() {
			until = now.Add(time.Millisecond) // look again soon
		}
		if !now.Before(until) || !now.Before(deadline) {
			return true
		}
		if !counted {
			p.yields.Add(1)
			counted = true
		}
		if !wait.Sleep(ctx, min(until.Sub(now), deadline.Sub(now))) {
			return false
		}
	}
}

// leadClaimed marks the Precedence the Worker leads busy when b shows a
// backlog (records behind it, or a batch as large as a yielding handler's
// default, DefaultHandlerBatchSize, or a full one when the Worker's is
// smaller), for busyHold. The realtime handler's batch (DefaultBatchSize)
// is ten times a handler's: a claim of a few thousand records is a
// backlog the yielding handlers must not claim beside, full or not.
func (w *Worker) leadClaimed(b *Batch) {
	p := w.cfg.Leads
	if p == nil {
		return
	}
	if b != nil && (b.More || len(b.Records) >= min(w.cfg.BatchSize, DefaultHandlerBatchSize)) {
		now := time.Now()
		p.markBusy(now, busyHold(w.cfg.IdleAfter, now, b.leased))
	}
	p.led.Store(true)
}

// busyHold is how long a claim sent at sent that returned a backlog at
// now keeps the leading Worker busy: IdleAfter, plus twice as long as the
// claim took. The lane publishes the batch, then claims again with its
// completion, and that claim takes about as long as this one did: on a
// loaded machine a claim of a full batch can take longer than IdleAfter,
// and a hold of IdleAfter alone lapsed while the leading Worker's next
// claims were still under way, letting the yielding Workers' claims in
// mid-backlog (thousands of webhook deliveries during realtime's drain of
// 50,000 records, in half the drains at a load average of 12 on two
// cores).
func busyHold(idleAfter time.Duration, now, sent time.Time) time.Duration {
	if sent.IsZero() || now.Before(sent) {
		return idleAfter
	}
	return idleAfter + 2*now.Sub(sent)
}

// yielding reports whether the Worker should give way before its next
// claim (the completion then claims nothing: the lane waits, then claims).
func (w *Worker) yielding() bool { return w.cfg.YieldsTo != nil && w.cfg.YieldsTo.Busy() }

// storeRequest is req as the store gets it. A Worker that yields to
// another leaves the store's wake-up trigger to the leading Worker's lead
// lane: it neither arms nor disarms it (its lane keeps the bookkeeping,
// so it waits for wake-ups, or polls, as if it had). Two Workers taking
// turns at one switch would keep it armed much of the time while records
// flow, and every producer's commit would then send a NOTIFY and queue
// on PostgreSQL's notify lock.
func (w *Worker) storeRequest(req ClaimRequest) ClaimRequest {
	if w.cfg.YieldsTo != nil {
		req.Arm, req.Disarm = 0, false
	}
	return req
}

// yieldTurn waits, before a claim, while the Worker this one yields to
// has a backlog, at most PollInterval; it reports false when ctx ended.
func (w *Worker) yieldTurn(ctx context.Context) bool {
	if w.cfg.YieldsTo == nil {
		return true
	}
	return w.cfg.YieldsTo.wait(ctx, w.cfg.PollInterval)
}

// yieldStats waits, before the Worker reads its backlog statistics and
// reports what it reads, while the Worker this one yields to has a
// backlog, at most PollInterval (not counted in Yields); it reports false
// when ctx ended. Those reads count the handler's whole backlog: with
// 50,000 records waiting for both handlers, as after a restart, 20–40 ms
// of PostgreSQL's CPU, a tenth of what the leading Worker's drain of them
// costs, taken from it while it drains on a machine with few cores.
func (w *Worker) yieldStats(ctx context.Context) bool {
	if w.cfg.YieldsTo == nil {
		return true
	}
	return w.cfg.YieldsTo.waitCounted(ctx, w.cfg.PollInterval, false)
}
