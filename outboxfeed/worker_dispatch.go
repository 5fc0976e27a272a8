package outboxfeed

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// settlement is what one dispatch decided for its records.
type settlement struct {
	done      []*Record // accepted by the broker: complete (with the next claim)
	dead      []failed  // dead-letter now
	retry     []failed  // retry later (or dead-letter when exhausted)
	release   []Lease   // give back untouched
	brokerErr error     // the broker was unavailable
}

type failed struct {
	rec *Record
	err error
}

func (s *settlement) merge(o *settlement) {
	s.done = append(s.done, o.done...)
	s.dead = append(s.dead, o.dead...)
	s.retry = append(s.retry, o.retry...)
	s.release = append(s.release, o.release...)
	if s.brokerErr == nil {
		s.brokerErr = o.brokerErr
	}
}

// dispatch publishes a claimed batch, channels in parallel (bounded by
// Concurrency) and each channel's records in seq order, and returns what
// became of each record. Publishing starts no record after half the lease
// has passed since claimedAt: the rest is released (no attempt burnt) so a
// slow broker cannot make the batch outlive its lease and have records
// that were already delivered taken over and charged an attempt.
func (w *Worker) dispatch(ctx context.Context, recs []Record, claimedAt time.Time) settlement {
	stopAt := claimedAt.Add(w.cfg.LeaseDuration / 2)
	groups := groupByChannel(recs)
	results := make([]settlement, len(groups))
	var down atomic.Bool
	workers := min(w.cfg.Concurrency, len(groups))
	if workers == 1 {
		var dl sharedDeadline
		for i := range groups {
			results[i] = w.publishChannel(ctx, groups[i], &down, stopAt, &dl)
		}
		dl.stop()
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				var dl sharedDeadline
				defer dl.stop()
				for {
					i := int(next.Add(1)) - 1
					if i >= len(groups) {
						return
					}
					results[i] = w.publishChannel(ctx, groups[i], &down, stopAt, &dl)
				}
			})
		}
		wg.Wait()
	}
	var all settlement
	for i := range results {
		all.merge(&results[i])
	}
	return all
}

// groupByChannel splits records by (tenant, channel), keeping seq order
// inside each group.
func groupByChannel(recs []Record) [][]*Record {
	index := make(map[fanout.Key]int, len(recs))
	var groups [][]*Record
	for i := range recs {
		k := fanout.Key{Tenant: recs[i].TenantID, Channel: recs[i].Channel}
		g, ok := index[k]
		if !ok {
			g = len(groups)
			index[k] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], &recs[i])
	}
	return groups
}

func leasesOf(recs []*Record) []Lease {
	out := make([]Lease, len(recs))
	for i, r := range recs {
		out[i] = r.Lease()
	}
	return out
}

