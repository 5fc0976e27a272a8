package outboxfeed

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/outboxfeed/internal/backoff"

	"github.com/heraldgw/herald/fanout"
)

// dispatchResult is what a batch's dispatch met besides its outcomes.
type dispatchResult struct {
	brokerErr error // the broker was unavailable: unpublished records are held
	failure   error // a record failed and will be retried
	leaseLost bool  // the broker fenced this lease off: another Worker holds it
	renewLost bool  // a renewal found the lease lost: another Worker holds it
	published bool  // at least one publish succeeded
	// attemptAt is when the delivery call the target's health is judged
	// by began: the latest that succeeded when one did, else the latest
	// that failed (zero when no call was made). Calls, not claims, order
	// what Workers observe of their target: a claim sent earlier can be
	// answered later, and its delivery be the newer word.
	attemptAt time.Time
	// leaseFrom is when the lease held last began: the claim, or the last
	// renewal (leaseKeeper).
	leaseFrom time.Time
}

// observedAt is when the call the target's health is judged by began
// (attemptAt), or claimedAt for a dispatch that made none.
func (r dispatchResult) observedAt(claimedAt time.Time) time.Time {
	if r.attemptAt.IsZero() {
		return claimedAt
	}
	return r.attemptAt
}

// dispatch publishes b's records, channels in parallel (bounded by
// Concurrency) and each channel's records in order, and returns the
// outcome of each record of a prefix of b.Records (all of them, unless
// the batch was taken over before: then only a prefix, takeoverPrefix,
// so that a record that kills its Worker is found and, after MaxAttempts
// takeovers, dead-lettered). Publishing starts no record but a channel's
// first after startWindow has passed since claimedAt: the rest is held (no
// attempt burnt), so a slow broker cannot hold the batch's records for
// long. Meanwhile the lease is renewed (leaseKeeper).
func (w *Worker) dispatch(ctx context.Context, b *Batch, claimedAt time.Time) ([]Outcome, dispatchResult) {
	recs := b.Records
	if b.Takeovers > 0 && len(recs) > 0 {
		if b.Takeovers >= w.cfg.MaxAttempts {
			// Every takeover was an attempt of this record: the store
			// writes Attempt+1.
			recs[0].Attempt = max(recs[0].Attempt, b.Takeovers-1)
			return []Outcome{{Kind: OutcomeDeadLettered, Err: poisonReason(b.Takeovers)}}, dispatchResult{leaseFrom: claimedAt}
		}
		recs = recs[:takeoverPrefix(len(recs), w.cfg.BatchSize, b.Takeovers, w.cfg.MaxAttempts)]
	}
	out := make([]Outcome, len(recs))
	scope := partitionScope(b.Partition)
	fence := fanout.Fence{Scope: scope, Value: b.Fence, Takeover: b.Takeover}
	stopAt := claimedAt.Add(w.cfg.startWindow())
	w.route(recs, out)
	groups := groupByChannel(recs, b.Blocked, out)
	if len(groups) == 0 {
		return out, dispatchResult{leaseFrom: claimedAt}
	}
	ctx, keeper := w.keepLease(ctx, b, claimedAt)
	var st dispatchState
	workers := min(w.cfg.Concurrency, len(groups))
	run := func() {
		dl := sharedDeadline{keeper: keeper}
		defer dl.stop()
		for {
			i := int(st.next.Add(1)) - 1
			if i >= len(groups) {
				return
			}
			w.publishChannel(ctx, recs, groups[i], out, fence, &st, stopAt, &dl)
		}
	}
	if workers <= 1 {
		run()
	} else {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(run)
		}
		wg.Wait()
	}
	res := st.result()
	res.leaseFrom, res.renewLost = keeper.stop()
	return out, res
}

// takeoverPrefix is how many of a batch's n records a Worker dispatches
// after takeovers consecutive takeovers of its partition: a prefix that
// shrinks with each takeover so that it is one record by the last
// takeover before maxAttempts, whatever batchSize and maxAttempts are.
// The record that killed every holder is then the one dead-lettered,
// never an innocent record ahead of it (halving alone would take
// log2(batchSize) takeovers: more than maxAttempts when batchSize is
// large or maxAttempts small).
func takeoverPrefix(n, batchSize, takeovers, maxAttempts int) int {
	steps := max(1, maxAttempts-1)              // takeovers that may still shrink it
	bits := bits.Len(uint(max(1, batchSize-1))) // shifts that take batchSize to 1
	shift := min(bits, (takeovers*bits+steps-1)/steps)
	return max(1, min(n, batchSize>>shift))
}

