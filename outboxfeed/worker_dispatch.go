package outboxfeed

import (
	"context"
	"errors"
	"fmt"
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
	leaseLost bool  // the broker fenced this lease off: another Worker holds it
	published bool  // at least one publish succeeded
}

// dispatch publishes b's records, channels in parallel (bounded by
// Concurrency) and each channel's records in order, and returns the
// outcome of each record of a prefix of b.Records (all of them, unless
// the batch was taken over before: then only the first Limit>>Takeovers,
// so that a record that kills its Worker is found and, after MaxAttempts
// takeovers, dead-lettered). Publishing starts no record after half the
// lease has passed since claimedAt: the rest is held (no attempt burnt),
// so a slow broker cannot make the batch outlive its lease.
func (w *Worker) dispatch(ctx context.Context, b *Batch, claimedAt time.Time) ([]Outcome, dispatchResult) {
	recs := b.Records
	if b.Takeovers > 0 && len(recs) > 0 {
		if b.Takeovers >= w.cfg.MaxAttempts {
			// Every takeover was an attempt of this record: the store
			// writes Attempt+1.
			recs[0].Attempt = max(recs[0].Attempt, b.Takeovers-1)
			return []Outcome{{Kind: OutcomeDeadLettered, Err: poisonReason(b.Takeovers)}}, dispatchResult{}
		}
		recs = recs[:max(1, len(recs)>>b.Takeovers)]
	}
	out := make([]Outcome, len(recs))
	scope := partitionScope(b.Partition)
	fence := fanout.Fence{Scope: scope, Value: b.Fence, Takeover: b.Takeover}
	stopAt := claimedAt.Add(w.cfg.LeaseDuration / 2)
	groups := groupByChannel(recs, b.Blocked, out)
	var st dispatchState
	workers := min(w.cfg.Concurrency, len(groups))
	run := func() {
		var dl sharedDeadline
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
	return out, st.result()
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
}

func (st *dispatchState) result() dispatchResult {
	st.mu.Lock()
	defer st.mu.Unlock()
	return dispatchResult{brokerErr: st.brokerErr, leaseLost: st.fenced.Load(), published: st.published.Load()}
}

// groupByChannel splits the indexes of recs by channel, keeping their
// order in each group. The records a blocked channel has from the
// position are held at once and belong to no group; its records from the
// retry queue come first in its queue and are published.
func groupByChannel(recs []Record, blocked map[fanout.Key]struct{}, out []Outcome) [][]int {
	index := make(map[fanout.Key]int, 64)
	var groups [][]int
	for i := range recs {
		k := recs[i].Key()
		if _, ok := blocked[k]; ok && recs[i].Queued == 0 {
			out[i] = Outcome{Kind: OutcomeHold}
			continue
		}
		g, ok := index[k]
		if !ok {
			g = len(groups)
			index[k] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// publishChannel publishes one channel's records in order, under
// deadlines from dl, writing each one's outcome. A record that must be
// retried holds back the rest of its channel; a broker outage holds the
// rest and stops every channel.
func (w *Worker) publishChannel(ctx context.Context, recs []Record, group []int, out []Outcome, fence fanout.Fence,
	st *dispatchState, stopAt time.Time, dl *sharedDeadline) {
	hold := func(from int) {
		for _, j := range group[from:] {
			out[j] = Outcome{Kind: OutcomeHold}
		}
	}
	for gi, i := range group {
		r := &recs[i]
		now := time.Now()
		if ctx.Err() != nil || st.down.Load() || st.fenced.Load() || (gi > 0 && now.After(stopAt)) {
			hold(gi)
			return
		}
		msg, err := toMessage(r, w.cfg.Registry)
		if err != nil {
			out[i] = Outcome{Kind: OutcomeDeadLettered, Err: err.Error()}
			continue
		}
		msg.Fence = fence
		_, err = w.pub.Publish(dl.get(ctx, now, w.cfg.PublishTimeout), msg)
		if err == nil {
			out[i] = Outcome{Kind: OutcomeDone}
			st.published.Store(true)
			continue
		}
		dl.stop()
		if ctx.Err() != nil {
			hold(gi)
			return
		}
		if errors.Is(err, fanout.ErrStaleFence) {
			st.fenced.Store(true)
			hold(gi)
			return
		}
		switch classify(err) {
		case failurePermanent:
			out[i] = Outcome{Kind: OutcomeDeadLettered, Err: err.Error()}
		case failureRetry:
			out[i] = w.retryOutcome(r, err)
			hold(gi + 1)
			return
		default:
			st.down.Store(true)
			st.mu.Lock()
			if st.brokerErr == nil {
				st.brokerErr = err
			}
			st.mu.Unlock()
			hold(gi)
			return
		}
	}
}

// retryOutcome is the outcome of a record whose publish failed with a
// retryable error: a retry after backoff, or a dead letter once MaxAttempts
// or MaxAge is reached.
func (w *Worker) retryOutcome(r *Record, err error) Outcome {
	attempt := r.Attempt + 1
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
}

// get returns the context for a publish starting now.
func (d *sharedDeadline) get(parent context.Context, now time.Time, timeout time.Duration) context.Context {
	if d.ctx == nil || now.After(d.renewAt) {
		d.stop()
		d.ctx, d.cancel = context.WithTimeout(parent, timeout)
		d.renewAt = now.Add(timeout / 2)
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