// publishChannel publishes one channel's records in order, under
// deadlines from dl. A record that must be retried holds back the rest of
// its channel (released, to keep order); a broker outage releases the rest
// and stops every channel.
func (w *Worker) publishChannel(ctx context.Context, recs []*Record, down *atomic.Bool, stopAt time.Time, dl *sharedDeadline) settlement {
	var s settlement
	for i, r := range recs {
		now := time.Now()
		if ctx.Err() != nil || down.Load() || (i > 0 && now.After(stopAt)) {
			s.release = append(s.release, leasesOf(recs[i:])...)
			return s
		}
		msg, err := toMessage(r, w.cfg.Registry)
		if err != nil {
			s.dead = append(s.dead, failed{r, err})
			continue
		}
		_, err = w.pub.Publish(dl.get(ctx, now, w.cfg.PublishTimeout), msg)
		if err == nil {
			s.done = append(s.done, r)
			continue
		}
		dl.stop()
		if ctx.Err() != nil {
			s.release = append(s.release, leasesOf(recs[i:])...)
			return s
		}
		switch classify(err) {
		case failurePermanent:
			s.dead = append(s.dead, failed{r, err})
		case failureRetry:
			s.retry = append(s.retry, failed{r, err})
			s.release = append(s.release, leasesOf(recs[i+1:])...)
			return s
		default:
			down.Store(true)
			s.brokerErr = err
			s.release = append(s.release, leasesOf(recs[i:])...)
			return s
		}
	}
	return s
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

// settle writes the outcomes other than success — releases, dead letters,
// retries — each under owner and fence. (Successes are completed by the
// caller, with the next claim.) Until a channel's records are all written
// the claim still sees one of them in processing or waiting for its retry,
// so the order of these writes cannot reorder the channel. A write that fails for a
// store error is retried with backoff until the lease would have run out,
// or for at most ShutdownTimeout once the Worker is stopping; what is not
// written then is taken over by the next claim once its lease expires.
func (w *Worker) settle(ctx context.Context, owner string, claimedAt time.Time, s *settlement) {
	if len(s.dead) == 0 && len(s.retry) == 0 && len(s.release) == 0 {
		return
	}
	wctx, cancel := w.settleContext(ctx, claimedAt)
	defer cancel()

	if len(s.release) > 0 {
		var n int
		err := w.persist(wctx, func(c context.Context) (err error) {
			n, err = w.store.Release(c, owner, s.release)
			return err
		})
		if err == nil {
			w.leaseLost("release", len(s.release)-n)
		}
	}
	for _, f := range s.dead {
		w.deadLetter(wctx, owner, f.rec, f.err.Error())
	}
	for _, f := range s.retry {
		attempt := f.rec.Attempt + 1
		switch {
		case attempt >= w.cfg.MaxAttempts:
			w.deadLetter(wctx, owner, f.rec, fmt.Sprintf("gave up after %d attempts: %v", attempt, f.err))
			continue
		case w.cfg.MaxAge > 0 && time.Since(f.rec.OccurredAt) > w.cfg.MaxAge:
			w.deadLetter(wctx, owner, f.rec, fmt.Sprintf("gave up after %d attempts, older than %v: %v", attempt, w.cfg.MaxAge, f.err))
			continue
		}
		delay := retryDelay(attempt, w.cfg.RetryBaseDelay, w.cfg.RetryMaxDelay)
		var ok bool
		err := w.persist(wctx, func(c context.Context) (err error) {
			ok, err = w.store.Retry(c, owner, f.rec.Lease(), delay, f.err.Error())
			return err
		})
		switch {
		case err != nil:
		case ok:
			w.m.retry.Inc()
		default:
			w.leaseLost("retry", 1)
		}
	}
}

func (w *Worker) deadLetter(ctx context.Context, owner string, r *Record, reason string) {
	var ok bool
	err := w.persist(ctx, func(c context.Context) (err error) {
		ok, err = w.store.DeadLetter(c, owner, r.Lease(), reason)
		return err
	})
	switch {
	case err != nil:
	case ok:
		w.m.deadLettered.Inc()
		w.log.Warn("outbox record dead-lettered", "id", r.ID, "tenant", r.TenantID, "channel", r.Channel,
			"type", r.Type, "schema_version", r.SchemaVersion, "reason", reason)
	default:
		w.leaseLost("dead-letter", 1)
	}
}

// leaseLost counts updates the store rejected because another Worker took
// the lease over (owner or fence changed).
func (w *Worker) leaseLost(op string, n int) {
	if n <= 0 {
		return
	}
	w.m.leaseLost.Add(float64(n))
	if ok, suppressed := w.limit.allow("lease_lost"); ok {
		w.log.Warn("lease lost: update rejected, another worker owns the record", "op", op, "records", n, "suppressed", suppressed)
	}
}

// persist runs a store write, retrying store errors with backoff until ctx
// ends; it marks the store unready while failing.
func (w *Worker) persist(ctx context.Context, write func(context.Context) error) error {
	for failures := 1; ; failures++ {
		err := write(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			w.setUnready(err)
			return err
		}
		w.setUnready(err)
		if !sleepCtx(ctx, outageDelay(failures, w.cfg.OutageBaseDelay, w.cfg.OutageMaxDelay)) {
			return err
		}
	}
}

// settleContext outlives ctx (outcomes are written even while stopping) but
// ends at the lease deadline (at least ShutdownTimeout from now) or
// ShutdownTimeout after ctx ends, whichever comes first.
func (w *Worker) settleContext(ctx context.Context, claimedAt time.Time) (context.Context, context.CancelFunc) {
	deadline := claimedAt.Add(w.cfg.LeaseDuration)
	if floor := time.Now().Add(w.cfg.ShutdownTimeout); deadline.Before(floor) {
		deadline = floor
	}
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	var mu sync.Mutex
	var timer *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		timer = time.AfterFunc(w.cfg.ShutdownTimeout, cancel)
		mu.Unlock()
	})
	return wctx, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}