// route passes over the records the Worker's handler is not routed: they
// are done for it, with nothing written (Outcome.Passed). A record no
// handler at all is routed is counted and logged.
func (w *Worker) route(recs []Record, out []Outcome) {
	if w.cfg.Routes.All() {
		return
	}
	for i := range recs {
		r := &recs[i]
		if w.cfg.Routes.Match(r) {
			continue
		}
		out[i] = Outcome{Kind: OutcomeDone, Passed: true}
		if w.cfg.RoutedElsewhere != nil && !w.cfg.RoutedElsewhere(r) {
			w.m.unrouted.Inc()
			if ok, suppressed := w.limit.Allow("unrouted"); ok {
				w.log.Warn("outbox record routed to no handler", "id", r.ID, "tenant", r.TenantID, "channel", r.Channel,
					"kind", r.Kind, "type", r.Type, "suppressed", suppressed)
			}
		}
	}
}

// partitionScope is the fence scope of partition part (fanout.Fence).
func partitionScope(part int) string { return "outbox/p" + strconv.Itoa(part) }

// dispatchState is shared by a dispatch's goroutines.
type dispatchState struct {
	next      atomic.Int64 // the next group to publish
	down      atomic.Bool  // the broker is down: publish nothing more
	fenced    atomic.Bool  // the broker fenced the lease off
	published atomic.Bool
	mu        sync.Mutex
	brokerErr error
	failure   error     // a record's retryable failure (the target's health)
	okAt      time.Time // when the latest successful call began
	failAt    time.Time // when the latest failed call began
}

// attempted notes a delivery call that began at and succeeded or not.
func (st *dispatchState) attempted(at time.Time, ok bool) {
	st.mu.Lock()
	if ok && at.After(st.okAt) {
		st.okAt = at
	}
	if !ok && at.After(st.failAt) {
		st.failAt = at
	}
	st.mu.Unlock()
}

func (st *dispatchState) noteFailure(err error) {
	st.mu.Lock()
	if st.failure == nil {
		st.failure = err
	}
	st.mu.Unlock()
}

func (st *dispatchState) result() dispatchResult {
	st.mu.Lock()
	defer st.mu.Unlock()
	res := dispatchResult{brokerErr: st.brokerErr, failure: st.failure, leaseLost: st.fenced.Load(), published: st.published.Load()}
	res.attemptAt = st.failAt
	if res.published {
		res.attemptAt = st.okAt
	}
	return res
}

// groupByChannel splits the indexes of recs by channel, keeping their
// order in each group. The records a blocked channel has from the
// position are held at once and belong to no group; its records from the
// retry queue come first in its queue and are published.
//
// The groups share one array (the indexes of a batch of n records are
// n ints however many channels they spread over): each record's group is
// found first, then the groups are laid out by their sizes.
func groupByChannel(recs []Record, blocked map[fanout.Key]struct{}, out []Outcome) [][]int {
	index := make(map[fanout.Key]int32, min(len(recs), 1024))
	of := make([]int32, len(recs)) // each record's group; -1: none
	var sizes []int
	for i := range recs {
		of[i] = -1
		if out[i].Passed {
			continue
		}
		k := recs[i].Key()
		if _, ok := blocked[k]; ok && recs[i].Queued == 0 {
			out[i] = Outcome{Kind: OutcomeHold}
			continue
		}
		g, ok := index[k]
		if !ok {
			g = int32(len(sizes))
			index[k] = g
			sizes = append(sizes, 0)
		}
		of[i] = g
		sizes[g]++
	}
	if len(sizes) == 0 {
		return nil
	}
	flat := make([]int, 0, len(recs))
	groups := make([][]int, len(sizes))
	for g, n := range sizes {
		groups[g] = flat[len(flat) : len(flat) : len(flat)+n]
		flat = flat[:len(flat)+n]
	}
	for i, g := range of {
		if g >= 0 {
			groups[g] = append(groups[g], i)
		}
	}
	return groups
}

// publishChannel publishes one channel's records in order, under
// deadlines from dl, writing each one's outcome. A record that must be
// retried holds back the rest of its channel; a broker outage holds the
// rest and stops every channel.
func (w *Worker) publishChannel(ctx context.Context, recs []Record, group []int, out []Outcome, fence fanout.Fence,
	st *dispatchState, stopAt time.Time, dl *sharedDeadline) {
	if w.handle != nil {
		w.handleChannel(ctx, recs, group, out, st, dl)
		return
	}
	if rp, ok := w.pub.(fanout.RunPublisher); ok && w.deliver == nil && len(group) > 1 {
		w.publishRun(ctx, rp, recs, group, out, fence, st, stopAt, dl)
		return
	}
	// The channel's successes are told to st once, at the end: its
	// calls are in order, so the last one is the latest (a lock and a
	// shared write per record cost the parallel goroutines more).
	var okAt time.Time
	defer func() {
		if !okAt.IsZero() {
			st.attempted(okAt, true)
			st.published.Store(true)
		}
	}()
	for gi, i := range group {
		r := &recs[i]
		now := time.Now()
		if ctx.Err() != nil || st.down.Load() || st.fenced.Load() || (gi > 0 && now.After(stopAt)) {
			hold(out, group[gi:])
			return
		}
		msg, err := toMessage(r, w.cfg.Registry)
		if err != nil {
			out[i] = Outcome{Kind: OutcomeDeadLettered, Err: err.Error()}
			continue
		}
		pctx := dl.get(ctx, now, w.cfg.PublishTimeout)
		if w.deliver != nil {
			err = w.deliver.Deliver(pctx, r)
		} else {
			msg.Fence = fence
			_, err = w.pub.Publish(pctx, msg)
		}
		if err == nil {
			out[i] = Outcome{Kind: OutcomeDone}
			okAt = now
			continue
		}
		st.attempted(now, false)
		dl.stop()
		if !w.failed(ctx, r, err, out, group, gi, st) {
			return
		}
	}
}

// publishRun publishes one channel's records as one run (the broker is a
// fanout.RunPublisher), so that each subscriber gets them in one write:
// each record as publishChannel would publish it, a record that cannot be
// read dead-lettered and left out of the run. The broker stops the run at
// the first record that fails; that record's failure is handled as
// publishChannel handles it, which holds back or goes on with the rest.
func (w *Worker) publishRun(ctx context.Context, rp fanout.RunPublisher, recs []Record, group []int, out []Outcome, fence fanout.Fence,
	st *dispatchState, stopAt time.Time, dl *sharedDeadline) {
	if ctx.Err() != nil || st.down.Load() || st.fenced.Load() {
		hold(out, group)
		return
	}
	msgs := make([]fanout.Message, 0, len(group))
	valid := make([]int, 0, len(group))
	for _, i := range group {
		msg, err := toMessage(&recs[i], w.cfg.Registry)
		if err != nil {
			out[i] = Outcome{Kind: OutcomeDeadLettered, Err: err.Error()}
			continue
		}
		msg.Fence = fence
		msgs = append(msgs, msg)
		valid = append(valid, i)
	}
	if len(msgs) == 0 {
		return
	}
	pubs := make([]fanout.Publication, len(msgs))
	began := time.Now()
	n, err := rp.PublishRun(dl.get(ctx, began, w.cfg.PublishTimeout), msgs, pubs)
	if n > 0 {
		st.attempted(began, true)
	}
	if err != nil {
		st.attempted(began, false)
	}
	for _, i := range valid[:n] {
		out[i] = Outcome{Kind: OutcomeDone}
		st.published.Store(true)
	}
	if err == nil || n >= len(valid) {
		return
	}
	dl.stop()
	if !w.failed(ctx, &recs[valid[n]], err, out, valid, n, st) || n+1 == len(valid) {
		return
	}
	// A permanent failure dead-lettered that record: the rest of the run
	// was not tried, and goes on as publishChannel would go on.
	w.publishChannel(ctx, recs, valid[n+1:], out, fence, st, stopAt, dl)
}

// handleChannel hands one channel's records to the Go handler at once
// and writes each one's outcome (see Handler).
func (w *Worker) handleChannel(ctx context.Context, recs []Record, group []int, out []Outcome, st *dispatchState, dl *sharedDeadline) {
	if ctx.Err() != nil || st.down.Load() {
		hold(out, group)
		return
	}
	valid := group[:0:0]
	batch := make([]Record, 0, len(group))
	for _, i := range group {
		if _, err := toMessage(&recs[i], w.cfg.Registry); err != nil {
			out[i] = Outcome{Kind: OutcomeDeadLettered, Err: err.Error()}
			continue
		}
		valid = append(valid, i)
		batch = append(batch, recs[i])
	}
	if len(batch) == 0 {
		return
	}
	began := time.Now()
	errs := w.handle.Handle(dl.get(ctx, began, w.cfg.PublishTimeout), batch)
	dl.stop()
	for _, err := range errs {
		st.attempted(began, err == nil)
	}
	if len(errs) != len(batch) {
		st.attempted(began, false)
	}
	if len(errs) != len(batch) {
		err := fmt.Errorf("outboxfeed: handler returned %d results for %d records", len(errs), len(batch))
		w.failed(ctx, &recs[valid[0]], err, out, valid, 0, st)
		return
	}
	for gi, i := range valid {
		if errs[gi] == nil {
			out[i] = Outcome{Kind: OutcomeDone}
			st.published.Store(true)
			continue
		}
		if !w.failed(ctx, &recs[i], errs[gi], out, valid, gi, st) {
			return
		}
	}
}

// hold gives the records at idx OutcomeHold.
func hold(out []Outcome, idx []int) {
	for _, j := range idx {
		out[j] = Outcome{Kind: OutcomeHold}
	}
}

// failed writes the outcome of group[gi], whose delivery failed with err,
// and of the rest of its channel, and reports whether the channel goes on
// (a permanent failure only dead-letters the record).
func (w *Worker) failed(ctx context.Context, r *Record, err error, out []Outcome, group []int, gi int, st *dispatchState) bool {
	i := group[gi]
	if ctx.Err() != nil {
		hold(out, group[gi:])
		return false
	}
	if errors.Is(err, fanout.ErrStaleFence) {
		st.fenced.Store(true)
		hold(out, group[gi:])
		return false
	}
	switch classify(err) {
	case failurePermanent:
		out[i] = Outcome{Kind: OutcomeDeadLettered, Err: err.Error()}
		return true
	case failureRetry:
		out[i] = w.retryOutcome(r, err)
		hold(out, group[gi+1:])
		st.noteFailure(err)
		return false
	default: // an outage, or the target is gone: every channel stops
		st.down.Store(true)
		st.mu.Lock()
		if st.brokerErr == nil {
			st.brokerErr = err
		}
		st.mu.Unlock()
		hold(out, group[gi:])
		return false
	}
}

// retryOutcome is the outcome of a record whose publish failed with a
// retryable error: a retry after backoff, or a dead letter once MaxAttempts
// or MaxAge is reached.
func (w *Worker) retryOutcome(r *Record, err error) Outcome {
	attempt := r.Attempt + 1
	if w.cfg.Schedule != nil {
		d, ok := w.cfg.Schedule.Retry(attempt, time.Since(r.OccurredAt), retryAfter(err))
		if !ok {
			return Outcome{Kind: OutcomeDeadLettered, Err: fmt.Sprintf("gave up after %d attempts: %v", attempt, err)}
		}
		return Outcome{Kind: OutcomeRetryLater, Err: err.Error(), Delay: d}
	}
	switch {
	case attempt >= w.cfg.MaxAttempts:
		return Outcome{Kind: OutcomeDeadLettered, Err: fmt.Sprintf("gave up after %d attempts: %v", attempt, err)}
	case w.cfg.MaxAge > 0 && time.Since(r.OccurredAt) > w.cfg.MaxAge:
		return Outcome{Kind: OutcomeDeadLettered, Err: fmt.Sprintf("gave up after %d attempts, older than %v: %v", attempt, w.cfg.MaxAge, err)}
	}
	return Outcome{Kind: OutcomeRetryLater, Err: err.Error(), Delay: backoff.Retry(attempt, w.cfg.RetryBaseDelay, w.cfg.RetryMaxDelay)}
}

// sharedDeadline is a publish deadline shared by the successive publishes
// of one of dispatch's goroutines and renewed once less than half of the
// timeout is left: a timer per record would cost a quarter of the
// publishing. Every call is thus given between half of the timeout and all
// of it.
type sharedDeadline struct {
	ctx     context.Context
	cancel  context.CancelFunc
	renewAt time.Time
	keeper  *leaseKeeper // told of each deadline (nil: none)
}

// get returns the context for a publish starting now.
func (d *sharedDeadline) get(parent context.Context, now time.Time, timeout time.Duration) context.Context {
	if d.ctx == nil || now.After(d.renewAt) {
		d.stop()
		d.ctx, d.cancel = context.WithTimeout(parent, timeout)
		d.renewAt = now.Add(timeout / 2)
		d.keeper.busy(now.Add(timeout))
	}
	return d.ctx
}

// stop releases the deadline; the next get makes a new one.
func (d *sharedDeadline) stop() {
	if d.cancel != nil {
		d.cancel()
	}
	d.ctx, d.cancel = nil, nil
}
